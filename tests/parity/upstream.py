"""How a parity test says which of Karpenter's specs it mirrors.

Each test module of tests/parity mirrors one upstream test file, named by its module-level
``UPSTREAM`` (a key of upstream_its.json, e.g. ``"pkg/controllers/disruption/emptiness_test.go"``),
and marks each test with ``@mirrors("Describe / Context / It title", ...)`` using the spec names of
upstream_its.json (tools/parity_inventory.py lists them). ``differs="why"`` marks a test that
asserts a deliberate difference from upstream. Specs that ``plan``, ``explain`` and
``disrupt --dry-run`` cannot express go in the module's ``NOT_EXPRESSIBLE = {spec: why}``.
tests/parity/table.py turns all of it into the README table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])

INVENTORY = Path(__file__).with_name("upstream_its.json")


def mirrors(*specs: str, differs: str | None = None) -> Callable[[F], F]:
    """Mark a test as the counterpart of upstream ``specs`` (``differs``: why nodeflow decides otherwise)."""
    if not specs:
        raise ValueError("mirrors() needs at least one upstream spec")

    def mark(test: F) -> F:
        test.__upstream__ = specs  # type: ignore[attr-defined]
        test.__differs__ = differs  # type: ignore[attr-defined]
        return test

    return mark


def inventory() -> tuple[str, dict[str, list[str]]]:
    """(upstream ref, {upstream file: [spec, ...]})."""
    data = json.loads(INVENTORY.read_text())
    return data["ref"], data["specs"]
