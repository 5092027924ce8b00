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
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from kubernetes import client, config

from support.operator_process import OperatorProcess
from tfjob_localcluster.binaries import MissingBinaryError, locate, read_versions

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_IMAGE = "tfjob-operator:0.1.0"
TRAINER_IMAGE = "tfjob-trainer:0.1.0"
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
        versions = read_versions()
        self.kind = str(locate("kind").kind)
        self.helm = str(locate("helm").helm)
        self.kubectl = str(locate("kubectl").kubectl)
        self.cluster_name = f"tfjob-e2e-{int(time.time())}"
        self.node_image = versions["KIND_NODE_IMAGE"]
        self.kubeconfig = str(workdir / "kind.kubeconfig")
        self.api_client: client.ApiClient

    def create(self) -> None:
        _run(
            self.kind, "create", "cluster", "--name", self.cluster_name,
            "--image", self.node_image, "--kubeconfig", self.kubeconfig, "--wait", "120s",
        )  # fmt: skip
        for dockerfile, image in (
            ("operator/Dockerfile", OPERATOR_IMAGE),
            ("trainer/Dockerfile", TRAINER_IMAGE),
        ):
            _run("docker", "build", "-f", str(ROOT / dockerfile), "-t", image, str(ROOT))
            _run(self.kind, "load", "docker-image", image, "--name", self.cluster_name)
        _run(
            self.helm, f"--kubeconfig={self.kubeconfig}", "install", "tfjob-operator",
            str(ROOT / "charts" / "tfjob-operator"), "--namespace", self.release_namespace,
            "--create-namespace", "--wait", "--timeout=180s",
        )  # fmt: skip
        self.api_client = config.new_client_from_config(config_file=self.kubeconfig)

    def delete(self) -> None:
        _run(self.kind, "delete", "cluster", "--name", self.cluster_name, check=False)

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
        body = json.loads(self._kubectl("get", "pod", pod, "-n", namespace, "-o", "json", ns=False))
        status = next(c for c in body["status"]["containerStatuses"] if c["name"] == container)
        container_id = status["containerID"].split("://", 1)[1]
        node = body["spec"]["nodeName"]
        pid_of = (
            f"crictl inspect --output go-template --template '{{{{.info.pid}}}}' {container_id}"
        )
        _run("docker", "exec", node, "sh", "-c", f"kill -9 $({pid_of})")

    def _kubectl(self, *args: str, ns: bool = True) -> str:
        scope = ["-n", self.release_namespace] if ns else []
        return _run(self.kubectl, f"--kubeconfig={self.kubeconfig}", *scope, *args)


def kind_unavailable() -> str | None:
    """Why kind cannot run here, or None."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if info.returncode != 0:
        return "no container engine: `docker info` cannot reach a Docker daemon"
    try:
        locate("kind")
    except MissingBinaryError:
        return "kind is not built: run `hack/build-binaries.sh kind` (make e2e-kind does)"
    return None


def _run(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


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
    reason = kind_unavailable()
    if reason is not None:
        pytest.skip(f"kind backend: {reason}")
    kind = KindBackend(tmp_path_factory.mktemp("kind"))
    try:
        kind.create()
        yield kind
    finally:
        kind.delete()
