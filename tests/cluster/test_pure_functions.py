"""The process node's pure rules: phases, env expansion, DNS records, logs, quantities."""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
from pathlib import Path

import pytest

from tfjob_localcluster.binaries import Binaries, MissingBinaryError, parse_versions, tool_dir
from tfjob_localcluster.node.containers import Backoff, should_restart
from tfjob_localcluster.node.gpus import GpuAllocator, GpuUnavailableError, device_environment
from tfjob_localcluster.node.hosts import render, service_records, write_in_place
from tfjob_localcluster.node.logs import LogOptions, LogWriter, parse_line, stream_log
from tfjob_localcluster.node.podspec import (
    ContainerConfigError,
    CreateContainerError,
    PodRuntimeInfo,
    container_argv,
    container_environment,
    expand,
    image_repository,
)
from tfjob_localcluster.node.quantity import ceil_divide, parse_quantity
from tfjob_localcluster.node.status import ContainerRecord, PodSnapshot, pod_phase, waiting
from tfjob_localcluster.pytest_plugin import namespace_name

pytestmark = pytest.mark.unit

INFO = PodRuntimeInfo(
    pod_ip="10.213.0.7",
    host_ip="10.213.0.1",
    hostname="p",
    python_bin_dir="/venv/bin",
    api_host="10.213.0.1",
    api_port=6443,
    allocatable={"cpu": "32", "memory": "128Gi"},
)


def pod(**spec: object) -> dict:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u-1",
            "labels": {"app": "x"},
            "annotations": {"note": "hi"},
        },
        "spec": {"nodeName": "node", "serviceAccountName": "sa", "containers": [], **spec},
    }


def test_versions_env_parsing_and_cache_layout(tmp_path: Path) -> None:
    versions = parse_versions("# comment\nKUBERNETES_VERSION=v1.34.4\n\nETCD_VERSION=v3.5.21\n")
    assert versions == {"KUBERNETES_VERSION": "v1.34.4", "ETCD_VERSION": "v3.5.21"}
    with pytest.raises(ValueError, match="line 1"):
        parse_versions("not a pair")
    assert tool_dir("etcd", versions, tmp_path) == tmp_path / "bin" / "etcd-v3.5.21"
    missing = Binaries(versions, tmp_path)
    with pytest.raises(MissingBinaryError, match="make binaries"):
        _ = missing.etcd


def test_expansion_follows_kubernetes_rules() -> None:
    variables = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)", variables) == "1-two"
    assert expand("$(MISSING)", variables) == "$(MISSING)"
    assert expand("$$(A)", variables) == "$(A)"
    assert expand("cost: $5 $(A", variables) == "cost: $5 $(A"


def test_environment_resolves_field_resource_and_object_references() -> None:
    config_map = {"metadata": {"namespace": "ns"}, "data": {"LEVEL": "debug", "bad key": "x"}}
    secret = {"metadata": {"namespace": "ns"}, "data": {"token": base64.b64encode(b"s3").decode()}}
    main = {
        "name": "main",
        "resources": {"limits": {"cpu": "1500m"}},
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {
                "name": "MEM",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Gi"}},
            },
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
            {"name": "URL", "value": "http://$(IP):2222/$(NAME)"},
        ],
    }
    the_pod = pod(containers=[main])
    objects = {("configmaps", "cm"): config_map, ("secrets", "s"): secret}
    env = container_environment(the_pod, main, INFO, objects, {"HOME": "/root"})
    assert env["PATH"].startswith("/venv/bin:")
    assert env["KUBERNETES_SERVICE_HOST"] == "10.213.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert (env["NAME"], env["IP"], env["APP"], env["SA"]) == ("p", "10.213.0.7", "x", "sa")
    assert env["CPU"] == "2"  # 1.5 cores, rounded up
    assert env["MEM"] == "128"  # no limit: node allocatable
    assert env["TOKEN"] == "s3"
    assert env["CM_LEVEL"] == "debug"
    assert "CM_bad key" not in env
    assert env["URL"] == "http://10.213.0.7:2222/p"


