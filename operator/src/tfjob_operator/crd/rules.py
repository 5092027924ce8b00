"""The CEL rules (x-kubernetes-validations) of the TFJob API, one function per schema level.

Rules sit at the level where they are cheapest for the API server's cost estimator: rules over
the containers of a template sit on the ReplicaSpec (evaluated once per replica type, and the
map of replica types is bounded to five keys), not at the root.
"""

from __future__ import annotations

from typing import Any, Final

from ..api import CONTAINER_NAME as TENSORFLOW_CONTAINER
from ..api import MANAGED_BY, ReplicaType
from ..integrations import tensorboard
from ..spec import DNS_1035, MAX_CHILD_NAME, MAX_REPLICAS

Rule = dict[str, Any]

REPLICA_TYPES: Final = tuple(t.value for t in ReplicaType)
#: Replica types that can decide success: the chief (Master is its legacy name) or worker 0.
SUCCESS_DECIDING_TYPES: Final = tuple(
    t.value for t in ReplicaType if t.is_chief or t is ReplicaType.WORKER
)
DNS1035_MAX_LENGTH: Final = MAX_CHILD_NAME
DNS1035_LABEL: Final = DNS_1035.pattern
#: A controller's name: a DNS subdomain, a slash and a path, as a Job's managedBy.
CONTROLLER_NAME: Final = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[-A-Za-z0-9_.~/]+$"


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def _rule(rule: str, message: str, **extra: str) -> Rule:
    return {"rule": rule, "message": message, **extra}


def tensorboard_root_rules() -> list[Rule]:
    """tfjob.dev only: the TensorBoard's Service is named <job>-tensorboard."""
    limit = DNS1035_MAX_LENGTH - len(tensorboard.NAME_SUFFIX)
    return [
        _rule(
            "!has(self.spec) || !has(self.spec.tensorboard) || "
            f"self.metadata.name.size() <= {limit}",
            f"metadata.name is too long for a TensorBoard: its Service <name>"
            f"{tensorboard.NAME_SUFFIX} must be a DNS-1035 label of at most "
            f"{DNS1035_MAX_LENGTH} characters, so the name may have at most {limit}",
            fieldPath=".metadata.name",
            reason="FieldValueInvalid",
        )
    ]


def log_dir_rules() -> list[Rule]:
    return [
        _rule(
            "self.startsWith('/') || self.contains('://')",
            "logDir must be an absolute path or a URL (gs://...)",
        )
    ]


def root_rules() -> list[Rule]:
    """Rules on the TFJob object: its name prefixes every child name."""
    specs = "self.spec.tfReplicaSpecs"
    guard = "!has(self.spec) || !has(self.spec.tfReplicaSpecs) || "
    # <job>-<type lowercase>-<last index>, for every type with at least one replica.
    suffix_lengths = (
        f"{specs}.filter(t, {specs}[t].replicas > 0)"
        f".map(t, t.size() + string({specs}[t].replicas - 1).size() + 2)"
    )
    longest_child = f"self.metadata.name.size() + {suffix_lengths}.max()"
    limit = DNS1035_MAX_LENGTH
    return [
        _rule(
            f"self.metadata.name.matches('{DNS1035_LABEL}')",
            "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', "
            "starting with a letter, no dots): it prefixes the names of the job's pods and "
            "services",
            fieldPath=".metadata.name",
        ),
        _rule(
            guard + f"{suffix_lengths}.all(n, self.metadata.name.size() + n <= {limit})",
            f"metadata.name is too long: every child name <name>-<replica type>-<index> must be "
            f"a DNS-1035 label of at most {limit} characters",
            messageExpression=(
                f"'metadata.name is too long: the longest child name <name>-<replica type>-"
                f"<index> would have %d characters, more than the DNS-1035 limit of {limit}; "
                f"with these replicas the name may have at most %d characters'"
                f".format([{longest_child}, {limit} - {suffix_lengths}.max()])"
            ),
            fieldPath=".metadata.name",
            reason="FieldValueInvalid",
        ),
    ]


