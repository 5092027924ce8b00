"""One container of a pod across its restarts: start, probe, stop, back off, restart.

The runner owns the container's ContainerRecord (what the status reports) and follows
kubelet's rules: the first restart is immediate, later ones wait an exponential
back-off (CrashLoopBackOff) that resets after the container ran long enough; a stop
request (pod deletion, eviction) sends SIGTERM to the main process, waits the grace
period (at least 2 s, as kubelet) and then kills the whole container.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfjob_localcluster.node.logs import parse_line
from tfjob_localcluster.node.podspec import ContainerConfigError, CreateContainerError
from tfjob_localcluster.node.probes import HandlerResult, Prober, run_handler
from tfjob_localcluster.node.runtime import ContainerProcess, LaunchSpec, StartFailure
from tfjob_localcluster.node.status import ContainerRecord, exit_reason, now, waiting

if TYPE_CHECKING:
    from tfjob_localcluster.node.pods import PodWorker

Obj = dict[str, Any]
log = logging.getLogger(__name__)

MINIMUM_GRACE_SECONDS = 2.0
CONFIG_RETRY_SECONDS = 2.0
EPOCH = "1970-01-01T00:00:00Z"
TERMINATION_MESSAGE_BYTES = 4096
FALLBACK_LOG_LINES = 80


@dataclass
class Backoff:
    """kubelet's restart back-off: 0, then initial, doubling up to `maximum`."""

    initial: float
    maximum: float
    current: float | None = None

    def next(self, ran_for: float) -> float:
        if self.current is not None and ran_for > 2 * self.maximum:
            self.current = None  # it ran long enough: start over
        if self.current is None:
            self.current = min(self.initial, self.maximum)
            return 0.0
        delay = self.current
        self.current = min(self.current * 2, self.maximum)
        return delay


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


