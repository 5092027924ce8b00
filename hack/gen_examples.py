"""Writes examples/*.yaml with `tfjob-operator new`, so every example is what the
scaffolder produces for these choices.

    .venv/bin/python -m hack.gen_examples          # regenerate
    .venv/bin/python -m hack.gen_examples --check  # exit 1 if an example is out of date
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

from hack.generated import sync
from tfjob_operator.cli import main as tfjob_operator

ROOT = Path(__file__).resolve().parent.parent

#: Each example and the `tfjob-operator new` arguments that produce it.
#: The claim every example mounts at /shared, declared in each (kubectl apply keeps the
#: first): a job's run directory on it is its own ($(TFJOB_UID)).
CLAIM = ["--pvc", "tfjob-data", "--pvc-size", "1Gi"]
EXAMPLES: dict[str, list[str]] = {
    "examples/digits-mwms.yaml": ["digits-mwms", "--strategy", "mwms", "--workers", "2", *CLAIM],
    "examples/digits-pss.yaml": [
        "digits-pss",
        "--strategy",
        "pss",
        "--workers",
        "2",
        "--ps",
        "1",
        "--evaluator",
        *CLAIM,
    ],
    "examples/digits-tensorboard.yaml": [
        "digits-tb",
        "--workers",
        "2",
        "--tensorboard",
        *CLAIM,
    ],
    "examples/digits-gpu.yaml": [
        "digits-gpu",
        "--strategy",
        "mwms",
        "--workers",
        "2",
        "--gpus",
        "1",
        *CLAIM,
    ],
    "examples/digits-mirrored-gpus.yaml": [
        "digits-mirrored",
        "--workers",
        "1",
        "--gpus",
        "4",
        *CLAIM,
    ],
    "examples/digits-mwms-gpus.yaml": ["digits-mwms-gpus", "--workers", "2", "--gpus", "2", *CLAIM],
    "examples/custom-entrypoint/tfjob.yaml": [
        "sine",
        "--workers",
        "2",
        "--train-arg=--entrypoint",
        "--train-arg=sine_regression:main",
        "--train-arg=--epochs",
        "--train-arg=3",
        *CLAIM,
    ],
}


def render(arguments: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = tfjob_operator(["new", *arguments])
    if code != 0:
        raise SystemExit(f"tfjob-operator new {' '.join(arguments)} failed with {code}")
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if an example is stale")
    args = parser.parse_args()
    files = {ROOT / relative: render(arguments) for relative, arguments in EXAMPLES.items()}
    return sync(files, check=args.check, generator="make examples")


if __name__ == "__main__":
    sys.exit(main())
