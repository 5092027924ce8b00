"""tfjob-train as a container's first process: it runs itself as a child.

A pod's deletion sends SIGTERM to its containers' first processes, and SIGKILL after the
grace period (30 s by default). While tfjob-train sets up (TensorFlow's import, the
strategy's creation, the wait for every peer) nothing of the job's is at stake, and a
deleted pod should go at once: a worker whose chief failed is deleted so, and a job
deleted while its peers never came. But TensorFlow catches SIGTERM for itself once it
joins a multi-worker cluster (its preemption notifier, which only records the time), and
holds the interpreter while it waits for the peers, so no Python handler could act; and
the first process of a PID namespace is sent no signal it has no handler for.

So as PID 1, tfjob-train starts itself again as its only child and does what a
container's init (tini, `docker run --init`) does: forwards signals, reaps orphans, and
exits as the child did (128 + the signal that ended it). On SIGTERM it also knows the
child's phase: the child says, through an inherited pipe, when its role begins (training,
evaluating, serving). Before that, the child is killed at once and the init exits 143;
after, it has the SIGTERM to itself (a trainer checkpoints at the next step; a server
exits).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Final

from tfjob_trainer.exit_codes import TERMINATED_BY_SIGTERM

#: What a container's init passes on: termination, interruption, and the user signals.
FORWARDED: Final = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
#: The child's end of the pipe on which it says its role has begun (a file descriptor).
ROLE_BEGUN_FD_ENV: Final = "TFJOB_TRAIN_ROLE_BEGUN_FD"


def is_first_process() -> bool:
    return os.getpid() == 1


def this_command() -> list[str]:
    """The interpreter and the arguments this process was started with."""
    return [sys.executable, *sys.orig_argv[1:]]


def role_begun() -> None:
    """Tells the init, if there is one, that the role has begun: SIGTERM is the role's
    from now on."""
    fd = os.environ.pop(ROLE_BEGUN_FD_ENV, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(int(fd), b"1")
            os.close(int(fd))


def run_as_child(argv: Sequence[str]) -> int:
    """Runs `argv` as a child until it exits, passing it the signals in FORWARDED (a
    SIGTERM before its role has begun kills it); its exit code, or 128 + the signal
    that ended it. Orphans that end meanwhile are reaped."""
    begun_read, begun_write = os.pipe()
    os.set_blocking(begun_read, False)
    child: subprocess.Popen[bytes] | None = None
    early: list[int] = []
    begun = killed = False

    def role_has_begun() -> bool:
        nonlocal begun
        if not begun:
            with contextlib.suppress(BlockingIOError):
                begun = os.read(begun_read, 1) == b"1"
        return begun

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal killed
        if child is None:
            early.append(signum)
            return
        if signum == signal.SIGTERM and not role_has_begun():
            signum, killed = signal.SIGKILL, True
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    for forwarded in FORWARDED:
        signal.signal(forwarded, forward)
    child = subprocess.Popen(
        list(argv),
        pass_fds=(begun_write,),
        env={**os.environ, ROLE_BEGUN_FD_ENV: str(begun_write)},
    )
    os.close(begun_write)
    for signum in early:
        forward(signum, None)
    while True:
        # Interrupted by a signal, waitpid runs its handler and waits on (PEP 475).
        pid, status = os.waitpid(-1, 0)
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            if killed:
                return TERMINATED_BY_SIGTERM
            return 128 - code if code < 0 else code
