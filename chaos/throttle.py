"""Throttling by the API server itself: API Priority and Fairness given a tiny share.

A FlowSchema puts every request of the operators' group into a priority level of its own
whose nominal share is 1 (of the API server's ~256: about 3 of its 600 concurrent seats),
that lends and borrows nothing, and that rejects what it cannot run at once: the API
server answers the operators' excess with real 429s carrying `Retry-After`, while every
other client (the kubelet, the controllers, the harness, which is exempt as
system:masters) is served as usual. Removing both objects ends the throttle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Final

from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.apiserver.sync import Rest

FLOWCONTROL: Final = "/apis/flowcontrol.apiserver.k8s.io/v1"
NAME: Final = "chaos-operators-throttled"
#: Ahead of the built-in schemas that would match the operators (global-default, 9900).
PRECEDENCE: Final = 500


def priority_level() -> dict[str, Any]:
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": NAME},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 1,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }


def flow_schema(group: str) -> dict[str, Any]:
    everything = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": NAME},
        "spec": {
            "priorityLevelConfiguration": {"name": NAME},
            "matchingPrecedence": PRECEDENCE,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": group}}],
                    "resourceRules": [{**everything, "clusterScope": True, "namespaces": ["*"]}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }


@contextlib.contextmanager
def throttled(rest: Rest, group: str) -> Iterator[None]:
    """The API server throttles `group`'s requests while the block runs."""
    rest.create_or_replace(f"{FLOWCONTROL}/prioritylevelconfigurations", priority_level())
    rest.create_or_replace(f"{FLOWCONTROL}/flowschemas", flow_schema(group))
    try:
        yield
    finally:
        for plural in ("flowschemas", "prioritylevelconfigurations"):
            with contextlib.suppress(ApiError):
                rest.request("DELETE", f"{FLOWCONTROL}/{plural}/{NAME}")
