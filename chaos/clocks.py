"""A candidate whose clock disagrees with the cluster's: Debian's libfaketime.

The process runs with libfaketime preloaded: its wall clock (what it writes as a Lease's
renewTime, a condition's lastTransitionTime, an event's timestamps) runs SKEW_SECONDS
ahead of every other process here, while its monotonic clock, which the election counts
with, is left alone, as two machines' clocks disagree. Leader election must not care:
each candidate judges a Lease by its own clock, from when it saw the Lease change.

libfaketime keeps a little shared memory per process in /dev/shm, named after its pid,
which it removes as the process exits, but not when the process is killed (as the faults
kill candidates): `remove_leftovers` removes it once those processes are gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from tfjob_localcluster.host.packages import LIBFAKETIME

SKEW_SECONDS: Final = 180


def skewed_environment(seconds: int = SKEW_SECONDS) -> dict[str, str]:
    """The environment of a process whose wall clock is `seconds` ahead."""
    return {
        "LD_PRELOAD": LIBFAKETIME,
        "FAKETIME": f"{seconds:+d}",  # seconds
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def remove_leftovers(pids: Iterable[int], shm: Path = Path("/dev/shm")) -> None:
    """Removes what libfaketime left in `shm` for the processes `pids`, ended."""
    for pid in pids:
        for name in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"):
            with contextlib.suppress(FileNotFoundError):
                (shm / name).unlink()
