"""Kubernetes quantities (resource.Quantity as the API server serialises it), read by one parser:
the DRA path's memory capacities ("8000Mi", "12Gi") and the extender's extended resources ("30").

A quantity is an optional sign, a decimal number and a suffix: binary (Ki Mi Gi Ti Pi Ei),
decimal (n u m k M G T P E) or an exponent (e3, E-2). It is read as an exact fraction. Text longer
than 64 characters or an exponent past +-30 is refused before any arithmetic, so a hostile value
cannot make the reader build a huge number.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

_QUANTITY = re.compile(
    r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]{1,2})|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?", re.ASCII
)
_SUFFIX = {
    None: Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
MAX_TEXT = 64
MAX_EXPONENT = 30


def parse_quantity(text: Any) -> Fraction:
    """A Kubernetes quantity ("8000Mi", "12Gi", "1e9", "500M", "30") as an exact number."""
    match = _QUANTITY.fullmatch(text.strip()) if isinstance(text, str) and len(text) <= MAX_TEXT else None
    if match is None or (match.group(3) is not None and abs(int(match.group(3))) > MAX_EXPONENT):
        raise ValueError(f"{str(text)[:MAX_TEXT]!r} is not a Kubernetes quantity")
    sign, number, exponent, suffix = match.groups()
    value = Fraction(number) * _SUFFIX[suffix]
    if exponent is not None:
        value *= Fraction(10) ** int(exponent)
    return -value if sign == "-" else value


def whole_number(value: Any, what: str, maximum: int) -> int:
    """A quantity that must be a whole number from 0 to `maximum` (an extended resource's units,
    which the API server keeps whole), as an int; ValueError naming `what` otherwise."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= MAX_TEXT:
        number: Fraction | int | None = int(value)  # how the API server writes units: no parsing needed
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        try:
            number = parse_quantity(value)
        except ValueError:
            number = None
    if number is None or (isinstance(number, Fraction) and number.denominator != 1) or not 0 <= number <= maximum:
        raise ValueError(f"{what}: expected a whole number of units (0 to {maximum}), got {value!r:.40}")
    return int(number)
