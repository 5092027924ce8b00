"""What the benchmark (bench/) and the chaos run (chaos/) both drive a control plane with:
an asyncio client of the API server (apiclient), the operator as a process of its own
(operator_process), kwok's simulated nodes (kwok), the API server's audit log (audit) and
Prometheus' text format (promtext)."""
