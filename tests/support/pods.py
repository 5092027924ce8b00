"""Helpers for tests against the local cluster: pods built as data, waits on their state.

Reads go through the sync `kubernetes` client with `_preload_content=False`, so tests
see objects exactly as the API serves them (dicts, camelCase keys).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from support.tfjobs import find_condition
from support.waiting import wait_until
from tfjob_localcluster.images.catalog import BUSYBOX

Obj = dict[str, Any]

#: Answers "who?" on :2222 with its hostname until `expected` peers asked (a probe's bare
#: connection does not count), and asks each peer name given, retrying until the name
#: resolves and the peer answers.
PEER_PROGRAM = """
import socket, sys, threading, time
expected, peers = int(sys.argv[1]), sys.argv[2:]
served = threading.Semaphore(0)
server = socket.create_server(("0.0.0.0", 2222))
def serve():
    while True:
        connection, _ = server.accept()
        with connection:
            if connection.recv(4) == b"who?":
                connection.sendall(socket.gethostname().encode())
                served.release()
threading.Thread(target=serve, daemon=True).start()
deadline = time.time() + 90
for peer in peers:
    while True:
        try:
            with socket.create_connection((peer, 2222), timeout=2) as connection:
                connection.sendall(b"who?")
                print(peer, "->", connection.recv(100).decode(), flush=True)
                break
        except OSError as error:
            if time.time() > deadline:
                raise SystemExit(f"{peer}: {error}")
            time.sleep(0.2)
for _ in range(expected):
    if not served.acquire(timeout=90):
        raise SystemExit("the peers did not all connect")
"""


def container(name: str, command: list[str], image: str = BUSYBOX, **extra: Any) -> Obj:
    return {"name": name, "image": image, "command": command, **extra}


def pod_manifest(
    name: str,
    command: list[str] | None = None,
    *,
    image: str = BUSYBOX,
    restart_policy: str = "Never",
    containers: list[Obj] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "containers": containers or [container("main", command or ["true"], image)],
            **spec,
        },
    }


def headless_service(name: str, selector: dict[str, str], port: int = 2222) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "clusterIP": "None",
            # As the operator's: a pod resolves as soon as it has an address.
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": [{"name": "grpc", "port": port, "targetPort": port}],
        },
    }


def container_status(pod: Obj, name: str = "main") -> Obj:
    """The container's status; empty until the node has reported one."""
    statuses = (pod["status"].get("containerStatuses") or []) + (
        pod["status"].get("initContainerStatuses") or []
    )
    return next((s for s in statuses if s["name"] == name), {})


def waiting_reason(pod: Obj, name: str = "main") -> str | None:
    """Why the container is waiting (None when it is not, or has no status yet)."""
    reason = container_status(pod, name).get("state", {}).get("waiting", {}).get("reason")
    return str(reason) if reason is not None else None


class Pods:
    """Pods of one test namespace, read and written as dicts."""

    def __init__(self, core_v1: Any, namespace: str) -> None:
        self.core_v1 = core_v1
        self.namespace = namespace

    def create(self, manifest: Obj) -> Obj:
        self.core_v1.create_namespaced_pod(self.namespace, manifest)
        return manifest

    def get(self, name: str) -> Obj:
        reply = self.core_v1.read_namespaced_pod(name, self.namespace, _preload_content=False)
        pod: Obj = json.loads(reply.data)
        return pod

    def wait(
        self, name: str, predicate: Callable[[Obj], bool], what: str, timeout: float = 90
    ) -> Obj:
        return wait_until(
            lambda: self.get(name),
            timeout,
            lambda pod: (
                f"pod {self.namespace}/{name}: {what}; "
                f"status: {json.dumps(pod.get('status'), indent=1)}"
            ),
            until=predicate,
            interval=0.2,
        )

    def wait_phase(self, name: str, *phases: str, timeout: float = 90) -> Obj:
        return self.wait(
            name,
            lambda pod: pod["status"].get("phase") in phases,
            f"phase in {phases}",
            timeout,
        )

    def wait_running(self, name: str, timeout: float = 90) -> Obj:
        """Until every container is running and ready (the pod's Ready condition)."""
        return self.wait(
            name,
            lambda pod: (find_condition(pod, "Ready") or {}).get("status") == "True",
            "Ready",
            timeout,
        )

    def log(self, name: str, container: str | None = None, previous: bool = False) -> str:
        """The container's log, read through the API server (as `kubectl logs`), exactly:
        the client would parse a log that looks like JSON and strip its last newline."""
        reply = self.core_v1.read_namespaced_pod_log(
            name, self.namespace, container=container, previous=previous, _preload_content=False
        )
        return str(reply.data.decode())

    def wait_log(
        self, name: str, predicate: Callable[[str], bool], what: str, timeout: float = 60
    ) -> str:
        return wait_until(
            lambda: self.log(name),
            timeout,
            lambda text: f"pod {name}'s log to show {what}; log: {text!r}",
            until=predicate,
            interval=0.2,
        )

    def events(self, name: str) -> list[Obj]:
        reply = self.core_v1.list_namespaced_event(
            self.namespace,
            field_selector=f"involvedObject.name={name}",
            _preload_content=False,
        )
        items: list[Obj] = json.loads(reply.data)["items"]
        return items

    def wait_event(self, name: str, reason: str, timeout: float = 30) -> Obj:
        events = wait_until(
            lambda: self.events(name),
            timeout,
            lambda seen: f"a {reason} event for pod {name}; events: {[e['reason'] for e in seen]}",
            until=lambda seen: any(e["reason"] == reason for e in seen),
            interval=0.2,
        )
        return next(e for e in events if e["reason"] == reason)
