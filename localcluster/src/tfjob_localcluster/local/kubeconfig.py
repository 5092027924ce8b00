"""Kubeconfig files for the local cluster's identities (built as data, written as YAML)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from tfjob_localcluster.local.pki import KeyPair


def kubeconfig(
    server: str, ca_cert: Path, client: KeyPair, user: str, cluster: str = "tfjob-local"
) -> dict[str, Any]:
    """A single-context kubeconfig that authenticates with a client certificate."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority": str(ca_cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(client.cert),
                    "client-key": str(client.key),
                },
            }
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
        "preferences": {},
    }


def write_kubeconfig(path: Path, config: dict[str, Any]) -> Path:
    """Writes atomically (readers never see half a file), mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.tmp")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        yaml.safe_dump(config, out, sort_keys=False)
    scratch.replace(path)
    return path
