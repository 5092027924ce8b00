"""Pure functions from a pod spec to what the process node runs: command, env, cwd.

Nothing here talks to the API: objects a container refers to (ConfigMaps, Secrets) are
fetched by the caller and passed in, so every rule below is testable on plain dicts.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfjob_localcluster.node.quantity import ceil_divide

Obj = dict[str, Any]

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_ENTRYPOINTS: dict[str, list[str]] = {
    "tfjob-operator": ["tfjob-operator"],
    "tfjob-trainer": ["tfjob-train"],
}
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_ANNOTATION_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class CreateContainerError(Exception):
    """The container cannot be created from its spec (kubelet: CreateContainerError)."""


class ContainerConfigError(Exception):
    """A referenced object is missing or incomplete (kubelet: CreateContainerConfigError)."""


# --- images and commands --------------------------------------------------------------


def image_repository(image: str) -> str:
    """`registry:5000/org/name:tag@sha256:...` -> `registry:5000/org/name`."""
    name = image.split("@", 1)[0]
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:
        name = name[:colon]
    return name


def image_entrypoint(image: str, entrypoints: Mapping[str, Sequence[str]]) -> list[str] | None:
    """The entrypoint of the first mapping key the image repository is, or ends with."""
    repository = image_repository(image)
    for key, entrypoint in entrypoints.items():
        if repository == key or repository.endswith("/" + key):
            return list(entrypoint)
    return None


def expand(text: str, variables: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: unknown references stay as written, `$$` is `$`."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "$" and i + 1 < len(text):
            following = text[i + 1]
            if following == "$":
                out.append("$")
                i += 2
                continue
            if following == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(variables.get(name, text[i : end + 1]))
                    i = end + 1
                    continue
        out.append(char)
        i += 1
    return "".join(out)


def container_argv(
    container: Obj, env: Mapping[str, str], entrypoints: Mapping[str, Sequence[str]]
) -> list[str]:
    command = container.get("command") or image_entrypoint(container.get("image", ""), entrypoints)
    if not command:
        raise CreateContainerError(
            f"container {container['name']!r} has no command and image "
            f"{container.get('image', '')!r} has no entrypoint known to the process node "
            f"(known image repositories: {', '.join(entrypoints) or 'none'}); set the "
            "container's command or add the image to the node's entrypoints"
        )
    argv = [expand(part, env) for part in command]
    argv += [expand(part, env) for part in container.get("args") or []]
    return argv


# --- environment ----------------------------------------------------------------------


@dataclass(frozen=True)
class PodRuntimeInfo:
    """What the node knows about a pod beyond its spec."""

    pod_ip: str
    host_ip: str
    hostname: str
    python_bin_dir: str
    api_host: str
    api_port: int
    allocatable: Mapping[str, str]


def referenced_objects(container: Obj) -> set[tuple[str, str]]:
    """(kind, name) of the ConfigMaps and Secrets the container's env refers to."""
    refs: set[tuple[str, str]] = set()
    for source in container.get("envFrom") or []:
        if ref := source.get("configMapRef"):
            refs.add(("configmaps", ref["name"]))
        if ref := source.get("secretRef"):
            refs.add(("secrets", ref["name"]))
    for var in container.get("env") or []:
        value_from = var.get("valueFrom") or {}
        if ref := value_from.get("configMapKeyRef"):
            refs.add(("configmaps", ref["name"]))
        if ref := value_from.get("secretKeyRef"):
            refs.add(("secrets", ref["name"]))
    return refs


def object_data(kind: str, obj: Obj) -> dict[str, str]:
    """A ConfigMap's or Secret's data as text (Secret values are base64 on the wire)."""
    if kind == "secrets":
        return {
            key: base64.b64decode(value).decode(errors="replace")
            for key, value in (obj.get("data") or {}).items()
        }
    data = dict(obj.get("data") or {})
    for key, value in (obj.get("binaryData") or {}).items():
        data[key] = base64.b64decode(value).decode(errors="replace")
    return data


def base_environment(pod: Obj, info: PodRuntimeInfo) -> dict[str, str]:
    """What every container sees before its own env: PATH, HOSTNAME, the API service."""
    host, port = info.api_host, str(info.api_port)
    return {
        "PATH": f"{info.python_bin_dir}:{SYSTEM_PATH}",
        "HOSTNAME": info.hostname,
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{port}_TCP_PORT": port,
        f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
    }


