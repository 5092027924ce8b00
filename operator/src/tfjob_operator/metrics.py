"""Prometheus metrics of the operator (served by endpoints.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .api import ConditionType

#: Waits and writes take milliseconds to seconds; a write gives up after 30 s.
WAIT_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.jobs = Gauge(
            "tfjob_operator_jobs",
            "TFJobs known to the operator, by state",
            ["state"],
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            "tfjob_operator_reconcile_duration_seconds",
            "Time to decide and apply one reconcile of one TFJob",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.queue_wait_seconds = Histogram(
            "tfjob_operator_queue_wait_seconds",
            "Time from a change to a TFJob or its children to the start of the reconcile that "
            "sees it: the job's previous reconcile and the wait for a reconcile slot",
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.write_wait_seconds = Histogram(
            "tfjob_operator_write_wait_seconds",
            "Time a write waited for its turn (a write slot; for clean-up and events, also "
            "for the decisions being written), by priority; the ResourceFlavor reads of "
            "admissions take a slot too and count as priority child",
            ["priority"],
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.write_seconds = Histogram(
            "tfjob_operator_write_duration_seconds",
            "Time from sending a write to its answer, by priority (ResourceFlavor reads "
            "count as priority child)",
            ["priority"],
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.pods_created = Counter(
            "tfjob_operator_pods_created_total", "Pods created", registry=self.registry
        )
        self.services_created = Counter(
            "tfjob_operator_services_created_total", "Services created", registry=self.registry
        )
        self.pods_deleted = Counter(
            "tfjob_operator_pods_deleted_total", "Pods deleted", registry=self.registry
        )
        self.restarts = Counter(
            "tfjob_operator_restarts_total",
            "Restarts of replicas decided by the operator",
            registry=self.registry,
        )
        self.reconcile_errors = Counter(
            "tfjob_operator_reconcile_errors_total",
            "Reconciles that failed and were retried",
            registry=self.registry,
        )
        self.watch_restarts = Counter(
            "tfjob_operator_watch_restarts_total",
            "Watches reopened: resumed from their version (resume), listed again after 410 "
            "Gone (relist), or after an error (error)",
            ["resource", "cause"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "tfjob_operator_leader",
            "1 while this operator leads (holds the Lease and renewed it in time), else 0",
            registry=self.registry,
        )
        self.leader_transitions = Gauge(
            "tfjob_operator_leader_transitions",
            "How many times the Lease changed holder (its leaseTransitions), as last seen",
            registry=self.registry,
        )
        self._states: dict[tuple[str, str], str] = {}
        for kind in ConditionType:
            self.jobs.labels(kind.value).set(0)

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))

    def watch_restarted(self, resource: str) -> Callable[[str], None]:
        return lambda cause: self.watch_restarts.labels(resource, cause).inc()

    def job_state(self, key: tuple[str, str], state: str | None) -> None:
        """Records a job's state; None forgets a deleted job."""
        old = self._states.get(key)
        if old == state:
            return
        if old is not None:
            self.jobs.labels(old).dec()
        if state is None:
            del self._states[key]
        else:
            self._states[key] = state
            self.jobs.labels(state).inc()
