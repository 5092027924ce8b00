"""Where the Go-built tools live: the layout hack/build-binaries.sh writes.

The tools and their binaries come from hack/go-tools.txt, which the script builds from;
the pinned versions from hack/versions.env; the cache root is `$TFJOB_CACHE`
(default `~/.cache/tfjob-operator`, honouring `$XDG_CACHE_HOME`), with one directory
per tool and version: `<cache>/bin/<tool>-<version>/`. The project's own node tools
(localcluster/nodetools) are versioned by a digest of their sources, as the script computes it.

A tool the script is building (`make test` builds the tools its later tests use beside its
first ones, hack/beside-builds.sh) is claimed: the script holds a lock on
`<cache>/bin/.<tool>-<version>.building` until the binaries are in place. A binary asked
for while its tool is claimed is waited for, saying so each minute, rather than missing.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from tfjob_localcluster.checkout import GO_TOOLS, NODETOOLS, VERSIONS_ENV
from tfjob_localcluster.errors import LocalClusterError


@dataclass(frozen=True)
class Tool:
    """A row of hack/go-tools.txt: a tool, the versions.env key of its version (empty for
    the node tools, versioned by their sources) and the binaries it builds."""

    name: str
    version_key: str
    binaries: tuple[str, ...]


def parse_tools(text: str) -> dict[str, Tool]:
    """hack/go-tools.txt's rows by tool name: name, version key (`-` for none), recipe,
    then the binaries as NAME=PACKAGE or NAME."""
    tools = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, key, _recipe, *binaries = line.split()
        if not binaries:
            raise ValueError(f"go-tools.txt line {number} names no binary: {raw!r}")
        names = tuple(binary.partition("=")[0] for binary in binaries)
        tools[name] = Tool(name, "" if key == "-" else key, names)
    return tools


@functools.cache
def tools() -> dict[str, Tool]:
    """hack/go-tools.txt's tools, read once, when first asked for."""
    return parse_tools(GO_TOOLS.read_text())


class MissingBinaryError(LocalClusterError):
    """A pinned binary has not been built into the cache yet."""


log = logging.getLogger(__name__)
#: How often a wait for a claimed tool says it still waits.
CLAIM_REPORT_SECONDS = 60.0
#: How often a wait for a claimed tool looks at its claim.
CLAIM_POLL_SECONDS = 1.0
#: The longest a tool's build may keep a waiting program waiting: the longest build of a
#: cold run on a slow day (Kubernetes, 14 min) thrice, for a build at the lowest priority.
CLAIM_WAIT_LIMIT_SECONDS = 45 * 60.0


def claim_path(directory: Path) -> Path:
    """Where hack/build-binaries.sh claims the tool it builds into `directory`."""
    return directory.with_name(f".{directory.name}.building")


def claimed(directory: Path) -> bool:
    """Whether a build holds the claim on the tool of `directory` now."""
    try:
        descriptor = os.open(claim_path(directory), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as locked:
        if locked.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(descriptor)
    return False


def await_build(directory: Path, limit: float = CLAIM_WAIT_LIMIT_SECONDS) -> float:
    """Waits while a build claims the tool of `directory`, saying so each minute; the
    seconds waited. A claim held past `limit` is a stalled build: MissingBinaryError."""
    start = time.monotonic()
    next_report = start
    logs = directory.parent.parent / "logs"
    while claimed(directory):
        now = time.monotonic()
        if now - start > limit:
            raise MissingBinaryError(
                f"{directory.name} is still being built after {limit:.0f} s "
                f"(hack/build-binaries.sh; its log in {logs})"
            )
        if now >= next_report:
            log.info(
                "%s is being built (hack/build-binaries.sh, its log in %s): waited %.0f s",
                directory.name,
                logs,
                now - start,
            )
            next_report = now + CLAIM_REPORT_SECONDS
        time.sleep(CLAIM_POLL_SECONDS)
    return time.monotonic() - start


def parse_versions(text: str) -> dict[str, str]:
    """Parses versions.env: `KEY=value` lines, `#` comments and blank lines."""
    versions: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"versions.env line {number} is not KEY=value: {raw!r}")
        versions[key.strip()] = value.strip()
    return versions


def read_versions(path: Path = VERSIONS_ENV) -> dict[str, str]:
    try:
        return parse_versions(path.read_text())
    except FileNotFoundError:
        raise MissingBinaryError(
            f"{path} not found: tfjob_localcluster must run from the tfjob-operator checkout"
        ) from None


def cache_root() -> Path:
    if explicit := os.environ.get("TFJOB_CACHE"):
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "tfjob-operator"


