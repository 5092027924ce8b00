"""A local Kubernetes cluster: a control plane built from source, a kubelet and containerd."""
