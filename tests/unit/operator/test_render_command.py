"""`tfjob-operator render`: a TFJob's children printed without a cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from support.checkout import ROOT


def render(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfjob_operator.cli", "render", "-f", str(path), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_renders_a_service_and_a_pod_per_replica() -> None:
    done = render(ROOT / "examples" / "digits-pss.yaml", "--namespace", "ml")
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(done.stdout))
    names = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    replicas = ["chief-0", "evaluator-0", "ps-0", "worker-0", "worker-1"]
    assert names == sorted(
        [("Pod", f"digits-pss-{r}") for r in replicas]
        + [("Service", f"digits-pss-{r}") for r in replicas]
    )
    assert {o["metadata"]["namespace"] for o in objects} == {"ml"}


def test_a_job_with_a_tensorboard_renders_its_deployment_and_service_too() -> None:
    done = render(ROOT / "examples" / "digits-tensorboard.yaml", "--namespace", "ml")
    assert done.returncode == 0, done.stderr
    objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(done.stdout)}
    deployment = objects[("Deployment", "digits-tb-tensorboard")]
    assert ("Service", "digits-tb-tensorboard") in objects
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "shared", "persistentVolumeClaim": {"claimName": "tfjob-data", "readOnly": True}}
    ]
    assert pod["containers"][0]["image"].startswith("ghcr.io/tfjob-operator/tfjob-trainer:")


def test_invalid_job_prints_each_problem_and_fails(tmp_path: Path) -> None:
    job = list(yaml.safe_load_all((ROOT / "examples" / "digits-pss.yaml").read_text()))[-1]
    del job["spec"]["tfReplicaSpecs"]["Worker"]
    job["spec"]["tfReplicaSpecs"]["Chief"]["replicas"] = 2
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(job))
    done = render(path)
    assert done.returncode == 1
    assert "spec.tfReplicaSpecs.Chief.replicas: must be at most 1" in done.stderr
    assert "PS needs Worker" in done.stderr
    assert done.stdout == ""


def test_a_gang_job_renders_its_pod_group_first(tmp_path: Path) -> None:
    job = list(yaml.safe_load_all((ROOT / "examples" / "digits-mwms.yaml").read_text()))[-1]
    for replica in job["spec"]["tfReplicaSpecs"].values():
        replica["template"]["spec"]["schedulerName"] = "volcano"
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump(job))
    done = render(path)
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(done.stdout))
    assert (objects[0]["kind"], objects[0]["apiVersion"]) == (
        "PodGroup",
        "scheduling.volcano.sh/v1beta1",
    )
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert pods
    assert all(p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods)


def test_a_job_that_asks_for_a_disruption_budget_renders_it_after_its_pods(
    tmp_path: Path,
) -> None:
    job = list(yaml.safe_load_all((ROOT / "examples" / "digits-pss.yaml").read_text()))[-1]
    job["metadata"]["annotations"] = {"tfjob.dev/disruption-budget": "true"}
    path = tmp_path / "budget.yaml"
    path.write_text(yaml.safe_dump(job))
    done = render(path, "--namespace", "ml")
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(done.stdout))
    budget = objects[-1]
    assert (budget["kind"], budget["metadata"]["name"]) == (
        "PodDisruptionBudget",
        "digits-pss-training",
    )
    assert budget["spec"]["minAvailable"] == 4, "chief, ps and two workers: not the evaluator"
