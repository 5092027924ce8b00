"""Flags of tfjob-train: defaults, $TFJOB_STRATEGY, one-line errors."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tfjob_trainer.entrypoint import load_entrypoint
from tfjob_trainer.errors import ConfigError
from tfjob_trainer.options import parse_options
from tfjob_trainer.strategy_choice import StrategyName

DIRS = ["--model-dir", "m", "--checkpoint-dir", "gs://bucket/ckpt"]


def test_defaults_train_digits() -> None:
    options = parse_options(DIRS, {})
    assert options.dataset == "digits"
    assert options.strategy == StrategyName.AUTO
    assert options.gpu_memory_growth is True
    assert options.gpu_memory_limit_mb is None
    assert options.entrypoint is None
    assert options.steps_per_epoch is None
    assert options.hidden_units == (128, 64)
    assert options.model_dir == os.path.abspath("m")
    assert options.checkpoint_dir == "gs://bucket/ckpt"


def test_every_knob_is_parsed() -> None:
    options = parse_options(
        [
            *DIRS,
            "--dataset=synthetic",
            "--synthetic-examples=1000",
            "--epochs=3",
            "--steps-per-epoch=7",
            "--batch-size=16",
            "--learning-rate=0.1",
            "--hidden-units=32",
            "--log-dir=/logs",
            "--strategy=mirrored",
            "--log-device-placement",
            "--no-gpu-memory-growth",
            "--gpu-memory-limit=2048",
            "--collective-timeout=0",
            "--entrypoint=pkg.mod:main",
            "--evaluator-timeout=5",
            "--eval-poll-seconds=0.5",
            "--keep-checkpoints=1",
        ],
        {},
    )
    assert (options.dataset, options.synthetic_examples) == ("synthetic", 1000)
    assert (options.epochs, options.steps_per_epoch, options.batch_size) == (3, 7, 16)
    assert options.learning_rate == 0.1
    assert options.hidden_units == (32,)
    assert options.log_dir == "/logs"
    assert options.strategy == StrategyName.MIRRORED
    assert options.log_device_placement is True
    assert options.gpu_memory_growth is False
    assert options.gpu_memory_limit_mb == 2048
    assert options.collective_timeout_seconds == 0
    assert options.entrypoint == "pkg.mod:main"
    assert options.evaluator_timeout_seconds == 5
    assert options.eval_poll_seconds == 0.5
    assert options.keep_checkpoints == 1


def test_strategy_comes_from_the_environment_unless_a_flag_overrides() -> None:
    environ = {"TFJOB_STRATEGY": "multi-worker-mirrored"}
    assert parse_options(DIRS, environ).strategy == StrategyName.MULTI_WORKER_MIRRORED
    assert parse_options([*DIRS, "--strategy=default"], environ).strategy == StrategyName.DEFAULT


def test_entrypoint_runs_without_directories() -> None:
    options = parse_options(["--entrypoint", "pkg:main"], {})
    assert options.model_dir is None
    assert options.checkpoint_dir is None
    assert options.entrypoint_args == ()


def test_arguments_after_a_double_dash_are_for_the_entrypoint() -> None:
    options = parse_options(
        ["--entrypoint", "pkg:main", "--epochs", "2", "--", "--epochs", "x"], {}
    )
    assert options.epochs == 2
    assert options.entrypoint_args == ("--epochs", "x")


@pytest.mark.parametrize(
    ("argv", "environ", "fragment"),
    [
        ([], {}, "needs --model-dir and --checkpoint-dir"),
        (["--model-dir", "m"], {}, "needs --checkpoint-dir"),
        ([*DIRS, "--epochs", "0"], {}, "must be >= 1"),
        ([*DIRS, "--epochs", "ten"], {}, "expected a number"),
        ([*DIRS, "--learning-rate", "-1"], {}, "must be > 0"),
        ([*DIRS, "--collective-timeout", "-5"], {}, "must be >= 0"),
        ([*DIRS, "--hidden-units", "64,x"], {}, "comma-separated layer sizes"),
        ([*DIRS, "--hidden-units", "64,0"], {}, "layer sizes must be >= 1"),
        ([*DIRS, "--dataset", "mnist"], {}, "invalid choice: 'mnist'"),
        ([*DIRS, "--strategy", "tpu"], {}, "invalid choice: 'tpu'"),
        ([*DIRS, "--entrypoint", "pkg.main"], {}, "expected module:function"),
        ([*DIRS, "--gpu-memory-limit", "0"], {}, "must be >= 1"),
        ([*DIRS, "--unknown"], {}, "unrecognized arguments: --unknown"),
        (DIRS, {"TFJOB_STRATEGY": "mwms"}, "$TFJOB_STRATEGY='mwms' is not one of"),
        ([*DIRS, "--", "--lr", "1"], {}, "arguments after -- are for an --entrypoint"),
    ],
)
def test_invalid_flags_are_one_line_config_errors(
    argv: list[str], environ: dict[str, str], fragment: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_options(argv, environ)
    assert fragment in str(raised.value)
    assert "\n" not in str(raised.value)


def test_an_entrypoint_may_be_a_file_imported_with_what_lies_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`/path/file.py:function`, as TFJobClient.train ships a function: the file's
    directory goes first on the module path, so packages installed beside it import."""
    (tmp_path / "helper_beside.py").write_text("VALUE = 41\n")
    (tmp_path / "shipped_fn.py").write_text(
        "import helper_beside\n\ndef train(ctx):\n    return {'value': helper_beside.VALUE + ctx}\n"
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = f"{tmp_path}/shipped_fn.py:train"
    assert parse_options(["--entrypoint", spec], {}).entrypoint == spec
    assert load_entrypoint(spec)(1) == {"value": 42}
    assert sys.path[0] == str(tmp_path)
    with pytest.raises(ConfigError, match="no file"):
        load_entrypoint(f"{tmp_path}/absent.py:train")
    with pytest.raises(ConfigError, match=r"expected module:function or /path/to/file\.py"):
        parse_options(["--entrypoint", "relative/file.py:train"], {})
