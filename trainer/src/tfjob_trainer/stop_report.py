"""The checkpoint a preempted run stopped at, told to Kubernetes as its termination message.

A container's termination message (the file at its `terminationMessagePath`,
/dev/termination-log by default) is kept in the pod's status after the container exits.
The operator reads it from a replica that exited 42 (`Preempted`) and records the step in
the TFJob's `status.checkpoint` and its events, so a user sees where a preempted or
suspended job stopped and where it resumes without reading the logs of pods that are gone.

The message is one JSON object, the contract with the operator (its stops.py):
`{"checkpoint": {"epoch": E, "step": S}}`, with E the 1-based epoch the checkpoint was
written in and S the optimizer's step count at that checkpoint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final

#: Where Kubernetes reads the message from unless the pod says otherwise.
DEFAULT_PATH: Final = "/dev/termination-log"
#: Set to another path to write the message elsewhere (tests, or a pod whose container
#: sets its own terminationMessagePath).
PATH_VARIABLE: Final = "TFJOB_TERMINATION_LOG"


def report_checkpoint(epoch: int, step: int, path: str | None = None) -> bool:
    """Writes the message; False where there is no such file to write (not in a pod)."""
    target = Path(path or os.environ.get(PATH_VARIABLE) or DEFAULT_PATH)
    if not target.exists():
        return False
    message = json.dumps({"checkpoint": {"epoch": epoch, "step": step}})
    try:
        target.write_text(message + "\n", encoding="utf-8")
    except OSError:
        return False
    return True
