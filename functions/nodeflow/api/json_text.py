"""JSON manifests read with a JSON parser: a ``.json`` file, and a JSON document in a YAML stream read as YAML would.

Tools write Kubernetes objects as JSON (``kubectl get -o json``, one object per document between ``---`` lines in a
.yaml file, or a ``kind: List``). YAML reads JSON too, but PyYAML builds it one node at a time in Python: 20,000 Pod
documents took 3 s, where the standard library's C scanner takes a tenth of that. The results must stay exactly
the YAML reader's, and YAML 1.1 (PyYAML's SafeLoader) does not read every JSON text as JSON does:

* a number with a fraction or an exponent is a float in JSON; in YAML 1.1 only with a dot and a signed exponent
  (``1.5``, ``1.5e+3``); ``1e5`` and ``1.5e3`` are strings. Such a number (``parse_float``), and NaN or Infinity
  (no JSON, strings in YAML: ``parse_constant``), make ``yaml_document`` give up;
* ``\\ud83d\\ude00`` is one character in JSON and two lone surrogates in PyYAML (libyaml refuses it);
* YAML refuses characters JSON allows in strings (DEL, C1 controls, U+FFFE, U+FFFF) and, without libyaml, tabs.

``yaml_document`` gives up (``NotYamlJson``) on any of these, or on text the JSON parser refuses (comments, YAML
syntax): the caller then reads the document with YAML, whose results and errors stay what they were. One kind of
JSON YAML refuses is read as JSON (and as kubectl reads it): a key longer than 1,024 characters or followed by its
colon on the next line (YAML's limits on a "simple key"; looking for them cost more than the parse).

Must not touch: what the objects mean (``manifests`` validates them), files (the caller reads them), YAML's own
results (anything uncertain goes back to YAML).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["NotYamlJson", "loads_json", "yaml_document"]


class NotYamlJson(Exception):
    """The text is not JSON that YAML reads to the same values: YAML must read it."""


_YAML_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]+(?:[eE][-+][0-9]+)?")
"""The JSON numbers PyYAML's float resolver also takes (a dot; an exponent only with its sign)."""
_YAML_REFUSES = re.compile(r"[\t\x7f-\x84\x86-\x9f\ufffe\uffff]")
"""Tabs (PyYAML's own parser refuses them) and the characters JSON allows in strings that YAML refuses."""
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB]")
"""An escaped high surrogate (a pair: one character in JSON, two in PyYAML)."""


def _yaml_differs(text: str) -> bool:
    """Whether ``text`` has a character or escape YAML reads otherwise than JSON (three plain scans first: most
    text is ASCII with no tab, DEL or ``\\u`` escape)."""
    if text.isascii():
        if "\t" in text or "\x7f" in text:
            return True
    elif _YAML_REFUSES.search(text) is not None:
        return True
    return "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None


def _yaml_float(text: str) -> float:
    if _YAML_FLOAT.fullmatch(text) is None:
        raise NotYamlJson(text)
    return float(text)


def _no_constant(text: str) -> Any:
    raise NotYamlJson(text)


_DECODER = json.JSONDecoder(parse_float=_yaml_float, parse_constant=_no_constant)


def yaml_document(text: str) -> Any:
    """The one JSON value of ``text`` (an object or array, whitespace around), as YAML's SafeLoader reads the
    same text; ``NotYamlJson`` when that is not certain (see the module's docstring)."""
    if _yaml_differs(text):
        raise NotYamlJson("characters YAML reads differently")
    try:
        return _DECODER.decode(text)
    except ValueError as exc:  # json.JSONDecodeError, or one the hooks raised (NotYamlJson is no ValueError)
        raise NotYamlJson(str(exc)) from exc


def loads_json(text: str) -> Any:
    """``json.loads(text)`` (same values, same errors), by orjson when it reads the text as ``json`` does: orjson
    refuses what ``json`` alone accepts (NaN, Infinity, lone surrogates), which ``json`` then reads, and makes
    floats of ints beyond 64 bits, so a text with 19 digits in a row is ``json``'s."""
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is in requirements.txt
        return json.loads(text)
    if _LONG_DIGITS.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


_LONG_DIGITS = re.compile(r"[0-9]{19}")
