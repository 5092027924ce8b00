"""The release's chart: the repository's chart with the operator's image pinned to the
registry and digest the release pushed, packaged and pushed as an OCI artifact.

Only two values change: `image.registry` and `image.digest`. values.yaml is for people
(`helm show values` prints its comments), so those two lines are replaced in its text
rather than the file rewritten from data; each must occur exactly once.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import yaml

from release.plan import Plan
from tfjob_localcluster.addons.chart import helm, run_helm
from tfjob_localcluster.binaries import cache_root

#: The lines of values.yaml's `image:` block that a release sets.
PINNED = ("registry", "digest")


class ChartError(RuntimeError):
    pass


def pin_image(values: str, registry: str, digest: str) -> str:
    """values.yaml's text with the operator's image.registry and image.digest set."""
    block = re.search(r"^image:\n((?:[ #].*\n|\n)+)", values, re.MULTILINE)
    if block is None:
        raise ChartError("values.yaml has no top-level `image:` block")
    body = block.group(1)
    for key, value in zip(PINNED, (registry, digest), strict=True):
        line = re.compile(rf"^  {key}: .*$", re.MULTILINE)
        if len(line.findall(body)) != 1:
            raise ChartError(f"values.yaml's image block must set {key} on one line")
        body = line.sub(lambda _match, k=key, v=value: f"  {k}: {v}", body)
    return values[: block.start(1)] + body + values[block.end(1) :]


def package(source: Path, plan: Plan, operator: str, digest: str) -> Path:
    """The chart of `source` (charts/tfjob-operator), its image pinned to `operator`'s
    registry and `digest`, packaged into the release's directory; its version must be
    the release's."""
    work = Path(tempfile.mkdtemp(prefix="chart-", dir=cache_root() / "tmp"))
    try:
        return _package(source, work / "tfjob-operator", plan, operator, digest)
    finally:
        shutil.rmtree(work)


def _package(source: Path, chart: Path, plan: Plan, operator: str, digest: str) -> Path:
    shutil.copytree(source, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    if (meta["version"], str(meta["appVersion"])) != (plan.version, plan.version):
        raise ChartError(
            f"Chart.yaml has version {meta['version']} and appVersion {meta['appVersion']}, "
            f"the release is {plan.version}: run `make version VERSION={plan.version}`"
        )
    registry = operator.rsplit("/", 1)[0]
    values = chart / "values.yaml"
    values.write_text(pin_image(values.read_text(), registry, digest))
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
