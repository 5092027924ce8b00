"""The project's client on a `kubeflow.org/v1` TFJob, against the real API server and
kubelet with `tfjob-operator run --kubeflow`: created from Kubeflow's YAML, found by name
without naming the API, followed until the job ends (a replica cleaned up mid-follow
included), waited for, its results read, deleted. The same on `tfjob.dev/v1` with real
TensorFlow: tests/e2e/test_client.py.
"""

from __future__ import annotations

import io
import json

from support.builders import SHELL_IMAGE, UNTIL_TOLD
from support.cluster import Kubectl

from harness.operator_process import OperatorProcess
from tfjob_operator.client import TFJobClient

#: Worker 0 (the master) prints a results line and succeeds once the test tells it to
#: finish (after both replicas' first lines were followed); worker 1 runs until the
#: operator cleans it up.
SCRIPT = (
    'echo "up $HOSTNAME"; '
    f'if [ "${{HOSTNAME##*-}}" = 0 ]; then {UNTIL_TOLD}; '
    """echo 'TFJOB_RESULT {"accuracy": 0.97, "replicas": 2}'; exit 0; fi; sleep 3600"""
)
BOTH_UP = {"[worker-0] up sdk-free-worker-0", "[worker-1] up sdk-free-worker-1"}
JOB = f"""
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: sdk-free
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          terminationGracePeriodSeconds: 1
          containers:
            - name: tensorflow
              image: {SHELL_IMAGE}
              command: ["sh", "-c", {json.dumps(SCRIPT)}]
"""


def test_the_client_drives_a_kubeflow_job_from_its_yaml(
    kubeflow_operator: OperatorProcess, kubeconfig: str, namespace: str, kubectl: Kubectl
) -> None:
    tfjobs = TFJobClient(namespace, kubeconfig=kubeconfig)
    created = tfjobs.create(JOB)
    assert created.api_version == "kubeflow.org/v1"

    followed: list[str] = []
    for line in tfjobs.logs("sdk-free", follow=True):
        followed.append(str(line))
        if set(followed) == BOTH_UP:
            kubectl.tell_to_finish(namespace, "sdk-free-worker-0")
    assert set(followed[:2]) == BOTH_UP, followed
    assert followed[2:] == ['[worker-0] TFJOB_RESULT {"accuracy": 0.97, "replicas": 2}']

    progress = io.StringIO()
    job = tfjobs.wait("sdk-free", timeout=60, progress=progress)
    assert (job.state, job.api_version) == ("Succeeded", "kubeflow.org/v1")
    assert progress.getvalue().startswith("sdk-free: Succeeded | worker-0 Succeeded")
    assert tfjobs.results("sdk-free") == {"worker-0": {"accuracy": 0.97, "replicas": 2}}
    assert [(j.name, j.api_version) for j in tfjobs.list()] == [("sdk-free", "kubeflow.org/v1")]

    tfjobs.delete("sdk-free", wait=True)
    assert tfjobs.list() == []
