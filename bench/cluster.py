"""A fresh control plane for one measurement: API server with an audit log, kwok nodes,
the TFJob CRD, one namespace, and a client identity per actor.

Each actor authenticates with a client certificate of its own user, so the API server
itself tells their requests apart: in its audit log, and in its priority-and-fairness
metrics, where a FlowSchema per user (all mapped to the `exempt` priority level, as
cluster admins are) gives `apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}`.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import yaml

from harness import audit, kwok
from tfjob_localcluster import binaries as binaries_module
from tfjob_localcluster.clusters import Cluster
from tfjob_localcluster.host.procs import ManagedProcess
from tfjob_localcluster.local.controlplane import ControlPlane
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.apiserver.sync import Rest

NAMESPACE = "tfjob-bench"
OPERATOR_USER = "tfjob-bench:operator"
#: The operator's standby (leader election), when the operator phase runs one.
STANDBY_USER = "tfjob-bench:standby"
DRIVER_USER = "tfjob-bench:driver"
FLOOR_USER = "tfjob-bench:floor"
KWOK_USER = "tfjob-bench:kwok"
AUDITED_USERS = (OPERATOR_USER, STANDBY_USER, DRIVER_USER, FLOOR_USER)


class BenchClusterError(RuntimeError):
    pass


def audited_control_plane(state_dir: Path, **kwargs: Any) -> ControlPlane:
    """The local control plane with an audit log of the benchmark's users."""
    policy = state_dir / "audit-policy.yaml"
    state_dir.mkdir(parents=True, exist_ok=True)
    policy.write_text(yaml.safe_dump(audit.policy(AUDITED_USERS)))
    return ControlPlane(
        state_dir,
        extra_args={"kube-apiserver": audit.apiserver_args(policy, audit_log_path(state_dir))},
        **kwargs,
    )


def audit_log_path(state_dir: Path) -> Path:
    return state_dir / "audit.log"


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    etcd: str
    kwok: str

    def as_dict(self) -> dict[str, str]:
        return {"kubernetes": self.kubernetes, "etcd": self.etcd, "kwok": self.kwok}


def versions() -> Versions:
    pinned = binaries_module.read_versions()
    return Versions(
        kubernetes=pinned["KUBERNETES_VERSION"],
        etcd=pinned["ETCD_VERSION"],
        kwok=pinned["KWOK_VERSION"],
    )


