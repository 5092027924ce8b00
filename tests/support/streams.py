"""`make test` as two streams of tests side by side, one per pytest-xdist worker.

Sampled through a warm `make test` run one test after the other, the machine's two cores
were half idle: most scenarios wait on a cluster (pods starting, images loading, a
kind node booting). The tests split into two streams that share nothing but the host:

- `session-cluster`: every test of the session's local cluster, after the tests that
  compare the host before and after a cluster of their own (tests/cluster);
- `apart`: the tests that need none of it: those that need no cluster (unit, tools),
  TensorFlow processes on the host (tests/trainer), the scenarios on kind, the release's
  own registry and clusters; and, to even out the two, a few integration modules on a
  local cluster of the stream's own (`APART_MODULES`).

`tests/conftest.py` says which test is in which (`assign`, an `xdist_group` mark);
pytest-xdist's `--dist loadgroup` gives each group whole to one worker, in collection
order. (pytest 9.2 no longer lets xdist put a test's group in its node ID, which
loadgroup reads: the groups are silently lost, pytest-dev/pytest-xdist#1386. pyproject
pins pytest below 9.2 until xdist carries groups another way.) Run without xdist
(`make e2e`, a single file), the streams are one after the other, as ever.

A cluster that starts beside tests/cluster would change the host those tests compare: a
test of the `apart` stream that may start clusters (`wait_for_host_checks`) waits until
the `session-cluster` stream has passed them (`host_checks_done`, or that worker's end).
The controller and the workers share a directory the controller makes and gives the
workers in their `workerinput`, where a worker says that the host checks are done.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from support import interrupt
from support.waiting import wait_until

SESSION_CLUSTER = "session-cluster"
APART = "apart"
#: How long the `apart` stream waits for the host checks before it fails, saying so.
HOST_CHECKS_TIMEOUT = 1800
_DIRECTORY = "tfjob_streams_dir"
_HOST_CHECKS_DONE = "host-checks-done"
_DIRECTORY_KEY = pytest.StashKey[Path]()
_FORWARDING_KEY = pytest.StashKey[bool]()


def assign(item: pytest.Item, stream: str) -> None:
    item.add_marker(pytest.mark.xdist_group(stream))


def stream_of(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    assert marker is not None, f"{item.nodeid} is in no stream"
    return str(marker.args[0])


def host_checks_done(config: pytest.Config) -> None:
    """Said by the `session-cluster` stream once it has left the tests that compare the
    host; idempotent."""
    directory = _shared_directory(config)
    if directory is not None:
        (directory / _HOST_CHECKS_DONE).touch()


def wait_for_host_checks(config: pytest.Config) -> None:
    """Before the `apart` stream's first test that may start a cluster: waits until the
    `session-cluster` stream has said `host_checks_done`, when the two run side by side."""
    directory = _shared_directory(config)
    beside = getattr(config, "workerinput", {}).get("workercount", 1) > 1
    if directory is not None and beside:
        wait_until(
            (directory / _HOST_CHECKS_DONE).exists,
            HOST_CHECKS_TIMEOUT,
            f"the {SESSION_CLUSTER} stream to leave the tests that compare the host "
            "(see its worker's tests above)",
            interval=1,
        )


def _shared_directory(config: pytest.Config) -> Path | None:
    """The controller's directory, in a worker of a run by streams; else None."""
    directory: str | None = getattr(config, "workerinput", {}).get(_DIRECTORY)
    return None if directory is None else Path(directory)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        interrupt.interrupt_once()
    else:  # one process, or xdist's controller until it starts its workers (below)
        interrupt.interrupt_on_sigterm()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """In the controller, for each worker it starts."""
    config: pytest.Config = node.config
    if not config.stash.get(_FORWARDING_KEY, False):
        interrupt.forward_to_children()
        config.stash[_FORWARDING_KEY] = True
    if config.getvalue("dist") != "loadgroup":  # not by streams: nothing to share
        return
    if _DIRECTORY_KEY not in config.stash:
        config.stash[_DIRECTORY_KEY] = Path(tempfile.mkdtemp(prefix="tfjob-streams-"))
    node.workerinput[_DIRECTORY] = str(config.stash[_DIRECTORY_KEY])


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A worker that ends, whatever it ran, lets the other go on.
    host_checks_done(session.config)


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = config.stash.get(_DIRECTORY_KEY, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
