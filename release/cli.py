"""`python -m release` (`make release REGISTRY=... [VERSION=...]`): builds, checks and
pushes a release, and writes its files.

In order, stopping at the first failure:
1. the plan: the version is the repository's (VERSION) and CHANGELOG.md has its notes;
2. each image (operator, trainer, trainer-gpu) for each platform (linux/amd64,
   linux/arm64) with buildah, and each checked by running it on its architecture;
3. each image's index pushed (the images by digest, the index by its tag);
4. the chart, its images pinned to the pushed digests, pushed as an OCI artifact;
5. with --sign-key: every image and the chart signed, each image's SBOMs and provenance
   attached as signed attestations (release/signing.py);
6. into --out: install.yaml (namespace, CRDs, operator), install-kubeflow.yaml
   (kubeflow.org/v1 TFJobs too), crds.yaml (the CRDs alone, for upgrades),
   release-notes.md (the CHANGELOG section), release.json (what was pushed), and the
   SBOMs, provenance and public key that were attached.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from release import changelog, chart, manifests, signing, wheel
from release.buildah import Buildah, BuildahError
from release.images import Built, ImageBuilder, Pushed
from release.plan import PLATFORMS, Plan, PlanError, images, make_plan
from tfjob_localcluster.binaries import cache_root
from tfjob_operator import published
from tfjob_operator.timeutil import now

ROOT = Path(__file__).resolve().parents[1]
HEADER = "# tfjob-operator {version}: kubectl apply --server-side -f {name}\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m release", description=__doc__)
    parser.add_argument(
        "--registry",
        default="",
        help=f"registry and organisation to push to (default: {published.REGISTRY})",
    )
    parser.add_argument(
        "--version", default="", help="the version to release (default: VERSION; v1.2.3 too)"
    )
    parser.add_argument("--platforms", default=",".join(PLATFORMS))
    parser.add_argument(
        "--images", default=",".join(i.name for i in images(published.VERSION)), dest="wanted"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="the release's files")
    parser.add_argument(
        "--source", type=Path, default=ROOT, help="the repository to release (default: this one)"
    )
    parser.add_argument(
        "--uv",
        default=os.environ.get("TFJOB_UV") or "uv",
        help="the uv that builds the Python wheel (default: $TFJOB_UV, which make sets, or uv)",
    )
    parser.add_argument(
        "--sign-key",
        default=os.environ.get("SIGN_KEY", ""),
        help="sign with this cosign key file (password: $COSIGN_PASSWORD), or `keyless` "
        "(Sigstore's public instance, the CI's identity); default $SIGN_KEY; empty: unsigned",
    )
    args = parser.parse_args(argv)
    source = args.source.resolve()
    try:
        signer = signing.Signer.of(args.sign_key)
        plan = make_plan(
            version=args.version,
            repository_version=(source / "VERSION").read_text().strip(),
            registry=args.registry or published.REGISTRY,
            platforms=args.platforms,
            wanted=args.wanted,
            out=args.out.resolve(),
        )
        notes = changelog.notes((source / "CHANGELOG.md").read_text(), plan.version)
        release(plan, source, notes, args.uv, signer)
    except (
        PlanError,
        changelog.ChangelogError,
        chart.ChartError,
        BuildahError,
        wheel.WheelError,
        signing.SigningError,
    ) as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    return 0


def release(plan: Plan, source: Path, notes: str, uv: str, signer: signing.Signer | None) -> None:
    started = time.monotonic()
    started_at = now()
    plan.out.mkdir(parents=True, exist_ok=True)
    say(f"releasing {plan.version} to {plan.registry} for {', '.join(plan.platforms)}")
    package = wheel.build(source, plan.out, uv)
    say(f"built {package.name} (the client and CLI: pip install {package.name})")
    builder = ImageBuilder(plan, source, Buildah(say), say)
    pushed: list[Pushed] = []
    for image in plan.images:
        built = [builder.build(image, arch) for arch in plan.architectures]
        pushed.append(builder.push(image, built))
    operator = next((p for p in pushed if p.image.repository == published.OPERATOR), None)
    chart_digest = None
    if operator is not None:
        packaged = chart.package(
            source / "charts" / "tfjob-operator", plan, {p.image.name: p.pinned for p in pushed}
        )
        chart_digest = chart.push(packaged, plan)
        say(f"pushed {plan.chart_reference}:{plan.version}@{chart_digest}")
        write_manifests(plan, packaged)
    (plan.out / "release-notes.md").write_text(notes + pinned_section(plan, pushed, chart_digest))
    record = summary(plan, pushed, chart_digest, time.monotonic() - started)
    record["wheel"] = {"file": package.name, "digest": wheel.digest(package)}
    if signer is None:
        say("not signed: no --sign-key (SIGN_KEY)")
        record["signatures"] = None
    else:
        work = Path(tempfile.mkdtemp(prefix="signing-", dir=cache_root() / "tmp"))
        try:
            signed = signing.sign_release(
                signing.Signing(plan, signer, work, say),
                pushed,
                None
                if chart_digest is None
                else f"{plan.chart_reference.removeprefix('oci://')}@{chart_digest}",
                source_commit(source),
                started_at,
                now(),
            )
        finally:
            shutil.rmtree(work)
        record["signatures"] = signed
    record["seconds"] = round(time.monotonic() - started, 1)
    (plan.out / "release.json").write_text(json.dumps(record, indent=2) + "\n")
    say(f"release {plan.version} done in {record['seconds']:.0f}s; files in {plan.out}")


def pinned_section(plan: Plan, pushed: list[Pushed], chart_digest: str | None) -> str:
    """The release notes' list of what was pushed, by digest: what to pin."""
    lines = ["", "### Images and chart, by digest", ""]
    lines += [f"- `{p.pinned}` ({', '.join(plan.platforms)})" for p in pushed]
    if chart_digest is not None:
        lines.append(f"- `{plan.chart_reference}:{plan.version}@{chart_digest}` (the chart)")
    return "\n".join(lines) + "\n"


