"""The Python client and the CLI drive whole TFJobs on the chart-installed operator, on
every backend: real TensorFlow through the client only (create, follow the logs, wait,
read the results, describe, delete), and the CLI's exit codes for a job that succeeds
(written by `new`, submitted with `--wait`), one that fails and a wait that times out;
and the notebook-style example the README points to.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from support.backends import Backend
from support.builders import shell_replica, tfjob
from support.examples import example, run_python_example, set_args
from support.tfjobs import TFJobs

from tfjob_localcluster.images.catalog import TRAINER
from tfjob_operator.client import ApiError, LogLine, TFJobClient
from tfjob_operator.client.commands import ExitCode

TRAINING_TIMEOUT = 420
#: The CLI as installed: the console script beside this Python.
CLI = str(Path(sys.executable).parent / "tfjob-operator")
#: The example's line for one replica's results.
RESULT_LINE = re.compile(r"(worker-\d+): accuracy [01]\.\d{3}, loss \d+\.\d{3}$")


def test_a_job_through_the_client_only(backend: Backend, tfjobs: TFJobs) -> None:
    client = TFJobClient(tfjobs.namespace, kubeconfig=backend.kubeconfig)
    job = set_args(example("digits-mwms.yaml"), ["--epochs", "3"])
    # Both workers' logs and results are read after the job: it waits for both.
    job["spec"]["successPolicy"] = "AllWorkers"
    tfjobs.create_claims(job)  # the example's claim (create() of a dict makes none)
    created = client.create(job)
    assert (created.api_version, created.namespace) == ("tfjob.dev/v1", tfjobs.namespace)

    # Followed from the start, in a thread, while the main thread waits with progress.
    followed: list[LogLine] = []
    follower = threading.Thread(
        target=lambda: followed.extend(client.logs("digits-mwms", follow=True)), daemon=True
    )
    follower.start()
    progress = io.StringIO()
    finished = client.wait("digits-mwms", timeout=TRAINING_TIMEOUT, progress=progress)
    assert finished.succeeded, client.describe("digits-mwms")
    follower.join(timeout=60)
    assert not follower.is_alive(), "the followed log did not end after the job finished"

    # Both replicas' lines, each replica's in the order it wrote them, ending in results.
    for replica in ("worker-0", "worker-1"):
        texts = [line.text for line in followed if line.replica == replica]
        epochs = [t for t in texts if " epoch " in f" {t}" and "/3" in t]
        assert epochs, f"{replica}: no epoch lines in the followed log: {texts[-5:]}"
        assert texts[-1].startswith("TFJOB_RESULT "), texts[-3:]
    assert [str(line) for line in client.logs("digits-mwms", replica="worker-1")] == [
        str(line) for line in followed if line.replica == "worker-1"
    ]
    # One line per change (not a terminal): the phases as they came, ending Succeeded.
    shown = progress.getvalue().splitlines()
    assert "digits-mwms: Running | worker-0 Running, worker-1 Running" in shown, shown
    assert shown[-1].startswith("digits-mwms: Succeeded | "), shown
    assert len(shown) == len(set(shown)), shown

    results = client.results("digits-mwms")
    assert set(results) == {"worker-0", "worker-1"}
    assert {r["replicas"] for r in results.values()} == {2}
    assert results["worker-0"]["strategy"] == "multi-worker-mirrored"
    assert results["worker-0"]["epochs"] == 3

    described = client.describe("digits-mwms")
    assert "State:      Succeeded" in described
    assert "TFJobSucceeded" in described.split("Events:")[1]
    assert [job.name for job in client.list()] == ["digits-mwms"]

    client.delete("digits-mwms", wait=True)
    with pytest.raises(ApiError) as gone:
        client.get("digits-mwms")
    assert gone.value.not_found
    assert not tfjobs.pods("digits-mwms")


def cli(
    backend: Backend, namespace: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args, "--kubeconfig", backend.kubeconfig, "-n", namespace],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TRAINING_TIMEOUT + 60,
        check=False,
    )


def test_the_cli_exit_codes_say_succeeded_failed_and_timed_out(
    backend: Backend, tfjobs: TFJobs, tmp_path: Path
) -> None:
    ns = tfjobs.namespace
    written = subprocess.run(
        [
            CLI,
            "new",
            "digits",
            "--workers",
            "1",
            "--image",
            TRAINER,
            "--train-arg=--epochs",
            "--train-arg=2",
            "-o",
            str(tmp_path / "digits.yaml"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert written.returncode == 0, written.stderr
    done = cli(
        backend, ns, "submit", "-f", str(tmp_path / "digits.yaml"), "--wait", "--timeout", "7m"
    )
    assert done.returncode == ExitCode.SUCCEEDED, done.stderr
    assert done.stdout.splitlines() == ["tfjob.tfjob.dev/digits created", "digits: Succeeded"]
    logs = cli(backend, ns, "logs", "digits", "--replica", "worker-0")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines()[-1].startswith("[worker-0] TFJOB_RESULT "), logs.stdout[-500:]
    assert "\033[" not in logs.stdout  # no colour when piped

    failing = tfjob("crash", {"Worker": shell_replica("echo giving up; exit 3", policy="Never")})
    failing["spec"]["runPolicy"] = {"backoffLimit": 0}
    failed = cli(backend, ns, "submit", "-f", "-", "--follow", stdin=_yaml(failing))
    assert failed.returncode == ExitCode.FAILED, failed.stderr
    assert "[worker-0] giving up" in failed.stdout.splitlines()
    assert failed.stdout.splitlines()[-1].startswith("crash: Failed")
    # The kubelet's phase may trail the container's exit the operator acted on.
    tfjobs.wait_pods(
        "crash", lambda pods: [p["status"]["phase"] for p in pods] == ["Failed"], "worker-0 Failed"
    )
    described = cli(backend, ns, "describe", "crash")
    assert described.returncode == 0, described.stderr
    assert "worker-0     Failed (Error, exit code 3)" in described.stdout, described.stdout
    assert "    log| giving up" in described.stdout, described.stdout

    slow = tfjob("slow", {"Worker": shell_replica("sleep 600")})
    assert cli(backend, ns, "submit", "-f", "-", stdin=_yaml(slow)).returncode == 0
    timed_out = cli(backend, ns, "wait", "slow", "--timeout", "3s")
    assert timed_out.returncode == ExitCode.TIMED_OUT
    assert "TFJob " + ns + "/slow is not Succeeded or Failed after 3 s" in timed_out.stderr
    running = cli(backend, ns, "wait", "slow", "--for", "Running", "--timeout", "2m")
    assert running.returncode == 0, running.stderr

    listed = cli(backend, ns, "get")
    assert [line.split()[:2] for line in listed.stdout.splitlines()] == [
        ["NAME", "STATE"],
        ["crash", "Failed"],
        ["digits", "Succeeded"],
        ["slow", "Running"],
    ]
    assert cli(backend, ns, "delete", "slow", "--wait").returncode == 0
    missing = cli(backend, ns, "get", "slow")
    assert missing.returncode == ExitCode.ERROR
    assert f"no TFJob slow in namespace {ns}" in missing.stderr


def _yaml(job: object) -> str:
    return yaml.safe_dump(job)


def test_the_notebook_example_runs_as_a_script(backend: Backend, tfjobs: TFJobs) -> None:
    """examples/python/train_digits.py, as the README points to it."""
    done = run_python_example(
        "train_digits.py", backend.kubeconfig, tfjobs.namespace, TRAINING_TIMEOUT
    )
    lines = done.stdout.splitlines()
    assert lines[1] == "created tfjob.dev/v1 digits"
    assert any(line.startswith("[worker-1] ") and "epoch 5/5" in line for line in lines)
    reported = {m[1] for m in map(RESULT_LINE.match, lines) if m}
    assert "worker-0" in reported, lines[-10:]
    if "worker-1" not in reported:
        # Still running when worker 0 succeeded: stopped by cleanPodPolicy Running.
        deleted = [
            e["message"] for e in tfjobs.events("digits") if e["reason"] == "SuccessfulDeletePod"
        ]
        assert any("digits-worker-1" in m and "cleanPodPolicy Running" in m for m in deleted), (
            f"worker-1 reported no result and was not cleaned up: {deleted}\n{lines[-10:]}"
        )
    assert not tfjobs.exists("digits")
