"""The local cluster's pure pieces: versions and cache layout, the node's configuration
files, its private mounts, kernel settings, cgroups, image inputs, addresses."""

from __future__ import annotations

import importlib
import ipaddress
import os
import pkgutil
import re
import socket
import subprocess
from pathlib import Path

import pytest
import tomli_w
import yaml
from support.cluster import namespace_name
from support.waiting import wait_until

import tfjob_localcluster
from tfjob_localcluster import checkout, waiting
from tfjob_localcluster.addons import kueue
from tfjob_localcluster.binaries import (
    Binaries,
    MissingBinaryError,
    Tool,
    nodetools_version,
    parse_tools,
    parse_versions,
    tool_dir,
    tools,
)
from tfjob_localcluster.checkout import ROOT
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host import capabilities, cgroups, network, ports, private_run, procs
from tfjob_localcluster.host import state as hoststate
from tfjob_localcluster.images import catalog, engine
from tfjob_localcluster.local import bootstrap
from tfjob_localcluster.local.node import files, tunables
from tfjob_localcluster.local.node.config import NodeConfig
from tfjob_localcluster.local.node.mounts import inside, outermost

pytestmark = pytest.mark.unit


def node_config(**changes: object) -> NodeConfig:
    settings: dict[str, object] = {
        "node_name": "n",
        "state_dir": "/state/node",
        "logs_dir": "/state/logs",
        "host_link": "tfj3-n0p",
        "node_address": "10.212.3.2/24",
        "gateway": "10.212.3.1",
        "pod_subnet": "10.213.3.0/24",
        "cgroup_root": "/tfjob-localcluster-3",
        "cluster_dns": "10.96.0.10",
        "cluster_domain": "cluster.local",
        "kubelet_kubeconfig": "/state/kubelet.kubeconfig",
        "kube_proxy_kubeconfig": "/state/kube-proxy.kubeconfig",
        "serving_cert": "/state/pki/kubelet-serving.crt",
        "serving_key": "/state/pki/kubelet-serving.key",
        "client_ca": "/state/pki/ca.crt",
        "kubelet": "/cache/kubelet",
        "kube_proxy": "/cache/kube-proxy",
        "gpu_device_plugin": "/cache/gpu-device-plugin",
        "gpu_count": 4,
        "sandbox_image": catalog.PAUSE,
        "runtime_binary": "runc",
        "keep_visible": ["/state"],
    }
    settings.update(changes)
    return NodeConfig(**settings)  # type: ignore[arg-type]


def test_versions_env_parsing_and_cache_layout(tmp_path: Path) -> None:
    versions = parse_versions("# comment\nKUBERNETES_VERSION=v1.34.4\n\nETCD_VERSION=v3.5.21\n")
    assert versions == {"KUBERNETES_VERSION": "v1.34.4", "ETCD_VERSION": "v3.5.21"}
    with pytest.raises(ValueError, match="line 1"):
        parse_versions("not a pair")
    assert tool_dir("etcd", versions, tmp_path) == tmp_path / "bin" / "etcd-v3.5.21"
    missing = Binaries(versions, tmp_path)
    with pytest.raises(MissingBinaryError, match="make binaries"):
        _ = missing.etcd


