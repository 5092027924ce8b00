"""How long to wait before trying again: exponential, jittered, never sooner than asked.

Every retry of the operator waits by `retry_delay`: a reconcile that failed, a watch or a
list that failed, a child the API server refused, a clean-up. Without jitter, operators
that failed at one moment (an API server restarting under all of them, a throttling that
refused a burst) come back at one moment and fail together again; each wait is stretched
by a random part of itself, as client-go's `wait.Backoff` does with its Jitter factor.

An API server that sheds load says when to come back: API Priority and Fairness answers
429 with `Retry-After` and a Status whose `details.retryAfterSeconds` says the same, and
an overloaded or timing-out server may do so on 5xx. A retry is never sooner than that.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from typing import Final

from .apiserver.errors import ApiError

#: The random part added to each wait, as a fraction of it (client-go's Jitter factor).
JITTER: Final = 0.5
#: The longest `Retry-After` honoured: a server asking for more is asked again then.
MAX_RETRY_AFTER_SECONDS: Final = 60.0


def retry_delay(
    failures: int,
    first: float,
    most: float,
    *,
    retry_after: float | None = None,
    uniform: Callable[[], float] = random.random,
) -> float:
    """Seconds before try number `failures` + 1: `first` doubled at each failure up to
    `most`, plus up to JITTER of itself, and at least the `retry_after` the server asked
    (up to MAX_RETRY_AFTER_SECONDS)."""
    base = min(first * 2.0 ** max(failures - 1, 0), most)
    return max(jittered(base, uniform), min(retry_after or 0.0, MAX_RETRY_AFTER_SECONDS))


def delay_after(error: BaseException, failures: int, first: float, most: float) -> float:
    """`retry_delay` after `failures` in a row, the last being `error`: never sooner than
    the `retryAfterSeconds` of the API server's answer, if it gave one."""
    asked = error.retry_after if isinstance(error, ApiError) else None
    return retry_delay(failures, first, most, retry_after=asked)


def jittered(seconds: float, uniform: Callable[[], float] = random.random) -> float:
    """`seconds` plus up to JITTER of itself."""
    return seconds * (1.0 + JITTER * uniform())


def retry_after_header(headers: Mapping[str, str]) -> float | None:
    """The seconds of a `Retry-After: <seconds>` header; None if there is none or it is
    not a number of seconds (an HTTP date is not what the API server sends)."""
    try:
        seconds = float(headers.get("Retry-After", "nan"))
    except ValueError:
        return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None
