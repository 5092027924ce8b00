"""The control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

Everything lives under one state directory: `pki/` (CA, certificates, the service
account signing key; reused across restarts), `etcd/` (data), `logs/<component>.log`,
and the kubeconfigs. Components listen on free ports picked at start; the API server
binds `bind_address` (the cluster's bridge gateway when pods must reach it) and keeps its
port across restarts (`apiserver-port`): the `kubernetes` Service, which pods use to
reach it, keeps the target port it was created with. Should that port be taken, the API
server starts on another, and a Service and endpoints naming another port are deleted,
so that it creates them again with its new port.
"""

from __future__ import annotations

import base64
import ipaddress
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tfjob_localcluster import binaries as binaries_module
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host.ports import free_ports
from tfjob_localcluster.host.procs import ManagedProcess, ProcessIdentity, Started
from tfjob_localcluster.local.kubeconfig import kubeconfig, write_kubeconfig
from tfjob_localcluster.local.pki import (
    CertificateAuthority,
    KeyPair,
    tls_context,
    write_signing_key,
)
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.apiserver.sync import Rest

SERVICE_CIDR = ipaddress.IPv4Network("10.96.0.0/16")
CLUSTER_DOMAIN = "cluster.local"
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
ADMIN_USER = "tfjob-localcluster-admin"

# kube-controller-manager's controllers (names as its --help lists them): those the
# cluster's tests rely on (garbage collector, namespace, service account and token
# controllers, the kube-root-ca.crt publisher that projected token volumes need, the
# node lifecycle controller that lifts the not-ready taint the API server puts on a new
# Node), the workload controllers a Helm chart or a user may use, and the volume
# controllers that bind claims to the default StorageClass's volumes (local/bootstrap.py) and let
# claims and volumes in use be deleted once unused.
CONTROLLERS = (
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "daemonset-controller",
    "job-controller",
    "cronjob-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "disruption-controller",
    "pod-garbage-collector-controller",
    "ttl-after-finished-controller",
    "resourcequota-controller",
    "persistentvolume-binder-controller",
    "persistentvolume-attach-detach-controller",
    "persistentvolume-protection-controller",
    "persistentvolumeclaim-protection-controller",
    "ephemeral-volume-controller",
)

_PORT_RETRIES = 3
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


class ControlPlaneError(LocalClusterError):
    pass


@dataclass
class _Component:
    """How to start one component on free ports and tell when it is ready."""

    name: str
    argv_for: Callable[[list[int]], list[str]]
    ready_for: Callable[[list[int]], Callable[[], bool]]
    host: str
    port_count: int
    #: Ports to try on the first launch (free ones after that).
    preferred: list[int] | None = None
    process: ManagedProcess | None = None
    ready: Callable[[], bool] = lambda: False
    attempts: int = 0
    url: str = ""
    #: The ports it was last launched on.
    ports: list[int] = field(default_factory=list)


