"""A local Kubernetes cluster: a control plane built from source and a process node."""

__version__ = "0.1.0"
