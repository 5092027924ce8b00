"""PID 1 of the node: starts its components in order, restarts them, reaps every orphan.

As a node's init system would, it restarts a component that exits (after 1 s, doubling
up to 10 s; reset once it ran a minute), so a kubelet or containerd killed on purpose
comes back. Stopping sends SIGTERM to the components in reverse order, then returns:
when PID 1 exits, the kernel kills whatever is left in the node's PID namespace
(containers, shims), and the node's mounts and network go with its namespaces.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

RESTART_INITIAL = 1.0
RESTART_MAX = 10.0
STABLE_AFTER = 60.0
STOP_GRACE = 10.0


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} node: {message}", flush=True)


@dataclass
class Component:
    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    # Called before the next component starts, until it returns True (or times out).
    ready: Callable[[], bool] = lambda: True
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff: float = RESTART_INITIAL
    restart_at: float | None = None
    starts: int = 0
    exits: list[int] = field(default_factory=list)

    def start(self) -> None:
        self.starts += 1
        self.started_at = time.monotonic()
        self.restart_at = None
        with self.log_path.open("ab") as log:
            log.write(f"==> {time.strftime('%H:%M:%S')} start #{self.starts}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=None if self.env is None else dict(self.env),
                start_new_session=True,
            )
        say(f"started {self.name} (pid {self.process.pid})")


class Supervisor:
    def __init__(self, components: Sequence[Component], ready_timeout: float = 60) -> None:
        self.components = list(components)
        self.ready_timeout = ready_timeout
        self.stopping = False

    def request_stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self.request_stop)
        for component in self.components:
            if self.stopping:
                break
            component.start()
            self._await_ready(component)
        while not self.stopping:
            self._reap()
            self._restart_due()
            time.sleep(0.2)
        self._stop()
        return 0

    def _await_ready(self, component: Component) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while not self.stopping and not component.ready():
            self._reap()
            if time.monotonic() > deadline:
                say(f"{component.name} not ready after {self.ready_timeout:g}s; going on")
                return
            time.sleep(0.1)

    def _reap(self) -> None:
        """Collects every exited child: components, and orphans re-parented to PID 1."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for component in self.components:
                if component.process is not None and component.process.pid == pid:
                    code = os.waitstatus_to_exitcode(status)
                    component.process.returncode = code
                    component.exits.append(code)
                    self._schedule_restart(component, code)

    def _schedule_restart(self, component: Component, code: int) -> None:
        if self.stopping:
            return
        if time.monotonic() - component.started_at > STABLE_AFTER:
            component.backoff = RESTART_INITIAL
        component.restart_at = time.monotonic() + component.backoff
        say(f"{component.name} exited with {code}; restarting in {component.backoff:g}s")
        component.backoff = min(component.backoff * 2, RESTART_MAX)

    def _restart_due(self) -> None:
        now = time.monotonic()
        for component in self.components:
            if component.restart_at is not None and now >= component.restart_at:
                component.start()

    def _stop(self) -> None:
        for component in reversed(self.components):
            process = component.process
            if process is None or process.returncode is not None:
                continue
            say(f"stopping {component.name}")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE
            while process.returncode is None and time.monotonic() < deadline:
                self._reap()
                time.sleep(0.05)
