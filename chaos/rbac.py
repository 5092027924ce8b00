"""The operators' permissions in a chaos run: the chart's own roles, bound to their group.

Each candidate authenticates with a client certificate of its own, so that the API
server's audit log tells candidates apart, in the group `GROUP` and no other (not
`system:masters`): what it may do is exactly what the chart grants its ServiceAccount,
the operator's ClusterRole and the leader election's Role in the release's namespace,
read from the install generated from the chart (manifests/base/operator.yaml). Their
bindings name the group beside the ServiceAccount. A request the chart's roles do not
allow is answered 403, and the verdict counts such answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from tfjob_operator.apiserver.sync import Rest

ROOT = Path(__file__).resolve().parents[1]
INSTALL: Final = ROOT / "manifests" / "base" / "operator.yaml"
RBAC: Final = "/apis/rbac.authorization.k8s.io/v1"
#: The operator's own roles in the chart (not the users' roles, not the metrics reader's).
ROLES: Final = frozenset(
    {("ClusterRole", "tfjob-operator"), ("Role", "tfjob-operator-leader-election")}
)
BINDINGS: Final = {"ClusterRoleBinding": "ClusterRole", "RoleBinding": "Role"}
PLURALS: Final = {
    "ClusterRole": "clusterroles",
    "Role": "roles",
    "ClusterRoleBinding": "clusterrolebindings",
    "RoleBinding": "rolebindings",
}


def operator_rbac(documents: Iterable[Mapping[str, Any]], group: str) -> list[dict[str, Any]]:
    """The chart's operator roles and their bindings, each binding also naming `group`."""
    found: list[dict[str, Any]] = []
    for document in documents:
        kind, name = document.get("kind"), (document.get("metadata") or {}).get("name")
        if (kind, name) in ROLES:
            found.append(dict(document))
        elif kind in BINDINGS and (BINDINGS[kind], document["roleRef"]["name"]) in ROLES:
            subject = {"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}
            found.append({**document, "subjects": [*document["subjects"], subject]})
    kinds = sorted(str(o["kind"]) for o in found)
    if kinds != ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]:
        raise ValueError(f"{INSTALL} has not the operator's roles and bindings (found {kinds})")
    return found


def grant(rest: Rest, group: str, install: Path = INSTALL) -> None:
    """Creates (or replaces) the chart's operator roles, bound to `group`."""
    documents = [d for d in yaml.safe_load_all(install.read_text()) if d]
    for item in operator_rbac(documents, group):
        namespace = item["metadata"].get("namespace")
        scope = f"/namespaces/{namespace}" if namespace else ""
        rest.create_or_replace(f"{RBAC}{scope}/{PLURALS[item['kind']]}", item)
