"""The kind node image: the published one where it can be had, else one assembled here.

kind's own `kind build node-image` pulls its base image and every image it does not
build (etcd, CoreDNS, pause, its CNI) from registries, so where none answers it cannot
finish. The same image is then assembled from parts built here, in two steps:

1. The node's filesystem, localcluster/images/kind-node.Dockerfile FROM the project's base
   (catalog.py), with a staged context: the files of kind's base image read from the
   `sigs.k8s.io/kind` module of the pinned kind (`go mod download`, nothing of kind's is
   kept in this repository), the kubelet, kubeadm and kubectl of hack/build-binaries.sh,
   the runtime wrapper of localcluster/runtime, localcluster/kind/node, the default CNI manifest
   (`default_cni_manifest`) and the default StorageClass's (bootstrap.py), which kind
   applies from /kind/manifests as it does its own node images'. It is cached as a tar
   like every image of catalog.py.
2. The images kubeadm runs (`kubeadm config images list`), the sandbox image, the
   CNI's and the volume provisioner's, each built by catalog.py, are imported into the
   node's containerd as kind's build does: a container of step 1's image runs
   containerd, `ctr images import --no-unpack` takes each tar, and `docker commit` sets
   kind's entrypoint.

The result is `tfjob.dev/kind-node:<Kubernetes version>`, labelled with a digest of
its inputs, kept in the Docker engine and rebuilt only when an input changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from tfjob_localcluster import gomodule
from tfjob_localcluster.binaries import cache_root, locate, read_versions
from tfjob_localcluster.checkout import IMAGES, RUNTIME_WRAPPER
from tfjob_localcluster.checkout import KIND_NODE_FILES as NODE_FILES
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.images import catalog
from tfjob_localcluster.images.engine import DockerCommandError, DockerEngine
from tfjob_localcluster.local import bootstrap
from tfjob_localcluster.local.node.files import cni_conflist
from tfjob_localcluster.local.node.tunables import KUBELET_TUNABLES
from tfjob_localcluster.waiting import wait_until

REFERENCE = f"tfjob.dev/kind-node:{read_versions()['KUBERNETES_VERSION']}"
BASE_REFERENCE = f"tfjob.dev/kind-node-base:{read_versions()['KUBERNETES_VERSION']}"
DIGEST_LABEL = "tfjob.dev/kind-node-digest"
DOCKERFILE = IMAGES / "kind-node.Dockerfile"
# kind's marker for a CNI manifest it fills in ({{ .PodSubnet }}) before applying it.
KIND_TEMPLATE_MARKER = "would you kindly template this file"
CNI_IMAGE = catalog.BUSYBOX
CONTAINERD_READY_TIMEOUT = 60.0


class NodeImageError(LocalClusterError):
    pass


def kind_module_dir() -> Path:
    """The `sigs.k8s.io/kind` module of the pinned kind, from the Go module cache."""
    try:
        return gomodule.module_dir("sigs.k8s.io/kind", read_versions()["KIND_VERSION"])
    except gomodule.ModuleError as error:
        raise NodeImageError(str(error)) from error


def kubeadm_images() -> list[str]:
    """The images `kubeadm init` runs for the pinned Kubernetes, as kubeadm names them."""
    binaries = locate("kubeadm")
    version = ("--kubernetes-version", binaries.kubernetes_version)
    done = subprocess.run(
        [str(binaries.kubeadm), "config", "images", "list", *version],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


def preloaded_images(required: list[str]) -> list[str]:
    """What the node's containerd holds at boot: kubeadm's images and the CNI's. Raises
    if kubeadm names an image catalog.py does not build (a Kubernetes upgrade that moved
    etcd's or CoreDNS's version: bump hack/versions.env)."""
    known = {*catalog.KUBEADM_IMAGES, *catalog.NODE_IMAGES}
    missing = sorted(set(required) - known)
    if missing:
        raise NodeImageError(
            f"kubeadm runs {', '.join(missing)}, which catalog.py does not build: "
            "align ETCD_VERSION / COREDNS_VERSION in hack/versions.env with kubeadm"
        )
    return [*required, CNI_IMAGE, catalog.LOCAL_PATH_PROVISIONER]


def default_cni_manifest() -> str:
    """/kind/manifests/default-cni.yaml: a DaemonSet that writes the local node's bridge
    network (node/files.py) on each node, with the pod subnet kind fills in. Every node
    takes addresses from the whole subnet and no routes join nodes: it serves the
    single-node clusters this project creates."""
    conflist = json.dumps(cni_conflist("{{ .PodSubnet }}", name="tfjob-bridge"), indent=2)
    target = "/etc/cni/net.d/10-tfjob-bridge.conflist"
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "tfjob-bridge-cni", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "tfjob-bridge-cni"}},
            "template": {
                "metadata": {"labels": {"app": "tfjob-bridge-cni"}},
                "spec": {
                    "hostNetwork": True,
                    "priorityClassName": "system-node-critical",
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "install",
                            "image": CNI_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "env": [{"name": "CONFLIST", "value": conflist}],
                            "command": [
                                "sh",
                                "-c",
                                f'printf "%s\\n" "$CONFLIST" > {target}.tmp && '
                                f"mv {target}.tmp {target} && echo wrote {target} && "
                                "exec sleep 2147483647",
                            ],
                            "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}},
                            "volumeMounts": [{"name": "cni", "mountPath": "/etc/cni/net.d"}],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "cni",
                            "hostPath": {"path": "/etc/cni/net.d", "type": "DirectoryOrCreate"},
                        }
                    ],
                },
            },
        },
    }
    header = (
        "# The default CNI of tfjob-operator's kind node image (kind/nodeimage.py).\n"
        f"# {KIND_TEMPLATE_MARKER}\n"
    )
    return header + yaml.safe_dump(daemonset, sort_keys=False)


def default_storage_manifest() -> str:
    """/kind/manifests/default-storage.yaml: kind applies it at creation, in place of the
    StorageClass without a provisioner it falls back on."""
    objects = bootstrap.local_path_storage(catalog.LOCAL_PATH_PROVISIONER, catalog.BUSYBOX)
    header = "# The default StorageClass of tfjob-operator's kind node image (bootstrap.py).\n"
    return header + yaml.safe_dump_all([obj for _, obj in objects], sort_keys=False)


def stage_context(directory: Path) -> Path:
    """The node image's build context, made afresh (see kind-node.Dockerfile)."""
    shutil.rmtree(directory, ignore_errors=True)
    _copy_tree(kind_module_dir() / "images" / "base" / "files", directory / "kind-base")
    binaries = locate("kubelet", "kubeadm", "kubectl")
    (directory / "bin").mkdir()
    for name in ("kubelet", "kubeadm", "kubectl"):
        _link_or_copy(binaries.path(name), directory / "bin" / name)
    _copy_tree(NODE_FILES, directory / "tfjob")
    (directory / "tfjob" / "default-cni.yaml").write_text(default_cni_manifest())
    (directory / "tfjob" / "default-storage.yaml").write_text(default_storage_manifest())
    (directory / "tfjob" / "kubelet-tunables").write_text(
        "".join(f"{name}={value}\n" for name, value in KUBELET_TUNABLES.items())
    )
    shutil.copyfile(RUNTIME_WRAPPER, directory / RUNTIME_WRAPPER.name)
    return directory


