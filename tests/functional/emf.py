"""The JSON records (EMF metrics, structured logs) the sandbox's handlers wrote to stdout, read whatever the line
breaks: in the sandbox the Lambdas run on threads of one process, and ``print`` writes a record and its newline in
two writes, so another thread's record can land between them (two records on one line, then an empty line). On
AWS each invocation has its process, and each record its line."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_records", "metric_records"]

_DECODER = json.JSONDecoder()


def json_records(text: str) -> list[dict[str, Any]]:
    """Every JSON object in ``text``, in order; text between them that is not JSON (a plain log line) is skipped
    to the end of its line."""
    out: list[dict[str, Any]] = []
    i, end = 0, len(text)
    while i < end:
        if text[i].isspace():
            i += 1
            continue
        if text[i] == "{":
            try:
                record, i = _DECODER.raw_decode(text, i)
            except json.JSONDecodeError:
                pass
            else:
                if isinstance(record, dict):
                    out.append(record)
                continue
        newline = text.find("\n", i)
        i = end if newline < 0 else newline + 1
    return out


def metric_records(text: str, name: str | None = None) -> list[dict[str, Any]]:
    """The EMF records of ``text`` (those with an ``_aws`` directive), of the metric ``name`` when given."""
    return [r for r in json_records(text) if "_aws" in r and (name is None or name in r)]