def admin_binding(user: str) -> dict[str, Any]:
    name = user.replace(":", "-")
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def flow_schema(user: str) -> dict[str, Any]:
    """Every request of `user` in a flow schema of its own, served like a cluster admin's."""
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": flow_schema_name(user)},
        "spec": {
            "matchingPrecedence": 50,
            "priorityLevelConfiguration": {"name": "exempt"},
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": user}}],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }


def flow_schema_name(user: str) -> str:
    return user.replace(":", "-")


def crds_in(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions in YAML files."""
    return [
        doc
        for path in paths
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]


def collection_paths(crd: dict[str, Any]) -> list[str]:
    """The cluster-wide collection of each served version of a CRD's resource."""
    spec = crd["spec"]
    return [
        f"/apis/{spec['group']}/{version['name']}/{spec['names']['plural']}"
        for version in spec.get("versions") or []
        if version.get("served")
    ]


def served_tfjobs(paths: Iterable[Path], api_version: str) -> bool:
    """Whether one of the CRDs serves `tfjobs` (kind TFJob) at `api_version`."""
    group, _, version = api_version.partition("/")
    return any(f"/apis/{group}/{version}/tfjobs" in collection_paths(crd) for crd in crds_in(paths))


class BenchCluster(Cluster):
    """Control plane, kwok and its nodes, CRDs and the namespace; see the module docstring.
    Its actors reach it as users of their own (`user_kubeconfig`)."""

    def __init__(
        self,
        state_dir: Path,
        *,
        crds: list[Path],
        nodes: int,
        say: Callable[[str], None] = lambda _message: None,
    ) -> None:
        self.state_dir = state_dir
        self.crds = crds
        self.node_count = nodes
        self._say = say
        self.binaries = binaries_module.locate(*binaries_module.CONTROL_PLANE, "kwok")
        self.plane = audited_control_plane(state_dir, binaries=self.binaries)
        self.kubeconfig = self.plane.admin_kubeconfig
        self.kubectl = self.binaries.kubectl
        self.kwok: ManagedProcess | None = None
        self.kubeconfigs: dict[str, Path] = {}
        self.startup_seconds = 0.0

    # --- lifecycle -------------------------------------------------------------------

    def start(self, timeout: float = 180) -> Self:
        began = time.monotonic()
        deadline = began + timeout
        try:
            self.plane.start(timeout)
            rest = self.plane.rest()
            for user in AUDITED_USERS:
                self.kubeconfigs[user] = self.plane.client_kubeconfig(_file_name(user), user)
                rest.create_or_replace(
                    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", admin_binding(user)
                )
                rest.create_or_replace(
                    "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", flow_schema(user)
                )
            self.kwok = kwok.start(self.plane, self.binaries.kwok, self.state_dir, KWOK_USER)
            for index in range(self.node_count):
                rest.create_or_replace("/api/v1/nodes", kwok.node(index))
            self._install_crds(deadline)
            rest.create_or_replace(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            )
            self._wait_ready(rest, deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        self._say(f"cluster ready in {self.startup_seconds:.1f}s ({self.plane.api_url})")
        return self

    def stop(self) -> None:
        if self.kwok is not None:
            self.kwok.stop(grace=5)
            self.kwok = None
        self.plane.stop()

    def check(self) -> None:
        """Raises BenchClusterError if a component (or kwok) has exited."""
        self.plane.check()
        if self.kwok is not None and not self.kwok.running():
            raise BenchClusterError(f"kwok exited; last lines of its log:\n{self.kwok.tail()}")

    # --- what the phases use ------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return str(self.plane.api_url)

    @property
    def audit_log(self) -> Path:
        return audit_log_path(self.plane.state_dir)

    def user_kubeconfig(self, user: str) -> Path:
        return self.kubeconfigs[user]

    def component_pids(self) -> dict[str, int]:
        """Process ids of the control plane components and kwok, by name."""
        pids = {p.name: p.pid for p in self.plane.processes if p.pid is not None}
        if self.kwok is not None and self.kwok.pid is not None:
            pids["kwok"] = self.kwok.pid
        return pids

    def server_metrics(self) -> str:
        text = self.plane.rest().request("GET", "/metrics", timeout=30)
        return str(text)

    # --- details -----------------------------------------------------------------------

    def _install_crds(self, deadline: float) -> None:
        for path in self.crds:
            done = subprocess.run(
                self.kubectl_command(
                    f"--cache-dir={_kubectl_cache()}",
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "-f",
                    str(path),
                ),
                capture_output=True,
                text=True,
                timeout=max(10.0, deadline - time.monotonic()),
                check=False,
            )
            if done.returncode != 0:
                raise BenchClusterError(f"kubectl apply -f {path} failed: {done.stderr.strip()}")

    def _wait_ready(self, rest: Rest, deadline: float) -> None:
        """Until kwok's nodes are schedulable, the CRDs served and the namespace usable.

        A CRD counts once its resources can be listed: right after it is Established, the
        API server still answers 429 ("storage is (re)initializing") while its watch cache
        fills, which an operator started then would pay for in retries.
        """
        collections = [path for crd in crds_in(self.crds) for path in collection_paths(crd)]
        waiting = "nodes"
        while time.monotonic() < deadline:
            self.check()
            try:
                nodes = rest.request("GET", "/api/v1/nodes")["items"]
                ready = [n for n in nodes if kwok.schedulable(n)]
                if len(ready) < self.node_count:
                    waiting = f"nodes ({len(ready)}/{self.node_count} schedulable)"
                elif not all(rest.ok(path) for path in collections):
                    waiting = f"the CRDs' resources listed ({', '.join(collections)})"
                else:
                    waiting = f"the default service account of namespace {NAMESPACE}"
                    rest.request("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")
                    return
            except (ApiError, OSError):
                pass
            time.sleep(0.2)
        raise BenchClusterError(f"the bench cluster was not ready in time: waiting for {waiting}")


def _kubectl_cache() -> str:
    """kubectl's discovery cache: in the project's cache (as `make` sets KUBECACHEDIR), not
    ~/.kube/cache, when the bench runs without make."""
    return os.environ.get("KUBECACHEDIR") or str(binaries_module.cache_root() / "kube")


def _file_name(user: str) -> str:
    return user.replace(":", "-")
