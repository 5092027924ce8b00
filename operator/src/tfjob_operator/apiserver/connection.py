"""Where the API server is and who the operator (or the client) is to it: in-cluster or a
kubeconfig, at its current context or a named one.

Read once at startup into a `Connection`: the server URL, a TLS context (the cluster's CA,
a client certificate if the kubeconfig names one) and a source of bearer tokens. Tokens
are read again when they may have changed (a projected service-account token is rotated
by the kubelet; an exec plugin's token expires), and at once after a 401. The operator
asks for a token from its event loop (`header`, which runs a plugin in a thread); the
client, which is synchronous, asks directly (`header_now`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from ..timeutil import from_rfc3339

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: How long a token read from a file is used before the file is read again.
TOKEN_FILE_TTL_SECONDS: Final = 60.0
#: How long a credential plugin may take (a login prompt is not something it may wait on).
EXEC_PLUGIN_TIMEOUT_SECONDS: Final = 60.0


class CredentialsError(RuntimeError):
    """The kubeconfig or the pod's service account does not say how to reach the server."""


@dataclass
class TokenSource:
    """A bearer token: fixed, read from a file, or printed by an exec credential plugin."""

    token: str | None = None
    path: Path | None = None
    exec_config: Mapping[str, Any] | None = None
    _expires: float = field(default=0.0, repr=False)

    async def header(self, refresh: bool = False) -> str | None:
        if self.exec_config is not None and self._due(refresh):
            return await asyncio.to_thread(self.header_now, refresh)
        return self.header_now(refresh)

    def header_now(self, refresh: bool = False) -> str | None:
        """The Authorization header, reading the file or running the plugin when due."""
        if self.path is not None and self._due(refresh):
            self.token = self.path.read_text().strip()
            self._expires = time.monotonic() + TOKEN_FILE_TTL_SECONDS
        elif self.exec_config is not None and self._due(refresh):
            self.token, lifetime = _run_exec_plugin(self.exec_config)
            self._expires = time.monotonic() + lifetime
        return f"Bearer {self.token}" if self.token else None

    def _due(self, refresh: bool) -> bool:
        if self.path is None and self.exec_config is None:
            return False
        return refresh or self.token is None or time.monotonic() >= self._expires


@dataclass
class Connection:
    server: str
    ssl_context: ssl.SSLContext | bool
    tokens: TokenSource
    #: The namespace of the kubeconfig's context, or the pod's own namespace.
    namespace: str = "default"


def load_connection(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """In-cluster credentials when running in a pod, else `kubeconfig`, $KUBECONFIG or
    ~/.kube/config, at `context` or the kubeconfig's current context (as kubectl does)."""
    in_a_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if in_a_pod and kubeconfig is None and context is None and _kubeconfig_path() is None:
        return _in_cluster()
    path = Path(kubeconfig) if kubeconfig else _kubeconfig_path() or _home_kubeconfig()
    return _from_kubeconfig(path, context)


def _kubeconfig_path() -> Path | None:
    """$KUBECONFIG's first file (kubectl merges several; the first names the context)."""
    value = os.environ.get("KUBECONFIG")
    first = next((part for part in (value or "").split(os.pathsep) if part), None)
    return Path(first) if first else None


def _home_kubeconfig() -> Path:
    return Path.home() / ".kube" / "config"


def _in_cluster() -> Connection:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"
    context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT_DIR / "ca.crt"))
    namespace_file = SERVICE_ACCOUNT_DIR / "namespace"
    return Connection(
        server=f"https://{host}:{port}",
        ssl_context=context,
        tokens=TokenSource(path=SERVICE_ACCOUNT_DIR / "token"),
        namespace=namespace_file.read_text().strip() if namespace_file.exists() else "default",
    )


def _from_kubeconfig(path: Path, context_name: str | None = None) -> Connection:
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except OSError as error:
        raise CredentialsError(f"cannot read kubeconfig {path}: {error}") from None
    context_name = context_name or document.get("current-context")
    if not context_name:
        raise CredentialsError(f"kubeconfig {path}: no current-context; name one (--context)")
    context = _named(document, "contexts", context_name, path).get("context") or {}
    cluster = _named(document, "clusters", context.get("cluster"), path).get("cluster") or {}
    user = _named(document, "users", context.get("user"), path).get("user") or {}
    server = cluster.get("server")
    if not server:
        raise CredentialsError(
            f"kubeconfig {path}: cluster {context.get('cluster')!r} has no server"
        )
    base = path.parent
    tls: ssl.SSLContext | bool = True
    if server.startswith("https://"):
        tls = _tls_context(cluster, user, base)
    tokens = TokenSource(
        token=user.get("token"),
        path=base / user["tokenFile"] if user.get("tokenFile") else None,
        exec_config=user.get("exec"),
    )
    return Connection(
        server=server.rstrip("/"),
        ssl_context=tls,
        tokens=tokens,
        namespace=context.get("namespace") or "default",
    )


def _named(document: Mapping[str, Any], section: str, name: Any, path: Path) -> Mapping[str, Any]:
    for entry in document.get(section) or []:
        if entry.get("name") == name:
            return dict(entry)
    raise CredentialsError(f"kubeconfig {path}: no {section[:-1]} named {name!r}")


def _tls_context(cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        context.load_verify_locations(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
    elif cluster.get("certificate-authority"):
        context.load_verify_locations(cafile=str(base / cluster["certificate-authority"]))
    certificate = _pem(user, "client-certificate", base)
    key = _pem(user, "client-key", base)
    if certificate and key:
        # ssl loads a chain only from files: a private temporary directory, removed at once.
        with tempfile.TemporaryDirectory(prefix="tfjob-operator-") as scratch:
            cert_path, key_path = Path(scratch) / "cert.pem", Path(scratch) / "key.pem"
            cert_path.write_bytes(certificate)
            key_path.touch(mode=0o600)
            key_path.write_bytes(key)
            context.load_cert_chain(cert_path, key_path)
    return context


def _pem(user: Mapping[str, Any], name: str, base: Path) -> bytes | None:
    if user.get(f"{name}-data"):
        return base64.b64decode(str(user[f"{name}-data"]))
    if user.get(name):
        return (base / str(user[name])).read_bytes()
    return None


def _run_exec_plugin(config: Mapping[str, Any]) -> tuple[str, float]:
    """Runs a client-go credential plugin; returns its token and how long to use it."""
    env = dict(os.environ)
    for entry in config.get("env") or []:
        env[entry["name"]] = entry["value"]
    try:
        process = subprocess.run(
            [config["command"], *(config.get("args") or [])],
            env=env,
            capture_output=True,
            check=False,
            timeout=EXEC_PLUGIN_TIMEOUT_SECONDS,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise CredentialsError(f"credential plugin {config['command']}: {error}") from None
    if process.returncode != 0:
        raise CredentialsError(
            f"credential plugin {config['command']} exited {process.returncode}: "
            f"{process.stderr.decode(errors='replace').strip()}"
        )
    status = json.loads(process.stdout).get("status") or {}
    if not status.get("token"):
        raise CredentialsError(
            f"credential plugin {config['command']} printed no token "
            "(client certificates from exec plugins are not supported)"
        )
    lifetime = TOKEN_FILE_TTL_SECONDS
    if status.get("expirationTimestamp"):
        remaining = from_rfc3339(status["expirationTimestamp"]).timestamp() - time.time()
        lifetime = max(remaining - 30.0, 0.0)
    return str(status["token"]), lifetime
