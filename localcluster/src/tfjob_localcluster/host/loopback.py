"""A port of the host's loopback, reachable at the same address inside a node.

A node (the local cluster's, a kind node's container) has a network namespace of its
own, whose 127.0.0.1 is not the host's. The OCI registry (images/registry.py) listens on the
host's loopback, and images are named after it (`127.0.0.1:PORT/...`, as kind's guide to
a local registry names its registry `localhost:5001`), so the node's containerd must find
it at that address too. `LoopbackRelay` opens a listening socket inside the node's
namespace (a thread enters it with setns(2), binds, and comes back) and relays each
connection to the host's 127.0.0.1:PORT. Nothing is added to either namespace's network
configuration; the listener goes with the relay, or with the process.

    with LoopbackRelay(Path(f"/proc/{node_pid}/ns/net"), registry.port):
        ...   # the node's containerd pulls 127.0.0.1:PORT/...
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading
from pathlib import Path

from tfjob_localcluster.host.procs import Started

CLONE_NEWNET = 0x40000000
CHUNK = 1 << 16

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def listen_in(netns: Path, port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:`port` of the network namespace `netns`.

    A network namespace belongs to a thread: a thread of its own enters it, opens the
    socket and ends, so no other thread of the process ever changes namespace.
    """
    made: list[socket.socket | BaseException] = []

    def open_inside() -> None:
        try:
            with open(netns) as target:
                _setns(target.fileno())
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", port))
            listener.listen(64)
            made.append(listener)
        except BaseException as error:  # handed to the caller's thread
            made.append(error)

    thread = threading.Thread(target=open_inside, name=f"enter {netns}")
    thread.start()
    thread.join()
    (outcome,) = made
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copies until `source` ends, then ends `sink`'s writing side."""
    with contextlib.suppress(OSError):
        while chunk := source.recv(CHUNK):
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class LoopbackRelay(Started):
    def __init__(self, netns: Path, port: int) -> None:
        self.netns = netns
        self.port = port
        self.listener: socket.socket | None = None

    def start(self) -> LoopbackRelay:
        self.listener = listen_in(self.netns, self.port)
        threading.Thread(
            target=self._accept, args=(self.listener,), name=f"relay :{self.port}", daemon=True
        ).start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                inside, _ = listener.accept()
            except OSError:  # closed by stop()
                return
            threading.Thread(target=self._relay, args=(inside,), daemon=True).start()

    def _relay(self, inside: socket.socket) -> None:
        with inside:
            try:
                outside = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            except OSError:
                return
            with outside:
                outside.settimeout(None)
                back = threading.Thread(target=_pump, args=(outside, inside), daemon=True)
                back.start()
                _pump(inside, outside)
                back.join()

    def stop(self) -> None:
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
            self.listener = None
