"""Names of the TFJob API and of everything the operator stamps on the objects it creates."""

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

GROUP: Final = "tfjob.dev"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "TFJob"
PLURAL: Final = "tfjobs"

#: The container that receives TF_CONFIG and the TensorFlow port.
CONTAINER_NAME: Final = "tensorflow"
PORT_NAME: Final = "tfjob-port"
DEFAULT_PORT: Final = 2222

#: Value of runPolicy.managedBy that this operator reconciles (absent means the same).
MANAGED_BY: Final = "tfjob.dev/tfjob-operator"
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

GPU_RESOURCE: Final = "nvidia.com/gpu"

#: Exit code of TensorFlow's PreemptionCheckpointHandler (and of tfjob-train for a lost peer).
PREEMPTION_EXIT_CODE: Final = 42


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
