"""The process node as kubelet: the Node object, pod lifecycles, statuses, logs, events."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tfjob_localcluster.cluster import LocalCluster
from tfjob_localcluster.pytest_plugin import Kubectl
from tfjob_localcluster.testing import (
    Pods,
    condition,
    container,
    container_status,
    pod_manifest,
    waiting_reason,
)

pytestmark = pytest.mark.integration


def test_node_is_ready_with_gpu_capacity_and_renews_its_lease(
    kubectl: Kubectl, local_cluster: LocalCluster
) -> None:
    listing = kubectl("get", "nodes").stdout.split()
    assert listing[5:7] == [local_cluster.node_name, "Ready"]
    node = json.loads(kubectl("get", "node", local_cluster.node_name, "-o", "json").stdout)
    status = node["status"]
    assert status["capacity"]["nvidia.com/gpu"] == "4"
    assert status["allocatable"]["nvidia.com/gpu"] == "4"
    assert status["capacity"]["cpu"] == "32"
    assert status["capacity"]["pods"] == "110"
    assert status["nodeInfo"]["kubeletVersion"] == "v1.34.4"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    assert {"type": "InternalIP", "address": local_cluster.host_ip} in status["addresses"]
    assert not node["spec"].get("taints")  # the not-ready taint was lifted

    def renew_time() -> str:
        lease = kubectl(
            "get", "lease", "-n", "kube-node-lease", local_cluster.node_name, "-o", "json"
        )
        spec = json.loads(lease.stdout)["spec"]
        assert spec["holderIdentity"] == local_cluster.node_name
        return str(spec["renewTime"])

    first = renew_time()
    deadline = time.monotonic() + 30
    while renew_time() == first:
        assert time.monotonic() < deadline, "the node lease was not renewed"
        time.sleep(1)


def test_failing_command_ends_failed_with_exit_code_and_log(
    pods: Pods, kubectl: Kubectl, namespace: str
) -> None:
    pods.create(pod_manifest("fails", ["sh", "-c", "echo hello; exit 3"]))
    pod = pods.wait_phase("fails", "Failed", "Succeeded")
    assert pod["status"]["phase"] == "Failed"
    status = container_status(pod)
    terminated = status["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["reason"] == "Error"
    assert terminated["startedAt"] <= terminated["finishedAt"]
    assert status["containerID"].startswith("process://")
    assert status["restartCount"] == 0
    assert (status["ready"], status["started"]) == (False, False)
    assert pod["status"]["podIP"].startswith("10.")
    assert pod["status"]["podIPs"] == [{"ip": pod["status"]["podIP"]}]
    assert pod["status"]["startTime"]
    ready = condition(pod, "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "PodCompleted")
    assert kubectl("logs", "-n", namespace, "fails").stdout == "hello\n"
    reasons = {event["reason"] for event in pods.events("fails")}
    assert {"Scheduled", "Pulled", "Created", "Started"} <= reasons


def test_on_failure_restarts_in_place_then_succeeds(
    pods: Pods, kubectl: Kubectl, namespace: str
) -> None:
    script = (
        "if [ -f /state/ran ]; then echo second run; exit 0; fi; "
        "touch /state/ran; echo first run; exit 1"
    )
    pods.create(
        pod_manifest(
            "flaky",
            restart_policy="OnFailure",
            containers=[
                container(
                    "main",
                    ["sh", "-c", script],
                    volumeMounts=[{"name": "state", "mountPath": "/state"}],
                )
            ],
            volumes=[{"name": "state", "emptyDir": {}}],
        )
    )
    pod = pods.wait_phase("flaky", "Succeeded", "Failed")
    assert pod["status"]["phase"] == "Succeeded"
    status = container_status(pod)
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert status["state"]["terminated"]["exitCode"] == 0
    assert status["state"]["terminated"]["reason"] == "Completed"
    assert kubectl("logs", "-n", namespace, "flaky").stdout == "second run\n"
    assert kubectl("logs", "-n", namespace, "flaky", "--previous").stdout == "first run\n"


def test_always_restarts_with_back_off_and_counts_restarts(pods: Pods) -> None:
    pods.create(pod_manifest("crashes", ["sh", "-c", "exit 2"], restart_policy="Always"))
    pod = pods.wait(
        "crashes",
        lambda p: (
            container_status(p).get("restartCount", 0) >= 1
            and waiting_reason(p) == "CrashLoopBackOff"
        ),
        "CrashLoopBackOff after a restart",
    )
    status = container_status(pod)
    assert pod["status"]["phase"] == "Running"
    assert status["lastState"]["terminated"]["exitCode"] == 2
    assert "back-off" in status["state"]["waiting"]["message"]
    assert pods.wait_event("crashes", "BackOff")["type"] == "Warning"


def test_deletion_sends_sigterm_then_sigkill_then_removes_the_pod(
    pods: Pods, core_v1: Any, tmp_path: Path
) -> None:
    # Records SIGTERM, ignores it and keeps ticking: only SIGKILL ends it.
    program = (
        "import os, signal, time\n"
        "log = open('/record/events', 'a', buffering=1)\n"
        "log.write(f'pid {os.getpid()}\\n')\n"
        "signal.signal(signal.SIGTERM, lambda *_: log.write('SIGTERM\\n'))\n"
        "while True:\n"
        "    log.write('tick\\n')\n"
        "    time.sleep(0.2)\n"
    )
    tmp_path.chmod(0o777)
    pods.create(
        pod_manifest(
            "stubborn",
            containers=[
                container(
                    "main",
                    ["python", "-c", program],
                    volumeMounts=[{"name": "record", "mountPath": "/record"}],
                )
            ],
            volumes=[{"name": "record", "hostPath": {"path": str(tmp_path), "type": "Directory"}}],
            terminationGracePeriodSeconds=2,
        )
    )
    pods.wait_running("stubborn")
    record = tmp_path / "events"
    deadline = time.monotonic() + 30
    while not record.exists() or "tick" not in record.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    pid = int(record.read_text().split()[1])
    core_v1.delete_namespaced_pod("stubborn", pods.namespace)
    deadline = time.monotonic() + 60
    while any(
        p.metadata.name == "stubborn" for p in core_v1.list_namespaced_pod(pods.namespace).items
    ):
        assert time.monotonic() < deadline, "the pod object was not removed"
        time.sleep(0.2)
    lines = record.read_text().splitlines()
    assert "SIGTERM" in lines
    # It kept running after SIGTERM: the end came from SIGKILL, after the grace period.
    assert "tick" in lines[lines.index("SIGTERM") + 1 :]
    assert not Path(f"/proc/{pid}").exists()
    assert pods.wait_event("stubborn", "Killing")["message"] == "Stopping container main"


def test_eviction_hook_fails_the_pod_as_the_eviction_manager_does(
    pods: Pods, core_v1: Any, local_cluster: LocalCluster
) -> None:
    pods.create(pod_manifest("victim", ["sleep", "3600"], restart_policy="Always"))
    pods.wait_running("victim")
    reply = core_v1.connect_post_node_proxy_with_path(
        local_cluster.node_name, f"debug/evict/{pods.namespace}/victim", _preload_content=False
    )
    assert json.loads(reply.data)["evicted"] == f"{pods.namespace}/victim"
    pod = pods.wait_phase("victim", "Failed")
    assert pod["status"]["reason"] == "Evicted"
    assert pod["status"]["message"].startswith("The node was low on resource: memory.")
    disruption = condition(pod, "DisruptionTarget")
    assert disruption is not None
    assert (disruption["status"], disruption["reason"]) == ("True", "TerminationByKubelet")
    terminated = container_status(pod)["state"]["terminated"]
    assert terminated["exitCode"] in (137, 143)
    assert container_status(pod)["restartCount"] == 0  # evicted pods are not restarted
    assert pods.wait_event("victim", "Evicted")["type"] == "Warning"


def test_python_environment_stays_usable_under_volumes_and_for_non_root(
    pods: Pods, namespace: str
) -> None:
    """The "image" is the project's environment on the host: a volume mounted over the
    directory that holds the checkout, and a non-root user, must not take it away."""
    top = "/" + Path(sys.prefix).resolve().parts[1]  # e.g. /tmp or /work: covers the checkout
    pods.create(
        pod_manifest(
            "covered",
            securityContext={"runAsUser": 65532, "runAsGroup": 65532},
            containers=[
                container(
                    "main",
                    ["python", "-c", "import tfjob_localcluster, os; print('ran as', os.getuid())"],
                    volumeMounts=[{"name": "scratch", "mountPath": top}],
                )
            ],
            volumes=[{"name": "scratch", "emptyDir": {}}],
        )
    )
    pod = pods.wait_phase("covered", "Succeeded")
    assert container_status(pod)["state"]["terminated"]["exitCode"] == 0
    assert "ran as 65532" in pods.log("covered", "main")


def test_signal_hook_kills_the_container_process_like_a_crash(
    pods: Pods, core_v1: Any, local_cluster: LocalCluster
) -> None:
    pods.create(pod_manifest("crash", ["sleep", "3600"]))
    pods.wait_running("crash")
    reply = core_v1.connect_post_node_proxy_with_path(
        local_cluster.node_name,
        f"debug/signal/{pods.namespace}/crash/main/KILL",
        _preload_content=False,
    )
    assert json.loads(reply.data)["signal"] == "SIGKILL"
    pod = pods.wait_phase("crash", "Failed")
    terminated = container_status(pod)["state"]["terminated"]
    assert terminated["exitCode"] == 137
    assert "reason" not in pod["status"] or pod["status"]["reason"] != "Evicted"


def test_unsupported_volume_fails_the_pod_with_a_clear_message(pods: Pods) -> None:
    pods.create(
        pod_manifest(
            "needs-pvc",
            ["true"],
            containers=[
                container("main", ["true"], volumeMounts=[{"name": "data", "mountPath": "/d"}])
            ],
            volumes=[{"name": "data", "nfs": {"server": "192.0.2.1", "path": "/export"}}],
        )
    )
    pod = pods.wait_phase("needs-pvc", "Failed")
    assert pod["status"]["reason"] == "UnsupportedPodSpec"
    assert "volume 'data' of type nfs" in pod["status"]["message"]


def test_image_without_known_entrypoint_waits_with_create_container_error(pods: Pods) -> None:
    manifest = pod_manifest("no-command")
    del manifest["spec"]["containers"][0]["command"]
    manifest["spec"]["containers"][0]["image"] = "example.com/unknown:1"
    pods.create(manifest)
    pod = pods.wait(
        "no-command",
        lambda p: waiting_reason(p) == "CreateContainerError",
        "CreateContainerError",
    )
    assert pod["status"]["phase"] == "Pending"
    assert "no entrypoint known" in container_status(pod)["state"]["waiting"]["message"]


def test_container_environment_files_and_identity(
    pods: Pods, core_v1: Any, kubectl: Kubectl, namespace: str, local_cluster: LocalCluster
) -> None:
    core_v1.create_namespaced_config_map(
        namespace, {"metadata": {"name": "settings"}, "data": {"MODE": "fast", "file.txt": "x1"}}
    )
    core_v1.create_namespaced_secret(
        namespace, {"metadata": {"name": "creds"}, "stringData": {"password": "hunter2"}}
    )
    script = (
        'echo "host=$HOSTNAME ip=$POD_IP node=$NODE mode=$MODE pw=$PW uid=$(id -u) '
        'path0=${PATH%%:*} cwd=$(pwd) api=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; '
        "cat /config/file.txt; echo; cat /podinfo/labels; echo; cat /init/from-init; "
        "hostname; grep -c main-host /etc/hosts"
    )
    pods.create(
        pod_manifest(
            "envy",
            labels={"tier": "test"},
            hostname="main-host",
            securityContext={"runAsUser": 1000, "runAsGroup": 1000},
            initContainers=[
                container(
                    "prepare",
                    ["sh", "-c", "echo initialized > /init/from-init"],
                    volumeMounts=[{"name": "shared", "mountPath": "/init"}],
                )
            ],
            containers=[
                container(
                    "main",
                    ["sh", "-c", script],
                    env=[
                        {
                            "name": "POD_IP",
                            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                        },
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {
                            "name": "PW",
                            "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}},
                        },
                    ],
                    envFrom=[{"configMapRef": {"name": "settings"}}],
                    volumeMounts=[
                        {"name": "config", "mountPath": "/config"},
                        {"name": "podinfo", "mountPath": "/podinfo"},
                        {"name": "shared", "mountPath": "/init"},
                    ],
                )
            ],
            volumes=[
                {"name": "config", "configMap": {"name": "settings"}},
                {
                    "name": "podinfo",
                    "downwardAPI": {
                        "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
                    },
                },
                {"name": "shared", "emptyDir": {}},
            ],
        )
    )
    pod = pods.wait_phase("envy", "Succeeded", "Failed")
    log = kubectl("logs", "-n", namespace, "envy").stdout
    assert pod["status"]["phase"] == "Succeeded", log
    first, config_file, labels, init_file, hostname, own_entries = log.splitlines()
    fields = dict(part.split("=", 1) for part in first.split())
    assert fields["host"] == "main-host"
    assert fields["ip"] == pod["status"]["podIP"]
    assert fields["node"] == local_cluster.node_name
    assert (fields["mode"], fields["pw"], fields["uid"]) == ("fast", "hunter2", "1000")
    assert fields["path0"].endswith("/.venv/bin")
    assert fields["cwd"] != "/"  # a per-pod scratch directory
    assert fields["api"] == local_cluster.api_url.removeprefix("https://")
    assert config_file == "x1"
    assert labels == 'tier="test"'
    assert init_file == "initialized"
    assert hostname == "main-host"
    assert own_entries == "1"
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert condition(pod, "Initialized")["status"] == "True"


def test_logs_follow_tail_and_timestamps(pods: Pods, kubectl: Kubectl, namespace: str) -> None:
    pods.create(
        pod_manifest(
            "counter", ["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; sleep 0.3; done"]
        )
    )
    pods.wait(
        "counter",
        lambda p: (
            "running" in container_status(p).get("state", {}) or p["status"]["phase"] == "Succeeded"
        ),
        "started",
    )
    followed = kubectl("logs", "-n", namespace, "counter", "-f", timeout=60).stdout
    assert followed.splitlines() == [f"line {i}" for i in range(1, 6)]
    pods.wait_phase("counter", "Succeeded")
    assert kubectl("logs", "-n", namespace, "counter", "--tail=2").stdout == "line 4\nline 5\n"
    stamped = kubectl("logs", "-n", namespace, "counter", "--timestamps").stdout.splitlines()
    assert len(stamped) == 5
    assert all(line.split(" ", 1)[0].endswith("Z") for line in stamped)
    assert stamped[0].split(" ", 1)[1] == "line 1"


def test_probes_drive_readiness_and_liveness_restarts(pods: Pods) -> None:
    pods.create(
        pod_manifest(
            "probed",
            restart_policy="Always",
            containers=[
                container(
                    "main",
                    ["sh", "-c", "sleep 1; touch /tmp/ready-$HOSTNAME; sleep 3600"],
                    readinessProbe={
                        "exec": {"command": ["sh", "-c", "test -f /tmp/ready-$HOSTNAME"]},
                        "periodSeconds": 1,
                    },
                ),
                container(
                    "web",
                    ["python", "-m", "http.server", "8080"],
                    ports=[{"name": "http", "containerPort": 8080}],
                    readinessProbe={"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
                ),
                container(
                    "listener",
                    [
                        "python",
                        "-c",
                        "import socket, time; s = socket.create_server(('', 2222)); time.sleep(99)",
                    ],
                    readinessProbe={"tcpSocket": {"port": 2222}, "periodSeconds": 1},
                ),
                container(
                    "doomed",
                    ["sleep", "3600"],
                    livenessProbe={
                        "exec": {"command": ["false"]},
                        "periodSeconds": 1,
                        "failureThreshold": 1,
                    },
                ),
            ],
        )
    )
    pod = pods.wait(
        "probed",
        lambda p: (
            all(container_status(p, c).get("ready") for c in ("main", "web", "listener"))
            and container_status(p, "doomed").get("restartCount", 0) >= 1
        ),
        "probed containers ready and doomed restarted",
    )
    assert container_status(pod, "main")["restartCount"] == 0
    unhealthy = pods.wait_event("probed", "Unhealthy")
    assert unhealthy["message"].startswith("Liveness probe failed")
