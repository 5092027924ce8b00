"""A Python function becomes a TFJob (`TFJobClient.train`): its source travels in a
ConfigMap, the trainer image runs it under the strategy TF_CONFIG implies, its return
value comes back as the replica's result. Real TensorFlow in containers, on each backend.
Its packages come from an index inside the cluster (support/package_index.py); where no
index answers, the job fails with uv's words.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.backends import Backend
from support.examples import run_python_example
from support.package_index import (
    GREETING,
    PROJECT,
    index_objects,
    index_url,
    init_seconds,
)
from support.tfjobs import TFJobs, condition

from tfjob_operator.client import TFJobClient
from tfjob_operator.client.shipping import UnshippableError

log = logging.getLogger(__name__)

TRAINING_TIMEOUT = 900
#: A function that only imports its package: the pods' start, TensorFlow's import.
FUNCTION_TIMEOUT = 300
#: The CLI as installed: the console script beside this Python.
CLI = str(Path(sys.executable).parent / "tfjob-operator")
#: A file of functions as a user writes one for `submit --train`.
FUNCTIONS_FILE = """\
SCALE = 2


def replicas_seen(ctx):
    return {"replicas_seen": ctx.num_replicas * SCALE // SCALE, "task": ctx.task_type}


refused = lambda ctx: None  # noqa: E731
"""
#: An address where nothing listens: no index answers.
NO_INDEX = "http://127.0.0.1:9/simple"


def greet(ctx: Any) -> dict[str, str]:
    """Returns what the package installed for it says."""
    import tfjob_e2e_greeting  # type: ignore[import-not-found]

    return {"greeting": tfjob_e2e_greeting.greeting()}


@pytest.fixture
def package_index(tfjobs: TFJobs) -> str:
    """The URL of an index in the test's namespace that serves PROJECT, once it answers."""
    core = f"/api/v1/namespaces/{tfjobs.namespace}"
    for made in index_objects(tfjobs.namespace):
        tfjobs.rest.request("POST", f"{core}/{made['kind'].lower()}s", made)
    name = index_objects(tfjobs.namespace)[1]["metadata"]["name"]
    tfjobs.poll(
        name,
        lambda: tfjobs.rest.get(f"{core}/pods/{name}"),
        lambda pod: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod.get("status", {}).get("conditions") or []
        ),
        "the package index ready",
        120,
    )
    return index_url(tfjobs.namespace)


def test_the_function_example_trains_with_mwms_and_with_pss(
    backend: Backend, tfjobs: TFJobs
) -> None:
    """examples/python/train_function.py, run as a script: the same function trains a
    Keras model under MultiWorkerMirroredStrategy and under ParameterServerStrategy."""
    done = run_python_example(
        "train_function.py", backend.kubeconfig, tfjobs.namespace, TRAINING_TIMEOUT
    )
    reported: dict[str, dict[str, Any]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("results of "):
            name, _, text = line.removeprefix("results of ").partition(": ")
            reported[name] = json.loads(text)
    mwms, pss = reported["digits-mwms"], reported["digits-pss"]
    assert mwms["worker-0"]["strategy"] == "multi-worker-mirrored"
    assert mwms["worker-0"]["replicas"] == 2
    assert mwms["worker-0"]["accuracy"] >= 0.9, mwms
    assert pss["chief-0"]["strategy"] == "parameter-server"
    assert pss["chief-0"]["accuracy"] >= 0.9, pss
    for name in reported:
        assert not tfjobs.exists(name)


def test_a_function_that_cannot_travel_creates_nothing(backend: Backend, tfjobs: TFJobs) -> None:
    client = TFJobClient(tfjobs.namespace, kubeconfig=backend.kubeconfig)
    model = object()

    def fit(ctx: Any) -> dict[str, str]:
        return {"model": str(model)}

    with pytest.raises(UnshippableError, match="closes over model"):
        client.train(fit, name="closure")
    with pytest.raises(UnshippableError, match="cannot ship a lambda"):
        client.train(lambda ctx: None, name="lambda")
    assert client.list() == []


def test_a_functions_packages_are_installed_from_the_index_it_names(
    backend: Backend, tfjobs: TFJobs, package_index: str
) -> None:
    client = TFJobClient(tfjobs.namespace, kubeconfig=backend.kubeconfig)
    started = time.monotonic()
    client.train(greet, workers=1, packages=[PROJECT], package_index=package_index)
    tfjobs.wait_state("greet", "Succeeded", FUNCTION_TIMEOUT)
    took = time.monotonic() - started
    assert client.results("greet")["worker-0"]["greeting"] == GREETING
    (pod,) = tfjobs.pods("greet")
    installing = init_seconds(pod, "install-packages")
    assert installing is not None
    log.info(
        "%s: %s installed in %.0f s of a %.0f s job (uv, one wheel)",
        backend.name, PROJECT, installing, took,
    )  # fmt: skip


def test_a_function_whose_packages_no_index_serves_fails_with_uvs_words(
    backend: Backend, tfjobs: TFJobs
) -> None:
    client = TFJobClient(tfjobs.namespace, kubeconfig=backend.kubeconfig)
    client.train(greet, name="offline", workers=1, packages=[PROJECT], package_index=NO_INDEX)
    failed = condition(tfjobs.wait_state("offline", "Failed", FUNCTION_TIMEOUT), "Failed")
    log.info("%s: %s", backend.name, failed["message"])
    assert failed["reason"] == "ReplicaFailed"
    assert "worker-0 init container install-packages exited with code 2" in failed["message"]
    assert "127.0.0.1:9" in failed["message"]
    assert "not retryable" in failed["message"]


def test_the_command_line_submits_a_function_from_a_file(
    backend: Backend, tfjobs: TFJobs, tmp_path: Path
) -> None:
    """`tfjob-operator submit --train FILE.py:FUNCTION --wait`, as in a terminal."""
    functions = tmp_path / "functions.py"
    functions.write_text(FUNCTIONS_FILE)
    common = ["-n", tfjobs.namespace, "--kubeconfig", backend.kubeconfig]

    def submit(function: str, *flags: str) -> subprocess.CompletedProcess[str]:
        argv = [CLI, "submit", "--train", f"{functions}:{function}", *flags, *common]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=FUNCTION_TIMEOUT, check=False
        )

    done = submit("replicas_seen", "--workers", "2", "--wait", "--timeout", "240")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "tfjob.tfjob.dev/replicas-seen created" in done.stdout
    results = TFJobClient(tfjobs.namespace, kubeconfig=backend.kubeconfig).results("replicas-seen")
    assert {name: r["replicas_seen"] for name, r in results.items()} == {
        "worker-0": 2,
        "worker-1": 2,
    }
    refused = submit("refused")
    assert refused.returncode == 3
    assert "cannot ship a lambda" in refused.stderr
    assert not tfjobs.exists("refused")
