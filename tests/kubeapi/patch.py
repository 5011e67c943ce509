"""Patch algorithms: strategic merge (the subset of Kubernetes' patch metadata we model),
JSON merge patch (RFC 7386) and JSON patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any


class PatchError(Exception):
    """A patch that cannot be applied. ``code`` is the HTTP status the real server answers with."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# field name -> merge key, for list fields whose Go type carries patchStrategy=merge.
# Lists not named here are replaced wholesale (atomic), like the real server does.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "taints": "key",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "ports": "",  # containerPort for container ports, port for service ports (decided per item)
}
# primitive lists with patchStrategy=merge (set union)
_MERGE_PRIMITIVE_LISTS = {"finalizers"}


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


def _port_key(item: dict[str, Any]) -> str:
    return "containerPort" if "containerPort" in item else "port"


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not k.startswith("$") and v is not None and not k.startswith("$setElementOrder/")
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "delete")]
    return value


def strategic_merge_patch(original: Any, patch: Any) -> Any:
    """Apply a strategic merge patch to a JSON object."""
    if not isinstance(patch, dict):
        raise PatchError("the body of a strategic merge patch must be a JSON object", 400)
    return _smp_map(original if isinstance(original, dict) else {}, patch)


def _smp_map(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    directive = patch.get("$patch")
    if directive == "replace":
        replaced: dict[str, Any] = _strip_directives({k: v for k, v in patch.items() if k != "$patch"})
        return replaced
    if directive == "delete":
        return {}
    if directive not in (None, "merge"):
        raise PatchError(f"Unknown patch type: {directive}", 400)
    result = copy.deepcopy(original)
    retain = patch.get("$retainKeys")
    if retain is not None:
        if not isinstance(retain, list):
            raise PatchError("$retainKeys must be a list", 400)
        result = {k: v for k, v in result.items() if k in retain}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if not isinstance(value, list):
                raise PatchError("$deleteFromPrimitiveList must be a list", 400)
            if isinstance(result.get(field), list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, dict):
            result[key] = _smp_map(current if isinstance(current, dict) else {}, value)
        elif isinstance(value, list):
            result[key] = _smp_list(key, current if isinstance(current, list) else None, value)
        else:
            result[key] = value
    return result


def _smp_list(field: str, original: list[Any] | None, patch: list[Any]) -> list[Any]:
    # list-level "$patch: replace"
    if any(isinstance(p, dict) and p.get("$patch") == "replace" and len(p) == 1 for p in patch):
        kept: list[Any] = _strip_directives(
            [p for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace")]
        )
        return kept
    if field in _MERGE_PRIMITIVE_LISTS:
        result = list(original or [])
        for item in patch:
            if item not in result:
                result.append(item)
        return result
    if field not in _MERGE_KEYS or not all(isinstance(p, dict) for p in patch):
        atomic: list[Any] = _strip_directives(patch)
        return atomic
    result = copy.deepcopy(original or [])
    for item in patch:
        key_name = _MERGE_KEYS[field] or _port_key(item)
        if key_name not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key_name}", 400)
        key_value = item[key_name]
        matches = [i for i, o in enumerate(result) if isinstance(o, dict) and o.get(key_name) == key_value]
        if item.get("$patch") == "delete":
            result = [o for i, o in enumerate(result) if i not in matches]
            continue
        if matches:
            idx = matches[0]
            result[idx] = _smp_map(result[idx], item)
        else:
            result.append(_strip_directives(item))
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f'JSON pointer "{path}" must start with "/"', 422)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise PatchError(f"missing path: /{'/'.join(parts)}", 422)
            cur = cur[p]
        elif isinstance(cur, list):
            try:
                cur = cur[int(p)]
            except (ValueError, IndexError):
                raise PatchError(f"invalid index {p} in /{'/'.join(parts)}", 422) from None
        else:
            raise PatchError(f"missing path: /{'/'.join(parts)}", 422)
    return cur


def _add(doc: Any, parts: list[str], value: Any, replace: bool = False) -> Any:
    if not parts:
        return copy.deepcopy(value)
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: /{'/'.join(parts)}", 422)
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(copy.deepcopy(value))
        else:
            try:
                idx = int(last)
            except ValueError:
                raise PatchError(f"invalid index {last}", 422) from None
            if replace:
                if not 0 <= idx < len(parent):
                    raise PatchError(f"invalid index {idx}", 422)
                parent[idx] = copy.deepcopy(value)
            else:
                if not 0 <= idx <= len(parent):
                    raise PatchError(f"invalid index {idx}", 422)
                parent.insert(idx, copy.deepcopy(value))
    else:
        raise PatchError(f"missing path: /{'/'.join(parts)}", 422)
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise PatchError("cannot remove the document root", 422)
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"remove operation does not apply: doc is missing path: /{'/'.join(parts)}", 422)
        return parent.pop(last)
    if isinstance(parent, list):
        try:
            return parent.pop(int(last))
        except (ValueError, IndexError):
            raise PatchError(f"invalid index {last}", 422) from None
    raise PatchError(f"missing path: /{'/'.join(parts)}", 422)


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 (add, remove, replace, move, copy, test)."""
    if not isinstance(ops, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", 400)
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError("Unexpected kind: missing op", 400)
        kind = op["op"]
        path = op.get("path")
        if not isinstance(path, str):
            raise PatchError(f"{kind} operation missing path", 422)
        parts = _pointer(path)
        if kind == "add":
            doc = _add(doc, parts, op.get("value"))
        elif kind == "remove":
            _remove(doc, parts)
        elif kind == "replace":
            if not parts:
                doc = copy.deepcopy(op.get("value"))
            else:
                doc = _add(doc, parts, op.get("value"), replace=True)
        elif kind in ("move", "copy"):
            src = op.get("from")
            if not isinstance(src, str):
                raise PatchError(f"{kind} operation missing from", 422)
            src_parts = _pointer(src)
            value = _remove(doc, src_parts) if kind == "move" else copy.deepcopy(_resolve(doc, src_parts))
            doc = _add(doc, parts, value)
        elif kind == "test":
            try:
                actual = _resolve(doc, parts)
            except PatchError:
                raise PatchError("testing value " + path + " failed: test failed", 422) from None
            if actual != op.get("value"):
                raise PatchError("testing value " + path + " failed: test failed", 422)
        else:
            raise PatchError(f"Unexpected kind: {kind}", 422)
    return doc
