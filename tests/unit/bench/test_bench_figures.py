"""How the benchmark turns the audit log, watch moments and metrics into its figures."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

# The benchmark is not an installed package: it runs from the repository root.
from bench import exitwindow, measure, report
from bench.stats import percentile, summarize
from harness import audit, promtext
from tfjob_operator.metrics import Metrics

OPERATOR = "tfjob-bench:operator"
DRIVER = "tfjob-bench:driver"


def event(
    user: str,
    verb: str,
    resource: str,
    name: str,
    code: int,
    received: str,
    at: str,
    *,
    stage: str = "ResponseComplete",
    subresource: str = "",
) -> dict[str, Any]:
    ref = {"resource": resource, "namespace": "ns", "name": name}
    if subresource:
        ref["subresource"] = subresource
    return {
        "kind": "Event",
        "stage": stage,
        "verb": verb,
        "user": {"username": user, "groups": ["system:authenticated"]},
        "objectRef": ref,
        "responseStatus": {"code": code},
        "requestURI": f"/api/v1/namespaces/ns/{resource}/{name}",
        "requestReceivedTimestamp": f"2026-01-01T00:00:{received}Z",
        "stageTimestamp": f"2026-01-01T00:00:{at}Z",
    }


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 99) == pytest.approx(9.91)
    assert percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    summary = summarize([0.2, 0.1, 0.4])
    assert summary["count"] == 3
    assert summary["p50"] == pytest.approx(0.2)
    assert summary["max"] == pytest.approx(0.4)
    assert summarize([]) == {"count": 0}


def test_audit_policy_records_only_the_given_users() -> None:
    policy = audit.policy(["a", "b"])
    assert policy["rules"] == [{"level": "Metadata", "users": ["a", "b"]}, {"level": "None"}]
    assert policy["omitStages"] == ["RequestReceived"]


def test_audit_events_parse_into_requests_with_microsecond_times() -> None:
    request = audit.parse_event(
        event(
            DRIVER,
            "patch",
            "pods",
            "j-chief-0",
            200,
            "01.000001",
            "01.250001",
            subresource="status",
        )
    )
    assert request.kind == "patch pods/status"
    assert request.is_write
    assert request.at - request.received == pytest.approx(0.25, abs=1e-6)
    non_resource = audit.parse_event(
        {
            **event(OPERATOR, "get", "", "", 200, "01", "01"),
            "objectRef": None,
            "requestURI": "/api?timeout=32s",
        }
    )
    assert non_resource.kind == "get /api"
    assert not non_resource.is_write


def test_counts_break_requests_down_by_kind_and_code() -> None:
    requests = [
        audit.parse_event(e)
        for e in (
            event(OPERATOR, "create", "pods", "j-worker-0", 201, "01", "02"),
            event(OPERATOR, "create", "pods", "j-worker-0", 409, "03", "04"),
            event(OPERATOR, "watch", "pods", "", 200, "00", "00", stage="ResponseStarted"),
            event(OPERATOR, "watch", "pods", "", 200, "00", "09"),
            event(DRIVER, "create", "tfjobs", "j", 201, "00", "00"),
        )
    ]
    mine = audit.completed(requests, OPERATOR)
    counts = audit.count(mine)
    assert counts.total == 3
    assert counts.writes == 2
    assert counts.by_kind == {"create pods": 2, "watch pods": 1}
    assert counts.by_code == {"200": 1, "201": 1, "409": 1}
    assert audit.watch_starts(requests) == {OPERATOR: {"pods": 1}}
    assert audit.watched(requests, OPERATOR) == {"pods"}
    assert audit.watched(requests, DRIVER) == set()


def test_tail_returns_only_complete_new_lines(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    tail = audit.Tail(log)
    assert tail.new() == []
    first = json.dumps(event(OPERATOR, "list", "pods", "", 200, "01", "01"))
    second = json.dumps(
        event(OPERATOR, "watch", "pods", "", 200, "01", "01", stage="ResponseStarted")
    )
    log.write_text(first + "\n" + second[:20])
    assert [r.verb for r in tail.new()] == ["list"]
    with log.open("a") as out:
        out.write(second[20:] + "\n")
    assert [r.verb for r in tail.new()] == ["watch"]
    assert tail.new() == []


def test_per_job_latencies_come_from_the_servers_moments() -> None:
    requests = [
        audit.parse_event(e)
        for e in (
            event(DRIVER, "create", "tfjobs", "a", 201, "00.000", "00.100"),
            event(DRIVER, "create", "tfjobs", "b", 201, "00.050", "00.200"),
            event(OPERATOR, "create", "pods", "a-chief-0", 201, "00.300", "00.400"),
            event(OPERATOR, "create", "pods", "a-worker-0", 201, "00.300", "00.900"),
            event(OPERATOR, "create", "pods", "b-chief-0", 201, "00.300", "00.700"),
            event(OPERATOR, "create", "services", "b-chief-0", 201, "00.300", "01.500"),
            event(DRIVER, "patch", "pods", "a-chief-0", 200, "02", "02.5", subresource="status"),
            event(DRIVER, "patch", "pods", "b-worker-0", 200, "02", "02.6", subresource="status"),
        )
    ]
    created = measure.jobs_created(requests, DRIVER)
    pods = audit.created(requests, "pods")
    latencies = measure.per_job(created, measure.children_done(pods))
    assert latencies == pytest.approx({"a": 0.8, "b": 0.5})
    span = measure.creation_span(
        [r for r in requests if r.resource == "tfjobs"], pods + audit.created(requests, "services")
    )
    assert span.seconds == pytest.approx(1.5)
    assert span.objects == 4
    assert measure.distinct_names(pods + audit.created(requests, "services")) == 4
    exits = measure.leader_exit_requests(requests, DRIVER, {"a-chief-0": "a", "b-chief-0": "b"})
    assert list(exits) == ["a"]
    # 2026-01-01T00:00:02.5Z
    assert measure.answered_at(exits) == pytest.approx({"a": 1767225602.5})


def test_exit_splits_take_each_jobs_first_status_write_after_its_exit() -> None:
    requests = [
        audit.parse_event(e)
        for e in (
            # Before a's exit: not a reaction to it.
            event(OPERATOR, "patch", "tfjobs", "a", 200, "00.500", "00.600", subresource="status"),
            event(OPERATOR, "patch", "tfjobs", "a", 200, "01.300", "01.500", subresource="status"),
            event(OPERATOR, "patch", "tfjobs", "a", 200, "01.100", "01.200", subresource="status"),
            # Kubeflow writes its status with PUT (update).
            event(OPERATOR, "update", "tfjobs", "b", 200, "02.400", "02.450", subresource="status"),
            # Not a status write, or another user's.
            event(OPERATOR, "patch", "tfjobs", "b", 200, "02.100", "02.200"),
            event(DRIVER, "patch", "tfjobs", "b", 200, "02.100", "02.200", subresource="status"),
            # c never Succeeded.
            event(OPERATOR, "patch", "tfjobs", "c", 200, "03.100", "03.200", subresource="status"),
        )
    ]
    exits = {
        job: audit.parse_event(
            event(DRIVER, "patch", "pods", f"{job}-chief-0", 200, f"0{t - 0.05:.3f}", f"0{t:.3f}")
        )
        for job, t in {"a": 1.0, "b": 2.0, "c": 3.0}.items()
    }
    splits = measure.exit_splits(
        exits,
        requests,
        OPERATOR,
        {"a": 1767225601.7, "b": 1767225602.5},
    )
    assert set(splits) == {"a", "b"}
    # Epoch seconds as floats keep microseconds only to about 1e-6.
    a, b = splits["a"], splits["b"]
    assert (a.react, a.write, a.seen) == pytest.approx((0.1, 0.1, 0.5), abs=1e-5)
    assert (b.react, b.write, b.seen) == pytest.approx((0.4, 0.05, 0.05), abs=1e-5)
    summary = measure.split_summary(splits)
    assert summary["react"]["count"] == 2
    assert summary["seen"]["max"] == pytest.approx(0.5)


def test_the_bursts_density_is_when_half_and_all_of_the_exits_had_arrived() -> None:
    exits = {
        job: audit.parse_event(
            event(DRIVER, "patch", "pods", f"{job}-chief-0", 200, received, "09.000")
        )
        for job, received in {"a": "01.000", "b": "01.100", "c": "01.400", "d": "02.000"}.items()
    }
    # The second of four arrivals marks half; the order of the mapping does not matter.
    assert measure.exits_received(dict(reversed(exits.items()))) == pytest.approx(
        {"half": 0.1, "all": 1.0}
    )


PROMETHEUS = """\
# HELP apiserver_flowcontrol_dispatched_requests_total Number of requests executed
# TYPE apiserver_flowcontrol_dispatched_requests_total counter
apiserver_flowcontrol_dispatched_requests_total{flow_schema="op",priority_level="exempt"} 323
apiserver_flowcontrol_dispatched_requests_total{flow_schema="exempt",priority_level="exempt"} 9000
# HELP apiserver_terminated_watchers_total Number of watchers closed due to unresponsiveness
# TYPE apiserver_terminated_watchers_total counter
apiserver_terminated_watchers_total{group="",resource="pods"} 7
apiserver_terminated_watchers_total{group="tfjob.dev",resource="tfjobs"} 1
# HELP tfjob_operator_pods_created_total Pods created
# TYPE tfjob_operator_pods_created_total counter
tfjob_operator_pods_created_total 35.0
tfjob_operator_pods_created_created 1.7e9
"""


def test_server_and_operator_metrics_are_read_by_name() -> None:
    assert promtext.dispatched_requests(PROMETHEUS, "op") == 323
    assert promtext.dispatched_requests(PROMETHEUS, "nobody") == 0
    assert promtext.terminated_watchers(PROMETHEUS) == {"pods": 7, "tfjobs.tfjob.dev": 1}
    assert promtext.counters(PROMETHEUS, "tfjob_operator_") == {
        "tfjob_operator_pods_created_total": 35.0
    }
    assert promtext.counters(None, "tfjob_operator_") == {}


def storage_metrics(pods: tuple[float, int], tfjobs: tuple[float, int]) -> str:
    """etcd_request_duration_seconds as the API server exposes it (a histogram)."""
    lines = ["# TYPE etcd_request_duration_seconds histogram"]
    for group, resource, operation, (seconds, count) in (
        ("", "pods", "update", pods),
        ("tfjob.dev", "tfjobs", "update", tfjobs),
        ("", "pods", "create", (9.0, 90)),
    ):
        labels = f'group="{group}",operation="{operation}",resource="{resource}"'
        lines += [
            f'etcd_request_duration_seconds_bucket{{{labels},le="+Inf"}} {count}',
            f"etcd_request_duration_seconds_sum{{{labels}}} {seconds}",
            f"etcd_request_duration_seconds_count{{{labels}}} {count}",
        ]
    return "\n".join(lines) + "\n"


def test_histograms_are_read_by_label_over_the_samples_that_match() -> None:
    text = storage_metrics(pods=(1.5, 30), tfjobs=(0.25, 10))
    updates = promtext.histogram_totals(
        text, "etcd_request_duration_seconds", "resource", {"operation": "update"}
    )
    assert updates == {"pods": (1.5, 30), "tfjobs": (0.25, 10)}
    # Read whole: every operation of every resource.
    assert promtext.histogram_totals(text, "etcd_request_duration_seconds") == {"": (10.75, 130)}


def test_the_exit_window_reports_the_updates_made_inside_it() -> None:
    before = storage_metrics(pods=(1.5, 30), tfjobs=(0.25, 10))
    after = storage_metrics(pods=(3.5, 130), tfjobs=(0.25, 10))
    # No TFJob was updated in between: it is left out rather than divided by zero.
    assert exitwindow.storage_update_seconds(before, after) == {"pods": (2.0, 100)}


class LaggingServer:
    """An API server whose /metrics readings are served in turn, the last one repeated: a
    server that had not yet recorded an update the harness saw when first read."""

    def __init__(self, *readings: str) -> None:
        self.readings = list(readings)
        self.reads = 0

    async def text(self, path: str) -> str:
        assert path == "/metrics"
        self.reads += 1
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def close_window(server: LaggingServer, seen: dict[str, int]) -> dict[str, Any]:
    window = exitwindow.ExitWindow({}, storage_metrics(pods=(1.0, 10), tfjobs=(0.5, 2)))
    return asyncio.run(window.close(server, seen))


def test_the_windows_closing_reading_waits_until_it_counts_every_update_the_harness_saw() -> None:
    lagging = storage_metrics(pods=(2.0, 15), tfjobs=(0.9, 6))
    caught_up = storage_metrics(pods=(2.0, 15), tfjobs=(1.0, 7))
    server = LaggingServer(lagging, caught_up)
    closed = close_window(server, {"tfjobs": 5})
    assert server.reads == 2
    assert closed["storage_updates"] == {"pods": 5, "tfjobs": 5}
    assert closed["storage_update_ms"]["tfjobs"] == 100.0  # 0.5 s over 5 updates


def test_a_reading_that_never_counts_them_is_reported_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(exitwindow, "COUNTED_WITHIN_SECONDS", 0.2)
    server = LaggingServer(storage_metrics(pods=(2.0, 15), tfjobs=(0.9, 6)))
    closed = close_window(server, {"tfjobs": 5})
    assert server.reads > 1
    assert closed["storage_updates"] == {"pods": 5, "tfjobs": 4}


def operator_metrics(
    queued: tuple[float, int], decisions: tuple[float, int], children: tuple[float, int]
) -> str:
    """The operator's wait and write histograms as its /metrics serves them (from a real
    registry, so that the names are the operator's own)."""
    metrics = Metrics()
    for _ in range(queued[1]):
        metrics.queue_wait_seconds.observe(queued[0] / queued[1])
    for label, (seconds, count) in (("decision", decisions), ("child", children)):
        for _ in range(count):
            metrics.write_wait_seconds.labels(label).observe(seconds / count / 2)
            metrics.write_seconds.labels(label).observe(seconds / count)
    return metrics.exposition().decode()


