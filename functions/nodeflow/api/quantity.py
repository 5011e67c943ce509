"""Kubernetes resource quantities ("500m", "1.5Gi", "1e3", "2k").

Quantities are parsed exactly (Decimal) and carried through the scheduler as integers in
milli-units (``to_milli``), the same for every resource, so arithmetic stays integral and
fast: 1 CPU is 1000, 1Ki of memory is 1_024_000.

Must not touch: what a quantity is used for; resources beyond their arithmetic (``nodeflow.scheduling.resources``).
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

__all__ = [
    "QuantityError",
    "format_milli",
    "format_quantity",
    "parse_quantity",
    "to_milli",
]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
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
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float | Decimal) -> Decimal:
    """Parse a Kubernetes quantity into an exact Decimal of base units."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a string or number, not {value!r}")
    if isinstance(value, int | Decimal):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity must be a string or number, not {value!r}")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a valid quantity (expected e.g. 500m, 1.5Gi, 2k, 1e3)")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"{value!r} is not a valid quantity") from exc
    if match["bin"]:
        return number * _BINARY[match["bin"]]
    if match["exp"]:
        return number.scaleb(int(match["exp"][1:]))
    return number * _DECIMAL[match["dec"] or ""]


def to_milli(value: str | int | float | Decimal) -> int:
    """Parse a quantity into integer milli-units, rounding up like Kubernetes does."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding=ROUND_CEILING))


def format_quantity(value: Decimal) -> str:
    """Canonical-ish string for a base-unit amount: binary suffix for whole multiples of 1Ki."""
    return format_milli(int((value * 1000).to_integral_value(rounding=ROUND_CEILING)))


def format_milli(milli: int, resource: str = "") -> str:
    """Format integer milli-units as a quantity string.

    CPU and plain counts come out as "2" or "1500m"; memory-like amounts that are whole
    multiples of 1Ki use the largest binary suffix that keeps them integral ("8Gi", "1536Mi").
    """
    if milli % 1000:
        return f"{milli}m"
    whole = milli // 1000
    if resource != "cpu" and whole and whole % 1024 == 0:
        for suffix, factor in reversed(_BINARY.items()):
            if whole % factor == 0:
                return f"{whole // factor}{suffix}"
    return str(whole)