def test_the_build_script_and_the_cluster_find_every_tool_in_the_same_place(
    tmp_path: Path,
) -> None:
    """Both read hack/go-tools.txt; the node tools are versioned by the digest of their
    sources the script computes."""
    assert set(tools()) >= {"kubernetes", "etcd", "kueue", "nodetools"}
    for tool in tools():
        printed = subprocess.run(
            [str(checkout.ROOT / "hack" / "build-binaries.sh"), "--print-dir", tool],
            capture_output=True,
            text=True,
            check=True,
            env={"TFJOB_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"},
        ).stdout.strip()
        assert printed == str(tool_dir(tool, cache=tmp_path)), tool
    assert tool_dir("nodetools", cache=tmp_path).name == f"nodetools-{nodetools_version()}"
    unknown = subprocess.run(
        [str(checkout.ROOT / "hack" / "build-binaries.sh"), "--print-dir", "kubeflow"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert unknown.returncode == 2
    assert "unknown tool 'kubeflow' (kubernetes, etcd" in unknown.stderr


def test_the_tools_table_names_each_tools_version_and_binaries() -> None:
    table = parse_tools(
        "# name version recipe binaries\n"
        "kueue  KUEUE_VERSION  module:sigs.k8s.io/kueue  kueue=sigs.k8s.io/kueue/cmd/kueue\n"
        "\n"
        "nodetools  -  nodetools  pause gpu-device-plugin\n"
    )
    assert table == {
        "kueue": Tool("kueue", "KUEUE_VERSION", ("kueue",)),
        "nodetools": Tool("nodetools", "", ("pause", "gpu-device-plugin")),
    }
    with pytest.raises(ValueError, match="line 1 names no binary"):
        parse_tools("kind KIND_VERSION install")
    # Every versioned tool's version is pinned.
    pinned = parse_versions(checkout.VERSIONS_ENV.read_text())
    assert all(tool.version_key in pinned for tool in tools().values() if tool.version_key)


def test_containerd_serves_cri_with_cni_and_only_the_needed_runtime_wrapper() -> None:
    plain = files.containerd_config(node_config())
    cri = plain["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == catalog.PAUSE
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/state/node/cni"}
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["options"] == {"SystemdCgroup": False}
    # Nothing may default to a host path: /opt/containerd is the opt plugin's default.
    assert plain["plugins"]["io.containerd.internal.v1.opt"]["path"].startswith("/var/lib/")
    wrapped = files.containerd_config(node_config(runtime_binary="/x/runc-wrapper"))
    options = wrapped["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]
    assert options["options"]["BinaryName"] == "/x/runc-wrapper"
    assert "version = 2" in tomli_w.dumps(wrapped)


def test_kubelet_keeps_its_pods_in_the_clusters_cgroup_and_never_evicts_for_host_disk() -> None:
    config = files.kubelet_config(node_config())
    assert config["cgroupRoot"] == "/tfjob-localcluster-3"
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["clusterDNS"] == ["10.96.0.10"]
    assert config["imageGCHighThresholdPercent"] == 100
    assert config["evictionHard"]["nodefs.available"] == "0%"
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["tlsCertFile"] == "/state/pki/kubelet-serving.crt"
    assert config["volumePluginDir"].startswith("/var/lib/kubelet/")
    args = files.kubelet_args(node_config(), "/state/node/kubelet.yaml")
    assert "--node-ip=10.212.3.2" in args
    assert "--hostname-override=n" in args


def test_pods_get_addresses_of_the_node_subnet_and_kube_proxy_leaves_conntrack_alone() -> None:
    (bridge, portmap) = files.cni_conflist(node_config().pod_subnet)["plugins"]
    assert bridge["type"] == "bridge"
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.213.3.0/24"}]]
    assert bridge["hairpinMode"] is True
    assert portmap["capabilities"] == {"portMappings": True}
    proxy = files.kube_proxy_config(node_config())
    assert proxy["mode"] == "iptables"
    assert proxy["clusterCIDR"] == "10.213.3.0/24"
    assert proxy["conntrack"]["maxPerCore"] == 0
    assert files.resolv_conf(node_config()) == "nameserver 10.212.3.1\n"


def test_a_private_run_keeps_visible_the_paths_its_command_names() -> None:
    argv = [
        "dockerd", "--data-root=/cache/docker/data", "--host=unix:///cache/docker/d.sock",
        "--bridge=none", "debootstrap", "bookworm", "/cache/base/rootfs",
        "http://deb.debian.org/debian",
    ]  # fmt: skip
    assert private_run.paths_in(argv) == [
        "/cache/docker/data",
        "/cache/docker/d.sock",
        "/cache/base/rootfs",
    ]


def test_paths_kept_visible_are_the_outermost_ones() -> None:
    kept = outermost(["/tmp/a/b", "/tmp/a", "/tmp/ab", "/var/x/", "/tmp/a/../c"])
    assert kept == ["/tmp/a", "/tmp/ab", "/tmp/c", "/var/x"]
    assert inside("/tmp/a/b", "/tmp/a")
    assert not inside("/tmp/ab", "/tmp/a")


def test_only_the_kubelet_tunables_that_differ_get_a_private_copy(tmp_path: Path) -> None:
    for name, value in tunables.KUBELET_TUNABLES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"{value}\n")
    (tmp_path / "vm/overcommit_memory").write_text("0\n")
    (tmp_path / "kernel/panic").write_text("1\n")
    assert tunables.differing(tmp_path) == {"vm/overcommit_memory": 0, "kernel/panic": 1}


def test_cgroup_hierarchies_are_read_from_mountinfo() -> None:
    mountinfo = (
        "30 23 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "31 30 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "40 30 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
        "50 23 0:40 / /proc rw - proc proc rw\n"
    )
    assert cgroups.hierarchies(mountinfo) == [
        Path("/sys/fs/cgroup/memory"),
        Path("/sys/fs/cgroup/unified"),
    ]
    assert cgroups.root_name(3) == "/tfjob-localcluster-3"


def test_the_runtime_workaround_is_chosen_from_the_bounding_set() -> None:
    assert capabilities.lacks_sys_resource("CapBnd:\t000001fffeffffff\n")
    assert not capabilities.lacks_sys_resource("CapBnd:\t000001ffffffffff\n")
    assert checkout.RUNTIME_WRAPPER.exists()


def test_an_engine_of_plain_runc_is_used_for_kind_only_where_the_bounding_set_allows() -> None:
    without, full = "CapBnd:\t000001fffeffffff\n", "CapBnd:\t000001ffffffffff\n"
    assert not engine.starts_privileged("runc", without)
    assert engine.starts_privileged("runc", full)
    assert engine.starts_privileged(engine.RUNTIME_NAME, without)


def test_image_digests_follow_the_dockerfile_its_copied_files_and_the_base() -> None:
    operator = catalog.spec_of(catalog.OPERATOR)
    assert catalog.default_base(operator.dockerfile).startswith("python:3.11")
    assert operator.uses_base
    assert not catalog.spec_of(catalog.PAUSE).uses_base
    sources = catalog.copy_sources(operator.dockerfile)
    assert "operator/src" in sources
    assert all(not s.startswith("/opt") for s in sources), "COPY --from lines are not inputs"
    inputs = catalog.context_files(operator)
    assert ROOT / "operator" / "src" / "tfjob_operator" / "decide" / "flow.py" in inputs
    assert ROOT / "trainer" / "src" / "tfjob_trainer" / "cli.py" not in inputs
    assert catalog.digest(operator, "base-a") != catalog.digest(operator, "base-b")
    assert catalog.digest(operator, "base-a") == catalog.digest(operator, "base-a")


def test_a_slot_fixes_addresses_and_names_that_fit_interface_limits() -> None:
    net = network.ClusterNetwork(
        255,
        ipaddress.IPv4Network("10.213.255.0/24"),
        ipaddress.IPv4Network("10.212.255.0/24"),
    )
    assert (str(net.gateway), str(net.node_ip), net.node_address) == (
        "10.212.255.1",
        "10.212.255.2",
        "10.212.255.2/24",
    )
    assert max(len(net.host_link), len(net.node_link)) <= 15


def test_coredns_answers_cluster_names_at_the_kube_dns_address() -> None:
    objects = dict(
        (obj["kind"], obj) for _, obj in bootstrap.coredns(catalog.COREDNS, "10.96.0.10", "c.local")
    )
    assert objects["Service"]["spec"]["clusterIP"] == "10.96.0.10"
    assert "kubernetes c.local in-addr.arpa" in objects["ConfigMap"]["data"]["Corefile"]
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == catalog.COREDNS


def test_ports_handed_out_are_free_distinct_and_outside_the_kernels_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    low, high = ports._ephemeral()
    picked = [*ports.free_ports("127.0.0.1", 20), ports.free_port("127.0.0.1")]
    assert len(set(picked)) == 21
    assert all(p in ports.DRAWN_FROM and not low <= p <= high for p in picked), picked

    # A port something listens on is passed over; once all are handed out, they come again.
    held, probe = socket.socket(), socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    probe.bind(("127.0.0.1", 0))
    taken, free = held.getsockname()[1], probe.getsockname()[1]
    probe.close()
    try:
        monkeypatch.setattr(ports, "_ephemeral", lambda: (0, 0))
        monkeypatch.setattr(ports, "_handed_out", set())
        monkeypatch.setattr(ports, "DRAWN_FROM", [taken, free])
        assert [ports.free_port("127.0.0.1") for _ in range(2)] == [free, free]
        monkeypatch.setattr(ports, "DRAWN_FROM", [taken])
        with pytest.raises(
            OSError, match=re.escape(f"no free port left on 127.0.0.1 in [{taken}]")
        ):
            ports.free_port("127.0.0.1")
    finally:
        held.close()


def test_every_error_the_local_cluster_raises_derives_from_one_base() -> None:
    package = tfjob_localcluster.__path__
    modules = [
        importlib.import_module(found.name)
        for found in pkgutil.walk_packages(package, "tfjob_localcluster.")
        if not found.name.endswith("__main__")
    ]
    errors = {
        f"{module.__name__}.{name}": value
        for module in modules
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == module.__name__
    }
    assert len(errors) > 20, sorted(errors)
    # A system call's failure stays an OSError, with its errno.
    others = [
        name
        for name, error in errors.items()
        if not issubclass(error, (LocalClusterError, OSError)) and error is not LocalClusterError
    ]
    assert others == []


def test_namespace_names() -> None:
    name = namespace_name("test_pod[Never-exit 3]")
    assert name.startswith("test-pod-never-exit-3-")
    assert len(namespace_name("x" * 200)) <= 63


def test_kueue_webhooks_are_kept_to_its_objects_and_the_tfjob_and_call_the_process() -> None:
    def webhook(name: str, group: str, resource: str) -> dict[str, object]:
        rules = [{"apiGroups": [group], "resources": [resource]}]
        service = {"name": "webhook-service", "namespace": "system", "path": f"/{name}"}
        return {"name": name, "clientConfig": {"service": service}, "rules": rules}

    manifest = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            webhook("mjob", "batch", "jobs"),
            webhook("mtfjob", "kubeflow.org", "tfjobs"),
            webhook("mworkload", "kueue.x-k8s.io", "workloads"),
        ],
    }
    (out,) = kueue.webhook_configurations([manifest], "https://127.0.0.1:9", b"CA", ["tfjobs"])
    assert out["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    assert [w["name"] for w in out["webhooks"]] == ["mtfjob", "mworkload"]
    assert out["webhooks"][0]["clientConfig"] == {
        "url": "https://127.0.0.1:9/mtfjob",
        "caBundle": "Q0E=",
    }


def test_kueue_crds_get_the_conversion_webhooks_its_kustomization_patches_in(
    tmp_path: Path,
) -> None:
    for name in ("workloads", "resourceflavors"):
        crd = {"metadata": {"name": f"{name}.kueue.x-k8s.io"}, "spec": {}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(crd))
        patch = {"metadata": {"name": f"{name}.kueue.x-k8s.io"}}
        (tmp_path / f"webhook_in_{name}.yaml").write_text(yaml.safe_dump(patch))
    # The resourceflavors patch is commented out, as in Kueue's kustomization.
    (tmp_path / "kustomization.yaml").write_text(
        "resources: [workloads.yaml, resourceflavors.yaml]\n"
        "patches:\n- path: webhook_in_workloads.yaml\n#- path: webhook_in_resourceflavors.yaml\n"
    )
    workloads, flavors = kueue.crds(tmp_path, "https://127.0.0.1:9", b"CA")
    webhook = workloads["spec"]["conversion"]["webhook"]
    assert webhook["clientConfig"]["url"] == "https://127.0.0.1:9/convert"
    assert "conversion" not in flavors["spec"]


def test_kueue_runs_without_certificate_management_and_both_tfjob_routes() -> None:
    config = kueue.configuration(9443, 8081, Path("/state/certs"), kubeflow_integration=False)
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 9443, "certDir": "/state/certs"}
    assert config["integrations"] == {
        "frameworks": ["batch/job"],
        "externalFrameworks": ["TFJob.v1.tfjob.dev", "TFJob.v1.kubeflow.org"],
    }
    assert config["leaderElection"] == {"leaderElect": False}
    kept = kueue.configuration(9443, 8081, Path("/state/certs"), kubeflow_integration=True)
    assert kept["integrations"] == {
        "frameworks": ["batch/job", "kubeflow.org/tfjob"],
        "externalFrameworks": ["TFJob.v1.tfjob.dev"],
    }


def test_a_private_run_command_enters_a_mount_namespace_then_this_module() -> None:
    plain = private_run.command(["dockerd", "--data-root=/d"])
    assert plain[:3] == ["unshare", "--mount", "--propagation=private"]
    assert plain[4:] == ["-m", "tfjob_localcluster.host.private_run", "dockerd", "--data-root=/d"]
    overlaid = private_run.command(["kueue"], Path("/state/etc"))
    assert overlaid[-2:] == ["--etc-upper=/state/etc", "kueue"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace needs root")
def test_a_private_runs_bind_takes_what_the_command_writes_there(tmp_path: Path) -> None:
    probe = f"probe-{os.getpid()}"
    write = ["sh", "-c", f"echo written > /var/tmp/{probe}"]
    subprocess.run(private_run.command(write, binds={"/var/tmp": tmp_path}), check=True)
    assert (tmp_path / probe).read_text() == "written\n"
    assert not (Path("/var/tmp") / probe).exists()


def test_children_named_finds_a_child_by_its_command_name_until_it_exits() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        found = wait_until(
            lambda: procs.children_named(os.getpid(), "sleep"),
            5,
            "the child to have exec'd sleep",
            interval=0.01,
        )
        assert [identity.pid for identity in found] == [child.pid]
        assert procs.children_named(os.getpid(), "kubelet") == []
    finally:
        child.kill()
        child.wait()
    assert procs.children_named(os.getpid(), "sleep") == []


def test_a_wait_returns_what_was_ready_stops_when_told_and_says_what_did_not_happen() -> None:
    answers = iter([None, 0, "up"])
    rounds: list[int] = []
    assert waiting.wait_until(lambda: next(answers), 5, AssertionError, interval=0.01) == "up"

    def stop_at_third() -> None:
        rounds.append(1)
        if len(rounds) == 3:
            raise LocalClusterError("it exited")

    with pytest.raises(LocalClusterError, match="it exited"):
        waiting.wait_until(lambda: False, 5, AssertionError, each=stop_at_third, interval=0.01)
    with pytest.raises(TimeoutError, match="nothing came"):
        waiting.wait_until(lambda: False, 0.05, lambda: TimeoutError("nothing came"))


def test_a_wait_on_a_process_ends_when_it_exits_with_the_end_of_its_log(tmp_path: Path) -> None:
    quits = procs.ManagedProcess(
        "quitter", ["sh", "-c", "echo bye; sleep 1; exit 3"], tmp_path / "q.log"
    )
    quits.start()
    with pytest.raises(ValueError, match=r"(?s)quitter exited; last lines of .*q\.log:\n.*bye"):
        quits.wait_ready(lambda: False, 60, ValueError)
    sleeps = procs.ManagedProcess("sleeper", ["sleep", "30"], tmp_path / "s.log")
    sleeps.start()
    try:
        with pytest.raises(LocalClusterError, match=r"sleeper was not ready in 0.2s \(its port\)"):
            sleeps.wait_ready(lambda: False, 0.2, what="its port")
    finally:
        sleeps.stop(grace=1)
    quits.stop()


def test_a_failed_tools_output_is_shown_by_its_end() -> None:
    assert procs.failure_excerpt("short\n") == "short\n"
    progress = "".join(f"Copying blob {n}\n" for n in range(1000))
    assert procs.failure_excerpt(progress, limit=100) == progress[-100:]


def test_a_go_crash_is_shown_from_its_reason_and_failing_goroutine() -> None:
    reason = "panic: runtime error: invalid memory address or nil pointer dereference\n"
    failing = "goroutine 1 [running]:\nmain.newTarFilterer(...)\n"
    others = "".join(f"goroutine {n} [select]:\nruntime.gopark(...)\n" for n in range(2, 500))
    output = "STEP 3/9: RUN pip install\n" + reason + failing + others + "exit status 2\n"
    shown = procs.failure_excerpt(output, limit=400)
    assert shown.startswith(reason + failing)
    assert shown.endswith("runtime.gopark(...)\nexit status 2\n")
    skipped = len(output) - output.index(reason) - 400
    assert f"\n[... {skipped} characters ...]\n" in shown
    # A crash that the end shows anyway is shown as the end.
    late = "x" * 1000 + reason + failing
    assert procs.failure_excerpt(late, limit=400) == late[-400:]


def test_a_kind_runs_host_comparison_leaves_out_what_local_clusters_hold() -> None:
    state = hoststate.HostState(
        links=("eth0", "tfj1-n0", "br-kind"),
        routes=("default", "10.212.1.0/24", "10.213.1.0/24", "172.18.0.0/16"),
        mounts=("/",),
        cgroups=("/sys/fs/cgroup/cpu/tfjob-localcluster-1",),
        entries=("/run/lock",),
        firewall=(),
        sysctls=(),
    )
    left = hoststate.without_local_clusters(state)
    assert left.links == ("eth0", "br-kind")
    assert left.routes == ("default", "172.18.0.0/16")
    assert left.cgroups == ()
    assert (left.mounts, left.entries) == (state.mounts, state.entries)
