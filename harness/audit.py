"""The API server's audit log of the benchmark's identities: who asked what, and when.

The API server writes one JSON event per request stage. The policy records only the
benchmark's own users (operator, driver, floor client), at Metadata level (no bodies), and
drops the RequestReceived stage: a request then has exactly one ResponseComplete event (or
Panic), and a watch also has a ResponseStarted event when it begins. Timestamps are the
server's wall clock with microseconds, the same clock as the harness's `time.time()`.
"""

from __future__ import annotations

import datetime
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FINAL_STAGES = frozenset({"ResponseComplete", "Panic"})
#: Verbs that change something; the rest are reads.
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def policy(users: Sequence[str] = (), groups: Sequence[str] = ()) -> dict[str, Any]:
    """An audit.k8s.io/v1 Policy: Metadata level for `users` and the members of `groups`,
    nothing for anyone else."""
    rules: list[dict[str, Any]] = []
    if users:
        rules.append({"level": "Metadata", "users": list(users)})
    if groups:
        rules.append({"level": "Metadata", "userGroups": list(groups)})
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [*rules, {"level": "None"}],
    }


def apiserver_args(policy_file: Path, log: Path) -> list[str]:
    """kube-apiserver's flags for a JSON audit log of `policy_file`'s requests, written
    before each request is answered (blocking) and never rotated."""
    return [
        f"--audit-policy-file={policy_file}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
        "--audit-log-mode=blocking",
    ]


@dataclass(frozen=True)
class Request:
    """One audited request stage."""

    user: str
    stage: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    #: When the server received the request and when it reached this stage (epoch seconds).
    received: float
    at: float

    @property
    def kind(self) -> str:
        """`create pods`, `patch tfjobs/status`, `get /healthz` (non-resource URLs)."""
        target = self.resource + (f"/{self.subresource}" if self.subresource else "")
        return f"{self.verb} {target}"

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS


def parse_time(text: str) -> float:
    """RFC 3339 with microseconds (`2026-11-22T02:39:45.323024Z`) to epoch seconds."""
    return datetime.datetime.fromisoformat(text).timestamp()


def parse_event(event: dict[str, Any]) -> Request:
    ref = event.get("objectRef") or {}
    resource = ref.get("resource") or event.get("requestURI", "").split("?", 1)[0]
    return Request(
        user=(event.get("user") or {}).get("username", ""),
        stage=event.get("stage", ""),
        verb=event.get("verb", ""),
        resource=resource,
        subresource=ref.get("subresource", ""),
        namespace=ref.get("namespace", ""),
        name=ref.get("name", ""),
        code=int((event.get("responseStatus") or {}).get("code") or 0),
        received=parse_time(event["requestReceivedTimestamp"]),
        at=parse_time(event["stageTimestamp"]),
    )


def parse_lines(lines: Iterable[str]) -> Iterator[Request]:
    for line in lines:
        if line.strip():
            yield parse_event(json.loads(line))


def read(path: Path) -> list[Request]:
    with path.open(encoding="utf-8") as log:
        return list(parse_lines(log))


class Tail:
    """Reads the events appended to the audit log since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = ""

    def new(self) -> list[Request]:
        try:
            with self.path.open(encoding="utf-8") as log:
                log.seek(self._offset)
                text = log.read()
                self._offset = log.tell()
        except FileNotFoundError:
            return []
        text = self._partial + text
        complete, _, self._partial = text.rpartition("\n")
        return list(parse_lines(complete.splitlines()))

    def size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0


def completed(requests: Iterable[Request], user: str) -> list[Request]:
    """The user's requests, one record each (their final stage)."""
    return [r for r in requests if r.user == user and r.stage in FINAL_STAGES]


def watched(requests: Iterable[Request], user: str) -> set[str]:
    """The resources `user` opened a watch of: how the harness knows a process it started
    is watching (the operator, the floor's responder)."""
    return {r.resource for r in requests if r.user == user and r.verb == "watch"}


def created(requests: Iterable[Request], resource: str) -> list[Request]:
    """Successful creates of `resource` (HTTP 201), one per object."""
    return [r for r in requests if r.verb == "create" and r.resource == resource and r.code == 201]


@dataclass(frozen=True)
class RequestCounts:
    total: int
    writes: int
    by_kind: dict[str, int]
    by_code: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "writes": self.writes,
            "by_kind": self.by_kind,
            "by_code": self.by_code,
        }


def count(requests: Sequence[Request]) -> RequestCounts:
    kinds = Counter(r.kind for r in requests)
    codes = Counter(str(r.code) for r in requests)
    return RequestCounts(
        total=len(requests),
        writes=sum(1 for r in requests if r.is_write),
        by_kind=dict(sorted(kinds.items(), key=lambda item: (-item[1], item[0]))),
        by_code=dict(sorted(codes.items())),
    )


def watch_starts(requests: Iterable[Request]) -> dict[str, dict[str, int]]:
    """User -> resource -> watches started: more than one is a watch that had to restart."""
    starts: dict[str, dict[str, int]] = {}
    for r in requests:
        if r.verb == "watch" and r.stage == "ResponseStarted":
            by_resource = starts.setdefault(r.user, {})
            by_resource[r.resource] = by_resource.get(r.resource, 0) + 1
    return starts
