"""A candidate whose clock disagrees with the cluster's: Debian's libfaketime.

The process runs with libfaketime preloaded: its wall clock (what it writes as a Lease's
renewTime, a condition's lastTransitionTime, an event's timestamps) runs SKEW_SECONDS
ahead of every other process here, while its monotonic clock, which the election counts
with, is left alone, as two machines' clocks disagree. Leader election must not care:
each candidate judges a Lease by its own clock, from when it saw the Lease change.
"""

from __future__ import annotations

from typing import Final

from tfjob_localcluster.packages import LIBFAKETIME

SKEW_SECONDS: Final = 180


def skewed_environment(seconds: int = SKEW_SECONDS) -> dict[str, str]:
    """The environment of a process whose wall clock is `seconds` ahead."""
    return {
        "LD_PRELOAD": LIBFAKETIME,
        "FAKETIME": f"{seconds:+d}",  # seconds
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
