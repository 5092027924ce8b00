"""TF_CONFIG, the cluster description every TensorFlow task reads at startup.

Two choices differ from Kubeflow's on purpose (see the shared TensorFlow runtime facts):
`Master` renders as `chief` (TensorFlow 2 has no master task), and the evaluator appears only
in its own TF_CONFIG, because a ParameterServerStrategy coordinator that sees an evaluator in
its cluster tries to connect to it and hangs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .api import CONTAINER_NAME, DEFAULT_PORT, PORT_NAME, ReplicaType
from .spec import JobSpec, Replica

ClusterSpec = dict[str, list[str]]
#: Linux's limit on one environment string, `TF_CONFIG=<value>` and its terminating NUL
#: (MAX_ARG_STRLEN: 32 pages of 4 KiB): a container whose TF_CONFIG is longer cannot start,
#: its exec fails with "argument list too long".
MAX_ENVIRONMENT_STRING: Final = 128 * 1024
ENVIRONMENT_NAME: Final = "TF_CONFIG"


def encode(config: Mapping[str, Any]) -> str:
    """TF_CONFIG's value as the pods get it."""
    return json.dumps(config, separators=(",", ":"))


def tensorflow_port(template: Mapping[str, Any]) -> int:
    """The port of the `tensorflow` container named `tfjob-port`, else the default 2222."""
    for container in (template.get("spec") or {}).get("containers") or []:
        if container.get("name") != CONTAINER_NAME:
            continue
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME and port.get("containerPort"):
                return int(port["containerPort"])
    return DEFAULT_PORT


def replica_address(
    job_name: str, namespace: str, replica: Replica, port: int, cluster_domain: str | None
) -> str:
    """`<job>-<type>-<i>.<ns>.svc[.<domain>]:<port>`, resolved through the replica's Service."""
    host = f"{replica.name(job_name)}.{namespace}.svc"
    if cluster_domain:
        host = f"{host}.{cluster_domain}"
    return f"{host}:{port}"


def training_cluster(
    job_name: str, namespace: str, spec: JobSpec, cluster_domain: str | None
) -> ClusterSpec:
    """The cluster seen by chief, workers and ps: every type but the evaluator."""
    cluster: ClusterSpec = {}
    for replica_spec in spec.replica_specs.values():
        if replica_spec.type is ReplicaType.EVALUATOR or replica_spec.replicas == 0:
            continue
        port = tensorflow_port(replica_spec.template)
        cluster[replica_spec.type.tf_task_type] = [
            replica_address(
                job_name, namespace, Replica(replica_spec.type, i), port, cluster_domain
            )
            for i in range(replica_spec.replicas)
        ]
    return cluster


def tf_config(
    job_name: str,
    namespace: str,
    spec: JobSpec,
    replica: Replica,
    cluster_domain: str | None,
) -> dict[str, Any] | None:
    """TF_CONFIG for one replica, or None when the job has a single replica in total."""
    if spec.total_replicas <= 1:
        return None
    cluster = training_cluster(job_name, namespace, spec, cluster_domain)
    if replica.type is ReplicaType.EVALUATOR:
        port = tensorflow_port(spec.replica_specs[replica.type].template)
        cluster["evaluator"] = [replica_address(job_name, namespace, replica, port, cluster_domain)]
    return {
        "cluster": cluster,
        "task": {"type": replica.type.tf_task_type, "index": replica.index},
        "environment": "cloud",
    }


def cluster_digest(config: Mapping[str, Any] | None) -> str:
    """A short digest of a TF_CONFIG's cluster: pods rendered for another cluster are stale."""
    cluster = config["cluster"] if config else {}
    encoded = json.dumps(cluster, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


@dataclass(frozen=True)
class JobConfigs:
    """TF_CONFIG and its cluster digest for every replica of a job, by replica key, and
    the length of the longest environment string it makes (`TF_CONFIG=<value>`)."""

    configs: dict[str, dict[str, Any] | None]
    digests: dict[str, str]
    longest: int = 0

    def oversized(self) -> str | None:
        """Why no pod of the job could start with its TF_CONFIG, or None if they can."""
        if self.longest <= MAX_ENVIRONMENT_STRING:
            return None
        return (
            f"{ENVIRONMENT_NAME} would be {self.longest} bytes, more than the "
            f"{MAX_ENVIRONMENT_STRING} bytes Linux allows one environment variable: it names "
            "every replica's address, so no pod could start. Use fewer replicas, or a shorter "
            "job name or namespace"
        )


def job_configs(
    job_name: str, namespace: str, spec: JobSpec, cluster_domain: str | None
) -> JobConfigs:
    """What `tf_config` and `cluster_digest` give for each replica, rendering the training
    cluster and its digest once instead of once per replica."""
    configs: dict[str, dict[str, Any] | None] = {}
    digests: dict[str, str] = {}
    cluster = training_cluster(job_name, namespace, spec, cluster_domain)
    training_digest = cluster_digest({"cluster": cluster})
    last: dict[ReplicaType, dict[str, Any] | None] = {}
    for replica in spec.replicas():
        if spec.total_replicas <= 1 or replica.type is ReplicaType.EVALUATOR:
            config = tf_config(job_name, namespace, spec, replica, cluster_domain)
            configs[replica.key], digests[replica.key] = config, cluster_digest(config)
        else:
            task = {"type": replica.type.tf_task_type, "index": replica.index}
            configs[replica.key] = {"cluster": cluster, "task": task, "environment": "cloud"}
            digests[replica.key] = training_digest
        last[replica.type] = configs[replica.key]
    # The last replica of each type has the longest index, hence the longest TF_CONFIG.
    longest = max(
        (len(f"{ENVIRONMENT_NAME}={encode(c)}") + 1 for c in last.values() if c is not None),
        default=0,
    )
    return JobConfigs(configs, digests, longest)
