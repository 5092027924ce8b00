"""Builders of TFJob specs and child pods for the operator's unit tests."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from tfjob_operator.api import JobRef
from tfjob_operator.decide import JobView
from tfjob_operator.observe import PodObservation, observe_pod, observe_service
from tfjob_operator.render import render_pod, render_service
from tfjob_operator.spec import Replica, parse_spec

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
JOB = JobRef("ml", "mnist", "uid-1")


def template(**container: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "tensorflow", "image": "trainer:1", **container}]}}


def replica_spec(replicas: int = 1, policy: str | None = None, **container: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "template": template(**container)}
    if policy:
        spec["restartPolicy"] = policy
    return spec


def job_view(
    spec: dict[str, Any], status: dict[str, Any] | None = None, *, deleting: bool = False
) -> JobView:
    return JobView(JOB, "1", 1, deleting, spec, status or {})


def replica(key: str) -> Replica:
    from tfjob_operator.observe import replica_from_labels

    kind, index = key.rsplit("-", 1)
    found = replica_from_labels({"tfjob.dev/replica-type": kind, "tfjob.dev/replica-index": index})
    assert found is not None
    return found


def pod(
    spec: dict[str, Any],
    key: str,
    phase: str = "Running",
    *,
    exit_code: int | None = None,
    generation: int = 0,
    owner: JobRef = JOB,
    reason: str | None = None,
    terminating: bool = False,
    status: dict[str, Any] | None = None,
    restarts: int = 0,
) -> PodObservation:
    """A pod as the controller would have rendered it, in the given state."""
    body = render_pod(owner, parse_spec(owner.name, spec), replica(key), generation)
    body["metadata"]["uid"] = f"{owner.uid}-{key}-{generation}"
    container: dict[str, Any] = {"name": "tensorflow", "restartCount": restarts}
    if exit_code is not None:
        container["state"] = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
            }
        }
    elif phase == "Running":
        container["state"] = {"running": {}}
    body["status"] = {"phase": phase, "containerStatuses": [container], **(status or {})}
    if reason:
        body["status"]["reason"] = reason
    if terminating:
        body["metadata"]["deletionTimestamp"] = "2026-11-22T11:59:00Z"
    return observe_pod(body)


def services(spec: dict[str, Any], owner: JobRef = JOB) -> list[Any]:
    parsed = parse_spec(owner.name, spec)
    observed = []
    for r in parsed.replicas():
        body = copy.deepcopy(render_service(owner, parsed, r))
        body["metadata"]["uid"] = f"svc-{r.key}"
        observed.append(observe_service(body))
    return observed
