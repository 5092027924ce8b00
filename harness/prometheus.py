"""A Prometheus beside a cluster, built from its Go module (hack/build-binaries.sh
prometheus): it scrapes the operator as the chart's ServiceMonitor does and evaluates the
chart's alerts, and its HTTP API answers the monitoring tests' queries.

The scrape is the ServiceMonitor's, as a static job: HTTPS with a bearer token read from a
file, the operator's self-signed certificate not verified. The targets are given, not
discovered (the binary has no service discovery compiled in). It listens on 127.0.0.1
only, keeps its data under its state directory, and runs until stopped.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tfjob_localcluster.binaries import locate
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host.ports import free_port
from tfjob_localcluster.host.procs import ManagedProcess, Started

HOST = "127.0.0.1"
START_TIMEOUT = 60.0
#: The scrape job's name, as the chart's ServiceMonitor names it (its Service's name).
JOB = "tfjob-operator"


class PrometheusError(LocalClusterError):
    pass


def configuration(
    targets: Sequence[str], token_file: Path, rule_files: Sequence[Path], interval: str
) -> dict[str, Any]:
    """Prometheus' configuration: one job scraping `targets` (host:port) over HTTPS with
    the token in `token_file`, every `interval`, and `rule_files` evaluated as often."""
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {
                "job_name": JOB,
                "scheme": "https",
                "authorization": {"credentials_file": str(token_file)},
                "tls_config": {"insecure_skip_verify": True},
                "static_configs": [{"targets": list(targets)}],
            }
        ],
    }


class Prometheus(Started):
    def __init__(
        self,
        state_dir: Path,
        targets: Sequence[str],
        token_file: Path,
        rule_files: Sequence[Path] = (),
        interval: str = "1s",
    ) -> None:
        self.state_dir = state_dir
        self.port = free_port(HOST)
        self.config = configuration(targets, token_file, rule_files, interval)
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> Prometheus:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config = self.state_dir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.process = ManagedProcess(
            "prometheus",
            [
                str(locate("prometheus").prometheus),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.state_dir / 'data'}",
                f"--web.listen-address={HOST}:{self.port}",
                "--log.level=warn",
            ],
            self.state_dir / "prometheus.log",
        )
        self.process.start()
        try:
            self.process.wait_ready(
                self._ready, START_TIMEOUT, PrometheusError, what=f"{self.url}/-/ready"
            )
        except PrometheusError:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        """The `data` of one answer of Prometheus' HTTP API (/api/v1/`path`)."""
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as reply:
            answer = json.load(reply)
        if answer.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {answer}")
        return answer["data"]

    def query(self, expr: str) -> dict[str, float]:
        """An instant query's samples, by their labels written as PromQL selects them."""
        data = self.api("query", query=expr)
        return {
            ",".join(f'{k}="{v}"' for k, v in sorted(sample["metric"].items())): float(
                sample["value"][1]
            )
            for sample in data["result"]
        }

    def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """A range query's series: each one's labels and its (time, value) points."""
        data = self.api("query_range", query=expr, start=str(start), end=str(end), step=str(step))
        return [
            (dict(series["metric"]), [(float(t), float(v)) for t, v in series["values"]])
            for series in data["result"]
        ]

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts pending or firing."""
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return found

    def targets(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.api("targets")["activeTargets"]
        return found

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=10)
            self.process = None


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """promtool with `args`; the caller reads its status and output."""
    return subprocess.run(
        [str(locate("promtool").promtool), *args], capture_output=True, text=True, timeout=120
    )
