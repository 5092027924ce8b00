"""The TFJobs of examples/, as the e2e tests run them."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from typing import Any

import yaml

from support.checkout import ROOT
from tfjob_localcluster.images.catalog import TRAINER
from tfjob_operator import published


def documents(name: str) -> list[dict[str, Any]]:
    """The objects of an example file: the claim it mounts, then the TFJob."""
    return [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d]


def claims() -> dict[str, dict[str, Any]]:
    """The PersistentVolumeClaims the examples declare, by name (TFJobs.create makes the
    ones a job mounts, as `kubectl apply -f` of its file does)."""
    return {
        d["metadata"]["name"]: d
        for path in sorted((ROOT / "examples").rglob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d and d.get("kind") == "PersistentVolumeClaim"
    }


def example(name: str) -> dict[str, Any]:
    """A TFJob from examples/, exactly as users copy it (its trainer image renamed only
    where `make images` named the images under another registry, `$TFJOB_REGISTRY`)."""
    document = documents(name)[-1]
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


def run_python_example(
    name: str, kubeconfig: str, namespace: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """examples/python/`name` run as a script, as its header says: against the cluster of
    `kubeconfig`, in `namespace`, with the trainer image the tests built; it must exit 0."""
    env = {
        **os.environ,
        "KUBECONFIG": kubeconfig,
        "EXAMPLE_NAMESPACE": namespace,
        "EXAMPLE_IMAGE": TRAINER,
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "python" / name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done
