"""The operator's log lines: a line about a job carries the job, and its replica, as fields
(logs.py), in the task that works on the job and in the tasks it starts, not in others."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from support.builders import JOB

from tfjob_operator.api import KUBEFLOW, JobRef
from tfjob_operator.logs import JsonFormatter, TextFormatter, about_job

#: A job of the same name in the other API group: a line about it names it.
OTHER = JobRef("ml", "mnist", "uid-2", KUBEFLOW)


async def _job_worker(logger: logging.Logger) -> None:
    about_job(JOB)
    logger.info("TFJobRunning: TFJob ml/mnist is running.")

    async def posted_later() -> None:
        logger.warning("refused", extra={"replica": "worker-1"})

    await asyncio.create_task(posted_later())
    logger.warning("NameTaken: held by ml/mnist", extra={"job": OTHER})


async def _two_tasks(logger: logging.Logger) -> None:
    await asyncio.create_task(_job_worker(logger))
    logger.info("caches synced")


def logged(formatter: logging.Formatter) -> list[str]:
    """The lines a job's worker, a task it starts, and another task log, in order."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    logger = logging.getLogger("tfjob_operator.test_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        asyncio.run(_two_tasks(logger))
    finally:
        logger.removeHandler(handler)
    return out.getvalue().splitlines()


def test_json_lines_about_a_job_carry_it_and_others_do_not() -> None:
    running, refused, other, synced = (json.loads(line) for line in logged(JsonFormatter()))
    job = {"namespace": "ml", "name": "mnist", "uid": "uid-1"}
    assert running == {
        "time": running["time"],
        "level": "info",
        "logger": "tfjob_operator.test_logs",
        "message": "TFJobRunning: TFJob ml/mnist is running.",
        **job,
    }
    assert {k: refused[k] for k in (*job, "replica", "level")} == {
        **job,
        "replica": "worker-1",
        "level": "warning",
    }
    assert (other["name"], other["uid"]) == ("mnist", "uid-2")
    assert set(synced) == {"time", "level", "logger", "message"}


def test_text_lines_end_with_the_job() -> None:
    running, refused, other, synced = logged(TextFormatter())
    assert running.endswith("running. [namespace=ml name=mnist uid=uid-1]")
    assert refused.endswith("refused [namespace=ml name=mnist uid=uid-1 replica=worker-1]")
    assert other.endswith("[namespace=ml name=mnist uid=uid-2]")
    assert synced.endswith("caches synced")
