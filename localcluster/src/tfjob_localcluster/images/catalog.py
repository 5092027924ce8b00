"""The images the local cluster runs, built here from Dockerfiles and kept as tars.

- the project's: `operator/Dockerfile`, `trainer/Dockerfile` (and, opt-in, the same with
  `TRAINER_EXTRAS=gpu`), FROM the base their `ARG BASE` names (the official
  `python:3.11.*-slim-bookworm`), or, where no registry answers, FROM the equivalent
  made here (images/base.py), for the build machine's architecture, under the names the
  release publishes them by (tfjob_operator.published; `$TFJOB_REGISTRY`, the Makefile's
  `REGISTRY`, names another registry), so the chart and the examples run them as they are;
- the node's: `pause` and CoreDNS, FROM scratch with the binaries of
  hack/build-binaries.sh (localcluster/images/*.Dockerfile), under the names kubelet and kubeadm
  expect;
- `busybox` (Debian's busybox-static FROM scratch), for test pods that run shell
  commands and as the local-path-provisioner's helper;
- local-path-provisioner (its binary FROM scratch), the default StorageClass's
  provisioner (local/bootstrap.py);
- for a kind node (kind/nodeimage.py): the control-plane components, kube-proxy and etcd, under
  the names `kubeadm config images list` gives for the pinned Kubernetes.

Each image is saved (`docker save`) as a tar in `<cache>/images/`, named by a digest of
its inputs: the Dockerfile, the files its COPY lines take from the context, and the base.
`make images` builds what has no tar yet, and needs a Docker engine only then
(engine.py); the cluster imports the tars into its containerd without one. The index
(`index.json`) maps each image to its current tar and records which base was used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfjob_localcluster.binaries import cache_root, read_versions, tool_dir
from tfjob_localcluster.checkout import IMAGES as IMAGES_DIR
from tfjob_localcluster.checkout import ROOT as REPOSITORY
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.images import base as baseimage
from tfjob_localcluster.images.engine import DockerCommandError, DockerEngine
from tfjob_localcluster.images.platforms import host_architecture, platform_args
from tfjob_operator import published

PULL_TIMEOUT = 120
# Written by the context's COPY lines but never shaping the image.
IGNORED_PARTS = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")


class MissingImageError(LocalClusterError):
    pass


@dataclass(frozen=True)
class ImageSpec:
    reference: str
    dockerfile: Path
    # "repository" (the checkout), "images" (localcluster/images), the hack/build-binaries.sh
    # tool whose directory is the context, or a directory.
    context: str | Path = "repository"
    # --build-arg values (BASE aside), also substituted in the COPY lines.
    args: tuple[tuple[str, str], ...] = ()

    @property
    def uses_base(self) -> bool:
        return "\nARG BASE=" in self.dockerfile.read_text()

    def context_dir(self) -> Path:
        if isinstance(self.context, Path):
            return self.context
        if self.context == "repository":
            return REPOSITORY
        if self.context == "images":
            return IMAGES_DIR
        return tool_dir(self.context)


#: The registry the project's images are named under (and the chart installs from).
REGISTRY = os.environ.get("TFJOB_REGISTRY") or published.REGISTRY
OPERATOR = published.operator_image(REGISTRY)
TRAINER = published.trainer_image(REGISTRY)
TRAINER_GPU = published.trainer_image(REGISTRY, gpu=True)
BUSYBOX = "busybox:1.35.0"
PAUSE = "registry.k8s.io/pause:3.10.1"
COREDNS = f"registry.k8s.io/coredns/coredns:{read_versions()['COREDNS_VERSION']}"
_LOCAL_PATH = read_versions()["LOCAL_PATH_PROVISIONER_VERSION"]
LOCAL_PATH_PROVISIONER = f"docker.io/rancher/local-path-provisioner:{_LOCAL_PATH}"
_KUBERNETES = read_versions()["KUBERNETES_VERSION"]
KUBE_APISERVER = f"registry.k8s.io/kube-apiserver:{_KUBERNETES}"
KUBE_CONTROLLER_MANAGER = f"registry.k8s.io/kube-controller-manager:{_KUBERNETES}"
KUBE_SCHEDULER = f"registry.k8s.io/kube-scheduler:{_KUBERNETES}"
KUBE_PROXY = f"registry.k8s.io/kube-proxy:{_KUBERNETES}"
# kubeadm's tag for an etcd release: the version and a packaging revision.
ETCD = f"registry.k8s.io/etcd:{read_versions()['ETCD_VERSION'].removeprefix('v')}-0"


def _static_binary(reference: str, tool: str, binary: str) -> ImageSpec:
    dockerfile = IMAGES_DIR / "static-binary.Dockerfile"
    return ImageSpec(reference, dockerfile, tool, (("BINARY", binary),))


SPECS = (
    ImageSpec(PAUSE, IMAGES_DIR / "pause.Dockerfile", "nodetools"),
    ImageSpec(COREDNS, IMAGES_DIR / "coredns.Dockerfile", "coredns"),
    ImageSpec(BUSYBOX, IMAGES_DIR / "busybox.Dockerfile", "images"),
    _static_binary(LOCAL_PATH_PROVISIONER, "local-path-provisioner", "local-path-provisioner"),
    ImageSpec(OPERATOR, REPOSITORY / "operator" / "Dockerfile"),
    ImageSpec(TRAINER, REPOSITORY / "trainer" / "Dockerfile"),
    ImageSpec(
        TRAINER_GPU, REPOSITORY / "trainer" / "Dockerfile", args=(("TRAINER_EXTRAS", "gpu"),)
    ),
    _static_binary(KUBE_APISERVER, "kubernetes", "kube-apiserver"),
    _static_binary(KUBE_CONTROLLER_MANAGER, "kubernetes", "kube-controller-manager"),
    _static_binary(KUBE_SCHEDULER, "kubernetes", "kube-scheduler"),
    _static_binary(ETCD, "etcd", "etcd"),
    ImageSpec(KUBE_PROXY, IMAGES_DIR / "kube-proxy.Dockerfile", "kubernetes"),
)
#: What every node runs: the sandbox, cluster DNS, the default StorageClass's provisioner
#: and its helper (which makes and removes volume directories).
NODE_IMAGES = (PAUSE, COREDNS, LOCAL_PATH_PROVISIONER, BUSYBOX)
PROJECT_IMAGES = (OPERATOR, TRAINER)
#: What kubeadm runs on a kind node besides the node's own images.
KUBEADM_IMAGES = (KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KUBE_PROXY, ETCD)
#: What `make images` builds (the GPU trainer only when asked for).
DEFAULT_IMAGES = (*NODE_IMAGES, *PROJECT_IMAGES)


def spec_of(reference: str) -> ImageSpec:
    for spec in SPECS:
        if spec.reference == reference:
            return spec
    raise ValueError(f"unknown image {reference!r}; known: {[s.reference for s in SPECS]}")


def default_base(dockerfile: Path) -> str:
    """The default of the Dockerfile's `ARG BASE=...`."""
    match = re.search(r"^ARG BASE=(\S+)$", dockerfile.read_text(), re.MULTILINE)
    if match is None:
        raise ValueError(f"{dockerfile} has no `ARG BASE=<image>` line")
    return match.group(1)


