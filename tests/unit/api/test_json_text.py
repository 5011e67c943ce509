"""``nodeflow.api.json_text``: JSON read by a JSON parser only where the result is what the reader it replaces gives.

``loads_json`` is ``json.loads`` (values and errors); ``yaml_document`` is PyYAML's SafeLoader on JSON text, or
``NotYamlJson`` (streams of such documents: tests/unit/api/test_template_loading.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from nodeflow.api.json_text import NotYamlJson, loads_json, yaml_document

TEXTS = [
    '{"a": 1, "b": [1.5, -0, -0.0, 1e400, 1E-400, 2.5e-3], "c": null, "d": true}',
    '{"big": 123456789012345678901234567890, "neg": -9223372036854775809, "u64": 18446744073709551616}',
    '{"id": "1234567890123456789012", "n": 1}',  # 19 digits in a string: json reads it
    '{"dup": 1, "other": 2, "dup": 3}',
    '["\\ud800", "\\ud83d\\ude00", "\\u00e9", "caf\u00e9"]',
    "[NaN, Infinity, -Infinity]",
    "\ufeff{}",
    '{"a": 1} trailing',
    '{"a": 1,}',
    "",
    "  \n[1, 2]\n  ",
]


def _outcome(read: Any, text: str) -> Any:
    try:
        return ("value", repr(read(text)))
    except json.JSONDecodeError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_loads_json_is_json_loads(text: str) -> None:
    assert _outcome(loads_json, text) == _outcome(json.loads, text)


@pytest.mark.parametrize(
    "text",
    [
        '{"f": [1.5, -0.25, 1.5e+3, 2.0E-2, 0.0], "i": [0, -0, 99999999999999999999999]}',
        '{"s": "a\\/b \\u00e9 \\n \\" \\\\ \\b \\f \\u0000", "k": {"": [[], {}]}, "dup": 1, "dup": 2}',
        '[1, "two", {"three": null, "four": false}]',
    ],
)
def test_yaml_document_is_what_yaml_reads(text: str) -> None:
    want = yaml.load(text, Loader=yaml.SafeLoader)
    got = yaml_document(text)
    assert repr(got) == repr(want)


@pytest.mark.parametrize(
    "text",
    [
        '{"e": 1e5}',  # a string in YAML 1.1
        '{"e": 1.5e3}',  # a string in YAML 1.1 (its exponent has no sign)
        '{"e": [NaN]}',  # no JSON; a string in YAML
        '{"e": "\\ud83d\\ude00"}',  # one character in JSON, two in PyYAML
        '{"e":\t1}',
        '{"e": "\x7f"}',
        '{"e": "caf\u00e9 \x85 \x9f"}',
        "# comment\n{}",
        "{e: 1}",
        '{"e": 1',
    ],
)
def test_yaml_document_leaves_to_yaml_what_it_may_read_otherwise(text: str) -> None:
    with pytest.raises(NotYamlJson):
        yaml_document(text)
