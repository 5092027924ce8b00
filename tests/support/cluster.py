"""Pytest fixtures for tests that need the local cluster.

Loaded by `tests/conftest.py` (`pytest_plugins`).

- `local_cluster` (session): a LocalCluster, started the first time a test asks for it
  and stopped at the end of the session, with the busybox image loaded. Its state dir
  (component logs under `logs/`, pod logs under `node/var-log/pods/`) is
  `cluster/` in `cluster_state_root`.
- `cluster_state_root` (session): where the session's clusters keep their state:
  `<cache>/test-clusters/session-*/`, closed to other users as root's home is; removed
  after a passing session and kept, with its path printed, when a test failed (without
  the images its nodes and registry held; statedirs.py).
- `project_images` (session): the operator and trainer images, loaded into that cluster.
- `kubeconfig` (session): the admin kubeconfig path, as a string.
- `kubectl` (session): `kubectl("get", "pods", "-n", ns)` runs the pinned kubectl with
  that kubeconfig and returns the CompletedProcess (text); raises KubectlError with
  stderr on a non-zero exit unless `check=False`.
- `rest` (session): the project's synchronous front to the cluster (apiserver/sync.py),
  as its admin; `k8s_client` and `core_v1`: the `kubernetes` package's ApiClient and
  CoreV1Api, a client independent of the project's, which tests read the cluster with.
- `namespace` (function): a fresh namespace (its default ServiceAccount exists),
  deleted after the test without waiting.
"""

from __future__ import annotations

import logging
import re
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import summary
from support.waiting import wait_until
from tfjob_localcluster.host import statedirs
from tfjob_localcluster.images.catalog import BUSYBOX, PROJECT_IMAGES
from tfjob_localcluster.local.cluster import LocalCluster
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.apiserver.sync import Rest

log = logging.getLogger("tfjob_localcluster")

_STATE_DIR_KEY = pytest.StashKey[Path]()
_FAILED_KEY = pytest.StashKey[bool]()
NAMESPACE_LABEL = "tfjob.dev/test-namespace"


class KubectlError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {self.stderr}\nstdout: {self.output}"


class Kubectl:
    """Runs the pinned kubectl against one cluster."""

    def __init__(self, path: Path, kubeconfig: Path) -> None:
        self.path = path
        self.kubeconfig = kubeconfig

    def __call__(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.path), f"--kubeconfig={self.kubeconfig}", *args]
        done = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise KubectlError(done.returncode, argv, done.stdout, done.stderr)
        return done

    def tell_to_finish(self, namespace: str, pod: str) -> None:
        """Lets the UNTIL_TOLD script (support/builders.py) running in `pod` go on."""
        self("exec", "-n", namespace, pod, "--", "touch", "/done")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_FAILED_KEY] = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        item.config.stash[_FAILED_KEY] = True
        state_dir = item.config.stash.get(_STATE_DIR_KEY, None)
        if state_dir is not None:
            report.sections.append(
                (
                    "tfjob-localcluster",
                    f"cluster state dir: {state_dir}/cluster\n"
                    f"component logs: {state_dir}/cluster/logs/\n"
                    f"pod logs: {state_dir}/cluster/node/var-log/pods/",
                )
            )
    return report


@pytest.fixture(scope="session")
def cluster_state_root(request: pytest.FixtureRequest) -> Iterator[Path]:
    """The session's directory for clusters' state, in the cache, closed to other users:
    removed after a passing session, kept after a failure."""
    root = statedirs.new_state_dir("test-clusters", "session-")
    request.config.stash[_STATE_DIR_KEY] = root
    yield root
    if request.config.stash[_FAILED_KEY]:
        statedirs.keep(root)
        summary.add(
            "tfjob-localcluster",
            f"state dir kept for inspection: {root} (component logs in {root}/cluster/logs/)",
        )
    else:
        statedirs.remove(root)
        del request.config.stash[_STATE_DIR_KEY]


@pytest.fixture(scope="session")
def local_cluster(
    request: pytest.FixtureRequest, cluster_state_root: Path
) -> Iterator[LocalCluster]:
    state_dir = cluster_state_root
    cluster = LocalCluster(state_dir / "cluster", say=log.info)
    try:
        cluster.start()
        cluster.load_images([BUSYBOX])
    except Exception as error:
        request.config.stash[_FAILED_KEY] = True
        raise RuntimeError(
            f"the local cluster did not start (logs in {state_dir}/cluster/logs/): {error}"
        ) from error
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def project_images(local_cluster: LocalCluster) -> tuple[str, ...]:
    local_cluster.load_images(PROJECT_IMAGES)
    return PROJECT_IMAGES


@pytest.fixture(scope="session")
def kubeconfig(local_cluster: LocalCluster) -> str:
    return str(local_cluster.kubeconfig)


@pytest.fixture(scope="session")
def kubectl(local_cluster: LocalCluster) -> Kubectl:
    return Kubectl(local_cluster.kubectl, local_cluster.kubeconfig)


@pytest.fixture(scope="session")
def k8s_client(kubeconfig: str) -> Iterator[Any]:
    from kubernetes import config

    client = config.new_client_from_config(config_file=kubeconfig)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def core_v1(k8s_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(k8s_client)


def namespace_name(test_name: str) -> str:
    """A valid, unique namespace name derived from the test's name."""
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].rstrip("-")
    return f"{slug or 'test'}-{secrets.token_hex(3)}"


@pytest.fixture(scope="session")
def rest(kubeconfig: str) -> Rest:
    """The project's synchronous front (tfjob_operator.apiserver.sync) to the session's
    cluster, as the cluster's admin."""
    return Rest.of_kubeconfig(kubeconfig)


def create_namespace(rest: Rest, name: str, labels: dict[str, str]) -> None:
    """Creates the namespace and returns once pods may be created in it: they are refused
    until the service account controller has made `default`."""
    rest.request("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}})
    account = f"/api/v1/namespaces/{name}/serviceaccounts/default"

    def default_account() -> bool:
        try:
            rest.get(account)
        except ApiError as error:
            if not error.not_found:
                raise
            return False
        return True

    wait_until(default_account, 30, f"the ServiceAccount {name}/default", interval=0.1)


def delete_namespace(rest: Rest, name: str) -> None:
    """Deletes the namespace in the background (its objects go with it), if it exists."""
    try:
        rest.request(
            "DELETE", f"/api/v1/namespaces/{name}", query={"propagationPolicy": "Background"}
        )
    except ApiError as error:
        if not error.not_found:
            raise


@pytest.fixture
def namespace(request: pytest.FixtureRequest, rest: Rest) -> Iterator[str]:
    name = namespace_name(request.node.name)
    create_namespace(rest, name, {NAMESPACE_LABEL: "true"})
    try:
        yield name
    finally:
        delete_namespace(rest, name)
