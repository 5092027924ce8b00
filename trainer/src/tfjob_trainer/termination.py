"""SIGTERM handling: a flag for trainers, a prompt exit for servers.

Kubernetes sends SIGTERM when it deletes or preempts a pod, then SIGKILL after the
grace period. A trainer only records the signal here; the training loop acts on it at
the next step boundary, when a checkpoint can be written consistently. A
ParameterServerStrategy ps or worker has no state of its own to save, so it exits at
once with 143, as a container killed by SIGTERM would.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

from tfjob_trainer.exit_codes import TERMINATED_BY_SIGTERM


class TerminationWatch:
    """Records SIGTERM from the moment `install` is called."""

    def __init__(self) -> None:
        self._received = threading.Event()

    @property
    def requested(self) -> bool:
        return self._received.is_set()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # os.write, not logging: a signal handler may interrupt code that holds
        # the logging lock.
        if not self._received.is_set():
            os.write(2, b"tfjob-train: SIGTERM received; checkpointing at the next step\n")
        self._received.set()


def exit_on_sigterm() -> None:
    """Make SIGTERM end this process promptly with exit code 143."""

    def _exit(signum: int, frame: FrameType | None) -> None:
        os.write(2, b"tfjob-train: SIGTERM received; stopping the server\n")
        sys.stdout.flush()
        os._exit(TERMINATED_BY_SIGTERM)

    signal.signal(signal.SIGTERM, _exit)