def replica_specs_rules() -> list[Rule]:
    """Rules on spec.tfReplicaSpecs, the map from replica type to ReplicaSpec."""
    allowed = _cel_list(REPLICA_TYPES)
    allowed_text = ", ".join(REPLICA_TYPES)
    rules = [
        _rule(
            "self.size() > 0",
            f"tfReplicaSpecs must define at least one replica type ({allowed_text})",
            reason="FieldValueRequired",
        ),
        _rule(
            f"self.all(t, t in {allowed})",
            f"tfReplicaSpecs keys must be {allowed_text} (case-sensitive)",
            messageExpression=(
                f"'unknown replica type(s) %s: tfReplicaSpecs keys must be {allowed_text} "
                f"(case-sensitive)'.format([self.filter(t, !(t in {allowed}))])"
            ),
        ),
        _rule(
            "!('Chief' in self && 'Master' in self)",
            "tfReplicaSpecs cannot have both Chief and Master: Master is the legacy name of "
            "Chief, use one of them",
        ),
    ]
    for replica_type, why in (
        ("Chief", "a TensorFlow cluster has at most one chief"),
        ("Master", "Master is the chief, and a TensorFlow cluster has at most one chief"),
        ("Evaluator", "a TensorFlow cluster has at most one evaluator"),
    ):
        rules.append(
            _rule(
                f"!('{replica_type}' in self) || self.{replica_type}.replicas <= 1",
                f"{replica_type} replicas must be 0 or 1: {why}",
                messageExpression=(
                    f"'{replica_type} replicas is %d, it must be 0 or 1: {why}'"
                    f".format([self.{replica_type}.replicas])"
                ),
                fieldPath=f"['{replica_type}'].replicas",
            )
        )
    deciders = _cel_list(SUCCESS_DECIDING_TYPES)
    total = "self.map(t, self[t].replicas).sum()"
    # No quote in it: it goes into a CEL string literal.
    why = "the TF_CONFIG of every pod names every replica (docs/shared-clusters.md)"
    rules += [
        _rule(
            f"{total} <= {MAX_REPLICAS}",
            f"the job's replicas of all types together must be at most {MAX_REPLICAS}: {why}",
            messageExpression=(
                f"'the job has %d replicas of all types together, more than the limit of "
                f"{MAX_REPLICAS}: {why}'.format([{total}])"
            ),
        ),
        _rule(
            "!('PS' in self) || self.PS.replicas == 0 "
            "|| ('Worker' in self && self.Worker.replicas > 0)",
            "PS replicas need at least one Worker replica: parameter servers only serve "
            "workers (add a Worker replica spec)",
            fieldPath="['PS']",
        ),
        _rule(
            f"{deciders}.exists(t, t in self && self[t].replicas > 0)",
            "at least one Chief, Master or Worker replica is required: the chief (or worker 0 "
            "when there is no chief) decides when the job succeeds",
        ),
    ]
    return rules


def replica_spec_rules() -> list[Rule]:
    """Rules on one ReplicaSpec: the template must run TensorFlow in a known container.

    Container lists and strings of the pod template are unbounded, so these rules only use
    operations whose cost does not grow with string length (size(), comparison with a short
    constant) to stay within the API server's CEL cost budget.
    """
    containers = "self.template.spec.containers"
    return [
        _rule(
            f"has(self.template.spec) && {containers}.exists(c, c.name == "
            f"'{TENSORFLOW_CONTAINER}')",
            f"template.spec.containers must include a container named "
            f"'{TENSORFLOW_CONTAINER}': the operator sets TF_CONFIG and the TensorFlow port on "
            f"it",
            fieldPath=".template.spec.containers",
            reason="FieldValueRequired",
        ),
        _rule(
            f"!has(self.template.spec) || {containers}.all(c, has(c.image) && size(c.image) > 0)",
            "every container of the template needs a non-empty image",
            fieldPath=".template.spec.containers",
            reason="FieldValueRequired",
        ),
    ]


def spec_rules() -> list[Rule]:
    """tfjob.dev's: a gang of more pods than the job has could never be complete.

    kubeflow.org accepts it, as Kubeflow does: the job waits, saying why, until an update
    lowers minAvailable (integrations/gang.py)."""
    policy = "self.runPolicy.schedulingPolicy"
    total = "self.tfReplicaSpecs.map(t, self.tfReplicaSpecs[t].replicas).sum()"
    return [
        _rule(
            f"!has(self.runPolicy) || !has({policy}) || !has({policy}.minAvailable) || "
            f"{policy}.minAvailable <= {total}",
            "runPolicy.schedulingPolicy.minAvailable is more than the job's replicas: the gang "
            "could never be complete",
            messageExpression=(
                f"'runPolicy.schedulingPolicy.minAvailable is %d, but the job has only %d "
                f"replicas: the gang could never be complete'.format([{policy}.minAvailable, "
                f"{total}])"
            ),
            fieldPath=".runPolicy.schedulingPolicy.minAvailable",
            reason="FieldValueInvalid",
        )
    ]


