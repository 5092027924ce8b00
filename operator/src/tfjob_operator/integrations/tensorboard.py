"""TensorBoard bound to a TFJob: a Deployment and a Service the operator runs beside the job.

A TFJob asks for one with `spec.tensorboard` (tfjob.dev/v1) or, as kubeflow.org/v1's schema
has no such field, with the annotation `tfjob.dev/tensorboard` holding the same object as
JSON. `logDir` is where the job's training container writes its summaries (the trainer's
`--log-dir`), as that container sees it: the TensorBoard mounts the volume the path lies
on, read-only at the same path, so it reads what the job writes. With a
PersistentVolumeClaim the job's pods share, that works on any node the claim reaches
(a ReadWriteOnce claim's volume is on one node, and the scheduler puts the TensorBoard
there). `$(TFJOB_NAME)`, `$(TFJOB_NAMESPACE)` and `$(TFJOB_UID)` in logDir expand as they
do in the job's args; a `gs://`-style URL needs no volume.

It runs from the job's start until `ttlSecondsAfterFinished` after the job ended (an hour
unless set), then the operator deletes it; it is the job's child, so it also goes with the
job. `status.tensorboard` says where it serves (`url`, inside the cluster), whether it is
ready, when it goes, and, when the API server refuses its pod (its ReplicaSet's
ReplicaFailure, say a namespace's Pod Security), why.

It is the operator's own pod, not the user's: it asks for what Pod Security "restricted"
requires whatever the job's pods do, and runs as the job's pods' user (to read what they
wrote) unless that is root. A NetworkPolicy lets only pods of the job's namespace reach it:
a job's logs are not every tenant's. `tfjob-operator tensorboard` reaches it through the API
server's port-forward, which enters the pod's own network namespace and is not subject to
the policy.

Unlike Kueue and gangs it holds nothing back: it sits beside the TFJob's own flow, which it
never changes (`Stage.BESIDE`). `plan_board` is a pure function of the job, its status as
decided and what the watches show of its TensorBoard; its status goes into the job's
`status.tensorboard` in the same write.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from .. import conditions as cond
from .. import published
from ..api import (
    CONTAINER_NAME,
    LABEL_TENSORBOARD_DIGEST,
    LABEL_TENSORBOARD_OF,
    TENSORBOARD_ANNOTATION,
    TENSORBOARD_PORT,
    TFJOB_DEV,
    JobRef,
)
from ..apiserver.errors import ApiError
from ..events import NORMAL, WARNING, Event
from ..job_view import JobView
from ..observe import controller_uid
from ..resources import Resource, child_reader
from ..spec import InvalidSpec, JobSpec
from ..timeutil import from_rfc3339, to_rfc3339
from .base import Host, Integration, ObjectWrites, Outcome, Settled, Stage, Watched

#: Deployments' and NetworkPolicies' groups and versions.
APPS: Final = "/apis/apps/v1"
NETWORKING: Final = "/apis/networking.k8s.io/v1"

logger = logging.getLogger(__name__)

PORT: Final = TENSORBOARD_PORT
PORT_NAME: Final = "http"
CONTAINER: Final = "tensorboard"
NAME_SUFFIX: Final = "-tensorboard"
#: The event of a TensorBoard whose pod the API server refuses.
REFUSED_POD: Final = "FailedCreateTensorBoardPod"
DEFAULT_TTL_SECONDS: Final = 3600
#: What a TensorBoard asks for unless `resources` says otherwise: it is idle between page
#: loads, and its memory grows with the runs and tags it holds.
DEFAULT_RESOURCES: Final[Mapping[str, Any]] = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"memory": "2Gi"},
}
#: What Pod Security "restricted" asks of a pod and of each container.
POD_SECURITY: Final[Mapping[str, Any]] = {
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY: Final[Mapping[str, Any]] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
#: What the TensorBoard takes of the job's pods' securityContext: who they run as, so that
#: it may read what they wrote.
IDENTITY_FIELDS: Final = ("runAsUser", "runAsGroup", "fsGroup", "supplementalGroups")
#: The job variables logDir may name, as the job's args do (render.job_environment).
JOB_VARIABLES: Final = ("TFJOB_NAME", "TFJOB_NAMESPACE", "TFJOB_UID")
FIELDS: Final = ("logDir", "ttlSecondsAfterFinished", "image", "resources")


class InvalidBoard(ValueError):
    """The TensorBoard the job asks for cannot run; the message says why."""


@dataclass(frozen=True)
class BoardSpec:
    log_dir: str
    ttl_seconds_after_finished: int = DEFAULT_TTL_SECONDS
    image: str | None = None
    resources: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class BoardObservation:
    """A Deployment, Service or NetworkPolicy of a job's TensorBoard, as its watch shows
    it; a Deployment's `refused` is why its ReplicaSet could not create its pod (the
    ReplicaFailure condition the Deployment takes from it)."""

    kind: str
    name: str
    uid: str
    owner_uid: str | None
    digest: str = ""
    available: bool = False
    refused: str | None = None


@dataclass
class BoardPlan:
    #: The job's `status.tensorboard`; None: the field is absent.
    status: dict[str, Any] | None = None
    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[BoardObservation] = field(default_factory=list)
    #: Why `delete` goes, for the event the controller records once it deleted.
    why: str = ""
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None


def board_name(job_name: str) -> str:
    return f"{job_name}{NAME_SUFFIX}"


def board_spec(job: JobView) -> BoardSpec | None:
    """The TensorBoard `job` asks for: its spec field (tfjob.dev), else its annotation."""
    raw: Any = job.spec.get("tensorboard") if job.ref.api == TFJOB_DEV else None
    where = "spec.tensorboard"
    if raw is None:
        text = job.annotations.get(TENSORBOARD_ANNOTATION)
        if text is None:
            return None
        where = f"annotation {TENSORBOARD_ANNOTATION}"
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidBoard(f"{where} is not JSON: {error}") from None
    if not isinstance(raw, Mapping):
        raise InvalidBoard(f'{where} must be an object, e.g. {{"logDir": "/data/logs"}}')
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise InvalidBoard(f"{where}: unknown fields {unknown}; known: {list(FIELDS)}")
    log_dir = raw.get("logDir")
    if not isinstance(log_dir, str) or not log_dir.strip():
        raise InvalidBoard(f"{where}.logDir is required: the directory the job writes logs to")
    if "://" not in log_dir and not log_dir.startswith("/"):
        raise InvalidBoard(f"{where}.logDir must be an absolute path or a URL, not {log_dir!r}")
    ttl = raw.get("ttlSecondsAfterFinished", DEFAULT_TTL_SECONDS)
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
        raise InvalidBoard(f"{where}.ttlSecondsAfterFinished must be an integer >= 0")
    image = raw.get("image")
    if image is not None and (not isinstance(image, str) or not image):
        raise InvalidBoard(f"{where}.image must be an image reference")
    resources = raw.get("resources")
    if resources is not None and not isinstance(resources, Mapping):
        raise InvalidBoard(f"{where}.resources must be an object (requests, limits)")
    return BoardSpec(log_dir, ttl, image, resources)


def plan_board(
    job: JobView,
    spec: JobSpec | None,
    status: Mapping[str, Any],
    observed: Sequence[BoardObservation],
    now: datetime,
    default_image: str | None,
    cluster_domain: str | None = None,
) -> BoardPlan:
    """What to do with the job's TensorBoard; `status` is the job's status as the TFJob's
    own decision leaves it, `spec` its parsed spec (None when invalid)."""
    plan = BoardPlan()
    if job.deleting:
        return plan
    mine = [o for o in observed if o.owner_uid == job.ref.uid]
    previous = job.status.get("tensorboard")
    try:
        board = board_spec(job)
    except InvalidBoard as error:
        return _refused(plan, mine, str(error), previous)
    if board is None or spec is None:
        why = "the TFJob's spec is invalid" if board else "the TFJob no longer asks for one"
        _remove(plan, mine, why)
        return plan
    if not (status.get("startTime") or status.get("completionTime")):
        # It starts with the job; one that runs already (the job was suspended) stays.
        if mine and isinstance(previous, Mapping):
            plan.status = dict(previous)
        return plan
    remove_at = None
    if cond.is_finished(status.get("conditions") or []) and status.get("completionTime"):
        ttl = timedelta(seconds=board.ttl_seconds_after_finished)
        remove_at = from_rfc3339(status["completionTime"]) + ttl
        if now >= remove_at:
            after = f"{board.ttl_seconds_after_finished}s after the job finished"
            _remove(plan, mine, f"ttlSecondsAfterFinished: {after}")
            return plan
        plan.requeue_after = (remove_at - now).total_seconds()
    image = board.image or default_image
    if image is None:
        message = "no image: set spec.tensorboard.image, or the operator's --tensorboard-image"
        return _refused(plan, mine, message, previous)
    try:
        wanted = render_board(job.ref, spec, board, image)
    except InvalidBoard as error:
        return _refused(plan, mine, str(error), previous)
    by_kind = {o.kind: o for o in mine}
    for body in wanted:
        have = by_kind.get(body["kind"])
        if have is None:
            plan.create.append(body)
        elif have.digest != body["metadata"]["labels"].get(LABEL_TENSORBOARD_DIGEST, ""):
            plan.delete.append(have)
            plan.why = "spec.tensorboard changed: it is created again as now asked"
    deployment = by_kind.get("Deployment")
    name = board_name(job.ref.name)
    host = f"{name}.{job.ref.namespace}.svc" + (f".{cluster_domain}" if cluster_domain else "")
    plan.status = {
        "name": name,
        "url": f"http://{host}:{PORT}/",
        "logDir": board.log_dir,
        "ready": bool(deployment and deployment.available and not plan.delete),
    }
    if remove_at is not None:
        plan.status["removeAfter"] = to_rfc3339(remove_at)
    if deployment is not None and deployment.refused and not plan.delete:
        # The message follows the ReplicaSet's latest try (each names a new pod); the event
        # marks the transition only.
        message = f"the API server refused the TensorBoard's pod: {deployment.refused}"
        plan.status["message"] = message
        if not isinstance(previous, Mapping) or "message" not in previous:
            plan.events.append(Event(WARNING, REFUSED_POD, message, series=name))
    return plan


def _refused(
    plan: BoardPlan, mine: Sequence[BoardObservation], message: str, previous: object
) -> BoardPlan:
    _remove(plan, mine, message)
    plan.status = {"message": message}
    if not isinstance(previous, Mapping) or previous.get("message") != message:
        plan.events.append(Event(WARNING, "InvalidTensorBoard", message))
    return plan


def _remove(plan: BoardPlan, mine: Sequence[BoardObservation], why: str) -> None:
    plan.delete.extend(mine)
    plan.why = why


def render_board(
    job: JobRef, spec: JobSpec, board: BoardSpec, image: str
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The TensorBoard's Deployment, Service and NetworkPolicy; raises InvalidBoard when
    logDir lies on no volume of the job's leading replica."""
    name = board_name(job.name)
    leader = spec.leader() or next(spec.replicas(), None)
    if leader is None:
        raise InvalidBoard("the TFJob has no replica whose volumes the TensorBoard could read")
    pod_spec: Mapping[str, Any] = spec.replica_specs[leader.type].template.get("spec") or {}
    mounts, volumes = _volumes_of(pod_spec, board.log_dir, leader.key)
    selector = {LABEL_TENSORBOARD_OF: job.name}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": ["tensorboard"],
        "args": [f"--logdir={board.log_dir}", "--host=0.0.0.0", f"--port={PORT}"],
        "env": [
            {"name": variable, "value": value}
            for variable, value in zip(
                JOB_VARIABLES, (job.name, job.namespace, job.uid), strict=True
            )
        ],
        "ports": [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/", "port": PORT_NAME}, "periodSeconds": 2},
        "resources": dict(board.resources or DEFAULT_RESOURCES),
        "volumeMounts": mounts,
        "securityContext": dict(CONTAINER_SECURITY),
    }
    template_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": _pod_security(pod_spec.get("securityContext") or {}),
    }
    # As the job's pods run: the same registries and taints.
    for key in ("imagePullSecrets", "tolerations"):
        if pod_spec.get(key):
            template_spec[key] = pod_spec[key]
    deployment_spec: dict[str, Any] = {
        "replicas": 1,
        # A ReadWriteOnce claim's volume holds one node: no second pod beside the old one.
        "strategy": {"type": "Recreate"},
        "selector": {"matchLabels": selector},
        "template": {"metadata": {"labels": selector}, "spec": template_spec},
    }
    digest = hashlib.sha256(json.dumps(deployment_spec, sort_keys=True).encode()).hexdigest()
    metadata = {
        "name": name,
        "namespace": job.namespace,
        "labels": {**selector, LABEL_TENSORBOARD_DIGEST: digest[:16]},
        "ownerReferences": [job.owner_reference()],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": deployment_spec,
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "selector": selector,
            "ports": [
                {"name": PORT_NAME, "port": PORT, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }
    # Pods of the job's namespace, on TensorBoard's port; nothing else (see the module).
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {}}], "ports": [{"port": PORT, "protocol": "TCP"}]}
            ],
        },
    }
    return deployment, service, policy


