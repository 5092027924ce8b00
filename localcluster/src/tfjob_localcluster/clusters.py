"""The one interface of the clusters the project runs, as kind's Provider is of the ways
it runs nodes.

Three clusters implement it: the local cluster (cluster.py: a control plane and a kubelet
with containerd), a kind cluster (kind/cluster.py: kind's nodes in a Docker engine) and the
benchmark's (bench/cluster.py: a control plane and kwok's simulated nodes). Each starts,
says what of it has stopped, is reached through a cluster-admin kubeconfig, and stops
leaving nothing but its state. Harnesses and tests hold a `Cluster` where that is all they
need; what one kind of cluster alone can do (lose its node, exec in a kind node) stays on
its own class.
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Self

from tfjob_localcluster.host.procs import Started


class Cluster(Started):
    #: The cluster-admin kubeconfig, valid between start() and stop().
    kubeconfig: Path
    #: The kubectl of the pinned Kubernetes version.
    kubectl: Path

    @abstractmethod
    def start(self) -> Self:
        """Starts the cluster and returns once it is ready for workloads."""

    @abstractmethod
    def stop(self) -> None:
        """Stops every process of the cluster; nothing of it is left running."""

    @abstractmethod
    def check(self) -> None:
        """Raises, saying what and with its last log lines, if a part has stopped."""

    @abstractmethod
    def user_kubeconfig(self, user: str) -> Path:
        """A kubeconfig that authenticates as `user` with a client certificate of the
        cluster's CA: an identity with no role of its own, to try what a role grants."""

    def kubectl_command(self, *args: str) -> list[str]:
        return [str(self.kubectl), f"--kubeconfig={self.kubeconfig}", *args]
