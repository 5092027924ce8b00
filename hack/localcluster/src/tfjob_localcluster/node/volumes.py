"""Pod volumes as directories on the host, mounted into containers by the exec shim.

Supported: emptyDir, hostPath, configMap, secret, downwardAPI and projected (service
account token, configMap, secret, downwardAPI sources). Any other kind fails the pod
(see `unsupported_volumes`). Projected, configMap, secret and downwardAPI volumes are
written the way kubelet's atomic writer does (`..data` -> a timestamped directory,
one symlink per top-level entry), so a token refresh swaps all files at once.
"""

from __future__ import annotations

import base64
import os
import shutil
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfjob_localcluster.node.kube import ApiError, Kube
from tfjob_localcluster.node.podspec import PodRuntimeInfo, expand, field_value, resource_value

Obj = dict[str, Any]

SUPPORTED_KINDS = ("emptyDir", "hostPath", "configMap", "secret", "downwardAPI", "projected")
SUPPORTED_PROJECTIONS = ("serviceAccountToken", "configMap", "secret", "downwardAPI")
DEFAULT_MODE = 0o644
# Refresh a projected token at 80% of its lifetime, and at least daily (as kubelet does).
REFRESH_FRACTION = 0.8
MAX_TOKEN_AGE = 24 * 3600


class VolumeNotReadyError(Exception):
    """A volume cannot be set up yet (missing object or path); kubelet retries these."""


def volume_kind(volume: Obj) -> str:
    kinds = [key for key in volume if key != "name"]
    return kinds[0] if kinds else "emptyDir"


def unsupported_volumes(pod: Obj) -> list[str]:
    """Descriptions of the pod's volumes the process node cannot provide."""
    problems = []
    for volume in pod["spec"].get("volumes") or []:
        kind = volume_kind(volume)
        if kind not in SUPPORTED_KINDS:
            problems.append(f"volume {volume['name']!r} of type {kind}")
        elif kind == "projected":
            for source in volume["projected"].get("sources") or []:
                for source_kind in source:
                    if source_kind not in SUPPORTED_PROJECTIONS:
                        problems.append(
                            f"volume {volume['name']!r} projects a {source_kind} source"
                        )
    return problems


# --- payloads (pure) --------------------------------------------------------------------


@dataclass(frozen=True)
class FileSpec:
    content: bytes
    mode: int


def _items_payload(
    data: Mapping[str, bytes], items: list[Obj] | None, default_mode: int, what: str, optional: bool
) -> dict[str, FileSpec]:
    if not items:
        return {key: FileSpec(value, default_mode) for key, value in data.items()}
    payload = {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise VolumeNotReadyError(f"{what} references non-existent key: {item['key']}")
        payload[item["path"]] = FileSpec(data[item["key"]], item.get("mode", default_mode))
    return payload


def object_bytes(kind: str, obj: Obj) -> dict[str, bytes]:
    if kind == "secrets":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


def _format_map(values: Mapping[str, str]) -> bytes:
    """Labels or annotations as the downward API writes them: `key="value"` lines."""
    lines = []
    for key in sorted(values):
        escaped = values[key].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines.append(f'{key}="{escaped}"')
    return "\n".join(lines).encode()


def downward_payload(
    pod: Obj, items: list[Obj], default_mode: int, info: PodRuntimeInfo
) -> dict[str, FileSpec]:
    payload = {}
    for item in items:
        mode = item.get("mode", default_mode)
        if ref := item.get("fieldRef"):
            path = ref["fieldPath"]
            if path in ("metadata.labels", "metadata.annotations"):
                content = _format_map(pod["metadata"].get(path.split(".")[1]) or {})
            else:
                content = field_value(pod, path, info).encode()
        elif ref := item.get("resourceFieldRef"):
            if not ref.get("containerName"):
                raise VolumeNotReadyError(
                    f"downwardAPI item {item['path']}: resourceFieldRef needs containerName"
                )
            content = resource_value(pod, ref["containerName"], ref, info).encode()
        else:
            raise VolumeNotReadyError(f"downwardAPI item {item['path']} has no source")
        payload[item["path"]] = FileSpec(content, mode)
    return payload


# --- the atomic writer -----------------------------------------------------------------


def write_atomic(directory: Path, payload: Mapping[str, FileSpec], uid: int, gid: int) -> None:
    """Replaces the volume's visible content with `payload` in one rename."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    generation = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    generation.mkdir(mode=0o755)
    for relative, spec in payload.items():
        target = generation / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(spec.content)
        os.chmod(target, spec.mode)
        os.chown(target, uid, gid)
    data_link = directory / "..data"
    old = os.readlink(data_link) if data_link.is_symlink() else None
    scratch = directory / "..data_tmp"
    scratch.unlink(missing_ok=True)
    scratch.symlink_to(generation.name)
    scratch.replace(data_link)
    top_level = {Path(relative).parts[0] for relative in payload}
    for name in top_level:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
    for entry in directory.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in top_level:
            entry.unlink()
    if old:
        shutil.rmtree(directory / old, ignore_errors=True)


# --- setting up a pod's volumes --------------------------------------------------------


@dataclass
class PodVolumes:
    """The host directories of one pod's volumes and when its tokens need renewing."""

    paths: dict[str, Path] = field(default_factory=dict)
    refresh_at: float | None = None  # time.monotonic() deadline, None without tokens


def _common_run_as_user(pod: Obj) -> int | None:
    pod_user = (pod["spec"].get("securityContext") or {}).get("runAsUser")
    users = {
        (c.get("securityContext") or {}).get("runAsUser", pod_user)
        for c in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]
    }
    return users.pop() if len(users) == 1 else None


