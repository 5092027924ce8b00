"""What runs beside a cluster: Kueue, the gang schedulers, and the operator itself,
installed with its chart."""
