"""Kubernetes resource quantities ("500m", "1Gi", "2e3") as exact fractions."""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SUFFIXES = {
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$"
)


def parse_quantity(value: str | int | float) -> Fraction:
    if isinstance(value, int | float):
        return Fraction(value)
    match = _QUANTITY.match(value.strip())
    if not match or match.group(1) in (".", "+", "-"):
        raise ValueError(f"invalid quantity {value!r}")
    number = Fraction(match.group(1))
    if match.group(2):
        return number * Fraction(10) ** int(match.group(2)[1:])
    return number * _SUFFIXES[match.group(3) or ""]


def ceil_divide(value: str | int, divisor: str | int) -> int:
    """`value / divisor` rounded up, as the downward API reports resource values."""
    denominator = parse_quantity(divisor)
    if denominator <= 0:
        raise ValueError(f"divisor must be positive, got {divisor!r}")
    return math.ceil(parse_quantity(value) / denominator)