class VolumeBuilder:
    def __init__(self, kube: Kube, volumes_dir: Path) -> None:
        self.kube = kube
        self.volumes_dir = volumes_dir

    async def _get(self, namespace: str, kind: str, name: str) -> Obj | None:
        try:
            return await self.kube.get(f"/api/v1/namespaces/{namespace}/{kind}/{name}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise VolumeNotReadyError(f"get {kind} {name}: {error}") from None

    async def _object_payload(
        self, pod: Obj, kind: str, source: Obj, default_mode: int
    ) -> dict[str, FileSpec]:
        namespace = pod["metadata"]["namespace"]
        name = source.get("name") or source.get("secretName") or ""
        singular = "configmap" if kind == "configmaps" else "secret"
        obj = await self._get(namespace, kind, name)
        if obj is None:
            if source.get("optional"):
                return {}
            raise VolumeNotReadyError(f'{singular} "{name}" not found')
        return _items_payload(
            object_bytes(kind, obj),
            source.get("items"),
            source.get("defaultMode", default_mode),
            f'{singular} "{name}"',
            bool(source.get("optional")),
        )

    async def _token(self, pod: Obj, source: Obj) -> tuple[FileSpec, float]:
        metadata = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        expiration = int(source.get("expirationSeconds", 3600))
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [source["audience"]] if source.get("audience") else [],
                "expirationSeconds": expiration,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                },
            },
        }
        path = f"/api/v1/namespaces/{metadata['namespace']}/serviceaccounts/{account}/token"
        try:
            issued = await self.kube.create(path, request)
        except ApiError as error:
            raise VolumeNotReadyError(f"token for service account {account}: {error}") from None
        lifetime = min(REFRESH_FRACTION * expiration, MAX_TOKEN_AGE)
        return FileSpec(issued["status"]["token"].encode(), 0o600), lifetime

    async def _projected(
        self, pod: Obj, volume: Obj, info: PodRuntimeInfo
    ) -> tuple[dict[str, FileSpec], float | None]:
        projected = volume["projected"]
        default_mode = projected.get("defaultMode", DEFAULT_MODE)
        payload: dict[str, FileSpec] = {}
        refresh: float | None = None
        for source in projected.get("sources") or []:
            if token_source := source.get("serviceAccountToken"):
                token, lifetime = await self._token(pod, token_source)
                payload[token_source["path"]] = FileSpec(token.content, default_mode)
                refresh = lifetime if refresh is None else min(refresh, lifetime)
            elif cm := source.get("configMap"):
                payload.update(await self._object_payload(pod, "configmaps", cm, default_mode))
            elif secret := source.get("secret"):
                payload.update(await self._object_payload(pod, "secrets", secret, default_mode))
            elif downward := source.get("downwardAPI"):
                payload.update(
                    downward_payload(pod, downward.get("items") or [], default_mode, info)
                )
        return payload, refresh

    def _host_path(self, volume: Obj) -> Path:
        spec = volume["hostPath"]
        path = Path(spec["path"])
        kind = spec.get("type", "")
        if kind == "DirectoryOrCreate":
            path.mkdir(parents=True, exist_ok=True, mode=0o755)
        elif kind == "FileOrCreate" and not path.exists():
            if not path.parent.is_dir():
                raise VolumeNotReadyError(f"hostPath {path}: parent directory does not exist")
            path.touch(mode=0o644)
        checks = {
            "Directory": stat.S_ISDIR,
            "File": stat.S_ISREG,
            "Socket": stat.S_ISSOCK,
            "CharDevice": stat.S_ISCHR,
            "BlockDevice": stat.S_ISBLK,
        }
        if kind in checks:
            try:
                mode = path.stat().st_mode
            except FileNotFoundError:
                raise VolumeNotReadyError(
                    f"hostPath type check failed: {path} does not exist"
                ) from None
            if not checks[kind](mode):
                raise VolumeNotReadyError(f"hostPath type check failed: {path} is not a {kind}")
        return path

    async def setup(self, pod: Obj, info: PodRuntimeInfo, refresh_only: bool = False) -> PodVolumes:
        """Creates (or, with `refresh_only`, renews the token volumes of) every volume."""
        result = PodVolumes()
        pod_context = pod["spec"].get("securityContext") or {}
        fs_group = pod_context.get("fsGroup")
        owner = _common_run_as_user(pod) or 0
        group = fs_group if fs_group is not None else 0
        refresh: float | None = None
        for volume in pod["spec"].get("volumes") or []:
            name, kind = volume["name"], volume_kind(volume)
            directory = self.volumes_dir / name
            result.paths[name] = directory
            if kind == "hostPath":
                result.paths[name] = self._host_path(volume)
                continue
            if kind == "emptyDir":
                if not refresh_only:
                    directory.mkdir(parents=True, exist_ok=True)
                    os.chmod(directory, 0o777)
                    if fs_group is not None:
                        os.chown(directory, -1, fs_group)
                        os.chmod(directory, 0o2777)
                continue
            payload: dict[str, FileSpec]
            lifetime = None
            if kind == "projected":
                if refresh_only and not _has_token(volume):
                    continue
                payload, lifetime = await self._projected(pod, volume, info)
            elif refresh_only:
                continue
            elif kind == "configMap":
                payload = await self._object_payload(
                    pod, "configmaps", volume["configMap"], DEFAULT_MODE
                )
            elif kind == "secret":
                payload = await self._object_payload(pod, "secrets", volume["secret"], DEFAULT_MODE)
            else:
                downward = volume["downwardAPI"]
                payload = downward_payload(
                    pod,
                    downward.get("items") or [],
                    downward.get("defaultMode", DEFAULT_MODE),
                    info,
                )
            if fs_group is not None:
                payload = {k: FileSpec(v.content, v.mode | 0o440) for k, v in payload.items()}
            write_atomic(directory, payload, owner, group)
            if lifetime is not None:
                refresh = lifetime if refresh is None else min(refresh, lifetime)
        if refresh is not None:
            result.refresh_at = time.monotonic() + refresh
        return result