def test_missing_config_map_is_a_config_error_unless_optional() -> None:
    main = {"name": "main", "envFrom": [{"configMapRef": {"name": "gone"}}]}
    with pytest.raises(ContainerConfigError, match='configmap "gone" not found'):
        container_environment(pod(containers=[main]), main, INFO, {("configmaps", "gone"): None})
    main["envFrom"][0]["configMapRef"]["optional"] = True
    env = container_environment(pod(containers=[main]), main, INFO, {("configmaps", "gone"): None})
    assert "gone" not in env


def test_entrypoints_come_from_command_or_image_mapping() -> None:
    entrypoints = {"tfjob-trainer": ["tfjob-train"]}
    with_command = {"name": "c", "image": "x", "command": ["echo", "$(A)"], "args": ["b"]}
    assert container_argv(with_command, {"A": "a"}, entrypoints) == ["echo", "a", "b"]
    by_image = {"name": "c", "image": "ghcr.io/org/tfjob-trainer:1.0", "args": ["--epochs=1"]}
    assert container_argv(by_image, {}, entrypoints) == ["tfjob-train", "--epochs=1"]
    unknown = {"name": "c", "image": "registry:5000/other:latest"}
    with pytest.raises(CreateContainerError, match="no entrypoint known"):
        container_argv(unknown, {}, entrypoints)
    assert image_repository("registry:5000/a/b:tag@sha256:00") == "registry:5000/a/b"


def record(state: dict, last: dict | None = None) -> ContainerRecord:
    return ContainerRecord("c", "i", state=state, last_state=last or {})


def done(code: int) -> dict:
    return {"terminated": {"exitCode": code}}


@pytest.mark.parametrize(
    ("policy", "states", "terminal", "phase"),
    [
        ("Never", [done(3)], False, "Failed"),
        ("Never", [done(0)], False, "Succeeded"),
        ("Never", [done(0), {"running": {}}], False, "Running"),
        ("OnFailure", [done(1)], False, "Running"),
        ("OnFailure", [done(0), done(0)], False, "Succeeded"),
        ("Always", [done(0)], False, "Running"),
        ("Always", [done(0)], True, "Succeeded"),
        ("Always", [done(137)], True, "Failed"),
        ("Always", [waiting("ContainerCreating")], False, "Pending"),
    ],
)
def test_phase_follows_kubelet(policy: str, states: list, terminal: bool, phase: str) -> None:
    snapshot = PodSnapshot(
        host_ip="h",
        pod_ip="p",
        start_time="t",
        sandbox_ready=True,
        init_containers=[],
        containers=[record(s) for s in states],
        terminal=terminal,
    )
    assert pod_phase({"restartPolicy": policy}, snapshot) == phase


def test_a_pod_the_node_fails_turns_failed_only_once_its_containers_stopped() -> None:
    running = PodSnapshot("h", "p", "t", True, [], [record({"running": {}})], failed=True)
    assert pod_phase({"restartPolicy": "Always"}, running) == "Running"
    stopped = PodSnapshot("h", "p", "t", True, [], [record(done(0))], terminal=True, failed=True)
    assert pod_phase({"restartPolicy": "Always"}, stopped) == "Failed"


def test_crash_loop_backoff_counts_stopped_containers_and_init_failures() -> None:
    backing_off = record(waiting("CrashLoopBackOff"), done(1))
    base = PodSnapshot("h", "p", "t", True, [], [backing_off])
    assert pod_phase({"restartPolicy": "OnFailure"}, base) == "Running"
    failed_init = PodSnapshot("h", "p", "t", True, [record(done(1))], [record(waiting("x"))])
    assert pod_phase({"restartPolicy": "Never"}, failed_init) == "Failed"
    assert pod_phase({"restartPolicy": "Always"}, failed_init) == "Pending"


def test_restart_backoff_is_immediate_then_exponential_and_capped() -> None:
    backoff = Backoff(initial=10, maximum=40)
    assert [backoff.next(1) for _ in range(5)] == [0, 10, 20, 40, 40]
    assert backoff.next(ran_for=100) == 0  # ran longer than twice the cap: reset
    assert should_restart("OnFailure", 1)
    assert not should_restart("OnFailure", 0)
    assert should_restart("Always", 0)
    assert not should_restart("Never", 1)


