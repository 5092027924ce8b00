"""Monitoring against a real Prometheus (built from its Go module, run beside the local
cluster): the chart's operator scraped as the chart's ServiceMonitor scrapes it, Kubeflow's
counters counted per namespace, every query of the chart's dashboard answered, and the
chart's alerts checked and tested by promtool, one fired by the real operator stopping.

The chart runs its two operators (a leader and a standby) in a namespace that enforces
Pod Security "restricted", with Kueue beside the cluster for a queued job's admission
wait. Prometheus has no service discovery here: each operator pod gets a label of its own
and a port-forward, and Prometheus scrapes those as static targets, over HTTPS with the
token of a service account bound to the chart's metrics-reader role.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import summary
from support.builders import ending_jobs, shell_replica, tfjob
from support.cluster import NAMESPACE_LABEL, create_namespace, delete_namespace
from support.fixtures import stop_session_operator
from support.kueue import LOCAL_QUEUE, POOL_LABEL, QUEUE_LABEL, queue_in
from support.tfjobs import TFJobs
from support.waiting import wait_until

from harness.dashboard_render import fill, render
from harness.prometheus import JOB, Prometheus, promtool
from release.manifests import render_chart
from tfjob_localcluster.addons.chart import RELEASE, SELECTOR, install_operator, run_helm
from tfjob_localcluster.addons.kueue import Kueue
from tfjob_localcluster.binaries import cache_root, locate
from tfjob_localcluster.checkout import CHART
from tfjob_localcluster.local.cluster import LocalCluster
from tfjob_operator.apiserver.sync import Rest
from tfjob_operator.client.forward import PortForward

MONITORING = CHART / "files" / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
DASHBOARD = MONITORING / "dashboard.json"
#: promtool's tests of the alerts, from synthetic series.
ALERT_TESTS = Path(__file__).with_name("alerts-test.yaml")
#: The label each operator pod gets, so that a port-forward reaches that one.
TARGET_LABEL = "tfjob.dev/scrape-target"
#: How long TFJobOperatorDown waits in this test's copy of the alerts (5 minutes in the
#: chart's, which alerts-test.yaml tests).
DOWN_FOR = "5s"


@dataclass
class Monitored:
    prometheus: Prometheus
    release_namespace: str
    jobs: TFJobs


def _rules_with_a_short_down(directory: Path) -> Path:
    """The chart's alerts, TFJobOperatorDown waiting DOWN_FOR: the real operator's stop
    fires it within the test, its expression unchanged."""
    rules = yaml.safe_load(ALERTS.read_text())
    (down,) = [r for g in rules["groups"] for r in g["rules"] if r["alert"] == "TFJobOperatorDown"]
    down["for"] = DOWN_FOR
    path = directory / "alerts.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def prometheus_binaries() -> None:
    """Prometheus and promtool are built (tests/support/tool_builds.py waits for their
    build beside the tests before a test that takes this starts its time limit)."""
    locate("prometheus", "promtool")


@pytest.fixture(scope="module")
def monitoring(
    prometheus_binaries: None,
    request: pytest.FixtureRequest,
    local_cluster: LocalCluster,
    kubectl: Any,
    rest: Rest,
    project_images: tuple[str, ...],
    tfjob_crd: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Monitored]:
    """Kueue, the chart's operators alone in the cluster, and Prometheus scraping them."""
    assert local_cluster.control_plane is not None
    stop_session_operator(request.config)
    state = tmp_path_factory.mktemp("monitoring")
    kueue = Kueue(
        local_cluster.kubeconfig,
        local_cluster.kubectl,
        local_cluster.control_plane.ca,
        state / "kueue",
    )
    release_namespace = f"tfjob-monitoring-{secrets.token_hex(3)}"
    jobs_namespace = f"monitored-{secrets.token_hex(3)}"
    forwards: list[PortForward] = []
    prometheus: Prometheus | None = None
    try:
        kubectl("label", "node", local_cluster.node_name, f"{POOL_LABEL}=queued", "--overwrite")
        kueue.start()
        create_namespace(
            rest,
            release_namespace,
            {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            },
        )
        create_namespace(rest, jobs_namespace, {NAMESPACE_LABEL: "true"})
        install_operator(
            local_cluster.kubeconfig, release_namespace, ["logging.format=json"], timeout=180
        )
        # Prometheus' service account, allowed to get /metrics by the chart's role.
        kubectl("create", "serviceaccount", "prometheus", "-n", release_namespace)
        kubectl(
            "create", "clusterrolebinding", f"{release_namespace}-prometheus",
            f"--clusterrole={RELEASE}-metrics-reader",
            f"--serviceaccount={release_namespace}:prometheus",
        )  # fmt: skip
        token = state / "token"
        token.write_text(
            kubectl(
                "create", "token", "prometheus", "-n", release_namespace, "--duration=2h"
            ).stdout.strip()
        )  # fmt: skip
        pods = json.loads(
            kubectl("get", "pods", "-n", release_namespace, "-l", SELECTOR, "-o", "json").stdout
        )["items"]
        (port,) = [
            p["containerPort"]
            for p in pods[0]["spec"]["containers"][0]["ports"]
            if p["name"] == "metrics"
        ]
        for index, pod in enumerate(pods):
            name = pod["metadata"]["name"]
            kubectl("label", "pod", name, "-n", release_namespace, f"{TARGET_LABEL}={index}")
            forwards.append(PortForward(rest, release_namespace, f"{TARGET_LABEL}={index}", port))
        targets = [forward.url.removeprefix("http://").rstrip("/") for forward in forwards]
        prometheus = Prometheus(
            state / "prometheus", targets, token, [_rules_with_a_short_down(state)]
        ).start()
        yield Monitored(
            prometheus, release_namespace, TFJobs(local_cluster.kubeconfig, jobs_namespace)
        )
    finally:
        if prometheus is not None:
            prometheus.stop()
        for forward in forwards:
            forward.close()
        run_helm(local_cluster.kubeconfig, "uninstall", RELEASE, "-n", release_namespace)
        kubectl(
            "delete", "clusterrolebinding", f"{release_namespace}-prometheus",
            "--ignore-not-found",
        )  # fmt: skip
        delete_namespace(rest, jobs_namespace)
        delete_namespace(rest, release_namespace)
        kueue.stop()
        kubectl("label", "node", local_cluster.node_name, f"{POOL_LABEL}-")


