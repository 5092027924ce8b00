"""The project's own cluster: a control plane built from source and one node, a kubelet
and containerd in namespaces of their own."""
