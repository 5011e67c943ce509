"""JSON text as ``json.dumps(value, indent=2)`` writes it, made by orjson when that gives the same bytes.

``json.dumps`` with an indent runs the standard library's pure-Python encoder: 7 s for the 69 MB plan of
100,000 pods (``benchmarks/plan_scale.py``), where orjson (``OPT_INDENT_2``) takes 0.6 s and writes the same text
for plain values. It does not for everything, so orjson's text is used only when it is the standard library's:

* every value is a dict with str keys, a list or tuple, a str, an int, a bool, None or a float (``_plain``);
  anything else (a subclass, a dataclass, a datetime, a non-str key) is left to ``json``, which decides;
* every float is finite and orjson writes it as ``repr`` does (they differ on exponents: ``1e-05`` / ``1e-5``;
  NaN and infinities orjson writes as null);
* the text is ASCII (``json`` escapes every other character as ``\\uXXXX``, orjson writes UTF-8);
* an int beyond 64 bits: orjson refuses, ``json`` writes it.

Without orjson installed, ``json`` writes everything.

Must not touch: what is written (the caller's value, byte for byte what ``json.dumps(indent=2)`` writes), files or
streams (the caller writes the text).
"""

from __future__ import annotations

import importlib
import json
from typing import Any


def _orjson_module() -> Any:
    try:
        return importlib.import_module("orjson")
    except ImportError:  # pragma: no cover - orjson is in requirements.txt; the standard library still works
        return None


orjson: Any = _orjson_module()

__all__ = ["dumps_indented"]


def dumps_indented(value: Any) -> str:
    """``json.dumps(value, indent=2)``, byte for byte."""
    if orjson is not None and _plain(value):
        try:
            text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_PASSTHROUGH_SUBCLASS)
        except TypeError:  # orjson.JSONEncodeError: an int beyond 64 bits, nesting deeper than 255
            pass
        else:
            if text.isascii():
                decoded: str = text.decode("ascii")
                return decoded
    return json.dumps(value, indent=2)


_MAX_DEPTH = 255
"""orjson refuses deeper nesting; a deeper (or circular) value is ``json``'s to write or refuse."""


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only the types orjson writes as ``json`` does (see the module's docstring; a key
    that is not a str, orjson refuses). The types of a container's items are collected in C first: most
    containers (a NodeClaim's pods) hold only strings."""
    stack: list[tuple[Any, int]] = [([value], 0)]
    scalars, containers = _SCALARS, _CONTAINERS
    while stack:
        container, depth = stack.pop()
        if depth > _MAX_DEPTH:
            return False
        items = container.values() if type(container) is dict else container
        if scalars.issuperset(map(type, items)):
            continue
        for item in items:
            kind = type(item)
            if kind in scalars:
                continue
            if kind in containers:
                stack.append((item, depth + 1))
            elif kind is not float or not _same_float(item):
                return False
    return True


_SCALARS = frozenset({str, int, bool, type(None)})
_CONTAINERS = frozenset({dict, list, tuple})


def _same_float(number: float) -> bool:
    return number - number == 0.0 and orjson.dumps(number) == repr(number).encode()  # (inf - inf and NaN: NaN)
