"""Fault-injection harness: TFJobs run while the operator, the API server, etcd and the
node's kubelet and containerd are killed, paused and restarted, and every TFJob, pod and
service the API server shows is checked against what the jobs' replicas imply. See
chaos/README.md."""
