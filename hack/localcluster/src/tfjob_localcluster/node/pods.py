"""One pod on the node, from admission to the deletion of its API object.

A PodWorker admits the pod (supported spec, GPU devices), builds its sandbox and
volumes, runs the init containers in order and then all containers, and writes the
pod's status whenever something changes. Deletion (deletionTimestamp), a force
delete and an eviction all stop the containers the same way; after a deletion the
worker removes the API object with grace period 0 and a UID precondition, as kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import secrets
import shutil
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from tfjob_localcluster.node.config import image_paths
from tfjob_localcluster.node.containers import ContainerRunner
from tfjob_localcluster.node.context import NodeContext
from tfjob_localcluster.node.dns import HostsFile
from tfjob_localcluster.node.gpus import GpuUnavailableError, device_environment
from tfjob_localcluster.node.kube import ApiError
from tfjob_localcluster.node.podspec import (
    ContainerConfigError,
    PodRuntimeInfo,
    container_argv,
    container_environment,
    gpu_count,
    pod_hostname,
    referenced_objects,
    run_as,
    unsupported_features,
)
from tfjob_localcluster.node.runtime import LaunchSpec, run_to_completion
from tfjob_localcluster.node.sandbox import Sandbox, own_names
from tfjob_localcluster.node.status import (
    ContainerRecord,
    PodSnapshot,
    now,
    pod_status,
    waiting,
)
from tfjob_localcluster.node.volumes import (
    PodVolumes,
    VolumeBuilder,
    VolumeNotReadyError,
    container_mounts,
    unsupported_volumes,
)

Obj = dict[str, Any]
log = logging.getLogger(__name__)

VOLUME_RETRY_SECONDS = 2.0
TOKEN_RETRY_SECONDS = 10.0
STATUS_RETRY_SECONDS = 1.0
DEFAULT_TERMINATION_LOG = "/dev/termination-log"


class _PodFailed(Exception):
    pass


def _resource_version(pod: Obj) -> int | None:
    version = pod["metadata"].get("resourceVersion", "")
    return int(version) if str(version).isdigit() else None


def _home(uid: int | None) -> str:
    if uid is None or uid == 0:
        return "/root"
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        return "/"


class PodWorker:
    def __init__(self, node: NodeContext, pod: Obj) -> None:
        self.node = node
        self.pod = pod
        metadata = pod["metadata"]
        self.uid: str = metadata["uid"]
        self.namespace: str = metadata["namespace"]
        self.name: str = metadata["name"]
        self.dir = node.pods_dir / f"{self.namespace}_{self.name}_{self.uid}"
        self.start_time = (pod.get("status") or {}).get("startTime") or now()
        spec = pod["spec"]
        self.init_records = [
            ContainerRecord(c["name"], c.get("image", "")) for c in spec.get("initContainers") or []
        ]
        self.records = [ContainerRecord(c["name"], c.get("image", "")) for c in spec["containers"]]
        self.runners: dict[str, ContainerRunner] = {}
        self.sandbox: Sandbox | None = None
        self.volumes = PodVolumes()
        self.devices: dict[str, list[int]] = {}
        self.failed = False
        self.reason: str | None = None
        self.message: str | None = None
        self.extra_conditions: list[Obj] = []
        self.terminal = False
        self.finished = asyncio.Event()
        self.gone = False  # the API object no longer exists
        self._stop = asyncio.Event()
        self._grace = 30.0
        self._delete_when_done = False
        self._delete_scheduled = False
        self._dirty = asyncio.Event()
        self._status_lock = asyncio.Lock()
        self._last_status: Obj | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle control ---------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._status_loop()),
            asyncio.create_task(self._run()),
        ]

    @classmethod
    def dormant(cls, node: NodeContext, pod: Obj) -> PodWorker:
        """A pod that was already terminal when the node started: nothing to run."""
        worker = cls(node, pod)
        worker.terminal = True
        worker.finished.set()
        return worker

    def update(self, pod: Obj) -> None:
        current, fresh = _resource_version(self.pod), _resource_version(pod)
        if current is not None and fresh is not None and fresh < current:
            return  # an older event than the status write we already saw
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            if grace is None:
                grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
            if self.finished.is_set() and not self._delete_scheduled:
                self._delete_scheduled = True
                self._schedule(self._delete_object())
            else:
                self.request_stop(float(grace), delete=True)
        self.mark_dirty()

    def object_deleted(self) -> None:
        """The API object is gone (force-deleted, or deleted by us): stop at once."""
        self.gone = True
        self.request_stop(0, delete=False)

    def request_stop(self, grace: float, delete: bool) -> None:
        self._delete_when_done = self._delete_when_done or delete
        if self._stop.is_set():
            return
        self._grace = grace
        self._stop.set()
        for runner in self.runners.values():
            runner.stop(grace)

    def evict(self, resource: str, message: str) -> None:
        """Node-pressure eviction as kubelet's eviction manager reports it."""
        self.failed = True
        self.reason = "Evicted"
        self.message = message
        self.extra_conditions = [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": now(),
            }
        ]
        self.event("Warning", "Evicted", message)
        self.mark_dirty()
        self.request_stop(0, delete=False)

    async def shutdown(self) -> None:
        """The node is stopping: kill the containers and remove the sandbox quickly."""
        self.gone = True  # write nothing more to the API
        self.request_stop(0, delete=False)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.finished.wait(), 15)
        for task in self._tasks:
            task.cancel()

    def remove_files(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers for the container runners ------------------------------------------------

    def describe(self) -> str:
        return f"{self.name}_{self.namespace}({self.uid})"

    def event(self, kind: str, reason: str, message: str, container: str | None = None) -> None:
        if not self.gone:
            self.node.events.record(self.pod, kind, reason, message, container)

    def mark_dirty(self) -> None:
        self._dirty.set()

    @property
    def pod_ip(self) -> str | None:
        return str(self.sandbox.ip) if self.sandbox else None

    def log_path(self, container: str, instance: int) -> Path:
        return self.dir / "logs" / container / f"{instance}.log"

    def log_instances(self, container: str) -> list[int]:
        """Instance numbers (restart counts) that have a log file, oldest first."""
        directory = self.dir / "logs" / container
        if not directory.is_dir():
            return []
        return sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())

    def termination_log(self, container: str, instance: int) -> Path:
        return self.dir / "termination" / f"{container}-{instance}"

    def runtime_info(self) -> PodRuntimeInfo:
        return PodRuntimeInfo(
            pod_ip=self.pod_ip or "",
            host_ip=self.node.host_ip,
            hostname=pod_hostname(self.pod),
            python_bin_dir=self.node.config.python_bin_dir,
            api_host=self.node.config.api_host,
            api_port=self.node.config.api_port,
            allocatable=self.node.config.capacity,
        )

    async def launch_spec(self, container: Obj, instance: int) -> LaunchSpec:
        """Everything the shim needs for one instance of `container`."""
        if self.sandbox is None:
            raise ContainerConfigError("the pod sandbox does not exist")
        objects: dict[tuple[str, str], Obj | None] = {}
        for kind, name in referenced_objects(container):
            try:
                objects[(kind, name)] = await self.node.kube.get(
                    f"/api/v1/namespaces/{self.namespace}/{kind}/{name}"
                )
            except ApiError as error:
                if error.status != 404:
                    raise ContainerConfigError(f"get {kind} {name}: {error}") from None
                objects[(kind, name)] = None
        uid, gid, groups = run_as(self.pod, container)
        extra = {"HOME": _home(uid), **device_environment(self.devices.get(container["name"], []))}
        env = container_environment(self.pod, container, self.runtime_info(), objects, extra)
        argv = container_argv(container, env, self.node.config.entrypoints)
        try:
            mounts = container_mounts(self.pod, container, self.volumes.paths, env)
        except VolumeNotReadyError as error:
            raise ContainerConfigError(str(error)) from None
        termination_log = self.termination_log(container["name"], instance)
        _create_writable(termination_log)
        mounts.append(
            {
                "source": str(termination_log),
                "target": container.get("terminationMessagePath") or DEFAULT_TERMINATION_LOG,
            }
        )
        in_netns = self.sandbox.netns is not None
        cwd = container.get("workingDir") or str(self.dir / "scratch")
        return LaunchSpec(
            argv=argv,
            env=env,
            cwd=cwd,
            netns=str(self.sandbox.netns) if in_netns else None,
            hostname=pod_hostname(self.pod) if in_netns else None,
            mounts=self.sandbox.mounts() + mounts,
            uid=uid,
            gid=gid,
            groups=groups,
            host_paths=[*image_paths(), *([] if container.get("workingDir") else [cwd])],
        )

    async def exec_in(
        self, pid: int, spec: LaunchSpec, command: list[str], time_limit: float
    ) -> tuple[int, bytes]:
        """Runs `command` inside the running container `pid` (exec probes and hooks)."""
        if not command:
            return 126, b"empty command"
        probe = LaunchSpec(
            argv=command,
            env=spec.env,
            cwd=spec.cwd,
            uid=spec.uid,
            gid=spec.gid,
            groups=spec.groups,
            join_pid=pid,
        )
        spec_path = self.dir / "exec" / f"{secrets.token_hex(8)}.json"
        return await run_to_completion(probe, spec_path, time_limit)

    # --- the pod's life -----------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._lifecycle()
        except _PodFailed:
            pass
        except Exception:
            log.exception("pod %s failed in the node", self.describe())
            self._fail("NodeError", "the process node failed to run this pod; see the node log")
        finally:
            self.terminal = True
            await self._teardown()
            await self._write_status()
            if self._delete_when_done and not self.gone:
                await self._delete_object()
            self.finished.set()

    async def _lifecycle(self) -> None:
        if self._adopt():
            return
        self._admit()
        self.mark_dirty()
        # Not interrupted: a half-made sandbox would leak its network namespace.
        await self._create_sandbox()
        if self._stop.is_set():
            return
        if not await self._until_stop(self._setup_volumes()):
            return
        if self.volumes.refresh_at is not None:
            self._tasks.append(asyncio.create_task(self._refresh_tokens()))
        spec = self.pod["spec"]
        for container, record in zip(
            spec.get("initContainers") or [], self.init_records, strict=True
        ):
            for app in self.records:
                app.state = waiting("PodInitializing")
            runner = self._runner(container, record, init=True)
            if not await runner.run():
                return
        for record in self.records:
            if record.state.get("waiting", {}).get("reason") == "PodInitializing":
                record.state = waiting("ContainerCreating")
        runners = [
            self._runner(container, record, init=False)
            for container, record in zip(spec["containers"], self.records, strict=True)
        ]
        await asyncio.gather(*(runner.run() for runner in runners))

    def _runner(self, container: Obj, record: ContainerRecord, init: bool) -> ContainerRunner:
        runner = ContainerRunner(self, container, record, init)
        self.runners[container["name"]] = runner
        if self._stop.is_set():
            runner.stop(self._grace)
        return runner

    async def _until_stop(self, step: Coroutine[Any, Any, None]) -> bool:
        """Runs `step` unless a stop comes first; True when it completed."""
        task = asyncio.create_task(step)
        stop = asyncio.create_task(self._stop.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if task.done():
            task.result()
            return not self._stop.is_set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False

    def _fail(self, reason: str, message: str) -> None:
        self.failed = True
        self.reason = reason
        self.message = message
        self.event("Warning", reason, message)
        self.mark_dirty()

    def _adopt(self) -> bool:
        """Continues a pod an earlier run of the node started (the processes are gone).

        Containers that had run count a restart; under restartPolicy Never the pod is
        over, its lost containers reported as kubelet does after a node reboot.
        Returns True when nothing is left to run.
        """
        status = self.pod.get("status") or {}
        previous = {
            s["name"]: s
            for s in (status.get("initContainerStatuses") or [])
            + (status.get("containerStatuses") or [])
        }
        had_run = any(
            "running" in s.get("state", {})
            or "terminated" in s.get("state", {})
            or s.get("lastState")
            for s in previous.values()
        )
        if not had_run:
            return False
        self.event(
            "Normal", "SandboxChanged", "Pod sandbox changed, it will be killed and re-created."
        )
        policy = self.pod["spec"].get("restartPolicy", "Always")
        never = policy == "Never"
        for record in self.init_records + self.records:
            old = previous.get(record.name)
            if old is None:
                continue
            state = old.get("state", {})
            if policy == "OnFailure" and state.get("terminated", {}).get("exitCode") == 0:
                record.state = state  # succeeded before: not run again
                record.restart_count = int(old.get("restartCount", 0))
                continue
            lost: Obj | None = None
            if "running" in state or (never and "terminated" not in state):
                lost = _lost(state.get("running", {}).get("startedAt"))
            elif "terminated" in state:
                lost = state
            record.restart_count = int(old.get("restartCount", 0))
            if lost is None:
                continue
            if never:
                record.state = lost
            else:
                record.last_state = lost
                record.restart_count += 1
        if never:
            for record in self.init_records + self.records:
                if "terminated" not in record.state:
                    record.state = _lost(None)
            self.mark_dirty()
            return True
        return False

    def _admit(self) -> None:
        problems = unsupported_features(self.pod) + unsupported_volumes(self.pod)
        if problems:
            self._fail(
                "UnsupportedPodSpec",
                "the tfjob-localcluster process node does not support: " + "; ".join(problems),
            )
            raise _PodFailed
        spec = self.pod["spec"]
        app_counts = [gpu_count(c) for c in spec["containers"]]
        init_counts = [gpu_count(c) for c in spec.get("initContainers") or []]
        wanted = max(sum(app_counts), max(init_counts, default=0))
        if not wanted:
            return
        try:
            devices = self.node.gpus.allocate(self.uid, wanted)
        except GpuUnavailableError as error:
            self._fail("UnexpectedAdmissionError", str(error))
            raise _PodFailed from None
        offset = 0
        for container, count in zip(spec["containers"], app_counts, strict=True):
            self.devices[container["name"]] = devices[offset : offset + count]
            offset += count
        for container, count in zip(spec.get("initContainers") or [], init_counts, strict=True):
            self.devices[container["name"]] = devices[:count]

    async def _create_sandbox(self) -> None:
        await asyncio.to_thread(_make_pod_dirs, self.dir)
        self.sandbox = await self.node.sandboxes.create(self.pod, self.dir)
        self.node.dns.register(
            self.uid,
            HostsFile(
                path=self.sandbox.hosts,
                namespace=self.namespace,
                ip=str(self.sandbox.ip),
                names=own_names(self.pod, self.node.config.cluster_domain),
                aliases=list(self.pod["spec"].get("hostAliases") or []),
            ),
        )
        self.mark_dirty()

    async def _setup_volumes(self) -> None:
        builder = VolumeBuilder(self.node.kube, self.dir / "volumes")
        last_error = ""
        while True:
            try:
                self.volumes = await builder.setup(self.pod, self.runtime_info())
                return
            except VolumeNotReadyError as error:
                if str(error) != last_error:
                    last_error = str(error)
                    self.event("Warning", "FailedMount", str(error))
            await asyncio.sleep(VOLUME_RETRY_SECONDS)

    async def _refresh_tokens(self) -> None:
        builder = VolumeBuilder(self.node.kube, self.dir / "volumes")
        while self.volumes.refresh_at is not None:
            await asyncio.sleep(max(self.volumes.refresh_at - time.monotonic(), 0))
            try:
                refreshed = await builder.setup(self.pod, self.runtime_info(), refresh_only=True)
                self.volumes.refresh_at = refreshed.refresh_at
            except VolumeNotReadyError as error:
                log.warning("token refresh for %s failed: %s", self.describe(), error)
                self.volumes.refresh_at = time.monotonic() + TOKEN_RETRY_SECONDS

    async def _teardown(self) -> None:
        self.node.gpus.release(self.uid)
        self.node.dns.unregister(self.uid)
        if self.sandbox is not None:
            try:
                await self.node.sandboxes.destroy(self.pod, self.sandbox)
            except Exception:
                log.exception("removing the sandbox of %s failed", self.describe())

    # --- the API object -----------------------------------------------------------------

    def snapshot(self) -> PodSnapshot:
        return PodSnapshot(
            host_ip=self.node.host_ip,
            pod_ip=self.pod_ip,
            start_time=self.start_time,
            sandbox_ready=self.sandbox is not None and not self.terminal,
            init_containers=self.init_records,
            containers=self.records,
            terminal=self.terminal,
            failed=self.failed,
            reason=self.reason,
            message=self.message,
            extra_conditions=self.extra_conditions,
        )

    async def _status_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self._write_status()
            await asyncio.sleep(0.05)  # let a burst of changes land in one write

    async def _write_status(self) -> None:
        async with self._status_lock:
            if self.gone:
                return
            status = pod_status(self.pod, self.snapshot())
            if status == self._last_status:
                return
            path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status"
            try:
                written = await self.node.kube.patch(
                    path, {"metadata": {"uid": self.uid}, "status": status}
                )
            except ApiError as error:
                if error.status in (404, 409):
                    self.gone = True  # deleted, or replaced by a pod of the same name
                    return
                log.warning("status of %s not written: %s", self.describe(), error)
                asyncio.get_running_loop().call_later(STATUS_RETRY_SECONDS, self.mark_dirty)
                return
            except OSError as error:
                log.warning("status of %s not written: %s", self.describe(), error)
                asyncio.get_running_loop().call_later(STATUS_RETRY_SECONDS, self.mark_dirty)
                return
            self._last_status = status
            self.pod = written

    async def _delete_object(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": self.uid},
        }
        try:
            await self.node.kube.delete(
                f"/api/v1/namespaces/{self.namespace}/pods/{self.name}", body
            )
        except ApiError as error:
            if error.status not in (404, 409):
                log.warning("deleting %s failed: %s", self.describe(), error)

    def _schedule(self, step: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.create_task(step))


def _lost(started_at: str | None) -> Obj:
    """The state kubelet reports for a container whose process vanished with the node."""
    return {
        "terminated": {
            "exitCode": 137,
            "reason": "ContainerStatusUnknown",
            "message": "The container could not be located when the pod was terminated",
            "startedAt": started_at,
            "finishedAt": now(),
        }
    }


def _make_pod_dirs(pod_dir: Path) -> None:
    for sub in ("logs", "volumes", "termination", "containers", "exec", "etc"):
        (pod_dir / sub).mkdir(parents=True, exist_ok=True)
    scratch = pod_dir / "scratch"
    scratch.mkdir(exist_ok=True)
    # Like /tmp: any container user may write here.
    os.chmod(scratch, 0o1777)


def _create_writable(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    os.chmod(path, 0o666)
