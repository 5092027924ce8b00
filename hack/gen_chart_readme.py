"""Writes the chart's README (charts/tfjob-operator/README.md), which `helm show readme`
prints and Artifact Hub shows: hack/chart-readme.md.j2, with a table of every value read
from values.yaml, its default and the comment above it, so that the table is never out
of date with the values.

    .venv/bin/python -m hack.gen_chart_readme          # regenerate
    .venv/bin/python -m hack.gen_chart_readme --check  # exit 1 if the README is out of date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml

from hack.generated import sync

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "tfjob-operator"
TEMPLATE = Path(__file__).with_name("chart-readme.md.j2")
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][\w.-]*):(?P<rest>.*)$")


@dataclass(frozen=True)
class Value:
    path: str
    default: str
    description: str


def values_table(text: str) -> list[Value]:
    """Each leaf of values.yaml (a scalar, a list, or an empty map) with its default and the
    comment lines above it; a leaf with none has its block's comment, once."""
    defaults = yaml.safe_load(text)
    rows: list[Value] = []
    comment: list[str] = []
    parents: list[tuple[int, str, str]] = []  # indent, key, its comment not yet used
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        match = KEY.match(line)
        if match is None:
            if not stripped:
                comment = []  # a blank line ends a comment: it was about what is above
            continue
        indent = len(match.group("indent"))
        while parents and parents[-1][0] >= indent:
            parents.pop()
        key = match.group("key")
        path = [p[1] for p in parents] + [key]
        value = _at(defaults, path)
        own = " ".join(comment)
        comment = []
        if isinstance(value, dict) and value:
            parents.append((indent, key, own))
            continue
        if not own and parents and parents[-1][2]:
            own = parents[-1][2]
            parents[-1] = (*parents[-1][:2], "")
        rows.append(Value(".".join(path), json.dumps(value), _markdown(own)))
    return rows


def _markdown(text: str) -> str:
    """A comment as a table cell's text: angle brackets shown, not read as HTML."""
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _at(values: object, path: list[str]) -> object:
    for key in path:
        assert isinstance(values, dict), path
        values = values[key]
    return values


def render() -> str:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    template = jinja2.Template(TEMPLATE.read_text(), keep_trailing_newline=True)
    rendered: str = template.render(
        chart=meta, values=values_table((CHART / "values.yaml").read_text())
    )
    return rendered


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if out of date")
    args = parser.parse_args()
    return sync({CHART / "README.md": render()}, check=args.check, generator="make chart-readme")


if __name__ == "__main__":
    sys.exit(main())
