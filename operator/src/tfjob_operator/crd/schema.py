"""The TFJob CustomResourceDefinitions (tfjobs.tfjob.dev, tfjobs.kubeflow.org), built as data.

The spec has the shape of Kubeflow's kubeflow.org/v1 TFJob, so a Kubeflow YAML works after
changing its apiVersion, or unchanged under kubeflow.org (api.py); the fields this project
does not implement are declared with Kubeflow's types and rejected by CEL rules with a
message saying so. Both groups get the same schema and rules, except that tfjob.dev is
strict: it also refuses at apply what could not run (pod templates the Pod API would
refuse, a gang larger than the job). kubeflow.org accepts whatever Kubeflow's own
validation accepts, so that a YAML or an SDK call that worked with Kubeflow works here; the
operator reports in the job's conditions why such a job does not run.
"""

from __future__ import annotations

import copy
from typing import Any

from ..api import (
    CONTAINER_NAME,
    DEFAULT_PORT,
    KIND,
    MANAGED_BY,
    MULTIKUEUE,
    PLURAL,
    PORT_NAME,
    TENSORBOARD_ANNOTATION,
    TFJOB_DEV,
    VERSION,
    CleanPodPolicy,
    ConditionType,
    RestartPolicy,
    SuccessPolicy,
    TFJobApi,
)
from ..integrations import tensorboard
from ..spec import MAX_REPLICAS
from . import rules
from .structural import QUANTITY_PATTERN, Schema, int_or_string

RESTART_POLICIES = tuple(p.value for p in RestartPolicy)
CLEAN_POD_POLICIES = tuple(p.value for p in CleanPodPolicy)
SUCCESS_POLICIES = tuple(p.value for p in SuccessPolicy)
JOB_STATES = tuple(c.value for c in ConditionType)
CONDITION_STATUSES = ("True", "False", "Unknown")


def _integer(fmt: str, description: str, **limits: int) -> Schema:
    return {"type": "integer", "format": fmt, "description": description, **limits}


