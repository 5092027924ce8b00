"""`TFJobClient`: submit a TFJob, follow it, read its results, from a notebook or a script.

    from tfjob_operator.client import TFJobClient

    tfjobs = TFJobClient()                          # the kubeconfig's context and namespace
    tfjobs.create("examples/digits-mwms.yaml")       # or a dict, YAML text, create_from(...)
    for line in tfjobs.logs("digits-mwms", follow=True):
        print(line)                                 # "[worker-1] epoch 3/12 ..."
    job = tfjobs.wait("digits-mwms", timeout=600)    # a progress line while it waits
    print(job.state, tfjobs.results("digits-mwms")["worker-0"]["accuracy"])
    tfjobs.delete("digits-mwms")

It serves `tfjob.dev/v1` and `kubeflow.org/v1` TFJobs alike: a job is created under the
API its `apiVersion` names, and found by name under whichever serves it (tfjob.dev first).
Every call is synchronous and reads the API server directly (no cache): a few requests a
second at most, each answered within `rest.TIMEOUT_SECONDS`.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import yaml

from .. import scaffold
from ..api import (
    APIS,
    CONTAINER_NAME,
    KIND,
    KUEUE_JOB_UID_LABEL,
    KUEUE_WORKLOADS_PATH,
    LABEL_CONTROLLER_UID,
    LABEL_TENSORBOARD_OF,
    PLURAL,
    TENSORBOARD_ANNOTATION,
    TENSORBOARD_PORT,
    TFJobApi,
    api_of,
)
from ..apiserver.errors import ApiError
from ..apiserver.sync import Rest
from ..timeutil import now
from . import report
from .forward import PortForward
from .function_job import function_job, function_job_name, owned_config_map
from .results import results_in
from .shipping import ship
from .views import FINISHED, Dispatch, Replica, TFJob, training_container_status

#: How often `wait` and a followed log look at the job and its pods.
POLL_SECONDS: Final = 1.0


class WaitTimedOut(TimeoutError):
    """`wait` gave up; the message says what it waited for and what the job was doing."""

    def __init__(self, message: str, job: TFJob) -> None:
        super().__init__(message)
        self.job = job


@dataclasses.dataclass(frozen=True)
class LogLine:
    """One line of a replica's log; `str()` prefixes it with the replica (`[worker-1] ...`)."""

    replica: str
    text: str
    #: When the container wrote it (RFC 3339, the kubelet's clock).
    time: str = ""

    def __str__(self) -> str:
        return f"[{self.replica}] {self.text}"


