"""The release's pure parts: its plan, its notes, the chart's pinned values and
annotations, the provenance, the bases."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from support.checkout import ROOT

from release.bases import config_flags, official_base
from release.buildah import BuildahError, pushed_digest
from release.changelog import NOTHING_YET, ChangelogError, notes
from release.chart import ChartError, annotate, pin_images
from release.cli import pinned_section
from release.images import Built, Pushed
from release.plan import Plan, PlanError, images, make_plan
from release.provenance import LOCAL_BUILDER, builder_id, predicate
from release.signing import KEYLESS, Signer, SigningError
from tfjob_localcluster.images.base import IMPORT_CHANGES
from tfjob_localcluster.images.platforms import platform_args

DIGEST = "sha256:" + "ab" * 32


def plan_of(**changes: str) -> Plan:
    arguments = {
        "version": "",
        "repository_version": "1.2.3",
        "registry": "ghcr.io/tfjob-operator",
        "platforms": "linux/amd64,linux/arm64",
        "wanted": "operator,trainer",
    }
    return make_plan(**{**arguments, **changes}, out=Path("dist"))


def test_plan_names_images_and_chart_under_the_registry() -> None:
    plan = make_plan(
        version="v1.2.3",
        repository_version="1.2.3",
        registry="oci://127.0.0.1:5000/",
        platforms="linux/amd64",
        wanted="operator,trainer-gpu",
        out=Path("dist"),
    )
    assert plan.version == "1.2.3"
    assert [i.reference(plan.registry) for i in plan.images] == [
        "127.0.0.1:5000/tfjob-operator:1.2.3",
        "127.0.0.1:5000/tfjob-trainer:1.2.3-gpu",
    ]
    assert plan.images[1].args == (("TRAINER_EXTRAS", "gpu"),)
    assert plan.chart == "oci://127.0.0.1:5000/charts"
    assert plan.chart_reference == "oci://127.0.0.1:5000/charts/tfjob-operator"
    assert plan.plain_http
    assert plan.architectures == ("amd64",)


@pytest.mark.parametrize(
    ("registry", "plain"),
    [
        ("ghcr.io/tfjob-operator", False),
        ("localhost:5001", True),
        ("127.0.0.1:5000/team", True),
        ("registry.example.com:443/a/b", False),
    ],
)
def test_only_a_loopback_registry_is_spoken_to_over_plain_http(registry: str, plain: bool) -> None:
    assert plan_of(registry=registry).plain_http is plain


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"version": "1.2.4"}, "VERSION=1.2.4 but the repository is at 1.2.3"),
        ({"repository_version": "1.2", "version": ""}, "not a semantic version"),
        ({"registry": "https://ghcr.io"}, "is not a registry"),
        ({"registry": "Ghcr.io/UPPER"}, "is not a registry"),
        ({"platforms": "linux/s390x"}, "PLATFORMS: choose among"),
        ({"platforms": ""}, "PLATFORMS: choose among"),
        ({"wanted": "operator,evaluator"}, "IMAGES: choose among"),
    ],
)
def test_a_release_that_cannot_be_made_is_refused_before_anything_is_built(
    changes: dict[str, str], says: str
) -> None:
    with pytest.raises(PlanError, match=says):
        plan_of(**changes)


CHANGELOG = """# Changelog

## [Unreleased]

- Something new.

## [1.2.3] - 2026-11-20

### Fixed

- A bug.

## [1.2.2]

