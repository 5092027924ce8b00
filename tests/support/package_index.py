"""A Python package index inside the cluster, for the functions that install packages.

Pods here reach no public index (this machine reaches PyPI only through its own proxy and
certificate), and a cluster in a closed network has the same need: a mirror of its own,
named by `TFJobClient.train(package_index=...)`. The index is PEP 503's simple repository,
served as static files, as mirrors made by bandersnatch or `pip download` are: one project,
one wheel this module builds (PEP 427), served by Python's http.server in a pod of the
trainer image behind a Service. A Pod Security "restricted" pod, like the jobs'.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from collections.abc import Mapping
from typing import Any, Final

from tfjob_localcluster.images.catalog import TRAINER
from tfjob_operator.timeutil import from_rfc3339

PROJECT: Final = "tfjob-e2e-greeting"
VERSION: Final = "1.0.0"
MODULE: Final = "tfjob_e2e_greeting"
#: What the package's function returns: a function that installed it returns it too.
GREETING: Final = "installed from the cluster's own index"
NAME: Final = "package-index"
PORT: Final = 8080

Obj = dict[str, Any]


def wheel() -> tuple[str, bytes]:
    """The project's wheel: its file name and bytes."""
    dist_info = f"{MODULE}-{VERSION}.dist-info"
    files = {
        f"{MODULE}/__init__.py": f'def greeting() -> str:\n    return "{GREETING}"\n',
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {PROJECT}\nVersion: {VERSION}\n"
            "Summary: A package the e2e tests install into a function's pods\n"
        ),
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tfjob-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = [
        f"{path},sha256={_digest(text.encode())},{len(text.encode())}"
        for path, text in files.items()
    ]
    files[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return f"{MODULE}-{VERSION}-py3-none-any.whl", buffer.getvalue()


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def index_objects(namespace: str) -> list[Obj]:
    """The ConfigMap of the index's files, the pod that serves them, its Service."""
    file_name, data = wheel()
    sha = hashlib.sha256(data).hexdigest()
    page = (
        "<!DOCTYPE html>\n<html><body>\n"
        f'<a href="../../packages/{file_name}#sha256={sha}">{file_name}</a>\n'
        "</body></html>\n"
    )
    labels = {"app.kubernetes.io/name": NAME}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": namespace},
        "data": {"project.html": page},
        "binaryData": {"wheel": base64.b64encode(data).decode()},
    }
    items = [
        {"key": "project.html", "path": f"simple/{PROJECT}/index.html"},
        {"key": "wheel", "path": f"packages/{file_name}"},
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": NAME, "namespace": namespace, "labels": labels},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "index",
                    "image": TRAINER,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-m", "http.server", str(PORT), "--directory", "/index"],
                    "ports": [{"containerPort": PORT}],
                    "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 1},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": "index", "mountPath": "/index"}],
                }
            ],
            "volumes": [{"name": "index", "configMap": {"name": NAME, "items": items}}],
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {"selector": labels, "ports": [{"port": PORT, "targetPort": PORT}]},
    }
    return [config_map, pod, service]


def index_url(namespace: str) -> str:
    return f"http://{NAME}.{namespace}.svc:{PORT}/simple"


def init_seconds(pod: Mapping[str, Any], container: str) -> float | None:
    """How long an init container ran, from the pod's status (whole seconds)."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        done = (status.get("state") or {}).get("terminated") or {}
        if status.get("name") == container and done.get("startedAt") and done.get("finishedAt"):
            ran = from_rfc3339(done["finishedAt"]) - from_rfc3339(done["startedAt"])
            return ran.total_seconds()
    return None