def _pod_security(job_pods: Mapping[str, Any]) -> dict[str, Any]:
    """What restricted requires, as the job's pods' user unless that is root (it only reads
    what they wrote; root may read anything, so the image's own user reads it too)."""
    identity = {k: job_pods[k] for k in IDENTITY_FIELDS if k in job_pods}
    if identity.get("runAsUser") == 0:
        del identity["runAsUser"]
    return {**identity, **POD_SECURITY}


def _volumes_of(
    pod_spec: Mapping[str, Any], log_dir: str, replica: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The mount of the training container that holds `log_dir` and its volume, both
    read-only; none for a URL."""
    if "://" in log_dir:
        return [], []
    containers = pod_spec.get("containers") or []
    main = next((c for c in containers if c.get("name") == CONTAINER_NAME), None)
    main = main or (containers[0] if containers else {})
    path = posixpath.normpath(log_dir)
    holding = [
        m
        for m in main.get("volumeMounts") or []
        if path == posixpath.normpath(m["mountPath"])
        or path.startswith(posixpath.normpath(m["mountPath"]).rstrip("/") + "/")
    ]
    if not holding:
        raise InvalidBoard(
            f"logDir {log_dir} is on no volume of the {replica} replica's "
            f"{main.get('name', CONTAINER_NAME)} container: mount a volume the job writes its "
            "logs to (a PersistentVolumeClaim) at or above that path"
        )
    mount = max(holding, key=lambda m: len(m["mountPath"]))
    volume = next(
        (v for v in pod_spec.get("volumes") or [] if v.get("name") == mount["name"]), None
    )
    if volume is None:
        raise InvalidBoard(f"the {replica} replica mounts volume {mount['name']}, which it lacks")
    volume = dict(volume)
    if "persistentVolumeClaim" in volume:
        volume["persistentVolumeClaim"] = {**volume["persistentVolumeClaim"], "readOnly": True}
    kept = ("name", "mountPath", "subPath", "subPathExpr")
    return [{**{k: mount[k] for k in kept if k in mount}, "readOnly": True}], [volume]


def observe_board(kind: str, body: Mapping[str, Any]) -> BoardObservation:
    """`kind` is the watch's: the items of a list do not say theirs."""
    metadata = body.get("metadata") or {}
    status = body.get("status") or {}
    failure = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == "ReplicaFailure" and c.get("status") == "True"
        ),
        None,
    )
    return BoardObservation(
        kind=kind,
        name=metadata.get("name", ""),
        uid=metadata.get("uid", ""),
        owner_uid=controller_uid(metadata),
        digest=(metadata.get("labels") or {}).get(LABEL_TENSORBOARD_DIGEST, ""),
        available=int(status.get("availableReplicas") or 0) > 0,
        refused=str(failure.get("message") or failure.get("reason")) if failure else None,
    )