def test_the_window_reports_where_the_operators_decisions_waited_inside_it() -> None:
    before = operator_metrics(queued=(1.0, 50), decisions=(2.0, 40), children=(5.0, 100))
    after = operator_metrics(queued=(1.5, 150), decisions=(12.0, 140), children=(5.0, 100))
    assert exitwindow.operator_waits(before, after) == {
        "queue_wait_ms": 5.0,  # 0.5 s over 100 reconciles
        "decision_write_wait_ms": 50.0,  # half of each write's time, as observed above
        "decision_write_ms": 100.0,
        "decision_writes": 100,
    }
    # An operator that made no decision in the window reports only what it observed.
    assert exitwindow.operator_waits(before, before) == {}


def window(seconds: float, server: float, pods_ms: float, operator: float | None) -> dict[str, Any]:
    cpu = {"kube-apiserver": server, "harness": 0.1}
    if operator is not None:
        cpu["operator"] = operator
    return {
        "wall_seconds": seconds,
        "busy_cores": 1.9,
        "cores": 2,
        "cpu_seconds": cpu,
        "storage_update_ms": {"pods": pods_ms},
        "storage_updates": {"pods": 100},
    }


def test_exit_window_table_sets_each_floor_figure_beside_the_operators() -> None:
    run = entry(100, 1, 2.0, 3.0)
    run["floor"]["exit_window"] = window(0.8, 1.2, 15.0, None)
    run["operator"]["exit_window"] = window(1.1, 1.6, 70.5, 0.19)
    run["floor"]["exits_received_seconds"] = {"half": 0.27, "all": 0.62}
    run["operator"]["exits_received_seconds"] = {"half": 0.218, "all": 0.85}
    run["operator"]["exit_window"]["operator_ms"] = {
        "queue_wait_ms": 2.5,
        "decision_write_ms": 180.0,
        "decision_writes": 100,
    }
    lines = report.exit_window_table({"runs": [run, entry(100, 2, 2.0, 3.0)]}).splitlines()
    # The run recorded without a window has no row.
    assert len(lines) == 3
    assert lines[2] == (
        "| 100 | 0.8 / 1.1 s | 0.27 / 0.218 s | 1.9 / 1.9 of 2 | 1.2 / 1.6 s | 15 / 70.5 ms "
        "| — / — ms | 0.19 s | 2.5 / — / 180 ms |"
    )
    assert report.exit_window_table({"runs": [entry(100, 1, 2.0, 3.0)]}) == ""


