"""The state and semantics of the test API server, independent of HTTP.

Objects are plain JSON dicts. One lock guards everything; one global counter issues resourceVersions;
a bounded history of write events feeds watches.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import math
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.kubeapi.patch import PatchError, json_merge_patch, json_patch, strategic_merge_patch
from tests.kubeapi.resources import Obj, ResourceType, builtin_resources, crd_resources
from tests.kubeapi.schema import cel_issues, prune_and_validate
from tests.kubeapi.selectors import (
    FieldRequirement,
    Requirement,
    SelectorError,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
    selector_dict_matches,
)

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"


class APIError(Exception):
    """An error the API server answers with a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> Obj:
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def _details(rt: ResourceType, name: str) -> Obj:
    d: Obj = {"name": name, "kind": rt.plural}
    if rt.group:
        d["group"] = rt.group
    return d


def not_found(rt: ResourceType, name: str) -> APIError:
    return APIError(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> APIError:
    return APIError(409, "AlreadyExists", f'{rt.group_resource} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> APIError:
    return APIError(
        409, "Conflict", f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}', _details(rt, name)
    )


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def method_not_allowed() -> APIError:
    return APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def unsupported_media_type(accepted: str) -> APIError:
    return APIError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {accepted}",
    )


@dataclass(frozen=True)
class Cause:
    type: str  # FieldValueRequired, FieldValueInvalid, FieldValueForbidden, ...
    field: str
    message: str


_CAUSE_PREFIX = {
    "FieldValueRequired": "Required value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueTypeInvalid": "Invalid value",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
}


def invalid(kind: str, name: str, causes: list[Cause], group: str = "") -> APIError:
    msgs = [f"{c.field}: {c.message}" for c in causes]
    summary = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
    details: Obj = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": c.type, "message": c.message, "field": c.field} for c in causes],
    }
    if group:
        details["group"] = group
    return APIError(422, "Invalid", f'{kind}{"." + group if group else ""} "{name}" is invalid: {summary}', details)


def _cause(type_: str, field: str, detail: str) -> Cause:
    return Cause(type_, field, f"{_CAUSE_PREFIX.get(type_, type_)}: {detail}" if detail else _CAUSE_PREFIX[type_])


@dataclass
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    storage: str
    obj: Obj
    old: Obj | None


class Gone(Exception):
    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.message = f"too old resource version: {requested} ({oldest})"


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


def _omit_empty_meta(obj: Obj) -> None:
    """Empty metadata collections are omitted (omitempty), as the real server serializes them."""
    meta = obj["metadata"]
    for k in ("labels", "annotations", "finalizers", "ownerReferences"):
        if k in meta and not meta[k]:
            del meta[k]


def _key(obj: Obj) -> tuple[str, str]:
    m = obj["metadata"]
    return (m.get("namespace") or "", m["name"])


def _without(obj: Obj, *paths: str) -> Obj:
    out = copy.deepcopy(obj)
    for p in paths:
        if "." in p:
            top, sub = p.split(".", 1)
            if isinstance(out.get(top), dict):
                out[top].pop(sub, None)
        else:
            out.pop(p, None)
    return out


def _spec_view(obj: Obj, with_status: bool = False) -> Obj:
    """What metadata.generation tracks: everything but metadata (and status, when it is a subresource)."""
    skip = ("metadata", "apiVersion", "kind") if with_status else ("metadata", "status", "apiVersion", "kind")
    return {k: v for k, v in obj.items() if k not in skip}


