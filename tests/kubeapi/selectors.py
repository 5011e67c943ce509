"""Label and field selectors, parsed like apimachinery does."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class SelectorError(Exception):
    """An unparsable or unsupported selector (HTTP 400)."""


_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return has and value == self.values[0]
        if self.op == "!=":
            return not has or value != self.values[0]
        if self.op == "in":
            return has and value in self.values
        if self.op == "notin":
            return not has or value not in self.values
        if self.op == "exists":
            return has
        return not has  # "!"


def _split_top(selector: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _check_key(key: str, raw: str) -> str:
    if not key or len(key) > 316 or not _KEY_RE.match(key):
        raise SelectorError(f'unable to parse requirement: invalid label key "{key}" in "{raw}"')
    return key


def _check_value(value: str, raw: str) -> str:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise SelectorError(f'unable to parse requirement: invalid label value: "{value}" in "{raw}"')
    return value


_SET_RE = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\((.*)\)\s*$")


def parse_label_selector(selector: str) -> list[Requirement]:
    reqs: list[Requirement] = []
    if not selector.strip():
        return reqs
    for raw in _split_top(selector):
        part = raw.strip()
        if not part:
            raise SelectorError(f"unable to parse requirement: found '', expected: identifier in {selector!r}")
        m = _SET_RE.match(part)
        if m:
            values = tuple(_check_value(v.strip(), part) for v in m.group(3).split(","))
            reqs.append(Requirement(_check_key(m.group(1), part), m.group(2), values))
            continue
        if "!=" in part:
            key, value = part.split("!=", 1)
            reqs.append(Requirement(_check_key(key.strip(), part), "!=", (_check_value(value.strip(), part),)))
        elif "==" in part:
            key, value = part.split("==", 1)
            reqs.append(Requirement(_check_key(key.strip(), part), "=", (_check_value(value.strip(), part),)))
        elif "=" in part:
            key, value = part.split("=", 1)
            reqs.append(Requirement(_check_key(key.strip(), part), "=", (_check_value(value.strip(), part),)))
        elif part.startswith("!"):
            reqs.append(Requirement(_check_key(part[1:].strip(), part), "!"))
        else:
            if any(c in part for c in "()<> "):
                raise SelectorError(f"unable to parse requirement: {part!r}")
            reqs.append(Requirement(_check_key(part, part), "exists"))
    return reqs


def labels_match(reqs: list[Requirement], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


def selector_dict_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions). An empty selector matches everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


FieldGetter = Callable[[Mapping[str, Any]], str]


def path_getter(path: str) -> FieldGetter:
    parts = path.split(".")

    def get(obj: Mapping[str, Any]) -> str:
        cur: Any = obj
        for p in parts:
            if not isinstance(cur, Mapping):
                return ""
            cur = cur.get(p)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str


def parse_field_selector(selector: str, supported: Mapping[str, FieldGetter]) -> list[FieldRequirement]:
    reqs: list[FieldRequirement] = []
    if not selector.strip():
        return reqs
    for raw in selector.split(","):
        part = raw.strip()
        if "!=" in part:
            field, value = part.split("!=", 1)
            op = "!="
        elif "==" in part:
            field, value = part.split("==", 1)
            op = "="
        elif "=" in part:
            field, value = part.split("=", 1)
            op = "="
        else:
            raise SelectorError(f"invalid selector: '{selector}'; can't understand '{part}'")
        field = field.strip()
        if field not in supported:
            raise SelectorError(f"field label not supported: {field}")
        reqs.append(FieldRequirement(field, op, value.strip()))
    return reqs


def fields_match(reqs: list[FieldRequirement], obj: Mapping[str, Any], supported: Mapping[str, FieldGetter]) -> bool:
    for r in reqs:
        actual = supported[r.field](obj)
        if (actual == r.value) != (r.op == "="):
            return False
    return True
