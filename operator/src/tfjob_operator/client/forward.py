"""A local port that reaches a port of a pod, as `kubectl port-forward` does:
`tfjob-operator tensorboard NAME`.

Each connection to 127.0.0.1:PORT opens the pod's `portforward` subresource on the API
server as a WebSocket (`v4.channel.k8s.io`, the protocol the kubelet and Kubernetes'
own Python client speak), with the kubeconfig's credentials, and copies bytes both ways:
the API server relays them to the kubelet, which connects to the port inside the pod.
Channel 0 carries the data, channel 1 the kubelet's errors; each starts with the port
number. The pod is looked up by a label selector for each connection, so a replaced pod
(a TensorBoard restarted) is reached by the next one. The API server's proxy to Services
is no substitute: it rewrites HTML pages and cannot serve one whose Content-Encoding is
`identity`, as TensorBoard's is. It needs `pods/portforward` (create) in the namespace.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import struct
import threading
import urllib.parse
from types import TracebackType
from typing import BinaryIO, Final

from ..apiserver.errors import ApiError
from ..apiserver.sync import Rest

PROTOCOL: Final = "v4.channel.k8s.io"
DATA, ERROR = 0, 1
_BINARY, _CLOSE, _PING, _PONG = 0x2, 0x8, 0x9, 0xA
CHUNK: Final = 64 * 1024


class PortForward:
    """Serves `address`:`local_port` (0: a free port) as `port` of a running pod that
    `selector` selects in `namespace`, until `close`; a context manager too. `url` is
    http:// at the local port."""

    def __init__(
        self,
        rest: Rest,
        namespace: str,
        selector: str,
        port: int,
        local_port: int = 0,
        address: str = "127.0.0.1",
    ) -> None:
        self.rest = rest
        self.namespace = namespace
        self.selector = selector
        self.port = port
        self._listener = socket.create_server((address, local_port))
        # accept() wakes this often to see whether the forward was closed.
        self._listener.settimeout(0.5)
        bound = self._listener.getsockname()[1]
        self.url = f"http://{address}:{bound}/"
        self._closed = threading.Event()
        self._streams: set[_WebSocket] = set()
        self._streams_lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="port-forward", daemon=True)
        self._thread.start()

    def pod(self) -> str:
        """A running, ready pod the selector selects; raises ValueError when there is none."""
        listed = self.rest.get(
            f"/api/v1/namespaces/{self.namespace}/pods", {"labelSelector": self.selector}
        )
        for pod in listed.get("items") or []:
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                return str(pod["metadata"]["name"])
        raise ValueError(f"no ready pod selected by {self.selector} in {self.namespace}")

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                local, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            local.settimeout(None)
            threading.Thread(target=self._serve, args=(local,), daemon=True).start()

    def _serve(self, local: socket.socket) -> None:
        with local:
            try:
                path = (
                    f"/api/v1/namespaces/{self.namespace}/pods/{self.pod()}/portforward"
                    f"?ports={self.port}"
                )
                stream = _WebSocket.open(self.rest, path)
            except (ValueError, ApiError, OSError):
                return  # the browser sees the connection end; the next one looks again
            with self._streams_lock:
                if self._closed.is_set():
                    stream.close()
                    return
                self._streams.add(stream)
            try:
                upstream = threading.Thread(target=stream.send_from, args=(local,), daemon=True)
                upstream.start()
                stream.receive_into(local)
            finally:
                stream.close()
                with self._streams_lock:
                    self._streams.discard(stream)

    def close(self) -> None:
        """Stops listening and ends the connections in flight (a browser keeps some open)."""
        self._closed.set()
        self._thread.join()
        self._listener.close()
        with self._streams_lock:
            for stream in self._streams:
                stream.close()
            self._streams.clear()

    def __enter__(self) -> PortForward:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


class _WebSocket:
    """A client WebSocket (RFC 6455) on a socket to the API server, for one forward."""

    def __init__(self, connection: socket.socket, reader: BinaryIO) -> None:
        self.connection = connection
        self.reader = reader
        self._write = threading.Lock()

    @classmethod
    def open(cls, rest: Rest, path: str) -> _WebSocket:
        server = urllib.parse.urlsplit(rest.connection.server)
        host = server.hostname or ""
        port = server.port or (443 if server.scheme == "https" else 80)
        raw = socket.create_connection((host, port), timeout=30)
        context = rest.ssl_context
        connection = context.wrap_socket(raw, server_hostname=host) if context else raw
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {server.netloc}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            f"Sec-WebSocket-Protocol: {PROTOCOL}",
        ]
        header = rest.connection.tokens.header_now()
        if header:
            lines.append(f"Authorization: {header}")
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        reader = connection.makefile("rb")
        status = reader.readline().decode(errors="replace")
        answer = []
        while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
            answer.append(line)
        if " 101 " not in status:
            body = reader.read1(CHUNK) if hasattr(reader, "read1") else b""
            connection.close()
            code = int(status.split()[1]) if len(status.split()) > 1 else 502
            raise ApiError(code, f"port-forward {path}", body)
        connection.settimeout(None)
        return cls(connection, reader)

    def send_from(self, local: socket.socket) -> None:
        """Local bytes to the pod's port, until the local side ends."""
        try:
            while data := local.recv(CHUNK):
                self._send(_BINARY, bytes([DATA]) + data)
        except OSError:
            pass
        finally:
            self.close()

    def receive_into(self, local: socket.socket) -> None:
        """The pod's bytes to the local side, until either end closes."""
        started: set[int] = set()
        try:
            while (frame := self._receive()) is not None:
                opcode, payload = frame
                if opcode == _PING:
                    self._send(_PONG, payload)
                if opcode != _BINARY or not payload:
                    continue
                channel, data = payload[0], payload[1:]
                if channel not in started:  # each channel opens with the port number
                    started.add(channel)
                    data = data[2:]
                if channel == DATA and data:
                    local.sendall(data)
                elif channel == ERROR and data:
                    return  # the kubelet could not reach the port: end this connection
        except OSError:
            pass
        finally:
            # shutdown, not only close: it wakes send_from's recv on the same socket.
            with contextlib.suppress(OSError):
                local.shutdown(socket.SHUT_RDWR)
            local.close()

    def _receive(self) -> tuple[int, bytes] | None:
        head = self.reader.read(2)
        if len(head) < 2:
            return None
        opcode, length = head[0] & 0x0F, head[1] & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self.reader.read(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self.reader.read(8))
        mask = self.reader.read(4) if head[1] & 0x80 else b""
        payload = self.reader.read(length)
        if mask:
            payload = _masked(payload, mask)
        if opcode == _CLOSE:
            return None
        return opcode, payload

    def _send(self, opcode: int, payload: bytes) -> None:
        """One frame, masked as a client's must be."""
        length = len(payload)
        if length < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        mask = os.urandom(4)
        with self._write:
            self.connection.sendall(head + mask + _masked(payload, mask))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.connection.close()


def _masked(payload: bytes, mask: bytes) -> bytes:
    """`payload` XOR the repeated 4-byte `mask`, as whole integers (fast for long frames)."""
    size = len(payload)
    key = (mask * (size // 4 + 1))[:size]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(size, "big")
