"""Where the end-to-end scenarios run: the local cluster, or a kind cluster.

The scenarios are written once against `Backend`; `--backends` picks which run
(default: both, and kind skips, with its reason, where Docker cannot run containers).

- local: the local control plane, the process node (real TensorFlow processes), and the
  operator from this checkout as a process.
- kind: a kind cluster created for the session; the operator and trainer images are built
  with Docker, loaded with `kind load docker-image`, and the Helm chart installs the
  operator; the cluster is deleted at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from kubernetes import client, config

from support.operator_process import OperatorProcess
from tfjob_localcluster import kind
from tfjob_localcluster.binaries import locate
from tfjob_localcluster.chart import install_operator
from tfjob_localcluster.kind import KindCluster, run

BACKENDS = ("local", "kind")


class Backend(Protocol):
    name: str
    kubeconfig: str
    api_client: client.ApiClient

    def kill_operator(self) -> None:
        """SIGKILL the operator; it stays down until `start_operator`."""

    def start_operator(self) -> None: ...

    def kill_container(self, namespace: str, pod: str, container: str = "tensorflow") -> None:
        """SIGKILL a container's main process, as a crash or the OOM killer would."""


class LocalBackend:
    name = "local"

    def __init__(self, cluster: Any, operator: OperatorProcess, api_client: client.ApiClient):
        self.cluster = cluster
        self.operator = operator
        self.kubeconfig = str(cluster.kubeconfig)
        self.api_client = api_client

    def kill_operator(self) -> None:
        self.operator.kill()

    def start_operator(self) -> None:
        self.operator.start()

    def kill_container(self, namespace: str, pod: str, container: str = "tensorflow") -> None:
        client.CoreV1Api(self.api_client).connect_post_node_proxy_with_path(
            self.cluster.node_name,
            f"debug/signal/{namespace}/{pod}/{container}/KILL",
            _preload_content=False,
        )


class KindBackend:
    """A kind cluster with the images built from this checkout and the chart installed."""

    name = "kind"
    release_namespace = "tfjob-system"

    def __init__(self, workdir: Path) -> None:
        self.cluster = KindCluster(workdir)
        self.kubeconfig = str(self.cluster.kubeconfig)
        self.kubectl = str(locate("kubectl").kubectl)
        self.api_client: client.ApiClient

    def create(self) -> None:
        self.cluster.create()
        install_operator(self.kubeconfig, self.release_namespace)
        self.api_client = config.new_client_from_config(config_file=self.kubeconfig)

    def delete(self) -> None:
        self.cluster.delete()

    def kill_operator(self) -> None:
        self._kubectl("scale", "deployment/tfjob-operator", "--replicas=0")
        self._kubectl(
            "delete", "pod", "-l", "app.kubernetes.io/name=tfjob-operator",
            "--grace-period=0", "--force", "--wait=false",
        )  # fmt: skip

    def start_operator(self) -> None:
        self._kubectl("scale", "deployment/tfjob-operator", "--replicas=1")
        self._kubectl("rollout", "status", "deployment/tfjob-operator", "--timeout=120s")

    def kill_container(self, namespace: str, pod: str, container: str = "tensorflow") -> None:
        """SIGKILL from the node: inside the container, pid 1 ignores it."""
        body = json.loads(self._kubectl("get", "pod", pod, "-n", namespace, "-o", "json", ns=False))
        status = next(c for c in body["status"]["containerStatuses"] if c["name"] == container)
        container_id = status["containerID"].split("://", 1)[1]
        pid_of = (
            f"crictl inspect --output go-template --template '{{{{.info.pid}}}}' {container_id}"
        )
        # A kind node's Docker container is named like the node.
        run("docker", "exec", body["spec"]["nodeName"], "sh", "-c", f"kill -9 $({pid_of})")

    def _kubectl(self, *args: str, ns: bool = True) -> str:
        scope = ["-n", self.release_namespace] if ns else []
        return run(self.kubectl, f"--kubeconfig={self.kubeconfig}", *scope, *args)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated e2e backends to run: local, kind (default: both; kind skips "
        "where no container engine runs)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    chosen = [b.strip() for b in metafunc.config.getoption("--backends").split(",") if b.strip()]
    unknown = set(chosen) - set(BACKENDS)
    if unknown:
        raise pytest.UsageError(f"--backends: unknown {', '.join(sorted(unknown))}")
    marks = {"local": pytest.mark.e2e, "kind": pytest.mark.kind}
    metafunc.parametrize(
        "backend",
        [pytest.param(name, marks=marks[name], id=name) for name in chosen],
        indirect=True,
        scope="session",
    )


@pytest.fixture(scope="session")
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    if request.param == "local":
        yield LocalBackend(
            request.getfixturevalue("local_cluster"),
            request.getfixturevalue("operator"),
            request.getfixturevalue("k8s_client"),
        )
        return
    reason = kind.unavailable()
    if reason is not None:
        pytest.skip(f"kind backend: {reason}")
    cluster = KindBackend(tmp_path_factory.mktemp("kind"))
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.delete()
