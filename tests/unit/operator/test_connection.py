"""Reading a kubeconfig: the server, TLS, and each kind of bearer token.

Client certificates are used by every integration test (the local cluster's kubeconfigs
carry them), so only token sources are checked here.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfjob_operator.apiserver.connection import CredentialsError, load_connection


def kubeconfig(tmp_path: Path, user: dict[str, Any], **cluster: Any) -> str:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "work",
        "contexts": [
            {"name": "other", "context": {"cluster": "nowhere", "user": "nobody"}},
            {"name": "work", "context": {"cluster": "c", "user": "u", "namespace": "ml"}},
        ],
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": "https://api.example:6443/", **cluster},
            }
        ],
        "users": [{"name": "u", "user": user}],
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def header(path: str, refresh: bool = False) -> str | None:
    return asyncio.run(load_connection(path).tokens.header(refresh))


def test_the_current_context_names_server_namespace_and_token(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, {"token": "abc"}, **{"insecure-skip-tls-verify": True})
    connection = load_connection(path)
    assert connection.server == "https://api.example:6443"
    assert connection.namespace == "ml"
    assert isinstance(connection.ssl_context, ssl.SSLContext)
    assert connection.ssl_context.verify_mode is ssl.CERT_NONE
    assert header(path) == "Bearer abc"


def test_a_token_file_is_read_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    assert header(kubeconfig(tmp_path, {"tokenFile": "token"})) == "Bearer from-file"


def test_an_exec_plugin_token_is_used(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': os.environ['PLUGIN_TOKEN'], "
        "'expirationTimestamp': '2099-01-01T00:00:00Z'}}))\n"
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "env": [{"name": "PLUGIN_TOKEN", "value": "from-plugin"}],
        }
    }
    assert header(kubeconfig(tmp_path, user)) == "Bearer from-plugin"


def test_a_failing_exec_plugin_says_why(tmp_path: Path) -> None:
    user = {"exec": {"command": sys.executable, "args": ["-c", "raise SystemExit('no login')"]}}
    with pytest.raises(CredentialsError, match="no login"):
        header(kubeconfig(tmp_path, user))


def test_a_context_naming_a_missing_cluster_is_an_error(tmp_path: Path) -> None:
    path = Path(kubeconfig(tmp_path, {"token": "abc"}))
    document = yaml.safe_load(path.read_text())
    document["current-context"] = "other"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(CredentialsError, match="no cluster named 'nowhere'"):
        load_connection(str(path))


def test_a_named_context_is_used_instead_of_the_current_one(tmp_path: Path) -> None:
    path = Path(kubeconfig(tmp_path, {"token": "abc"}))
    document = yaml.safe_load(path.read_text())
    document["clusters"].append({"name": "nowhere", "cluster": {"server": "http://other:8080"}})
    document["users"].append({"name": "nobody", "user": {"token": "xyz"}})
    path.write_text(yaml.safe_dump(document))
    connection = load_connection(str(path), context="other")
    assert connection.server == "http://other:8080"
    assert connection.namespace == "default"
    assert connection.tokens.header_now() == "Bearer xyz"
    with pytest.raises(CredentialsError, match="no context named 'missing'"):
        load_connection(str(path), context="missing")


def test_kubeconfig_names_several_files_and_the_first_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kubeconfig(tmp_path, {"token": "abc"})
    monkeypatch.setenv("KUBECONFIG", f"{path}:{tmp_path / 'absent'}")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # a kubeconfig wins in a pod
    assert load_connection().server == "https://api.example:6443"


def test_the_synchronous_token_runs_the_exec_plugin_too(tmp_path: Path) -> None:
    command = "import json; print(json.dumps({'status': {'token': 'now'}}))"
    user = {"exec": {"command": sys.executable, "args": ["-c", command]}}
    assert load_connection(kubeconfig(tmp_path, user)).tokens.header_now() == "Bearer now"
