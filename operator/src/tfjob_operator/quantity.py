"""Kubernetes resource quantities (`500m`, `2`, `1Gi`, `1e3`) summed exactly.

A gang's PodGroup states what its pods request together (integrations/gang.py); the values come from
the pod templates, which the CRD's schema has already checked against the quantity format.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Final

_SUFFIXES: Final = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}
_QUANTITY: Final = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([a-zA-Z]*|[eE][+-]?\d+)$")


def parse(value: str | int | float) -> Decimal:
    """A quantity's value; raises ValueError for text that is not one."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    found = _QUANTITY.match(value.strip())
    if found is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = found.groups()
    if suffix[:1] in ("e", "E") and suffix[1:]:
        return Decimal(number) * Decimal(10) ** int(suffix[1:])
    if suffix not in _SUFFIXES:
        raise ValueError(f"not a quantity: {value!r}")
    return Decimal(number) * _SUFFIXES[suffix]


def format_quantity(value: Decimal) -> str:
    """Whole units when the value is whole, else thousandths (`1500m`), rounded up."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value(rounding='ROUND_CEILING'))}m"


def add(resources: Iterable[Mapping[str, str | int | float]]) -> dict[str, str]:
    """The sum of resource lists, by resource name."""
    totals: dict[str, Decimal] = {}
    for listing in resources:
        for name, value in listing.items():
            totals[name] = totals.get(name, Decimal(0)) + parse(value)
    return {name: format_quantity(total) for name, total in totals.items()}