def field_value(pod: Obj, path: str, info: PodRuntimeInfo) -> str:
    metadata = pod["metadata"]
    spec = pod["spec"]
    simple: dict[str, Callable[[], str]] = {
        "metadata.name": lambda: metadata["name"],
        "metadata.namespace": lambda: metadata.get("namespace", "default"),
        "metadata.uid": lambda: metadata["uid"],
        "spec.nodeName": lambda: spec.get("nodeName", ""),
        "spec.serviceAccountName": lambda: spec.get("serviceAccountName", "default"),
        "status.podIP": lambda: info.pod_ip,
        "status.podIPs": lambda: info.pod_ip,
        "status.hostIP": lambda: info.host_ip,
        "status.hostIPs": lambda: info.host_ip,
    }
    if path in simple:
        return simple[path]()
    if match := _ANNOTATION_REF.match(path):
        return str((metadata.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ContainerConfigError(f"unsupported fieldRef fieldPath {path!r}")


def resource_value(pod: Obj, container_name: str, ref: Obj, info: PodRuntimeInfo) -> str:
    """A resourceFieldRef: the limit (node allocatable when unset) or request, rounded up."""
    name = ref.get("containerName") or container_name
    container = next((c for c in pod["spec"]["containers"] if c["name"] == name), None)
    if container is None:
        raise ContainerConfigError(f"resourceFieldRef names unknown container {name!r}")
    kind, _, resource = ref["resource"].partition(".")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(resource)
    if value is None and kind == "limits":
        value = info.allocatable.get(resource, "0")
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(resource, "0")
    if kind not in ("limits", "requests") or value is None:
        raise ContainerConfigError(f"unsupported resourceFieldRef resource {ref['resource']!r}")
    return str(ceil_divide(value, ref.get("divisor") or "1"))


def _key_value(
    kind: str, ref: Obj, objects: Mapping[tuple[str, str], Obj | None], var_name: str
) -> str | None:
    singular = "configmap" if kind == "configmaps" else "secret"
    obj = objects.get((kind, ref["name"]))
    if obj is None:
        if ref.get("optional"):
            return None
        raise ContainerConfigError(f'{singular} "{ref["name"]}" not found')
    data = object_data(kind, obj)
    if ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise ContainerConfigError(
            f"couldn't find key {ref['key']} in {singular} {obj['metadata'].get('namespace')}/"
            f"{ref['name']} (env {var_name})"
        )
    return data[ref["key"]]


def container_environment(
    pod: Obj,
    container: Obj,
    info: PodRuntimeInfo,
    objects: Mapping[tuple[str, str], Obj | None],
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The container's environment, resolved as kubelet does.

    Order: the base environment, `extra` (HOME, device variables), envFrom sources in order,
    then `env` entries, each `$(VAR)`-expanded against what is defined before it.
    `objects` maps (kind, name) to the fetched object, or None when it does not exist.
    """
    env = base_environment(pod, info)
    env.update(extra or {})
    for source in container.get("envFrom") or []:
        kind = "configmaps" if "configMapRef" in source else "secrets"
        ref = source.get("configMapRef") or source.get("secretRef") or {}
        obj = objects.get((kind, ref.get("name", "")))
        if obj is None:
            if ref.get("optional"):
                continue
            singular = "configmap" if kind == "configmaps" else "secret"
            raise ContainerConfigError(f'{singular} "{ref.get("name")}" not found')
        prefix = source.get("prefix", "")
        for key, data in object_data(kind, obj).items():
            if _ENV_NAME.match(prefix + key):
                env[prefix + key] = data
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        value_from = var["valueFrom"]
        value: str | None
        if ref := value_from.get("fieldRef"):
            value = field_value(pod, ref["fieldPath"], info)
        elif ref := value_from.get("resourceFieldRef"):
            value = resource_value(pod, container["name"], ref, info)
        elif ref := value_from.get("configMapKeyRef"):
            value = _key_value("configmaps", ref, objects, name)
        elif ref := value_from.get("secretKeyRef"):
            value = _key_value("secrets", ref, objects, name)
        else:
            raise ContainerConfigError(f"env {name}: unsupported valueFrom {sorted(value_from)}")
        if value is not None:
            env[name] = value
    return env


# --- resources, identity, paths -------------------------------------------------------


def gpu_count(container: Obj) -> int:
    resources = container.get("resources") or {}
    value = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
        resources.get("requests") or {}
    ).get(GPU_RESOURCE)
    return int(value) if value is not None else 0


def pod_hostname(pod: Obj) -> str:
    """spec.hostname, else the pod name (cut to 63 characters, as kubelet does)."""
    hostname = str(pod["spec"].get("hostname") or pod["metadata"]["name"])
    return hostname[:63].rstrip("-.")


def pod_fqdn(pod: Obj, cluster_domain: str) -> str | None:
    subdomain = pod["spec"].get("subdomain")
    if not subdomain:
        return None
    namespace = pod["metadata"].get("namespace", "default")
    return f"{pod_hostname(pod)}.{subdomain}.{namespace}.svc.{cluster_domain}"


def run_as(pod: Obj, container: Obj) -> tuple[int | None, int | None, list[int]]:
    """(uid, gid, supplementary groups) from the container, then the pod securityContext."""
    pod_context = pod["spec"].get("securityContext") or {}
    context = container.get("securityContext") or {}
    uid = context.get("runAsUser", pod_context.get("runAsUser"))
    gid = context.get("runAsGroup", pod_context.get("runAsGroup"))
    groups = list(pod_context.get("supplementalGroups") or [])
    if (fs_group := pod_context.get("fsGroup")) is not None:
        groups.append(fs_group)
    return uid, gid, groups


def all_containers(pod: Obj) -> list[Obj]:
    return list(pod["spec"].get("initContainers") or []) + list(pod["spec"]["containers"])


def unsupported_features(pod: Obj) -> list[str]:
    """Spec features the process node cannot honour; a pod using any is failed."""
    problems = []
    for container in pod["spec"].get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            problems.append(f"sidecar init container {container['name']!r} (restartPolicy Always)")
    for container in all_containers(pod):
        for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
            if (probe := container.get(kind)) and "grpc" in probe:
                problems.append(f"{kind} of container {container['name']!r} uses grpc")
        for hook, handler in (container.get("lifecycle") or {}).items():
            if isinstance(handler, dict) and not {"exec", "httpGet", "sleep"} & set(handler):
                problems.append(f"{hook} hook of container {container['name']!r}")
    return problems