def _string(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def _time(description: str) -> Schema:
    return {"type": "string", "format": "date-time", "description": description}


#: Port numbers as the Pod API takes them (hostPort 0 means no host port).
PORT_RANGES = {"containerPort": (1, 65535), "hostPort": (0, 65535)}
#: Bounds that keep the requests-within-limits rule inside the API server's CEL cost budget
#: (an unbounded map of unbounded quantities has no cost it can estimate): far above what a
#: container asks for.
MAX_RESOURCES_PER_CONTAINER = 32
MAX_QUANTITY_LENGTH = 64
#: Likewise for the rules across a template's containers and volumes (the cost of matching
#: every mount against every volume grows with the product of the three).
MAX_CONTAINERS = 16
MAX_VOLUMES = 64
MAX_VOLUME_MOUNTS = 32
#: A container's or a volume's name is a DNS label (the Pod API's rule).
MAX_NAME_LENGTH = 63


def strict_pod_template(pod_template: Schema) -> Schema:
    """tfjob.dev's pod template: what the Pod API would refuse when the operator creates the
    pod, and the CRD can check, is refused at `kubectl apply` instead, naming the field.

    kubeflow.org keeps the template's schema as it is: a YAML Kubeflow accepted is accepted
    there, and a pod the API server refuses is reported in the job's conditions.
    """
    template = copy.deepcopy(pod_template)
    spec = template["properties"]["spec"]
    spec["x-kubernetes-validations"] = rules.pod_spec_rules()
    volumes = spec["properties"]["volumes"]
    volumes["maxItems"] = MAX_VOLUMES
    volumes["items"]["properties"]["name"]["maxLength"] = MAX_NAME_LENGTH
    for group in ("containers", "initContainers"):
        spec["properties"][group]["maxItems"] = MAX_CONTAINERS
        fields = spec["properties"][group]["items"]["properties"]
        fields["name"]["maxLength"] = MAX_NAME_LENGTH
        fields["volumeMounts"]["maxItems"] = MAX_VOLUME_MOUNTS
        ports = fields["ports"]["items"]["properties"]
        for port, (low, high) in PORT_RANGES.items():
            ports[port].update(minimum=low, maximum=high)
        resources = fields["resources"]
        for amounts in ("requests", "limits"):
            resources["properties"][amounts].update(maxProperties=MAX_RESOURCES_PER_CONTAINER)
            resources["properties"][amounts]["additionalProperties"].update(
                maxLength=MAX_QUANTITY_LENGTH
            )
        resources["x-kubernetes-validations"] = rules.resources_rules()
    return template


def replica_spec_schema(pod_template: Schema) -> Schema:
    template = dict(pod_template)
    template["description"] = (
        "The pod template of this replica type: a core/v1 PodTemplateSpec, checked against "
        "its schema (unknown fields and wrong types are rejected). It must have a container "
        f"named '{CONTAINER_NAME}': the operator adds TF_CONFIG and the port '{PORT_NAME}' "
        f"({DEFAULT_PORT} "
        "unless the template names one) to it."
    )
    return {
        "type": "object",
        "description": "How many pods of one replica type to run, and how.",
        "required": ["template"],
        "properties": {
            "replicas": _integer(
                "int32",
                "Number of pods of this type; each gets its own headless Service named like "
                f"the pod, <job>-<type lowercase>-<index>. At most {MAX_REPLICAS}, and as many "
                "for all types together: every pod's TF_CONFIG names every replica.",
                minimum=0,
                maximum=MAX_REPLICAS,
                default=1,
            ),
            "restartPolicy": _string(
                "What happens when a pod of this type fails. Always and OnFailure restart "
                "it, Never fails the job, ExitCode restarts it only for retryable exit codes "
                "(128 and above, such as 137 and 143, and 42) and fails the job for 1-127. "
                "Pods evicted, preempted or deleted by the node are always restarted. "
                "Restarts count against runPolicy.backoffLimit.",
                enum=list(RESTART_POLICIES),
                default="Never",
            ),
            "template": template,
        },
        "x-kubernetes-validations": rules.replica_spec_rules(),
    }


def scheduling_policy_schema() -> Schema:
    gang = (
        " A gang option: the job needs a gang scheduler (its templates' schedulerName, or the "
        "operator's --gang-scheduler-name)."
    )
    return {
        "type": "object",
        "description": (
            "Scheduling of the job's pods, Kubeflow's shape. With a gang scheduler "
            "(scheduler-plugins' Coscheduling or Volcano) the operator creates a PodGroup, "
            "named after the job, before its pods, so that they are placed together or not at "
            "all."
        ),
        "properties": {
            "priorityClass": _string(
                "Name of a PriorityClass; it becomes the priorityClassName of every pod of "
                "the job (and of its Volcano PodGroup).",
                maxLength=253,
            ),
            "minAvailable": _integer(
                "int32",
                "How many of the job's pods must be placed together. Unset: all of them." + gang,
                minimum=1,
            ),
            "queue": _string(
                "The Volcano Queue of the job's PodGroup (scheduler-plugins has no queues; "
                "Kueue's LocalQueue is the label kueue.x-k8s.io/queue-name)." + gang,
                minLength=1,
            ),
            "minResources": {
                "type": "object",
                "description": (
                    "Resources the cluster (or Volcano's queue) must have free before the gang "
                    "is tried. Unset, for a Volcano gang of all the job's pods: what they "
                    "request together." + gang
                ),
                "additionalProperties": int_or_string(pattern=QUANTITY_PATTERN),
            },
            "scheduleTimeoutSeconds": _integer(
                "int32",
                "How long scheduler-plugins waits for the whole gang before it gives up on the "
                "pods placed so far and tries again (Volcano has no such timeout)." + gang,
                minimum=1,
            ),
        },
    }


def run_policy_schema() -> Schema:
    return {
        "type": "object",
        "description": "Policies for the whole job: cleanup, deadlines, retries, suspension.",
        "default": {},
        "properties": {
            "cleanPodPolicy": _string(
                "Which pods to delete when the job finishes: All, Running (pods still "
                "running or pending, e.g. parameter servers, which never exit) or None.",
                enum=list(CLEAN_POD_POLICIES),
                default="Running",
            ),
            "ttlSecondsAfterFinished": _integer(
                "int32",
                "Seconds after the job finished (succeeded or failed) before the TFJob "
                "itself is deleted, with its pods and services. Unset: never.",
                minimum=0,
            ),
            "activeDeadlineSeconds": _integer(
                "int64",
                "Seconds after startTime after which the job is failed and its running pods "
                "are stopped, whatever else happens. Unset: no deadline.",
                minimum=1,
            ),
            "backoffLimit": _integer(
                "int32",
                "Number of restarts allowed before the job is marked failed. A group restart "
                "(all chief and worker pods together) counts once. Unset: no limit.",
                minimum=0,
            ),
            "suspend": {
                "type": "boolean",
                "description": (
                    "True deletes the job's pods and services and marks it Suspended; false "
                    "again recreates them (startTime is reset)."
                ),
                "default": False,
            },
            "schedulingPolicy": scheduling_policy_schema(),
            "managedBy": _string(
                f"The controller that reconciles this job: unset or '{MANAGED_BY}' for "
                "this operator. Any other value (e.g. 'kubeflow.org/training-operator', "
                f"'{MULTIKUEUE}') leaves the job to that controller. Immutable. Kubeflow's "
                "field: spec.managedBy, the field Kubernetes' Job and Kueue read, says the same.",
                maxLength=63,
                **{"x-kubernetes-validations": rules.managed_by_rules()},
            ),
        },
        "x-kubernetes-validations": rules.run_policy_rules(),
    }


def tensorboard_schema() -> Schema:
    """spec.tensorboard (tfjob.dev only; kubeflow.org jobs use the annotation): see
    integrations/tensorboard.py, which checks the same when it reads the annotation."""
    quantities = {
        "type": "object",
        "additionalProperties": int_or_string(pattern=QUANTITY_PATTERN),
    }
    return {
        "type": "object",
        "description": (
            "A TensorBoard for this job: a Deployment and a Service the operator runs from "
            "the job's start until ttlSecondsAfterFinished after it ends; status.tensorboard "
            "gives its address. `tfjob-operator tensorboard NAME` forwards a local port to it."
        ),
        "required": ["logDir"],
        "properties": {
            "logDir": _string(
                "The directory the job writes TensorBoard logs to, as its training "
                "container sees it (tfjob-train --log-dir). The TensorBoard mounts the volume "
                "holding it read-only at the same path; $(TFJOB_NAME), $(TFJOB_NAMESPACE) "
                "and $(TFJOB_UID) expand as in args. A URL (gs://...) needs no volume.",
                minLength=1,
                **{"x-kubernetes-validations": rules.log_dir_rules()},
            ),
            "ttlSecondsAfterFinished": _integer(
                "int32",
                f"Seconds after the job finished before the TensorBoard is removed "
                f"(default {tensorboard.DEFAULT_TTL_SECONDS}).",
                minimum=0,
            ),
            "image": _string(
                "The image to run `tensorboard` from; unset: the operator's "
                "--tensorboard-image (the chart's tensorboard.image, the release's trainer).",
                minLength=1,
            ),
            "resources": {
                "type": "object",
                "description": (
                    "The TensorBoard container's requests and limits (default: 100m CPU, "
                    "256Mi memory requested, 2Gi memory limit)."
                ),
                "properties": {
                    "requests": {**quantities, "description": "Resources requested."},
                    "limits": {**quantities, "description": "Resource limits."},
                },
            },
        },
    }


def spec_schema(pod_template: Schema, strict: bool) -> Schema:
    """`strict` for tfjob.dev: what cannot run is refused at apply (see the module)."""
    return {
        "type": "object",
        "description": "The desired TensorFlow cluster and the policies that run it.",
        "required": ["tfReplicaSpecs"],
        "x-kubernetes-validations": [
            *(rules.spec_rules() if strict else []),
            *rules.spec_managed_by_rules(),
        ],
        "properties": {
            "managedBy": _string(
                f"The controller that runs this job: unset or '{MANAGED_BY}' for this "
                f"operator; '{MULTIKUEUE}' dispatches it to a worker cluster with Kueue's "
                "MultiKueue, whose adapter reads this field. Where runPolicy.managedBy (Kubeflow's "
                "field) is set too, the two are equal: the operator sets this one from it. "
                "Immutable.",
                maxLength=63,
                **{"x-kubernetes-validations": rules.managed_by_rules()},
            ),
            "tfReplicaSpecs": {
                "type": "object",
                "description": (
                    "The replicas of the TensorFlow cluster by type: Chief (or Master, its "
                    "legacy name), PS, Worker, Evaluator. The chief, or worker 0 when there is "
                    "no chief, decides success."
                ),
                "maxProperties": len(rules.REPLICA_TYPES),
                "additionalProperties": replica_spec_schema(
                    strict_pod_template(pod_template) if strict else pod_template
                ),
                "x-kubernetes-validations": rules.replica_specs_rules(),
            },
            "runPolicy": run_policy_schema(),
            "successPolicy": _string(
                'When the job succeeds: "" (the chief succeeded, or worker 0 when there '
                "is no chief) or AllWorkers (every worker succeeded).",
                enum=list(SUCCESS_POLICIES),
                default="",
            ),
            **({"tensorboard": tensorboard_schema()} if strict else {}),
            "enableDynamicWorker": {
                "type": "boolean",
                "description": (
                    "Kubeflow's sparse cluster spec for workers. Not supported yet: rejected "
                    "when true."
                ),
                "x-kubernetes-validations": rules.dynamic_worker_rules(),
            },
        },
    }


def status_schema() -> Schema:
    count = "int32"
    return {
        "type": "object",
        "description": "The observed state of the job, written by the operator only.",
        "properties": {
            "conditions": {
                "type": "array",
                "description": (
                    "The job's conditions, one per type. Created stays True; of Running, "
                    "Restarting, Succeeded, Failed and Suspended at most one is True."
                ),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": {
                    "type": "object",
                    "required": ["status", "type"],
                    "properties": {
                        "type": _string("Condition type.", enum=list(JOB_STATES)),
                        "status": _string(
                            "Status of the condition.", enum=list(CONDITION_STATUSES)
                        ),
                        "reason": _string("Machine-readable reason for the last transition."),
                        "message": _string("Human-readable details of the last transition."),
                        "lastUpdateTime": _time("When the condition was last updated."),
                        "lastTransitionTime": _time("When the status last changed."),
                    },
                },
            },
            "replicaStatuses": {
                "type": "object",
                "description": "Pod counts by replica type.",
                "additionalProperties": {
                    "type": "object",
                    "properties": {
                        "active": _integer(count, "Pods running or pending."),
                        "succeeded": _integer(count, "Pods that succeeded."),
                        "failed": _integer(count, "Pods that failed."),
                        "restarts": _integer(count, "Restarts of pods of this type."),
                        "selector": _string(
                            "Label selector of the pods of this type, in string form."
                        ),
                        "succeededIndexes": {
                            "type": "array",
                            "description": (
                                "Indexes of the replicas of this type that succeeded; the "
                                "operator never recreates them, even if their pods are deleted."
                            ),
                            "x-kubernetes-list-type": "set",
                            "items": {"type": "integer", "format": "int32"},
                        },
                    },
                },
            },
            "state": _string(
                "The job's current state (the type of its latest condition).",
                enum=list(JOB_STATES),
            ),
            "activeReplicas": _integer(count, "Pods running or pending, all types."),
            "succeededReplicas": _integer(count, "Pods that succeeded, all types."),
            "failedReplicas": _integer(count, "Pods that failed, all types."),
            "restartCount": _integer(count, "Restarts counted against backoffLimit."),
            "replicaGenerations": {
                "type": "object",
                "description": (
                    "How many times the operator replaced each replica, keyed "
                    "<type lowercase>-<index>; a pod of an older generation is stale."
                ),
                "additionalProperties": {"type": "integer", "format": "int64"},
            },
            "startTime": _time("When the operator started the job's pods."),
            "completionTime": _time("When the job succeeded or failed."),
            "lastReconcileTime": _time("When the operator last reconciled the job."),
            "observedGeneration": _integer("int64", "The metadata.generation the status reflects."),
            "checkpoint": {
                "type": "object",
                "description": (
                    "Where the replicas last stopped with a checkpoint, as a replica reported "
                    "it when it exited 42 (preempted, suspended, its node drained), and when "
                    "the job resumed from it."
                ),
                "properties": {
                    "step": _integer("int64", "The optimizer's step count at the checkpoint."),
                    "epoch": _integer("int64", "The epoch it was written in, from 1."),
                    "stoppedAt": _time("When the replica that reported it stopped."),
                    "resumedAt": _time("When the job's replicas started again from it."),
                },
            },
            "tensorboard": {
                "type": "object",
                "description": (
                    "The job's TensorBoard, while it runs (spec.tensorboard, or the "
                    f"{TENSORBOARD_ANNOTATION} annotation): its Service and address, or why "
                    "it cannot run."
                ),
                "properties": {
                    "name": _string("The TensorBoard's Deployment and Service."),
                    "url": _string("Where it serves, inside the cluster."),
                    "logDir": _string("The directory it reads."),
                    "ready": {"type": "boolean", "description": "It answers requests."},
                    "removeAfter": _time("When it is removed (the job has finished)."),
                    "message": _string("Why it cannot run."),
                },
            },
        },
    }


