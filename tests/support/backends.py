"""Where the end-to-end scenarios run: the local cluster, or a kind cluster.

The scenarios are written once against `Backend`. By default (`make test`) each runs once:
on kind, the setup the project promises to verify, except those marked `demo_path`, the
path `make demo` runs (the chart and the two examples), which run on the local cluster.
`--backends local,kind` runs every scenario on each backend named (`make test-full`, the
nightly workflow). kind skips, with its reason, where it cannot run here. On both, the
operator and trainer images built by `make images` are in the node's runtime and the Helm
chart installs the operator, which runs as a pod from its image, as users run it.

- local: the session's local cluster (tfjob_localcluster), the images imported into its
  containerd; containers are killed through that containerd.
- kind: the session's kind cluster (tfjob_localcluster.kind.cluster: the project's Docker
  engine and node image where the machine has neither), the images loaded from their
  tars with `kind load image-archive`; containers are killed through the node's
  containerd. The cluster is deleted at the session's end, and the host must then be as
  it was before.

On each, the chart is installed for a module's scenarios and uninstalled after them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
from kubernetes import client, config

from support.cluster import Kubectl
from support.fixtures import stop_session_operator
from tfjob_localcluster.addons.chart import (
    RELEASE,
    SELECTOR,
    default_values,
    install_operator,
    run_helm,
)
from tfjob_localcluster.clusters import Cluster
from tfjob_localcluster.host import state as hoststate
from tfjob_localcluster.images.catalog import PROJECT_IMAGES
from tfjob_localcluster.images.registry import OciRegistry
from tfjob_localcluster.kind import cluster as kind
from tfjob_localcluster.kind.cluster import KindCluster
from tfjob_localcluster.local.cluster import LocalCluster

BACKENDS = ("local", "kind")
#: The markers of the scenarios that run on the local cluster by default (pyproject.toml).
LOCAL_BY_DEFAULT = ("demo_path", "local_gpus")
#: `--backends`' default: each scenario once, on kind or (`demo_path`) on the local cluster.
ONCE = "once"
RELEASE_NAMESPACE = "tfjob-system"
#: (backend, namespace) of a scenario, set by its `tfjobs` fixture for the diagnosis.
SCENARIO_KEY = pytest.StashKey[tuple["Backend", str]]()


class Backend(Protocol):
    name: str
    cluster: Cluster
    kubeconfig: str
    api_client: client.ApiClient

    def kill_operator(self) -> None:
        """Stop the operator abruptly; it stays down until `start_operator`."""

    def start_operator(self) -> None: ...

    def kill_container(self, namespace: str, pod: str, container: str = "tensorflow") -> None:
        """SIGKILL a container's main process, as a crash or the OOM killer would."""


class ChartBackend:
    """A cluster whose operator the Helm chart installed (release namespace tfjob-system)."""

    name = "chart"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.kubeconfig = str(cluster.kubeconfig)
        self.kubectl = Kubectl(cluster.kubectl, cluster.kubeconfig)
        self.api_client: client.ApiClient

    def install(self) -> None:
        install_operator(self.kubeconfig, RELEASE_NAMESPACE)
        self.api_client = config.new_client_from_config(config_file=self.kubeconfig)

    def uninstall(self) -> None:
        run_helm(self.kubeconfig, "uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait")
        self._kubectl("wait", "--for=delete", "pod", "-l", SELECTOR, "--timeout=60s")
        self.api_client.close()

    def kill_operator(self) -> None:
        """Every operator, leader and standby, gone at once (none takes over)."""
        self._kubectl("scale", "deployment/tfjob-operator", "--replicas=0")
        self._kubectl(
            "delete", "pod", "-l", SELECTOR, "--grace-period=0", "--force", "--wait=false"
        )

    def start_operator(self) -> None:
        replicas = default_values()["replicaCount"]
        self._kubectl("scale", "deployment/tfjob-operator", f"--replicas={replicas}")
        self._kubectl("rollout", "status", "deployment/tfjob-operator", "--timeout=120s")

    def container_id(self, namespace: str, pod: str, container: str) -> tuple[str, str]:
        """(node name, container ID) of a running container."""
        body = json.loads(self._kubectl("get", "pod", pod, "-n", namespace, "-o", "json", ns=False))
        status = next(c for c in body["status"]["containerStatuses"] if c["name"] == container)
        return body["spec"]["nodeName"], status["containerID"].split("://", 1)[1]

    def _kubectl(self, *args: str, ns: bool = True) -> str:
        scope = ["-n", RELEASE_NAMESPACE] if ns else []
        return self.kubectl(*scope, *args, timeout=600).stdout


