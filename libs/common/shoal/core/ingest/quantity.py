"""Kubernetes quantity strings ("100m", "2Gi", "1e3", "0.5") as exact fractions.

Everything returns `fractions.Fraction` so conversions to integer units are exact; callers
round with `ceil_int` (Kubernetes rounds requests up when it scales to a smaller unit).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
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
_PATTERN = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|([A-Za-z]{0,2}))$")


MAX_QUANTITY = 2**63 - 1  # Kubernetes keeps a quantity's value as a 64-bit integer
MAX_EXPONENT = 30  # "1e30": any larger exponent is out of that range (or below a nano-unit) anyway
MAX_DIGITS = 100  # a number written with more digits is out of range or finer than a nano-unit, and Python
# refuses to read integers of over 4,300 digits (ValueError, not a QuantityError)


class QuantityError(ValueError):
    """A value that is not a valid Kubernetes quantity."""


class QuantityOutOfRange(QuantityError):
    """A well-formed quantity too large for Kubernetes (or with an absurd exponent)."""


def _bounded(number: Fraction, value: object) -> Fraction:
    if abs(number) > MAX_QUANTITY:
        raise QuantityOutOfRange(f"invalid quantity {value!r}: larger than {MAX_QUANTITY} (2^63-1), the most Kubernetes "
                            "can hold")
    return number


def parse_quantity(value: object) -> Fraction:
    """Parse a Kubernetes quantity (string, int or float) into an exact Fraction."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int | Fraction):
        return _bounded(Fraction(value), value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"invalid quantity {value!r}")
        return _bounded(Fraction(repr(value)), value)
    if not isinstance(value, str):
        raise QuantityError(f"invalid quantity {value!r}")
    text = value.strip()
    match = _PATTERN.match(text)
    if not match:
        raise QuantityError(f"invalid quantity {value!r}")
    if len(match.group(1)) > MAX_DIGITS:
        raise QuantityOutOfRange(f"invalid quantity {value[:40]!r}…: more than {MAX_DIGITS} digits")
    number = Fraction(match.group(1))
    exponent, suffix = match.group(2), match.group(3) or ""
    if exponent:
        power = int(exponent[1:])
        if abs(power) > MAX_EXPONENT:
            raise QuantityOutOfRange(f"invalid quantity {value!r}: exponent out of range (at most e{MAX_EXPONENT})")
        return _bounded(number * Fraction(10) ** power, value)
    if suffix in _BINARY:
        return _bounded(number * _BINARY[suffix], value)
    if suffix in _DECIMAL:
        return _bounded(number * _DECIMAL[suffix], value)
    raise QuantityError(f"invalid quantity {value!r}: unknown suffix {suffix!r}")


@lru_cache(maxsize=8192)
def _milli_text(text: str) -> int:
    return math.ceil(parse_quantity(text) * 1000)


def milli_units(value: object) -> int:
    """A quantity in thousandths, rounded up; repeated strings are parsed once (hot path)."""
    if type(value) is str:
        return _milli_text(value)
    if type(value) is int and -MAX_QUANTITY <= value <= MAX_QUANTITY:
        return value * 1000
    return math.ceil(parse_quantity(value) * 1000)


def ceil_int(value: Fraction) -> int:
    """Round up to an integer (Kubernetes rounds quantities up when scaling)."""
    return math.ceil(value)


def milli(value: object) -> int:
    """A quantity in thousandths (millicores, milli-GPUs), rounded up."""
    return ceil_int(parse_quantity(value) * 1000)


def whole(value: object) -> int:
    """A quantity in whole units (bytes, pods, devices), rounded up."""
    return ceil_int(parse_quantity(value))


def parse_number(value: object) -> Fraction:
    """A plain number (int, float or numeric string) as used by CRD float64 fields."""
    if isinstance(value, bool):
        raise QuantityError(f"not a number: {value!r}")
    if isinstance(value, int):
        return _bounded(Fraction(value), value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"not a number: {value!r}")
        return _bounded(Fraction(repr(value)), value)
    if isinstance(value, str):
        try:
            return parse_quantity(value)
        except QuantityOutOfRange:
            raise
        except QuantityError:
            raise QuantityError(f"not a number: {value!r}") from None
    raise QuantityError(f"not a number: {value!r}")