def source_commit(source: Path) -> str | None:
    """The commit `source` is checked out at; None for a tree that is not a checkout."""
    done = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "--verify", "HEAD"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    inside = (source / ".git").exists()
    return done.stdout.strip() if done.returncode == 0 and inside else None


def write_manifests(plan: Plan, packaged: Path) -> None:
    """install.yaml, install-kubeflow.yaml and crds.yaml from the released chart."""
    files = {
        "install.yaml": manifests.install(packaged),
        "install-kubeflow.yaml": manifests.install(packaged, ["kubeflow.enabled=true"]),
    }
    files["crds.yaml"] = [o for o in files["install.yaml"] if o["kind"] == manifests.CRD]
    for name, objects in files.items():
        header = HEADER.format(version=plan.version, name=name)
        (plan.out / name).write_text(manifests.dump(objects, header))


def summary(
    plan: Plan, pushed: list[Pushed], chart_digest: str | None, seconds: float
) -> dict[str, object]:
    def platform(built: Built) -> dict[str, object]:
        return {
            "platform": f"linux/{built.architecture}",
            "seconds": round(built.seconds, 1),
            "bytes": built.size,
            "check": built.check,
        }

    return {
        "version": plan.version,
        "registry": plan.registry,
        "images": {
            p.image.name: {
                "reference": p.reference,
                "digest": p.digest,
                "platforms": [platform(b) for b in p.platforms],
            }
            for p in pushed
        },
        "chart": None
        if chart_digest is None
        else {"reference": plan.chart_reference, "version": plan.version, "digest": chart_digest},
        "seconds": round(seconds, 1),
    }


def say(message: str) -> None:
    print(f"[release {time.strftime('%H:%M:%S')}] {message}", flush=True)
