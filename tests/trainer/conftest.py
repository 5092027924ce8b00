"""Fixtures for real multi-process TensorFlow runs on 127.0.0.1.

Every test's wall time, and every process's wall time, exit code, peak RSS and peak
threads, are collected and printed in a "trainer runs" section at the end of the pytest
output.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import summary
from support.trainer_processes import REPORT, JobFactory, LocalJob


@pytest.fixture(autouse=True)
def _wall_time(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.monotonic()
    yield
    summary.add(REPORT, f"{request.node.nodeid}: test body {time.monotonic() - started:.1f} s")


@pytest.fixture(scope="module")
def local_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobFactory]:
    """Make LocalJobs (with --checkpoint-dir and --model-dir in their work directory);
    every process they started is killed when the module ends."""
    jobs: list[LocalJob] = []

    def make(name: str, counts: dict[str, int], args: list[str]) -> LocalJob:
        workdir: Path = tmp_path_factory.mktemp(name)
        paths = ["--checkpoint-dir", str(workdir / "ckpt"), "--model-dir", str(workdir / "model")]
        job = LocalJob(workdir, counts, [*paths, *args])
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.stop_all()