def base_spec(context: Path) -> catalog.ImageSpec:
    args = (("PAUSE", catalog.PAUSE), ("KUBERNETES_VERSION", read_versions()["KUBERNETES_VERSION"]))
    return catalog.ImageSpec(BASE_REFERENCE, DOCKERFILE, context, args)


def ensure(engine: DockerEngine, store: catalog.ImageStore, say: Callable[[str], None]) -> str:
    """The node image to create kind clusters from, in `engine`: the published one if the
    engine has it or can pull it, else this project's (assembled when its inputs changed)."""
    published = read_versions()["KIND_NODE_IMAGE"]
    if catalog.obtainable(engine, published):
        return published
    say(f"{published} cannot be pulled: using a node image assembled here ({REFERENCE})")
    preload = preloaded_images(kubeadm_images())
    tars = [b.tar for b in store.build(preload, engine)]
    context = stage_context(cache_root() / "kind-node" / "context")
    (base,) = store.build_specs([base_spec(context)], engine)
    digest = hashlib.sha256("\n".join([base.tar.name, *(t.name for t in tars)]).encode())
    wanted = digest.hexdigest()[:16]
    if _label(engine, REFERENCE) == wanted:
        return REFERENCE
    started = time.monotonic()
    store.load_into(engine, BASE_REFERENCE)
    replaced = catalog.image_id(engine, REFERENCE)
    _preload(engine, dict(zip(preload, tars, strict=True)), wanted, say)
    if replaced:
        engine.docker("image", "rm", "--no-prune", replaced, check=False)
    say(f"assembled {REFERENCE} in {time.monotonic() - started:.0f}s")
    return REFERENCE