def tfjob_schema(pod_template: Schema, strict: bool) -> Schema:
    return {
        "type": "object",
        "description": (
            "A distributed TensorFlow training job: one pod and one headless service per "
            "replica, with TF_CONFIG rendered for each. The spec has the shape of Kubeflow's "
            "kubeflow.org/v1 TFJob."
        ),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            # Declared so that the root rules can point at metadata.name.
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": spec_schema(pod_template, strict),
            "status": status_schema(),
        },
        "x-kubernetes-validations": [
            *rules.root_rules(),
            *(rules.tensorboard_root_rules() if strict else []),
        ],
    }


def printer_columns() -> list[dict[str, Any]]:
    """Columns of `kubectl get tfjobs`.

    A printer column takes the first JSONPath result, and the operator keeps conditions in a
    fixed order by type, so no path selects the latest one. The Running condition says why
    the job is not running (an image pull error, a refused pod) and, once another phase
    turns True, takes its reason (conditions.py): its reason is the Reason column, its
    message the Message column of `-o wide`.
    """
    running = '.status.conditions[?(@.type=="Running")]'
    return [
        {"name": "State", "type": "string", "jsonPath": ".status.state"},
        {
            "name": "Reason",
            "type": "string",
            "jsonPath": f"{running}.reason",
            "description": "Why the job is in its state, or why it does not run yet",
        },
        {
            "name": "Active",
            "type": "integer",
            "jsonPath": ".status.activeReplicas",
            "description": "Pods running or pending",
        },
        {
            "name": "Succeeded",
            "type": "integer",
            "jsonPath": ".status.succeededReplicas",
            "description": "Pods that succeeded",
        },
        {
            "name": "Restarts",
            "type": "integer",
            "jsonPath": ".status.restartCount",
            "description": "Restarts counted against backoffLimit",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {
            "name": "Message",
            "type": "string",
            "jsonPath": f"{running}.message",
            "priority": 1,
            "description": "The Running condition's message",
        },
    ]


def tfjob_crd(pod_template: Schema, api: TFJobApi) -> dict[str, Any]:
    """The CRD of `api`, given the structural schema of a core/v1 PodTemplateSpec."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": api.crd_name},
        "spec": {
            "group": api.group,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": "tfjob",
                # Kubeflow's CRD has none: `tfj` stays this project's.
                **({"shortNames": ["tfj"]} if api == TFJOB_DEV else {}),
                "categories": ["tfjob-operator", "ml"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer_columns(),
                    "schema": {"openAPIV3Schema": tfjob_schema(pod_template, api == TFJOB_DEV)},
                }
            ],
        },
    }
