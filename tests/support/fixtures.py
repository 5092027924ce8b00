"""Fixtures for tests of the operator on the local cluster: the CRD, the operator process,
TFJob helpers bound to a fresh namespace, the session's OCI registry, and the gang
schedulers (for the modules that use them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.operator_process import OperatorCommand, OperatorProcess
from support.checkout import ROOT
from support.cluster import Kubectl
from support.tfjobs import TFJobs
from support.waiting import wait_until
from tfjob_localcluster.addons.coscheduling import Coscheduling
from tfjob_localcluster.addons.volcano import Volcano
from tfjob_localcluster.images.registry import OciRegistry
from tfjob_localcluster.local.cluster import LocalCluster

CRD = ROOT / "charts" / "tfjob-operator" / "crds" / "tfjobs.tfjob.dev.yaml"
KUBEFLOW_CRD = ROOT / "charts" / "tfjob-operator" / "files" / "tfjobs.kubeflow.org.yaml"
_OPERATOR_KEY = pytest.StashKey[OperatorProcess]()
#: The tests' operators fail a job whose pod is refused as invalid after this long (the
#: default is 30 s): the tests of refused pods wait less.
INVALID_POD_GRACE_SECONDS = 10


@pytest.fixture(scope="session")
def oci_registry(cluster_state_root: Path) -> Iterator[OciRegistry]:
    """A registry on the host's loopback for the session (images/registry.py): the release's
    tests push to it, and clusters set up for it pull from it."""
    with OciRegistry(cluster_state_root / "registry", say=lambda _message: None) as registry:
        yield registry


@pytest.fixture(scope="session")
def tfjob_crd(kubectl: Any) -> Path:
    """The TFJob CRD, installed from the chart's crds/ (the one generated file)."""
    install_crd(kubectl, CRD)
    return CRD


def install_crd(kubectl: Any, path: Path) -> None:
    """Applies the CRD in `path` and waits until the API server serves it."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    name = path.name.removesuffix(".yaml")
    wait_until(
        lambda: _established(json.loads(kubectl("get", "crd", name, "-o", "json").stdout)),
        60,
        f"the CRD {name} to be established",
        interval=0.2,
    )


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="session")
def operator(
    request: pytest.FixtureRequest,
    kubeconfig: str,
    tfjob_crd: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """The operator from this checkout, watching all namespaces, for the whole session."""
    log_path = tmp_path_factory.mktemp("operator") / "operator.log"
    process = OperatorProcess(
        OperatorCommand.checkout(f"--invalid-pod-grace-seconds={INVALID_POD_GRACE_SECONDS}"),
        Path(kubeconfig),
        log_path,
    )
    request.config.stash[_OPERATOR_KEY] = process
    process.run()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def kubeflow_operator(
    request: pytest.FixtureRequest,
    kubectl: Any,
    kubeconfig: str,
    tfjob_crd: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """Kubeflow's CRD and, instead of the session's operator, one run with --kubeflow, for
    the module. The CRD is deleted afterwards, so that `kubectl get tfjob` in other tests
    keeps meaning tfjob.dev."""
    install_crd(kubectl, KUBEFLOW_CRD)
    stop_session_operator(request.config)
    process = OperatorProcess(
        OperatorCommand.checkout(
            "--kubeflow", f"--invalid-pod-grace-seconds={INVALID_POD_GRACE_SECONDS}"
        ),
        Path(kubeconfig),
        tmp_path_factory.mktemp("kubeflow") / "operator.log",
    )
    process.run()
    try:
        yield process
    finally:
        process.stop()
        kubectl("delete", "crd", "tfjobs.kubeflow.org", "--wait=true", "--timeout=120s")


@pytest.fixture
def kubeflow_jobs(kubeflow_operator: OperatorProcess, kubeconfig: str, namespace: str) -> TFJobs:
    """TFJob helpers for kubeflow.org/v1 in this test's namespace."""
    return TFJobs(kubeconfig, namespace, group="kubeflow.org")


@pytest.fixture
def tfjobs(operator: OperatorProcess, kubeconfig: str, namespace: str) -> TFJobs:
    """TFJob helpers in this test's namespace, with the operator running."""
    if not operator.process.running():
        operator.run()  # an earlier test stopped it and failed before starting it again
    return TFJobs(kubeconfig, namespace)


def stop_session_operator(config: pytest.Config) -> None:
    """Stops the checkout's operator, where an installed operator must be alone.

    `tfjobs` starts it again for the tests that follow.
    """
    process = config.stash.get(_OPERATOR_KEY, None)
    if process is not None:
        process.stop()


@pytest.fixture
def session_operator_stopped(request: pytest.FixtureRequest) -> None:
    stop_session_operator(request.config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    process = item.config.stash.get(_OPERATOR_KEY, None)
    if report.failed and process is not None and "operator" in getattr(item, "fixturenames", ()):
        report.sections.append(
            ("operator log (tail)", f"{process.log_path}\n{process.process.tail(60)}")
        )
    return report


@pytest.fixture(scope="module")
def coscheduling(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Coscheduling]:
    assert local_cluster.control_plane is not None
    running = Coscheduling(
        local_cluster.kubeconfig,
        local_cluster.kubectl,
        local_cluster.control_plane.ca,
        tmp_path_factory.mktemp("coscheduling"),
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def volcano(
    local_cluster: LocalCluster, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Volcano]:
    """Volcano's scheduler and CRDs; the CRDs go (with every PodGroup and Queue) after."""
    running = Volcano(
        local_cluster.kubeconfig, local_cluster.kubectl, tmp_path_factory.mktemp("volcano")
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()
        for plural in ("podgroups", "queues"):
            kubectl("delete", "crd", f"{plural}.scheduling.volcano.sh", "--ignore-not-found")
