"""The trainer's report of which peers a task waits for, while the strategy starts."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from support.waiting import wait_until

from tfjob_trainer.peers import PeerWatch, peers_of, probe, report
from tfjob_trainer.tf_config import parse_tf_config


@pytest.fixture
def listening() -> Iterator[str]:
    """host:port of a socket that accepts connections."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def refusing() -> str:
    """host:port where nothing listens."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{unused.getsockname()[1]}"


def config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def test_peers_are_the_other_training_tasks() -> None:
    tf_config = parse_tf_config(
        config(
            {
                "chief": ["j-chief-0:2222"],
                "worker": ["j-worker-0:2222", "j-worker-1:2222"],
                "evaluator": ["j-evaluator-0:2222"],
            },
            "worker",
            1,
        )
    )
    assert peers_of(tf_config) == {"chief-0": "j-chief-0:2222", "worker-0": "j-worker-0:2222"}


def test_probe_says_why_a_peer_cannot_be_reached(listening: str, refusing: str) -> None:
    assert probe(listening) is None
    assert probe(refusing) == "Connection refused"
    unresolved = probe("name-that-does-not-resolve.invalid:2222", timeout=1)
    assert unresolved is not None
    assert unresolved.startswith("name does not resolve")


def test_report_names_each_peer_its_address_and_the_problem() -> None:
    problems = {"worker-1": ("j-worker-1.ns.svc:2222", "timed out (packets dropped, or no route)")}
    assert report("worker-0", 30.4, problems) == (
        "worker-0 still waiting for its peers after 30 s: "
        "worker-1 at j-worker-1.ns.svc:2222: timed out (packets dropped, or no route)"
    )
    assert report("worker-0", 15, {}) == (
        "worker-0 still waiting after 15 s; every peer accepts connections"
    )


def test_a_task_without_peers_starts_no_watcher() -> None:
    alone = parse_tf_config(config({"worker": ["j-worker-0:2222"]}, "worker", 0))
    with PeerWatch(alone) as watch:
        assert watch.process is None


def test_watcher_reports_while_the_block_runs_and_stops_with_it(
    listening: str, refusing: str
) -> None:
    tf_config = parse_tf_config(config({"worker": [listening, refusing]}, "worker", 0))
    watch = PeerWatch(tf_config, interval=0.5)
    # The watcher's own command line, run here to read what it writes to stderr.
    child = subprocess.Popen(watch.argv, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stderr is not None
        line = child.stderr.readline()
    finally:
        child.terminate()
        child.wait(10)
    assert line.startswith("tfjob-train: worker-0 still waiting for its peers after ")
    assert f"worker-1 at {refusing}: Connection refused" in line


def test_the_context_manager_stops_its_watcher() -> None:
    tf_config = parse_tf_config(config({"worker": ["a:1", "b:1"]}, "worker", 0))
    with PeerWatch(tf_config, interval=60) as watch:
        assert watch.process is not None
        assert watch.process.poll() is None
    assert watch.process.returncode in (0, -signal.SIGTERM)


def test_watcher_exits_when_its_parent_is_gone(refusing: str) -> None:
    """A trainer killed with SIGKILL leaves no watcher behind."""
    parent = subprocess.Popen(
        [
            sys.executable, "-c",
            "import os, subprocess, sys; "
            "child = subprocess.Popen([*sys.argv[1:], f'--parent={os.getpid()}']); "
            "print(child.pid, flush=True)",
            sys.executable, "-m", "tfjob_trainer.peers", "--task=worker-0", "--interval=60",
            f"worker-1={refusing}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert parent.stdout is not None
    watcher = int(parent.stdout.readline())
    parent.wait(10)

    def ended() -> bool:
        try:
            with open(f"/proc/{watcher}/status") as status:
                return "State:\tZ" in status.read()
        except FileNotFoundError:
            return True

    wait_until(ended, 10, f"watcher {watcher} to end after its parent exited", interval=0.2)
