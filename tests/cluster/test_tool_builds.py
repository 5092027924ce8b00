"""A Go-built tool asked for while hack/build-binaries.sh builds it is waited for: the
script claims each tool it will build before it starts, and releases the claim once the
binaries are in place or the build failed (`make test` builds the later tests' tools beside
its first ones). A stand-in `go` writes the binary when the test lets it, so nothing is
compiled."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.waiting import wait_until

from tfjob_localcluster import binaries, checkout
from tfjob_localcluster.binaries import Binaries, MissingBinaryError, read_versions, tool_dir

pytestmark = pytest.mark.unit

#: `go install PACKAGE@VERSION` as far as the script needs it: once the test creates the
#: file $PROCEED (or $FAIL, to fail), the binary named by the package's last element.
STAND_IN_GO = """#!/bin/sh
[ "$1" = install ] || exit 3
while [ ! -e "$PROCEED" ]; do [ -e "$FAIL" ] && exit 1; sleep 0.05; done
for last; do :; done
name=${last%@*}; name=${name##*/}
printf '#!/bin/sh\\n' > "$GOBIN/$name" && chmod +x "$GOBIN/$name"
"""


@dataclass
class Build:
    process: subprocess.Popen[str]
    cache: Path
    proceed: Path
    fail: Path

    def binaries(self) -> Binaries:
        return Binaries(read_versions(), self.cache)


@pytest.fixture
def kind_build(tmp_path: Path) -> Iterator[Build]:
    """The script building kind into a cache of the test's, claims held."""
    stand_ins = tmp_path / "path"
    stand_ins.mkdir()
    (stand_ins / "go").write_text(STAND_IN_GO)
    (stand_ins / "go").chmod(0o755)
    cache, claimed = tmp_path / "cache", tmp_path / "claimed"
    build = Build(
        subprocess.Popen(
            [str(checkout.ROOT / "hack" / "build-binaries.sh"), "--claimed", str(claimed), "kind"],
            env={
                "PATH": f"{stand_ins}:/usr/bin:/bin",
                "HOME": str(tmp_path),
                "TFJOB_CACHE": str(cache),
                "GOCACHE": str(tmp_path / "go-build"),
                "PROCEED": str(tmp_path / "proceed"),
                "FAIL": str(tmp_path / "fail"),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
        cache,
        tmp_path / "proceed",
        tmp_path / "fail",
    )
    try:
        wait_until(lambda: claimed.exists() or build.process.poll() is not None, 10, "claims")
        assert claimed.exists(), build.process.communicate()[0]
        yield build
    finally:
        build.proceed.touch()
        build.process.wait(timeout=30)


def asked_for(build: Build) -> tuple[ThreadPoolExecutor, Future[Path]]:
    pool = ThreadPoolExecutor(1)
    return pool, pool.submit(build.binaries().path, "kind")


def test_a_tool_asked_for_while_it_is_built_is_waited_for(kind_build: Build) -> None:
    directory = tool_dir("kind", cache=kind_build.cache)
    assert binaries.claimed(directory)
    pool, asked = asked_for(kind_build)
    with pool:
        time.sleep(1.5)
        assert not asked.done(), "the binary was handed out before it was built"
        kind_build.proceed.touch()
        assert asked.result(timeout=30) == directory / "kind"
    assert kind_build.process.wait(timeout=30) == 0
    assert not binaries.claimed(directory)
    assert not binaries.claim_path(directory).exists()


def test_a_failed_build_releases_its_claim_and_the_binary_is_missing(kind_build: Build) -> None:
    pool, asked = asked_for(kind_build)
    with pool:
        kind_build.fail.touch()
        with pytest.raises(MissingBinaryError, match=r"kind .* is not built"):
            asked.result(timeout=30)
    assert kind_build.process.wait(timeout=30) == 1
    assert not binaries.claimed(tool_dir("kind", cache=kind_build.cache))


def test_a_tool_not_claimed_is_missing_at_once(tmp_path: Path) -> None:
    with pytest.raises(MissingBinaryError, match="make binaries"):
        Binaries(read_versions(), tmp_path).path("kueue")
    assert binaries.await_build(tool_dir("kueue", cache=tmp_path)) < 1