def test_dns_records_come_from_ready_endpoints_of_headless_services() -> None:
    services = [
        {"metadata": {"namespace": "ns", "name": "w"}, "spec": {"clusterIP": "None"}},
        {"metadata": {"namespace": "ns", "name": "api"}, "spec": {"clusterIP": "10.96.0.9"}},
    ]
    slices = [
        {
            "metadata": {"namespace": "ns", "labels": {"kubernetes.io/service-name": "w"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.2"], "hostname": "w-0", "conditions": {"ready": True}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": False}},
            ],
        },
        {
            "metadata": {"namespace": "ns", "labels": {"kubernetes.io/service-name": "api"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.4"], "conditions": {"ready": True}}],
        },
    ]
    records = service_records(services, slices, "cluster.local")
    names = {name: r.ip for r in records for name in r.names}
    assert names["w.ns.svc.cluster.local"] == "10.0.0.2"
    assert names["w.ns.svc"] == "10.0.0.2"
    assert names["w-0.w.ns.svc.cluster.local"] == "10.0.0.2"
    assert "10.0.0.3" not in names.values()  # not ready
    assert "10.0.0.4" not in names.values()  # a ClusterIP service: no proxy to route it
    same_namespace = render("10.0.0.9", ["me"], "ns", records)
    other_namespace = render("10.0.0.9", ["me"], "other", records)
    assert "10.0.0.9\tme\n" in same_namespace
    assert " w\n" in same_namespace
    assert " w\n" not in other_namespace


def test_hosts_rewrite_keeps_the_inode_and_never_leaves_stale_lines(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    write_in_place(hosts, "10.0.0.1 a-long-name-here\n10.0.0.2 b\n")
    inode = os.stat(hosts).st_ino
    write_in_place(hosts, "10.0.0.3 c\n")
    assert os.stat(hosts).st_ino == inode
    lines = hosts.read_text().splitlines()
    assert lines[0] == "10.0.0.3 c"
    assert all(line.startswith("#") or not line for line in lines[1:])


def test_log_files_serve_tail_timestamps_and_limits(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    writer = LogWriter(path)
    writer.write("stdout", b"one\ntwo\nthr")
    writer.write("stderr", b"err\n")
    writer.write("stdout", b"ee\n")
    writer.close()
    entries = [parse_line(line) for line in path.read_bytes().splitlines()]
    assert [(e.stream, e.content) for e in entries if e] == [
        ("stdout", b"one"),
        ("stdout", b"two"),
        ("stderr", b"err"),
        ("stdout", b"three"),
    ]

    def read(options: LogOptions) -> bytes:
        async def collect() -> bytes:
            return b"".join([chunk async for chunk in stream_log(path, options, lambda: True)])

        return asyncio.run(collect())

    assert read(LogOptions()) == b"one\ntwo\nerr\nthree\n"
    assert read(LogOptions(tail_lines=2)) == b"err\nthree\n"
    assert read(LogOptions(limit_bytes=5)) == b"one\nt"
    stamped = read(LogOptions(tail_lines=1, timestamps=True)).decode()
    when, text = stamped.split(" ", 1)
    assert text == "three\n"
    assert datetime.datetime.fromisoformat(when.replace("Z", "+00:00")[:26] + "+00:00")


def test_gpu_devices_are_never_shared() -> None:
    gpus = GpuAllocator(4)
    assert gpus.allocate("a", 1) == [0]
    assert gpus.allocate("b", 2) == [1, 2]
    with pytest.raises(GpuUnavailableError, match="Available: 1"):
        gpus.allocate("c", 2)
    gpus.release("a")
    assert gpus.allocate("c", 2) == [0, 3]
    assert device_environment([1, 2]) == {
        "NVIDIA_VISIBLE_DEVICES": "1,2",
        "CUDA_VISIBLE_DEVICES": "1,2",
    }


def test_quantities_and_namespace_names() -> None:
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("500m") * 2 == 1
    assert parse_quantity("2e3") == 2000
    assert ceil_divide("1537Mi", "1Gi") == 2
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity("12x")
    name = namespace_name("test_pod[Never-exit 3]")
    assert name.startswith("test-pod-never-exit-3-")
    assert len(namespace_name("x" * 200)) <= 63
