"""Structural-schema pruning and validation of custom resources (a subset of OpenAPI v3 as CRDs use it).

Supported: type, properties, additionalProperties, items, required, enum, nullable, minimum/maximum,
exclusiveMinimum/exclusiveMaximum, minLength/maxLength, pattern, minItems/maxItems, minProperties/maxProperties,
x-kubernetes-preserve-unknown-fields, x-kubernetes-int-or-string, x-kubernetes-embedded-resource (metadata kept),
``default`` (applied to absent fields on every write), pruning of nulls for non-nullable fields.
``cel_issues`` evaluates x-kubernetes-validations (CEL rules, with tests/kubeapi/cel.py: common-expression-language) on create
and, with oldSelf, on update; the API server runs it after structural validation passed.
CEL ratcheting: on update, values equal to the stored ones are not checked (see cel.py).
x-kubernetes-list-type set and map: duplicate items (by the list-map keys) refused.
Not supported: format checks, oneOf/anyOf/allOf/not and CEL cost limits.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from tests.kubeapi import cel

Issue = tuple[str, str, str]  # (field path, cause type, detail)

_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean"}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return _TYPE_NAMES.get(type(value), "null" if value is None else "unknown")


def prune_and_validate(obj: dict[str, Any], schema: dict[str, Any]) -> list[Issue]:
    """Drop fields the schema does not know (in place) and return validation issues.

    apiVersion, kind and metadata at the root are always kept and not validated against the schema.
    """
    issues: list[Issue] = []
    props = schema.get("properties") or {}
    if not schema.get("x-kubernetes-preserve-unknown-fields"):
        for key in list(obj):
            if key not in props and key not in ("apiVersion", "kind", "metadata"):
                del obj[key]
    for key, sub in props.items():
        if key in ("apiVersion", "kind", "metadata"):
            continue
        if obj.get(key, 0) is None and not sub.get("nullable"):
            del obj[key]
        if key not in obj and "default" in sub:
            obj[key] = copy.deepcopy(sub["default"])
        if key in obj:
            obj[key] = _walk(obj[key], sub, key, issues)
    for req in schema.get("required") or []:
        if req not in obj:
            issues.append((req, "FieldValueRequired", ""))
    return issues


def cel_issues(obj: dict[str, Any], schema: dict[str, Any], old: dict[str, Any] | None) -> list[Issue]:
    """The CEL rules ``obj`` breaks (on update ``old`` is the stored object: transition rules apply)."""
    issues: list[Issue] = []
    for path, message in cel.validate(schema, obj, old):
        node: Any = obj
        for part in re.findall(r"[^.\[\]]+", path):
            node = node[int(part)] if isinstance(node, list) else node.get(part) if isinstance(node, dict) else None
        issues.append((path, "FieldValueInvalid", f'"{cel.value_type(node)}": {message}'))
    return issues


def _walk(value: Any, schema: dict[str, Any], path: str, issues: list[Issue]) -> Any:
    if value is None:
        return value  # non-nullable nulls were pruned by the caller (object properties); list items keep them
    type_ = schema.get("type")
    actual = _json_type(value)
    if schema.get("x-kubernetes-int-or-string"):
        if actual not in ("integer", "string"):
            issues.append((path, "FieldValueTypeInvalid", f'"{actual}": {path} in body must be of type int-or-string'))
        elif actual == "string" and "pattern" in schema and not re.search(schema["pattern"], value):
            issues.append(
                (path, "FieldValueInvalid", f"\"{value}\": {path} in body should match '{schema['pattern']}'")
            )
        return value
    if type_ and not (actual == type_ or (type_ == "number" and actual == "integer")):
        issues.append(
            (path, "FieldValueTypeInvalid", f'"{actual}": {path} in body must be of type {type_}: "{actual}"')
        )
        return value
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{e}"' for e in schema["enum"])
        issues.append((path, "FieldValueNotSupported", f"{_short(value)}: supported values: {allowed}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and (
            value < schema["minimum"] or (schema.get("exclusiveMinimum") and value == schema["minimum"])
        ):
            issues.append(
                (
                    path,
                    "FieldValueInvalid",
                    f"{value}: {path} in body should be greater than or equal to {schema['minimum']}",
                )
            )
        if "maximum" in schema and (
            value > schema["maximum"] or (schema.get("exclusiveMaximum") and value == schema["maximum"])
        ):
            issues.append(
                (
                    path,
                    "FieldValueInvalid",
                    f"{value}: {path} in body should be less than or equal to {schema['maximum']}",
                )
            )
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            issues.append(
                (
                    path,
                    "FieldValueInvalid",
                    f'"{value}": {path} in body should be at least {schema["minLength"]} chars long',
                )
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            issues.append(
                (path, "FieldValueTooLong", f"{path} in body may not be more than {schema['maxLength']} bytes")
            )
        if "pattern" in schema and not re.search(schema["pattern"], value):
            issues.append(
                (path, "FieldValueInvalid", f"\"{value}\": {path} in body should match '{schema['pattern']}'")
            )
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            issues.append(
                (path, "FieldValueInvalid", f"{path} in body should have at least {schema['minItems']} items")
            )
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            issues.append((path, "FieldValueTooMany", f"must have at most {schema['maxItems']} items"))
        _duplicates(value, schema, path, issues)
        items = schema.get("items")
        if isinstance(items, dict):
            return [_walk(v, items, f"{path}[{i}]", issues) for i, v in enumerate(value)]
        return value
    if isinstance(value, dict):
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields")
        if props is not None or isinstance(additional, dict) or (type_ == "object" and not preserve):
            out: dict[str, Any] = {}
            for k, v in value.items():
                if v is None and props is not None and k in props and not props[k].get("nullable"):
                    continue  # null for a non-nullable field is pruned (then defaulted)
                if props is not None and k in props:
                    out[k] = _walk(v, props[k], f"{path}.{k}", issues)
                elif isinstance(additional, dict):
                    out[k] = _walk(v, additional, f"{path}.{k}", issues)
                elif additional is True or preserve or (embedded and k in ("apiVersion", "kind", "metadata")):
                    out[k] = v
                # else: pruned
            for k, sub in (props or {}).items():
                if k not in out and "default" in sub:
                    out[k] = _walk(copy.deepcopy(sub["default"]), sub, f"{path}.{k}", issues)
            value = out
        for req in schema.get("required") or []:
            if req not in value:
                issues.append((f"{path}.{req}", "FieldValueRequired", ""))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            issues.append(
                (path, "FieldValueInvalid", f"{path} in body should have at least {schema['minProperties']} properties")
            )
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            issues.append((path, "FieldValueTooMany", f"must have at most {schema['maxProperties']} items"))
    return value


def _duplicates(value: list[Any], schema: dict[str, Any], path: str, issues: list[Issue]) -> None:
    """x-kubernetes-list-type set (items unique) and map (items unique by their x-kubernetes-list-map-keys)."""
    list_type = schema.get("x-kubernetes-list-type")
    if list_type not in ("set", "map"):
        return
    keys = schema.get("x-kubernetes-list-map-keys") or []
    seen: list[Any] = []
    for i, item in enumerate(value):
        key = item if list_type == "set" else [item.get(k) if isinstance(item, dict) else None for k in keys]
        if key in seen:
            shown = (
                _short(item)
                if list_type == "set"
                else "{" + ", ".join(f'"{k}":{_short(v)}' for k, v in zip(keys, key, strict=True)) + "}"
            )
            issues.append((f"{path}[{i}]", "FieldValueDuplicate", f"Duplicate value: {shown}"))
        seen.append(key)


def _short(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)