#: The kinds of a TensorBoard's children: their resource, where they are served.
KINDS: Final = (
    ("Deployment", "deployments", APPS),
    ("Service", "services", "/api/v1"),
    ("NetworkPolicy", "networkpolicies", NETWORKING),
)


class TensorBoard(Integration[tuple[BoardObservation, ...], BoardPlan]):
    """The job's TensorBoard, beside it (the module's doc)."""

    name = "tensorboard"
    stage = Stage.BESIDE
    status_field = "tensorboard"

    def __init__(self, default_image: str | None = None, cluster_domain: str | None = None):
        """`default_image` runs the TensorBoards of jobs that name no image."""
        self.default_image = default_image
        self.cluster_domain = cluster_domain

    def watches(self) -> Sequence[Watched]:
        return tuple(
            Watched(
                Resource(plural, group_path, LABEL_TENSORBOARD_OF),
                child_reader(functools.partial(observe_board, kind), LABEL_TENSORBOARD_OF),
            )
            for kind, plural, group_path in KINDS
        )

    async def observe(
        self, job: JobView, records: Sequence[Any], reads: Any, now: float
    ) -> tuple[BoardObservation, ...]:
        return tuple(records)

    def preview(self, job: JobView, spec: JobSpec) -> Sequence[dict[str, Any]]:
        try:
            board = board_spec(job)
            if board is None:
                return ()
            image = board.image or self.default_image or published.trainer_image()
            return render_board(job.ref, spec, board, image)
        except InvalidBoard as error:
            raise InvalidSpec([str(error)]) from None

    def settle(
        self,
        job: JobView,
        spec: JobSpec | None,
        observed: tuple[BoardObservation, ...],
        outcome: Outcome,
        gate: Any,
    ) -> Settled[BoardPlan]:
        board = plan_board(
            job,
            spec,
            outcome.status,
            observed,
            outcome.now,
            self.default_image,
            self.cluster_domain,
        )
        return Settled(board, board.status, tuple(board.events), board.requeue_after)

    async def apply(self, job: JobView, writes: BoardPlan, host: Host) -> float | None:
        """Deletions, then creations. A create the API server refuses (no role for
        Deployments, a quota) is an event, not a failed reconcile: the job runs on, and the
        next reconcile tries again."""
        api: ObjectWrites = host.api
        namespace = job.ref.namespace
        where = {kind: (group_path, plural) for kind, plural, group_path in KINDS}
        for child in writes.delete:
            host.forget_create(child.kind, child.name)
            deleted = await api.delete_object(namespace, *where[child.kind], child.name, child.uid)
            if deleted and child.kind == "Deployment":
                message = f"Removed TensorBoard {child.name}: {writes.why}"
                host.record(Event(NORMAL, "TensorBoardRemoved", message))
        for body in writes.create:
            kind, name = body["kind"], body["metadata"]["name"]
            if not host.creating(kind, name):
                continue
            try:
                created = await api.create_object(namespace, *where[kind], body)
            except ApiError as error:
                host.forget_create(kind, name)
                if error.namespace_terminating:
                    return None
                message = f"could not create the TensorBoard's {kind} {name}: {error}"
                host.record(Event(WARNING, "FailedCreateTensorBoard", message))
                if not error.refused:
                    raise
                logger.warning("tfjob %s/%s: %s", namespace, job.ref.name, message)
                continue
            if created and kind == "Deployment" and writes.status is not None:
                message = (
                    f"Created TensorBoard {name}: it reads {writes.status['logDir']} and serves "
                    f"at {writes.status['url']} (`tfjob-operator tensorboard {job.ref.name}` "
                    "forwards a local port to it)"
                )
                host.record(Event(NORMAL, "TensorBoardCreated", message))
        return None
