"""``nodeflow.jsontext.dumps_indented`` writes what ``json.dumps(value, indent=2)`` writes, byte for byte.

orjson (when installed) writes most of it; the values it writes otherwise (floats with exponents, NaN, non-ASCII
text, ints beyond 64 bits, subclasses, non-str keys, deep nesting) must come out as ``json`` writes them.
"""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest

from nodeflow.jsontext import dumps_indented


class _Colour(enum.StrEnum):
    RED = "red"


class _Count(enum.IntEnum):
    ONE = 1


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


VALUES: list[Any] = [
    {"nodeClaims": [{"pods": ["a", "b"], "pricePerHour": 0.0416, "labels": {}}], "warnings": [], "total": 12.5},
    {"floats": [0.0, -0.0, 1e-05, 5e-05, 0.0001, 1e15, 1e16, 1.5e300, 123456.789, 0.1 + 0.2]},
    {"nan": float("nan")},
    {"inf": [float("inf"), float("-inf")]},
    {"text": 'café 日本 \u2028 \x00 \x1f " \\ /'},
    {"ints": [0, -1, 2**63 - 1, 2**64, -(2**63) - 1, 2**70]},
    {"tuple": (1, "two", None, True, False)},
    {"enum": _Colour.RED, "int enum": _Count.ONE},
    {1: "int key"},
    {"nested": {2: "int key below"}},
    {"empty": [{}, [], ""]},
    _deep(254),
    _deep(300),
    [],
    {},
    "plain",
    3.25,
    None,
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_dumps_indented_is_json_dumps(value: Any) -> None:
    assert dumps_indented(value) == json.dumps(value, indent=2)


def test_what_json_refuses_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented({"loop": loop})
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_indented({"set": {1, 2}})
