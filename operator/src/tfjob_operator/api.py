"""Names of the TFJob API and of everything the operator stamps on the objects it creates.

The TFJob is served under two API groups: `tfjob.dev/v1`, this project's, and (opt-in,
`run --kubeflow`) Kubeflow's `kubeflow.org/v1` with the same spec, so that existing
TFJobs, their clients and Kueue's Kubeflow integration keep working unchanged. A job is
decided the same way under both; `TFJobApi` holds what differs: where it is served, and
the labels and controller names that API's own clients select on.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

VERSION: Final = "v1"
KIND: Final = "TFJob"
PLURAL: Final = "tfjobs"

#: The container that receives TF_CONFIG and the TensorFlow port.
CONTAINER_NAME: Final = "tensorflow"
PORT_NAME: Final = "tfjob-port"
DEFAULT_PORT: Final = 2222

#: Value of managedBy that this operator reconciles (absent means the same).
MANAGED_BY: Final = "tfjob.dev/tfjob-operator"
#: Kueue's MultiKueue, as a job's managedBy: the job runs on a worker cluster MultiKueue
#: picks, and this cluster's copy mirrors its status.
MULTIKUEUE: Final = "kueue.x-k8s.io/multikueue"
FIELD_MANAGER: Final = "tfjob-operator"

LABEL_JOB_NAME: Final = "tfjob.dev/job-name"
LABEL_REPLICA_TYPE: Final = "tfjob.dev/replica-type"
LABEL_REPLICA_INDEX: Final = "tfjob.dev/replica-index"
LABEL_JOB_ROLE: Final = "tfjob.dev/job-role"
#: The uid of the TFJob that owns the child, as Kubernetes' Job controller labels its pods:
#: a selector on it matches this TFJob's children only, never those of an earlier or later
#: TFJob of the same name.
LABEL_CONTROLLER_UID: Final = "tfjob.dev/controller-uid"
#: How many times the operator has replaced this replica; pods with an older value are stale.
LABEL_GENERATION: Final = "tfjob.dev/replica-generation"
#: Digest of the cluster in the pod's TF_CONFIG; a pod rendered for another cluster is stale.
LABEL_CLUSTER_DIGEST: Final = "tfjob.dev/cluster-digest"

#: The job whose TensorBoard (integrations/tensorboard.py) a Deployment, its pods or its
#: Service are.
#: Not LABEL_JOB_NAME: the controller's pods and services are only the replicas.
LABEL_TENSORBOARD_OF: Final = "tfjob.dev/tensorboard-of"
#: Digest of a TensorBoard's Deployment spec; one rendered otherwise is replaced.
LABEL_TENSORBOARD_DIGEST: Final = "tfjob.dev/tensorboard-digest"
#: The port a TensorBoard serves on (integrations/tensorboard.py), and the client forwards.
TENSORBOARD_PORT: Final = 6006
#: spec.tensorboard of a kubeflow.org/v1 TFJob, whose schema has no such field, as JSON.
TENSORBOARD_ANNOTATION: Final = "tfjob.dev/tensorboard"

GPU_RESOURCE: Final = "nvidia.com/gpu"
#: Kueue's label naming the LocalQueue a job waits in; Kueue suspends and resumes the job.
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
#: Kueue's API (v1beta2: served since Kueue 0.15, its storage version in 0.19) and the
#: label Kueue puts on the Workloads made for a job.
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_API_VERSION: Final = f"{KUEUE_GROUP}/v1beta2"
KUEUE_WORKLOADS_PATH: Final = f"/apis/{KUEUE_API_VERSION}"
KUEUE_JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
#: The WorkloadPriorityClass a job names for its Workload (Kueue's label, on the job).
KUEUE_PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
#: What Kueue's job integrations put on an admitted job's pods: the pod set (label), the
#: Workload (annotation), and, for a topology assignment, the scheduling gate Kueue's
#: topology ungater lifts once it has chosen each pod's domain.
KUEUE_POD_SET_LABEL: Final = "kueue.x-k8s.io/podset"
KUEUE_WORKLOAD_ANNOTATION: Final = "kueue.x-k8s.io/workload"
KUEUE_TOPOLOGY_GATE: Final = "kueue.x-k8s.io/topology"
#: The pod-set topology annotations users put on replica templates, as Kueue reads them
#: for its own jobs.
KUEUE_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_SLICE_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE: Final = "kueue.x-k8s.io/podset-slice-size"
#: What MultiKueue puts on the copy of a job it creates on a worker cluster: the Workload it
#: made there for the job (which the job's controller adopts instead of making one; an
#: annotation since Kueue v0.19, a label before, read in that order as Kueue reads it),
#: and the manager cluster it came from (a label).
KUEUE_PREBUILT_WORKLOAD: Final = "kueue.x-k8s.io/prebuilt-workload-name"
KUEUE_MULTIKUEUE_ORIGIN_LABEL: Final = "kueue.x-k8s.io/multikueue-origin"

#: Exit code of TensorFlow's PreemptionCheckpointHandler (and of tfjob-train for a lost peer).
PREEMPTION_EXIT_CODE: Final = 42


#: Labels Kubeflow's training-operator puts on a TFJob's pods and services; its users'
#: dashboards, scripts and Kueue select on them.
KUBEFLOW_LABEL_JOB_NAME: Final = "training.kubeflow.org/job-name"
KUBEFLOW_LABEL_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
KUBEFLOW_LABEL_REPLICA_INDEX: Final = "training.kubeflow.org/replica-index"
KUBEFLOW_LABEL_JOB_ROLE: Final = "training.kubeflow.org/job-role"
KUBEFLOW_LABEL_OPERATOR_NAME: Final = "training.kubeflow.org/operator-name"
#: The value Kubeflow's TFJob controller gives its operator-name label.
KUBEFLOW_OPERATOR_NAME: Final = "tfjob-controller"


@dataclass(frozen=True)
class GroupVersion:
    """An API group at one version, as objects and the API server's paths name it."""

    group: str
    version: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def path(self) -> str:
        """The API server path of this group's version."""
        return f"/apis/{self.group}/{self.version}"


