"""The operator's log: one line per record, as text for people or JSON for collectors.

`--log-format json` writes one object per line (`time`, `level`, `logger`, `message`, and
`error` with the traceback when there is one), which Loki, Elasticsearch or Cloud Logging
parse without a pattern; `text` is for a terminal.

A line about a TFJob also carries the job (`namespace`, `name`, `uid`) and, where there is
one, the `replica` (worker-0), as fields: a collector finds one job's lines by a field, not
by a pattern in messages. The job is set once per job worker (`about_job`): every line its
reconciles log, and the tasks they start, carries it; a line about another job names it
(`extra={"job": ref}`), and a replica is given per line (`extra={"replica": ...}`).
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import Final

import orjson

from .api import JobRef
from .timeutil import now, to_micro_rfc3339

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The job the current task works on: its fields, in the order lines show them.
_JOB: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("tfjob", default=())


def about_job(ref: JobRef) -> None:
    """Every line the current task logs from here on, and those of the tasks it starts,
    is about `ref`."""
    _JOB.set(_fields(ref))


def _fields(ref: JobRef) -> tuple[tuple[str, str], ...]:
    return (("namespace", ref.namespace), ("name", ref.name), ("uid", ref.uid))


def job_fields(record: logging.LogRecord) -> dict[str, str]:
    """The job and replica `record` is about, if any: its `job` (a JobRef given as
    `extra`), else the current task's."""
    given = getattr(record, "job", None)
    fields = dict(_fields(given) if isinstance(given, JobRef) else _JOB.get())
    replica = getattr(record, "replica", None)
    if replica:
        fields["replica"] = str(replica)
    return fields


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": to_micro_rfc3339(now().fromtimestamp(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **job_fields(record),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT, then the job's fields as key=value."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = job_fields(record)
        if not fields:
            return text
        suffix = " ".join(f"{key}={value}" for key, value in fields.items())
        head, newline, rest = text.partition("\n")
        return f"{head} [{suffix}]{newline}{rest}"


def configure_logging(form: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
