"""The checkout the tests run from, defined once for every test that reads its files."""

from __future__ import annotations

from pathlib import Path

#: tests/support/ is two levels below it.
ROOT = Path(__file__).resolve().parents[2]
