"""The operator's log: one line per record, as text for people or JSON for collectors.

`--log-format json` writes one object per line (`time`, `level`, `logger`, `message`, and
`error` with the traceback when there is one), which Loki, Elasticsearch or Cloud Logging
parse without a pattern; `text` is for a terminal.
"""

from __future__ import annotations

import logging
import sys
from typing import Final

import orjson

from .timeutil import now, to_micro_rfc3339

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": to_micro_rfc3339(now().fromtimestamp(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def configure_logging(form: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