class TFJobClient:
    """TFJobs in one cluster, through its API server (see the module docstring)."""

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        rest: Rest | None = None,
    ) -> None:
        """`kubeconfig` and `context` as kubectl takes them (default: $KUBECONFIG or
        ~/.kube/config at its current context; in a pod, its service account). `namespace`
        defaults to the context's, as kubectl's does."""
        self.rest = rest or Rest.of_kubeconfig(kubeconfig, context)
        self.namespace = namespace or self.rest.connection.namespace

    # -- create ---------------------------------------------------------------------------

    def create(self, job: Mapping[str, Any] | str | Path, namespace: str | None = None) -> TFJob:
        """Creates a TFJob from a dict, a YAML file's path, or YAML text. Its `apiVersion`
        picks the API (tfjob.dev/v1 when it names none). YAML may also declare the
        PersistentVolumeClaims the job mounts (as `tfjob-operator new --pvc-size` writes
        them): they are created first, and one that exists is left as it is."""
        claims, body = _documents(job)
        metadata = body.setdefault("metadata", {})
        own = metadata.get("namespace")
        if namespace and own and own != namespace:
            raise ValueError(
                f"the TFJob names namespace {own!r}, which does not match {namespace!r}"
            )
        metadata["namespace"] = namespace or own or self.namespace
        api = _api_of(body)
        for claim in claims:
            self._create_claim(claim, metadata["namespace"])
        created = self.rest.request("POST", _jobs_path(api, metadata["namespace"]), body)
        return TFJob(created)

    def _create_claim(self, claim: dict[str, Any], namespace: str) -> None:
        claim_namespace = (claim.get("metadata") or {}).get("namespace") or namespace
        try:
            self.rest.request(
                "POST", f"/api/v1/namespaces/{claim_namespace}/persistentvolumeclaims", claim
            )
        except ApiError as error:
            if error.status != 409:
                raise

    def create_from(self, name: str, namespace: str | None = None, **choices: Any) -> TFJob:
        """Creates the TFJob `tfjob-operator new` would write: `workers=2, strategy="pss",
        ps=1, evaluator=True, gpus=1, image=..., train_args=["--epochs", "5"]`, ... (the
        fields of scaffold.Choices, `train_args` for its extra_args)."""
        if "train_args" in choices:
            choices["extra_args"] = tuple(choices.pop("train_args"))
        text = scaffold.render(
            scaffold.choices(name, **choices), f"TFJobClient.create_from({name!r}, ...)"
        )
        scaffold.validate_rendered(text)
        return self.create(text, namespace)

    def train(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        workers: int = 2,
        ps: int = 0,
        chief: bool = False,
        evaluator: bool = False,
        strategy: str | None = None,
        packages: Sequence[str] = (),
        package_index: str | None = None,
        resources: Mapping[str, Any] | None = None,
        image: str | None = None,
        trainer_args: Sequence[str] = (),
        args: Sequence[str] = (),
        namespace: str | None = None,
        **choices: Any,
    ) -> TFJob:
        """Runs `function(ctx)` in a new TFJob, as `tfjob-train --entrypoint` runs a
        function: under the strategy TF_CONFIG implies ("mwms", or "pss" when `ps` > 0),
        with `ctx.strategy`, `ctx.task_type`, `ctx.is_chief`, ... Its source travels in a
        ConfigMap (client/shipping.py says what can travel; UnshippableError, a
        ValueError, names what cannot, before anything is created); `packages` are
        installed when each pod starts, from `package_index` if given, else PyPI
        (client/function_job.py). Its return value is the
        replica's result (`results`), its prints its log (`logs`). `trainer_args` are
        tfjob-train's flags (`["--epochs", "3"]`), `args` reach the function as
        `ctx.options.entrypoint_args`; the other choices are `create_from`'s (`pvc=`,
        with `pvc_size=` the claim is created unless it exists, `gpus=`, `tensorboard=`,
        ...). The job is named after the function unless `name` is given."""
        shipped = ship(function)
        extra = (*trainer_args, *(("--", *args) if args else ()))
        chosen = scaffold.choices(
            name or function_job_name(shipped.function),
            strategy=strategy or ("pss" if ps else "mwms"),
            workers=workers,
            ps=ps or None,
            chief=chief,
            evaluator=evaluator,
            image=image,
            extra_args=extra,
            **choices,
        )
        job, config_map, claims = function_job(
            chosen, shipped, packages=packages, package_index=package_index, resources=resources
        )
        for claim in claims:
            self._create_claim(claim, namespace or self.namespace)
        created = self.create(job, namespace)
        try:
            self.rest.request(
                "POST",
                f"/api/v1/namespaces/{created.namespace}/configmaps",
                owned_config_map(config_map, created.object),
            )
        except ApiError:
            # A job whose function never arrives would wait for it forever.
            self.rest.request("DELETE", _jobs_path(_api_of(job), created.namespace, created.name))
            raise
        return created

    # -- read -----------------------------------------------------------------------------

    def get(self, name: str, namespace: str | None = None) -> TFJob:
        """The TFJob named `name`, under whichever API serves one (tfjob.dev first)."""
        namespace = namespace or self.namespace
        for api in APIS:
            try:
                return TFJob(self.rest.get(_jobs_path(api, namespace, name)))
            except ApiError as error:
                if not error.not_found:
                    raise
        looked = ", ".join(api.api_version for api in APIS)
        answer = {
            "reason": "NotFound",
            "message": f"no TFJob {name} in namespace {namespace} (looked in {looked})",
        }
        raise ApiError(404, f"TFJob {name}", json.dumps(answer).encode())

    def list(
        self, namespace: str | None = None, *, all_namespaces: bool = False
    ) -> builtins.list[TFJob]:
        """TFJobs of both APIs (an API whose CRD is not installed has none), by name."""
        jobs = []
        for api in APIS:
            path = (
                f"{api.path}/{PLURAL}"
                if all_namespaces
                else _jobs_path(api, namespace or self.namespace)
            )
            try:
                listed = self.rest.get(path)
            except ApiError as error:
                if error.not_found:
                    continue
                raise
            for item in listed.get("items") or []:
                item.setdefault("apiVersion", api.api_version)
                jobs.append(TFJob(item))
        return sorted(jobs, key=lambda job: (job.namespace, job.name, job.api_version))

    def replicas(self, job: TFJob | str, namespace: str | None = None) -> builtins.list[Replica]:
        """The job's pods, as replicas, in the order of the job's replica types."""
        job = job if isinstance(job, TFJob) else self.get(job, namespace)
        return [Replica.of(pod) for pod in self._pods(job)]

    def events(
        self, job: TFJob | str, namespace: str | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Events about the job and its pods, oldest first."""
        job = job if isinstance(job, TFJob) else self.get(job, namespace)
        return self._events(job, self._pods(job))

    def _events(
        self, job: TFJob, pods: Sequence[Mapping[str, Any]]
    ) -> builtins.list[dict[str, Any]]:
        uids = {job.uid} | {pod["metadata"]["uid"] for pod in pods}
        listed = self.rest.get(f"/api/v1/namespaces/{job.namespace}/events")
        mine = [
            event
            for event in listed.get("items") or []
            if (event.get("involvedObject") or {}).get("uid") in uids
        ]
        return sorted(mine, key=report.event_time)

    def dispatch(self, job: TFJob | str, namespace: str | None = None) -> Dispatch | None:
        """Where another controller runs the job (MultiKueue: which worker cluster, read
        from the job's Workload here); None for a job this operator runs here."""
        job = job if isinstance(job, TFJob) else self.get(job, namespace)
        manager = job.managed_by
        if manager is None:
            return None
        path = f"{KUEUE_WORKLOADS_PATH}/namespaces/{job.namespace}/workloads"
        try:
            listed = self.rest.get(path, {"labelSelector": f"{KUEUE_JOB_UID_LABEL}={job.uid}"})
        except ApiError as error:
            if error.status not in (403, 404):
                raise
            return Dispatch(manager)
        items = listed.get("items") or []
        return Dispatch.of(manager, items[0] if items else None)

    def describe(self, name: str, namespace: str | None = None) -> str:
        """Status, each replica (with why it waits or ended), the last events, and the log
        tails of replicas that failed or cannot start: why a job does not progress. For a
        job MultiKueue runs, on which worker cluster."""
        job = self.get(name, namespace)
        pods = self._pods(job)
        replicas = [Replica.of(pod) for pod in pods]
        logs = {
            replica.name: self._log_tail(job.namespace, replica)
            for replica in replicas
            if report.needs_log(replica)
        }
        events = self._events(job, pods)
        return report.describe(job, replicas, events, logs, now(), self.dispatch(job))

    def results(self, name: str, namespace: str | None = None) -> dict[str, dict[str, Any]]:
        """Each replica's `TFJOB_RESULT` (its last one), by replica name (`worker-0`);
        replicas that printed none are left out."""
        job = self.get(name, namespace)
        found = {}
        for replica in (Replica.of(pod) for pod in self._pods(job)):
            parsed = results_in(line.text for line in self._read_log(job.namespace, replica))
            if parsed:
                found[replica.name] = parsed[-1]
        return found

    # -- follow ---------------------------------------------------------------------------

    def wait(
        self,
        name: str,
        until: Sequence[str] = FINISHED,
        *,
        timeout: float | None = None,
        namespace: str | None = None,
        progress: bool | TextIO = True,
    ) -> TFJob:
        """Waits until the job's state is one of `until` (default Succeeded or Failed), or
        it finished in another, and returns it; check `.succeeded`. `progress`: a line with
        the job's state and each replica's phase, on stdout or the given stream, rewritten
        in place on a terminal. Raises WaitTimedOut after `timeout` seconds, saying what
        it waited for and why the job is not there (`describe`)."""
        display = _Progress(sys.stdout if progress is True else progress or None)
        started = time.monotonic()
        try:
            while True:
                job = self.get(name, namespace)
                replicas = [Replica.of(pod) for pod in self._pods(job)]
                display.show(job, replicas, time.monotonic() - started)
                if job.state in until or job.finished:
                    return job
                if timeout is not None and time.monotonic() - started >= timeout:
                    raise WaitTimedOut(
                        f"TFJob {job.namespace}/{job.name} is not {' or '.join(until)} after "
                        f"{timeout:g} s:\n{self.describe(name, job.namespace)}",
                        job,
                    )
                time.sleep(POLL_SECONDS)
        finally:
            display.close()

    def logs(
        self,
        name: str,
        *,
        replica: str | None = None,
        follow: bool = False,
        namespace: str | None = None,
    ) -> Iterator[LogLine]:
        """The training container's log of every replica (or of `replica`, `worker-1`).
        Without `follow`: what is there now, replicas interleaved by time. With `follow`:
        lines as they are written, from every replica as it starts (a replaced pod too),
        until the job has finished and every log has ended. A job MultiKueue runs on a
        worker cluster has its logs there: ValueError says which."""
        job = self.get(name, namespace)
        dispatch = self.dispatch(job)
        if dispatch is not None and not self._pods(job):
            raise ValueError(f"TFJob {job.namespace}/{job.name} {dispatch.elsewhere}")
        if follow:
            yield from _Follower(self, job, replica).lines()
            return
        lines: builtins.list[LogLine] = []
        for pod in self._pods(job):
            current = Replica.of(pod)
            if replica is None or current.name == replica:
                lines.extend(self._read_log(job.namespace, current))
        yield from sorted(lines, key=lambda line: line.time)

    # -- TensorBoard ----------------------------------------------------------------------

    def tensorboard(
        self,
        job: TFJob | str,
        namespace: str | None = None,
        *,
        port: int = 0,
        address: str = "127.0.0.1",
    ) -> PortForward:
        """Serves the job's TensorBoard (spec.tensorboard) on `address`:`port` (0: a free
        port), forwarded to its pod through the API server as `kubectl port-forward` does,
        until the returned forward is closed (or its `with` block ends); its `url` is the
        page. Raises ValueError when the job has none."""
        job = job if isinstance(job, TFJob) else self.get(job, namespace)
        board = job.tensorboard
        if not board.get("name"):
            if board.get("message"):
                why = str(board["message"])
            elif not _asks_for_tensorboard(job):
                why = (
                    "it asks for none (spec.tensorboard, or the "
                    f"{TENSORBOARD_ANNOTATION} annotation)"
                )
            elif job.finished:
                why = "it was removed ttlSecondsAfterFinished after the job finished"
            else:
                why = f"it starts with the job, which is {job.state}"
            raise ValueError(f"TFJob {job.namespace}/{job.name} has no TensorBoard: {why}")
        selector = f"{LABEL_TENSORBOARD_OF}={job.name}"
        return PortForward(self.rest, job.namespace, selector, TENSORBOARD_PORT, port, address)

    # -- delete ---------------------------------------------------------------------------

    def delete(
        self, name: str, namespace: str | None = None, *, wait: bool = False, timeout: float = 120
    ) -> TFJob:
        """Deletes the job and returns it as it was; its pods and services go with it (they
        are owned by it). With `wait`, returns once the job and its pods are gone."""
        job = self.get(name, namespace)
        api = _api_of(job.object)
        policy = "Foreground" if wait else "Background"
        self.rest.request(
            "DELETE",
            _jobs_path(api, job.namespace, job.name),
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy},
        )
        if not wait:
            return job
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.rest.get(_jobs_path(api, job.namespace, job.name))
            except ApiError as error:
                if error.not_found and not self._pods(job):
                    return job
                if not error.not_found:
                    raise
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"TFJob {job.namespace}/{job.name} still there after {timeout:g} s"
                )
            time.sleep(POLL_SECONDS)

    # -- helpers --------------------------------------------------------------------------

    def _pods(self, job: TFJob) -> builtins.list[dict[str, Any]]:
        listed = self.rest.get(
            f"/api/v1/namespaces/{job.namespace}/pods",
            {"labelSelector": f"{LABEL_CONTROLLER_UID}={job.uid}"},
        )
        order = {kind.lower(): i for i, kind in enumerate(job.replica_counts)}
        pods: builtins.list[dict[str, Any]] = listed.get("items") or []

        def key(pod: dict[str, Any]) -> tuple[int, int, str]:
            replica = Replica.of(pod)
            kind, _, index = replica.name.rpartition("-")
            return (order.get(kind, len(order)), int(index) if index.isdigit() else 0, replica.pod)

        return sorted(pods, key=key)

    def _read_log(self, namespace: str, replica: Replica) -> builtins.list[LogLine]:
        try:
            text = self.rest.text(
                _log_path(namespace, replica.pod), {"container": CONTAINER_NAME, "timestamps": True}
            )
        except ApiError:
            return []  # not started yet, or gone
        return [_timed_line(replica.name, raw) for raw in text.splitlines()]

    def _log_tail(self, namespace: str, replica: Replica) -> builtins.list[str]:
        """The last lines of the replica's log; of its previous container when the current
        one has not started (it waits to be restarted: the one before says why)."""
        query: dict[str, str | int | bool] = {
            "container": CONTAINER_NAME,
            "tailLines": report.LOG_LINES,
        }
        if replica.restarts and replica.phase != "Failed" and replica.reason:
            query["previous"] = True
        try:
            text = self.rest.text(_log_path(namespace, replica.pod), query)
        except ApiError:
            return []
        return [line for line in text.splitlines() if line.strip()]


