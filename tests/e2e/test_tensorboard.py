"""A TFJob with a PersistentVolumeClaim and a TensorBoard, on every backend: the claim is
provisioned by the cluster's default StorageClass, the job trains on it, its TensorBoard
reads the logs the chief writes there, `status.tensorboard` gives an address that serves
inside the cluster, the client's port-forward and `tfjob-operator tensorboard` serve it on
localhost, and headless Chromium sees the loss curve grow while the job trains and
whole, with the last epoch's value, once it has ended. The TensorBoard goes
ttlSecondsAfterFinished after the end. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from support import browser, summary
from support.backends import Backend
from support.browser import chromium, poll_page, screenshot
from support.examples import example, set_args
from support.tfjobs import TFJobs
from support.waiting import wait_until

from tfjob_localcluster.images.catalog import TRAINER
from tfjob_operator.client import TFJobClient

NAME = "digits-tb"
#: Enough for the browser to see the curve while the job trains, with room to spare: it
#: first saw 3 to 5 epochs in a warm `make test`, 4 alone on the machine (an epoch takes
#: about a second); the test prints what it saw in the section below.
EPOCHS = 24
#: The pytest output's section (support/summary.py) with the epochs the curve showed while
#: the job trained, on each backend.
WHILE_TRAINING = "TensorBoard: epochs on the curve while the job trained"
TTL_SECONDS = 20
TRAINING_TIMEOUT = 420
#: The CLI as installed: the console script beside this Python.
CLI = str(Path(sys.executable).parent / "tfjob-operator")
#: The time series page, its charts drawn as SVG (TensorBoard's own switch) so the test
#: can read the curve, showing the loss only.
PAGE = "?forceSVG=true&tagFilter=epoch_loss#timeseries"
#: A GET from inside the cluster (busybox's static wget cannot resolve cluster names).
FETCH = (
    "import sys, urllib.request; "
    "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
)


@dataclass(frozen=True)
class LossCard:
    """What the epoch_loss chart shows: the vertices of its curve, and the last point of
    its table (step and value)."""

    vertices: int
    step: int
    value: float


def loss_card(driver: WebDriver) -> LossCard | None:
    """The epoch_loss card of TensorBoard's time series page, once it draws a curve."""
    for card in driver.find_elements(By.CSS_SELECTOR, "scalar-card"):
        lines = card.text.splitlines()
        if not lines or lines[0] != "epoch_loss" or "Relative" not in lines:
            continue
        curves = [
            d
            for path in card.find_elements(By.CSS_SELECTOR, "line-chart svg path")
            if (d := path.get_attribute("d") or "").startswith("M") and "L" in d
            and not d.startswith("M0 0h24")  # the card's icons
        ]  # fmt: skip
        row = lines[lines.index("Relative") + 1 :]
        if not curves or len(row) < 4 or row[0] != "train":
            continue
        return LossCard(max(d.count("L") + 1 for d in curves), int(row[3]), float(row[2]))
    return None


def served_in_cluster(core: client.CoreV1Api, namespace: str, url: str) -> str:
    """What `url` answers to a pod of the cluster (the trainer image's Python)."""
    name = f"fetch-{int(time.monotonic() * 1000) % 100000}"
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "fetch",
                        "image": TRAINER,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["python", "-c", FETCH, url],
                    }
                ],
            },
        },
    )
    phase = wait_until(
        lambda: core.read_namespaced_pod(name, namespace).status.phase,
        60,
        lambda phase: f"the pod fetching {url} to end; it is {phase}",
        until=lambda phase: phase in ("Succeeded", "Failed"),
        interval=0.5,
    )
    log: str = core.read_namespaced_pod_log(name, namespace)
    assert phase == "Succeeded", f"wget {url} failed: {log}"
    return log


@pytest.fixture(scope="module")
def browser_installed() -> None:
    """Chromium, installed before the job starts: on a fresh machine its install outlasts
    the training the test watches."""
    browser.install()


