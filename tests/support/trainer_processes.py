"""Run `tfjob-train` tasks as real processes on 127.0.0.1, the way the operator would.

Each task gets the TF_CONFIG the operator renders (the evaluator alone also lists
itself), its own process group and log file. Processes are reaped with `os.wait4`, so
each one's peak RSS is known; `stop_all` kills whatever is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support import summary
from support.waiting import wait_until
from tfjob_localcluster.host.ports import free_ports
from tfjob_trainer.results import parse_results

TRAIN = str(Path(sys.executable).with_name("tfjob-train"))
#: Runs a command as the first process (pid 1) of a new PID namespace; it exits as that
#: process does, and that process is killed if it is killed.
FIRST_PROCESS = ["unshare", "--pid", "--fork", "--kill-child"]


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    visible = {kind: hosts for kind, hosts in cluster.items() if kind != "evaluator"}
    if task_type == "evaluator":
        visible["evaluator"] = cluster["evaluator"]
    return json.dumps(
        {
            "cluster": visible,
            "task": {"type": task_type, "index": index},
            "environment": "cloud",
        }
    )


@dataclass
class Task:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started: float
    #: Started as the first process of a PID namespace of its own (FIRST_PROCESS).
    in_namespace: bool = False
    returncode: int | None = None
    peak_rss_mb: float | None = None
    seconds: float | None = None
    #: The most threads seen in the process while it was polled.
    peak_threads: int = 0

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def results(self) -> list[dict[str, Any]]:
        return parse_results(self.log.splitlines())

    def signal(self, signum: int) -> None:
        """Signals the task; one run as a PID namespace's first process gets it as a
        container's does, from outside its namespace."""
        if self.returncode is None:
            os.kill(self._first_process() if self.in_namespace else self.process.pid, signum)

    def _first_process(self) -> int:
        """The host's pid of the namespace's first process: `unshare`'s one child."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return int(children.read_text().split()[0])

    def poll(self) -> int | None:
        if self.returncode is None:
            self.peak_threads = max(self.peak_threads, self._threads())
            pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
            if pid:
                self._reaped(status, usage)
        return self.returncode

    def _threads(self) -> int:
        """The process's threads now (TensorFlow's own), 0 once it has exited."""
        try:
            pid = self._first_process() if self.in_namespace else self.process.pid
            status = Path(f"/proc/{pid}/status").read_text()
        except (FileNotFoundError, IndexError, ProcessLookupError):
            return 0
        (threads,) = [line.split()[1] for line in status.splitlines() if line[:8] == "Threads:"]
        return int(threads)

    def wait(self, timeout: float) -> int:
        wait_until(
            lambda: self.poll() is not None,
            timeout,
            lambda _: f"{self.name} to exit\n{self.tail()}",
            interval=0.1,
        )
        assert self.returncode is not None
        return self.returncode

    def wait_for_line(self, needle: str, timeout: float) -> None:
        wait_until(
            lambda: self._shows(needle),
            timeout,
            lambda _: f"{needle!r} in {self.name}'s log\n{self.tail()}",
            interval=0.1,
        )

    def _shows(self, needle: str) -> bool:
        if needle in self.log:
            return True
        if self.poll() is not None:
            raise AssertionError(f"{self.name} exited {self.returncode}\n{self.tail()}")
        return False

    def tail(self, lines: int = 40) -> str:
        return f"--- {self.name} log (last {lines} lines) ---\n" + "\n".join(
            self.log.splitlines()[-lines:]
        )

    def kill_group(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.wait(30)

    def _reaped(self, status: int, usage: Any) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)
        self.process.returncode = self.returncode
        self.peak_rss_mb = usage.ru_maxrss / 1024
        self.seconds = time.monotonic() - self.started


@dataclass
class LocalJob:
    """The tasks of one TFJob: a cluster layout, shared flags and a work directory."""

    workdir: Path
    counts: dict[str, int]
    args: list[str]
    cluster: dict[str, list[str]] = field(init=False)
    tasks: dict[str, Task] = field(default_factory=dict)
    finished: list[Task] = field(default_factory=list)

    def __post_init__(self) -> None:
        ports = iter(free_ports("127.0.0.1", sum(self.counts.values())))
        self.cluster = {
            kind: [f"127.0.0.1:{next(ports)}" for _ in range(count)]
            for kind, count in self.counts.items()
        }
        self.workdir.mkdir(parents=True, exist_ok=True)

    def start(
        self,
        task_type: str,
        index: int = 0,
        extra: list[str] | None = None,
        *,
        first_process: bool = False,
    ) -> Task:
        """Starts a task; `first_process` runs it as the first process of a PID namespace
        of its own, as a container runs its command."""
        name = f"{task_type}-{index}"
        previous = self.tasks.get(name)
        if previous is not None:
            assert previous.poll() is not None, f"{name} is still running"
            self.finished.append(previous)
        attempt = sum(task.name == name for task in self.finished)
        log_path = self.workdir / f"{name}.{attempt}.log"
        scratch = self.scratch_dir(name)
        scratch.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "TF_CONFIG": tf_config(self.cluster, task_type, index),
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(scratch),
        }
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*(FIRST_PROCESS if first_process else []), TRAIN, *self.args, *(extra or [])],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.workdir,
                start_new_session=True,
            )
        task = Task(
            name=name,
            process=process,
            log_path=log_path,
            started=time.monotonic(),
            in_namespace=first_process,
        )
        self.tasks[name] = task
        return task

    def scratch_dir(self, name: str) -> Path:
        """The task's TMPDIR: where a non-chief writes what it must then delete."""
        return self.workdir / "tmp" / name

    def start_all(self, *task_types: str) -> list[Task]:
        return [
            self.start(kind, index)
            for kind in task_types or self.counts
            for index in range(self.counts[kind])
        ]

    @staticmethod
    def wait_all(tasks: list[Task], timeout: float) -> list[int]:
        """Their exit codes, each polled meanwhile (and its threads counted)."""
        wait_until(
            lambda: None not in [task.poll() for task in tasks],  # every one polled
            timeout,
            lambda _: "\n".join(f"{task.name} to exit\n{task.tail()}" for task in tasks),
            interval=0.1,
        )
        return [task.wait(0) for task in tasks]

    def stop_all(self) -> None:
        for task in self.tasks.values():
            task.kill_group()

    def all_tasks(self) -> list[Task]:
        return [*self.finished, *self.tasks.values()]


JobFactory = Callable[[str, dict[str, int], list[str]], LocalJob]
"""The `local_jobs` fixture: (name, task counts, flags) -> LocalJob."""

#: The section of the pytest output (support/summary.py) that the runs are reported in.
REPORT = "trainer runs: wall time, peak RSS and peak threads"


def record_run(title: str, job: LocalJob, started: float) -> None:
    """Report one run (processes started together) of a job: wall time, exit, peak RSS."""
    summary.add(REPORT, f"{title}: {time.monotonic() - started:.1f} s")
    for task in job.all_tasks():
        if task.started >= started and task.returncode is not None:
            summary.add(
                REPORT,
                f"    {task.log_path.name:<18} exit {task.returncode:>4}  "
                f"{task.seconds:6.1f} s  peak RSS {task.peak_rss_mb:5.0f} MB  "
                f"peak threads {task.peak_threads:5d}",
            )
