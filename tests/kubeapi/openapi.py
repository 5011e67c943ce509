"""OpenAPI v3 as the API server publishes it: ``/openapi/v3`` lists one document per group-version, and each
document carries a schema per kind tagged with ``x-kubernetes-group-version-kind`` (what ``kubectl explain`` and
kubectl's client-side validation look up).

Custom resources get their CRD version's ``openAPIV3Schema`` (with apiVersion, kind and metadata filled in as the
real server does); built-ins get a permissive object schema with their top-level fields, so validation of a
built-in accepts it and ``explain`` names the kind.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from tests.kubeapi.resources import Obj, ResourceType

OBJECT_META: Obj = {
    "type": "object",
    "description": "Standard object's metadata: name, namespace, labels, annotations, ownerReferences, ...",
    "x-kubernetes-preserve-unknown-fields": True,
}

_API_VERSION: Obj = {"type": "string", "description": "The versioned schema of this representation of an object."}
_KIND: Obj = {"type": "string", "description": "The REST resource this object represents."}


def gv_path(group: str, version: str) -> str:
    """The document path of a group-version: ``api/v1``, ``apis/karpenter.sh/v1``."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def schema_name(rt: ResourceType) -> str:
    """Component name as the real server forms it for custom resources: reversed group, version, kind."""
    if not rt.group:
        return f"io.k8s.api.core.{rt.version}.{rt.kind}"
    return ".".join(reversed(rt.group.split("."))) + f".{rt.version}.{rt.kind}"


def _crd_schema(crd: Obj, version: str) -> Obj:
    for v in crd["spec"].get("versions") or []:
        if v.get("name") == version:
            schema = copy.deepcopy(((v.get("schema") or {}).get("openAPIV3Schema")) or {"type": "object"})
            break
    else:
        schema = {"type": "object"}
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {**_API_VERSION, **(props.get("apiVersion") or {})}
    props["kind"] = {**_KIND, **(props.get("kind") or {})}
    props["metadata"] = OBJECT_META
    return schema


def _builtin_schema(rt: ResourceType) -> Obj:
    return {
        "type": "object",
        "description": f"{rt.kind} ({rt.api_version}), as served by the nodeflow test API server.",
        "properties": {"apiVersion": _API_VERSION, "kind": _KIND, "metadata": OBJECT_META},
        "x-kubernetes-preserve-unknown-fields": True,
    }


def group_version_document(types: list[ResourceType], crds: dict[str, Obj], server_version: str) -> Obj:
    """The OpenAPI 3.0 document of one group-version (all ``types`` share it)."""
    schemas: Obj = {}
    paths: Obj = {}
    for rt in types:
        schema = _crd_schema(crds[rt.crd_name], rt.version) if rt.crd_name in crds else _builtin_schema(rt)
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        schema["x-kubernetes-group-version-kind"] = [gvk]
        name = schema_name(rt)
        schemas[name] = schema
        base = "/" + gv_path(rt.group, rt.version) + ("/namespaces/{namespace}" if rt.namespaced else "")
        ref = {"200": {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}}
        paths[f"{base}/{rt.plural}/{{name}}"] = {
            "get": {
                "operationId": f"read{rt.kind}",
                "responses": ref,
                "x-kubernetes-action": "get",
                "x-kubernetes-group-version-kind": gvk,
            },
            # kubectl --validate=strict (its default) sends fieldValidation=Strict when the PATCH operation
            # declares the parameter, and leaves validation to the server (``unknown_fields``)
            "patch": {
                "operationId": f"patch{rt.kind}",
                "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                "responses": ref,
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            },
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server_version},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def content_hash(doc: Any) -> str:
    """The ``hash`` of a document's serverRelativeURL (clients cache by it, so it changes with the content)."""
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:64].upper()


def unknown_fields(value: Any, schema: Obj, path: str = "") -> list[str]:
    """The dotted paths of fields a structural schema does not declare (what pruning would drop), in document
    order: the real server's ``fieldValidation=Strict`` refuses them instead of dropping them."""
    out: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return out
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if props is not None and key in props:
                out += unknown_fields(item, props[key], child)
            elif isinstance(extra, dict):
                out += unknown_fields(item, extra, child)
            elif (
                props is not None
                and not (extra is True or schema.get("x-kubernetes-preserve-unknown-fields"))
                and not (path == "" and key in ("apiVersion", "kind", "metadata"))
            ):
                out.append(child)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += unknown_fields(item, schema["items"], f"{path}[{i}]")
    return out
