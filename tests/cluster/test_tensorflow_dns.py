"""TensorFlow's gRPC (c-ares) resolves Service names through the cluster's DNS."""

from __future__ import annotations

from typing import Any

import pytest
from support.cluster import Kubectl
from support.pods import Pods, headless_service, pod_manifest

from tfjob_localcluster.images.catalog import TRAINER

pytestmark = pytest.mark.e2e

CLUSTER = (
    "import tensorflow as tf\n"
    "cluster = tf.train.ClusterSpec({{'chief': ['tf-chief.{ns}.svc:2222'],"
    " 'worker': ['tf-worker.{ns}.svc.cluster.local:2222']}})\n"
)
WORKER = CLUSTER + (
    "server = tf.distribute.Server(cluster, job_name='worker', task_index=0)\n"
    "print('serving', server.target, flush=True)\n"
    "server.join()\n"
)
CHIEF = CLUSTER + (
    "tf.config.experimental_connect_to_cluster(cluster, job_name='chief', task_index=0)\n"
    "with tf.device('/job:worker/task:0'):\n"
    "    product = tf.constant(21) * 2\n"
    "print('RESULT', int(product.numpy()), product.device, flush=True)\n"
)


def test_tensorflow_server_in_one_pod_reaches_another_by_service_name(
    pods: Pods, core_v1: Any, kubectl: Kubectl, namespace: str, project_images: tuple[str, ...]
) -> None:
    for role in ("chief", "worker"):
        core_v1.create_namespaced_service(namespace, headless_service(f"tf-{role}", {"role": role}))
    env = [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"}]
    worker = pod_manifest(
        "worker",
        ["python", "-c", WORKER.format(ns=namespace)],
        image=TRAINER,
        labels={"role": "worker"},
    )
    worker["spec"]["containers"][0]["env"] = env
    chief = pod_manifest(
        "chief",
        ["python", "-c", CHIEF.format(ns=namespace)],
        image=TRAINER,
        labels={"role": "chief"},
    )
    chief["spec"]["containers"][0]["env"] = env
    pods.create(worker)
    pods.create(chief)
    pod = pods.wait_phase("chief", "Succeeded", "Failed", timeout=240)
    log = kubectl("logs", "-n", namespace, "chief").stdout
    assert pod["status"]["phase"] == "Succeeded", (
        log + kubectl("logs", "-n", namespace, "worker").stdout
    )
    result = next(line for line in log.splitlines() if line.startswith("RESULT"))
    assert result == "RESULT 42 /job:worker/replica:0/task:0/device:CPU:0"