[Unreleased]: https://example.com/compare/v1.2.3...HEAD
[1.2.3]: https://example.com/releases/tag/v1.2.3
"""


def test_release_notes_are_the_versions_section_without_link_definitions() -> None:
    assert notes(CHANGELOG, "1.2.3") == "### Fixed\n\n- A bug.\n"


@pytest.mark.parametrize(
    ("version", "says"),
    [("9.9.9", "has no section"), ("1.2.2", "needs a date and notes")],
)
def test_a_release_without_dated_notes_is_refused(version: str, says: str) -> None:
    with pytest.raises(ChangelogError, match=says):
        notes(CHANGELOG, version)


def test_a_pre_release_without_a_section_of_its_own_takes_the_unreleased_notes() -> None:
    assert notes(CHANGELOG, "1.3.0-dev") == "- Something new.\n"
    with pytest.raises(ChangelogError, match="has no section"):
        notes(CHANGELOG, "1.3.0")
    assert notes(CHANGELOG.replace("- Something new.", ""), "1.3.0-dev") == NOTHING_YET


def test_the_projects_changelog_has_notes_for_its_first_release() -> None:
    assert "### Added" in notes((ROOT / "CHANGELOG.md").read_text(), "0.1.0")


def test_pinning_sets_the_images_registry_and_digests_and_keeps_the_comments() -> None:
    values = (ROOT / "charts/tfjob-operator/values.yaml").read_text()
    trainer = "sha256:" + "cd" * 32
    pinned = pin_images(values, "127.0.0.1:5000", DIGEST, trainer)
    loaded, before = yaml.safe_load(pinned), yaml.safe_load(values)
    assert loaded["image"] == {**before["image"], "registry": "127.0.0.1:5000", "digest": DIGEST}
    assert loaded["tensorboard"] == {**before["tensorboard"], "digest": trainer}
    assert {k: v for k, v in loaded.items() if k not in ("image", "tensorboard")} == {
        k: v for k, v in before.items() if k not in ("image", "tensorboard")
    }
    assert [line for line in pinned.splitlines() if line.lstrip().startswith("#")] == [
        line for line in values.splitlines() if line.lstrip().startswith("#")
    ]
    # Without the trainer, its default stays the tag.
    assert yaml.safe_load(pin_images(values, "r", DIGEST, None))["tensorboard"]["digest"] == ""


def test_pinning_refuses_values_it_cannot_pin_exactly() -> None:
    with pytest.raises(ChartError, match="no top-level `image:` block"):
        pin_images("images:\n  registry: x\n", "r", DIGEST, None)
    with pytest.raises(ChartError, match="must set digest on one line"):
        pin_images("image:\n  registry: x\n  repository: y\n", "r", DIGEST, None)


def test_the_charts_artifact_hub_annotations_name_the_images_by_digest() -> None:
    chart = (ROOT / "charts/tfjob-operator/Chart.yaml").read_text()
    listed = [("operator", f"r/tfjob-operator:1.2.3@{DIGEST}")]
    annotated = yaml.safe_load(annotate(chart, listed, prerelease=True))
    annotations = annotated.pop("annotations")
    before = yaml.safe_load(chart)
    assert annotations == {
        **before.pop("annotations"),
        "artifacthub.io/prerelease": "true",
        "artifacthub.io/images": f"- name: operator\n  image: r/tfjob-operator:1.2.3@{DIGEST}\n",
    }
    assert annotated == before
    with pytest.raises(ChartError, match="must end with its `annotations:` block"):
        annotate(chart + "icon: x\n", listed, prerelease=False)


def pushed_trainer(plan: Plan) -> Pushed:
    trainer = images(plan.version)[1]
    built = Built(trainer, "amd64", "local", 90.0, 2**30, "tensorflow 2.21.0 x86_64")
    return Pushed(trainer, trainer.reference(plan.registry), DIGEST, (built,))


def test_the_provenance_says_what_was_built_from_which_commit_by_what() -> None:
    plan = plan_of()
    start, end = datetime(2026, 11, 29, 6, 0, tzinfo=UTC), datetime(2026, 11, 29, 6, 9, tzinfo=UTC)
    made = predicate(plan, pushed_trainer(plan), "c0ffee", start, end, LOCAL_BUILDER)
    definition = made["buildDefinition"]
    assert definition["externalParameters"] == {
        "version": "1.2.3",
        "image": "trainer",
        "dockerfile": "trainer/Dockerfile",
        "buildArgs": {},
        "platforms": ["linux/amd64"],
    }
    assert definition["resolvedDependencies"] == [
        {
            "uri": "git+https://github.com/tfjob-operator/tfjob-operator@refs/tags/v1.2.3",
            "digest": {"gitCommit": "c0ffee"},
        }
    ]
    assert made["runDetails"]["metadata"] == {
        "startedOn": "2026-11-29T06:00:00Z",
        "finishedOn": "2026-11-29T06:09:00Z",
    }
    assert (
        "digest"
        not in predicate(plan, pushed_trainer(plan), None, start, end, "b")["buildDefinition"][
            "resolvedDependencies"
        ][0]
    )
    workflow = {"GITHUB_WORKFLOW_REF": "o/r/.github/workflows/release.yaml@refs/tags/v1.2.3"}
    assert builder_id(workflow) == (
        "https://github.com/o/r/.github/workflows/release.yaml@refs/tags/v1.2.3"
    )
    assert builder_id({}) == LOCAL_BUILDER


def test_the_signer_is_a_key_file_keyless_or_none(tmp_path: Path) -> None:
    assert Signer.of("") is None
    assert Signer.of(KEYLESS) == Signer(None)
    key = tmp_path / "cosign.key"
    key.write_text("k")
    assert Signer.of(str(key)) == Signer(key)
    with pytest.raises(SigningError, match="no such cosign key file"):
        Signer.of(str(tmp_path / "none.key"))


def test_the_notes_list_what_was_pushed_by_digest() -> None:
    plan = plan_of(platforms="linux/amd64")
    section = pinned_section(plan, [pushed_trainer(plan)], "sha256:" + "ef" * 32)
    assert section.splitlines()[1:] == [
        "### Images and chart, by digest",
        "",
        f"- `ghcr.io/tfjob-operator/tfjob-trainer:1.2.3@{DIGEST}` (linux/amd64)",
        "- `oci://ghcr.io/tfjob-operator/charts/tfjob-operator:1.2.3@sha256:"
        + "ef" * 32
        + "` (the chart)",
    ]


def test_the_official_base_is_named_in_full_for_buildah() -> None:
    assert official_base(ROOT / "trainer/Dockerfile") == (
        "docker.io/library/python:3.11.14-slim-bookworm"
        "@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d"
    )


def test_the_made_here_base_gets_the_same_configuration_through_buildah() -> None:
    assert config_flags(IMPORT_CHANGES) == [
        "--env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--env=LANG=C.UTF-8",
        "--env=SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        '--cmd=["python3"]',
    ]


def test_an_image_for_another_architecture_is_built_from_this_machines_platform() -> None:
    args = platform_args("arm64")
    assert args["TARGETPLATFORM"] == "linux/arm64"
    assert args["TARGETARCH"] == "arm64"
    assert args["BUILDPLATFORM"] in ("linux/amd64", "linux/arm64")


def test_a_push_that_wrote_no_digest_failed_whatever_buildah_exited() -> None:
    digest = "sha256:" + "a" * 64
    assert pushed_digest(f"{digest}\n", "127.0.0.1:5000/tfjob-operator:1.2.3", "") == digest
    with pytest.raises(BuildahError, match="wrote no digest: the push did not finish") as caught:
        pushed_digest("", "127.0.0.1:1/tfjob-operator:1.2.3", "Copying blob sha256:5094")
    assert "127.0.0.1:1/tfjob-operator:1.2.3" in str(caught.value)
    assert "Copying blob sha256:5094" in str(caught.value)
