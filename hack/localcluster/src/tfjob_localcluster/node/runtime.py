"""One container instance: a process started through the exec shim, its output logged.

The node starts `python -m tfjob_localcluster.podexec <spec>`; the shim enters the pod's
namespaces and execs the container command, so the child's pid is the container's main
process and its process group is the container. When the main process exits, the rest
of the group is killed, as a container runtime ends a container.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tfjob_localcluster.node.logs import LogWriter

# How long the log pumps may still read after the container's group was killed (a
# process that left the group may hold the pipes open; its output is then dropped).
PIPE_DRAIN_SECONDS = 2.0


class StartFailure(Exception):
    """The shim could not exec the container (kubelet: StartError, exit code 128)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class LaunchSpec:
    """What the shim needs to become the container process (see podexec)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    netns: str | None = None
    hostname: str | None = None
    mounts: list[dict[str, Any]] = field(default_factory=list)
    uid: int | None = None
    gid: int | None = None
    groups: list[int] = field(default_factory=list)
    join_pid: int | None = None
    #: Host directories the container must see at their own paths, whatever volume or
    #: closed directory lies over them: the environment playing the image, the scratch dir.
    host_paths: list[str] = field(default_factory=list)


def exit_code_of(returncode: int) -> int:
    """A container's exit code: a signal death is 128 + the signal number."""
    return 128 - returncode if returncode < 0 else returncode


def _write_spec(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


async def _spawn_shim(
    spec: LaunchSpec, spec_path: Path, stdout: int, stderr: int
) -> asyncio.subprocess.Process:
    read_end, write_end = os.pipe()
    _write_spec(spec_path, {**asdict(spec), "error_fd": write_end, "parent_pid": os.getpid()})
    try:
        # Forked from the event loop's thread: the shim's parent-death signal fires
        # when this (the main) thread exits, i.e. when the node dies.
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-m",
            "tfjob_localcluster.podexec",
            str(spec_path),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            pass_fds=(write_end,),
            start_new_session=True,
        )
    finally:
        os.close(write_end)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_end, "rb")
    )
    try:
        report = await reader.read()
    finally:
        transport.close()
    if report:
        await process.wait()
        failure = json.loads(report)
        raise StartFailure(failure["reason"], failure["message"])
    return process


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class ContainerProcess:
    """A running container instance."""

    def __init__(self, process: asyncio.subprocess.Process, writer: LogWriter) -> None:
        self._process = process
        self._writer = writer
        self.pid = process.pid
        self.finished = False  # True once the log file is complete
        self.exit_code: int | None = None
        self._pumps = [
            asyncio.create_task(self._pump("stdout", process.stdout)),
            asyncio.create_task(self._pump("stderr", process.stderr)),
        ]

    @classmethod
    async def start(cls, spec: LaunchSpec, spec_path: Path, log_path: Path) -> ContainerProcess:
        writer = LogWriter(log_path)
        try:
            process = await _spawn_shim(
                spec, spec_path, asyncio.subprocess.PIPE, asyncio.subprocess.PIPE
            )
        except BaseException:
            writer.close()
            raise
        return cls(process, writer)

    async def _pump(self, stream: str, reader: asyncio.StreamReader | None) -> None:
        if reader is None:
            return
        while chunk := await reader.read(65536):
            self._writer.write(stream, chunk)

    def signal(self, sig: int) -> None:
        """Signals the main process only (as `docker kill --signal` does)."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(sig)

    def kill(self) -> None:
        kill_group(self.pid)

    async def wait(self) -> int:
        """Waits for the main process, ends its group, completes the log; the exit code."""
        if self.exit_code is not None:
            return self.exit_code
        returncode = await self._process.wait()
        kill_group(self.pid)
        _done, pending = await asyncio.wait(self._pumps, timeout=PIPE_DRAIN_SECONDS)
        for pump in pending:
            pump.cancel()
        self._writer.close()
        self.exit_code = exit_code_of(returncode)
        self.finished = True
        return self.exit_code


async def run_to_completion(
    spec: LaunchSpec, spec_path: Path, time_limit: float
) -> tuple[int, bytes]:
    """Runs a command (exec probe or hook) in a container; exit code and output."""
    process = await _spawn_shim(spec, spec_path, asyncio.subprocess.PIPE, asyncio.subprocess.STDOUT)
    try:
        output, _ = await asyncio.wait_for(process.communicate(), time_limit)
    except TimeoutError:
        kill_group(process.pid)
        await process.wait()
        raise
    finally:
        kill_group(process.pid)
        os.unlink(spec_path)
    return exit_code_of(process.returncode or 0), output[-10240:]
