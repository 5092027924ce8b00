"""Container logs in the CRI file format, as kubelet keeps them and serves them.

Each line of a log file is `<RFC3339Nano time> <stdout|stderr> <F|P> <content>`: `F`
ends a line of the program's output, `P` is a piece of a longer line. One file per
container instance (`<container>/<restartCount>.log`), so `previous` can be served.
"""

from __future__ import annotations

import asyncio
import datetime
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAX_LINE = 16 * 1024


def timestamp() -> str:
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}000Z"


def parse_timestamp(text: str) -> datetime.datetime:
    """RFC 3339 with up to nanoseconds (Python keeps microseconds)."""
    text = text.replace("Z", "+00:00")
    if "." in text:
        head, rest = text.split(".", 1)
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    return datetime.datetime.fromisoformat(text)


class LogWriter:
    """Appends a container's stdout and stderr to one CRI-format file."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: BinaryIO = path.open("ab")
        self._pending: dict[str, bytes] = {"stdout": b"", "stderr": b""}

    def write(self, stream: str, data: bytes) -> None:
        buffer = self._pending[stream] + data
        lines = buffer.split(b"\n")
        self._pending[stream] = lines.pop()
        for line in lines:
            self._emit(stream, line, partial=False)
        while len(self._pending[stream]) >= MAX_LINE:
            piece, self._pending[stream] = (
                self._pending[stream][:MAX_LINE],
                self._pending[stream][MAX_LINE:],
            )
            self._emit(stream, piece, partial=True)
        self._file.flush()

    def close(self) -> None:
        """Ends unterminated output as a full line (the process is gone)."""
        for stream, rest in self._pending.items():
            if rest:
                self._emit(stream, rest, partial=False)
        self._pending = {"stdout": b"", "stderr": b""}
        self._file.close()

    def _emit(self, stream: str, content: bytes, partial: bool) -> None:
        tag = b"P" if partial else b"F"
        self._file.write(f"{timestamp()} {stream} ".encode() + tag + b" " + content + b"\n")


@dataclass(frozen=True)
class LogEntry:
    timestamp: str
    stream: str
    partial: bool
    content: bytes

    def render(self, with_timestamp: bool) -> bytes:
        text = self.content if self.partial else self.content + b"\n"
        return (self.timestamp.encode() + b" " + text) if with_timestamp else text


def parse_line(line: bytes) -> LogEntry | None:
    parts = line.rstrip(b"\n").split(b" ", 3)
    if len(parts) < 3 or parts[2] not in (b"F", b"P"):
        return None
    content = parts[3] if len(parts) == 4 else b""
    return LogEntry(parts[0].decode(), parts[1].decode(), parts[2] == b"P", content)


@dataclass(frozen=True)
class LogOptions:
    follow: bool = False
    tail_lines: int | None = None
    since: datetime.datetime | None = None
    timestamps: bool = False
    limit_bytes: int | None = None


def _tail_offset(file: BinaryIO, lines: int) -> int:
    """Offset of the start of the last `lines` lines."""
    file.seek(0, os.SEEK_END)
    position = file.tell()
    if lines <= 0:
        return position
    found = 0
    block = 8192
    end = position
    while position > 0:
        step = min(block, position)
        position -= step
        file.seek(position)
        chunk = file.read(step)
        # The file ends with a newline: skip it when counting line starts.
        limit = len(chunk) - (1 if position + len(chunk) == end else 0)
        index = chunk.rfind(b"\n", 0, limit)
        while index != -1:
            found += 1
            if found == lines:
                return position + index + 1
            index = chunk.rfind(b"\n", 0, index)
    return 0


async def stream_log(
    path: Path, options: LogOptions, finished: Callable[[], bool], poll: float = 0.2
) -> AsyncIterator[bytes]:
    """The log as `kubectl logs` shows it; with `follow`, until the instance has ended.

    `finished` must turn true only after the LogWriter of the instance was closed.
    """
    sent = 0
    with path.open("rb") as file:
        if options.tail_lines is not None:
            file.seek(_tail_offset(file, options.tail_lines))
        pending = b""
        while True:
            # Checked before reading: the writer closes the file before the instance
            # counts as finished, so a read after `done` sees everything.
            done = finished()
            chunk = file.read(65536)
            if not chunk:
                if not options.follow or done:
                    return
                await asyncio.sleep(poll)
                continue
            pending += chunk
            *complete, pending = pending.split(b"\n")
            out = []
            for line in complete:
                entry = parse_line(line)
                if entry is None:
                    continue
                if options.since and parse_timestamp(entry.timestamp) < options.since:
                    continue
                out.append(entry.render(options.timestamps))
            data = b"".join(out)
            if options.limit_bytes is not None:
                data = data[: max(0, options.limit_bytes - sent)]
            if data:
                sent += len(data)
                yield data
            if options.limit_bytes is not None and sent >= options.limit_bytes:
                return
