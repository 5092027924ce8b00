"""A local Kubernetes cluster: a control plane built from source, a kubelet and containerd."""

__version__ = "0.1.0"
