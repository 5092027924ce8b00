"""`make test`'s two streams (support/streams.py), on a tree of probe tests run by pytest
with two xdist workers under the project's own tests/conftest.py: each stream on one
worker (a module of APART_MODULES in the `apart` one), the `apart` stream's cluster tests
after the host checks, and a SIGTERM to the controller tearing down both workers'
fixtures."""

from __future__ import annotations

import ast
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from support.checkout import ROOT
from support.waiting import wait_until

TESTS = ROOT / "tests"
INI = """[pytest]
markers =
    unit
    tools
    tensorflow
    integration
    e2e
    kind
    own_clusters
    early_run(run)
"""
#: Each probe test appends "<event> <test> <worker> <time>" to the file $PROBE_LOG names.
RECORD = """
import os, time, pytest

def record(event, name):
    with open(os.environ["PROBE_LOG"], "a") as log:
        log.write(f"{event} {name} {os.environ['PYTEST_XDIST_WORKER']} {time.time()}\\n")

@pytest.fixture(scope="session")
def held():
    yield
    time.sleep(TEARDOWN_SECONDS)
    record("teardown", __name__)

def probe(name, seconds):
    record("start", name)
    time.sleep(seconds)
    record("end", name)
"""


def apart_module() -> str:
    """One of the modules tests/conftest.py's APART_MODULES moves to the `apart` stream."""
    tree = ast.parse((TESTS / "conftest.py").read_text())
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(target, "id", None) for target in node.targets] == ["APART_MODULES"]
    ]
    modules: set[str] = ast.literal_eval(value)
    return sorted(modules)[0]


APART_MODULE = apart_module()
#: Each probe's module, the tier it marks (None: the one its folder gives), its seconds.
PROBES: dict[str, tuple[str | None, float]] = {
    "unit/test_pure.py": (None, 1),
    "cluster/test_host.py": ("integration", 5),
    "trainer/test_tf.py": (None, 1),
    "e2e/test_local.py": (None, 0),
    "e2e/test_kind.py": ("kind", 0),
    "integration/test_api.py": (None, 0),
    APART_MODULE: (None, 0),
}


def probe_tree(
    root: Path, seconds: dict[str, float] | None = None, teardown: dict[str, float] | None = None
) -> Path:
    """The probe tests under root/tests, beside a copy of the project's conftest; a probe
    sleeps its `seconds`, and its session fixture its `teardown` when torn down."""
    tests = root / "tests"
    tests.mkdir()
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    (root / "pytest.ini").write_text(INI)
    for path, (marker, default) in PROBES.items():
        file = tests / path
        file.parent.mkdir(exist_ok=True)
        name = file.stem.removeprefix("test_")
        wait = (seconds or {}).get(name, default)
        mark = f"pytestmark = pytest.mark.{marker}\n\n" if marker else ""
        file.write_text(
            f"TEARDOWN_SECONDS = {(teardown or {}).get(name, 0)}\n{RECORD}\n{mark}"
            f"def test_{name}(held):\n    probe({name!r}, {wait})\n"
        )
    return tests


def pytest_command(root: Path) -> list[str]:
    return [
        sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
        "-q", "--rootdir", str(root), "-c", str(root / "pytest.ini"), str(root / "tests"),
    ]  # fmt: skip


def environment(root: Path) -> dict[str, str]:
    path = os.pathsep.join([str(TESTS), str(ROOT)])
    return {**os.environ, "PROBE_LOG": str(root / "probe.log"), "PYTHONPATH": path}


def events(root: Path) -> dict[tuple[str, str], tuple[str, float]]:
    """(event, test) -> (worker, time)."""
    lines = (root / "probe.log").read_text().split("\n")
    return {
        (event, name): (worker, float(at))
        for event, name, worker, at in (line.split() for line in lines if line)
    }


def test_each_stream_runs_whole_on_its_worker_and_apart_clusters_wait_for_the_host_checks(
    tmp_path: Path,
) -> None:
    probe_tree(tmp_path)
    done = subprocess.run(
        pytest_command(tmp_path), env=environment(tmp_path), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    seen = events(tmp_path)
    moved = Path(APART_MODULE).stem.removeprefix("test_")
    session_cluster = {seen["start", name][0] for name in ("host", "local", "api")}
    apart = {seen["start", name][0] for name in ("pure", "tf", "kind", moved)}
    assert len(session_cluster) == len(apart) == 1, seen
    assert session_cluster != apart, seen
    # The unit and trainer probes ran beside the host checks, the kind probe only after.
    assert seen["start", "pure"][1] < seen["start", "tf"][1] < seen["end", "host"][1]
    assert seen["start", "kind"][1] >= seen["end", "host"][1]


def test_sigterm_to_the_controller_tears_down_both_workers_fixtures(tmp_path: Path) -> None:
    """Even a teardown longer than the 10 s after which xdist kills a worker the
    controller gives up on (as a cluster's takes)."""
    long = {"local": 600, "kind": 600}
    probe_tree(tmp_path, {"host": 0, **long}, teardown={name: 11 for name in long})
    run = subprocess.Popen(
        pytest_command(tmp_path), env=environment(tmp_path), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_until(
            lambda: (
                (tmp_path / "probe.log").exists()
                and {("start", "local"), ("start", "kind")} <= events(tmp_path).keys()
            ),
            60,
            "both long probes to start",
            interval=0.2,
        )
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=90)
    finally:
        run.kill()
    seen = events(tmp_path)
    # Each worker's session fixture, torn down in that worker.
    torn_down = {seen["teardown", f"test_{name}"][0] for name in ("local", "kind")}
    assert len(torn_down) == 2, output
    assert not {("end", "local"), ("end", "kind")} & seen.keys()
    assert run.returncode == 2, output  # interrupted
