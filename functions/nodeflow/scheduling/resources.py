"""Resource lists as ``dict[str, int]`` of milli-units, with the few operations the solver needs.

Must not touch: what the resources are used for; quantities beyond milli-units (``nodeflow.api.quantity``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nodeflow.api.quantity import format_milli

__all__ = [
    "add",
    "first_shortfall",
    "fits",
    "format_resources",
    "max_count",
    "merge_max",
    "subtract",
    "total",
]

Resources = Mapping[str, int]


def add(a: Resources, b: Resources, times: int = 1) -> dict[str, int]:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, 0) + value * times
    return out


def subtract(a: Resources, b: Resources) -> dict[str, int]:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, 0) - value
    return out


def total(items: Iterable[Resources]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        for name, value in item.items():
            out[name] = out.get(name, 0) + value
    return out


def merge_max(a: Resources, b: Resources) -> dict[str, int]:
    out = dict(a)
    for name, value in b.items():
        if value > out.get(name, 0):
            out[name] = value
    return out


def fits(requests: Resources, available: Resources) -> bool:
    """Does ``requests`` fit into ``available`` on every resource it asks for?"""
    return all(not (value > 0 and value > available.get(name, 0)) for name, value in requests.items())


def max_count(request: Resources, available: Resources, used: Resources) -> int:
    """How many copies of ``request`` fit into ``available`` minus ``used`` (huge if it asks nothing)."""
    best = 1 << 30
    for name, value in request.items():
        if value <= 0:
            continue
        free = available.get(name, 0) - used.get(name, 0)
        if free < value:
            return 0
        count = free // value
        if count < best:
            best = count
    return best


def first_shortfall(request: Resources, available: Resources) -> str | None:
    """The first resource (sorted) that ``request`` needs more of than ``available`` has."""
    for name in sorted(request):
        value = request[name]
        if value > 0 and value > available.get(name, 0):
            return name
    return None


def format_resources(resources: Resources) -> dict[str, str]:
    """Quantity strings, sorted by name, zero entries dropped."""
    return {name: format_milli(value, name) for name, value in sorted(resources.items()) if value}
