"""Writing generated files, or checking that the committed ones are up to date."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sync(files: Mapping[Path, str], *, check: bool, generator: str) -> int:
    """Writes each file whose content differs; with `check`, writes nothing and returns 1
    (naming the stale files) if any differs."""
    stale = []
    for path, text in files.items():
        if path.exists() and path.read_text() == text:
            continue
        shown = path.relative_to(ROOT)
        if check:
            stale.append(str(shown))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {shown}")
    if stale:
        print(f"out of date (run {generator}): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0
