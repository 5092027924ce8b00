"""Prometheus metrics of the operator (served by endpoints.py).

Two families, both documented in docs/status-and-metrics.md:
- Kubeflow's job counters (`training_operator_jobs_*_total`), under Kubeflow's names and
  labels, so that dashboards and alerts written for Kubeflow's TFJob keep working; jobs of
  both API groups count, as `framework="tensorflow"`;
- the operator's own (`tfjob_operator_*`): jobs by state, how long they wait, start and
  run, restarts and refusals by reason, and the controller's internals.

A job's namespace is the label `job_namespace`, as Kubeflow's: Prometheus' Kubernetes
discovery gives every series the operator's own `namespace`. No label holds a job's name
or uid: the series are bounded by the namespaces that have jobs times a few fixed values
(states, reasons), however many jobs come and go. The API server's refusal reasons are a
fixed set of Kubernetes' own (Invalid, Forbidden, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from .api import ConditionType
from .job_view import JobView
from .observe import RestartCause
from .transitions import FINISHED, transitions

#: Waits and writes take milliseconds to seconds; a write gives up after 30 s.
WAIT_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
#: A job's start takes seconds (pods of a pulled image) to many minutes (an image pulled
#: for the first time, a node scaled up).
START_BUCKETS: Final = (1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
#: A job runs minutes to days; its admission waits as long as the jobs ahead of it.
LONG_BUCKETS: Final = (10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 86400, 259200)


class WatchCause(StrEnum):
    """Why a watch was reopened (watchcache.py)."""

    RESUME = "resume"  # from its last version
    RELIST = "relist"  # listed again after 410 Gone
    ERROR = "error"  # after a failure


#: Kubeflow's `framework` label of a TFJob.
FRAMEWORK: Final = "tensorflow"
#: Kubeflow's job counters, by what each counts.
KUBEFLOW_COUNTERS: Final = {
    "created": "TFJobs the operator took on (their first status), by namespace",
    "deleted": "TFJobs deleted while the operator knew them, by namespace",
    "successful": "TFJobs that succeeded, by namespace",
    "failed": "TFJobs that failed, by namespace",
    "restarted": "Restarts of TFJobs (each one their restartCount counts), by namespace",
}


# A `_created` series beside every counter and histogram would double what is served, for
# a time no dashboard reads.
disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.kubeflow = {
            what: Counter(
                f"training_operator_jobs_{what}",
                help_text,
                ["job_namespace", "framework"],
                registry=self.registry,
            )
            for what, help_text in KUBEFLOW_COUNTERS.items()
        }
        self.jobs = Gauge(
            "tfjob_operator_jobs",
            "TFJobs known to the operator, by namespace and state",
            ["job_namespace", "state"],
            registry=self.registry,
        )
        self.job_admission_wait_seconds = Histogram(
            "tfjob_operator_job_admission_wait_seconds",
            "Time a TFJob of a Kueue queue waited for its admission: from its suspension by "
            "the queue to its resumption",
            ["job_namespace"],
            buckets=LONG_BUCKETS,
            registry=self.registry,
        )
        self.job_start_seconds = Histogram(
            "tfjob_operator_job_start_seconds",
            "Time from a TFJob's startTime (its first reconcile, or its resumption) to every "
            "training replica running",
            ["job_namespace"],
            buckets=START_BUCKETS,
            registry=self.registry,
        )
        self.job_duration_seconds = Histogram(
            "tfjob_operator_job_duration_seconds",
            "Time from a TFJob's creation to its end, by the state it ended in",
            ["job_namespace", "state"],
            buckets=LONG_BUCKETS,
            registry=self.registry,
        )
        self.finished = Counter(
            "tfjob_operator_jobs_finished_total",
            "TFJobs that ended, by state (Succeeded, Failed) and by the reason of its "
            "condition (BackoffLimitExceeded, DeadlineExceeded, ...)",
            ["job_namespace", "state", "reason"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "tfjob_operator_refusals_total",
            "Pods and services of TFJobs the API server refused (events FailedCreatePod, "
            "FailedCreateService), by kind and by the API server's reason (Invalid, "
            "Forbidden, ...)",
            ["job_namespace", "kind", "reason"],
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
            "Restarts of TFJobs' replicas decided by the operator, by cause: ExitCode (a "
            "container exited with a code its policy retries) or Disrupted (its pods were "
            "taken away)",
            ["job_namespace", "reason"],
            registry=self.registry,
        )
        self.throttled = Counter(
            "tfjob_operator_api_throttled_total",
            "Requests the API server answered 429 Too Many Requests (API Priority and "
            "Fairness, or a rate limit in front of it); each was tried again after the "
            "Retry-After it asked for, in its time limit",
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
        #: Each job's state, by (namespace, name), and how many jobs are in each
        #: (namespace, state).
        self._states: dict[tuple[str, str], str] = {}
        self._counts: dict[tuple[str, str], int] = {}
        #: The namespaces whose Kubeflow counters are served.
        self._namespaces: set[str] = set()
        #: The startTime whose start each job counted.
        self._started: dict[tuple[str, str], str] = {}

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))

    def watch_restarted(self, resource: str) -> Callable[[str], None]:
        """Counts the reopened watches of `resource` by cause, each from 0."""
        for cause in WatchCause:
            self.watch_restarts.labels(resource, cause.value)
        return lambda cause: self.watch_restarts.labels(resource, cause).inc()

    def job_state(self, key: tuple[str, str], state: str) -> None:
        """Records the state of job `key` (namespace, name)."""
        old = self._states.get(key)
        if old == state:
            return
        if key[0] not in self._namespaces:
            self._namespaces.add(key[0])
            self._serve_namespace(key[0])
        if old is not None:
            self._count(key[0], old, -1)
        self._states[key] = state
        self._count(key[0], state, 1)

    def _serve_namespace(self, namespace: str) -> None:
        """The series of a namespace's first job start at 0, those whose labels are known
        before anything happens: a rate, an increase or a quantile over them then counts
        the namespace's first success, failure, restart or start too (a series first seen
        at 1 would count from 1)."""
        for counter in self.kubeflow.values():
            counter.labels(namespace, FRAMEWORK)
        for cause in RestartCause:
            self.restarts.labels(namespace, cause.value)
        self.job_admission_wait_seconds.labels(namespace)
        self.job_start_seconds.labels(namespace)
        for state in FINISHED:
            self.job_duration_seconds.labels(namespace, state.value)

    def job_deleted(self, key: tuple[str, str]) -> None:
        """Job `key` is gone: counted as deleted if this operator knew it."""
        old = self._states.pop(key, None)
        self._started.pop(key, None)
        if old is not None:
            self._count(key[0], old, -1)
            self.kubeflow["deleted"].labels(key[0], FRAMEWORK).inc()

    def status_written(
        self,
        job: JobView,
        status: Mapping[str, Any],
        restarted: tuple[RestartCause, ...],
        now: datetime,
    ) -> None:
        """Counts what writing `status` over `job`'s status changed; `restarted` are the
        causes of the restarts the decision counted."""
        key = (job.ref.namespace, job.ref.name)
        namespace = job.ref.namespace
        changed = transitions(job, status, now, self._started.get(key))
        if changed.created:
            self.kubeflow["created"].labels(namespace, FRAMEWORK).inc()
        if changed.entered is ConditionType.SUCCEEDED:
            self.kubeflow["successful"].labels(namespace, FRAMEWORK).inc()
        if changed.entered is ConditionType.FAILED:
            self.kubeflow["failed"].labels(namespace, FRAMEWORK).inc()
        for cause in restarted:
            self.kubeflow["restarted"].labels(namespace, FRAMEWORK).inc()
            self.restarts.labels(namespace, cause.value).inc()
        if changed.admitted_after is not None:
            self.job_admission_wait_seconds.labels(namespace).observe(changed.admitted_after)
        if changed.start_time is not None:
            self._started[key] = changed.start_time
            if changed.started_after is not None:
                self.job_start_seconds.labels(namespace).observe(changed.started_after)
        if changed.entered in FINISHED:
            state = changed.entered.value
            self.finished.labels(namespace, state, changed.finished_reason or state).inc()
            if changed.finished_after is not None:
                self.job_duration_seconds.labels(namespace, state).observe(changed.finished_after)

    def refused(self, namespace: str, kind: str, reason: str) -> None:
        """The API server refused a child (`kind` pod or service) of a job in `namespace`,
        for `reason`."""
        self.refusals.labels(namespace, kind, reason or "Unknown").inc()

    def _count(self, namespace: str, state: str, change: int) -> None:
        """A job of `namespace` entered (1) or left (-1) `state`. A series that counts no
        job goes, so that a namespace that had jobs once is not served for ever."""
        count = self._counts.get((namespace, state), 0) + change
        if count:
            self._counts[(namespace, state)] = count
            self.jobs.labels(namespace, state).set(count)
        else:
            self._counts.pop((namespace, state), None)
            self.jobs.remove(namespace, state)
