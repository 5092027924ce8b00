"""Kubeflow's own TFJob examples, run by the operator the Helm chart installs with
`kubeflow.enabled=true` on the local cluster.

The examples are read from the pinned Kubeflow training-operator's Go module
(KUBEFLOW_TRAINING_OPERATOR_VERSION in hack/versions.env), not copied. They are applied as
they are, kubeflow.org/v1 and all, with two changes only: each tensorflow container runs a
short command from the busybox image instead of Kubeflow's image, which is on a registry
and downloads MNIST at run time, neither of which this machine can reach; and they go into
the test's namespace. The command checks the TF_CONFIG the operator gave it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.builders import SHELL_IMAGE
from support.cluster import Kubectl
from support.fixtures import stop_session_operator
from support.tfjobs import TFJobs, condition

from tfjob_localcluster.addons.chart import RELEASE, install_operator, run_helm
from tfjob_localcluster.binaries import read_versions
from tfjob_localcluster.checkout import CHART
from tfjob_localcluster.gomodule import module_dir

MODULE = "github.com/kubeflow/training-operator"
#: The examples without volumes: the others mount PersistentVolumeClaims they create
#: beside the TFJob, for the data they download.
EXAMPLES = ("simple.yaml", "dist-mnist/tf_job_mnist.yaml")
#: Prints TF_CONFIG and fails unless it names this pod's own task.
CHECK_TF_CONFIG = (
    'echo "$TF_CONFIG"; '
    'task="\\"task\\":{\\"type\\":\\"$TFJOB_REPLICA_TYPE\\",\\"index\\":$TFJOB_REPLICA_INDEX}"; '
    'case "$TF_CONFIG" in *"$task"*) exit 0;; esac; '
    "echo 'TF_CONFIG does not name this task' >&2; exit 1"
)


@pytest.fixture(scope="module")
def kubeflow_release(
    request: pytest.FixtureRequest,
    kubeconfig: str,
    kubectl: Kubectl,
    project_images: tuple[str, ...],
) -> Iterator[str]:
    """The chart installed with kubeflow.enabled=true, alone: the checkout's operator is
    stopped. Kubeflow's CRD is removed afterwards (Helm keeps it, by design)."""
    stop_session_operator(request.config)
    namespace = f"tfjob-kubeflow-{secrets.token_hex(3)}"
    install_operator(kubeconfig, namespace, values=["kubeflow.enabled=true"])
    try:
        yield namespace
    finally:
        run_helm(kubeconfig, "uninstall", RELEASE, "--namespace", namespace, "--wait")
        kubectl("delete", "namespace", namespace, "--wait=false")
        kubectl("delete", "crd", "tfjobs.kubeflow.org", "--wait=true", "--timeout=120s")


def kubeflow_example(path: str) -> dict[str, Any]:
    root = module_dir(MODULE, read_versions()["KUBEFLOW_TRAINING_OPERATOR_VERSION"])
    example: dict[str, Any] = yaml.safe_load((root / "examples" / "tensorflow" / path).read_text())
    return example


def offline(example: dict[str, Any]) -> dict[str, Any]:
    """The example with its tensorflow containers running CHECK_TF_CONFIG, in no namespace."""
    example["metadata"].pop("namespace", None)
    for spec in example["spec"]["tfReplicaSpecs"].values():
        for container in spec["template"]["spec"]["containers"]:
            if container["name"] == "tensorflow":
                container.update(image=SHELL_IMAGE, command=["sh", "-c", CHECK_TF_CONFIG])
    return example


def test_the_examples_are_kubeflows_unchanged_in_what_they_ask() -> None:
    for path in EXAMPLES:
        example = kubeflow_example(path)
        assert example["apiVersion"] == "kubeflow.org/v1"
        assert example["kind"] == "TFJob"
        for spec in example["spec"]["tfReplicaSpecs"].values():
            pod = spec["template"]["spec"]
            assert "volumes" not in pod, path
            assert [c["name"] for c in pod["containers"]] == ["tensorflow"]