def _preload(
    engine: DockerEngine, tars: dict[str, Path], digest: str, say: Callable[[str], None]
) -> None:
    """Imports each tar into the containerd of a container of the base image and commits
    that container as REFERENCE with kind's entrypoint."""
    container = engine.docker(
        "run", "--detach", "--network=none", "--security-opt", "seccomp=unconfined",
        "--entrypoint=sleep", BASE_REFERENCE, "infinity",
    ).strip()  # fmt: skip
    try:
        engine.docker("exec", "--detach", container, "containerd")

        def answers() -> bool:
            try:
                engine.docker("exec", container, "ctr", "version", timeout=10)
            except DockerCommandError:
                return False
            return True

        wait_until(
            answers,
            CONTAINERD_READY_TIMEOUT,
            lambda: NodeImageError(
                f"containerd in the build container did not answer in {CONTAINERD_READY_TIMEOUT:g}s"
            ),
            interval=0.5,
        )
        ctr = ("exec", "--interactive", container, "ctr", "--namespace=k8s.io")
        for reference, tar in tars.items():
            say(f"preloading {reference}")
            engine.docker(
                *ctr, "images", "import", "--all-platforms", "--no-unpack", "--digests", "-",
                input=tar.read_bytes(),
            )  # fmt: skip
            # kind pins the images it preloads, so the kubelet's image GC never removes them.
            pinned = "io.cri-containerd.pinned=pinned"
            engine.docker(*ctr, "images", "label", _containerd_name(reference), pinned)
        listed = set(engine.docker(*ctr, "images", "list", "--quiet").split())
        absent = [r for r in tars if _containerd_name(r) not in listed]
        if absent:
            raise NodeImageError(f"not in the node's containerd after import: {absent}")
        engine.docker("exec", container, "pkill", "containerd")
        engine.docker(
            "commit",
            "--change", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
            "--change", f"LABEL {DIGEST_LABEL}={digest}",
            container, REFERENCE,
        )  # fmt: skip
    finally:
        engine.docker("rm", "--force", "--volumes", container, check=False)


def _containerd_name(reference: str) -> str:
    """How containerd names an image Docker calls `reference`."""
    first = reference.split("/", 1)[0]
    if "/" in reference and ("." in first or ":" in first or first == "localhost"):
        return reference
    return f"docker.io/{reference if '/' in reference else 'library/' + reference}"


def _label(engine: DockerEngine, reference: str) -> str | None:
    try:
        labels = engine.docker("image", "inspect", "--format", "{{json .Config.Labels}}", reference)
    except DockerCommandError:
        return None
    found: dict[str, str] = json.loads(labels) or {}
    return found.get(DIGEST_LABEL)


def _copy_tree(source: Path, target: Path) -> None:
    """Copies files and directories with plain modes (the module cache's are read-only)."""
    for path in sorted(source.rglob("*")):
        destination = target / path.relative_to(source)
        if path.is_dir():
            destination.mkdir(parents=True, exist_ok=True)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)
            destination.chmod(0o755 if os.access(path, os.X_OK) else 0o644)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
        target.chmod(0o755)