class LocalBackend(ChartBackend):
    name = "local"

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(cluster)
        self.cluster: LocalCluster = cluster

    def kill_container(self, namespace: str, pod: str, container: str = "tensorflow") -> None:
        assert self.cluster.runtime is not None
        self.cluster.runtime.kill(self.container_id(namespace, pod, container)[1])


class KindBackend(ChartBackend):
    """The session's kind cluster, with the chart installed from this checkout."""

    name = "kind"

    def __init__(self, cluster: KindCluster) -> None:
        super().__init__(cluster)
        self.cluster: KindCluster = cluster

    def kill_container(self, namespace: str, pod: str, container: str = "tensorflow") -> None:
        """SIGKILL from the node's containerd: inside the container, PID 1 ignores it."""
        node, container_id = self.container_id(namespace, pod, container)
        self.cluster.node_exec(
            node, "ctr", "--namespace=k8s.io", "tasks", "kill", "--signal=SIGKILL", container_id
        )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backends",
        default=ONCE,
        help="comma-separated e2e backends every scenario runs on: local, kind; default "
        f"{ONCE!r}: each scenario once, on kind, or on the local cluster if marked "
        "demo_path or local_gpus (kind skips where it cannot run here)",
    )


def backend_params(config: pytest.Config, local_by_default: bool = False) -> list[Any]:
    """The backends `--backends` chose for a scenario (`local_by_default`: of the path
    `make demo` runs, or needing the local node's fake GPUs); kind's is marked `kind`, what
    it needs (tests/e2e gives the local cluster's its tier, e2e)."""
    option = config.getoption("--backends")
    if option == ONCE:
        chosen = ["local" if local_by_default else "kind"]
    else:
        chosen = [b.strip() for b in option.split(",") if b.strip()]
    unknown = set(chosen) - set(BACKENDS)
    if unknown:
        raise pytest.UsageError(f"--backends: unknown {', '.join(sorted(unknown))}")
    return [
        pytest.param(name, marks=[pytest.mark.kind] if name == "kind" else [], id=name)
        for name in chosen
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        local = any(metafunc.definition.get_closest_marker(m) for m in LOCAL_BY_DEFAULT)
        metafunc.parametrize(
            "backend", backend_params(metafunc.config, local), indirect=True, scope="module"
        )


@pytest.fixture(scope="module")
def backend(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "local":
        request.getfixturevalue("project_images")
        # The checkout's operator, if a test started it, must not run beside the chart's.
        stop_session_operator(request.config)
        local = LocalBackend(request.getfixturevalue("local_cluster"))
        local.install()
        try:
            yield local
        finally:
            local.uninstall()
        return
    chart = KindBackend(request.getfixturevalue("kind_cluster"))
    chart.install()
    try:
        yield chart
    finally:
        chart.uninstall()


@pytest.fixture(scope="session")
def kind_cluster(
    tmp_path_factory: pytest.TempPathFactory, oci_registry: OciRegistry
) -> Iterator[KindCluster]:
    """One kind cluster for the session, its nodes pulling from the session's registry
    too; skipped, with the reason, where kind cannot run here."""
    reason = kind.unavailable()
    if reason is not None:
        pytest.skip(f"kind: {reason}")
    cluster = KindCluster(
        tmp_path_factory.mktemp("kind"), PROJECT_IMAGES, say=_say, registry=oci_registry.address
    )
    # After what the run installs (docker.io) and with the engine up: the cluster, its
    # network and the engine must leave nothing.
    # Local clusters started and stopped meanwhile (the release's tests) are not kind's.
    cluster.start_engine()
    before = hoststate.without_local_clusters(hoststate.snapshot())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
    engine_state = () if cluster.engine.private else hoststate.ENGINE_RUNTIME_ENTRIES
    after = hoststate.without_local_clusters(hoststate.snapshot())
    changed = hoststate.difference(before, after, engine_state)
    assert not changed, f"the kind run changed the host: {changed}"


def _say(message: str) -> None:
    print(f"[kind] {message}", flush=True)
