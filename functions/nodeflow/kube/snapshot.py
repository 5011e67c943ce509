"""One consistent-enough read of the cluster: a bounded number of LISTs, parsed straight into our models.

``take_snapshot`` makes ONE LIST per kind (13 kinds; more only when ``page_size`` is set and
a kind has more objects than a page), never one GET per object. Each LIST body is parsed
from raw bytes by pydantic-core into ``nodeflow.api`` models (``Pod``, ``NodePool``, ...):
the kubernetes client's own model deserialization is never used (it is several times
slower). Pods, by far the largest LIST, are parsed by ``parse_pods``: each distinct spec,
status and metadata part validated once, the pods assembled from those parts (the same
models, several times faster on pods of a few ReplicaSets). An object that does not
validate does not sink the snapshot: it is left out and reported in ``Snapshot.invalid``
with ``"field.path: rule"`` lines.

NodeflowPolicies (nodeflow.io) are listed too: ``Snapshot.state`` hands the valid ones to the plan, and each
invalid one as its fail-safe stand-in (``nodeflow.governance.invalid``: provisioning paused in what it governs),
never as nothing. A policy LIST answered 404 (the CRD is not installed) or 403 (an older controller-rbac.yaml)
means no policies (``missing_kinds`` names it, the provisioner logs it).

Must not touch: what any decision makes of the objects; writes of any kind.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import marshal
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import from_json

from nodeflow.api.core import (
    Container,
    DaemonSet,
    Namespace,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodCondition,
    PodDisruptionBudget,
    PodSpec,
    PodStatus,
    StorageClass,
    Volume,
)
from nodeflow.api.errors import format_validation_error
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.api.karpenter_overlay import NodeOverlay
from nodeflow.api.meta import ListMeta, ObjectMeta
from nodeflow.api.nodeflow_policy import POLICY_KIND, NodeflowPolicy
from nodeflow.cluster import ClusterState
from nodeflow.governance.invalid import stand_in
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient, Resource
from nodeflow.kube.errors import Forbidden, NotFound, retry_read

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "ANNOTATION_MIRROR",
    "KINDS",
    "InvalidObject",
    "Snapshot",
    "is_pending",
    "parse_pods",
    "take_snapshot",
]

ANNOTATION_MIRROR = "kubernetes.io/config.mirror"
_TERMINAL = frozenset({"Succeeded", "Failed"})

M = TypeVar("M", bound=BaseModel)
BM = TypeVar("BM", bound=BaseModel)
_ABSENT: Any = object()


class _List(BaseModel, Generic[M]):
    """A ``*List`` response: list metadata and items, everything else ignored."""

    model_config = ConfigDict(extra="ignore")

    metadata: ListMeta = ListMeta()
    items: list[M] | None = None


@dataclass(frozen=True, slots=True)
class _Kind:
    field: str
    resource: Resource
    model: type[BaseModel]


KINDS: tuple[_Kind, ...] = (
    _Kind("node_pools", kc.NODE_POOLS, NodePool),
    _Kind("node_classes", kc.EC2_NODE_CLASSES, EC2NodeClass),
    _Kind("node_claims", kc.NODE_CLAIMS, NodeClaim),
    _Kind("pods", kc.PODS, Pod),
    _Kind("nodes", kc.NODES, Node),
    _Kind("daemon_sets", kc.DAEMON_SETS, DaemonSet),
    _Kind("pvcs", kc.PVCS, PersistentVolumeClaim),
    _Kind("pvs", kc.PVS, PersistentVolume),
    _Kind("storage_classes", kc.STORAGE_CLASSES, StorageClass),
    _Kind("namespaces", kc.NAMESPACES, Namespace),
    _Kind("pdbs", kc.PDBS, PodDisruptionBudget),
    _Kind("node_overlays", kc.NODE_OVERLAYS, NodeOverlay),
    _Kind("policies", kc.NODEFLOW_POLICIES, NodeflowPolicy),
)
"""What a snapshot lists: one LIST each."""

_LIST_MODELS: dict[type[BaseModel], type[_List[Any]]] = {k.model: _List[k.model] for k in KINDS}  # type: ignore[name-defined]


@dataclass(frozen=True, slots=True)
class InvalidObject:
    """An object the API server holds that our models reject (e.g. a NodePool with a bad field)."""

    kind: str
    name: str
    namespace: str | None
    errors: tuple[str, ...]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster as listed: our models, the pending pods, and what could not be read."""

    node_pools: tuple[NodePool, ...] = ()
    node_classes: tuple[EC2NodeClass, ...] = ()
    node_claims: tuple[NodeClaim, ...] = ()
    pods: tuple[Pod, ...] = ()
    nodes: tuple[Node, ...] = ()
    daemon_sets: tuple[DaemonSet, ...] = ()
    pvcs: tuple[PersistentVolumeClaim, ...] = ()
    pvs: tuple[PersistentVolume, ...] = ()
    storage_classes: tuple[StorageClass, ...] = ()
    namespaces: tuple[Namespace, ...] = ()
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    node_overlays: tuple[NodeOverlay, ...] = ()
    policies: tuple[NodeflowPolicy, ...] = ()
    """The valid NodeflowPolicies (the invalid ones are in ``invalid``; ``state`` adds their stand-ins)."""
    pending: tuple[Pod, ...] = ()
    """Pods the scheduler gave up on (see ``is_pending``), in list order."""
    invalid: tuple[InvalidObject, ...] = ()
    missing_kinds: tuple[str, ...] = ()
    """Kinds whose LIST answered 404 (their CRD is not installed): listed as empty."""
    resource_versions: Mapping[str, str] = field(default_factory=dict)
    """The list resourceVersion per kind (usable to start watches)."""
    list_calls: int = 0

    @property
    def state(self) -> ClusterState:
        """Everything, as ``nodeflow.plan`` wants it."""
        return ClusterState(
            node_pools=self.node_pools,
            node_classes=self.node_classes,
            node_claims=self.node_claims,
            pods=self.pods,
            daemon_sets=self.daemon_sets,
            nodes=self.nodes,
            pvcs=self.pvcs,
            pvs=self.pvs,
            storage_classes=self.storage_classes,
            namespaces=self.namespaces,
            pdbs=self.pdbs,
            node_overlays=self.node_overlays,
            policies=self.effective_policies,
        )

    @property
    def effective_policies(self) -> tuple[NodeflowPolicy, ...]:
        """The valid policies, and for each invalid one its fail-safe stand-in (``nodeflow.governance.invalid``)."""
        stand_ins = (stand_in(o.raw) for o in self.invalid_of(POLICY_KIND))
        return (*self.policies, *(p for p in stand_ins if p is not None))

    def provisioning_state(self) -> ClusterState:
        """``state`` with only bound pods and ``pending`` pods (unbound pods the scheduler has not
        yet tried, and pods that will not be scheduled, are left out)."""
        keep = [p for p in self.pods if p.spec.node_name]
        return dataclasses.replace(self.state, pods=(*keep, *self.pending))

    def invalid_of(self, kind: str) -> tuple[InvalidObject, ...]:
        return tuple(o for o in self.invalid if o.kind == kind)


