"""The release's chart: the repository's chart with the images it names pinned to the
registry and digests the release pushed, packaged and pushed as an OCI artifact.

values.yaml is for people (`helm show values` prints its comments), so the lines a
release sets are replaced in its text rather than the file rewritten from data, each of
which must occur exactly once: `image.registry` and `image.digest` (the operator), and
`tensorboard.digest` (the trainer image TensorBoards run by default). Chart.yaml gets
Artifact Hub's annotations of the release: its images by digest, and whether it is a
pre-release.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from release.plan import Plan
from tfjob_localcluster.addons.chart import helm, run_helm
from tfjob_localcluster.binaries import cache_root


class ChartError(RuntimeError):
    pass


def set_values(values: str, block: str, settings: Mapping[str, str]) -> str:
    """values.yaml's text with the keys of its top-level `block` set as `settings` say."""
    found = re.search(rf"^{block}:\n((?:[ #].*\n|\n)+)", values, re.MULTILINE)
    if found is None:
        raise ChartError(f"values.yaml has no top-level `{block}:` block")
    body = found.group(1)
    for key, value in settings.items():
        line = re.compile(rf"^  {key}: .*$", re.MULTILINE)
        if len(line.findall(body)) != 1:
            raise ChartError(f"values.yaml's {block} block must set {key} on one line")
        body = line.sub(lambda _match, k=key, v=value: f"  {k}: {v}", body)
    return values[: found.start(1)] + body + values[found.end(1) :]


def pin_images(values: str, registry: str, operator: str, trainer: str | None) -> str:
    """values.yaml's text with the operator's registry and digest set, and the default
    TensorBoard image's digest (the trainer's) when the release pushed it."""
    values = set_values(values, "image", {"registry": registry, "digest": operator})
    if trainer is not None:
        values = set_values(values, "tensorboard", {"digest": trainer})
    return values


def annotate(chart: str, images: Sequence[tuple[str, str]], prerelease: bool) -> str:
    """Chart.yaml's text with Artifact Hub's `images` (name, reference@digest) and
    `prerelease` annotations added to its `annotations:` block, which must end it."""
    meta = yaml.safe_load(chart)
    last = chart.rstrip("\n").splitlines()
    block = next((i for i, line in enumerate(last) if line == "annotations:"), None)
    if block is None or any(not line.startswith(" ") for line in last[block + 1 :]):
        raise ChartError("Chart.yaml must end with its `annotations:` block")
    added = {"artifacthub.io/prerelease": "true" if prerelease else "false"}
    listed = [{"name": name, "image": reference} for name, reference in images]
    lines = [f'  {key}: "{value}"' for key, value in added.items()]
    lines.append("  artifacthub.io/images: |")
    lines += [f"    {line}" for line in yaml.safe_dump(listed, sort_keys=False).splitlines()]
    annotated = chart.rstrip("\n") + "\n" + "\n".join(lines) + "\n"
    if not yaml.safe_load(annotated)["annotations"].keys() >= meta["annotations"].keys():
        raise ChartError("Chart.yaml's annotations were lost in adding the release's")
    return annotated


def package(source: Path, plan: Plan, images: Mapping[str, str]) -> Path:
    """The chart of `source` (charts/tfjob-operator), its images pinned (`images`: each
    pushed image's name and registry/repository:tag@digest, the operator's among them),
    packaged into the release's directory; its version must be the release's."""
    work = Path(tempfile.mkdtemp(prefix="chart-", dir=cache_root() / "tmp"))
    try:
        return _package(source, work / "tfjob-operator", plan, images)
    finally:
        shutil.rmtree(work)


def _package(source: Path, chart: Path, plan: Plan, images: Mapping[str, str]) -> Path:
    shutil.copytree(source, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    if (meta["version"], str(meta["appVersion"])) != (plan.version, plan.version):
        raise ChartError(
            f"Chart.yaml has version {meta['version']} and appVersion {meta['appVersion']}, "
            f"the release is {plan.version}: run `make version VERSION={plan.version}`"
        )
    operator, digest = images["operator"].rsplit("@", 1)
    trainer = images.get("trainer")
    values = chart / "values.yaml"
    values.write_text(
        pin_images(
            values.read_text(),
            operator.rsplit("/", 1)[0],
            digest,
            trainer and trainer.rsplit("@", 1)[1],
        )
    )
    meta_file = chart / "Chart.yaml"
    meta_file.write_text(
        annotate(meta_file.read_text(), sorted(images.items()), "-" in plan.version)
    )
    helm(None, "lint", str(chart))
    output = helm(None, "package", str(chart), "--destination", str(plan.out))
    return Path(output.strip().rsplit(":", 1)[1].strip())


def push(packaged: Path, plan: Plan) -> str:
    """Pushes the packaged chart to the registry; returns its digest."""
    plain = ["--plain-http"] if plan.plain_http else []
    done = run_helm(None, "push", str(packaged), plan.chart, *plain)
    # helm reports the pushed reference and digest on stderr.
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise ChartError(f"helm push failed:\n{output}")
    match = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", output, re.MULTILINE)
    if match is None:
        raise ChartError(f"helm push printed no digest:\n{output}")
    return match.group(1)
