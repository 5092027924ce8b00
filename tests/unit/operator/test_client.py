"""The client's own logic, against a fake API server: what it reads from pods and
conditions, how it says it, which API it finds a job under, and the CLI's exit codes.

The client against a real cluster: tests/e2e/test_client.py.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from support.checkout import ROOT

from tfjob_operator import cli
from tfjob_operator.apiserver.connection import Connection, TokenSource
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.client import TFJobClient, WaitTimedOut
from tfjob_operator.client import jobs as client_jobs
from tfjob_operator.client.commands import ExitCode, _duration
from tfjob_operator.client.report import age, describe, progress_line, table
from tfjob_operator.client.results import RESULT_PREFIX, results_in
from tfjob_operator.client.views import Replica, TFJob
from tfjob_trainer.results import RESULT_PREFIX as TRAINER_RESULT_PREFIX

NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)
UID = "uid-1"


def a_job(conditions: list[dict[str, Any]], api_version: str = "tfjob.dev/v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "TFJob",
        "metadata": {
            "name": "mnist",
            "namespace": "ml",
            "uid": UID,
            "creationTimestamp": "2026-11-26T11:58:30Z",
        },
        "spec": {
            "tfReplicaSpecs": {
                "Chief": {"replicas": 1, "template": {}},
                "Worker": {"replicas": 2, "template": {}},
            }
        },
        "status": {"conditions": conditions},
    }


def condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


CREATED = condition("Created", "True", "TFJobCreated", "created")
RUNNING = condition("Running", "True", "TFJobRunning", "running")
SUCCEEDED = condition("Succeeded", "True", "TFJobSucceeded", "done")


def a_pod(
    kind: str,
    index: int,
    phase: str = "Running",
    state: dict[str, Any] | None = None,
    *,
    restarts: int = 0,
    last: dict[str, Any] | None = None,
    kubeflow: bool = False,
    conditions: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    prefix = "training.kubeflow.org" if kubeflow else "tfjob.dev"
    container: dict[str, Any] = {
        "name": "tensorflow",
        "state": state if state is not None else {"running": {}},
        "restartCount": restarts,
    }
    if last:
        container["lastState"] = {"terminated": last}
    status: dict[str, Any] = {"phase": phase, "containerStatuses": [container]}
    if conditions:
        status["conditions"] = conditions
    if init:
        status["initContainerStatuses"] = init
    return {
        "metadata": {
            "name": f"mnist-{kind}-{index}",
            "uid": f"pod-{kind}-{index}",
            "labels": {f"{prefix}/replica-type": kind, f"{prefix}/replica-index": str(index)},
        },
        "spec": {"nodeName": "node-1"},
        "status": status,
    }


# -- views ------------------------------------------------------------------------------


def test_a_job_not_yet_running_gives_the_running_conditions_reason() -> None:
    refused = condition("Running", "False", "FailedCreatePod", "worker-0: HTTP 403: quota")
    job = TFJob(a_job([CREATED, refused]))
    assert (job.state, job.reason, job.message) == (
        "Created",
        "FailedCreatePod",
        "worker-0: HTTP 403: quota",
    )
    assert not job.finished
    done = TFJob(a_job([CREATED, {**RUNNING, "status": "False"}, SUCCEEDED]))
    assert (done.state, done.reason, done.finished, done.succeeded) == (
        "Succeeded",
        "TFJobSucceeded",
        True,
        True,
    )
    assert done.replica_counts == {"Chief": 1, "Worker": 2}


def test_a_replica_says_why_it_waits_or_ended() -> None:
    unscheduled = a_pod(
        "worker",
        1,
        "Pending",
        {},
        conditions=[condition("PodScheduled", "False", "Unschedulable", "0/1 nodes: gpu")],
    )
    assert Replica.of(unscheduled).summary == "Pending (Unschedulable)"
    assert Replica.of(unscheduled).message == "0/1 nodes: gpu"
    looping = a_pod(
        "worker",
        0,
        "Running",
        {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
        restarts=3,
        last={"reason": "Error", "exitCode": 1},
    )
    replica = Replica.of(looping)
    assert (replica.name, replica.pod) == ("worker-0", "mnist-worker-0")
    assert replica.summary == "Running (CrashLoopBackOff, exit code 1), 3 restart(s)"
    failed = a_pod("chief", 0, "Failed", {"terminated": {"reason": "Error", "exitCode": 2}})
    assert Replica.of(failed).summary == "Failed (Error, exit code 2)"
    done = a_pod("chief", 0, "Succeeded", {"terminated": {"reason": "Completed", "exitCode": 0}})
    assert Replica.of(done).summary == "Succeeded"
    initialising = a_pod(
        "worker",
        0,
        "Pending",
        {"waiting": {"reason": "PodInitializing"}},
        init=[{"name": "fetch", "state": {"waiting": {"reason": "ImagePullBackOff"}}}],
    )
    assert Replica.of(initialising).reason == "init container fetch: ImagePullBackOff"
    assert Replica.of(a_pod("worker", 2, kubeflow=True)).name == "worker-2"


# -- report -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(5, "5s"), (75, "1m15s"), (700, "11m"), (3600 * 2 + 60 * 5, "2h5m"), (86400 * 3, "3d")],
)
def test_ages_read_as_kubectls(seconds: float, text: str) -> None:
    assert age(seconds) == text


def test_the_progress_line_names_the_state_and_each_replica() -> None:
    job = TFJob(a_job([CREATED, RUNNING]))
    replicas = [
        Replica.of(a_pod("chief", 0)),
        Replica.of(a_pod("worker", 0, "Pending", {"waiting": {"reason": "ContainerCreating"}})),
    ]
    assert progress_line(job, replicas, 65) == (
        "mnist: Running [1m5s] | chief-0 Running, worker-0 Pending (ContainerCreating)"
    )
    assert progress_line(job, [], None) == "mnist: Running | no pods yet"


def test_the_table_has_kubectls_columns_and_the_api() -> None:
    jobs = [
        TFJob(a_job([CREATED, RUNNING])),
        TFJob(a_job([CREATED, SUCCEEDED], "kubeflow.org/v1")),
    ]
    lines = table(jobs, NOW).splitlines()
    assert lines[0].split() == ["NAME", "STATE", "AGE", "REASON", "API"]
    assert lines[1].split() == ["mnist", "Running", "1m30s", "TFJobRunning", "tfjob.dev/v1"]
    assert lines[2].split()[-1] == "kubeflow.org/v1"


def test_describe_says_why_with_exit_codes_events_and_the_failed_replicas_log() -> None:
    failed = condition("Failed", "True", "BackoffLimitExceeded", "worker-0 failed 4 times")
    job = TFJob(a_job([CREATED, failed]))
    replicas = [
        Replica.of(a_pod("chief", 0, "Succeeded", {"terminated": {"exitCode": 0}})),
        Replica.of(
            a_pod("worker", 0, "Failed", {"terminated": {"reason": "Error", "exitCode": 3}})
        ),
    ]
    events: list[dict[str, Any]] = [
        {
            "type": "Warning",
            "reason": "TFJobRestarting",
            "message": "worker-0 exited with code 3",
            "count": 3,
            "lastTimestamp": "2026-11-26T11:59:50Z",
            "involvedObject": {"name": "mnist"},
        },
        {
            "type": "Normal",
            "reason": "SuccessfulCreatePod",
            "message": "created",
            "lastTimestamp": "2026-11-26T11:58:31Z",
            "involvedObject": {"name": "mnist"},
        },
    ]
    text = describe(job, replicas, events, {"worker-0": ["Traceback", "ValueError: bad"]}, NOW)
    assert "State:      Failed (BackoffLimitExceeded: worker-0 failed 4 times)" in text
    assert "worker-0     Failed (Error, exit code 3) on node-1" in text
    assert "    log| ValueError: bad" in text
    # Events oldest first, the repeated one with its count.
    assert text.index("SuccessfulCreatePod") < text.index("TFJobRestarting (x3)")
    assert "10s ago  Warning TFJobRestarting (x3)  mnist: worker-0 exited with code 3" in text


def test_describe_says_where_the_replicas_stopped_and_that_the_job_resumed_from_it() -> None:
    body = a_job([CREATED, RUNNING])
    stop = {"step": 57, "epoch": 3, "stoppedAt": "2026-11-26T11:59:00Z"}
    body["status"]["checkpoint"] = stop
    assert (
        "Checkpoint: step 57 (epoch 3), written as the replicas stopped at 2026-11-26T11:59:00Z; "
        "the job resumes from it"
    ) in describe(TFJob(body), [], [], {}, NOW)
    body["status"]["checkpoint"] = {**stop, "resumedAt": "2026-11-26T11:59:40Z"}
    assert "; resumed from it at 2026-11-26T11:59:40Z" in describe(TFJob(body), [], [], {}, NOW)


# -- results ----------------------------------------------------------------------------


def test_results_lines_are_read_as_data_and_the_prefix_is_the_trainers() -> None:
    assert RESULT_PREFIX == TRAINER_RESULT_PREFIX
    log = [
        "epoch 12/12",
        RESULT_PREFIX + json.dumps({"accuracy": 0.95, "replicas": 2}),
        RESULT_PREFIX + '{"cut',
        RESULT_PREFIX + "[1]",
    ]
    assert results_in(log) == [{"accuracy": 0.95, "replicas": 2}]


# -- the client, against a fake API server ----------------------------------------------


class FakeRest:
    """Answers by path; records what was written."""

    def __init__(self, objects: Mapping[str, Any], logs: Mapping[str, str] | None = None) -> None:
        self.connection = Connection("https://api", True, TokenSource(), namespace="ml")
        self.objects = dict(objects)
        self.logs = dict(logs or {})
        self.written: list[tuple[str, str, Any]] = []
        #: Writes refused, by path, with the status the API server answers.
        self.refuse: dict[str, int] = {}

    def get(self, path: str, query: Any = None) -> Any:
        if path not in self.objects:
            raise ApiError(404, f"GET {path}", b'{"reason": "NotFound", "message": "not found"}')
        return self.objects[path]

    def text(self, path: str, query: Any = None) -> str:
        """A pod's log, kept with timestamps: without them when not asked for, as the
        API server answers."""
        if path not in self.logs:
            raise ApiError(400, f"GET {path}", b'{"message": "container is waiting to start"}')
        if (query or {}).get("timestamps"):
            return self.logs[path]
        return "".join(line.partition(" ")[2] + "\n" for line in self.logs[path].splitlines())

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        self.written.append((method, path, body))
        if path in self.refuse:
            raise ApiError(self.refuse[path], f"{method} {path}", b'{"reason": "AlreadyExists"}')
        if body is None:
            return {}
        return {**body, "metadata": {**body["metadata"], "uid": "new"}}

    @contextmanager
    def lines(self, path: str, query: Any = None) -> Iterator[Iterator[str]]:
        yield iter(self.text(path, query).splitlines())


KUBEFLOW_JOB = "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist"
PODS = "/api/v1/namespaces/ml/pods"


def client_of(rest: FakeRest) -> TFJobClient:
    return TFJobClient(rest=rest)  # type: ignore[arg-type]


def test_a_job_is_found_under_whichever_api_serves_it() -> None:
    rest = FakeRest({KUBEFLOW_JOB: a_job([CREATED], "kubeflow.org/v1")})
    assert client_of(rest).get("mnist").api_version == "kubeflow.org/v1"
    with pytest.raises(ApiError, match=r"no TFJob other in namespace ml \(looked in tfjob.dev/v1"):
        client_of(rest).get("other")


def test_create_takes_yaml_picks_the_api_and_keeps_namespaces_straight() -> None:
    rest = FakeRest({})
    client = client_of(rest)
    client.create("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {}\n")
    client.create({"kind": "TFJob", "metadata": {"name": "b", "namespace": "team"}, "spec": {}})
    assert [(method, path) for method, path, _ in rest.written] == [
        ("POST", "/apis/kubeflow.org/v1/namespaces/ml/tfjobs"),
        ("POST", "/apis/tfjob.dev/v1/namespaces/team/tfjobs"),
    ]
    with pytest.raises(ValueError, match="names namespace 'team', which does not match 'ml'"):
        client.create({"kind": "TFJob", "metadata": {"name": "c", "namespace": "team"}}, "ml")
    with pytest.raises(ValueError, match="apiVersion 'batch/v1'"):
        client.create({"apiVersion": "batch/v1", "kind": "TFJob", "metadata": {"name": "d"}})
    with pytest.raises(ValueError, match=r"expected one TFJob document \(and claims\), found \["):
        client.create("kind: TFJob\n---\nkind: TFJob\n")


def test_create_makes_the_claims_the_file_declares_first_and_keeps_one_that_exists() -> None:
    rest = FakeRest({})
    example = (ROOT / "examples" / "digits-mwms.yaml").read_text()
    client_of(rest).create(example)
    assert [(method, path) for method, path, _ in rest.written] == [
        ("POST", "/api/v1/namespaces/ml/persistentvolumeclaims"),
        ("POST", "/apis/tfjob.dev/v1/namespaces/ml/tfjobs"),
    ]
    rest.refuse = {"/api/v1/namespaces/ml/persistentvolumeclaims": 409}
    client_of(rest).create(example)
    assert rest.written[-1][1] == "/apis/tfjob.dev/v1/namespaces/ml/tfjobs"


def test_create_from_choices_is_what_new_writes() -> None:
    rest = FakeRest({})
    client_of(rest).create_from("digits", workers=3, train_args=["--epochs", "2"])
    ((_, path, body),) = rest.written
    assert path == "/apis/tfjob.dev/v1/namespaces/ml/tfjobs"
    worker = body["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3
    assert worker["template"]["spec"]["containers"][0]["args"][-2:] == ["--epochs", "2"]


def logs_of(kind: str, index: int) -> str:
    return f"/api/v1/namespaces/ml/pods/mnist-{kind}-{index}/log"


def test_logs_interleave_replicas_by_time_and_results_are_per_replica() -> None:
    rest = FakeRest(
        {
            KUBEFLOW_JOB: a_job([CREATED, SUCCEEDED], "kubeflow.org/v1"),
            PODS: {"items": [a_pod("worker", 0), a_pod("chief", 0)]},
        },
        {
            logs_of("chief", 0): "2026-11-26T11:59:01Z start\n2026-11-26T11:59:03Z "
            + RESULT_PREFIX
            + '{"accuracy": 0.97}\n',
            logs_of("worker", 0): "2026-11-26T11:59:02Z epoch 1/1\n",
        },
    )
    client = client_of(rest)
    assert [str(line) for line in client.logs("mnist")] == [
        "[chief-0] start",
        "[worker-0] epoch 1/1",
        f'[chief-0] {RESULT_PREFIX}{{"accuracy": 0.97}}',
    ]
    assert [line.text for line in client.logs("mnist", replica="worker-0")] == ["epoch 1/1"]
    assert client.results("mnist") == {"chief-0": {"accuracy": 0.97}}


def test_a_followed_log_ends_when_the_job_has_finished_and_every_stream_ended() -> None:
    rest = FakeRest(
        {
            KUBEFLOW_JOB: a_job([CREATED, SUCCEEDED], "kubeflow.org/v1"),
            PODS: {
                "items": [
                    a_pod("chief", 0, "Succeeded", {"terminated": {"exitCode": 0}}),
                    a_pod("worker", 0, "Pending", {"waiting": {"reason": "ContainerCreating"}}),
                ]
            },
        },
        {logs_of("chief", 0): "2026-11-26T11:59:01Z one\n2026-11-26T11:59:02Z two\n"},
    )
    lines = [str(line) for line in client_of(rest).logs("mnist", follow=True)]
    assert lines == ["[chief-0] one", "[chief-0] two"]


def test_wait_times_out_saying_what_it_waited_for_and_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_jobs, "POLL_SECONDS", 0.01)
    waiting = condition("Running", "False", "FailedCreatePod", "worker-0: HTTP 403: quota")
    rest = FakeRest(
        {KUBEFLOW_JOB: a_job([CREATED, waiting], "kubeflow.org/v1"), PODS: {"items": []}}
    )
    rest.objects["/api/v1/namespaces/ml/events"] = {"items": []}
    shown = io.StringIO()
    with pytest.raises(WaitTimedOut) as timed_out:
        client_of(rest).wait("mnist", timeout=0.05, progress=shown)
    message = str(timed_out.value)
    assert message.startswith("TFJob ml/mnist is not Succeeded or Failed after 0.05 s:")
    assert "State:      Created (FailedCreatePod: worker-0: HTTP 403: quota)" in message
    # Not a terminal: the progress line is printed once, not once per poll.
    assert shown.getvalue().splitlines() == [
        "mnist: Created (FailedCreatePod: worker-0: HTTP 403: quota) | no pods yet"
    ]


# -- the CLI ----------------------------------------------------------------------------


def test_durations_read_as_kubectls() -> None:
    assert [_duration(text) for text in ("90", "90s", "2m", "1.5h")] == [90, 90, 120, 5400]


def test_a_usage_error_exits_3_not_a_job_outcomes_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["wait"])
    assert exited.value.code == ExitCode.ERROR
    assert int(ExitCode.ERROR) == 3
    assert "the following arguments are required: name" in capsys.readouterr().err


def test_an_unreachable_api_server_exits_3_and_says_where(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config"
    config.write_text(
        json.dumps(
            {
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {}}],
            }
        )
    )
    assert cli.main(["get", "--kubeconfig", str(config)]) == ExitCode.ERROR
    assert "http://127.0.0.1:9" in capsys.readouterr().err


def test_run_without_the_controller_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client's install (no [controller] extra) has no aiohttp: `run` says so."""
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # an import of it fails
    for module in ("kube", "leader", "operator_main", "watchcache", "controller", "endpoints"):
        monkeypatch.delitem(sys.modules, f"tfjob_operator.{module}", raising=False)
    assert cli.main(["run"]) == ExitCode.ERROR
    assert "pip install 'tfjob-operator[controller]'" in capsys.readouterr().err


