"""Probes and lifecycle hooks: exec, httpGet, tcpSocket (and the `sleep` hook action).

An exec handler runs through the exec shim inside the running container's namespaces.
HTTP and TCP handlers connect from the node to the pod IP (the bridge reaches it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

Obj = dict[str, Any]
ExecFunction = Callable[[list[str], float], Awaitable[tuple[int, bytes]]]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HandlerResult:
    ok: bool
    detail: str


def resolve_port(port: int | str, container: Obj) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ValueError(f"port {port!r} is not declared by container {container['name']!r}")


async def run_handler(
    handler: Obj, container: Obj, pod_ip: str, exec_in_container: ExecFunction, time_limit: float
) -> HandlerResult:
    try:
        if action := handler.get("exec"):
            code, output = await exec_in_container(list(action.get("command") or []), time_limit)
            text = output.decode(errors="replace").strip()
            return HandlerResult(code == 0, text or f"command exited with {code}")
        if action := handler.get("httpGet"):
            return await _http_get(action, container, pod_ip, time_limit)
        if action := handler.get("tcpSocket"):
            host = action.get("host") or pod_ip
            port = resolve_port(action["port"], container)
            _reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), time_limit
            )
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return HandlerResult(True, "")
        if action := handler.get("sleep"):
            await asyncio.sleep(float(action.get("seconds", 0)))
            return HandlerResult(True, "")
    except TimeoutError:
        return HandlerResult(False, f"timeout after {time_limit:g}s")
    except (OSError, ValueError, aiohttp.ClientError) as error:
        return HandlerResult(False, str(error))
    return HandlerResult(False, f"unsupported handler {sorted(handler)}")


async def _http_get(action: Obj, container: Obj, pod_ip: str, time_limit: float) -> HandlerResult:
    scheme = str(action.get("scheme", "HTTP")).lower()
    host = action.get("host") or pod_ip
    port = resolve_port(action["port"], container)
    path = action.get("path") or "/"
    headers = {h["name"]: h["value"] for h in action.get("httpHeaders") or []}
    headers.setdefault("User-Agent", "kube-probe/1.34")
    context: ssl.SSLContext | bool = False
    if scheme == "https":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    url = f"{scheme}://{host}:{port}{path if path.startswith('/') else '/' + path}"
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=time_limit)) as session,
        session.get(url, headers=headers, ssl=context, allow_redirects=False) as reply,
    ):
        body = (await reply.content.read(10240)).decode(errors="replace")
        ok = 200 <= reply.status < 400
        return HandlerResult(
            ok, f"HTTP probe failed with statuscode: {reply.status}" if not ok else body
        )


@dataclass(frozen=True)
class ProbeSettings:
    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int

    @classmethod
    def of(cls, probe: Obj) -> ProbeSettings:
        return cls(
            initial_delay=float(probe.get("initialDelaySeconds", 0)),
            period=float(probe.get("periodSeconds", 10)),
            timeout=float(probe.get("timeoutSeconds", 1)),
            success_threshold=int(probe.get("successThreshold", 1)),
            failure_threshold=int(probe.get("failureThreshold", 3)),
        )


class Prober:
    """Runs one probe periodically; reports each change of its verdict."""

    def __init__(
        self,
        kind: str,
        probe: Obj,
        run: Callable[[Obj, float], Awaitable[HandlerResult]],
        on_verdict: Callable[[bool, HandlerResult], None],
    ) -> None:
        self.kind = kind
        self.probe = probe
        self.settings = ProbeSettings.of(probe)
        self._run = run
        self._on_verdict = on_verdict

    async def loop(self) -> None:
        settings = self.settings
        await asyncio.sleep(settings.initial_delay)
        successes = failures = 0
        verdict: bool | None = None
        while True:
            result = await self._run(self.probe, settings.timeout)
            if result.ok:
                successes, failures = successes + 1, 0
            else:
                successes, failures = 0, failures + 1
            if result.ok and successes >= settings.success_threshold and verdict is not True:
                verdict = True
                self._on_verdict(True, result)
            elif not result.ok and failures >= settings.failure_threshold and verdict is not False:
                verdict = False
                self._on_verdict(False, result)
            elif not result.ok:
                log.debug("%s probe failed (%d): %s", self.kind, failures, result.detail)
            await asyncio.sleep(settings.period)
