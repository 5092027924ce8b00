"""A bad job fails at once: exit 2 and one line on stderr, never a traceback.

These runs stop before TensorFlow is imported, so they take a fraction of a second.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.trainer_processes import TRAIN

TIMEOUT = 60
TWO_WORKERS = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}


def run(tmp_path: Path, args: list[str], tf_config: str | None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    return subprocess.run(
        [TRAIN, "--model-dir", "model", "--checkpoint-dir", "ckpt", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.parametrize(
    ("tf_config", "args", "fragment"),
    [
        ("{'cluster': {}}", [], "TF_CONFIG is not valid JSON"),
        (
            json.dumps({"cluster": {"worker": ["127.0.0.1:2222"]}, "task": {"type": "boss"}}),
            [],
            "unknown task type 'boss'",
        ),
        (
            json.dumps({"cluster": TWO_WORKERS, "task": {"type": "worker", "index": 2}}),
            [],
            "task worker:2 is not in the cluster",
        ),
        (
            json.dumps(
                {
                    "cluster": {"chief": ["127.0.0.1:1", "127.0.0.1:2"]},
                    "task": {"type": "chief", "index": 0},
                }
            ),
            [],
            "2 chief tasks",
        ),
        (
            json.dumps({"cluster": TWO_WORKERS, "task": {"type": "worker", "index": 0}}),
            ["--strategy", "mirrored"],
            "use multi-worker-mirrored or auto",
        ),
        (None, ["--epochs", "0"], "argument --epochs: must be >= 1"),
        (None, ["--entrypoint", "no_such_module_xyz:main"], "no module named"),
    ],
    ids=[
        "json",
        "task-type",
        "task-index",
        "two-chiefs",
        "forced-strategy",
        "flag",
        "entrypoint-module",
    ],
)
def test_invalid_configuration_exits_2_with_one_line(
    tmp_path: Path, tf_config: str | None, args: list[str], fragment: str
) -> None:
    completed = run(tmp_path, args, tf_config)
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("tfjob-train: invalid configuration: ")
    assert fragment in lines[0]
    assert completed.stdout == ""