def is_pending(pod: Pod) -> bool:
    """Karpenter's "provisionable" pod: the scheduler marked it Unschedulable and nothing else claims it.

    PodScheduled=False with reason Unschedulable; no spec.nodeName; not preempting
    (status.nominatedNodeName); not terminating or finished; not owned by a DaemonSet
    (DaemonSet pods are accounted as daemon overhead); not a mirror (static) pod.
    """
    if pod.spec.node_name or pod.metadata.deletion_timestamp is not None:
        return False
    status = pod.status
    if status.phase in _TERMINAL or status.nominated_node_name:
        return False
    scheduled = status.condition("PodScheduled")
    if scheduled is None or scheduled.status != "False" or scheduled.reason != "Unschedulable":
        return False
    if ANNOTATION_MIRROR in (pod.metadata.annotations or {}):
        return False
    return not any(o.kind in ("DaemonSet", "Node") for o in pod.metadata.owner_references or ())


def _name_of(item: Any) -> tuple[str, str | None]:
    meta = item.get("metadata") if isinstance(item, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    return str(meta.get("name") or ""), meta.get("namespace")


# --- pods: the slim parse ------------------------------------------------------------------------
#
# A LIST of 20,000 pods is ~23 MB of JSON; validating every pod with pydantic takes ~1 s, yet the pods of one
# ReplicaSet differ only in a few metadata fields (name, uid, resourceVersion, creationTimestamp, ...) and in
# fields our models ignore. ``_PodParser`` validates each distinct part once (spec, status, metadata without its
# per-pod fields, volume), keyed by the ``marshal`` bytes (exact types and values: 1, 1.0, True and "1" differ) of
# the input keys the model reads, and assembles the very same ``Pod`` objects the full validation gives (equal,
# with the same fields set and extras) from those parts. Anything unusual (a non-dict, a snake_case alias of a
# per-pod field, a non-string name, ...) and every object that does not validate takes the full
# ``Pod.model_validate`` path, so errors are reported exactly as before. Pods parsed together share their
# validated parts (as ``expand_workload``'s pods do): the models are frozen and nothing mutates their dicts.


def _input_keys(model: type[BaseModel]) -> frozenset[str]:
    """Every input key ``model`` reads: its field names and their aliases (``populate_by_name``)."""
    return frozenset(key for name, info in model.model_fields.items() for key in (name, info.alias or name))


def _field_names(model: type[BaseModel]) -> dict[str, str]:
    """Input key (alias or name) -> field name."""
    out = {name: name for name in model.model_fields}
    out.update({info.alias: name for name, info in model.model_fields.items() if info.alias})
    return out


_POD_FIELDS = _field_names(Pod)
_SPEC_KEYS = _input_keys(PodSpec)
_CONTAINER_LISTS = frozenset({"containers", "initContainers", "init_containers"})
_CONTAINER_KEYS = _input_keys(Container)
_VOLUME_KEYS = _input_keys(Volume)
_STATUS_KEYS = _input_keys(PodStatus)
_CONDITION_KEYS = _input_keys(PodCondition)
_META_KEYS = _input_keys(ObjectMeta)
# ObjectMeta string fields that differ in every pod: not part of the shared metadata's key.
_META_EACH = {"name": "name", "uid": "uid", "resourceVersion": "resource_version", "generateName": "generate_name"}
# Their snake_case spellings (and creationTimestamp's): accepted by the model, but unusual: full path.
_META_EACH_SNAKE = frozenset({"resource_version", "generate_name", "creation_timestamp"})
_META_NOT_SHARED = frozenset({*_META_EACH, "creationTimestamp"})

# The whole-raw caches (raw spec / status -> model) pay off only when raw parts repeat; on pods whose raw spec
# always differs (a real API server's per-pod kube-api-access-xxxxx volume and mounts) they are turned off after
# this many misses, if they missed more than they hit.
_RAW_CACHE_TRIAL = 256
_NAME_ONLY = frozenset({"name"})

_new = object.__new__
_setattr = object.__setattr__


class _Unusual(Exception):
    """An input the slim parse does not handle: the full validation decides."""


def _copy(model: BM, fields_set: set[str], extra: dict[str, Any] | None, changes: Mapping[str, Any]) -> BM:
    """``model`` with ``changes`` (already validated values), without validation."""
    clone: BM = _new(model.__class__)
    values = model.__dict__.copy()
    values.update(changes)
    _setattr(clone, "__dict__", values)
    _setattr(clone, "__pydantic_fields_set__", fields_set)
    _setattr(clone, "__pydantic_extra__", extra)
    _setattr(clone, "__pydantic_private__", None)
    return clone


def _project(items: Any, keys: frozenset[str]) -> Any:
    """A list of objects of an ``extra="ignore"`` model, each reduced to the keys the model reads."""
    if type(items) is not list:
        return items
    return [{k: v for k, v in item.items() if k in keys} if type(item) is dict else item for item in items]


class _PodParser:
    """Raw pod dicts (parsed JSON) -> ``Pod`` objects equal to ``Pod.model_validate``'s, cheaply.

    Two levels of caches: the whole raw spec (status) -> its model, for pods whose raw spec (status) is the same
    as an earlier pod's; then the raw spec (status) reduced to the keys the models read (plus, for the spec,
    ``nodeName`` and ``volumes`` applied per pod) -> the shared part validated once.
    """

    def __init__(self) -> None:
        self._raw_specs: dict[bytes, PodSpec] = {}
        self._specs: dict[bytes, PodSpec] = {}
        self._raw_statuses: dict[bytes, PodStatus] = {}
        self._statuses: dict[bytes, PodStatus] = {}
        self._metas: dict[bytes, ObjectMeta] = {}
        self._volumes: dict[bytes, Volume] = {}
        self._times: dict[str, datetime | None] = {}
        self._pod = Pod()
        self._volume = Volume(name="volume")
        self._raw_hits = {"spec": 0, "status": 0}
        self._raw_misses = {"spec": 0, "status": 0}
        self.slim = 0  # pods assembled from shared parts (the rest took the full path)

    def pod(self, raw: Any) -> Pod:
        """``Pod.model_validate(raw)``: the same result, or the same ``ValidationError``."""
        try:
            pod = self._slim(raw)
        except (_Unusual, ValidationError, ValueError, TypeError):
            return Pod.model_validate(raw)
        self.slim += 1
        return pod

    def _slim(self, raw: Any) -> Pod:
        if type(raw) is not dict or "api_version" in raw:
            raise _Unusual
        if raw.get("apiVersion", "v1") != "v1" or raw.get("kind", "Pod") != "Pod":
            raise _Unusual
        meta, spec, status = raw.get("metadata", _ABSENT), raw.get("spec", _ABSENT), raw.get("status", _ABSENT)
        changes = {
            "metadata": ObjectMeta() if meta is _ABSENT else self._meta(meta),
            "spec": PodSpec() if spec is _ABSENT else self._spec(spec),
            "status": PodStatus() if status is _ABSENT else self._status(status),
        }
        return _copy(self._pod, {_POD_FIELDS[k] for k in raw if k in _POD_FIELDS}, None, changes)

    def _meta(self, meta: Any) -> ObjectMeta:
        if type(meta) is not dict or not _META_EACH_SNAKE.isdisjoint(meta):
            raise _Unusual
        each: dict[str, Any] = {}
        for key, name in _META_EACH.items():
            value = meta.get(key, _ABSENT)
            if value is not _ABSENT:
                if value is not None and type(value) is not str:
                    raise _Unusual
                each[name] = value
        stamp = meta.get("creationTimestamp", _ABSENT)
        if stamp is not _ABSENT:
            each["creation_timestamp"] = self._time(stamp)
        shared = {k: v for k, v in meta.items() if k not in _META_NOT_SHARED}
        extra: dict[str, Any] = {}
        if not shared.keys() <= _META_KEYS:  # unknown keys (managedFields, ...): kept as they are (extra="allow")
            extra = {k: shared.pop(k) for k in shared.keys() - _META_KEYS}
            extra = {k: meta[k] for k in meta if k in extra}  # in input order, like the model
        cache_key = marshal.dumps(shared, 2)
        base = self._metas.get(cache_key)
        if base is None:
            base = self._metas[cache_key] = ObjectMeta.model_validate(shared)
        fields_set = base.__pydantic_fields_set__ | each.keys()
        if extra:
            fields_set |= extra.keys()
        return _copy(base, fields_set, extra, each)

    def _time(self, value: Any) -> datetime | None:
        if value is None:
            return None
        if type(value) is not str:
            raise _Unusual
        if value in self._times:
            return self._times[value]
        parsed = self._times[value] = ObjectMeta.model_validate({"creationTimestamp": value}).creation_timestamp
        return parsed

    def _spec(self, spec: Any) -> PodSpec:
        if type(spec) is not dict:
            raise _Unusual
        if not self._raw_cache_pays("spec"):
            return self._spec_parts(spec)
        raw_key = marshal.dumps(spec, 2)
        parsed = self._raw_specs.get(raw_key)
        if parsed is None:
            self._raw_misses["spec"] += 1
            parsed = self._raw_specs[raw_key] = self._spec_parts(spec)
        else:
            self._raw_hits["spec"] += 1
        return parsed

    def _raw_cache_pays(self, part: str) -> bool:
        misses = self._raw_misses[part]
        return misses < _RAW_CACHE_TRIAL or self._raw_hits[part] >= misses

    def _spec_parts(self, spec: dict[str, Any]) -> PodSpec:
        shared: dict[str, Any] = {}
        each: dict[str, Any] = {}
        for key, value in spec.items():
            if key == "nodeName":
                if value is not None and type(value) is not str:
                    raise _Unusual
                each["node_name"] = value
            elif key == "volumes":
                each["volumes"] = self._volume_list(value)
            elif key in _CONTAINER_LISTS:
                shared[key] = _project(value, _CONTAINER_KEYS)
            elif key in _SPEC_KEYS:
                if key == "node_name":
                    raise _Unusual
                shared[key] = value
        cache_key = marshal.dumps(shared, 2)
        base = self._specs.get(cache_key)
        if base is None:
            base = self._specs[cache_key] = PodSpec.model_validate(shared)
        if not each:
            return base
        return _copy(base, base.__pydantic_fields_set__ | each.keys(), None, each)

    def _volume_list(self, volumes: Any) -> tuple[Volume, ...]:
        if type(volumes) is not list:
            raise _Unusual
        out = []
        for volume in volumes:
            if type(volume) is not dict:
                raise _Unusual
            shared = {k: v for k, v in volume.items() if k in _VOLUME_KEYS}
            if shared.keys() == _NAME_ONLY and type(shared["name"]) is str and shared["name"]:
                # a volume of another source (projected, configMap, emptyDir, ...): only its name is read
                out.append(_copy(self._volume, self._volume.__pydantic_fields_set__, None, shared))
                continue
            cache_key = marshal.dumps(shared, 2)
            parsed = self._volumes.get(cache_key)
            if parsed is None:
                parsed = self._volumes[cache_key] = Volume.model_validate(shared)
            out.append(parsed)
        return tuple(out)

    def _status(self, status: Any) -> PodStatus:
        if type(status) is not dict:
            raise _Unusual
        raw_key = b""
        if self._raw_cache_pays("status"):
            raw_key = marshal.dumps(status, 2)
            parsed = self._raw_statuses.get(raw_key)
            if parsed is not None:
                self._raw_hits["status"] += 1
                return parsed
            self._raw_misses["status"] += 1
        shared = {
            key: _project(value, _CONDITION_KEYS) if key == "conditions" else value
            for key, value in status.items()
            if key in _STATUS_KEYS
        }
        cache_key = marshal.dumps(shared, 2)
        parsed = self._statuses.get(cache_key)
        if parsed is None:
            parsed = self._statuses[cache_key] = PodStatus.model_validate(shared)
        if raw_key:
            self._raw_statuses[raw_key] = parsed
        return parsed


def parse_pods(items: Sequence[Any]) -> tuple[list[Pod], list[InvalidObject]]:
    """Raw pod dicts (a LIST's ``items``) -> (the pods, the invalid ones), exactly as validating each with
    ``Pod.model_validate`` would give, at a fraction of its cost when pods share their spec (see ``_PodParser``)."""
    parser = _PodParser()
    pods: list[Pod] = []
    invalid: list[InvalidObject] = []
    for raw in items:
        try:
            pods.append(parser.pod(raw))
        except ValidationError as exc:
            name, namespace = _name_of(raw)
            invalid.append(InvalidObject("Pod", name, namespace, tuple(format_validation_error(exc)), raw))
    return pods, invalid


def _parse_page(
    kind: _Kind, data: bytes, invalid: list[InvalidObject]
) -> tuple[list[BaseModel], str | None, str | None]:
    """(items, continue token, resourceVersion) of one LIST page; invalid items go to ``invalid``."""
    if kind.model is Pod:
        doc = from_json(data)  # the JSON parser model_validate_json uses
        raw_items = doc.get("items") if type(doc) is dict else _ABSENT
        if raw_items is None or type(raw_items) is list:
            meta = ListMeta.model_validate(doc.get("metadata") or {})
            pods, bad = parse_pods(raw_items or ())
            invalid.extend(bad)
            return list(pods), meta.continue_, meta.resource_version
    try:
        page = _LIST_MODELS[kind.model].model_validate_json(data)
        return list(page.items or ()), page.metadata.continue_, page.metadata.resource_version
    except ValidationError:
        pass  # some item is invalid: validate one by one to keep the others
    doc = json.loads(data)
    meta = ListMeta.model_validate(doc.get("metadata") or {})
    items: list[BaseModel] = []
    for raw in doc.get("items") or ():
        try:
            items.append(kind.model.model_validate(raw))
        except ValidationError as exc:
            name, namespace = _name_of(raw)
            invalid.append(InvalidObject(kind.resource.kind, name, namespace, tuple(format_validation_error(exc)), raw))
    return items, meta.continue_, meta.resource_version


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing allocates ~100 container objects per pod and keeps them all: the cyclic GC would
    rescan the growing heap again and again (5,000 pods: 0.9 s instead of 0.13 s)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def take_snapshot(
    api_client: ApiClient | KubeClient,
    *,
    page_size: int | None = None,
    workers: int = 1,
    kinds: Sequence[str] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Snapshot:
    """LIST every kind once and return the parsed ``Snapshot``.

    ``page_size`` pages large lists (``limit``/``continue``; the default is one request per kind).
    ``workers`` > 1 lists kinds concurrently. ``kinds`` restricts the listing to some
    ``Snapshot`` field names (e.g. ``["node_pools", "nodes"]``). Reads are retried on
    ``Unavailable``/``TooManyRequests``; any other ``KubeError`` propagates.
    """
    client = KubeClient.of(api_client)
    wanted = [k for k in KINDS if kinds is None or k.field in kinds]
    retry_kwargs: dict[str, Any] = {"sleep": sleep} if sleep is not None else {}

    def list_kind(kind: _Kind) -> tuple[_Kind, list[BaseModel], list[InvalidObject], str, int, bool]:
        items: list[BaseModel] = []
        invalid: list[InvalidObject] = []
        token: str | None = None
        calls = 0
        version = ""
        while True:
            calls += 1
            try:
                data = retry_read(
                    partial(client.list_raw, kind.resource, limit=page_size, continue_token=token), **retry_kwargs
                )
            except NotFound:
                return kind, [], [], "", calls, True
            except Forbidden:
                # NodeOverlay (alpha) and NodeflowPolicy may not be granted by an older controller-rbac.yaml: none,
                # as when absent.
                if kind.resource not in (kc.NODE_OVERLAYS, kc.NODEFLOW_POLICIES):
                    raise
                return kind, [], [], "", calls, True
            page, token, rv = _parse_page(kind, data, invalid)
            items.extend(page)
            version = rv or version
            if not (page_size and token):
                return kind, items, invalid, version, calls, False

    with _gc_paused():
        if workers > 1 and len(wanted) > 1:
            with ThreadPoolExecutor(max_workers=min(workers, len(wanted))) as pool:
                results = list(pool.map(list_kind, wanted))
        else:
            results = [list_kind(k) for k in wanted]

    fields: dict[str, Any] = {}
    invalid_all: list[InvalidObject] = []
    missing: list[str] = []
    versions: dict[str, str] = {}
    calls_total = 0
    for kind, items, invalid, version, calls, absent in results:
        fields[kind.field] = tuple(items)
        invalid_all.extend(invalid)
        calls_total += calls
        if absent:
            missing.append(kind.resource.kind)
        elif version:
            versions[kind.resource.kind] = version
    pods: tuple[Pod, ...] = fields.get("pods", ())
    return Snapshot(
        **fields,
        pending=tuple(p for p in pods if is_pending(p)),
        invalid=tuple(invalid_all),
        missing_kinds=tuple(missing),
        resource_versions=versions,
        list_calls=calls_total,
    )
