"""The TFJobs of examples/, as the e2e tests run them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tfjob_localcluster.images import TRAINER
from tfjob_operator import published

ROOT = Path(__file__).resolve().parents[2]


def example(name: str) -> dict[str, Any]:
    """A TFJob from examples/, exactly as users copy it (its trainer image renamed only
    where `make images` named the images under another registry, `$TFJOB_REGISTRY`)."""
    document: dict[str, Any] = yaml.safe_load((ROOT / "examples" / name).read_text())
    for spec in document["spec"]["tfReplicaSpecs"].values():
        for container in spec["template"]["spec"]["containers"]:
            if container["image"] == published.trainer_image():
                container["image"] = TRAINER
    return document


def set_args(job: dict[str, Any], extra: list[str]) -> dict[str, Any]:
    """The job with `extra` trainer flags appended on every replica."""
    job = copy.deepcopy(job)
    for spec in job["spec"]["tfReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["args"] += extra
    return job
