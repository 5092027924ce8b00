"""Says which peers a task is waiting for, while it waits.

Creating a multi-worker strategy blocks until every task of the cluster has connected,
and TensorFlow logs nothing meanwhile (for up to an hour, its registration timeout). A
peer whose pod is not scheduled, whose name does not resolve, or whose packets a
firewall drops looks exactly like a slow start. While the strategy is being created, a
watcher tries a TCP connection to every other training task every `interval` seconds,
after a first `interval`, and logs one line naming each peer and what stopped the
connection, e.g.

    tfjob-train: worker-0 still waiting for its peers after 30 s:
    worker-1 at digits-worker-1.demo.svc:2222: timed out

so that `kubectl logs` (and a diagnosis built on it) says which replica waits for which
peer. The probe only connects and closes: no gRPC, no TensorFlow. The watcher is a
child process (`python -m tfjob_trainer.peers`): while TensorFlow waits for the cluster
it holds the interpreter's lock, and a thread would never run. The child exits when
told to, or when its parent is gone.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import TracebackType

from tfjob_trainer.tf_config import TFConfig

INTERVAL = 15.0
CONNECT_TIMEOUT = 3.0


def peers_of(config: TFConfig) -> dict[str, str]:
    """`<type>-<index>` -> address of every training task other than this one."""
    return {
        f"{task_type}-{index}": address
        for task_type, addresses in config.training_cluster.items()
        for index, address in enumerate(addresses)
        if (task_type, index) != (config.task_type, config.task_index)
    }


def probe(address: str, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """None if a TCP connection to `address` (host:port) opens, else why not."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return None
    except socket.gaierror as error:
        return f"name does not resolve ({error.strerror})"
    except TimeoutError:
        return "timed out (packets dropped, or no route)"
    except OSError as error:
        return error.strerror or type(error).__name__


def report(task: str, waited: float, problems: Mapping[str, tuple[str, str]]) -> str:
    if not problems:
        return f"{task} still waiting after {waited:.0f} s; every peer accepts connections"
    details = "; ".join(
        f"{peer} at {address}: {problem}" for peer, (address, problem) in problems.items()
    )
    return f"{task} still waiting for its peers after {waited:.0f} s: {details}"


class PeerWatch:
    """`with PeerWatch(config): create_strategy(...)`, reporting while the block runs."""

    def __init__(self, config: TFConfig, interval: float = INTERVAL) -> None:
        self.peers = peers_of(config)
        self.argv = [
            sys.executable, "-m", "tfjob_trainer.peers",
            f"--task={config.task_type}-{config.task_index}", f"--interval={interval}",
            f"--parent={os.getpid()}",
            *(f"{peer}={address}" for peer, address in self.peers.items()),
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PeerWatch:
        if self.peers:
            self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait()


def watch(task: str, peers: Mapping[str, str], interval: float, parent: int) -> None:
    started = time.monotonic()
    while True:
        deadline = time.monotonic() + interval
        while time.monotonic() < deadline:
            if os.getppid() != parent:
                return
            time.sleep(0.5)
        problems = {}
        for peer, address in peers.items():
            problem = probe(address)
            if problem is not None:
                problems[peer] = (address, problem)
        print(f"tfjob-train: {report(task, time.monotonic() - started, problems)}",
              file=sys.stderr, flush=True)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tfjob_trainer.peers")
    parser.add_argument("--task", required=True)
    parser.add_argument("--interval", type=float, default=INTERVAL)
    parser.add_argument("--parent", type=int, required=True, help="exit once it is gone")
    parser.add_argument("peers", nargs="+", help="NAME=HOST:PORT")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    watch(args.task, dict(peer.split("=", 1) for peer in args.peers), args.interval, args.parent)


if __name__ == "__main__":
    main()