class ContainerRunner:
    def __init__(
        self, worker: PodWorker, container: Obj, record: ContainerRecord, init: bool
    ) -> None:
        self.worker = worker
        self.container = container
        self.record = record
        self.init = init
        self.name: str = container["name"]
        self.process: ContainerProcess | None = None
        self.processes: dict[int, ContainerProcess] = {}  # restart count -> instance
        self._stop = asyncio.Event()
        self._grace = 30.0
        self._restart_requested: str | None = None
        self._restart_now = asyncio.Event()
        self._started = asyncio.Event()  # the current instance passed its startup probe
        config = worker.node.config
        self._backoff = Backoff(config.restart_backoff_initial, config.restart_backoff_max)

    # --- control -----------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self, grace: float) -> None:
        if not self._stop.is_set():
            self._grace = grace
            self._stop.set()

    def restart_policy(self) -> str:
        if self.init:
            # Init containers are retried until they succeed, except under Never.
            policy = self.worker.pod["spec"].get("restartPolicy", "Always")
            return "Never" if policy == "Never" else "OnFailure"
        return str(self.worker.pod["spec"].get("restartPolicy", "Always"))

    # --- the loop ----------------------------------------------------------------------

    async def run(self) -> bool:
        """Runs until the container is done for good; True if it last exited 0."""
        done = self.record.terminated
        if done is not None and done["exitCode"] == 0 and self.restart_policy() != "Always":
            return True  # it succeeded in an earlier run of the node
        exit_code: int | None = None
        while not self.stopping:
            started = time.monotonic()
            exit_code = await self._run_once()
            if exit_code is None:  # could not create it: retry
                if not await self._pause(self._creation_retry()):
                    break
                continue
            if self.stopping or not should_restart(self.restart_policy(), exit_code):
                break
            delay = self._backoff.next(time.monotonic() - started)
            terminated = self.record.state
            if delay > 0:
                self.record.last_state = terminated
                self.record.state = waiting(
                    "CrashLoopBackOff",
                    f"back-off {delay:g}s restarting failed container={self.name} "
                    f"pod={self.worker.describe()}",
                )
                self.worker.event(
                    "Warning",
                    "BackOff",
                    f"Back-off restarting failed container {self.name} in pod "
                    f"{self.worker.describe()}",
                    self.name,
                )
                self.worker.mark_dirty()
                if not await self._pause(delay):
                    self.record.state = terminated
                    self.worker.mark_dirty()
                    break
            self.record.last_state = terminated
            self.record.restart_count += 1
        return exit_code == 0

    async def _pause(self, seconds: float) -> bool:
        """Sleeps unless stopped first; False when stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return not self.stopping

    def _creation_retry(self) -> float:
        """A missing ConfigMap or Secret may appear any moment; a bad spec will not."""
        if self.record.state.get("waiting", {}).get("reason") == "CreateContainerConfigError":
            return CONFIG_RETRY_SECONDS
        return self._backoff.next(0) or self._backoff.initial

    def _fail_creation(self, reason: str, message: str) -> None:
        self.record.state = waiting(reason, message)
        self.worker.event("Warning", "Failed", f"Error: {message}", self.name)
        self.worker.mark_dirty()

    async def _run_once(self) -> int | None:
        """One instance, start to finish; its exit code, None if it could not be created."""
        try:
            spec = await self.worker.launch_spec(self.container, self.record.restart_count)
        except ContainerConfigError as error:
            self._fail_creation("CreateContainerConfigError", str(error))
            return None
        except CreateContainerError as error:
            self._fail_creation("CreateContainerError", str(error))
            return None
        image = self.container.get("image", "")
        self.worker.event(
            "Normal", "Pulled", f'Container image "{image}" already present on machine', self.name
        )
        container_id = f"process://{secrets.token_hex(32)}"
        self.worker.event("Normal", "Created", f"Created container: {self.name}", self.name)
        instance = self.record.restart_count
        try:
            process = await ContainerProcess.start(
                spec,
                self.worker.dir / "containers" / f"{self.name}-{instance}.json",
                self.worker.log_path(self.name, instance),
            )
        except StartFailure as failure:
            self.record.state = {
                "terminated": {
                    "exitCode": 128,
                    "reason": failure.reason,
                    "message": str(failure),
                    "startedAt": EPOCH,
                    "finishedAt": now(),
                    "containerID": container_id,
                }
            }
            self.record.container_id = container_id
            self.worker.event("Warning", "Failed", f"Error: {failure}", self.name)
            self.worker.mark_dirty()
            return 128
        self.process = process
        self.processes[instance] = process
        self.worker.node.record_process(process.pid)
        started_at = now()
        self.record.container_id = container_id
        self.record.image_id = f"process-node://{image}"
        self.record.state = {"running": {"startedAt": started_at}}
        self.record.started = "startupProbe" not in self.container
        self.record.ready = self.record.started and "readinessProbe" not in self.container
        self.worker.event("Normal", "Started", f"Started container {self.name}", self.name)
        self.worker.mark_dirty()

        exit_code = await self._supervise(process, spec)
        self.record.state = {
            "terminated": self._terminated(exit_code, started_at, container_id, instance)
        }
        self.record.ready = False
        self.record.started = False
        self.worker.mark_dirty()
        return exit_code

    def _terminated(self, exit_code: int, started_at: str, container_id: str, instance: int) -> Obj:
        state: Obj = {
            "exitCode": exit_code,
            "reason": exit_reason(exit_code),
            "startedAt": started_at,
            "finishedAt": now(),
            "containerID": container_id,
        }
        if exit_code >= 128 and exit_code - 128 in (signal.SIGKILL, signal.SIGTERM):
            state["signal"] = exit_code - 128
        if message := self._termination_message(exit_code, instance):
            state["message"] = message
        return state

    def _termination_message(self, exit_code: int, instance: int) -> str:
        path = self.worker.termination_log(self.name, instance)
        try:
            message = path.read_bytes()[:TERMINATION_MESSAGE_BYTES].decode(errors="replace")
        except FileNotFoundError:
            message = ""
        policy = self.container.get("terminationMessagePolicy", "File")
        if not message and policy == "FallbackToLogsOnError" and exit_code != 0:
            message = _log_tail(self.worker.log_path(self.name, instance))
        return message

    # --- a running instance ------------------------------------------------------------

    async def _supervise(self, process: ContainerProcess, spec: LaunchSpec) -> int:
        self._started.clear()
        helpers = [asyncio.create_task(self._after_start(process, spec))]
        exited = asyncio.create_task(process.wait())
        stop = asyncio.create_task(self._stop.wait())
        restart = asyncio.create_task(self._restart_now.wait())
        try:
            await asyncio.wait({exited, stop, restart}, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():
                for helper in helpers:
                    helper.cancel()
                reason = self._restart_requested or "stop"
                await self._terminate(process, spec, self._grace if reason == "stop" else None)
            return await exited
        finally:
            for task in (*helpers, stop, restart):
                task.cancel()
            self._restart_now.clear()
            self._restart_requested = None

    async def _after_start(self, process: ContainerProcess, spec: LaunchSpec) -> None:
        """postStart hook, then the probes, for as long as the instance runs."""
        lifecycle = self.container.get("lifecycle") or {}
        if hook := lifecycle.get("postStart"):
            result = await self._handler(hook, process, spec, 30)
            if not result.ok:
                self.worker.event(
                    "Warning",
                    "FailedPostStartHook",
                    f"PostStartHook failed: {result.detail}",
                    self.name,
                )
                self._request_restart("postStart hook failed")
                return
        probers = []
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe := self.container.get(kind):
                probers.append(
                    Prober(
                        kind,
                        probe,
                        lambda handler, limit: self._handler(handler, process, spec, limit),
                        self._verdict_handler(kind),
                    )
                )
        if not probers:
            return
        startup = next((p for p in probers if p.kind == "startupProbe"), None)
        if startup is not None:
            startup_task = asyncio.create_task(startup.loop())
            await self._started.wait()
            startup_task.cancel()
        await asyncio.gather(*(p.loop() for p in probers if p.kind != "startupProbe"))

    def _verdict_handler(self, kind: str) -> Callable[[bool, HandlerResult], None]:
        def verdict(ok: bool, result: HandlerResult) -> None:
            label = {"startupProbe": "Startup", "readinessProbe": "Readiness"}.get(kind, "Liveness")
            if not ok:
                self.worker.event(
                    "Warning", "Unhealthy", f"{label} probe failed: {result.detail}", self.name
                )
            if kind == "startupProbe":
                if ok:
                    self.record.started = True
                    self._started.set()
                    self.record.ready = "readinessProbe" not in self.container
                else:
                    self._request_restart("failed startup probe")
            elif kind == "readinessProbe":
                self.record.ready = ok
            elif not ok:
                self._request_restart("failed liveness probe")
            self.worker.mark_dirty()

        return verdict

    def _request_restart(self, why: str) -> None:
        self.worker.event(
            "Normal",
            "Killing",
            f"Container {self.name} {why}, will be restarted",
            self.name,
        )
        self._restart_requested = why
        self._restart_now.set()

    def _handler(
        self, handler: Obj, process: ContainerProcess, spec: LaunchSpec, limit: float
    ) -> Awaitable[HandlerResult]:
        async def exec_in_container(command: list[str], time_limit: float) -> tuple[int, bytes]:
            return await self.worker.exec_in(process.pid, spec, command, time_limit)

        return run_handler(
            handler, self.container, str(self.worker.pod_ip), exec_in_container, limit
        )

    async def _terminate(
        self, process: ContainerProcess, spec: LaunchSpec, grace: float | None
    ) -> None:
        """preStop hook, SIGTERM, the grace period, then SIGKILL for the whole container."""
        if grace is None:
            grace = float(self.worker.pod["spec"].get("terminationGracePeriodSeconds", 30))
        deadline = time.monotonic() + max(grace, MINIMUM_GRACE_SECONDS)
        self.worker.event("Normal", "Killing", f"Stopping container {self.name}", self.name)
        lifecycle = self.container.get("lifecycle") or {}
        if hook := lifecycle.get("preStop"):
            remaining = max(deadline - time.monotonic(), 0.1)
            result = await self._handler(hook, process, spec, remaining)
            if not result.ok:
                self.worker.event(
                    "Warning",
                    "FailedPreStopHook",
                    f"PreStopHook failed: {result.detail}",
                    self.name,
                )
        process.signal(signal.SIGTERM)
        remaining = max(deadline - time.monotonic(), MINIMUM_GRACE_SECONDS)
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), remaining)
        except TimeoutError:
            process.kill()


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_bytes().splitlines()[-FALLBACK_LOG_LINES:]
    except FileNotFoundError:
        return ""
    text = b"".join(
        entry.render(False) for line in lines if (entry := parse_line(line)) is not None
    )
    return text[-2048:].decode(errors="replace")
