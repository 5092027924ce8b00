"""Sets the project's version: VERSION, the chart's copies of it (Chart.yaml's `version`
and `appVersion`, and the image of its Artifact Hub example), and the version the
documentation's install commands name (README.md, docs/). `make version VERSION=X` runs
this, then regenerates what is generated from them (the examples' images, the kustomize
install, the chart's README).

    .venv/bin/python hack/set_version.py 0.2.0
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from release.plan import SEMVER  # noqa: E402

CHART = ROOT / "charts" / "tfjob-operator" / "Chart.yaml"
#: Where the documentation names a release's version: install and upgrade commands, the
#: release's download links and the images they run.
VERSION_MENTIONS = (
    re.compile(r"(--version )(\d+\.\d+\.\d+\S*)"),
    re.compile(r"(releases/download/v)(\d+\.\d+\.\d+[^/\s]*)"),
    re.compile(r"(VERSION=)(\d+\.\d+\.\d+\S*)"),
    re.compile(r"(tfjob-(?:trainer|operator):)(\d+\.\d+\.\d+[\w.-]*?)(?=-gpu\b|[`\s)]|$)"),
)


def documents() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "examples").rglob("*.md")),
    ]


def mentioned_versions(text: str) -> set[str]:
    return {m.group(2) for pattern in VERSION_MENTIONS for m in pattern.finditer(text)}


def set_mentions(text: str, version: str) -> str:
    for pattern in VERSION_MENTIONS:
        text = pattern.sub(lambda m: m.group(1) + version, text)
    return text


def set_chart_version(text: str, version: str) -> str:
    """Chart.yaml's text with `version` and `appVersion` set (each on one line)."""
    for key, value in (("version", version), ("appVersion", f'"{version}"')):
        line = re.compile(rf"^{key}: .*$", re.MULTILINE)
        if len(line.findall(text)) != 1:
            raise SystemExit(f"{CHART}: expected one `{key}:` line")
        text = line.sub(f"{key}: {value}", text)
    return text


def main() -> int:
    if len(sys.argv) != 2 or not SEMVER.match(sys.argv[1].removeprefix("v")):
        print("usage: set_version.py MAJOR.MINOR.PATCH[-PRERELEASE]", file=sys.stderr)
        return 2
    version = sys.argv[1].removeprefix("v")
    (ROOT / "VERSION").write_text(version + "\n")
    CHART.write_text(set_mentions(set_chart_version(CHART.read_text(), version), version))
    for document in documents():
        document.write_text(set_mentions(document.read_text(), version))
    print(f"VERSION and {CHART.relative_to(ROOT)} are at {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