def copy_sources(dockerfile: Path, args: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The context paths the Dockerfile's COPY lines read (not those `--from` a stage),
    with `${NAME}` of the build args substituted."""
    sources: list[str] = []
    text = dockerfile.read_text()
    for name, value in args:
        text = text.replace(f"${{{name}}}", value)
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].upper() != "COPY":
            continue
        flags = [w for w in words[1:] if w.startswith("--")]
        if any(flag.startswith("--from") for flag in flags):
            continue
        sources += [w for w in words[1:] if not w.startswith("--")][:-1]
    return sources


def context_files(spec: ImageSpec) -> list[Path]:
    context = spec.context_dir()
    found: set[Path] = set()
    for source in copy_sources(spec.dockerfile, spec.args):
        path = context / source
        if path.is_dir():
            found |= {p for p in path.rglob("*") if p.is_file()}
        elif path.exists():
            found.add(path)
        else:
            raise MissingImageError(f"{spec.dockerfile}: COPY source {source} not in {context}")
    return sorted(p for p in found if not set(p.relative_to(context).parts) & set(IGNORED_PARTS))


def digest(spec: ImageSpec, base: str) -> str:
    """What the image's tar is named by: the Dockerfile, its context files, the base."""
    hashed = hashlib.sha256(spec.dockerfile.read_bytes())
    hashed.update(base.encode() if spec.uses_base else b"")
    hashed.update(repr(spec.args).encode() if spec.args else b"")
    context = spec.context_dir()
    for path in context_files(spec):
        hashed.update(str(path.relative_to(context)).encode() + b"\0")
        hashed.update(path.read_bytes())
    return hashed.hexdigest()[:16]


def tar_name(spec: ImageSpec, base: str) -> str:
    slug = re.sub(r"[^a-z0-9.]+", "-", spec.reference.lower()).strip("-")
    return f"{slug}-{digest(spec, base)}.tar"


@dataclass(frozen=True)
class Built:
    reference: str
    tar: Path
    seconds: float  # 0 when the tar was already there

    @property
    def size(self) -> int:
        return self.tar.stat().st_size


class ImageStore:
    """The tars of `<cache>/images` and the builds that make them."""

    def __init__(self, directory: Path | None = None, say: Callable[[str], None] = print) -> None:
        self.directory = directory or cache_root() / "images"
        self.say = say
        self.index_path = self.directory / "index.json"

    def index(self) -> dict[str, Any]:
        try:
            loaded: dict[str, Any] = json.loads(self.index_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"base": "", "images": {}}
        return loaded

    def _record(self, base: str, reference: str, tar: Path) -> None:
        index = self.index()
        index["base"] = base
        index["images"][reference] = tar.name
        scratch = self.index_path.with_suffix(".tmp")
        scratch.write_text(json.dumps(index, indent=2, sort_keys=True))
        scratch.replace(self.index_path)

    def tar(self, reference: str) -> Path:
        """The tar of the image as last built; raises MissingImageError if there is none."""
        name = self.index()["images"].get(reference)
        path = self.directory / str(name) if name else None
        if path is None or not path.exists():
            raise MissingImageError(
                f"image {reference} is not built: run `make images` in the repository root"
            )
        return path

    def build(self, references: Iterable[str], engine: DockerEngine | None = None) -> list[Built]:
        """Builds each image whose inputs have no tar yet; returns all of them."""
        return self.build_specs([spec_of(reference) for reference in references], engine)

    def build_specs(
        self, specs: list[ImageSpec], engine: DockerEngine | None = None
    ) -> list[Built]:
        """`build` for specs of the caller's; in `engine` if given (else one is found)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        base = self.index()["base"]
        if base and all((self.directory / tar_name(s, base)).exists() for s in specs):
            for spec in specs:
                self._record(base, spec.reference, self.directory / tar_name(spec, base))
            return [Built(s.reference, self.directory / tar_name(s, base), 0.0) for s in specs]
        if engine is not None:
            base = self._base(engine, specs)
            return [self._build_one(engine, spec, base) for spec in specs]
        with DockerEngine(say=self.say) as found:
            base = self._base(found, specs)
            return [self._build_one(found, spec, base) for spec in specs]

    def _base(self, engine: DockerEngine, specs: list[ImageSpec]) -> str:
        """The base to build FROM: the Dockerfiles' default if present or pullable,
        else the one made here (imported into the engine when it lacks it)."""
        official = {default_base(s.dockerfile) for s in specs if s.uses_base}
        if not official:
            return self.index()["base"] or "none"
        (wanted,) = official
        if obtainable(engine, wanted):
            return wanted
        self.say(f"{wanted} cannot be pulled (no registry answers): using a base made here")
        rootfs = baseimage.build_rootfs_tar(self.directory / "base", self.say)
        label = f"tfjob.dev/base-digest={baseimage.digest()}"
        imported = engine.docker(
            "image", "ls", "--filter", f"label={label}", "--format", "{{.ID}}"
        ).strip()
        if not imported:
            changes = [arg for change in baseimage.IMPORT_CHANGES for arg in ("--change", change)]
            engine.docker(
                "import", *changes, "--change", f"LABEL {label}", str(rootfs), baseimage.REFERENCE
            )
        return f"{baseimage.REFERENCE}@{baseimage.digest()}"

    def load_into(self, engine: DockerEngine, reference: str) -> None:
        """Loads the image's tar into the engine unless the engine has that build."""
        tar = self.tar(reference)
        if image_id(engine, reference) != _tar_image_id(tar):
            self.say(f"loading {reference} into the Docker engine from {tar.name}")
            engine.docker("load", "--input", str(tar))

    def _build_one(self, engine: DockerEngine, spec: ImageSpec, base: str) -> Built:
        target = self.directory / tar_name(spec, base)
        if target.exists():
            self._record(base, spec.reference, target)
            return Built(spec.reference, target, 0.0)
        started = time.monotonic()
        self.say(f"building {spec.reference} from {spec.dockerfile.relative_to(REPOSITORY)}")
        args = ["build", "--network=host", "-f", str(spec.dockerfile), "-t", spec.reference]
        if spec.uses_base:
            # The base made here is named by its content's digest, not a registry's.
            made_here = base.startswith(f"{baseimage.REFERENCE}@")
            args += ["--build-arg", f"BASE={base.split('@')[0] if made_here else base}"]
            for name, value in platform_args(host_architecture()).items():
                args += ["--build-arg", f"{name}={value}"]
        for name, value in spec.args:
            args += ["--build-arg", f"{name}={value}"]
        replaced = image_id(engine, spec.reference)
        engine.docker(*args, str(spec.context_dir()))
        if replaced and replaced != image_id(engine, spec.reference):
            # The engine's copy of the previous build, now untagged: only its tar counted.
            try:
                engine.docker("image", "rm", replaced)
            except DockerCommandError as error:
                self.say(f"kept the previous {spec.reference} ({replaced[:19]}): {error}")
        partial = target.with_suffix(".partial")
        engine.docker("save", "-o", str(partial), spec.reference)
        partial.replace(target)
        slug = target.name.rsplit("-", 1)[0]
        for old in self.directory.glob(f"{slug}-*.tar"):
            if old != target and old.name.rsplit("-", 1)[0] == slug:
                old.unlink()
        self._record(base, spec.reference, target)
        built = Built(spec.reference, target, time.monotonic() - started)
        self.say(f"built {spec.reference} in {built.seconds:.0f}s ({built.size / 2**20:.0f} MiB)")
        return built


def image_id(engine: DockerEngine, reference: str) -> str | None:
    try:
        return engine.docker("image", "inspect", "--format", "{{.Id}}", reference).strip()
    except DockerCommandError:
        return None


def _tar_image_id(tar: Path) -> str:
    """The image ID (its config's digest) of the single image a `docker save` tar holds."""
    with tarfile.open(tar) as archive:
        member = archive.extractfile("manifest.json")
        assert member is not None
        (entry,) = json.load(member)
    config: str = entry["Config"]
    return "sha256:" + config.removeprefix("blobs/sha256/").removesuffix(".json")


def obtainable(engine: DockerEngine, reference: str) -> bool:
    """Whether the engine has the image or can pull it."""
    return image_id(engine, reference) is not None or _pull(engine, reference)


def _pull(engine: DockerEngine, reference: str) -> bool:
    try:
        engine.docker("pull", reference, timeout=PULL_TIMEOUT)
    except (DockerCommandError, subprocess.TimeoutExpired):
        return False
    return True


def describe(built: list[Built]) -> str:
    width = max(len(b.reference) for b in built)
    return "\n".join(
        f"  {b.reference:<{width}}  {b.size / 2**20:7.0f} MiB  "
        f"{f'built in {b.seconds:.0f}s' if b.seconds else 'up to date'}  {b.tar}"
        for b in built
    )