def test_promtool_checks_the_alerts_and_their_tests_pass(prometheus_binaries: None) -> None:
    checked = promtool("check", "rules", str(ALERTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout
    tested = promtool("test", "rules", str(ALERT_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_alerts_tests_fail_on_a_changed_alert(
    prometheus_binaries: None, tmp_path: Path
) -> None:
    """The tests can fail: a threshold moved makes them."""
    rules = ALERTS.read_text().replace("> 0.1", "> 0.5")
    assert rules != ALERTS.read_text()
    (tmp_path / "alerts.yaml").write_text(rules)
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    tests["rule_files"] = [str(tmp_path / "alerts.yaml")]
    (tmp_path / "alerts-test.yaml").write_text(yaml.safe_dump(tests))
    tested = promtool("test", "rules", str(tmp_path / "alerts-test.yaml"))
    assert tested.returncode != 0
    assert "FAILED" in tested.stdout + tested.stderr


def _kubeflow(prometheus: Prometheus, namespace: str) -> dict[str, float]:
    """Kubeflow's counters of `namespace`, summed over the operators scraped."""
    found = {}
    for what in ("created", "successful", "failed", "restarted", "deleted"):
        expr = f'sum(training_operator_jobs_{what}_total{{job_namespace="{namespace}"}})'
        found[what] = sum(prometheus.query(expr).values())
    return found


@pytest.fixture(scope="module")
def ran(monitoring: Monitored, kubectl: Any) -> float:
    """In the jobs' namespace: the three ending jobs, one refused by the API server (no such
    service account), one queued in Kueue before its queue exists; the one that succeeded
    alone deleted. When it began (time.time())."""
    prometheus, jobs = monitoring.prometheus, monitoring.jobs
    began = time.time()
    wait_until(
        lambda: prometheus.query(f'up{{job="{JOB}"}}'),
        30,
        lambda up: f"both operators scraped: up is {up}; targets {prometheus.targets()}",
        until=lambda up: len(up) == 2 and set(up.values()) == {1.0},
        interval=1,
    )
    ending = ending_jobs()
    for manifest, _ in ending.values():
        jobs.create(manifest)
    refused = tfjob("refused", {"Worker": shell_replica("true")})
    refused["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["serviceAccountName"] = "none"
    jobs.create(refused)
    # Queued before its LocalQueue exists: it waits, suspended, until the queue comes.
    queued = tfjob("queued", {"Worker": shell_replica("sleep 4")})
    queued["metadata"]["labels"] = {QUEUE_LABEL: LOCAL_QUEUE}
    container = queued["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "100m"}}
    jobs.create(queued)
    jobs.wait_state("queued", "Suspended", 60)
    # Scraped at 0 before the admission, as a namespace's series are from its first job:
    # a rate over them then counts the admission.
    wait_until(
        lambda: prometheus.query(
            f'tfjob_operator_job_admission_wait_seconds_count{{job_namespace="{jobs.namespace}"}}'
        ),
        30,
        "the namespace's admission wait scraped at 0",
        until=lambda found: list(found.values()) == [0.0],
        interval=0.5,
    )
    with queue_in(kubectl, jobs.namespace):
        for name, (_, state) in {**ending, "queued": (queued, "Succeeded")}.items():
            jobs.wait_state(name, state, 120)
    jobs.wait_for(
        "refused",
        lambda j: "FailedCreatePod" in json.dumps((j.get("status") or {}).get("conditions")),
        "the refusal in its conditions",
        60,
    )
    jobs.delete("succeeds")
    jobs.wait_gone("succeeds")
    return began


def test_prometheus_counts_each_namespaces_jobs_under_kubeflows_names(
    monitoring: Monitored, ran: float
) -> None:
    expected = {"created": 5, "successful": 3, "failed": 1, "restarted": 1, "deleted": 1}
    counted = wait_until(
        lambda: _kubeflow(monitoring.prometheus, monitoring.jobs.namespace),
        30,
        lambda found: f"Kubeflow's counters of the jobs' namespace as {expected}: {found}",
        until=lambda found: found == expected,
        interval=1,
    )
    assert counted == expected


def test_every_query_of_the_dashboard_has_data_and_the_dashboard_is_drawn(
    monitoring: Monitored, ran: float
) -> None:
    prometheus = monitoring.prometheus
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", ())
    ]
    assert len(queries) >= 15
    # As Grafana fills the variables in, for the jobs' namespace.
    filled = {"$namespace": monitoring.jobs.namespace, "$__rate_interval": "2m", "$__range": "1h"}
    empty = []
    for title, expr in queries:
        query = fill(expr, filled)
        # A quantile of no observations is NaN: a panel Grafana draws empty.
        if not [v for v in prometheus.query(query).values() if math.isfinite(v)]:
            empty.append(f"{title}: {query}")
    assert empty == [], "dashboard queries without data:\n" + "\n".join(empty)
    picture = cache_root() / "logs" / "dashboard.png"
    picture.parent.mkdir(parents=True, exist_ok=True)
    assert render(prometheus, dashboard, filled, ran - 30, time.time(), picture) == []
    summary.add("the dashboard, drawn from Prometheus' data", str(picture))


def test_the_json_log_line_of_a_job_carries_the_job(
    monitoring: Monitored, ran: float, kubectl: Any
) -> None:
    jobs = monitoring.jobs
    logs = kubectl(
        "logs", "-n", monitoring.release_namespace, "-l", SELECTOR, "--tail=-1",
        "--prefix=false",
    ).stdout  # fmt: skip
    lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    (restarting,) = [e for e in lines if e["message"].startswith("TFJobRestarting: ")]
    assert {k: restarting[k] for k in ("namespace", "name", "uid", "level")} == {
        "namespace": jobs.namespace,
        "name": "restarts",
        "uid": jobs.get("restarts")["metadata"]["uid"],
        "level": "warning",
    }
    summary.add("a log line of a job", json.dumps(restarting, separators=(",", ":")))


def test_a_healthy_operator_fires_no_alert(monitoring: Monitored, ran: float) -> None:
    assert [a for a in monitoring.prometheus.alerts() if a["state"] == "firing"] == []


def test_operator_down_fires_when_the_operators_stop(monitoring: Monitored, kubectl: Any) -> None:
    prometheus = monitoring.prometheus
    kubectl(
        "scale", "deployment", RELEASE, "-n", monitoring.release_namespace, "--replicas=0"
    )  # fmt: skip

    def firing() -> list[str]:
        return [a["labels"]["alertname"] for a in prometheus.alerts() if a["state"] == "firing"]

    fired = wait_until(
        firing,
        90,
        f"TFJobOperatorDown firing ({DOWN_FOR} after the operators' last scrape)",
        until=lambda names: "TFJobOperatorDown" in names,
        interval=1,
    )
    assert fired == ["TFJobOperatorDown"]


def test_the_chart_ships_the_alerts_and_the_dashboard_as_they_are() -> None:
    """metrics.prometheusRule and metrics.dashboard: the files, unchanged, in the objects
    the Prometheus Operator and Grafana's sidecar read."""
    objects = render_chart(
        CHART,
        ["metrics.prometheusRule.enabled=true", "metrics.dashboard.enabled=true"],
        crds=False,
        managed_by="Helm",
    )
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load(ALERTS.read_text())
    (board,) = [
        o for o in objects if o["kind"] == "ConfigMap" and "dashboard" in o["metadata"]["name"]
    ]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["tfjob-operator.json"]) == json.loads(DASHBOARD.read_text())
    # Off by default: a cluster without the Prometheus Operator's CRDs installs the chart.
    plain = render_chart(CHART, [], crds=False, managed_by="Helm")
    assert [o["metadata"]["name"] for o in plain if o["kind"] == "PrometheusRule"] == []