def test_a_job_on_a_claim_with_its_tensorboard(
    backend: Backend, tfjobs: TFJobs, tmp_path: Path, browser_installed: None
) -> None:
    job = set_args(example("digits-tensorboard.yaml"), ["--epochs", str(EPOCHS)])
    job["spec"]["tensorboard"]["ttlSecondsAfterFinished"] = TTL_SECONDS
    tfjobs.create(job)  # and its claim, from the example's file
    running = tfjobs.wait_for(
        NAME,
        lambda j: bool(((j.get("status") or {}).get("tensorboard") or {}).get("ready")),
        "status.tensorboard.ready",
        TRAINING_TIMEOUT,
    )
    board = running["status"]["tensorboard"]
    assert board["url"] == f"http://{NAME}-tensorboard.{tfjobs.namespace}.svc:6006/"
    core = client.CoreV1Api(backend.api_client)
    claim = core.read_namespaced_persistent_volume_claim("tfjob-data", tfjobs.namespace)
    assert claim.status.phase == "Bound"
    assert claim.spec.storage_class_name == "standard", "the default StorageClass"

    # The address in the status serves TensorBoard inside the cluster.
    assert "<title>TensorBoard</title>" in served_in_cluster(core, tfjobs.namespace, board["url"])

    client_ = TFJobClient(tfjobs.namespace, kubeconfig=backend.kubeconfig)
    with client_.tensorboard(NAME) as forward, chromium(tmp_path / "browser") as driver:
        page = forward.url + PAGE
        # While the job trains: a curve of some epochs, not all.
        growing = poll_page(
            driver,
            page,
            lambda d: card if (card := loss_card(d)) and card.vertices >= 2 else None,
            TRAINING_TIMEOUT,
            "the epoch_loss curve (two epochs or more)",
        )
        screenshot(driver, f"tensorboard-{backend.name}-training.png")
        state = tfjobs.get(NAME)["status"]["state"]
        assert state == "Running", f"the job was {state} already: not seen while it trains"
        assert growing.vertices < EPOCHS
        summary.add(WHILE_TRAINING, f"{backend.name}: {growing.vertices} of {EPOCHS}")

        done = tfjobs.wait_state(NAME, "Succeeded", TRAINING_TIMEOUT)
        remove_after = done["status"]["tensorboard"]["removeAfter"]
        assert remove_after > done["status"]["completionTime"]
        result = client_.results(NAME)["worker-0"]
        # After the end: the whole curve, its last point the chief's final training loss.
        final = poll_page(
            driver,
            page,
            lambda d: card if (card := loss_card(d)) and card.step == EPOCHS - 1 else None,
            60,
            f"the curve up to epoch {EPOCHS - 1}",
        )
        screenshot(driver, f"tensorboard-{backend.name}-finished.png")
        assert final.vertices == EPOCHS
        assert final.value == pytest.approx(result["train_loss"], abs=6e-5)

    # The CLI serves it too, on the port it prints, until it is stopped.
    command = [CLI, "tensorboard", NAME, "-n", tfjobs.namespace, "--port", "0"]
    command += ["--kubeconfig", backend.kubeconfig]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as cli:
        assert cli.stdout is not None
        printed = cli.stdout.readline()
        assert printed.startswith(f"TensorBoard of {tfjobs.namespace}/{NAME}: http://127.0.0.1:")
        url = printed.rsplit(" ", 1)[1].strip()
        with urllib.request.urlopen(url, timeout=30) as page:
            assert "<title>TensorBoard</title>" in page.read().decode()
        cli.terminate()

    # ttlSecondsAfterFinished later, the TensorBoard is gone and the status says nothing of it.
    apps = client.AppsV1Api(backend.api_client)
    gone = tfjobs.wait_for(
        NAME,
        lambda j: "tensorboard" not in (j.get("status") or {}),
        "status.tensorboard removed",
        TTL_SECONDS + 60,
    )
    assert gone["status"]["state"] == "Succeeded"
    names = [d.metadata.name for d in apps.list_namespaced_deployment(tfjobs.namespace).items]
    services = [s.metadata.name for s in core.list_namespaced_service(tfjobs.namespace).items]
    assert f"{NAME}-tensorboard" not in names + services
    reasons = [e.reason for e in core.list_namespaced_event(tfjobs.namespace).items]
    assert reasons.count("TensorBoardCreated") == 1
    assert reasons.count("TensorBoardRemoved") == 1
