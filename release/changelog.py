"""The release notes: a version's section of CHANGELOG.md (Keep a Changelog 1.1.0).

Sections are `## [VERSION] - YYYY-MM-DD`, newest first, below an `## [Unreleased]` one;
a release's notes are its section's body, which must not be empty. A pre-release without
a section of its own (main carries the next version with `-dev`) takes [Unreleased]'s,
which right after a release is empty: its notes then say so.
"""

from __future__ import annotations

import re
from datetime import date

#: The section of what is not released yet, above the releases.
UNRELEASED = "Unreleased"
#: A pre-release's notes when [Unreleased] is empty.
NOTHING_YET = "No changes recorded since the last release yet.\n"
HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?\s*$")


class ChangelogError(ValueError):
    pass


def sections(text: str) -> dict[str, tuple[str | None, str]]:
    """Each section's version -> (its date, its body)."""
    found: dict[str, tuple[str | None, str]] = {}
    current: str | None = None
    day: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        heading = HEADING.match(line)
        if heading is not None:
            if current is not None:
                found[current] = (day, _trim(body))
            current, day, body = heading["version"], heading["date"], []
        elif current is not None:
            body.append(line)
    if current is not None:
        found[current] = (day, _trim(body))
    return found


def _trim(lines: list[str]) -> str:
    """The body without blank edges or the link definitions Keep a Changelog ends with."""
    kept = [line for line in lines if not re.match(r"^\[[^\]]+\]: \S+", line)]
    return "\n".join(kept).strip() + "\n"


def notes(text: str, version: str) -> str:
    """The release notes of `version`: its section, which must be dated and not empty. A
    pre-release with no section of its own (main's `0.2.0-dev`) is what is unreleased."""
    found = sections(text)
    if version not in found and "-" in version and UNRELEASED in found:
        body = found[UNRELEASED][1]
        # Right after a release, main's next pre-release has nothing of its own yet.
        return body if body.strip() else NOTHING_YET
    if version not in found:
        raise ChangelogError(
            f"CHANGELOG.md has no section `## [{version}] - YYYY-MM-DD`: write the "
            "release's notes there (move them from [Unreleased])"
        )
    day, body = found[version]
    if day is None or not body.strip():
        raise ChangelogError(f"CHANGELOG.md's section [{version}] needs a date and notes")
    date.fromisoformat(day)
    return body
