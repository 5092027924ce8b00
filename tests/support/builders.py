"""TFJobs built as data, for the tests of every tier: manifests (containers, replica specs,
whole TFJobs, replicas that run a shell script) and, for the unit tests, what the operator
observes of them (the job, its pods and services as the controller renders them).

One module, so that a replica spec is written one way whichever tier builds it.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tfjob_localcluster.images.catalog import BUSYBOX
from tfjob_operator.api import JobRef
from tfjob_operator.decide import decide
from tfjob_operator.integrations import Settings, integrations
from tfjob_operator.integrations.base import Observation
from tfjob_operator.integrations.gang import (
    USUAL_GANG_SCHEDULERS,
    GangSchedulers,
    GangScheduling,
    PodGroupWrites,
)
from tfjob_operator.integrations.kueue import Kueue, WorkloadWrites
from tfjob_operator.job_view import JobView
from tfjob_operator.observe import (
    FlavorObservation,
    PodGroupObservation,
    PodObservation,
    ServiceObservation,
    WorkloadObservation,
    observe_pod,
    observe_service,
    replica_from_labels,
)
from tfjob_operator.plan import Plan
from tfjob_operator.render import render_pod, render_service
from tfjob_operator.spec import Replica, parse_spec

Manifest = dict[str, Any]

GROUP, VERSION, PLURAL = "tfjob.dev", "v1", "tfjobs"
#: The image of manifests that are validated, never run.
IMAGE = "tensorflow/tensorflow:2.21.0"
#: The image of replicas that run a shell script (shell_replica).
SHELL_IMAGE = BUSYBOX
#: Lets a replica's command know which incarnation it is (0 before any restart).
GENERATION_ENV = {
    "name": "GENERATION",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tfjob.dev/replica-generation']"}},
}
#: A shell script that runs until the test tells it to finish (Kubectl.tell_to_finish).
#: Told, it waits a second more: when a container's main process exits, the runtime kills
#: what still runs in it, the telling `kubectl exec` too, which then fails with code 137.
UNTIL_TOLD = "until [ -e /done ]; do sleep 0.2; done; sleep 1"

# -- manifests ------------------------------------------------------------------------------


def container(name: str = "tensorflow", image: str | None = IMAGE, **fields: Any) -> Manifest:
    out: Manifest = {"name": name, **fields}
    if image is not None:
        out["image"] = image
    return out


def template(**fields: Any) -> Manifest:
    """A pod template of one `tensorflow` container with `fields`."""
    return {"spec": {"containers": [container(**fields)]}}


def replica_spec(
    replicas: int | None = 1,
    policy: str | None = None,
    *,
    containers: list[Manifest] | None = None,
    **fields: Any,
) -> Manifest:
    """A replica spec: `replicas` of them (None: the field left out), of `containers`, else
    of one `tensorflow` container with `fields`."""
    spec: Manifest = {"template": {"spec": {"containers": containers or [container(**fields)]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    if policy:
        spec["restartPolicy"] = policy
    return spec


def shell_replica(
    script: str,
    replicas: int = 1,
    policy: str | None = None,
    grace: int = 1,
) -> Manifest:
    """A replica whose tensorflow container runs `sh -c script`."""
    spec = replica_spec(
        replicas,
        policy,
        image=SHELL_IMAGE,
        command=["sh", "-c", script],
        env=[GENERATION_ENV],
    )
    spec["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    return spec


def tfjob(
    name: str = "job", replica_specs: Mapping[str, Any] | None = None, **spec: Any
) -> Manifest:
    """A tfjob.dev TFJob named `name` of `replica_specs` (two workers if not given), with
    the other `spec` fields."""
    specs = {"Worker": replica_spec(2)} if replica_specs is None else dict(replica_specs)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": specs, **spec},
    }


def ending_jobs() -> dict[str, tuple[Manifest, str]]:
    """Three TFJobs and the state each ends in: one that succeeds (2 workers), one that
    fails (its worker exits 3 under Never) and one that restarts once (its worker exits
    137 under ExitCode) and then succeeds. Each runs longer than the operator takes to
    write that it runs (2 s at most), so that each starts once."""
    flaky = '[ "$GENERATION" = 0 ] && { sleep 4; exit 137; }; sleep 1'
    return {
        "succeeds": (tfjob("succeeds", {"Worker": shell_replica("sleep 4", 2)}), "Succeeded"),
        "fails": (
            tfjob("fails", {"Worker": shell_replica("sleep 4; exit 3", policy="Never")}),
            "Failed",
        ),
        "restarts": (
            tfjob(
                "restarts",
                {"Worker": shell_replica(flaky, policy="ExitCode")},
                runPolicy={"backoffLimit": 3},
            ),
            "Succeeded",
        ),
    }


# -- what the operator observes (unit tests) ------------------------------------------------

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
JOB = JobRef("ml", "mnist", "uid-1")


def job_view(spec: Manifest, status: Manifest | None = None, *, deleting: bool = False) -> JobView:
    return JobView(JOB, "1", 1, deleting, spec, status or {})


def replica_of(key: str) -> Replica:
    """The replica a key names: `worker-1`."""
    kind, index = key.rsplit("-", 1)
    found = replica_from_labels({"tfjob.dev/replica-type": kind, "tfjob.dev/replica-index": index})
    assert found is not None
    return found


def pod(
    spec: Manifest,
    key: str,
    phase: str = "Running",
    *,
    exit_code: int | None = None,
    generation: int = 0,
    owner: JobRef = JOB,
    reason: str | None = None,
    terminating: bool = False,
    status: Manifest | None = None,
    restarts: int = 0,
) -> PodObservation:
    """A pod as the controller would have rendered it, in the given state."""
    body = render_pod(owner, parse_spec(owner.name, spec), replica_of(key), generation)
    body["metadata"]["uid"] = f"{owner.uid}-{key}-{generation}"
    state: Manifest = {"name": "tensorflow", "restartCount": restarts}
    if exit_code is not None:
        state["state"] = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
            }
        }
    elif phase == "Running":
        state["state"] = {"running": {}}
    body["status"] = {"phase": phase, "containerStatuses": [state], **(status or {})}
    if reason:
        body["status"]["reason"] = reason
    if terminating:
        body["metadata"]["deletionTimestamp"] = "2026-11-22T11:59:00Z"
    return observe_pod(body)


def services(spec: Manifest, owner: JobRef = JOB) -> list[ServiceObservation]:
    parsed = parse_spec(owner.name, spec)
    observed = []
    for r in parsed.replicas():
        body = copy.deepcopy(render_service(owner, parsed, r))
        body["metadata"]["uid"] = f"svc-{r.key}"
        observed.append(observe_service(body))
    return observed


def decide_observing(
    job: JobView,
    pods: Sequence[PodObservation],
    services: Sequence[ServiceObservation],
    now: datetime,
    cluster_domain: str | None = None,
    workloads: Sequence[WorkloadObservation] = (),
    *,
    flavors: Mapping[str, FlavorObservation] | None = None,
    pod_groups: Sequence[PodGroupObservation] = (),
    gangs: GangSchedulers = USUAL_GANG_SCHEDULERS,
    records: Mapping[str, Sequence[Any]] | None = None,
    readable_workloads: Sequence[WorkloadObservation] = (),
    **options: Any,
) -> Plan:
    """`decide` with every integration the operator runs, each observing what its watches
    would show: Kueue `workloads` (and the ResourceFlavors `flavors` it reads, and the
    `readable_workloads` it may read by name), the gang's `pod_groups`, and any
    integration's `records` by its name."""
    shown = {Kueue.name: workloads, GangScheduling.name: pod_groups, **(records or {})}
    reads = _KueueReads(flavors or {}, {w.name: w for w in readable_workloads})
    observations = [
        Observation(
            integration,
            asyncio.run(
                integration.observe(job, list(shown.get(integration.name, ())), reads, 0.0)
            ),
        )
        for integration in integrations(Settings(gangs=gangs, cluster_domain=cluster_domain))
    ]
    return decide(job, pods, services, now, cluster_domain, observations=observations, **options)


class _KueueReads:
    """The ResourceFlavors and Workloads Kueue's observation reads."""

    def __init__(
        self,
        flavors: Mapping[str, FlavorObservation],
        workloads: Mapping[str, WorkloadObservation],
    ) -> None:
        self.flavors = flavors
        self.workloads = workloads

    async def read_resource_flavor(self, name: str) -> FlavorObservation | None:
        return self.flavors.get(name)

    async def read_workload(self, namespace: str, name: str) -> WorkloadObservation | None:
        return self.workloads.get(name)


def workload_writes(plan: Plan) -> WorkloadWrites:
    """The plan's writes of Kueue's Workload (none: nothing to write)."""
    writes = plan.writes_of(Kueue.name)
    return writes if isinstance(writes, WorkloadWrites) else WorkloadWrites()


def pod_group_writes(plan: Plan) -> PodGroupWrites:
    """The plan's writes of the job's PodGroups (none: nothing to write)."""
    writes = plan.writes_of(GangScheduling.name)
    return writes if isinstance(writes, PodGroupWrites) else PodGroupWrites()