def entry(
    size: int,
    round_: int,
    floor_seconds: float,
    operator_seconds: float,
    floor_done: dict[str, float] | None = None,
) -> dict[str, Any]:
    latency = {"p50": 0.5, "p99": 0.9}
    floor: dict[str, Any] = {"objects": 140, "create_seconds": floor_seconds}
    if floor_done is not None:
        floor["exit_to_succeeded_seconds"] = floor_done
    return report.run_entry(
        size,
        round_,
        floor,
        {
            "create_seconds": operator_seconds,
            "create_to_pods_seconds": latency,
            "exit_to_succeeded_seconds": latency,
            "requests": {"per_job": 60.0, "writes_per_job": 59.5},
            "process": {"peak_rss_mib": 150.0, "cpu_seconds_after_ready": 4.25},
        },
    )


def test_table_has_a_row_per_run_with_the_ratio() -> None:
    run = entry(10, 1, 2.0, 3.0)
    assert run["ratio_to_floor"] == 1.5
    lines = report.table({"runs": [run]}).splitlines()
    assert len(lines) == 3
    assert lines[2].startswith("| 10 | 140 | 2.00 s | 3.00 s | 1.50x |")
    assert "60.0 (59.5)" in lines[2]
    # A run recorded before the floor measured completion has no floor figure for it.
    assert "| 0.500 / 0.900 s | — |" in lines[2]
    assert all(line.count("|") == lines[0].count("|") for line in lines)


def test_table_shows_the_floors_exit_to_succeeded_beside_the_operators() -> None:
    run = entry(10, 1, 2.0, 3.0, floor_done={"p50": 0.25, "p99": 0.4})
    row = report.table({"runs": [run]}).splitlines()[2]
    assert "| 0.500 / 0.900 s | 0.250 / 0.400 s |" in row


def test_rounds_of_one_size_end_the_table_with_their_median_ratio() -> None:
    runs = [entry(10, 1, 2.0, 3.0), entry(10, 2, 2.0, 4.0), entry(10, 3, 4.0, 4.0)]
    lines = report.table({"runs": [*runs, entry(20, 1, 1.0, 1.0)]}).splitlines()
    assert len(lines) == 8
    assert lines[-1] == (
        "Median ratio over the rounds: N=10 1.50x (1.00-2.00x, 3 rounds); "
        "N=20 1.00x (1.00-1.00x, 1 round)"
    )
