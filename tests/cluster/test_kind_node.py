"""The kind node image's pure pieces: which images it preloads, its default CNI and storage
manifests, the component images' inputs, and how containerd and `docker save` name catalog."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfjob_localcluster import checkout
from tfjob_localcluster.images import catalog
from tfjob_localcluster.kind import nodeimage
from tfjob_localcluster.local import bootstrap

# `kubeadm config images list --kubernetes-version v1.34.4`.
KUBEADM_V1_34 = [
    "registry.k8s.io/kube-apiserver:v1.34.4",
    "registry.k8s.io/kube-controller-manager:v1.34.4",
    "registry.k8s.io/kube-scheduler:v1.34.4",
    "registry.k8s.io/kube-proxy:v1.34.4",
    "registry.k8s.io/coredns/coredns:v1.12.1",
    "registry.k8s.io/pause:3.10.1",
    "registry.k8s.io/etcd:3.6.5-0",
]


@pytest.mark.unit
def test_the_node_preloads_what_kubeadm_runs_the_cni_image_and_the_provisioner() -> None:
    preloaded = nodeimage.preloaded_images(KUBEADM_V1_34)
    assert preloaded == [*KUBEADM_V1_34, nodeimage.CNI_IMAGE, catalog.LOCAL_PATH_PROVISIONER]
    assert all(catalog.spec_of(reference) for reference in preloaded)


@pytest.mark.unit
def test_kind_applies_a_default_storage_class_whose_provisioner_and_helper_are_preloaded() -> None:
    documents = list(yaml.safe_load_all(nodeimage.default_storage_manifest()))
    by_kind = {d["kind"]: d for d in documents}
    storage_class = by_kind["StorageClass"]
    annotations = storage_class["metadata"]["annotations"]
    assert annotations["storageclass.kubernetes.io/is-default-class"] == "true"
    assert storage_class["provisioner"] == bootstrap.LOCAL_PATH_NAME
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"
    container = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    helper = yaml.safe_load(by_kind["ConfigMap"]["data"]["helperPod.yaml"])
    preloaded = nodeimage.preloaded_images(KUBEADM_V1_34)
    assert container["image"] in preloaded
    assert helper["spec"]["containers"][0]["image"] in preloaded
    paths = json.loads(by_kind["ConfigMap"]["data"]["config.json"])["nodePathMap"]
    assert paths == [
        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [bootstrap.LOCAL_PATH_ROOT]}
    ]


@pytest.mark.unit
def test_an_image_kubeadm_runs_that_is_not_built_here_is_named() -> None:
    moved = [*KUBEADM_V1_34[:-1], "registry.k8s.io/etcd:3.7.0-0"]
    with pytest.raises(nodeimage.NodeImageError, match=r"etcd:3\.7\.0-0.*ETCD_VERSION"):
        nodeimage.preloaded_images(moved)


@pytest.mark.integration
def test_the_pinned_kubeadm_runs_only_images_built_here() -> None:
    nodeimage.preloaded_images(nodeimage.kubeadm_images())


def applied_cni(pod_subnet: str) -> dict[str, Any]:
    """The default CNI manifest as kind applies it: the pod subnet filled in."""
    manifest = nodeimage.default_cni_manifest()
    assert nodeimage.KIND_TEMPLATE_MARKER in manifest
    document: dict[str, Any] = yaml.safe_load(manifest.replace("{{ .PodSubnet }}", pod_subnet))
    return document


@pytest.mark.unit
def test_the_default_cni_writes_a_bridge_over_the_clusters_pod_subnet() -> None:
    daemonset = applied_cni("10.244.0.0/16")
    assert (daemonset["kind"], daemonset["metadata"]["namespace"]) == ("DaemonSet", "kube-system")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True, "it runs before the pod network exists"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    (container,) = pod["containers"]
    assert container["image"] == nodeimage.CNI_IMAGE
    conflist = json.loads(next(e["value"] for e in container["env"] if e["name"] == "CONFLIST"))
    bridge, portmap = conflist["plugins"]
    assert bridge["type"] == "bridge"
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.0.0/16"}]]
    assert portmap["type"] == "portmap"
    assert "/etc/cni/net.d/10-tfjob-bridge.conflist" in container["command"][-1]


@pytest.mark.unit
def test_component_images_are_digested_by_their_binary(tmp_path: Path) -> None:
    for name in ("kube-apiserver", "kube-scheduler"):
        (tmp_path / name).write_bytes(name.encode())
    dockerfile = checkout.IMAGES / "static-binary.Dockerfile"

    def spec(binary: str) -> catalog.ImageSpec:
        return catalog.ImageSpec(f"x/{binary}:1", dockerfile, tmp_path, (("BINARY", binary),))

    assert catalog.copy_sources(dockerfile, (("BINARY", "kube-apiserver"),)) == ["kube-apiserver"]
    assert catalog.context_files(spec("kube-scheduler")) == [tmp_path / "kube-scheduler"]
    assert catalog.digest(spec("kube-apiserver"), "none") != catalog.digest(
        spec("kube-scheduler"), "none"
    )
    before = catalog.digest(spec("kube-apiserver"), "none")
    (tmp_path / "kube-apiserver").write_bytes(b"rebuilt")
    assert catalog.digest(spec("kube-apiserver"), "none") != before


@pytest.mark.unit
@pytest.mark.parametrize(
    ("docker", "containerd"),
    [
        ("busybox:1.35.0", "docker.io/library/busybox:1.35.0"),
        ("kindest/node:v1.34.0", "docker.io/kindest/node:v1.34.0"),
        ("registry.k8s.io/pause:3.10.1", "registry.k8s.io/pause:3.10.1"),
        ("localhost/x:1", "localhost/x:1"),
        ("127.0.0.1:5000/x:1", "127.0.0.1:5000/x:1"),
    ],
)
def test_containerd_names_images_fully_qualified(docker: str, containerd: str) -> None:
    assert nodeimage._containerd_name(docker) == containerd


def saved(tmp_path: Path, config: str) -> Path:
    """A `docker save` tar holding only its manifest."""
    tar = tmp_path / "image.tar"
    manifest = json.dumps([{"Config": config, "RepoTags": ["x:1"], "Layers": []}]).encode()
    with tarfile.open(tar, "w") as archive:
        member = tarfile.TarInfo("manifest.json")
        member.size = len(manifest)
        archive.addfile(member, io.BytesIO(manifest))
    return tar


@pytest.mark.unit
@pytest.mark.parametrize("config", ["ab12.json", "blobs/sha256/ab12"])
def test_a_saved_images_id_is_read_from_its_manifest(tmp_path: Path, config: str) -> None:
    """Docker 20.10 names the config `<id>.json`; Docker 25 and later save OCI layouts."""
    assert catalog._tar_image_id(saved(tmp_path, config)) == "sha256:ab12"
