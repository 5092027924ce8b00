"""Pods and headless Services of a TFJob, built as plain data from the spec."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .api import (
    CONTAINER_NAME,
    GPU_RESOURCE,
    LABEL_CLUSTER_DIGEST,
    LABEL_GENERATION,
    LABEL_JOB_NAME,
    LABEL_JOB_ROLE,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    PORT_NAME,
    JobRef,
    RestartPolicy,
)
from .spec import JobSpec, Replica
from .tfconfig import ENVIRONMENT_NAME, JobConfigs, encode, job_configs, tensorflow_port


def selector_labels(job_name: str, replica: Replica) -> dict[str, str]:
    """Labels that select exactly one replica's pod (the Service's selector)."""
    return {
        LABEL_JOB_NAME: job_name,
        LABEL_REPLICA_TYPE: replica.type.label,
        LABEL_REPLICA_INDEX: str(replica.index),
    }


def replica_labels(job: JobRef, spec: JobSpec, replica: Replica) -> dict[str, str]:
    leader = replica == spec.leader()
    labels = job.api.child_labels(job.name, replica.type.label, replica.index, leader)
    labels.update(selector_labels(job.name, replica))
    labels.update(job.owned_labels())
    if leader:
        labels[LABEL_JOB_ROLE] = "chief"
    return labels


def pod_restart_policy(policy: RestartPolicy) -> str:
    """ExitCode is decided by the controller, so the kubelet must not restart the container."""
    return "Never" if policy is RestartPolicy.EXIT_CODE else policy.value


def render_pod(
    job: JobRef,
    spec: JobSpec,
    replica: Replica,
    generation: int,
    cluster_domain: str | None = None,
    configs: JobConfigs | None = None,
) -> dict[str, Any]:
    """The replica's pod; `configs` are the job's TF_CONFIGs if the caller has them. What an
    integration adds to it (a gang's scheduler, a queue's placement) its gate adds once
    open (integrations/base.py: Gate.dress)."""
    replica_spec = spec.replica_specs[replica.type]
    template = copy.deepcopy(dict(replica_spec.template))
    metadata = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    if configs is None:
        configs = job_configs(job.name, job.namespace, spec, cluster_domain)
    config = configs.configs[replica.key]
    labels = {
        **(metadata.get("labels") or {}),
        **replica_labels(job, spec, replica),
        LABEL_GENERATION: str(generation),
        LABEL_CLUSTER_DIGEST: configs.digests[replica.key],
    }
    pod_metadata: dict[str, Any] = {
        "name": replica.name(job.name),
        "namespace": job.namespace,
        "labels": labels,
        "ownerReferences": [job.owner_reference()],
    }
    if metadata.get("annotations"):
        pod_metadata["annotations"] = metadata["annotations"]
    pod_spec["restartPolicy"] = pod_restart_policy(replica_spec.restart_policy)
    port = tensorflow_port(replica_spec.template)
    for container in pod_spec.get("containers") or []:
        if container.get("name") == CONTAINER_NAME:
            identity = job_environment(job, replica) | gpu_environment(container)
            _prepare_tensorflow_container(container, config, port, identity)
    if _requests_gpu(pod_spec) and not _tolerates_gpu(pod_spec):
        pod_spec.setdefault("tolerations", []).append(
            {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
        )
    priority_class = spec.run_policy.scheduling.priority_class
    if priority_class and not pod_spec.get("priorityClassName"):
        pod_spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata, "spec": pod_spec}


def render_service(job: JobRef, spec: JobSpec, replica: Replica) -> dict[str, Any]:
    """A headless Service per replica, so `<job>-<type>-<i>.<ns>.svc` resolves to its pod.

    publishNotReadyAddresses: peers must resolve each other as soon as the pod has an IP;
    a readiness probe on the tensorflow container would otherwise keep the address out of
    DNS until training starts, and training waits for the address.
    """
    port = tensorflow_port(spec.replica_specs[replica.type].template)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": replica.name(job.name),
            "namespace": job.namespace,
            "labels": replica_labels(job, spec, replica),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(job.name, replica),
            "ports": [{"name": PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}],
            "publishNotReadyAddresses": True,
        },
    }


def job_environment(job: JobRef, replica: Replica) -> dict[str, str]:
    """Variables that identify the job and replica, usable as `$(TFJOB_UID)` in args.

    The uid tells one run of a job from the next one of the same name, e.g. to keep
    their checkpoint directories apart.
    """
    return {
        "TFJOB_NAME": job.name,
        "TFJOB_NAMESPACE": job.namespace,
        "TFJOB_UID": job.uid,
        "TFJOB_REPLICA_TYPE": replica.type.label,
        "TFJOB_REPLICA_INDEX": str(replica.index),
    }


def gpu_environment(container: Mapping[str, Any]) -> dict[str, str]:
    """TFJOB_GPUS: the container's nvidia.com/gpu limit, when it has one. The trainer
    fails at start when TensorFlow sees fewer GPUs than that (a CPU-only image, a node
    whose driver the container does not see) instead of training on the CPU unnoticed;
    the limit itself is not readable from inside the container."""
    limit = ((container.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE)
    return {"TFJOB_GPUS": str(limit)} if limit is not None else {}


def _prepare_tensorflow_container(
    container: dict[str, Any],
    config: Mapping[str, Any] | None,
    port: int,
    identity: Mapping[str, str],
) -> None:
    """Adds TF_CONFIG (replacing any the template set) and the identity variables.

    The identity variables come first so that the template's own variables may refer to
    them with `$(NAME)` and may override them.
    """
    own = [e for e in container.get("env") or [] if e.get("name") != ENVIRONMENT_NAME]
    names = {e.get("name") for e in own}
    env = [{"name": k, "value": v} for k, v in identity.items() if k not in names]
    env += own
    if config is not None:
        env.append({"name": ENVIRONMENT_NAME, "value": encode(config)})
    container["env"] = env
    ports = container.setdefault("ports", [])
    if not any(p.get("name") == PORT_NAME for p in ports):
        ports.append({"name": PORT_NAME, "containerPort": port, "protocol": "TCP"})


def _requests_gpu(pod_spec: Mapping[str, Any]) -> bool:
    for container in [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            if GPU_RESOURCE in (resources.get(section) or {}):
                return True
    return False


def _tolerates_gpu(pod_spec: Mapping[str, Any]) -> bool:
    return any(
        t.get("key") == GPU_RESOURCE or (not t.get("key") and t.get("operator") == "Exists")
        for t in pod_spec.get("tolerations") or []
    )
