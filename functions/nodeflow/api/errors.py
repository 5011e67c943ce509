"""Readable lines from pydantic ValidationErrors of Kubernetes manifests.

``format_validation_error`` turns each error into ``"<field path>: <rule>"``, with the path
in the manifest's camelCase spelling, e.g.
``spec.template.spec.requirements[0].values: operator In requires at least one value``.

Model-level validators in ``nodeflow.api`` raise ``ValueError("<relative path>: <rule>")``;
the relative path is appended to the error's location here.

Must not touch: which input is valid (the models decide); only how their errors read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import ValidationError

__all__ = ["format_loc", "format_validation_error"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SEGMENT = r"(?:[A-Za-z_][A-Za-z0-9_]*|\[[^\]\s]*\])"
_REL_PATH = re.compile(rf"^(?P<path>{_SEGMENT}(?:\.[A-Za-z_][A-Za-z0-9_]*|\[[^\]\s]*\])*): ")
# pydantic adds union member / validator names to loc in some cases; they are not fields.
_NOISE = re.compile(r"^(function-(after|before|wrap|plain)\[.*\]|[a-z-]+\[.*\]|int|str|float|bool|none)$")


def format_loc(loc: Sequence[int | str]) -> str:
    """``("spec", "requirements", 0, "values")`` -> ``spec.requirements[0].values``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part}]"
    return out


def _message(error: dict[str, object]) -> str:
    msg = str(error.get("msg", ""))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if error.get("type") == "extra_forbidden":
        msg = "unknown field (not part of the schema of this kind)"
    elif error.get("type") == "missing":
        msg = "required field is missing"
    return msg


def format_validation_error(exc: ValidationError) -> list[str]:
    """One ``"path: rule"`` line per error of ``exc``."""
    lines: list[str] = []
    for error in exc.errors(include_url=False):
        loc = [part for part in error["loc"] if isinstance(part, int) or not _NOISE.match(part)]
        path = format_loc(loc)
        msg = _message(dict(error))
        match = _REL_PATH.match(msg)
        if match:
            rel = match["path"]
            msg = msg[match.end() :]
            path = f"{path}.{rel}" if path and not rel.startswith("[") else f"{path}{rel}"
        lines.append(f"{path}: {msg}" if path else msg)
    return lines