def managed_by_rules() -> list[Rule]:
    """managedBy names a controller as Kubernetes' Job does: a domain-prefixed path."""
    return [
        _rule(
            f"self.matches('{CONTROLLER_NAME}')",
            f"managedBy must name a controller as <domain>/<name>, such as '{MANAGED_BY}'",
            messageExpression=(
                f"'managedBy %s is not a controller name: it must be <domain>/<name>, such "
                f"as {MANAGED_BY}'.format([self])"
            ),
        ),
        _rule(
            "self == oldSelf",
            "managedBy is immutable: the controller that manages a job cannot change",
            reason="FieldValueForbidden",
        ),
    ]


def spec_managed_by_rules() -> list[Rule]:
    """spec.managedBy, the field Kueue's MultiKueue adapter reads, and Kubeflow's
    spec.runPolicy.managedBy name the same controller; the operator mirrors the second into
    the first after creation, the one change of spec.managedBy allowed."""
    run_policy = "has(self.runPolicy) && has(self.runPolicy.managedBy)"
    return [
        _rule(
            f"!has(self.managedBy) || !({run_policy}) || self.managedBy == "
            "self.runPolicy.managedBy",
            "spec.managedBy and spec.runPolicy.managedBy must name the same controller",
            messageExpression=(
                "'spec.managedBy is %s but spec.runPolicy.managedBy is %s: they must name the "
                "same controller'.format([self.managedBy, self.runPolicy.managedBy])"
            ),
            fieldPath=".managedBy",
            reason="FieldValueInvalid",
        ),
        _rule(
            f"has(self.managedBy) == has(oldSelf.managedBy) || (!has(oldSelf.managedBy) && "
            f"{run_policy})",
            "managedBy is immutable: it cannot be removed, nor set after the job is created "
            "but as its runPolicy.managedBy",
            fieldPath=".managedBy",
            reason="FieldValueForbidden",
        ),
    ]


def run_policy_rules() -> list[Rule]:
    return [
        _rule(
            "has(self.managedBy) == has(oldSelf.managedBy)",
            "managedBy is immutable: it cannot be set or removed after the job is created",
            fieldPath=".managedBy",
            reason="FieldValueForbidden",
        )
    ]


def dynamic_worker_rules() -> list[Rule]:
    return [
        _rule(
            "!self",
            "enableDynamicWorker is not supported yet: every replica gets the full cluster in "
            "TF_CONFIG",
            reason="FieldValueForbidden",
        )
    ]


def pod_spec_rules() -> list[Rule]:
    """tfjob.dev's rules on a template's pod spec: what the Pod API refuses at pod creation
    and the CRD can know at apply (kubeflow.org's CRD accepts what Kubeflow's accepts, and
    the operator reports the refused pod in the job's conditions).

    Their messages are fixed: a message built from the names would cost more than the API
    server's CEL budget allows. The field path points at the list that holds the mistake.
    """
    rules = [
        _rule(
            f"!has(self.{group}) || self.{group}.all(c, !has(c.volumeMounts) || "
            "c.volumeMounts.all(m, has(self.volumes) && self.volumes.exists(v, v.name == m.name)))",
            f"every volumeMounts[].name of the {group} must name a volume of the template's "
            "volumes",
            fieldPath=f".{group}",
        )
        for group in ("containers", "initContainers")
    ]
    rules.append(
        _rule(
            "!has(self.initContainers) || "
            "self.initContainers.all(i, !self.containers.exists(c, c.name == i.name))",
            "an init container has the name of a container: every container of a pod needs "
            "its own name",
            # FieldValueDuplicate would print the value and drop the message.
            fieldPath=".initContainers",
        )
    )
    return rules


def resources_rules() -> list[Rule]:
    """A container's requests may not exceed its limits, resource by resource (the Pod API's
    rule; a request with no limit is fine)."""
    return [
        _rule(
            "!has(self.requests) || !has(self.limits) || self.requests.all(r, "
            "!(r in self.limits) || "
            "quantity(string(self.requests[r])).compareTo(quantity(string(self.limits[r]))) <= 0)",
            "every resources.requests entry must be at most its resources.limits entry",
            fieldPath=".requests",
        )
    ]