class _Follower:
    """A followed log of every replica: one thread per container streams its log into a
    queue, and the caller's thread polls the pods for new ones and ends the follow."""

    def __init__(self, client: TFJobClient, job: TFJob, replica: str | None) -> None:
        self.client, self.job, self.replica = client, job, replica
        self.queue: queue.Queue[LogLine | tuple[str, int]] = queue.Queue()
        self.stop = threading.Event()
        #: (pod uid, restarts) of each container streamed, and those whose stream ended.
        self.started: set[tuple[str, int]] = set()
        self.ended: set[tuple[str, int]] = set()

    def lines(self) -> Iterator[LogLine]:
        try:
            while True:
                job, pods = self._look()
                for pod in pods:
                    self._start(pod)
                if job.finished and self.started == self.ended and not self._unstreamed(pods):
                    return
                deadline = time.monotonic() + POLL_SECONDS
                while (left := deadline - time.monotonic()) > 0:
                    try:
                        item = self.queue.get(timeout=left)
                    except queue.Empty:
                        break
                    if isinstance(item, LogLine):
                        yield item
                    else:
                        self.ended.add(item)
        finally:
            self.stop.set()

    def _look(self) -> tuple[TFJob, list[dict[str, Any]]]:
        try:
            job = self.client.get(self.job.name, self.job.namespace)
        except ApiError as error:
            if error.not_found:  # deleted: follow what is left until it ends
                job = TFJob({**self.job.object, "status": {"conditions": _FINISHED_MARK}})
            else:
                raise
        pods = [
            pod
            for pod in self.client._pods(self.job)
            if self.replica is None or Replica.of(pod).name == self.replica
        ]
        return job, pods

    def _unstreamed(self, pods: Sequence[dict[str, Any]]) -> bool:
        return any(key not in self.started for pod in pods if (key := _stream_key(pod)) is not None)

    def _start(self, pod: dict[str, Any]) -> None:
        key = _stream_key(pod)
        if key is None or key in self.started:
            return
        self.started.add(key)
        replica = Replica.of(pod)
        thread = threading.Thread(
            target=self._stream, args=(replica, key), name=f"log {replica.pod}", daemon=True
        )
        thread.start()

    def _stream(self, replica: Replica, key: tuple[str, int]) -> None:
        query: dict[str, str | int | bool] = {
            "container": CONTAINER_NAME,
            "follow": True,
            "timestamps": True,
        }
        try:
            with self.client.rest.lines(_log_path(self.job.namespace, replica.pod), query) as lines:
                for raw in lines:
                    self.queue.put(_timed_line(replica.name, raw))
                    if self.stop.is_set():
                        return
        except (ApiError, ConnectionError, OSError):
            pass  # the pod went away, or never started: its key ends below
        finally:
            self.queue.put(key)


