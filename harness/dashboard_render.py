"""The Grafana dashboard drawn from Prometheus' own API, as Grafana lays it out: each
panel's queries over a time range, as lines (a time series panel) or as the last value (a
stat panel), in the dashboard's grid, with its legends. What the monitoring tests leave to
look at (Grafana itself is not built here); a panel without data says so in red.

Grafana's variables are filled in from `values` (`$namespace`, `$__rate_interval`,
`$__range`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.prometheus import Prometheus

#: Inches per column of Grafana's 24, and per unit of a panel's height.
COLUMN, ROW = 0.75, 0.42


def fill(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with Grafana's variables replaced by `values`."""
    return re.sub(r"\$\w+", lambda m: values[m.group(0)], expr)


def legend(template: str, labels: Mapping[str, str]) -> str:
    """A legendFormat (`{{state}} p90`) for one series' labels."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def render(
    prometheus: Prometheus,
    dashboard: Mapping[str, Any],
    values: Mapping[str, str],
    start: float,
    end: float,
    out: Path,
) -> list[str]:
    """Draws the dashboard over [start, end] into `out` (PNG); returns the titles of the
    panels that had no data."""
    # Imported when drawing: harness.plotting sets matplotlib's environment for the whole
    # process, which must not change for a test module merely collected.
    from harness.plotting import plt

    panels = dashboard["panels"]
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    figure = plt.figure(figsize=(24 * COLUMN, bottom * ROW))
    shown = ", ".join(f"{k.lstrip('$')}={v}" for k, v in values.items())
    figure.suptitle(
        f"{dashboard['title']}: the last {(end - start) / 60:.1f} minutes ({shown})",
        fontsize=12,
        y=1 - 0.2 / (bottom * ROW),
    )
    step = max(1.0, (end - start) / 200)
    empty = []
    for panel in panels:
        grid = panel["gridPos"]
        # Room inside the panel's cell for its tick labels (left), its axis' label (below)
        # and its title (above).
        rect = (
            grid["x"] / 24 + 0.035,
            1 - (grid["y"] + grid["h"]) / bottom + 0.55 / (bottom * ROW),
            grid["w"] / 24 - 0.045,
            grid["h"] / bottom - 1.0 / (bottom * ROW),
        )
        if panel["type"] == "row":
            figure.text(rect[0], 1 - (grid["y"] + 0.7) / bottom, panel["title"], fontsize=13,
                        weight="bold")  # fmt: skip
            continue
        axes = figure.add_axes(rect)
        axes.set_title(panel["title"], fontsize=10, loc="left")
        drawn = _draw(axes, panel, prometheus, values, start, end, step)
        if not drawn:
            empty.append(panel["title"])
            axes.text(0.5, 0.5, "No data", color="red", ha="center", va="center",
                      transform=axes.transAxes)  # fmt: skip
    figure.savefig(out, dpi=80)
    plt.close(figure)
    return empty


def _draw(
    axes: Any,
    panel: Mapping[str, Any],
    prometheus: Prometheus,
    values: Mapping[str, str],
    start: float,
    end: float,
    step: float,
) -> bool:
    """Draws one panel's queries; False if none had a finite point."""
    drawn = False
    for target in panel["targets"]:
        series = prometheus.query_range(fill(target["expr"], values), start, end, step)
        for labels, points in series:
            finite = [(t, v) for t, v in points if math.isfinite(v)]
            if not finite:
                continue
            drawn = True
            name = legend(target.get("legendFormat", ""), labels)
            if panel["type"] == "stat":
                decimals = panel["fieldConfig"]["defaults"].get("decimals")
                value = finite[-1][1]
                text = f"{value:.{decimals}f}" if decimals is not None else f"{value:g}"
                axes.text(0.5, 0.45, text, fontsize=28, ha="center", va="center",
                          transform=axes.transAxes)  # fmt: skip
                axes.set_axis_off()
                return True
            axes.plot([(t - end) / 60 for t, _ in finite], [v for _, v in finite], label=name)
    if drawn:
        axes.set_xlim((start - end) / 60, 0)
        axes.set_xlabel("minutes before the end", fontsize=8)
        axes.tick_params(labelsize=8)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        if unit and unit != "short":
            axes.set_ylabel(unit, fontsize=8)
        axes.legend(fontsize=7, loc="upper left")
    return drawn
