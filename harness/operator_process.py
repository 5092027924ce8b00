"""Starts the operator under test from a command template and tells when it is ready.

The command is any program that reconciles TFJobs with a kubeconfig: this repository's
operator by default (`OperatorCommand.checkout()`), or a peer's (the benchmark's
`--operator-command`). Placeholders in it are filled in: `{kubeconfig}`, `{health_port}`,
`{metrics_port}`, `{python}`; KUBECONFIG is set too.

Ready means, for the benchmark and the chaos run (`wait_ready`): the API server's audit log
shows the operator's watches of TFJobs, pods and services started (whatever the operator,
it cannot act before that), and, if a ready URL is given, that URL answers 200. The
integration tests, which run this checkout's operator on a cluster without an audit log,
wait for its ready URL alone (`wait_answers`).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness import audit
from tfjob_localcluster.host.ports import free_port
from tfjob_localcluster.host.procs import ManagedProcess, ProcessIdentity
from tfjob_localcluster.waiting import wait_until

DEFAULT_COMMAND = (
    "{python} -m tfjob_operator.cli run --kubeconfig {kubeconfig} "
    "--health-port {health_port} --metrics-port {metrics_port}"
)
DEFAULT_READY_URL = "http://127.0.0.1:{health_port}/readyz"
DEFAULT_METRICS_URL = "http://127.0.0.1:{metrics_port}/metrics"
WATCHED = ("tfjobs", "pods", "services")
PLACEHOLDERS = frozenset({"kubeconfig", "health_port", "metrics_port", "python"})
#: Lines an operator log marks as errors (Python logging, Go klog and logr, tracebacks).
ERROR_LINE = re.compile(r"\bERROR\b|^E\d{4} |\"level\":\"error\"|^Traceback", re.IGNORECASE)


class OperatorError(RuntimeError):
    pass


def check_template(template: str) -> list[str]:
    """Splits a command template; raises OperatorError for an unknown placeholder."""
    words = shlex.split(template)
    if not words:
        raise OperatorError("the operator command is empty")
    for word in words:
        for name in re.findall(r"{(\w*)}", word):
            if name not in PLACEHOLDERS:
                raise OperatorError(
                    f"operator command: unknown placeholder {{{name}}}; "
                    f"known: {', '.join('{' + p + '}' for p in sorted(PLACEHOLDERS))}"
                )
    return words


@dataclass(frozen=True)
class OperatorCommand:
    template: str
    ready_url: str | None
    metrics_url: str | None

    @classmethod
    def checkout(cls, *args: str) -> OperatorCommand:
        """This checkout's operator, with `args` added to its command line."""
        template = " ".join([DEFAULT_COMMAND, *(shlex.quote(a) for a in args)])
        return cls(template, DEFAULT_READY_URL, DEFAULT_METRICS_URL)


class OperatorProcess:
    """One run of the operator under test; see the module docstring."""

    def __init__(
        self,
        command: OperatorCommand,
        kubeconfig: Path,
        log_path: Path,
        user: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`user`: the name the operator's requests have in the audit log (wait_ready);
        `env`: variables added to the process's environment."""
        self.command = command
        self.user = user
        self.log_path = log_path
        self.values = {
            "kubeconfig": str(kubeconfig),
            "health_port": str(free_port("127.0.0.1")),
            "metrics_port": str(free_port("127.0.0.1")),
            "python": sys.executable,
        }
        self.argv = [w.format(**self.values) for w in check_template(command.template)]
        environment = {**os.environ, "KUBECONFIG": str(kubeconfig), **(env or {})}
        self.process = ManagedProcess("operator", self.argv, log_path, env=environment)
        self.identity: ProcessIdentity | None = None

    def start(self) -> ProcessIdentity:
        self.identity = self.process.start()
        return self.identity

    def wait_ready(self, audit_log: Path, timeout: float, check: Callable[[], None]) -> float:
        """Blocks until ready (module docstring); returns how long it took. `check` raises
        when what the operator runs on has stopped (its cluster)."""
        began = time.monotonic()
        tail = audit.Tail(audit_log)
        watching: set[str] = set()
        ready_url = self._fill(self.command.ready_url)

        def ready() -> bool:
            watching.update(audit.watched(tail.new(), self.user))
            return watching.issuperset(WATCHED) and (ready_url is None or _answers(ready_url))

        def checked() -> None:
            check()
            self.check()

        def timed_out() -> Exception:
            missing = sorted(set(WATCHED) - watching)
            return OperatorError(
                f"the operator was not ready in {timeout:.0f}s (no watch of "
                f"{', '.join(missing)} by {self.user} in the audit log, or {ready_url} not "
                f"answering); last lines of {self.log_path}:\n{self.process.tail()}"
            )

        wait_until(ready, timeout, timed_out, each=checked)
        return time.monotonic() - began

    def run(self, timeout: float = 60) -> None:
        """Starts it and waits until its ready URL answers (wait_answers)."""
        self.start()
        self.wait_answers(timeout)

    def wait_answers(self, timeout: float) -> None:
        """Blocks until the ready URL answers 200; raises OperatorError if the operator
        exits first or `timeout` passes."""
        url = self._fill(self.command.ready_url)
        self.process.wait_ready(self.answers, timeout, OperatorError, what=url or "", interval=0.2)

    def answers(self) -> bool:
        """Whether the ready URL answers 200 (True if there is none)."""
        url = self._fill(self.command.ready_url)
        return url is None or _answers(url)

    def check(self) -> None:
        if not self.process.running():
            raise OperatorError(
                f"the operator exited; last lines of {self.log_path}:\n{self.process.tail()}"
            )

    def metrics(self) -> str | None:
        """The operator's own metrics text, if it serves them."""
        url = self._fill(self.command.metrics_url)
        if url is None:
            return None
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                return str(reply.read().decode())
        except OSError:
            return None

    def stop(self) -> None:
        self.process.stop(grace=15)

    def kill(self) -> None:
        """SIGKILL: the operator gets no chance to finish anything."""
        self.process.kill()

    def log_lines(self) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def _fill(self, template: str | None) -> str | None:
        return None if not template else template.format(**self.values)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False
