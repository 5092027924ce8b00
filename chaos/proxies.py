"""The operators' path to the API server, through Toxiproxy: latency and partitions.

Each candidate reaches the API server through a proxy of its own on the host's loopback
(its kubeconfig names the proxy; TLS passes through, and the API server's certificate
names 127.0.0.1). Toxiproxy (Shopify's, built from its Go module like the other tools)
then makes the network faults a production control plane shows, for one operator or all
of them, with nothing changed in the operator:

- latency: every answer of the API server reaches the operators 2-8 s late (a latency
  toxic on the downstream, 5 s +- 3 s);
- a partition of one operator: a `timeout` toxic of 0 on both directions drops every byte
  and closes nothing, so its connections are half-open, as behind a dead switch; new
  ones are accepted and as silent. Removing the toxic ends it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from tfjob_localcluster import binaries
from tfjob_localcluster.host.ports import free_port
from tfjob_localcluster.host.procs import ManagedProcess, Started
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.apiserver.sync import Rest

READY_SECONDS: Final = 30
#: Latency of every answer while the latency fault lasts: 5 s, give or take 3 s.
LATENCY_MS: Final = 5000
JITTER_MS: Final = 3000


class ProxyError(RuntimeError):
    pass


class Toxiproxy(Started):
    """toxiproxy-server on the loopback, and its HTTP API."""

    def __init__(self, state_dir: Path) -> None:
        self.port = free_port("127.0.0.1")
        #: Its HTTP API (plain HTTP: the TLS context is never used).
        self.api = Rest.at(f"http://127.0.0.1:{self.port}")
        self.process = ManagedProcess(
            "toxiproxy",
            [
                str(binaries.locate("toxiproxy-server").toxiproxy_server),
                "-host=127.0.0.1",
                f"-port={self.port}",
            ],
            state_dir / "toxiproxy.log",
        )

    def start(self) -> None:
        self.process.start()
        self.process.wait_ready(self._answers, READY_SECONDS, ProxyError, what="its API")

    def stop(self) -> None:
        self.process.stop(grace=5)

    def proxy(self, name: str, upstream: str) -> str:
        """A new proxy to `upstream` (host:port); returns where it listens (host:port)."""
        listen = f"127.0.0.1:{free_port('127.0.0.1')}"
        self.api.request("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream})
        return listen

    @contextlib.contextmanager
    def toxic(
        self, proxies: Sequence[str], kind: str, attributes: dict[str, Any], streams: Sequence[str]
    ) -> Iterator[None]:
        """The toxic `kind` on each of `proxies`, in each of `streams`, while the block runs."""
        added: list[tuple[str, str]] = []
        try:
            for proxy in proxies:
                for stream in streams:
                    name = f"{kind}-{stream}"
                    body = {"name": name, "type": kind, "stream": stream, "attributes": attributes}
                    self.api.request("POST", f"/proxies/{proxy}/toxics", body)
                    added.append((proxy, name))
            yield
        finally:
            for proxy, name in added:
                self.api.request("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def _answers(self) -> bool:
        try:
            self.api.request("GET", "/version")
        except (ApiError, OSError):
            return False
        return True


def latency(
    toxiproxy: Toxiproxy, proxies: Sequence[str]
) -> contextlib.AbstractContextManager[None]:
    """Every answer to `proxies`' clients 2-8 s late."""
    attributes = {"latency": LATENCY_MS, "jitter": JITTER_MS}
    return toxiproxy.toxic(proxies, "latency", attributes, ["downstream"])


def partition(toxiproxy: Toxiproxy, proxy: str) -> contextlib.AbstractContextManager[None]:
    """Nothing through `proxy` either way, and no connection closed: half-open."""
    return toxiproxy.toxic([proxy], "timeout", {"timeout": 0}, ["upstream", "downstream"])
