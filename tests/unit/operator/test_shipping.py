"""A function shipped as source (client/shipping.py) runs the same in a fresh interpreter,
and what cannot be shipped is refused, named, before anything is created.

Each shipped module is run here by a new Python process, which has none of this module's
state: only what the source carries.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from tfjob_operator.client.shipping import MODULE, UnshippableError, ship

LEARNING_RATES = (0.1, 0.01)
LABELS = {"digits": 10, "names": ["zero", "one"]}
SCALE = 2.5


def scaled(value: float) -> float:
    return value * SCALE


class Running:
    """A running mean, as a class the shipped function uses."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def add(self, value: float) -> None:
        self.total += scaled(value)
        self.count += 1

    @property
    def mean(self) -> float:
        return self.total / self.count


def train(ctx: Any) -> dict[str, Any]:
    """Uses a module, a constant of each kind, a helper, a class, a name imported from a
    module, and a comprehension that reads a global."""
    mean = Running()
    for rate in LEARNING_RATES:
        mean.add(rate)
    ordered = OrderedDict(sorted(LABELS.items()))
    squares = [math.sqrt(rate) for rate in LEARNING_RATES]
    return {
        "mean": mean.mean,
        "labels": list(ordered),
        "squares": squares,
        "json": json.dumps(ctx),
    }


def run_shipped(source: str, function: str, argument: Any, tmp_path: Path) -> Any:
    """Imports the shipped module in a new interpreter and prints its function's answer."""
    (tmp_path / f"{MODULE}.py").write_text(source)
    script = (
        f"import json, {MODULE}\n"
        f"print(json.dumps({MODULE}.{function}(json.loads({json.dumps(json.dumps(argument))}))))"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n{script}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr + "\n" + source
    return json.loads(done.stdout)


def test_a_function_runs_the_same_from_its_shipped_source(tmp_path: Path) -> None:
    shipped = ship(train)
    here = train({"task": "worker"})
    there = run_shipped(shipped.source, "train", {"task": "worker"}, tmp_path)
    assert there == json.loads(json.dumps(here))
    assert "import math" in shipped.source
    assert "from collections import OrderedDict" in shipped.source
    assert "SCALE = 2.5" in shipped.source
    # Defined once each, after what they use.
    source = shipped.source
    assert source.count("def scaled(") == 1
    assert source.index("def scaled(") < source.index("class Running") < source.index("def train(")


def test_a_lambda_is_refused_by_name() -> None:
    with pytest.raises(UnshippableError, match="cannot ship a lambda"):
        ship(lambda ctx: {"loss": 0})


def test_a_function_closing_over_a_local_object_is_refused() -> None:
    model = object()

    def fit(ctx: Any) -> dict[str, Any]:
        return {"model": str(model)}

    with pytest.raises(UnshippableError, match=r"closes over model.*pass what it needs"):
        ship(fit)


OPEN_FILE = sys.stdout


def writes_to_a_process_object(ctx: Any) -> None:
    OPEN_FILE.write("hello")


def test_a_global_that_is_not_a_constant_is_refused_by_name() -> None:
    with pytest.raises(UnshippableError, match=r"reads the global OPEN_FILE, a \w+ of this"):
        ship(writes_to_a_process_object)


def test_what_is_not_a_function_is_refused() -> None:
    with pytest.raises(UnshippableError, match="not a Python function"):
        ship(print)
