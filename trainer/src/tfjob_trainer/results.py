"""The one results line each finishing process prints: `TFJOB_RESULT {json}`.

Tests, the e2e suite and `make demo` read it from pod logs, so its keys are a contract:

- `loss`, `accuracy`: on the held-out test split (the evaluator: of the final checkpoint)
- `examples_per_second`: global training throughput (the evaluator: evaluation speed)
- `replicas`: model replicas training together (MWMS: all replicas of all workers;
  PSS: workers x replicas per worker; the evaluator: 1)
- `strategy`, `task` ({"type", "index"}), `epochs` (completed),
  `initial_epoch` (where this run started: > 0 after a resume; null for the evaluator)
- `wall_seconds`: since the process started
- `accuracy_threshold`: ACCURACY_THRESHOLD below
plus role-specific keys (documented in trainer/README.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final

RESULT_PREFIX: Final = "TFJOB_RESULT "

ACCURACY_THRESHOLD: Final = 0.9
"""The test accuracy a correct run of the built-in digits workload reaches.

On the 359-example test split, logistic regression scores 0.967 and the default MLP
0.95-0.99 after the default 12 epochs, in one process, under MultiWorkerMirroredStrategy
or under (asynchronous) ParameterServerStrategy. The failures this guards against land
near chance: a model whose updates never reached the variables, that diverged, or that
was fed features and labels out of step by a broken input pipeline scores about 0.1
(the majority class is 0.117). 0.9 sits between, with room for the run-to-run noise of
asynchronous updates and of a small test split (one example is 0.28%). That replicas
really trained together is checked separately (MWMS replicas end with equal metrics).
"""

REQUIRED_KEYS: Final = (
    "loss",
    "accuracy",
    "examples_per_second",
    "replicas",
    "strategy",
    "task",
    "epochs",
    "initial_epoch",
    "wall_seconds",
    "accuracy_threshold",
)


def format_result(fields: Mapping[str, Any]) -> str:
    missing = [key for key in REQUIRED_KEYS if key not in fields]
    if missing:
        raise ValueError(f"results line lacks {', '.join(missing)}")
    return RESULT_PREFIX + json.dumps(dict(fields), sort_keys=True, default=_scalar)


def _scalar(value: Any) -> Any:
    """NumPy and TensorFlow scalars (they have .item()) as plain numbers."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def print_result(fields: Mapping[str, Any]) -> None:
    sys.stdout.write(format_result(fields) + "\n")
    sys.stdout.flush()


def parse_results(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Every results line in `lines` (for example a pod's log), decoded."""
    return [
        json.loads(line[len(RESULT_PREFIX) :]) for line in lines if line.startswith(RESULT_PREFIX)
    ]
