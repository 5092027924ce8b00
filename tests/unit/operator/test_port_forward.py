"""The client's port-forward (client/forward.py) against a fake API server on the loopback
that speaks the kubelet's WebSocket protocol (v4.channel.k8s.io): each channel opens with
the port number, channel 0 carries data both ways, channel 1 errors."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import threading
from collections.abc import Iterator
from typing import BinaryIO

import pytest

from tfjob_operator.apiserver.connection import Connection, TokenSource
from tfjob_operator.apiserver.sync import Rest
from tfjob_operator.client.forward import PortForward, _masked

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PODS = {
    "items": [
        {
            "metadata": {"name": "old"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
        {
            "metadata": {"name": "board"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    ]
}


def frame(opcode: int, payload: bytes) -> bytes:
    """A server's frame: unmasked."""
    if len(payload) < 126:
        return struct.pack("!BB", 0x80 | opcode, len(payload)) + payload
    return struct.pack("!BBH", 0x80 | opcode, 126, len(payload)) + payload


def read_frame(reader: BinaryIO) -> tuple[int, bytes]:
    head = reader.read(2)
    length = head[1] & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", reader.read(2))
    assert head[1] & 0x80, "a client's frames are masked"
    mask = reader.read(4)
    return head[0] & 0x0F, _masked(reader.read(length), mask)


class FakeApiServer:
    """Lists pods; upgrades a portforward request and echoes what it receives, upper-case,
    or answers on the error channel when the port is 9999."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.requests: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection: socket.socket) -> None:
        with connection, connection.makefile("rb") as reader:
            request = reader.readline().decode()
            headers = {}
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            path = request.split()[1]
            self.requests.append(path)
            if "/portforward" not in path:
                body = json.dumps(PODS).encode()
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )
                return
            assert headers["sec-websocket-protocol"] == "v4.channel.k8s.io"
            accept = base64.b64encode(
                hashlib.sha1((headers["sec-websocket-key"] + GUID).encode()).digest()
            )
            connection.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n"
                b"Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
            )
            port = int(path.rsplit("=", 1)[1])
            prefix = struct.pack("<H", port)
            connection.sendall(frame(2, b"\x00" + prefix) + frame(2, b"\x01" + prefix))
            if port == 9999:
                connection.sendall(frame(2, b"\x01nothing listens on 9999"))
                return
            connection.sendall(frame(9, b"ping?"))
            while True:
                opcode, payload = read_frame(reader)
                if opcode == 0xA:
                    assert payload == b"ping?"
                    continue
                assert payload[0] == 0, "data goes on channel 0"
                connection.sendall(frame(2, b"\x00" + payload[1:].upper()))
                if payload.endswith(b"bye"):
                    return


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    yield server
    server.server.close()


def rest_for(api: FakeApiServer) -> Rest:
    return Rest(Connection(api.address, True, TokenSource(), namespace="ml"))


def test_bytes_go_both_ways_to_the_ready_pod_of_the_selector(api: FakeApiServer) -> None:
    with PortForward(rest_for(api), "ml", "tfjob.dev/tensorboard-of=mnist", 6006) as forward:
        port = int(forward.url.rsplit(":", 1)[1].strip("/"))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as local:
            long = os.urandom(300).hex()  # a frame with a 16-bit length
            local.sendall(long.encode())
            received = b""
            while len(received) < len(long):
                received += local.recv(4096)
            assert received == long.upper().encode()
            local.sendall(b"bye")
            assert local.recv(100) == b"BYE"
    pods, forwarded = api.requests[0], api.requests[1]
    assert pods.startswith("/api/v1/namespaces/ml/pods?labelSelector=tfjob.dev")
    assert forwarded == "/api/v1/namespaces/ml/pods/board/portforward?ports=6006"


def test_an_error_from_the_kubelet_ends_the_local_connection(api: FakeApiServer) -> None:
    with PortForward(rest_for(api), "ml", "app=x", 9999) as forward:
        port = int(forward.url.rsplit(":", 1)[1].strip("/"))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as local:
            local.sendall(b"GET / HTTP/1.1\r\n\r\n")
            assert local.recv(100) == b"", "closed, with nothing sent"


def test_masking_is_its_own_inverse() -> None:
    payload, mask = os.urandom(1001), os.urandom(4)
    assert _masked(_masked(payload, mask), mask) == payload
    assert _masked(b"\x00\x00\x00\x00\x00", b"\x01\x02\x03\x04") == b"\x01\x02\x03\x04\x01"
