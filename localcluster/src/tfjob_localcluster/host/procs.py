"""Child processes that cannot outlive their parent.

Every component runs in a process group of its own (so stopping it stops anything it
forked) with PR_SET_PDEATHSIG=SIGKILL (so it dies with the process that started it,
even when that process is SIGKILLed). The death signal is bound to the *thread* that
forked: start components from a long-lived thread (normally the main thread).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.waiting import wait_until

T = TypeVar("T")

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Asks the kernel to send `sig` to this process when its parent thread exits."""
    if _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")


def _die_with_parent(parent: int) -> None:
    set_parent_death_signal()
    # The parent may have died between fork and prctl: then nobody would signal us.
    if os.getppid() != parent:
        os._exit(1)


@dataclass(frozen=True)
class ProcessIdentity:
    """A pid plus its start time, so a recycled pid is never mistaken for ours."""

    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        stat = _stat(pid)
        return None if stat is None else cls(pid, stat.start_ticks)

    def alive(self) -> bool:
        stat = _stat(self.pid)
        return stat is not None and stat.start_ticks == self.start_ticks

    def group_members(self, table: list[ProcessEntry] | None = None) -> list[int]:
        """Live processes of the group this process leads (even after the leader died).

        Members started before the leader cannot belong to its group, which keeps a
        recycled group id from matching once the leader is long gone. `table` is a
        snapshot from process_table(), to share one /proc scan between many checks.
        """
        return [
            entry.pid
            for entry in (process_table() if table is None else table)
            if entry.pgid == self.pid and entry.start_ticks >= self.start_ticks
        ]

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        for pid in self.group_members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


@dataclass(frozen=True)
class ProcessEntry:
    pid: int
    pgid: int
    start_ticks: int


def process_table() -> list[ProcessEntry]:
    """Every live process (zombies excluded) with its group and start time."""
    table = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                table.append(ProcessEntry(int(entry.name), stat.pgid, stat.start_ticks))
    return table


def children_named(parent: int, name: str) -> list[ProcessIdentity]:
    """Live children of `parent` whose command name (/proc/<pid>/comm) is `name`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is None or stat.ppid != parent:
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if comm == name:
            found.append(ProcessIdentity(int(entry.name), stat.start_ticks))
    return found


@dataclass(frozen=True)
class _Stat:
    ppid: int
    pgid: int
    start_ticks: int


def _stat(pid: int) -> _Stat | None:
    """Parent, group and start time (fields 4, 5 and 22 of /proc/<pid>/stat); None if gone
    or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return _Stat(ppid=int(fields[1]), pgid=int(fields[2]), start_ticks=int(fields[19]))


def tail(path: Path, lines: int = 40) -> str:
    try:
        with path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64 * 1024))
            text = log.read().decode(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


#: How a Go program (buildah, docker, helm, kubectl) begins the report of a crash.
_GO_CRASH = re.compile(r"^(panic: |fatal error: )", re.MULTILINE)


def failure_excerpt(output: str, limit: int = 4000) -> str:
    """What an error shows of a failed tool's output: its last `limit` characters, or, when
    a Go program crashed before them, the start of its crash report (the reason and the
    failing goroutine's frames, which the end of a long stack trace cuts off) and the end."""
    if len(output) <= limit:
        return output
    crash = _GO_CRASH.search(output)
    if crash is None or crash.start() >= len(output) - limit:
        return output[-limit:]
    half = limit // 2
    start = crash.start()
    skipped = len(output) - start - 2 * half
    return f"{output[start : start + half]}\n[... {skipped} characters ...]\n{output[-half:]}"


class ManagedProcess:
    """One component: started in its own process group, output appended to `log_path`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.popen: subprocess.Popen[bytes] | None = None
        self.identity: ProcessIdentity | None = None

    def start(self) -> ProcessIdentity:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        with self.log_path.open("ab") as log:
            log.write(f"==> {time.strftime('%H:%M:%S')} starting {self.argv}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=lambda: _die_with_parent(parent),
            )
        identity = ProcessIdentity.of(self.popen.pid)
        if identity is None:
            self.popen.wait()
            raise LocalClusterError(f"{self.name} exited at once; log:\n{tail(self.log_path)}")
        self.identity = identity
        return identity

    def wait_ready(
        self,
        ready: Callable[[], T | None],
        within: float,
        error: Callable[[str], Exception] = LocalClusterError,
        *,
        what: str = "",
        interval: float = 0.1,
    ) -> T:
        """Blocks until `ready()` is true, and returns what it returned. Raises `error`,
        with the end of the log, as soon as the process exits, or when `within` seconds
        pass (`what`: what it waited for, for the message); a `within` already spent
        still gives `ready` one try."""
        within = max(0.0, within)

        def exited() -> None:
            if not self.running():
                raise error(f"{self.name} exited; last lines of {self.log_path}:\n{self.tail()}")

        def timed_out() -> Exception:
            waited = f" ({what})" if what else ""
            return error(
                f"{self.name} was not ready in {within:g}s{waited}; last lines of "
                f"{self.log_path}:\n{self.tail()}"
            )

        return wait_until(ready, within, timed_out, each=exited, interval=interval)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def running(self) -> bool:
        """Whether the leader still runs; never reaps it, so its pid (and group) stay ours."""
        if self.popen is None or self.popen.returncode is not None:
            return False
        try:
            return os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the group, SIGKILL to the group after `grace` seconds; then reaps.

        The leader is reaped only after the group is killed: until then its pid cannot
        be recycled, so the group id still names our processes.
        """
        if self.popen is None or self.popen.returncode is not None:
            return
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.running() and time.monotonic() < deadline:
                time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def kill(self) -> None:
        """SIGKILL to the group at once, as a crash: nothing gets to shut down cleanly."""
        if self.popen is None or self.popen.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)


class Started(ABC):
    """Something that runs between `start()` and `stop()`, also as `with X(...) as x:`."""

    @abstractmethod
    def start(self) -> object: ...

    @abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