def _has_token(volume: Obj) -> bool:
    return any("serviceAccountToken" in s for s in volume["projected"].get("sources") or [])


# --- container mounts (pure) -----------------------------------------------------------

# Kubelet mounts these kinds read-only whatever the volumeMount says.
ALWAYS_READ_ONLY = ("configMap", "secret", "downwardAPI", "projected")


def container_mounts(
    pod: Obj, container: Obj, volume_paths: Mapping[str, Path], env: Mapping[str, str]
) -> list[Obj]:
    """The shim's bind mounts for a container's volumeMounts (sources resolved)."""
    kinds = {volume["name"]: volume_kind(volume) for volume in pod["spec"].get("volumes") or []}
    mounts = []
    for mount in container.get("volumeMounts") or []:
        name = mount["name"]
        if name not in volume_paths:
            raise VolumeNotReadyError(f"volumeMount {name!r} names no volume of the pod")
        source = volume_paths[name]
        sub_path = mount.get("subPath") or expand(mount.get("subPathExpr", ""), env)
        if sub_path:
            source = source / sub_path
            if kinds[name] in ("emptyDir", "hostPath") and not source.exists():
                source.mkdir(parents=True, exist_ok=True)
            source = source.resolve()
        mounts.append(
            {
                "source": str(source),
                "target": mount["mountPath"],
                "read_only": bool(mount.get("readOnly")) or kinds[name] in ALWAYS_READ_ONLY,
            }
        )
    return mounts
