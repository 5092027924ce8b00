"""One version (VERSION) and one set of published names, everywhere they are written."""

from __future__ import annotations

import contextlib
import io
import re
from importlib.metadata import version
from typing import Any

import pytest
import yaml
from support.checkout import ROOT

from hack.set_version import documents, mentioned_versions
from release.changelog import sections
from release.plan import SEMVER
from tfjob_operator import published
from tfjob_operator.cli import main as tfjob_operator
from tfjob_operator.spec import parse_spec
from tfjob_trainer.options import parse_options

VERSION = (ROOT / "VERSION").read_text().strip()


def _load(path: str) -> Any:
    """The file's last document (an example's TFJob comes after its claim)."""
    return list(yaml.safe_load_all((ROOT / path).read_text()))[-1]


def test_version_is_semantic() -> None:
    assert SEMVER.match(VERSION), VERSION


@pytest.mark.parametrize("package", ["tfjob-operator", "tfjob-trainer", "tfjob-localcluster"])
def test_packages_carry_the_version(package: str) -> None:
    assert version(package) == VERSION
    assert published.VERSION == VERSION


def test_chart_version_and_app_version_are_the_version() -> None:
    chart = _load("charts/tfjob-operator/Chart.yaml")
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)


def test_the_charts_artifact_hub_example_is_a_valid_tfjob_of_the_published_trainer() -> None:
    annotations = _load("charts/tfjob-operator/Chart.yaml")["annotations"]
    (example,) = yaml.safe_load(annotations["artifacthub.io/crdsExamples"])
    parse_spec(example["metadata"]["name"], example["spec"])
    (worker,) = example["spec"]["tfReplicaSpecs"].values()
    (container,) = worker["template"]["spec"]["containers"]
    assert container["image"] == published.trainer_image()
    crds = yaml.safe_load(annotations["artifacthub.io/crds"])
    assert {c["name"] for c in crds} == {"tfjobs.tfjob.dev", "tfjobs.kubeflow.org"}


def test_chart_names_the_published_operator_image() -> None:
    image = _load("charts/tfjob-operator/values.yaml")["image"]
    assert (image["registry"], image["repository"]) == (published.REGISTRY, published.OPERATOR)
    # The tag follows appVersion; only a release pins a digest.
    assert (image["tag"], image["digest"]) == ("", "")


def test_kustomize_install_runs_the_published_operator_image() -> None:
    documents = yaml.safe_load_all((ROOT / "manifests/base/operator.yaml").read_text())
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert (
        container["image"]
        == published.operator_image()
        == (f"ghcr.io/tfjob-operator/tfjob-operator:{VERSION}")
    )


@pytest.mark.parametrize(
    ("example", "gpu"),
    [
        ("examples/digits-mwms.yaml", False),
        ("examples/digits-pss.yaml", False),
        ("examples/digits-tensorboard.yaml", False),
        ("examples/custom-entrypoint/tfjob.yaml", False),
        ("examples/digits-gpu.yaml", True),
    ],
)
def test_examples_run_the_published_trainer_image(example: str, gpu: bool) -> None:
    replicas = _load(example)["spec"]["tfReplicaSpecs"].values()
    images = {c["image"] for r in replicas for c in r["template"]["spec"]["containers"]}
    assert images == {published.trainer_image(gpu=gpu)}


def test_tfjob_operator_version_prints_the_version() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert tfjob_operator(["version"]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == f"tfjob-operator {VERSION}"
    assert f"{published.chart_reference()} --version {VERSION}" in lines[-1]


def test_tfjob_train_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_options(["--version"], {})
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"tfjob-train {VERSION}"


def test_changelog_has_the_version_or_an_unreleased_section_for_it() -> None:
    found = sections((ROOT / "CHANGELOG.md").read_text())
    assert "Unreleased" in found
    released = [v for v, (day, _) in found.items() if v != "Unreleased" and day]
    assert released, "no release is recorded"

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.split(r"[.-]", v)[:3])

    # VERSION is the newest release, or the one being prepared after it.
    assert VERSION in released or key(VERSION) > max(key(v) for v in released)


def test_the_documentation_installs_the_version() -> None:
    for document in documents():
        mentioned = mentioned_versions(document.read_text())
        assert mentioned <= {VERSION}, f"{document.name} names {mentioned - {VERSION}}"
