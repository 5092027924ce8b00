"""The project's own Docker engine: what a killed run left in it is gone when it next
starts, and nothing of the machine's own engine is ever touched."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tfjob_localcluster.host import packages
from tfjob_localcluster.images import engine
from tfjob_localcluster.images.catalog import BUSYBOX, ImageStore

pytestmark = pytest.mark.kind


@pytest.fixture
def own_engine_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if engine.machines_engine_runs_kind():
        pytest.skip("the machine's own Docker engine runs kind: the project's is never started")
    if os.geteuid() != 0 or (packages.missing(["docker"]) and shutil.which("apt-get") is None):
        pytest.skip("the project's Docker engine cannot be started here (root, docker.io)")
    # Not tmp_path, named by the test: the engine's socket path must fit a Unix socket's
    # 108 bytes, also under xdist's longer base (popen-gw0/).
    return tmp_path_factory.mktemp("engine") / "docker"


def test_what_a_killed_run_left_is_removed_when_the_engine_next_starts(
    own_engine_dir: Path,
) -> None:
    with engine.DockerEngine(own_engine_dir) as first:
        ImageStore().load_into(first, BUSYBOX)
        first.docker("network", "create", "left-network")
        first.docker(
            "create", "--name", "left", "--network", "left-network", "--volume", "/data", BUSYBOX
        )
        assert first.docker("volume", "ls", "--quiet").split()
    # Stopped with the container still there, as a killed run's kind node stays.
    with engine.DockerEngine(own_engine_dir) as second:
        assert second.docker("ps", "--all", "--quiet").split() == []
        assert second.docker("volume", "ls", "--quiet").split() == []
        networks = second.docker("network", "ls", "--format", "{{.Name}}").split()
        assert "left-network" not in networks
        assert second.docker("image", "ls", "--quiet", BUSYBOX).strip(), "images stay"
