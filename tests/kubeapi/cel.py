"""CEL validation rules (``x-kubernetes-validations``) of a CRD schema, evaluated with the
common-expression-language package (PyPI; Python bindings of a Rust CEL implementation: about a
microsecond per rule, so the test API server can run them on every write).

``validate(schema, obj, old)`` walks an object along its structural schema like the API server does:
every rule on a node whose value is present is evaluated with ``self`` bound to that value; a rule that
names ``oldSelf`` (a transition rule) only when the old object has a value at the same place, reached
through object properties and map keys (list items are not correlated, as for atomic lists). On update, a value
equal to its correlated old value is not checked at all (the API server's validation ratcheting, on by default
since Kubernetes 1.30): a status write to an object stored before a rule existed is not refused for its spec.
Returns ``(field path, message)`` for every rule that evaluates to false or fails to evaluate.

Kubernetes' CEL library adds functions to standard CEL; those the Karpenter CRDs use are provided here:
``string.find(regex)`` (the first match, or "") and ``string.split(separator)``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import cel as celrs

Violation = tuple[str, str]

_ABSENT = object()


def _find(value: str, pattern: str) -> str:
    match = re.search(pattern, value)
    return match.group(0) if match else ""


def _split(value: str, separator: str) -> list[str]:
    return value.split(separator)


@functools.lru_cache(maxsize=512)
def _program(rule: str) -> Any:
    try:
        return celrs.compile(rule)
    except ValueError as exc:
        raise ValueError(f"rule {rule!r} does not compile: {exc}") from exc


@functools.lru_cache(maxsize=512)
def is_transition_rule(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


def _context(value: Any, old: Any = _ABSENT) -> Any:
    """A context binding ``self`` (and ``oldSelf``): converting a value to CEL costs more than running a rule on
    it, so all the rules of one schema node share one context."""
    context = celrs.Context()
    context.add_function("find", _find)
    context.add_function("split", _split)
    context.add_variable("self", value)
    if old is not _ABSENT:
        context.add_variable("oldSelf", old)
    return context


def evaluate(rule: str, value: Any, old: Any = _ABSENT) -> bool:
    """One rule on one value; raises ValueError when it does not evaluate to a bool."""
    return _run(rule, _context(value, old))


def _run(rule: str, context: Any) -> bool:
    try:
        result = _program(rule).execute(context)
    except RuntimeError as exc:
        raise ValueError(f"rule {rule!r} failed to evaluate: {exc}") from exc
    if not isinstance(result, bool):
        raise ValueError(f"rule {rule!r} evaluated to {result!r}, not a bool")
    return result


def validate(schema: dict[str, Any], obj: Any, old: Any = None, path: str = "") -> list[Violation]:
    """Every CEL rule of ``schema`` (recursively) that ``obj`` breaks; ``old`` is the stored object on update
    (None on create)."""
    out: list[Violation] = []
    _walk(schema, obj, _ABSENT if old is None else old, path, out)
    return out


def value_type(value: Any) -> str:
    """The JSON type name the API server shows in a rule's error ("object", "string", ...)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number" if isinstance(value, float) else "integer"
    names: dict[type, str] = {dict: "object", list: "array", str: "string"}
    return names.get(type(value), "null")


def _walk(schema: dict[str, Any], value: Any, old: Any, path: str, out: list[Violation]) -> None:
    if value is None:
        return
    if old is not _ABSENT and value == old:
        return  # ratcheting: an update leaves a value the rules may refuse alone when it does not change it
    rules = [
        item
        for item in schema.get("x-kubernetes-validations") or []
        if old is not _ABSENT or not is_transition_rule(item["rule"])
    ]
    context = _context(value, old) if rules else None  # non-transition rules do not read oldSelf
    for item in rules:
        rule = item["rule"]
        try:
            ok = _run(rule, context)
        except ValueError as exc:
            out.append((path or "<root>", str(exc)))
            continue
        if not ok:
            out.append((path or "<root>", item.get("message") or f"failed rule: {rule}"))
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, sub in value.items():
            child = props.get(key) if key in props else (additional if isinstance(additional, dict) else None)
            if child is None:
                continue
            old_child = old.get(key, _ABSENT) if isinstance(old, dict) else _ABSENT
            _walk(child, sub, _ABSENT if old_child is None else old_child, f"{path}.{key}" if path else key, out)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk(schema["items"], item, _ABSENT, f"{path}[{i}]", out)