def _pod_ready(pod: Obj) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def _qos_class(pod: Obj) -> str:
    containers = list((pod.get("spec") or {}).get("containers") or []) + list(
        (pod.get("spec") or {}).get("initContainers") or []
    )
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and req[r] != lim[r]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _scaled(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)."""
    if isinstance(value, int):
        return value
    s = str(value)
    if s.endswith("%"):
        return math.ceil(int(s[:-1]) * total / 100)
    return int(s)


class Cluster:
    """All objects, the resourceVersion counter, the watch history and the API semantics."""

    def __init__(self, history_size: int = 1000, now: Callable[[], datetime] | None = None) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.history_size = history_size
        self._now = now or (lambda: datetime.now(UTC))
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._history: list[WatchEvent] = []
        self._compacted_rv = 0
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self.closed = False
        #: keep PodDisruptionBudget status (disruptionsAllowed, currentHealthy, ...) current, like the
        #: disruption controller does; set False to manage PDB status by hand through the status subresource
        self.pdb_controller = True
        #: delete dependents (ownerReferences) of deleted objects, like the garbage collector in Background mode
        self.garbage_collector = True
        #: evaluate the CRDs' CEL rules (x-kubernetes-validations) on create and update, as a real API server
        #: does; a test that needs an object the rules refuse stores it with ``create(..., admission=False)``
        #: (``KubeAPIServer.store_bypassing_admission``), as a write straight into etcd would
        self.cel_validation = True
        self._syncing = False
        for rt in builtin_resources():
            self._add_type(rt)
        self._create_default_namespaces()

    # ----------------------------------------------------------------- types

    def _add_type(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt

    def resource_type(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def types(self) -> list[ResourceType]:
        with self.lock:
            return list(self._types.values())

    def _type_for(self, group: str, plural: str) -> ResourceType:
        for rt in self._types.values():
            if rt.group == group and rt.plural == plural:
                return rt
        raise KeyError(f"{group}/{plural}")

    # --------------------------------------------------------------- helpers

    def timestamp(self) -> str:
        return self._now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def resource_version(self) -> int:
        return self._rv

    def _bucket(self, rt: ResourceType) -> dict[tuple[str, str], Obj]:
        return self._objects.setdefault(rt.storage, {})

    def _out(self, rt: ResourceType, obj: Obj) -> Obj:
        out = copy.deepcopy(obj)
        if rt.from_storage is not None:
            out = rt.from_storage(out)
        out["apiVersion"] = rt.api_version
        out["kind"] = rt.kind
        return out

    def _in(self, rt: ResourceType, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        if rt.to_storage is not None:
            obj = rt.to_storage(obj)
        return obj

    def _commit(self, rt: ResourceType, event: str, obj: Obj, old: Obj | None) -> Obj:
        """Persist one write: bump the global resourceVersion, store, record the watch event."""
        self._rv += 1
        obj = copy.deepcopy(obj)
        _meta(obj)["resourceVersion"] = str(self._rv)
        _omit_empty_meta(obj)
        bucket = self._bucket(rt)
        if event == "DELETED":
            bucket.pop(_key(obj), None)
        else:
            bucket[_key(obj)] = obj
        self._history.append(WatchEvent(self._rv, event, rt.storage, obj, old))
        if len(self._history) > self.history_size * 5 // 4:
            drop = len(self._history) - self.history_size
            self._compacted_rv = self._history[drop - 1].rv
            del self._history[:drop]
        self.changed.notify_all()
        if self.pdb_controller and not self._syncing and rt.storage in ("/pods", "policy/poddisruptionbudgets"):
            namespace = obj["metadata"].get("namespace")
            if namespace:
                self._sync_pdbs(namespace)
        return obj

    def _sync_pdbs(self, namespace: str) -> None:
        """The disruption controller, synchronously: keep PodDisruptionBudget status current in one namespace."""
        pdb_rt = self._type_for("policy", "poddisruptionbudgets")
        if not any(k[0] == namespace for k in self._bucket(pdb_rt)):
            return
        pods = [p for k, p in self._bucket(self._type_for("", "pods")).items() if k[0] == namespace]
        self._syncing = True
        try:
            for key, pdb in sorted(self._bucket(pdb_rt).items()):
                if key[0] != namespace:
                    continue
                computed = self.pdb_status(pdb, pods)
                status = dict(pdb.get("status") or {})
                status.update(computed)
                allowed = computed["disruptionsAllowed"] > 0
                condition = {
                    "type": "DisruptionAllowed",
                    "status": "True" if allowed else "False",
                    "reason": "SufficientPods" if allowed else "InsufficientPods",
                    "message": "",
                    "observedGeneration": computed["observedGeneration"],
                }
                previous = {c.get("type"): c for c in status.get("conditions") or []}.get("DisruptionAllowed")
                if previous is None or previous.get("status") != condition["status"]:
                    condition["lastTransitionTime"] = self.timestamp()
                else:
                    condition["lastTransitionTime"] = previous.get("lastTransitionTime")
                others = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionAllowed"]
                status["conditions"] = [*others, condition]
                status.setdefault("disruptedPods", None)
                if status.get("disruptedPods") is None:
                    status.pop("disruptedPods")
                if status != pdb.get("status"):
                    new = copy.deepcopy(pdb)
                    new["status"] = status
                    self._commit(pdb_rt, "MODIFIED", new, pdb)
        finally:
            self._syncing = False

    def compact(self) -> None:
        """Forget all watch history, as etcd compaction does: older resourceVersions now answer 410 Gone."""
        with self.lock:
            if self._history:
                self._compacted_rv = self._history[-1].rv
            self._compacted_rv = max(self._compacted_rv, self._rv)
            self._history.clear()

    def _stored(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self._bucket(rt).get((namespace or "" if rt.namespaced else "", name))
        if obj is None:
            raise not_found(rt, name)
        return obj

    def _generate_name(self, prefix: str) -> str:
        return prefix[:58] + "".join(random.choice(_GENERATE_CHARS) for _ in range(5))

    def _create_default_namespaces(self) -> None:
        """What every cluster starts with: the four namespaces and the two system PriorityClasses."""
        rt = self._type_for("", "namespaces")
        for ns in DEFAULT_NAMESPACES:
            self.create(rt, None, {"metadata": {"name": ns}})
        pc_rt = self._type_for("scheduling.k8s.io", "priorityclasses")
        for name, value in (("system-cluster-critical", 2000000000), ("system-node-critical", 2000001000)):
            self.create(
                pc_rt,
                None,
                {
                    "metadata": {"name": name},
                    "value": value,
                    "preemptionPolicy": "PreemptLowerPriority",
                    "description": "Used for system critical pods that must not be moved from their current node.",
                },
            )

    def reset(self) -> None:
        """Drop every object except CustomResourceDefinitions; recreate the default namespaces."""
        with self.lock:
            keep = "apiextensions.k8s.io/customresourcedefinitions"
            for storage in list(self._objects):
                if storage != keep:
                    self._objects[storage].clear()
            self._history.clear()
            self._compacted_rv = self._rv
            self._create_default_namespaces()

    # -------------------------------------------------------------- validate

    def _validate(self, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        meta = obj["metadata"]
        name = meta.get("name") or ""
        causes: list[Cause] = []
        if old is None:
            if rt.plural == "namespaces":
                if len(name) > 63 or not _LABEL_RE.match(name):
                    causes.append(
                        _cause(
                            "FieldValueInvalid",
                            "metadata.name",
                            f'"{name}": a lowercase RFC 1123 label must consist of lower case alphanumeric '
                            "characters or '-', and must start and end with an alphanumeric character",
                        )
                    )
            elif len(name) > 253 or not _NAME_RE.match(name):
                causes.append(
                    _cause(
                        "FieldValueInvalid",
                        "metadata.name",
                        f'"{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
                        "characters, '-' or '.', and must start and end with an alphanumeric character",
                    )
                )
        for k, v in (meta.get("labels") or {}).items():
            if (
                not isinstance(v, str)
                or len(v) > 63
                or not re.match(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", v)
            ):
                causes.append(_cause("FieldValueInvalid", "metadata.labels", f'"{v}": a valid label value'))
            if not re.match(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", k):
                causes.append(_cause("FieldValueInvalid", "metadata.labels", f'"{k}": a valid label key'))
        if old is not None and old["metadata"].get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
            if added:
                causes.append(
                    _cause(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        f"no new finalizers can be added if the object is being deleted, found new finalizers "
                        f'[]string{{"{sorted(added)[0]}"}}',
                    )
                )
        if rt.group == "" and rt.plural == "pods":
            spec = obj.get("spec") or {}
            containers = spec.get("containers") or []
            if not containers:
                causes.append(_cause("FieldValueRequired", "spec.containers", ""))
            for i, c in enumerate(containers):
                if not c.get("name"):
                    causes.append(_cause("FieldValueRequired", f"spec.containers[{i}].name", ""))
                if not c.get("image"):
                    causes.append(_cause("FieldValueRequired", f"spec.containers[{i}].image", ""))
            if old is not None:
                old_spec = _without(old.get("spec") or {}, "activeDeadlineSeconds", "tolerations")
                new_spec = _without(spec, "activeDeadlineSeconds", "tolerations")
                for c in old_spec.get("containers") or []:
                    c.pop("image", None)
                for c in new_spec.get("containers") or []:
                    c.pop("image", None)
                if old_spec != new_spec:
                    causes.append(
                        _cause(
                            "FieldValueForbidden",
                            "spec",
                            "pod updates may not change fields other than `spec.containers[*].image`, "
                            "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
                            "(only additions to existing tolerations), `spec.terminationGracePeriodSeconds`",
                        )
                    )
        if rt.group == "" and rt.plural == "nodes":
            old_provider = ((old or {}).get("spec") or {}).get("providerID")
            if old_provider and (obj.get("spec") or {}).get("providerID") != old_provider:
                causes.append(
                    _cause(
                        "FieldValueForbidden",
                        "spec.providerID",
                        'node updates may not change providerID except from "" to valid',
                    )
                )
            for i, t in enumerate((obj.get("spec") or {}).get("taints") or []):
                if not t.get("key"):
                    causes.append(_cause("FieldValueRequired", f"spec.taints[{i}].key", ""))
                if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                    causes.append(
                        _cause(
                            "FieldValueNotSupported",
                            f"spec.taints[{i}].effect",
                            f'"{t.get("effect") or ""}": supported values: "NoSchedule", "PreferNoSchedule", '
                            '"NoExecute"',
                        )
                    )
        if rt.group == "policy" and rt.plural == "poddisruptionbudgets":
            spec = obj.get("spec") or {}
            if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
                causes.append(_cause("FieldValueInvalid", "spec", "minAvailable and maxUnavailable cannot be both set"))
        if rt.group == "apiextensions.k8s.io":
            causes.extend(self._validate_crd(obj))
        if not rt.builtin:
            schema = self._schema_for(rt)
            if schema is not None:
                issues = prune_and_validate(obj, schema)
                if not issues and self.cel_validation:
                    issues = cel_issues(obj, schema, old)
                for field, type_, detail in issues:
                    causes.append(_cause(type_, field, detail))
        if causes:
            raise invalid(rt.kind, name, causes, rt.group)

    def _validate_crd(self, crd: Obj) -> list[Cause]:
        causes: list[Cause] = []
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group") or ""
        if not group:
            causes.append(_cause("FieldValueRequired", "spec.group", ""))
        if not names.get("plural"):
            causes.append(_cause("FieldValueRequired", "spec.names.plural", ""))
        if not names.get("kind"):
            causes.append(_cause("FieldValueRequired", "spec.names.kind", ""))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            causes.append(
                _cause(
                    "FieldValueNotSupported",
                    "spec.scope",
                    f'"{spec.get("scope")}": supported values: "Cluster", "Namespaced"',
                )
            )
        versions = spec.get("versions") or []
        if not versions:
            causes.append(_cause("FieldValueRequired", "spec.versions", ""))
        elif sum(1 for v in versions if v.get("storage")) != 1:
            causes.append(
                _cause("FieldValueInvalid", "spec.versions", "must have exactly one version marked as storage version")
            )
        expected = f"{names.get('plural')}.{group}"
        if crd["metadata"].get("name") != expected:
            causes.append(
                _cause(
                    "FieldValueInvalid",
                    "metadata.name",
                    f'"{crd["metadata"].get("name")}": must be spec.names.plural+"."+spec.group',
                )
            )
        return causes

    def _schema_for(self, rt: ResourceType) -> Obj | None:
        crd = self._bucket(self._type_for("apiextensions.k8s.io", "customresourcedefinitions")).get(("", rt.crd_name))
        if crd is None:
            return None
        for v in crd["spec"].get("versions") or []:
            if v.get("name") == rt.version:
                schema = (v.get("schema") or {}).get("openAPIV3Schema")
                return schema if isinstance(schema, dict) else None
        return None

    # ------------------------------------------------------------------ read

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self.lock:
            return self._out(rt, self._stored(rt, namespace, name))

    def parse_selectors(
        self, rt: ResourceType, label_selector: str, field_selector: str
    ) -> tuple[list[Requirement], list[FieldRequirement]]:
        try:
            return parse_label_selector(label_selector), parse_field_selector(field_selector, rt.field_selectors)
        except SelectorError as e:
            raise bad_request(str(e)) from None

    def matches(
        self,
        rt: ResourceType,
        obj: Obj,
        namespace: str | None,
        labels: list[Requirement],
        fields: list[FieldRequirement],
    ) -> bool:
        if namespace and obj["metadata"].get("namespace") != namespace:
            return False
        return labels_match(labels, obj) and fields_match(fields, obj, rt.field_selectors)

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> Obj:
        labels, fields = self.parse_selectors(rt, label_selector, field_selector)
        start: tuple[str, str] | None = None
        if continue_token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                start = (decoded["start"][0], decoded["start"][1])
            except (ValueError, KeyError, TypeError, IndexError):
                raise bad_request("continue key is not valid: illegal base64 data") from None
        with self.lock:
            rv = self._rv
            keys = sorted(self._bucket(rt))
            items: list[Obj] = []
            remaining = 0
            last: tuple[str, str] | None = None
            for k in keys:
                if start is not None and k <= start:
                    continue
                out = self._out(rt, self._bucket(rt)[k])
                if not self.matches(rt, out, namespace, labels, fields):
                    continue
                if limit and len(items) >= limit:
                    remaining += 1
                    continue
                items.append(out)
                last = k
        meta: Obj = {"resourceVersion": str(rv)}
        if remaining and last is not None:
            meta["continue"] = base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": list(last)}).encode()).decode()
            if not fields and not labels:
                meta["remainingItemCount"] = remaining
            elif labels or fields:
                pass  # the real server omits remainingItemCount when selectors are used
        return {"kind": rt.kind + "List", "apiVersion": rt.api_version, "metadata": meta, "items": items}

    # ----------------------------------------------------------------- write

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        dry_run: bool = False,
        keep_status: bool = False,
        admission: bool = True,
    ) -> Obj:
        """Create an object; ``admission=False`` skips validation (structural schema, CEL rules, built-in checks),
        as a write straight into storage would: only for tests that need an object the API server refuses."""
        if not isinstance(body, dict):
            raise bad_request("the body of the request was not a JSON object")
        self._check_kind(rt, body)
        obj = self._in(rt, body)
        meta = _meta(obj)
        if rt.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or meta.get("namespace")
            if not meta["namespace"]:
                raise bad_request("the namespace of the provided object is empty")  # pragma: no cover
        else:
            meta.pop("namespace", None)
        with self.lock:
            if not meta.get("name"):
                if meta.get("generateName"):
                    meta["name"] = self._generate_name(meta["generateName"])
                else:
                    raise invalid(
                        rt.kind,
                        "",
                        [_cause("FieldValueRequired", "metadata.name", "name or generateName is required")],
                        rt.group,
                    )
            if rt.namespaced:
                ns_rt = self._type_for("", "namespaces")
                ns_obj = self._bucket(ns_rt).get(("", meta["namespace"]))
                if ns_obj is None:
                    raise not_found(ns_rt, meta["namespace"])
                if ns_obj["metadata"].get("deletionTimestamp"):
                    raise APIError(
                        403,
                        "Forbidden",
                        f'{rt.group_resource} "{meta["name"]}" is forbidden: unable to create new content in '
                        f"namespace {meta['namespace']} because it is being terminated",
                    )
            if _key(obj) in self._bucket(rt):
                raise already_exists(rt, meta["name"])
            for k in (
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
                "managedFields",
            ):
                meta.pop(k, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = self.timestamp()
            meta["generation"] = 1
            obj["apiVersion"] = rt.api_version if rt.to_storage is None else obj.get("apiVersion", "v1")
            obj["kind"] = rt.kind
            status = copy.deepcopy(obj.get("status"))
            self._prepare_create(rt, obj)
            if keep_status and status is not None:
                obj["status"] = status
            if admission:
                self._validate(rt, obj, None)
            elif not rt.builtin and (schema := self._schema_for(rt)) is not None:
                prune_and_validate(obj, schema)  # defaults applied (a real server applies them reading from etcd)
            if dry_run:
                return self._out(rt, obj)
            stored = self._commit(rt, "ADDED", obj, None)
            self._after_write(rt, stored)
            return self._out(rt, stored)

    def _check_kind(self, rt: ResourceType, body: Obj) -> None:
        kind = body.get("kind")
        if kind and kind != rt.kind:
            raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        api_version = body.get("apiVersion")
        if (
            api_version
            and api_version != rt.api_version
            and not (rt.builtin is False and api_version.startswith(rt.group + "/"))
        ):
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"
            )

    def _prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        if rt.group == "" and rt.plural == "pods":
            self._default_pod(obj)
            status: Obj = {"phase": "Pending", "qosClass": _qos_class(obj)}
            obj["status"] = status
        elif rt.group == "" and rt.plural in ("persistentvolumes", "persistentvolumeclaims"):
            obj["status"] = {"phase": "Pending"}
        elif rt.group == "" and rt.plural == "namespaces":
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
            obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
            obj["status"] = {"phase": "Active"}
        elif rt.group == "apiextensions.k8s.io":
            obj["status"] = self._crd_status(obj)
        elif rt.status_subresource and not (rt.group == "" and rt.plural == "nodes"):
            obj.pop("status", None)  # nodes are the one kind that may set status on create

    def _default_pod(self, pod: Obj) -> None:
        """The defaults and admission the real server applies to every pod that matter to schedulers."""
        spec = pod.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("securityContext", {})
        spec.setdefault("enableServiceLinks", True)
        for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
            if not isinstance(c, dict):
                continue
            image = str(c.get("image") or "")
            tag = image.rsplit("/", 1)[-1]
            latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
            c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            limits = c["resources"].get("limits") or {}
            requests = c["resources"].setdefault("requests", {}) if limits else c["resources"].get("requests")
            if limits and requests is not None:
                for resource, quantity in limits.items():
                    requests.setdefault(resource, quantity)  # requests default to limits
        # Priority admission: resolve priorityClassName (or the global default) into spec.priority
        pc_rt = self._type_for("scheduling.k8s.io", "priorityclasses")
        classes = self._bucket(pc_rt)
        name = spec.get("priorityClassName")
        if name:
            pc = classes.get(("", name))
            if pc is None:
                raise APIError(
                    403,
                    "Forbidden",
                    f'pods "{pod["metadata"].get("name", "")}" is forbidden: no PriorityClass with name {name} was found',
                )
            spec["priority"] = pc.get("value", 0)
            spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy", "PreemptLowerPriority"))
        else:
            default = next((pc for pc in classes.values() if pc.get("globalDefault")), None)
            if default is not None:
                spec["priorityClassName"] = default["metadata"]["name"]
                spec["priority"] = default.get("value", 0)
            else:
                spec.setdefault("priority", 0)
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")

    def _crd_status(self, crd: Obj) -> Obj:
        now = self.timestamp()
        spec = crd.get("spec") or {}
        return {
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": now,
                },
            ],
            "acceptedNames": spec.get("names") or {},
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        }

    def _after_write(self, rt: ResourceType, stored: Obj | None) -> None:
        """Built-in controllers that must react synchronously (CRD routes)."""
        if rt.group == "apiextensions.k8s.io" and stored is not None:
            for crt in crd_resources(stored):
                self._add_type(crt)

    def _prepare_update(self, rt: ResourceType, old: Obj, new: Obj, subresource: str | None) -> Obj:
        if subresource == "status":
            result = copy.deepcopy(old)
            if "status" in new:
                result["status"] = copy.deepcopy(new["status"])
            else:
                result.pop("status", None)
            return result
        result = copy.deepcopy(new)
        if rt.status_subresource:
            if "status" in old:
                result["status"] = copy.deepcopy(old["status"])
            else:
                result.pop("status", None)
        meta = _meta(result)
        old_meta = old["metadata"]
        for k in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "name",
        ):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta.pop("managedFields", None)
        result["apiVersion"] = old.get("apiVersion", rt.api_version)
        result["kind"] = rt.kind
        whole = not rt.builtin and not rt.status_subresource
        if _spec_view(result, whole) != _spec_view(old, whole):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        return result

    def _write(self, rt: ResourceType, old: Obj, new: Obj, dry_run: bool = False, admission: bool = True) -> Obj:
        if admission:
            self._validate(rt, new, old)  # also prunes and defaults custom resources
        elif not rt.builtin and (schema := self._schema_for(rt)) is not None:
            prune_and_validate(new, schema)  # defaults applied, issues ignored (see create)
        old_generation = int(old["metadata"].get("generation") or 0)
        whole = not rt.builtin and not rt.status_subresource  # CRs without a status subresource: status counts
        new["metadata"]["generation"] = old_generation + (1 if _spec_view(new, whole) != _spec_view(old, whole) else 0)
        if dry_run:
            return self._out(rt, new)
        new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
        _omit_empty_meta(new)
        if new == old:
            return self._out(rt, old)  # no-op writes do not bump the resourceVersion
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            stored = self._commit(rt, "DELETED", new, old)
            self._after_delete(rt, stored)
            return self._out(rt, stored)
        stored = self._commit(rt, "MODIFIED", new, old)
        self._after_write(rt, stored)
        return self._out(rt, stored)

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
        admission: bool = True,
    ) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was not a JSON object")
        self._check_kind(rt, body)
        new = self._in(rt, body)
        meta = _meta(new)
        if meta.get("name") and meta["name"] != name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        with self.lock:
            old = self._stored(rt, namespace, name)
            rv = meta.get("resourceVersion")
            if not rv and not rt.allow_unconditional_update:
                raise invalid(
                    rt.kind,
                    name,
                    [_cause("FieldValueInvalid", "metadata.resourceVersion", "0x0: must be specified for an update")],
                    rt.group,
                )
            if rv and rv != old["metadata"].get("resourceVersion"):
                raise conflict(rt, name, STALE)
            return self._write(rt, old, self._prepare_update(rt, old, new, subresource), dry_run, admission)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        raw: bytes,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        ctype = content_type.split(";")[0].strip().lower()
        accepted = "application/json-patch+json, application/merge-patch+json"
        if rt.builtin:
            accepted += ", application/strategic-merge-patch+json"
        if ctype not in ("application/json-patch+json", "application/merge-patch+json") and not (
            rt.builtin and ctype == "application/strategic-merge-patch+json"
        ):
            raise unsupported_media_type(accepted)
        try:
            patch = json.loads(raw or b"null")
        except ValueError as e:
            raise bad_request(f"error decoding patch: {e}") from None
        with self.lock:
            old = self._stored(rt, namespace, name)
            current = self._out(rt, old)
            try:
                if ctype == "application/json-patch+json":
                    patched = json_patch(current, patch)
                elif ctype == "application/merge-patch+json":
                    if not isinstance(patch, dict):
                        raise PatchError("merge patch must be a JSON object", 400)
                    patched = json_merge_patch(current, patch)
                else:
                    patched = strategic_merge_patch(current, patch)
            except PatchError as e:
                if e.code == 400:
                    raise bad_request(e.message) from None
                raise APIError(422, "Invalid", e.message) from None
            if not isinstance(patched, dict):
                raise bad_request("the patched object is not a JSON object")
            pmeta = _meta(patched)
            if pmeta.get("resourceVersion") != current["metadata"].get("resourceVersion"):
                if pmeta.get("resourceVersion"):
                    raise conflict(rt, name, STALE)
                pmeta["resourceVersion"] = current["metadata"].get("resourceVersion")
            if pmeta.get("name") != name:
                raise bad_request(
                    f"the name of the object ({pmeta.get('name')}) does not match the name on the URL ({name})"
                )
            new = self._in(rt, patched)
            return self._write(rt, old, self._prepare_update(rt, old, new, subresource), dry_run)

    def delete(
        self, rt: ResourceType, namespace: str | None, name: str, options: Obj | None = None, dry_run: bool = False
    ) -> tuple[int, Obj]:
        options = options or {}
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        with self.lock:
            old = self._stored(rt, namespace, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"].get("uid"):
                raise conflict(
                    rt,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {old['metadata'].get('uid')}",
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"].get("resourceVersion"):
                raise conflict(
                    rt,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                    f"ResourceVersion in object meta: {old['metadata'].get('resourceVersion')}",
                )
            if dry_run:
                return 200, self._out(rt, old)
            if rt.group == "" and rt.plural == "namespaces":
                return 200, self._delete_namespace(rt, old)
            if old["metadata"].get("finalizers"):
                if old["metadata"].get("deletionTimestamp"):
                    return 200, self._out(rt, old)
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = self.timestamp()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1
                stored = self._commit(rt, "MODIFIED", new, old)
                return 200, self._out(rt, stored)
            stored = self._commit(rt, "DELETED", old, old)
            self._after_delete(rt, stored, orphan=options.get("propagationPolicy") == "Orphan")
            if rt.return_deleted_object:
                return 200, self._out(rt, stored)
            details = _details(rt, name)
            details["uid"] = old["metadata"].get("uid")
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _after_delete(self, rt: ResourceType, stored: Obj, orphan: bool = False) -> None:
        if rt.group == "apiextensions.k8s.io":
            crd_types = crd_resources(stored)
            for crt in crd_types:
                self._types.pop((crt.group, crt.version, crt.plural), None)
            if crd_types:
                crt = crd_types[0]
                for obj in list(self._bucket(crt).values()):
                    self._commit(crt, "DELETED", obj, obj)
        self._collect_garbage(stored["metadata"].get("uid"), orphan)
        namespace = stored["metadata"].get("namespace")
        if namespace:
            self._maybe_finish_namespace(namespace)

    def _type_for_storage(self, storage: str) -> ResourceType:
        return next(rt for rt in self._types.values() if rt.storage == storage and rt.to_storage is None)

    def _collect_garbage(self, uid: str | None, orphan: bool = False) -> None:
        """The garbage collector, synchronously and in background mode: once an owner is gone, dependents
        with no remaining owner are deleted (respecting their finalizers); dependents that still have another
        owner just lose the dangling ownerReference. With ``orphan`` (propagationPolicy=Orphan) every dependent
        just loses the reference."""
        if not self.garbage_collector or not uid:
            return
        dependents = [
            (storage, key, obj)
            for storage, bucket in self._objects.items()
            for key, obj in bucket.items()
            if any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])
        ]
        if not dependents:
            return
        live = {o["metadata"].get("uid") for bucket in self._objects.values() for o in bucket.values()}
        for storage, key, obj in dependents:
            rt = self._type_for_storage(storage)
            current = self._bucket(rt).get(key)
            if current is None or current["metadata"].get("uid") != obj["metadata"].get("uid"):
                continue
            refs = current["metadata"].get("ownerReferences") or []
            remaining = [r for r in refs if r.get("uid") != uid]
            if orphan or any(r.get("uid") in live for r in remaining):
                new = copy.deepcopy(current)
                new["metadata"]["ownerReferences"] = remaining
                self._commit(rt, "MODIFIED", new, current)
            elif not current["metadata"].get("deletionTimestamp"):
                self.delete(rt, key[0] or None, key[1])

    def _delete_namespace(self, rt: ResourceType, old: Obj) -> Obj:
        ns = old["metadata"]["name"]
        if not old["metadata"].get("deletionTimestamp"):
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = self.timestamp()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["status"] = {"phase": "Terminating"}
            old = self._commit(rt, "MODIFIED", new, old)
        # the namespace controller: delete everything inside, then drop the "kubernetes" finalizer
        for other in list(self._types.values()):
            if not other.namespaced or (other.to_storage is not None):
                continue
            for key, obj in list(self._bucket(other).items()):
                if key[0] == ns and not obj["metadata"].get("deletionTimestamp"):
                    self.delete(other, ns, key[1])
        result = self._maybe_finish_namespace(ns)
        return self._out(rt, result if result is not None else old)

    def _maybe_finish_namespace(self, ns: str) -> Obj | None:
        rt = self._type_for("", "namespaces")
        ns_obj = self._bucket(rt).get(("", ns))
        if ns_obj is None or not ns_obj["metadata"].get("deletionTimestamp"):
            return None
        for storage, bucket in self._objects.items():
            if storage != rt.storage and any(k[0] == ns for k in bucket):
                return None
        if ns_obj["metadata"].get("finalizers"):
            return None
        return self._commit(rt, "DELETED", ns_obj, ns_obj)

    def delete_collection(
        self, rt: ResourceType, namespace: str | None, label_selector: str = "", field_selector: str = ""
    ) -> Obj:
        """Delete every matching object; answers with the list of deleted objects, like the real server."""
        with self.lock:
            listed = self.list_objects(rt, namespace, label_selector, field_selector)
            deleted: list[Obj] = []
            for item in listed["items"]:
                with contextlib.suppress(APIError):
                    _, body = self.delete(rt, item["metadata"].get("namespace"), item["metadata"]["name"])
                    deleted.append(body if body.get("kind") == rt.kind else item)
        listed["items"] = deleted
        return listed

    # ------------------------------------------------------ pod subresources

    def pdb_status(self, pdb: Obj, pods: list[Obj]) -> Obj:
        """What the disruption controller would write to a PodDisruptionBudget's status."""
        spec = pdb.get("spec") or {}
        selector = spec.get("selector")
        matching = [
            p
            for p in pods
            if selector_dict_matches(selector, (p["metadata"].get("labels") or {}))
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        expected = len(matching)
        healthy = sum(1 for p in matching if not p["metadata"].get("deletionTimestamp") and _pod_ready(p))
        if spec.get("maxUnavailable") is not None:
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
        elif spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected)
        else:
            desired = 0  # neither set: the disruption controller requires nothing
        return {
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptionsAllowed": max(0, healthy - desired),
            "observedGeneration": pdb["metadata"].get("generation", 1),
        }

    def evict(self, namespace: str, name: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was not a JSON object")
        pod_rt = self._type_for("", "pods")
        ev_name = (body.get("metadata") or {}).get("name")
        if ev_name and ev_name != name:
            raise bad_request("name in URL does not match name in Eviction object")
        with self.lock:
            pod = self._stored(pod_rt, namespace, name)
            phase = (pod.get("status") or {}).get("phase")
            if not pod["metadata"].get("deletionTimestamp") and phase not in ("Succeeded", "Failed", "Pending"):
                pdb_rt = self._type_for("policy", "poddisruptionbudgets")
                labels = pod["metadata"].get("labels") or {}
                pdbs = [
                    p
                    for k, p in sorted(self._bucket(pdb_rt).items())
                    if k[0] == namespace and selector_dict_matches((p.get("spec") or {}).get("selector"), labels)
                ]
                if len(pdbs) > 1:
                    raise APIError(
                        500,
                        "InternalError",
                        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                    )
                if pdbs:
                    pdb = pdbs[0]
                    pods = [p for k, p in self._bucket(pod_rt).items() if k[0] == namespace]
                    st = self.pdb_status(pdb, pods)
                    policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
                    unhealthy_ok = not _pod_ready(pod) and (
                        policy == "AlwaysAllow" or st["currentHealthy"] >= st["desiredHealthy"]
                    )
                    if not unhealthy_ok and st["disruptionsAllowed"] <= 0:
                        raise APIError(
                            429,
                            "TooManyRequests",
                            "Cannot evict pod as it would violate the pod's disruption budget.",
                            {
                                "causes": [
                                    {
                                        "reason": "DisruptionBudget",
                                        "message": f"The disruption budget {pdb['metadata']['name']} needs "
                                        f"{st['desiredHealthy']} healthy pods and has {st['currentHealthy']} currently",
                                    }
                                ]
                            },
                        )
            self.delete(pod_rt, namespace, name, body.get("deleteOptions") or {})
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def bind(self, namespace: str, name: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was not a JSON object")
        pod_rt = self._type_for("", "pods")
        target = body.get("target") or {}
        if not target.get("name"):
            raise invalid("Binding", name, [_cause("FieldValueRequired", "target.name", "")])
        with self.lock:
            pod = self._stored(pod_rt, namespace, name)
            binding = ResourceType("", "v1", "pods/binding", "Binding", True)
            if pod["metadata"].get("deletionTimestamp"):
                raise conflict(binding, name, f"pod {name} is being deleted, cannot be assigned to a host")
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                raise conflict(binding, name, f'pod {name} is already assigned to node "{node}"')
            new = copy.deepcopy(pod)
            new.setdefault("spec", {})["nodeName"] = target["name"]
            conds = [
                c for c in (new.setdefault("status", {}).get("conditions") or []) if c.get("type") != "PodScheduled"
            ]
            conds.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": self.timestamp()})
            new["status"]["conditions"] = conds
            self._commit(pod_rt, "MODIFIED", new, pod)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # ----------------------------------------------------------------- watch

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_selector: str,
        field_selector: str,
        resource_version: str,
        timeout: float,
        should_stop: Callable[[], bool],
        bookmarks: bool = False,
        send_initial_events: bool | None = None,
    ) -> Iterator[tuple[str, Obj]]:
        """Yield (type, object) pairs. Raises Gone before yielding when resource_version is too old.

        With ``bookmarks`` a BOOKMARK carrying the current resourceVersion is sent when the watch times out; with
        ``send_initial_events`` (the watch-list protocol) the initial ADDED events are followed by a BOOKMARK
        annotated ``k8s.io/initial-events-end``.
        """
        labels, fields = self.parse_selectors(rt, label_selector, field_selector)
        deadline = time.monotonic() + timeout
        initial: list[Obj] = []
        with self.lock:
            if send_initial_events or (send_initial_events is None and resource_version in ("", "0")):
                cursor = self._rv
                initial = [self._out(rt, o) for _, o in sorted(self._bucket(rt).items())]
            else:
                try:
                    cursor = int(resource_version)
                except ValueError:
                    raise bad_request(f'invalid resource version: "{resource_version}"') from None
                if cursor < self._compacted_rv:
                    raise Gone(cursor, self._compacted_rv + 1)
        for obj in initial:
            if self.matches(rt, obj, namespace, labels, fields):
                yield "ADDED", obj
        if send_initial_events:
            yield "BOOKMARK", self._bookmark(rt, cursor, initial_events_end=True)
        while not should_stop() and not self.closed:
            batch: list[WatchEvent] = []
            with self.lock:
                if cursor < self._compacted_rv:
                    raise Gone(cursor, self._compacted_rv + 1)
                batch = [e for e in self._history if e.rv > cursor and e.storage == rt.storage]
                if self._history and self._history[-1].rv > cursor:
                    cursor = self._history[-1].rv
                if not batch:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        if bookmarks:
                            yield "BOOKMARK", self._bookmark(rt, cursor)
                        return
                    self.changed.wait(min(remaining, 0.5))
                    continue
                converted = [
                    (e.type, self._out(rt, e.obj), self._out(rt, e.old) if e.old is not None else None) for e in batch
                ]
            for type_, obj, old in converted:
                now_match = self.matches(rt, obj, namespace, labels, fields)
                old_match = old is not None and type_ != "ADDED" and self.matches(rt, old, namespace, labels, fields)
                if type_ == "MODIFIED":
                    if now_match and not old_match:
                        yield "ADDED", obj
                    elif old_match and not now_match:
                        yield "DELETED", obj
                    elif now_match:
                        yield "MODIFIED", obj
                elif now_match:
                    yield type_, obj
            if time.monotonic() >= deadline:
                if bookmarks:
                    yield "BOOKMARK", self._bookmark(rt, cursor)
                return

    def _bookmark(self, rt: ResourceType, rv: int, initial_events_end: bool = False) -> Obj:
        meta: Obj = {"resourceVersion": str(rv)}
        if initial_events_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.changed.notify_all()
