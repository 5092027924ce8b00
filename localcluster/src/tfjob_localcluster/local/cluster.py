"""LocalCluster: the control plane and one real node, started and stopped together.

    with LocalCluster(Path("/tmp/my-cluster")) as cluster:
        cluster.load_images([TRAINER])  # tfjob_localcluster.images.catalog
        subprocess.run(cluster.kubectl_command("get", "nodes"))

The node is a kubelet with containerd, runc and the CNI bridge plugin (Debian's packages),
kube-proxy, and a GPU device plugin, running as the processes of their own PID, mount,
network, UTS and IPC namespaces (node/__main__.py), much as a kind node runs in a
container, but without an image: it sees the host's binaries, while everything it
writes, mounts or configures stays in those namespaces or in the state dir.

Start order: the Debian packages the node needs (installed when missing), a
slot (subnets, names, cgroup; sweeps what dead clusters left), the cgroup that will hold
the pods, the veth pair to the node, the control plane with the API server on the host's
end of it, the node, the controllers; then the node's images (pause, CoreDNS) are
imported into its containerd, CoreDNS and the default StorageClass (bootstrap.py) are
deployed, and the launcher waits until the Node is Ready, cluster DNS answers and the
provisioner is ready. Stop runs it backwards.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import tomli_w

from tfjob_localcluster import binaries as binaries_module
from tfjob_localcluster.checkout import RUNTIME_WRAPPER
from tfjob_localcluster.clusters import Cluster
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host import capabilities, cgroups, network, packages
from tfjob_localcluster.host.loopback import LoopbackRelay
from tfjob_localcluster.host.procs import ManagedProcess, ProcessIdentity, children_named
from tfjob_localcluster.host.slots import Slot, Slots
from tfjob_localcluster.images.catalog import (
    BUSYBOX,
    COREDNS,
    LOCAL_PATH_PROVISIONER,
    NODE_IMAGES,
    PAUSE,
    ImageStore,
)
from tfjob_localcluster.local import bootstrap
from tfjob_localcluster.local.controlplane import (
    CLUSTER_DOMAIN,
    KUBELET_CLIENT_USER,
    SERVICE_CIDR,
    ControlPlane,
    ControlPlaneError,
)
from tfjob_localcluster.local.node.config import NodeConfig
from tfjob_localcluster.local.node.files import REGISTRY_HOSTS_DIR, registry_hosts
from tfjob_localcluster.local.noderuntime import NodeRuntime
from tfjob_localcluster.waiting import wait_until
from tfjob_operator.apiserver.errors import ApiError

DEFAULT_NODE_NAME = "tfjob-local-node"
DEFAULT_GPUS = 4
CLUSTER_DNS = str(SERVICE_CIDR.network_address + 10)
NODE_STOP_GRACE = 30.0
REQUIRED_COMMANDS = ("ip", "unshare", "ctr")


class ClusterError(LocalClusterError):
    pass


class LocalCluster(Cluster):
    """A running local cluster; see the module docstring. Needs root."""

    def __init__(
        self,
        state_dir: Path,
        *,
        node_name: str = DEFAULT_NODE_NAME,
        gpus: int = DEFAULT_GPUS,
        slots: Slots | None = None,
        images: ImageStore | None = None,
        say: Callable[[str], None] = lambda _message: None,
        control_plane_args: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """`control_plane_args` appends flags to control-plane components (ControlPlane's
        `extra_args`)."""
        self.state_dir = Path(state_dir).resolve()
        self.node_name = node_name
        self.gpus = gpus
        self.slots = slots or Slots()
        self.images = images or ImageStore(say=say)
        self._say = say
        self.control_plane_args = dict(control_plane_args or {})
        self.binaries = binaries_module.locate(
            *binaries_module.CONTROL_PLANE, *binaries_module.NODE
        )
        self.kubectl: Path = self.binaries.kubectl
        self.kubeconfig: Path = self.state_dir / "admin.kubeconfig"
        self.api_url = ""
        self.slot: Slot | None = None
        self.control_plane: ControlPlane | None = None
        self.node_process: ManagedProcess | None = None
        self.node_init: ProcessIdentity | None = None
        self.runtime: NodeRuntime | None = None
        self.startup_seconds = 0.0
        #: Registries on the host's loopback the node pulls from (use_registry).
        self.relays: list[LoopbackRelay] = []

    # --- lifecycle -------------------------------------------------------------------

    def start(self, timeout: float = 240) -> Self:
        if os.geteuid() != 0:
            raise ClusterError(
                "the local cluster needs root: its node runs in namespaces of its own and "
                "runs containers"
            )
        packages.ensure(packages.NODE, say=self._say)
        missing = [command for command in REQUIRED_COMMANDS if shutil.which(command) is None]
        if missing:
            raise ClusterError(f"commands not found: {', '.join(missing)}")
        begin = time.monotonic()
        deadline = begin + timeout
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)
        try:
            self.slot = self.slots.claim(self.state_dir)
            net = self.slot.network
            cgroups.create(self.slot.cgroup_root)
            network.create_node_link(net)
            self._say(
                f"network: node {net.node_address} via {net.host_link}, pods {net.pod_subnet}"
            )
            self.control_plane = ControlPlane(
                self.state_dir,
                bind_address=str(net.gateway),
                binaries=self.binaries,
                on_spawn=self._record,
                say=self._say,
                extra_args=self.control_plane_args,
            )
            self.control_plane.start_api(deadline)
            self.api_url = self.control_plane.api_url
            rest = self.control_plane.rest()
            for collection, obj in bootstrap.kubelet_api_access(KUBELET_CLIENT_USER):
                rest.create_or_replace(collection, obj)
            since = _heartbeats_from()
            self._start_node(self.control_plane, self.slot, deadline)
            self.control_plane.start_controllers(deadline)
            self.load_images(NODE_IMAGES)
            for collection, obj in [
                *bootstrap.coredns(COREDNS, CLUSTER_DNS, CLUSTER_DOMAIN),
                *bootstrap.local_path_storage(LOCAL_PATH_PROVISIONER, BUSYBOX),
            ]:
                rest.create_or_replace(collection, obj)
            self._wait_ready(deadline, since)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - begin
        self._write_info()
        self._say(f"cluster ready in {self.startup_seconds:.1f}s: {self.api_url}")
        return self

    def stop(self) -> None:
        """Stops the node (and with it every pod), the control plane; frees the slot."""
        for relay in self.relays:
            relay.stop()
        self.relays.clear()
        if self.node_process is not None:
            if self.node_init is not None and self.node_init.alive():
                os.kill(self.node_init.pid, signal.SIGTERM)
                deadline = time.monotonic() + NODE_STOP_GRACE
                while self.node_process.running() and time.monotonic() < deadline:
                    time.sleep(0.1)
            self.node_process.stop(grace=5)
            self.node_process = None
            self.node_init = None
            self.runtime = None
        if self.control_plane is not None:
            self.control_plane.stop()
            self.control_plane = None
        if self.slot is not None:
            self.slots.release(self.slot)
            self.slot = None
        (self.state_dir / "cluster.json").unlink(missing_ok=True)

    def user_kubeconfig(self, user: str) -> Path:
        if self.control_plane is None:
            raise ClusterError("the cluster is not running")
        return self.control_plane.client_kubeconfig(f"user-{user}", user)

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
                f"the node exited; last lines of {self.node_process.log_path}:\n"
                f"{self.node_process.tail()}"
            )

    def restart_node_component(self, name: str, timeout: float = 30) -> None:
        """SIGKILLs one of the node's components (containerd, kubelet, kube-proxy), as a
        crash; returns once the node's init has started it again (node/supervisor.py).
        Containers outlive both containerd and the kubelet. For fault injection (chaos/)."""
        if self.node_init is None or not self.node_init.alive():
            raise ClusterError("the cluster's node is not running")
        running = children_named(self.node_init.pid, name)
        if len(running) != 1:
            raise ClusterError(f"expected one {name} on the node, found {len(running)}")
        old = running[0]
        os.kill(old.pid, signal.SIGKILL)
        init = self.node_init.pid
        wait_until(
            lambda: (now := children_named(init, name)) != [old] and now,
            timeout,
            lambda: ClusterError(
                f"the node did not start {name} again within {timeout:.0f}s; see {self.logs_dir}"
            ),
        )

    def lose_node(self, down_seconds: float, timeout: float = 180) -> None:
        """The node dies with everything on it and boots again `down_seconds` later, as a
        machine that loses its power: its init is SIGKILLed, so the kernel ends every
        process of its PID namespace (kubelet, containerd, the containers) and its mounts
        and network go with its namespaces, and its cgroups are removed, as a reboot
        clears them, while its disk (the state dir) stays. It boots with the same name and
        configuration; returns once the Node is Ready again. For fault injection (chaos/).

        The host's end of the node's veth pair goes with the node's end, and the API server
        listens on the host end's address: that end is made again at once, so that the
        control plane loses the node and nothing else."""
        plane, slot, node = self.control_plane, self.slot, self.node_process
        if plane is None or slot is None or node is None or not node.running():
            raise ClusterError("the cluster's node is not running")
        node.kill()
        self.node_process = self.node_init = self.runtime = None
        wait_until(
            lambda: slot.network.host_link not in network.link_names(),
            timeout,
            lambda: ClusterError(f"{slot.network.host_link} outlived the node's namespace"),
            interval=0.05,
        )
        network.create_node_link(slot.network)
        # A reboot starts with no cgroups: the dead pods' cgroups are host state here, and
        # a kubelet that finds them waits for containers that no runtime knows.
        if left := cgroups.remove(slot.cgroup_root):
            raise ClusterError(f"the lost node's cgroups could not be removed: {left}")
        cgroups.create(slot.cgroup_root)
        time.sleep(down_seconds)
        deadline = time.monotonic() + timeout
        since = _heartbeats_from()
        self._start_node(plane, slot, deadline)
        self._wait_ready(deadline, since)

    def use_registry(self, address: str) -> None:
        """Lets the node pull from the plain-HTTP registry at `address` on the host's
        loopback (127.0.0.1:PORT, images/registry.py), under that same name."""
        if self.node_init is None:
            raise ClusterError("the cluster is not running")
        host, _, port = address.partition(":")
        if host != "127.0.0.1" or not port.isdigit():
            raise ClusterError(f"{address}: only a registry on 127.0.0.1:PORT can be used")
        hosts = self.node_dir / REGISTRY_HOSTS_DIR / address / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(tomli_w.dumps(registry_hosts(address)))
        relay = LoopbackRelay(Path(f"/proc/{self.node_init.pid}/ns/net"), int(port))
        self.relays.append(relay.start())
        self._say(f"the node pulls from the registry on {address}")

    def load_images(self, references: Iterable[str]) -> None:
        """Imports images built by `make images` into the node (skips those it has)."""
        if self.runtime is None:
            raise ClusterError("the cluster is not running")
        self.runtime.load_all(self.images, references, self._say)

    # --- details ---------------------------------------------------------------------

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def node_dir(self) -> Path:
        return self.state_dir / "node"

    @property
    def host_ip(self) -> str:
        if self.slot is None:
            raise ClusterError("the cluster is not running")
        return str(self.slot.network.gateway)

    @property
    def node_ip(self) -> str:
        if self.slot is None:
            raise ClusterError("the cluster is not running")
        return str(self.slot.network.node_ip)

    def _record(self, identity: ProcessIdentity) -> None:
        if self.slot is not None:
            self.slots.record(self.slot.index, identity)

    def _node_config(self, plane: ControlPlane, slot: Slot) -> NodeConfig:
        net = slot.network
        pki = plane.pki_dir
        serving = plane.ca.issue(
            pki / "kubelet-serving.crt",
            f"system:node:{self.node_name}",
            dns_names=(self.node_name,),
            ip_addresses=(str(net.node_ip),),
            server=True,
        )
        return NodeConfig(
            node_name=self.node_name,
            state_dir=str(self.node_dir),
            logs_dir=str(self.logs_dir),
            host_link=net.node_link,
            node_address=net.node_address,
            gateway=str(net.gateway),
            pod_subnet=str(net.pod_subnet),
            cgroup_root=slot.cgroup_root,
            cluster_dns=CLUSTER_DNS,
            cluster_domain=CLUSTER_DOMAIN,
            kubelet_kubeconfig=str(
                plane.client_kubeconfig(
                    "kubelet", f"system:node:{self.node_name}", ("system:nodes",)
                )
            ),
            kube_proxy_kubeconfig=str(plane.client_kubeconfig("kube-proxy", "system:kube-proxy")),
            serving_cert=str(serving.cert),
            serving_key=str(serving.key),
            client_ca=str(plane.ca.pair.cert),
            kubelet=str(self.binaries.kubelet),
            kube_proxy=str(self.binaries.kube_proxy),
            gpu_device_plugin=str(self.binaries.gpu_device_plugin),
            gpu_count=self.gpus,
            sandbox_image=PAUSE,
            runtime_binary=capabilities.runtime_binary(),
            keep_visible=sorted(
                {
                    str(self.state_dir),
                    str(self.binaries.cache),
                    str(RUNTIME_WRAPPER.parent),
                    *python_paths(),
                }
            ),
        )

    def _start_node(self, plane: ControlPlane, slot: Slot, deadline: float) -> None:
        config = self._node_config(plane, slot)
        self.node_dir.mkdir(parents=True, exist_ok=True)
        config_path = config.save(self.node_dir / "node.json")
        self.node_process = ManagedProcess(
            "node",
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "--mount",
                "--net",
                "--uts",
                "--ipc",
                "--propagation=private",
                "--kill-child=SIGTERM",
                sys.executable,
                "-m",
                "tfjob_localcluster.local.node",
                "--config",
                str(config_path),
            ],
            self.logs_dir / "node.log",
        )
        self._record(self.node_process.start())
        self.node_init = self._wait_init(self.node_process, deadline)
        self._record(self.node_init)
        network.attach_node(slot.network, self.node_init.pid)
        self.runtime = NodeRuntime(self.node_init.pid, self.node_dir)
        self.runtime.wait(max(1.0, deadline - time.monotonic()))

    def _wait_init(self, process: ManagedProcess, deadline: float) -> ProcessIdentity:
        """The node's init: the child `unshare` forks into the new namespaces."""
        assert process.pid is not None
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")

        def forked() -> ProcessIdentity | None:
            pids = children.read_text().split() if children.exists() else []
            return ProcessIdentity.of(int(pids[0])) if pids else None

        return process.wait_ready(
            forked, deadline - time.monotonic(), ClusterError, what="its init", interval=0.02
        )

    def _wait_ready(self, deadline: float, since: str) -> None:
        """Until the Node is Ready by a heartbeat at or after `since` (_heartbeats_from),
        CoreDNS and the volume provisioner are available and service accounts work."""
        assert self.control_plane is not None
        rest = self.control_plane.rest()
        waiting_for = "the Node"
        while time.monotonic() < deadline:
            self.check()
            try:
                node = rest.request("GET", f"/api/v1/nodes/{self.node_name}")
                dns = rest.request(
                    "GET", f"/apis/apps/v1/namespaces/{bootstrap.KUBE_SYSTEM}/deployments/coredns"
                )
                storage = rest.request(
                    "GET",
                    f"/apis/apps/v1/namespaces/{bootstrap.LOCAL_PATH_NAMESPACE}/deployments/"
                    f"{bootstrap.LOCAL_PATH}",
                )
                rest.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            except (ApiError, OSError):
                time.sleep(0.2)
                continue
            # A Node object kept from an earlier run (the state dir keeps etcd) is Ready
            # too: only a heartbeat from this start counts.
            if not _ready_since(node, since):
                waiting_for = f"node {self.node_name} to be Ready"
            elif not (dns.get("status") or {}).get("availableReplicas"):
                waiting_for = "CoreDNS to be available"
            elif not (storage.get("status") or {}).get("availableReplicas"):
                waiting_for = f"{bootstrap.LOCAL_PATH} (the default StorageClass) to be available"
            else:
                self._say(f"node {self.node_name} ready, cluster DNS at {CLUSTER_DNS}")
                return
            time.sleep(0.2)
        raise ClusterError(
            f"timed out waiting for {waiting_for}; logs in {self.logs_dir} "
            f"(kubelet.log, containerd.log, node.log)"
        )

    def _write_info(self) -> None:
        """cluster.json: how to reach this cluster (read by `tfjob-localcluster status`)."""
        assert self.node_init is not None
        info = {
            "api_url": self.api_url,
            "kubeconfig": str(self.kubeconfig),
            "kubectl": str(self.kubectl),
            "node_name": self.node_name,
            "node_ip": self.node_ip,
            "node_init_pid": self.node_init.pid,
            "host_ip": self.host_ip,
            "slot": self.slot.index if self.slot else None,
            "startup_seconds": round(self.startup_seconds, 2),
        }
        (self.state_dir / "cluster.json").write_text(json.dumps(info, indent=2))


def _heartbeats_from() -> str:
    """The moment from which a Node's heartbeat is this start's, taken before the kubelet
    starts: a kubelet whose status does not change reports it again only every five minutes
    (nodeStatusReportFrequency), so on a restart whose images are all there already, a
    Ready it reported before the wait began would not come again within the wait. A second
    earlier: heartbeats have whole seconds."""
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready_since(node: Mapping[str, Any], since: str) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    return any(
        c["type"] == "Ready" and c["status"] == "True" and c.get("lastHeartbeatTime", "") >= since
        for c in conditions
    )


def python_paths() -> list[str]:
    """Where the node's init (this interpreter, its environment and sources) lives."""
    return [
        os.path.realpath(p)
        for p in (sys.base_prefix, sys.prefix, *sys.path)
        if p and os.path.isdir(p)
    ]
