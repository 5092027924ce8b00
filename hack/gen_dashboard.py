"""Writes the Grafana dashboard of the operator's metrics
(charts/tfjob-operator/files/monitoring/dashboard.json) from the panels below, so that each
panel is one row of data here and the JSON stays what Grafana imports.

    .venv/bin/python -m hack.gen_dashboard          # regenerate
    .venv/bin/python -m hack.gen_dashboard --check  # exit 1 if the dashboard is out of date

The chart ships it as a ConfigMap for Grafana's dashboard sidecar
(metrics.dashboard.enabled); without the chart, import the file. The queries use Grafana's
`$namespace` (the jobs' namespaces), `$__rate_interval` and `$__range`:
tests/integration/test_monitoring.py runs each against a real Prometheus with those
filled in.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hack.generated import sync

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "charts" / "tfjob-operator" / "files" / "monitoring" / "dashboard.json"
UID = "tfjob-operator"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: The jobs' namespaces the panels show.
JOBS = 'job_namespace=~"$namespace"'


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    #: Each query and its legend.
    queries: tuple[tuple[str, str], ...]
    unit: str = "short"
    kind: str = "timeseries"
    width: int = 8
    stacked: bool = False


def quantiles(metric: str, by: str = "") -> tuple[tuple[str, str], ...]:
    """The median and 90th percentile of histogram `metric` over the jobs shown."""
    labels = f"le, {by}" if by else "le"
    legend = f"{{{{{by}}}}} " if by else ""
    return tuple(
        (
            f"histogram_quantile({q}, sum by ({labels}) "
            f"(rate({metric}_bucket{{{JOBS}}}[$__rate_interval])))",
            f"{legend}p{int(q * 100)}",
        )
        for q in (0.5, 0.9)
    )


def per_hour(metric: str, by: str) -> tuple[tuple[str, str], ...]:
    legend = " ".join(f"{{{{{label.strip()}}}}}" for label in by.split(","))
    return ((f"sum by ({by}) (rate({metric}{{{JOBS}}}[$__rate_interval])) * 3600", legend),)


def in_range(what: str) -> tuple[tuple[str, str], ...]:
    return ((f"sum(increase(training_operator_jobs_{what}_total{{{JOBS}}}[$__range]))", what),)


#: The dashboard's rows, each a title and its panels.
ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "TFJobs (Kubeflow's counters)",
        (
            Panel(
                "Created", "TFJobs the operator took on.", in_range("created"), kind="stat", width=6
            ),
            Panel(
                "Succeeded", "TFJobs that succeeded.", in_range("successful"), kind="stat", width=6
            ),
            Panel("Failed", "TFJobs that failed.", in_range("failed"), kind="stat", width=6),
            Panel("Restarted", "Restarts of TFJobs.", in_range("restarted"), kind="stat", width=6),
        ),
    ),
    (
        "TFJobs",
        (
            Panel(
                "TFJobs by state",
                "TFJobs that exist, by state.",
                ((f"sum by (state) (tfjob_operator_jobs{{{JOBS}}})", "{{state}}"),),
                stacked=True,
                width=12,
            ),
            Panel(
                "Ended per hour, by reason",
                "TFJobs that ended, by state and by the reason of their condition.",
                per_hour("tfjob_operator_jobs_finished_total", "state, reason"),
                width=12,
            ),
            Panel(
                "Restarts per hour, by cause",
                "ExitCode: a container exited with a code its policy retries. Disrupted: "
                "its pods were taken away (evicted, preempted, node lost).",
                per_hour("tfjob_operator_restarts_total", "reason"),
                width=12,
            ),
            Panel(
                "Refused children per hour",
                "Pods and services the API server refused (a quota, a policy, an invalid "
                "pod), by its reason. The jobs' events say which.",
                per_hour("tfjob_operator_refusals_total", "kind, reason"),
                width=12,
            ),
            Panel(
                "Time to start",
                "From a TFJob's startTime (first reconcile, or resumption) to every "
                "training replica running.",
                quantiles("tfjob_operator_job_start_seconds"),
                unit="s",
            ),
            Panel(
                "Duration",
                "From a TFJob's creation to its end, by the state it ended in.",
                quantiles("tfjob_operator_job_duration_seconds", "state"),
                unit="s",
            ),
            Panel(
                "Admission wait (Kueue)",
                "How long TFJobs of a Kueue queue waited for their admission.",
                quantiles("tfjob_operator_job_admission_wait_seconds"),
                unit="s",
            ),
        ),
    ),
    (
        "The operator",
        (
            Panel(
                "Leader",
                "1 on the operator that holds the Lease.",
                (("tfjob_operator_leader", "{{instance}}"),),
            ),
            Panel(
                "Reconciles",
                "Reconciles of TFJobs per second, and those that failed and were retried.",
                (
                    (
                        "sum(rate(tfjob_operator_reconcile_duration_seconds_count[$__rate_interval]))",
                        "done",
                    ),
                    (
                        "sum(rate(tfjob_operator_reconcile_errors_total[$__rate_interval]))",
                        "failed",
                    ),
                ),
                unit="ops",
            ),
            Panel(
                "Reconcile and its wait (p99)",
                "How long one reconcile takes, and how long a change waits for the "
                "reconcile that sees it.",
                (
                    (
                        "histogram_quantile(0.99, sum by (le) "
                        "(rate(tfjob_operator_reconcile_duration_seconds_bucket[$__rate_interval])))",
                        "reconcile",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (le) "
                        "(rate(tfjob_operator_queue_wait_seconds_bucket[$__rate_interval])))",
                        "wait",
                    ),
                ),
                unit="s",
            ),
            Panel(
                "API writes (p99)",
                "From sending a write to the API server's answer, by priority.",
                (
                    (
                        "histogram_quantile(0.99, sum by (le, priority) "
                        "(rate(tfjob_operator_write_duration_seconds_bucket[$__rate_interval])))",
                        "{{priority}}",
                    ),
                ),
                unit="s",
            ),
            Panel(
                "Throttled by the API server",
                "Requests answered 429 Too Many Requests per second.",
                (("sum(rate(tfjob_operator_api_throttled_total[$__rate_interval]))", "429"),),
                unit="reqps",
            ),
            Panel(
                "Watches reopened",
                "Watches of every resource reopened, by cause: resume (from their version), "
                "relist (after 410 Gone), error (after a failure).",
                (
                    (
                        "sum by (cause) "
                        "(increase(tfjob_operator_watch_restarts_total[$__rate_interval]))",
                        "{{cause}}",
                    ),
                ),
            ),
        ),
    ),
)


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for row, row_panels in ROWS:
        panels.append(
            {
                "type": "row",
                "title": row,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "id": len(panels) + 1,
                "panels": [],
            }
        )
        y += 1
        x = 0
        for panel in row_panels:
            height = 4 if panel.kind == "stat" else 8
            if x + panel.width > 24:
                x, y = 0, y + height
            panels.append(_panel(panel, len(panels) + 1, x, y, height))
            x += panel.width
        y += height
    return {
        "title": "tfjob-operator",
        "uid": UID,
        "description": "TFJobs and the operator that runs them (docs/monitoring.md).",
        "tags": ["tfjob-operator", "kubeflow", "tensorflow"],
        "editable": True,
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                },
                {
                    "name": "namespace",
                    "label": "Namespace",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "definition": "label_values(tfjob_operator_jobs, job_namespace)",
                    "query": {
                        "query": "label_values(tfjob_operator_jobs, job_namespace)",
                        "refId": "namespaces",
                    },
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def _panel(panel: Panel, panel_id: int, x: int, y: int, height: int) -> dict[str, Any]:
    custom = {"stacking": {"mode": "normal" if panel.stacked else "none"}}
    return {
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "id": panel_id,
        "gridPos": {"h": height, "w": panel.width, "x": x, "y": y},
        "datasource": DATASOURCE,
        "fieldConfig": {
            "defaults": {
                "unit": panel.unit,
                # Counts over a range are extrapolated (increase): a stat shows them whole.
                **({"decimals": 0} if panel.kind == "stat" else {"custom": custom}),
            },
            "overrides": [],
        },
        "options": (
            {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"}
            if panel.kind == "stat"
            else {"legend": {"displayMode": "list", "placement": "bottom"}}
        ),
        "targets": [
            {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": chr(65 + i)}
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the dashboard is stale")
    args = parser.parse_args()
    text = json.dumps(dashboard(), indent=2) + "\n"
    return sync({DASHBOARD: text}, check=args.check, generator="make dashboard")


if __name__ == "__main__":
    sys.exit(main())