#: A fresh interpreter in which the controller's extra is not installed: importing any of
#: its packages fails, as in `pip install tfjob-operator` alone.
WITHOUT_CONTROLLER = """
import sys
from importlib.abc import MetaPathFinder
class Absent(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"aiohttp", "orjson", "prometheus_client", "cryptography"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Absent())
from tfjob_operator import cli
sys.exit(cli.main(sys.argv[2:], prog=sys.argv[1]))
"""


@pytest.mark.parametrize(
    ("prog", "words", "printed"),
    [
        ("tfjob-operator", ["render", "-f", "examples/digits-mwms.yaml"], "TF_CONFIG"),
        ("tfjob-operator", ["new", "digits", "--workers", "2"], "kind: TFJob"),
        ("tfjob-operator", ["completion", "zsh"], "compdef _tfjob_operator"),
        ("tfjob-operator", ["__complete", "get", "-o", "y"], "yaml\n:4"),
        ("kubectl tfjob", ["--help"], "usage: kubectl tfjob"),
    ],
)
def test_the_cli_runs_in_the_clients_install_without_the_controllers_dependencies(
    prog: str, words: list[str], printed: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_CONTROLLER, prog, *words],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert printed in done.stdout


def test_tensorboard_says_why_a_job_has_none() -> None:
    path = "/apis/tfjob.dev/v1/namespaces/ml/tfjobs/mnist"
    cases = [
        (a_job([CREATED]), "it asks for none (spec.tensorboard, or the tfjob.dev/tensorboard"),
        (
            {**a_job([CREATED]), "spec": {"tensorboard": {"logDir": "/logs"}}},
            "it starts with the job, which is Created",
        ),
        (
            {
                **a_job([CREATED]),
                "status": {"tensorboard": {"message": "logDir /logs is on no volume"}},
            },
            "logDir /logs is on no volume",
        ),
    ]
    for body, why in cases:
        with pytest.raises(
            ValueError, match=re.escape(f"TFJob ml/mnist has no TensorBoard: {why}")
        ):
            client_of(FakeRest({path: body})).tensorboard("mnist")
