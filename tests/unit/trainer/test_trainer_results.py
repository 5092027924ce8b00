"""The TFJOB_RESULT line and the one-line rendering of TensorFlow errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tfjob_trainer.errors import one_line
from tfjob_trainer.results import (
    ACCURACY_THRESHOLD,
    REQUIRED_KEYS,
    RESULT_PREFIX,
    format_result,
    parse_results,
)

FIELDS = {
    "loss": 0.05,
    "accuracy": np.float32(0.975),
    "examples_per_second": 1234.5,
    "replicas": np.int64(2),
    "strategy": "multi-worker-mirrored",
    "task": {"type": "worker", "index": 0},
    "epochs": 12,
    "initial_epoch": 3,
    "wall_seconds": 40.2,
    "accuracy_threshold": ACCURACY_THRESHOLD,
}


def test_results_line_round_trips_through_a_log() -> None:
    line = format_result(FIELDS)
    assert line.startswith(RESULT_PREFIX)
    assert "\n" not in line
    log = ["epoch 1/12 loss=0.3", line, "tfjob-train: done"]
    (parsed,) = parse_results(log)
    assert parsed["replicas"] == 2
    assert parsed["accuracy"] == pytest.approx(0.975)
    assert parsed["task"] == {"type": "worker", "index": 0}
    assert set(REQUIRED_KEYS) <= parsed.keys()


def test_a_line_without_a_required_key_is_refused() -> None:
    incomplete = {key: value for key, value in FIELDS.items() if key != "initial_epoch"}
    with pytest.raises(ValueError, match="initial_epoch"):
        format_result(incomplete)


def test_unserialisable_values_are_refused() -> None:
    with pytest.raises(TypeError, match="object"):
        format_result({**FIELDS, "extra": object()})


def test_threshold_is_a_probability() -> None:
    assert 0.5 < ACCURACY_THRESHOLD < 1.0
    assert json.loads(format_result(FIELDS)[len(RESULT_PREFIX) :])["accuracy_threshold"] == 0.9


class FakeOpError(Exception):
    """Stands in for tf.errors.OpError's `message` attribute (text only, no TF)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


COLLECTIVE_ABORT = """Graph execution error:

Detected at node CollectiveReduceV2 defined at (most recent call last):
  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main

Collective ops is aborted by: recvmsg:Connection reset by peer
Additional GRPC error information from remote target /job:worker/replica:0/task:1
The error could be from a previous operation. Restart your program to reset.
\t [[{{node CollectiveReduceV2}}]] [Op:__inference_train_function_2103]"""

ROOT_ERRORS = """2 root error(s) found.
  (0) UNAVAILABLE: failed to connect to all addresses
  (1) CANCELLED: Function was cancelled before it was started"""


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (COLLECTIVE_ABORT, "Collective ops is aborted by: recvmsg:Connection reset by peer"),
        (ROOT_ERRORS, "(0) UNAVAILABLE: failed to connect to all addresses"),
        ("plain message", "plain message"),
        (
            "{{function_node __wrapped__CollectiveReduceV2_device_/job:worker/replica:0}} "
            "Collective ops is aborted by: Error reported from /job:worker/task:1",
            "Collective ops is aborted by: Error reported from /job:worker/task:1",
        ),
        ("  only indented\n  lines", "only indented lines"),
    ],
)
def test_one_line_finds_the_cause(message: str, expected: str) -> None:
    assert one_line(FakeOpError(message)) == expected


def test_one_line_is_bounded() -> None:
    assert len(one_line(FakeOpError("x" * 1000), limit=50)) == 50