#: Conditions that read as finished, for a job deleted while its log is followed.
_FINISHED_MARK: Final = [{"type": "Failed", "status": "True", "reason": "Deleted"}]


def _stream_key(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """(pod uid, restarts) once the training container has started, else None."""
    status = training_container_status(pod)
    if status is None:
        return None
    state = status.get("state") or {}
    if not (state.get("running") or state.get("terminated")):
        return None
    return (str(pod["metadata"]["uid"]), int(status.get("restartCount", 0)))


def _timed_line(replica: str, raw: str) -> LogLine:
    stamp, _, text = raw.partition(" ")
    return LogLine(replica, text, stamp)


def _asks_for_tensorboard(job: TFJob) -> bool:
    annotations = job.object["metadata"].get("annotations") or {}
    return "tensorboard" in (job.object.get("spec") or {}) or TENSORBOARD_ANNOTATION in annotations


def _documents(job: Mapping[str, Any] | str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the PersistentVolumeClaims, the TFJob) of a dict, a file or YAML text."""
    if isinstance(job, Mapping):
        return [], dict(job)
    text = job if isinstance(job, str) and "\n" in job else Path(job).read_text()
    documents = [d for d in yaml.safe_load_all(text) if d]
    if not all(isinstance(d, dict) for d in documents):
        raise ValueError("expected YAML objects (a TFJob, and the claims it mounts)")
    claims = [d for d in documents if d.get("kind") == "PersistentVolumeClaim"]
    others = [d for d in documents if d.get("kind") != "PersistentVolumeClaim"]
    if len(others) != 1:
        kinds = [d.get("kind") for d in others]
        raise ValueError(f"expected one TFJob document (and claims), found {kinds}")
    return claims, others[0]


def _api_of(body: Mapping[str, Any]) -> TFJobApi:
    if body.get("kind", KIND) != KIND:
        raise ValueError(f"not a TFJob: kind {body.get('kind')!r}")
    api = api_of(body.get("apiVersion", APIS[0].api_version))
    if api is None:
        served = ", ".join(api.api_version for api in APIS)
        raise ValueError(f"apiVersion {body.get('apiVersion')!r}: a TFJob is served as {served}")
    return api


def _jobs_path(api: TFJobApi, namespace: str, name: str | None = None) -> str:
    path = f"{api.path}/namespaces/{namespace}/{PLURAL}"
    return f"{path}/{name}" if name else path


def _log_path(namespace: str, pod: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{pod}/log"


class _Progress:
    """A line rewritten in place on a terminal; elsewhere (a notebook, a log file) printed
    again only when it changes."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        self.terminal = bool(stream and stream.isatty())
        self.last = ""

    def show(self, job: TFJob, replicas: Sequence[Replica], elapsed: float) -> None:
        if self.stream is None:
            return
        # The time waited counts on a terminal only: elsewhere it would print every poll.
        line = report.progress_line(job, replicas, elapsed if self.terminal else None)
        if line == self.last:
            return
        if self.terminal:
            width = shutil.get_terminal_size().columns
            self.stream.write("\r\033[K" + line[: max(width - 1, 20)])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.last = line

    def close(self) -> None:
        if self.stream is not None and self.terminal and self.last:
            self.stream.write("\n")
            self.stream.flush()