class ControlPlane(Started):
    """Starts and stops the four control-plane components; see the module docstring."""

    def __init__(
        self,
        state_dir: Path,
        *,
        bind_address: str = "127.0.0.1",
        binaries: binaries_module.Binaries | None = None,
        on_spawn: Callable[[ProcessIdentity], None] | None = None,
        say: Callable[[str], None] = lambda _message: None,
        extra_args: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """`extra_args` appends flags per component (e.g. {"kube-apiserver": [...]})."""
        unknown = set(extra_args or {}) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"extra_args for unknown components {sorted(unknown)}")
        self.extra_args = {name: list(args) for name, args in (extra_args or {}).items()}
        self.state_dir = state_dir
        self.bind_address = bind_address
        self.binaries = binaries or binaries_module.locate()
        self._on_spawn = on_spawn
        self._say = say
        self.pki_dir = state_dir / "pki"
        self.logs_dir = state_dir / "logs"
        self.admin_kubeconfig = state_dir / "admin.kubeconfig"
        self.ca = CertificateAuthority(self.pki_dir)
        self.admin = self.ca.issue(
            self.pki_dir / "admin.crt", ADMIN_USER, organizations=("system:masters",), client=True
        )
        self.api_url = ""
        self._processes: list[ManagedProcess] = []
        self._components: dict[str, _Component] = {}

    # --- lifecycle -------------------------------------------------------------------

    def start(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        self.start_api(deadline)
        self.start_controllers(deadline)

    def start_api(self, deadline: float) -> None:
        """etcd and the API server (the admin kubeconfig works once this returns)."""
        try:
            etcd_url = self._start_etcd(deadline)
            self._start_apiserver(etcd_url, deadline)
        except BaseException:
            self.stop()
            raise

    def start_controllers(self, deadline: float) -> None:
        """kube-controller-manager and kube-scheduler, started together."""
        try:
            self._start_controllers(deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops the components in reverse order of start (the API server before etcd)."""
        for process in reversed(self._processes):
            process.stop(grace=10)
        self._processes.clear()

    def check(self) -> None:
        """Raises ControlPlaneError if a component has exited."""
        for process in self._processes:
            if not process.running():
                raise ControlPlaneError(
                    f"{process.name} exited; last lines of {process.log_path}:\n{process.tail()}"
                )

    @property
    def processes(self) -> list[ManagedProcess]:
        return list(self._processes)

    def restart(self, name: str, *, down_seconds: float = 0.0, timeout: float = 60) -> None:
        """SIGKILLs one component and, `down_seconds` later, starts it again with the same
        flags, ports and data, as a node's kubelet restarts a crashed static pod; returns
        once it is ready again. For fault injection (chaos/)."""
        component = self._components[name]
        old = component.process
        assert old is not None
        old.kill()
        time.sleep(down_seconds)
        component.process = self._spawn(name, component.argv_for(component.ports))
        # Keep the start order, which stop() reverses.
        self._processes.remove(component.process)
        self._processes[self._processes.index(old)] = component.process
        component.process.wait_ready(
            component.ready, timeout, ControlPlaneError, what="after its restart"
        )

    def compact_etcd(self) -> int:
        """Compacts etcd's history up to its current revision, physically, as the API
        server's own `--etcd-compaction-interval` does every 5 minutes; returns that
        revision. A watch resuming from an older version can then be served by neither
        etcd nor, once restarted, the API server's cache: it gets 410 Gone. For fault
        injection (chaos/)."""
        etcd = Rest.at(self._components["etcd"].url, tls_context(self.ca.pair.cert))
        everything = {"key": base64.b64encode(b"/").decode(), "limit": 1, "keys_only": True}
        revision = int(etcd.request("POST", "/v3/kv/range", everything)["header"]["revision"])
        etcd.request("POST", "/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    # --- certificates and kubeconfigs ------------------------------------------------

    def client_kubeconfig(
        self, name: str, user: str, groups: tuple[str, ...] = (), server: str = ""
    ) -> Path:
        """A kubeconfig for `user` (in `groups`), certificate issued by the cluster CA;
        `server`, a URL that reaches the API server some other way (a proxy on the host's
        loopback: its certificate names 127.0.0.1), replaces the API server's own."""
        pair = self.ca.issue(self.pki_dir / f"{name}.crt", user, organizations=groups, client=True)
        return write_kubeconfig(
            self.state_dir / f"{name}.kubeconfig",
            kubeconfig(server or self.api_url, self.ca.pair.cert, pair, user),
        )

    def rest(self) -> Rest:
        return Rest.at(self.api_url, tls_context(self.ca.pair.cert, self.admin))

    # --- components -------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        argv = [*argv, *self.extra_args.get(name, [])]
        process = ManagedProcess(name, argv, self.logs_dir / f"{name}.log")
        identity = process.start()
        self._processes.append(process)
        if self._on_spawn is not None:
            self._on_spawn(identity)
        return process

    def _start_ready(self, components: list[_Component], deadline: float) -> None:
        """Starts components on free ports and waits until all are ready.

        All are spawned first (from this thread: their parent-death signal is bound
        to it) and then awaited together. One that exits because another process took
        its port is restarted on fresh ports.
        """
        for component in components:
            self._components[component.name] = component
            self._launch(component)
        pending = list(components)
        while pending:
            for component in list(pending):
                process = component.process
                assert process is not None
                if not process.running():
                    self._relaunch(component)
                elif component.ready():
                    self._say(f"{component.name} ready")
                    pending.remove(component)
            if pending and time.monotonic() > deadline:
                late = pending[0].process
                assert late is not None
                raise ControlPlaneError(
                    f"{late.name} not ready in time; last lines of {late.log_path}:\n{late.tail()}"
                )
            time.sleep(0.1)

    def _launch(self, component: _Component) -> None:
        ports = free_ports(component.host, component.port_count)
        if component.preferred and component.attempts == 0:
            ports = component.preferred
        component.ports = ports
        component.process = self._spawn(component.name, component.argv_for(ports))
        component.ready = component.ready_for(ports)
        component.attempts += 1

    def _relaunch(self, component: _Component) -> None:
        process = component.process
        assert process is not None
        process.stop()
        self._processes.remove(process)
        port_taken = "address already in use" in process.tail(200)
        if not port_taken or component.attempts >= _PORT_RETRIES:
            raise ControlPlaneError(
                f"{component.name} failed to start; last lines of {process.log_path}:\n"
                f"{process.tail()}"
            )
        self._launch(component)

    def _start_etcd(self, deadline: float) -> str:
        data_dir = self.state_dir / "etcd"
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

        def argv(ports: list[int]) -> list[str]:
            client, peer = (f"http://127.0.0.1:{port}" for port in ports)
            return [
                str(self.binaries.etcd),
                "--name=tfjob-local",
                f"--data-dir={data_dir}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=tfjob-local={peer}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ]

        def ready(ports: list[int]) -> Callable[[], bool]:
            etcd.url = f"http://127.0.0.1:{ports[0]}"
            health = Rest.at(etcd.url, tls_context(self.ca.pair.cert))
            return lambda: health.ok("/health")

        etcd = _Component("etcd", argv, ready, "127.0.0.1", 2)
        self._start_ready([etcd], deadline)
        return etcd.url

    def _start_apiserver(self, etcd_url: str, deadline: float) -> None:
        pki = self.pki_dir
        service_ip = str(SERVICE_CIDR.network_address + 1)
        serving = self.ca.issue(
            pki / "apiserver.crt",
            "kube-apiserver",
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
            ),
            ip_addresses=tuple(dict.fromkeys(("127.0.0.1", self.bind_address, service_ip))),
            server=True,
        )
        kubelet_client = self.ca.issue(
            pki / "apiserver-kubelet-client.crt", KUBELET_CLIENT_USER, client=True
        )
        signing_key = write_signing_key(pki / "service-account.key")
        # The aggregation layer (APIService backends such as metrics-server) trusts the
        # API server's proxy identity through a CA of its own.
        front_proxy = CertificateAuthority(pki / "front-proxy", "tfjob-localcluster-front-proxy-ca")
        proxy_client = front_proxy.issue(
            pki / "front-proxy-client.crt", "front-proxy-client", client=True
        )
        loopback = ipaddress.ip_address(self.bind_address).is_loopback

        def argv(ports: list[int]) -> list[str]:
            return [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={self.bind_address}",
                f"--advertise-address={self.bind_address}",
                f"--secure-port={ports[0]}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.ca.pair.cert}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
                f"--service-account-key-file={signing_key.cert}",
                f"--service-account-signing-key-file={signing_key.key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                f"--kubelet-certificate-authority={self.ca.pair.cert}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                # A loopback address cannot back the `kubernetes` Service's endpoints.
                f"--endpoint-reconciler-type={'none' if loopback else 'lease'}",
                f"--requestheader-client-ca-file={front_proxy.pair.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={proxy_client.cert}",
                f"--proxy-client-key-file={proxy_client.key}",
                "--profiling=false",
            ]

        def ready(ports: list[int]) -> Callable[[], bool]:
            self.api_url = f"https://{self._url_host(self.bind_address)}:{ports[0]}"
            return lambda: self.rest().ok("/readyz")

        port_file = self.state_dir / "apiserver-port"
        kept = [int(port_file.read_text())] if port_file.exists() else None
        self._start_ready(
            [_Component("kube-apiserver", argv, ready, self.bind_address, 1, kept)], deadline
        )
        port = int(self.api_url.rsplit(":", 1)[1])
        if kept and kept != [port]:
            self._say(f"kube-apiserver's port {kept[0]} was taken: now {port}")
        port_file.write_text(str(port))
        self._forget_stale_kubernetes_service(port)
        write_kubeconfig(
            self.admin_kubeconfig,
            kubeconfig(self.api_url, self.ca.pair.cert, self.admin, ADMIN_USER),
        )

    def _forget_stale_kubernetes_service(self, port: int) -> None:
        """Deletes the `kubernetes` Service and its endpoints if they name another port
        than the API server's; it creates them again within seconds."""
        rest = self.rest()
        try:
            service = rest.request("GET", "/api/v1/namespaces/default/services/kubernetes")
        except ApiError as error:
            if error.status == 404:
                return
            raise
        if [p.get("targetPort") for p in service["spec"]["ports"]] == [port]:
            return
        for path in (
            "/api/v1/namespaces/default/services/kubernetes",
            "/api/v1/namespaces/default/endpoints/kubernetes",
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes",
        ):
            try:
                rest.request("DELETE", path)
            except ApiError as error:
                if error.status != 404:
                    raise

    @staticmethod
    def _url_host(address: str) -> str:
        return f"[{address}]" if ":" in address else address

    def _component_serving(self, name: str) -> KeyPair:
        return self.ca.issue(
            self.pki_dir / f"{name}-serving.crt",
            name,
            dns_names=("localhost",),
            ip_addresses=("127.0.0.1",),
            server=True,
        )

    def _start_controllers(self, deadline: float) -> None:
        pki = self.pki_dir
        kcm_kubeconfig = self.client_kubeconfig(
            "controller-manager", "system:kube-controller-manager"
        )
        kcm_serving = self._component_serving("kube-controller-manager")
        scheduler_kubeconfig = self.client_kubeconfig("scheduler", "system:kube-scheduler")
        scheduler_serving = self._component_serving("kube-scheduler")
        scheduler_config = self.state_dir / "scheduler-config.yaml"
        scheduler_config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(scheduler_kubeconfig)},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )

        def kcm_argv(ports: list[int]) -> list[str]:
            return [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports[0]}",
                f"--tls-cert-file={kcm_serving.cert}",
                f"--tls-private-key-file={kcm_serving.key}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--service-account-private-key-file={pki / 'service-account.key'}",
                f"--root-ca-file={self.ca.pair.cert}",
                f"--cluster-name=tfjob-local-{self.state_dir.name}",
                "--profiling=false",
            ]

        def scheduler_argv(ports: list[int]) -> list[str]:
            return [
                str(self.binaries.kube_scheduler),
                f"--config={scheduler_config}",
                f"--authentication-kubeconfig={scheduler_kubeconfig}",
                f"--authorization-kubeconfig={scheduler_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports[0]}",
                f"--tls-cert-file={scheduler_serving.cert}",
                f"--tls-private-key-file={scheduler_serving.key}",
                "--profiling=false",
            ]

        def healthz(ports: list[int]) -> Callable[[], bool]:
            probe = Rest.at(f"https://127.0.0.1:{ports[0]}", tls_context(self.ca.pair.cert))
            return lambda: probe.ok("/healthz")

        self._start_ready(
            [
                _Component("kube-controller-manager", kcm_argv, healthz, "127.0.0.1", 1),
                _Component("kube-scheduler", scheduler_argv, healthz, "127.0.0.1", 1),
            ],
            deadline,
        )
