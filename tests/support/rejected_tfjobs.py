"""TFJob manifests the API server must reject, shared by the CRD's integration tests and
the parity test that runs the same manifests through the operator's own `parse_spec`."""

from __future__ import annotations

from dataclasses import dataclass

from support.builders import Manifest, container, replica_spec, tfjob

TEMPLATE_SCHEMA = "the pod template's own schema (core/v1 PodTemplateSpec) is the API server's"
POD_API = (
    "tfjob.dev's CRD refuses what the Pod API would; for a kubeflow.org job, whose CRD accepts "
    "what Kubeflow's does, the operator reports the refused pod in the job's conditions"
)


@dataclass(frozen=True)
class Rejected:
    """A TFJob the API server must reject, and fragments its error message must contain.

    `server_only` says why the operator's `parse_spec` cannot reject it too (the pod
    template's own schema, or unknown fields, which only the API server knows); None means
    it must.
    """

    id: str
    manifest: Manifest
    expected: tuple[str, ...]
    server_only: str | None = None


TOO_LONG_FOR_WORKER_99 = "a" * 54  # + "-worker-99" = 64 characters
TOO_LONG_FOR_EVALUATOR_0 = "b" * 53  # + "-evaluator-0" = 65 characters

REJECTED = [
    # spec.tfReplicaSpecs
    Rejected(
        "no-replica-specs",
        tfjob("job", {}),
        (
            "spec.tfReplicaSpecs: Required value: tfReplicaSpecs must define at least one "
            "replica type (Chief, Master, PS, Worker, Evaluator)",
        ),
    ),
    Rejected(
        "unknown-replica-type",
        tfjob("job", {"Worker": replica_spec(None), "Launcher": replica_spec(None)}),
        (
            "spec.tfReplicaSpecs: Invalid value",
            'unknown replica type(s) ["Launcher"]: tfReplicaSpecs keys must be Chief, Master, '
            "PS, Worker, Evaluator (case-sensitive)",
        ),
    ),
    Rejected(
        "lowercase-replica-type",
        tfjob("job", {"worker": replica_spec(None)}),
        ('unknown replica type(s) ["worker"]',),
    ),
    Rejected(
        "chief-and-master",
        tfjob(
            "job",
            {
                "Chief": replica_spec(None),
                "Master": replica_spec(None),
                "Worker": replica_spec(None),
            },
        ),
        (
            "spec.tfReplicaSpecs: Invalid value",
            "tfReplicaSpecs cannot have both Chief and Master: Master is the legacy name of "
            "Chief, use one of them",
        ),
    ),
    Rejected(
        "two-chiefs",
        tfjob("job", {"Chief": replica_spec(2)}),
        (
            "spec.tfReplicaSpecs.[Chief].replicas",
            "Chief replicas is 2, it must be 0 or 1: a TensorFlow cluster has at most one chief",
        ),
    ),
    Rejected(
        "two-masters",
        tfjob("job", {"Master": replica_spec(2), "Worker": replica_spec(None)}),
        ("spec.tfReplicaSpecs.[Master].replicas", "Master replicas is 2, it must be 0 or 1"),
    ),
    Rejected(
        "two-evaluators",
        tfjob("job", {"Worker": replica_spec(None), "Evaluator": replica_spec(2)}),
        (
            "spec.tfReplicaSpecs.[Evaluator].replicas",
            "Evaluator replicas is 2, it must be 0 or 1: a TensorFlow cluster has at most one "
            "evaluator",
        ),
    ),
    Rejected(
        "ps-without-worker",
        tfjob("job", {"Chief": replica_spec(None), "PS": replica_spec(2)}),
        (
            "spec.tfReplicaSpecs.[PS]",
            "PS replicas need at least one Worker replica: parameter servers only serve workers",
        ),
    ),
    Rejected(
        "ps-with-zero-workers",
        tfjob(
            "job", {"Chief": replica_spec(None), "PS": replica_spec(1), "Worker": replica_spec(0)}
        ),
        ("PS replicas need at least one Worker replica",),
    ),
    Rejected(
        "nothing-decides-success",
        tfjob("job", {"Worker": replica_spec(0), "Evaluator": replica_spec(1)}),
        (
            "spec.tfReplicaSpecs: Invalid value",
            "at least one Chief, Master or Worker replica is required: the chief (or worker 0 "
            "when there is no chief) decides when the job succeeds",
        ),
    ),
    Rejected(
        "more-replicas-in-total-than-the-bound",
        tfjob(
            "job", {"Chief": replica_spec(1), "Worker": replica_spec(900), "PS": replica_spec(100)}
        ),
        (
            "spec.tfReplicaSpecs: Invalid value",
            "the job has 1001 replicas of all types together, more than the limit of 1000: "
            "the TF_CONFIG of every pod names every replica",
        ),
    ),
    # ReplicaSpec
    Rejected(
        "more-workers-than-the-bound",
        tfjob("job", {"Worker": replica_spec(1001)}),
        (
            "spec.tfReplicaSpecs.Worker.replicas: Invalid value: 1001",
            "less than or equal to 1000",
        ),
    ),
    Rejected(
        "negative-replicas",
        tfjob("job", {"Worker": replica_spec(-1)}),
        ("spec.tfReplicaSpecs.Worker.replicas: Invalid value: -1", "greater than or equal to 0"),
    ),
    Rejected(
        "unknown-restart-policy",
        tfjob("job", {"Worker": {**replica_spec(None), "restartPolicy": "Sometimes"}}),
        (
            'spec.tfReplicaSpecs.Worker.restartPolicy: Unsupported value: "Sometimes"',
            '"Always", "OnFailure", "Never", "ExitCode"',
        ),
    ),
    Rejected(
        "missing-template",
        tfjob("job", {"Worker": {"replicas": 1}}),
        ("spec.tfReplicaSpecs.Worker.template: Required value",),
    ),
    Rejected(
        "no-tensorflow-container",
        tfjob("job", {"Worker": replica_spec(None, containers=[container("trainer")])}),
        (
            "spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: "
            "template.spec.containers must include a container named 'tensorflow': the "
            "operator sets TF_CONFIG and the TensorFlow port on it",
        ),
    ),
    Rejected(
        "template-without-spec",
        tfjob("job", {"Worker": {"template": {"metadata": {"labels": {"a": "b"}}}}}),
        ("spec.tfReplicaSpecs[Worker].template.spec.containers: Required value",),
    ),
    Rejected(
        "tensorflow-container-without-image",
        tfjob("job", {"Worker": replica_spec(None, containers=[container(image=None)])}),
        (
            "spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: every "
            "container of the template needs a non-empty image",
        ),
    ),
    Rejected(
        "tensorflow-container-empty-image",
        tfjob("job", {"Chief": replica_spec(None, containers=[container(image="")])}),
        ("spec.tfReplicaSpecs[Chief].template.spec.containers: Required value: every container",),
    ),
    Rejected(
        "sidecar-without-image",
        tfjob(
            "job",
            {
                "Worker": replica_spec(
                    None, containers=[container(), container("sidecar", image=None)]
                )
            },
        ),
        ("every container of the template needs a non-empty image",),
    ),
    # Pod template: the full PodTemplateSpec schema of Kubernetes v1.34
    Rejected(
        "template-typo-resourceas",
        tfjob(
            "job",
            {
                "Worker": replica_spec(
                    None, containers=[container(resourceas={"limits": {"cpu": "1"}})]
                )
            },
        ),
        ('unknown field "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resourceas"',),
        server_only=TEMPLATE_SCHEMA,
    ),
    Rejected(
        "template-typo-in-pod-spec",
        tfjob(
            "job",
            {"Worker": {"template": {"spec": {"containers": [container()], "nodeSelektor": {}}}}},
        ),
        ('unknown field "spec.tfReplicaSpecs.Worker.template.spec.nodeSelektor"',),
        server_only=TEMPLATE_SCHEMA,
    ),
    Rejected(
        "template-bad-quantity",
        tfjob(
            "job",
            {
                "Worker": replica_spec(
                    None, containers=[container(resources={"limits": {"memory": "2Gb"}})]
                )
            },
        ),
        (
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.memory: "
            'Invalid value: "2Gb"',
            "should match",
        ),
        server_only=TEMPLATE_SCHEMA,
    ),
    Rejected(
        "template-wrong-type",
        tfjob(
            "job",
            {
                "Worker": replica_spec(
                    None, containers=[container(ports=[{"containerPort": "http"}])]
                )
            },
        ),
        ("spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort",),
        server_only=TEMPLATE_SCHEMA,
    ),
    # What the Pod API refuses, refused at apply (tfjob.dev only: crd/rules.pod_spec_rules)
    Rejected(
        "port-out-of-range",
        tfjob(
            "job",
            {
                "Worker": replica_spec(
                    None,
                    containers=[container(ports=[{"name": "tfjob-port", "containerPort": 70000}])],
                )
            },
        ),
        (
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort: "
            "Invalid value: 70000",
            "should be less than or equal to 65535",
        ),
        server_only=POD_API,
    ),
    Rejected(
        "request-above-limit",
        tfjob(
            "job",
            {
                "Worker": replica_spec(
                    None,
                    containers=[
                        container(
                            resources={
                                "requests": {"cpu": "2", "memory": "1Gi"},
                                "limits": {"cpu": "500m", "memory": "2Gi"},
                            }
                        )
                    ],
                )
            },
        ),
        (
            "spec.tfReplicaSpecs[Worker].template.spec.containers[0].resources.requests",
            "every resources.requests entry must be at most its resources.limits entry",
        ),
        server_only=POD_API,
    ),
    Rejected(
        "mount-of-no-volume",
        tfjob(
            "job",
            {
                "Worker": replica_spec(
                    None,
                    containers=[container(volumeMounts=[{"name": "data", "mountPath": "/data"}])],
                )
            },
        ),
        (
            "spec.tfReplicaSpecs[Worker].template.spec.containers",
            "every volumeMounts[].name of the containers must name a volume of the template's "
            "volumes",
        ),
        server_only=POD_API,
    ),
    Rejected(
        "init-container-named-like-a-container",
        tfjob(
            "job",
            {
                "Worker": {
                    "template": {
                        "spec": {"initContainers": [container()], "containers": [container()]}
                    }
                }
            },
        ),
        (
            "spec.tfReplicaSpecs[Worker].template.spec.initContainers",
            "an init container has the name of a container",
        ),
        server_only=POD_API,
    ),
    Rejected(
        "two-containers-of-one-name",
        tfjob("job", {"Worker": replica_spec(None, containers=[container(), container()])}),
        ("spec.tfReplicaSpecs[Worker].template.spec.containers[1]: Duplicate value",),
        server_only=TEMPLATE_SCHEMA,
    ),
    # metadata.name
    Rejected(
        "name-too-long-for-worker-99",
        tfjob(TOO_LONG_FOR_WORKER_99, {"Worker": replica_spec(100)}),
        (
            "metadata.name: Invalid value",
            "metadata.name is too long: the longest child name <name>-<replica type>-<index> "
            "would have 64 characters, more than the DNS-1035 limit of 63; with these replicas "
            "the name may have at most 53 characters",
        ),
    ),
    Rejected(
        "name-too-long-for-evaluator-0",
        tfjob(TOO_LONG_FOR_EVALUATOR_0, {"Worker": replica_spec(1), "Evaluator": replica_spec(1)}),
        ("would have 65 characters", "the name may have at most 51 characters"),
    ),
    Rejected(
        "name-starts-with-digit",
        tfjob(name="1job"),
        (
            "metadata.name: Invalid value",
            "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', "
            "starting with a letter, no dots): it prefixes the names of the job's pods and "
            "services",
        ),
    ),
    Rejected("name-with-dot", tfjob(name="mnist.v2"), ("must be a DNS-1035 label",)),
    # spec.runPolicy
    Rejected(
        "gang-larger-than-the-job",
        tfjob(runPolicy={"schedulingPolicy": {"minAvailable": 3}}),
        (
            "spec.runPolicy.schedulingPolicy.minAvailable: Invalid value",
            "runPolicy.schedulingPolicy.minAvailable is 3, but the job has only 2 replicas: the "
            "gang could never be complete",
        ),
        server_only=(
            "tfjob.dev's CRD refuses it; kubeflow.org accepts it as Kubeflow does, and the "
            "job waits, saying why, until minAvailable is lowered"
        ),
    ),
    *(
        Rejected(
            f"scheduling-{field}-{value!r}",
            tfjob(runPolicy={"schedulingPolicy": {field: value}}),
            (f"spec.runPolicy.schedulingPolicy.{field}: Invalid value", message),
        )
        for field, value, message in (
            ("minAvailable", 0, "should be greater than or equal to 1"),
            ("scheduleTimeoutSeconds", 0, "should be greater than or equal to 1"),
            ("queue", "", "should be at least 1 chars long"),
        )
    ),
    Rejected(
        "managed-by-not-a-controller-name",
        tfjob(runPolicy={"managedBy": "kueue"}),
        (
            "spec.runPolicy.managedBy: Invalid value",
            "managedBy kueue is not a controller name: it must be <domain>/<name>, such as "
            "tfjob.dev/tfjob-operator",
        ),
        server_only="a job whose managedBy is not this operator's is never parsed: the "
        "operator leaves it alone",
    ),
    Rejected(
        "unknown-clean-pod-policy",
        tfjob(runPolicy={"cleanPodPolicy": "Finished"}),
        ('spec.runPolicy.cleanPodPolicy: Unsupported value: "Finished"',),
    ),
    Rejected(
        "zero-active-deadline",
        tfjob(runPolicy={"activeDeadlineSeconds": 0}),
        ("spec.runPolicy.activeDeadlineSeconds: Invalid value: 0", "greater than or equal to 1"),
    ),
    Rejected(
        "negative-backoff-limit",
        tfjob(runPolicy={"backoffLimit": -1}),
        ("spec.runPolicy.backoffLimit: Invalid value: -1",),
    ),
    Rejected(
        "negative-ttl",
        tfjob(runPolicy={"ttlSecondsAfterFinished": -5}),
        ("spec.runPolicy.ttlSecondsAfterFinished: Invalid value: -5",),
    ),
    Rejected(
        "run-policy-typo",
        tfjob(runPolicy={"cleanPodPolcy": "All"}),
        ('unknown field "spec.runPolicy.cleanPodPolcy"',),
        server_only="unknown fields: the API server prunes them, the operator never sees them",
    ),
    # the rest of spec
    Rejected(
        "unknown-success-policy",
        tfjob(successPolicy="AnyWorker"),
        (
            'spec.successPolicy: Unsupported value: "AnyWorker"',
            'supported values: "", "AllWorkers"',
        ),
    ),
    Rejected(
        "dynamic-worker",
        tfjob(enableDynamicWorker=True),
        (
            "spec.enableDynamicWorker: Forbidden: enableDynamicWorker is not supported yet: "
            "every replica gets the full cluster in TF_CONFIG",
        ),
    ),
    Rejected(
        "no-spec",
        {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "job"}},
        ("spec: Required value",),
    ),
]