@dataclass(frozen=True)
class TFJobApi(GroupVersion):
    """One API group the TFJob is served under (see the module docstring)."""

    #: Children also carry the labels Kubeflow's training-operator gives them.
    kubeflow_labels: bool

    @property
    def crd_name(self) -> str:
        return f"{PLURAL}.{self.group}"

    def child_labels(
        self, job_name: str, replica_type: str, index: int, leader: bool
    ) -> dict[str, str]:
        """Labels this API's clients select a child on, beyond the tfjob.dev/ ones."""
        if not self.kubeflow_labels:
            return {}
        labels = {
            KUBEFLOW_LABEL_OPERATOR_NAME: KUBEFLOW_OPERATOR_NAME,
            KUBEFLOW_LABEL_JOB_NAME: job_name,
            KUBEFLOW_LABEL_REPLICA_TYPE: replica_type,
            KUBEFLOW_LABEL_REPLICA_INDEX: str(index),
        }
        if leader:
            labels[KUBEFLOW_LABEL_JOB_ROLE] = "master"
        return labels

    def replica_selector(self, job_name: str, replica_type: str) -> str:
        """`status.replicaStatuses[type].selector`: the replica type's pods, as this API's
        clients select them."""
        if self.kubeflow_labels:
            return (
                f"{KUBEFLOW_LABEL_JOB_NAME}={job_name},{KUBEFLOW_LABEL_REPLICA_TYPE}={replica_type}"
            )
        return f"{LABEL_JOB_NAME}={job_name},{LABEL_REPLICA_TYPE}={replica_type}"


TFJOB_DEV: Final = TFJobApi("tfjob.dev", VERSION, kubeflow_labels=False)
KUBEFLOW: Final = TFJobApi("kubeflow.org", VERSION, kubeflow_labels=True)
APIS: Final = (TFJOB_DEV, KUBEFLOW)


def api_of(api_version: object) -> TFJobApi | None:
    """The API a TFJob's `apiVersion` names, None if neither."""
    return next((api for api in APIS if api.api_version == api_version), None)


def manager_of(body: Mapping[str, Any]) -> str | None:
    """The controller that runs a TFJob, None for this operator: spec.managedBy, else
    Kubeflow's spec.runPolicy.managedBy (the CRD keeps the two equal where both are set).

    Another controller's value leaves the job to it: Kubeflow's training-operator may run
    beside this one, and MultiKueue runs the job on a worker cluster. The copy MultiKueue
    creates on that worker (labelled with its origin) is this operator's to run: MultiKueue
    drops spec.managedBy from it, but not the runPolicy field it does not know.
    """
    spec = body.get("spec") or {}
    managed_by = spec.get("managedBy") or (spec.get("runPolicy") or {}).get("managedBy")
    if managed_by is None or managed_by == MANAGED_BY:
        return None
    labels = (body.get("metadata") or {}).get("labels") or {}
    if managed_by == MULTIKUEUE and KUEUE_MULTIKUEUE_ORIGIN_LABEL in labels:
        return None
    return str(managed_by)


class ReplicaType(StrEnum):
    """Keys of spec.tfReplicaSpecs. Master is Kubeflow's legacy name for Chief."""

    CHIEF = "Chief"
    MASTER = "Master"
    PS = "PS"
    WORKER = "Worker"
    EVALUATOR = "Evaluator"

    @property
    def label(self) -> str:
        """Lowercase form used in child names and labels (`master` stays `master`)."""
        return self.value.lower()

    @property
    def tf_task_type(self) -> str:
        """Task type in TF_CONFIG: TensorFlow 2 has no `master`, it is `chief`."""
        return "chief" if self in (ReplicaType.CHIEF, ReplicaType.MASTER) else self.label

    @property
    def is_chief(self) -> bool:
        return self in (ReplicaType.CHIEF, ReplicaType.MASTER)


class RestartPolicy(StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class SuccessPolicy(StrEnum):
    DEFAULT = ""
    ALL_WORKERS = "AllWorkers"


class ConditionType(StrEnum):
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


@dataclass(frozen=True)
class JobRef:
    """Identity of a TFJob object: its children are owned by this uid."""

    namespace: str
    name: str
    uid: str
    api: TFJobApi = TFJOB_DEV

    def owned_labels(self) -> dict[str, str]:
        """The labels of every object the job owns: the operator's watches select them by
        the job's name, and a finished job's clean-up by its uid."""
        return {LABEL_JOB_NAME: self.name, LABEL_CONTROLLER_UID: self.uid}

    def owner_reference(self) -> dict[str, Any]:
        """The reference by which each of the job's children is owned, and collected with it."""
        return {
            "apiVersion": self.api.api_version,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