@pytest.mark.parametrize("path", EXAMPLES)
def test_a_kubeflow_example_runs_to_completion(
    kubeflow_release: str,
    kubectl: Kubectl,
    namespace: str,
    path: str,
    kubeconfig: str,
) -> None:
    example = offline(kubeflow_example(path))
    name = example["metadata"]["name"]
    jobs = TFJobs(kubeconfig, namespace, group="kubeflow.org")
    jobs.create(example)
    try:
        done = jobs.wait_state(name, "Succeeded", 180)
    except AssertionError as stalled:
        log = kubectl(
            "logs", "-n", kubeflow_release, "-l", "app.kubernetes.io/name=tfjob-operator",
            "--tail=80", check=False,
        )  # fmt: skip
        raise AssertionError(f"{stalled}\nthe installed operator's log:\n{log.stdout}") from None
    assert condition(done, "Succeeded")["reason"] == "TFJobSucceeded"

    asked = example["spec"]["tfReplicaSpecs"]
    statuses = done["status"]["replicaStatuses"]
    assert set(statuses) == set(asked)
    leader = "Chief" if "Chief" in asked else "Worker"
    assert statuses[leader]["succeeded"] >= 1
    # Services of replicas still running at the end go with their pods (cleanPodPolicy
    # Running): the events name every one created.
    events = jobs.wait_events(name, ["SuccessfulCreateService", "TFJobSucceeded"])
    created = {
        service
        for e in events
        if e["reason"] == "SuccessfulCreateService"
        for service in e["message"].removeprefix("Created services ").split(", ")
    }
    assert created == {
        f"{name}-{replica_type.lower()}-{index}"
        for replica_type, spec in asked.items()
        for index in range(spec["replicas"])
    }
    for pod in jobs.pods(name):
        assert pod["metadata"]["labels"]["training.kubeflow.org/job-name"] == name
        config = json.loads(
            next(
                e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG"
            )
        )
        cluster = {t: sorted(hosts) for t, hosts in config["cluster"].items()}
        assert cluster == {
            replica_type.lower(): sorted(
                f"{name}-{replica_type.lower()}-{i}.{namespace}.svc:2222"
                for i in range(spec["replicas"])
            )
            for replica_type, spec in asked.items()
        }
    assert {e.get("reportingComponent") for e in events} == {"tfjob-operator"}


def test_the_chart_installed_kubeflows_crd_and_keeps_it(
    kubeflow_release: str, kubectl: Kubectl
) -> None:
    crd = json.loads(kubectl("get", "crd", "tfjobs.kubeflow.org", "-o", "json").stdout)
    annotations = crd["metadata"]["annotations"]
    assert annotations["meta.helm.sh/release-name"] == RELEASE
    assert annotations["meta.helm.sh/release-namespace"] == kubeflow_release
    assert annotations["helm.sh/resource-policy"] == "keep"
    role = json.loads(kubectl("get", "clusterrole", RELEASE, "-o", "json").stdout)
    groups = {g for rule in role["rules"] for g in rule["apiGroups"]}
    assert "kubeflow.org" in groups


def test_the_chart_renders_with_no_cluster_as_with_one(
    kubeconfig: str, kubeflow_release: str, kubectl: Kubectl
) -> None:
    """Argo CD and Flux render a chart with `helm template`, without a cluster, and apply
    what it prints. The chart renders the same with no cluster as against this one, where
    the first release installed tfjobs.kubeflow.org: whether the CRD is installed is the
    value kubeflow.installCRD, not a lookup. A second release beside it sets that false;
    left true, Helm refuses the CRD it does not own, naming it."""
    left = ["kubeflow.enabled=true", "kubeflow.installCRD=false"]
    for values in (["kubeflow.enabled=true"], left):
        sets = [f"--set={value}" for value in values]
        offline = run_helm(
            Path("/nonexistent"), "template", "other", str(CHART), "--namespace=default", *sets
        )
        assert offline.returncode == 0, offline.stderr
        online = run_helm(
            kubeconfig, "template", "other", str(CHART), "--namespace=default",
            "--dry-run=server", *sets,
        )  # fmt: skip
        assert online.returncode == 0, online.stderr
        assert offline.stdout == online.stdout, values
        rendered = list(yaml.safe_load_all(offline.stdout))
        crds = [o["metadata"]["name"] for o in rendered if o["kind"] == "CustomResourceDefinition"]
        assert crds == ([] if "kubeflow.installCRD=false" in values else ["tfjobs.kubeflow.org"])
        (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
        assert "--kubeflow" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    # What Argo CD would apply, beside the CRD there.
    applied = kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=offline.stdout
    ).stdout
    assert "deployment.apps/other-tfjob-operator serverside-applied (server dry run)" in applied
    refused = run_helm(
        kubeconfig, "install", "other", str(CHART), "--namespace=default",
        "--set=kubeflow.enabled=true", "--dry-run=server",
    )  # fmt: skip
    assert refused.returncode != 0
    assert "tfjobs.kubeflow.org" in refused.stderr, refused.stderr
    assert kubeflow_release in refused.stderr, refused.stderr
