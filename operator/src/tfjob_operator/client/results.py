"""The trainer's results as data: the `TFJOB_RESULT {json}` line each finishing process
prints (tfjob_trainer.results documents the keys; a test keeps the two prefixes equal).

The client, `make demo` and the e2e tests read results through here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

RESULT_PREFIX: Final = "TFJOB_RESULT "


def results_in(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Every results line in a log, parsed, in order (a replica restarted in place may
    print one per run). A line that is not valid JSON is skipped: a log may be cut."""
    found = []
    for line in lines:
        if not line.startswith(RESULT_PREFIX):
            continue
        try:
            parsed = json.loads(line.removeprefix(RESULT_PREFIX))
        except ValueError:
            continue
        if isinstance(parsed, dict):
            found.append(parsed)
    return found
