"""LocalCluster: the control plane and one process node, started and stopped together.

    with LocalCluster(Path("/tmp/my-cluster")) as cluster:
        subprocess.run([cluster.kubectl, "--kubeconfig", cluster.kubeconfig, "get", "nodes"])

Start order: claim a registry slot (pod subnet, network name prefix; sweeps what dead
clusters left), create the bridge, start the control plane with the API server on the
bridge gateway (so pods reach it), create the DNS watcher's RBAC, start the node,
wait until the Node is Ready. Stop runs it backwards and frees the slot.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tfjob_localcluster import binaries as binaries_module
from tfjob_localcluster import network
from tfjob_localcluster.controlplane import KUBELET_CLIENT_USER, ControlPlane, ControlPlaneError
from tfjob_localcluster.node.config import DEFAULT_CAPACITY, NodeConfig
from tfjob_localcluster.node.podspec import DEFAULT_ENTRYPOINTS
from tfjob_localcluster.procs import ManagedProcess, ProcessIdentity
from tfjob_localcluster.registry import Registry, Slot
from tfjob_localcluster.rest import RestError

DNS_USER = "system:tfjob-localcluster:dns"
DEFAULT_NODE_NAME = "process-node"


class ClusterError(RuntimeError):
    pass


def dns_rbac() -> list[tuple[str, dict[str, Any]]]:
    """(collection, object) pairs granting the DNS watcher read access to its sources."""
    name = "tfjob-localcluster:dns"
    role: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch"]},
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["list", "watch"],
            },
        ],
    }
    binding: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": DNS_USER}],
    }
    return [
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", role),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding),
    ]


class LocalCluster:
    """A running local cluster; see the module docstring. Needs root."""

    def __init__(
        self,
        state_dir: Path,
        *,
        node_name: str = DEFAULT_NODE_NAME,
        capacity: Mapping[str, str] | None = None,
        entrypoints: Mapping[str, Sequence[str]] | None = None,
        restart_backoff_initial: float = 10.0,
        restart_backoff_max: float = 10.0,
        registry: Registry | None = None,
        say: Callable[[str], None] = lambda _message: None,
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.node_name = node_name
        self.capacity = {**DEFAULT_CAPACITY, **(capacity or {})}
        self.entrypoints = {k: list(v) for k, v in (entrypoints or DEFAULT_ENTRYPOINTS).items()}
        self.restart_backoff_initial = restart_backoff_initial
        self.restart_backoff_max = restart_backoff_max
        self.registry = registry or Registry()
        self._say = say
        self.binaries = binaries_module.locate()
        self.kubectl: Path = self.binaries.kubectl
        self.kubeconfig: Path = self.state_dir / "admin.kubeconfig"
        self.api_url = ""
        self.slot: Slot | None = None
        self.control_plane: ControlPlane | None = None
        self.node_process: ManagedProcess | None = None
        self.startup_seconds = 0.0

    # --- lifecycle -------------------------------------------------------------------

    def start(self, timeout: float = 180) -> LocalCluster:
        if os.geteuid() != 0:
            raise ClusterError(
                "the local cluster needs root: its node creates network namespaces, veth "
                "pairs, a bridge and mount namespaces for pods"
            )
        begin = time.monotonic()
        deadline = begin + timeout
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # Containers running as another user chdir into their pod's scratch directory
        # below this one: it must be traversable (its secrets are files of mode 0600).
        self.state_dir.chmod(0o711)
        try:
            self.slot = self.registry.claim(self.state_dir)
            net = self.slot.network
            network.create_bridge(net)
            self._say(f"network: bridge {net.bridge}, pods in {net.subnet}")
            self.control_plane = ControlPlane(
                self.state_dir,
                bind_address=str(net.gateway),
                binaries=self.binaries,
                on_spawn=self._record,
                say=self._say,
            )
            self.control_plane.start_api(deadline)
            self.api_url = self.control_plane.api_url
            rest = self.control_plane.rest()
            for collection, obj in dns_rbac():
                rest.create_or_replace(collection, obj)
            # The node's imports take a while: it starts beside the controllers.
            self.node_process = self._start_node(self.control_plane, self.slot)
            self.control_plane.start_controllers(deadline)
            self._wait_ready(self.control_plane, self.node_process, deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - begin
        self._write_info()
        self._say(f"cluster ready in {self.startup_seconds:.1f}s: {self.api_url}")
        return self

    def stop(self) -> None:
        """Stops the node (which stops its pods), the control plane, then frees the slot."""
        if self.node_process is not None:
            self.node_process.stop(grace=30)
            self.node_process = None
        if self.control_plane is not None:
            self.control_plane.stop()
            self.control_plane = None
        if self.slot is not None:
            self.registry.release(self.slot)
            self.slot = None
        (self.state_dir / "cluster.json").unlink(missing_ok=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def check(self) -> None:
        """Raises ClusterError if any component has exited."""
        if self.control_plane is None or self.node_process is None:
            raise ClusterError("the cluster is not running")
        try:
            self.control_plane.check()
        except ControlPlaneError as error:
            raise ClusterError(str(error)) from None
        if not self.node_process.running():
            raise ClusterError(
                f"the process node exited; last lines of {self.node_process.log_path}:\n"
                f"{self.node_process.tail()}"
            )

    # --- details ---------------------------------------------------------------------

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def host_ip(self) -> str:
        if self.slot is None:
            raise ClusterError("the cluster is not running")
        return str(self.slot.network.gateway)

    def kubectl_command(self, *args: str) -> list[str]:
        return [str(self.kubectl), f"--kubeconfig={self.kubeconfig}", *args]

    def _record(self, identity: ProcessIdentity) -> None:
        if self.slot is not None:
            self.registry.record(self.slot.index, identity)

    def _start_node(self, plane: ControlPlane, slot: Slot) -> ManagedProcess:
        net = slot.network
        pki = plane.pki_dir
        node_kubeconfig = plane.client_kubeconfig(
            "node", f"system:node:{self.node_name}", ("system:nodes",)
        )
        dns_kubeconfig = plane.client_kubeconfig("dns", DNS_USER)
        serving = plane.ca.issue(
            pki / "node-serving.crt",
            f"system:node:{self.node_name}",
            dns_names=(self.node_name,),
            ip_addresses=(str(net.gateway),),
            server=True,
        )
        api_port = int(self.api_url.rsplit(":", 1)[1])
        config = NodeConfig(
            node_name=self.node_name,
            state_dir=str(self.state_dir / "node"),
            kubeconfig=str(node_kubeconfig),
            dns_kubeconfig=str(dns_kubeconfig),
            slot=slot.index,
            subnet=str(net.subnet),
            registry_dir=str(self.registry.directory),
            api_host=str(net.gateway),
            api_port=api_port,
            serving_cert=str(serving.cert),
            serving_key=str(serving.key),
            client_ca=str(plane.ca.pair.cert),
            kubelet_client_users=[KUBELET_CLIENT_USER],
            kubelet_version=self.binaries.kubernetes_version,
            capacity=dict(self.capacity),
            entrypoints=self.entrypoints,
            restart_backoff_initial=self.restart_backoff_initial,
            restart_backoff_max=self.restart_backoff_max,
        )
        config_path = config.save(self.state_dir / "node.json")
        process = ManagedProcess(
            "node",
            [sys.executable, "-m", "tfjob_localcluster.node", "--config", str(config_path)],
            self.logs_dir / "node.log",
        )
        self._record(process.start())
        return process

    def _wait_ready(self, plane: ControlPlane, node: ManagedProcess, deadline: float) -> None:
        """Until the Node is Ready and the service account controller is working."""
        rest = plane.rest()
        started = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        while time.monotonic() < deadline:
            self.check()
            try:
                node_object = rest.request("GET", f"/api/v1/nodes/{self.node_name}")
                rest.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            except (RestError, OSError):
                time.sleep(0.2)
                continue
            conditions = node_object.get("status", {}).get("conditions") or []
            # A Node object left from an earlier run (the state dir keeps etcd) is Ready
            # too: only a heartbeat from this start counts.
            if any(
                c["type"] == "Ready"
                and c["status"] == "True"
                and c.get("lastHeartbeatTime", "") >= started
                for c in conditions
            ):
                self._say(f"node {self.node_name} ready")
                return
            time.sleep(0.2)
        raise ClusterError(
            f"node {self.node_name} not Ready in time; last lines of "
            f"{node.log_path}:\n{node.tail()}"
        )

    def _write_info(self) -> None:
        """cluster.json: how to reach this cluster (read by `tfjob-localcluster status`)."""
        info = {
            "api_url": self.api_url,
            "kubeconfig": str(self.kubeconfig),
            "kubectl": str(self.kubectl),
            "node_name": self.node_name,
            "host_ip": self.host_ip,
            "slot": self.slot.index if self.slot else None,
            "startup_seconds": round(self.startup_seconds, 2),
        }
        (self.state_dir / "cluster.json").write_text(json.dumps(info, indent=2))