def nodetools_version(source: Path = NODETOOLS) -> str:
    """The digest build-binaries.sh names localcluster/nodetools' build by: sha256sum's output
    lines for its Go sources, go.mod and go.sum (sorted by path), hashed again."""
    files = sorted(
        f"./{path.relative_to(source)}"
        for path in source.rglob("*")
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum"))
    )
    listing = "".join(
        f"{hashlib.sha256((source / name).read_bytes()).hexdigest()}  {name}\n" for name in files
    )
    return hashlib.sha256(listing.encode()).hexdigest()[:12]


def tool_dir(tool: str, versions: dict[str, str] | None = None, cache: Path | None = None) -> Path:
    """The directory hack/build-binaries.sh builds `tool` into (`--print-dir tool`)."""
    known = tools()
    if tool not in known:
        raise ValueError(f"unknown tool {tool!r}; known: {', '.join(known)}")
    key = known[tool].version_key
    if not key:
        return (cache or cache_root()) / "bin" / f"{tool}-{nodetools_version()}"
    versions = read_versions() if versions is None else versions
    if key not in versions:
        raise MissingBinaryError(f"{key} is missing from {VERSIONS_ENV}")
    return (cache or cache_root()) / "bin" / f"{tool}-{versions[key]}"


@dataclass(frozen=True)
class Binaries:
    """Paths of the pinned binaries; each attribute checks that its file exists."""

    versions: dict[str, str]
    cache: Path

    def path(self, binary: str) -> Path:
        for tool in tools().values():
            if binary in tool.binaries:
                found = tool_dir(tool.name, self.versions, self.cache) / binary
                if not os.access(found, os.X_OK):
                    await_build(found.parent)
                if not os.access(found, os.X_OK):
                    version = self.versions.get(tool.version_key, "")
                    raise MissingBinaryError(
                        f"{binary} {version} is not built (expected {found}); run "
                        f"`make binaries` or `hack/build-binaries.sh {tool.name}` in the "
                        "repository root"
                    )
                return found
        raise ValueError(f"unknown binary {binary!r}")

    @property
    def kube_apiserver(self) -> Path:
        return self.path("kube-apiserver")

    @property
    def kube_controller_manager(self) -> Path:
        return self.path("kube-controller-manager")

    @property
    def kube_scheduler(self) -> Path:
        return self.path("kube-scheduler")

    @property
    def kubectl(self) -> Path:
        return self.path("kubectl")

    @property
    def kubelet(self) -> Path:
        return self.path("kubelet")

    @property
    def kube_proxy(self) -> Path:
        return self.path("kube-proxy")

    @property
    def kubeadm(self) -> Path:
        return self.path("kubeadm")

    @property
    def etcd(self) -> Path:
        return self.path("etcd")

    @property
    def coredns(self) -> Path:
        return self.path("coredns")

    @property
    def pause(self) -> Path:
        return self.path("pause")

    @property
    def gpu_device_plugin(self) -> Path:
        return self.path("gpu-device-plugin")

    @property
    def helm(self) -> Path:
        return self.path("helm")

    @property
    def kwok(self) -> Path:
        return self.path("kwok")

    @property
    def kind(self) -> Path:
        return self.path("kind")

    @property
    def kueue(self) -> Path:
        return self.path("kueue")

    @property
    def registry(self) -> Path:
        """CNCF Distribution's registry."""
        return self.path("registry")

    @property
    def vc_scheduler(self) -> Path:
        """Volcano's scheduler."""
        return self.path("vc-scheduler")

    @property
    def scheduler_plugins(self) -> Path:
        """scheduler-plugins' kube-scheduler, Coscheduling compiled in."""
        return self.path("scheduler")

    @property
    def toxiproxy_server(self) -> Path:
        """Shopify's Toxiproxy (the chaos run's network faults)."""
        return self.path("toxiproxy-server")

    @property
    def prometheus(self) -> Path:
        """Prometheus (the monitoring tests' scraper, built without service discovery)."""
        return self.path("prometheus")

    @property
    def promtool(self) -> Path:
        """Prometheus' rule checker and tester."""
        return self.path("promtool")

    @property
    def cosign(self) -> Path:
        """Sigstore's signer and verifier (the release's signatures and attestations)."""
        return self.path("cosign")

    @property
    def syft(self) -> Path:
        """Anchore's SBOM generator (the release's SBOMs)."""
        return self.path("syft")

    @property
    def kubernetes_version(self) -> str:
        return self.versions["KUBERNETES_VERSION"]

    def require(self, *binaries: str) -> None:
        """Raises MissingBinaryError naming every missing binary at once."""
        problems = []
        for binary in binaries:
            try:
                self.path(binary)
            except MissingBinaryError as missing:
                problems.append(str(missing))
        if problems:
            raise MissingBinaryError("\n".join(problems))


CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
NODE = ("kubelet", "kube-proxy", "gpu-device-plugin")


def locate(*required: str) -> Binaries:
    """The pinned binaries; checks `required` (default: the control plane and kubectl)."""
    binaries = Binaries(read_versions(), cache_root())
    binaries.require(*(required or CONTROL_PLANE))
    return binaries
