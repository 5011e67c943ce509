"""Pure translation: a Kubernetes object plus the compact state known for it -> agent events (PROTOCOL.md).

Nothing here does I/O or reads the clock: the caller passes the observation time (``now``) and, for periodic
resyncs, the resync round. Per-object state is a small tuple, because the agent keeps one per pod and node.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

__all__ = [
    "FAMILY",
    "RESOURCES",
    "Event",
    "NodeClaimState",
    "NodeState",
    "PodState",
    "Reason",
    "Resource",
    "VersionState",
    "delete_ec2nodeclass",
    "delete_node",
    "delete_nodeclaim",
    "delete_nodepool",
    "delete_pod",
    "event_id",
    "pod_spec",
    "pod_unschedulable",
    "translate_ec2nodeclass",
    "translate_node",
    "translate_nodeclaim",
    "translate_nodepool",
    "translate_pod",
]

Obj = dict[str, Any]
Reason = Literal["watch", "relist", "resync"]

#: event kind -> the object family it is about (events about one object coalesce in the buffer)
FAMILY: dict[str, str] = {
    "PodUnschedulable": "Pod",
    "PodBound": "Pod",
    "PodDeleted": "Pod",
    "NodeReady": "Node",
    "NodeNotReady": "Node",
    "NodeDeleting": "Node",
    "NodeDeleted": "Node",
    "NodePoolChanged": "NodePool",
    "NodePoolDeleted": "NodePool",
    "EC2NodeClassChanged": "EC2NodeClass",
    "EC2NodeClassDeleted": "EC2NodeClass",
    "NodeClaimChanged": "NodeClaim",
    "NodeClaimDeleting": "NodeClaim",
    "NodeClaimDeleted": "NodeClaim",
}

NODEPOOL_LABEL = "karpenter.sh/nodepool"
_SPEC_FIELDS = (
    "overhead",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "priorityClassName",
    "preemptionPolicy",
    "runtimeClassName",
    "hostNetwork",
)


def event_id(kind: str, uid: str, resource_version: str, round_: str = "") -> str:
    """32 hex characters from (kind, uid, resourceVersion) and, for resync events, the resync round."""
    return hashlib.sha256(f"{kind}\n{uid}\n{resource_version}\n{round_}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    id: str
    reason: Reason
    time: str
    object: Obj

    @property
    def key(self) -> tuple[str, str]:
        """The object this event is about: a newer unsent event for the same key replaces this one."""
        return FAMILY[self.kind], str(self.object["uid"])

    def to_dict(self) -> Obj:
        return {"id": self.id, "kind": self.kind, "time": self.time, "reason": self.reason, "object": self.object}

    def encode(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False).encode()


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _rv(obj: Obj) -> str:
    return str(_meta(obj).get("resourceVersion") or "")


def _labels(obj: Obj) -> dict[str, str]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, dict) else {}


def _status(obj: Obj) -> Obj:
    status = obj.get("status")
    return status if isinstance(status, dict) else {}


def _spec(obj: Obj) -> Obj:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _conditions(obj: Obj) -> list[Obj]:
    conds = _status(obj).get("conditions")
    return [c for c in conds if isinstance(c, dict)] if isinstance(conds, list) else []


def _ref(obj: Obj, namespaced: bool) -> Obj:
    meta = _meta(obj)
    ref: Obj = {}
    if namespaced:
        ref["namespace"] = meta.get("namespace") or "default"
    ref["name"] = meta.get("name") or ""
    ref["uid"] = meta.get("uid") or ""
    if meta.get("resourceVersion"):
        ref["resourceVersion"] = str(meta["resourceVersion"])
    return ref


def _event(kind: str, obj: Obj, reason: Reason, now: str, rv: str, round_: str) -> Event:
    return Event(kind, event_id(kind, str(obj["uid"]), rv, round_ if reason == "resync" else ""), reason, now, obj)


# --------------------------------------------------------------------------------------------- pods


class PodState(NamedTuple):
    namespace: str
    name: str
    unschedulable: bool
    node_name: str  # "" while unbound


def pod_unschedulable(pod: Obj) -> bool:
    """Karpenter's rule: unbound, not terminating, not terminal, not being placed by preemption
    (``status.nominatedNodeName``), PodScheduled=False/Unschedulable, not owned by a DaemonSet or a Node (mirror)."""
    if _spec(pod).get("nodeName") or _meta(pod).get("deletionTimestamp"):
        return False
    if _status(pod).get("nominatedNodeName"):
        return False
    if _status(pod).get("phase") in ("Succeeded", "Failed"):
        return False
    if not any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in _conditions(pod)
    ):
        return False
    owners = _meta(pod).get("ownerReferences") or []
    return not any(isinstance(o, dict) and o.get("kind") in ("DaemonSet", "Node") for o in owners)


def _owner(pod: Obj) -> Obj | None:
    owners = [o for o in _meta(pod).get("ownerReferences") or [] if isinstance(o, dict)]
    for o in owners:
        if o.get("controller"):
            return o
    return owners[0] if owners else None


def pod_spec(pod: Obj) -> Obj:
    """What the solver reads from a pod (PROTOCOL.md, ``PodUnschedulable.object.spec``)."""
    spec = _spec(pod)
    out: Obj = {
        "containers": [
            {"name": c.get("name", ""), "resources": c.get("resources") or {}}
            for c in spec.get("containers") or []
            if isinstance(c, dict)
        ]
    }
    init = []
    for c in spec.get("initContainers") or []:
        if isinstance(c, dict):
            item: Obj = {"name": c.get("name", ""), "resources": c.get("resources") or {}}
            if c.get("restartPolicy"):
                item["restartPolicy"] = c["restartPolicy"]
            init.append(item)
    if init:
        out["initContainers"] = init
    for field in _SPEC_FIELDS:
        if spec.get(field) is not None:
            out[field] = spec[field]
    volumes = []
    for v in spec.get("volumes") or []:
        if isinstance(v, dict) and ("persistentVolumeClaim" in v or "ephemeral" in v):
            vol: Obj = {"name": v.get("name", "")}
            for field in ("persistentVolumeClaim", "ephemeral"):
                if field in v:
                    vol[field] = v[field]
            volumes.append(vol)
    if volumes:
        out["volumes"] = volumes
    return out


def _pod_unschedulable_object(pod: Obj) -> Obj:
    spec = _spec(pod)
    owner = _owner(pod)
    message = next(
        (str(c.get("message") or "") for c in _conditions(pod) if c.get("type") == "PodScheduled"),
        "",
    )
    return {
        **_ref(pod, True),
        "labels": _labels(pod),
        "ownerKind": owner.get("kind") if owner else None,
        "ownerName": owner.get("name") if owner else None,
        "priority": spec.get("priority"),
        "priorityClassName": spec.get("priorityClassName"),
        "schedulerName": spec.get("schedulerName"),
        "message": message,
        "spec": pod_spec(pod),
    }


def translate_pod(
    pod: Obj, prev: PodState | None, reason: Reason, now: str, round_: str = ""
) -> tuple[PodState | None, list[Event]]:
    """Events: PodUnschedulable on the transition (and on every resync), PodBound when spec.nodeName became set.

    A LIST (start, 410, overflow) does not announce pods it finds already bound: only a pod known unbound or
    seen unbound-then-bound by the watch produces PodBound. State is kept only for pods that are unschedulable
    or bound (None means "neither").
    """
    meta = _meta(pod)
    unschedulable = pod_unschedulable(pod)
    node_name = str(_spec(pod).get("nodeName") or "")
    rv = _rv(pod)
    events: list[Event] = []
    was_unschedulable = prev.unschedulable if prev else False
    if unschedulable and (not was_unschedulable or reason == "resync"):
        events.append(_event("PodUnschedulable", _pod_unschedulable_object(pod), reason, now, rv, round_))
    if node_name and not (prev.node_name if prev else "") and (prev is not None or reason == "watch"):
        events.append(_event("PodBound", {**_ref(pod, True), "nodeName": node_name}, reason, now, rv, round_))
    if not unschedulable and not node_name:
        return None, events
    state = PodState(
        sys.intern(str(meta.get("namespace") or "default")), str(meta.get("name") or ""), unschedulable, node_name
    )
    return state, events


def delete_pod(
    uid: str, prev: PodState | None, obj: Obj | None, reason: Reason, now: str, rv: str, round_: str = ""
) -> list[Event]:
    """PodDeleted for a pod that was bound to a node."""
    node_name = str(_spec(obj).get("nodeName") or "") if obj else ""
    node_name = node_name or (prev.node_name if prev else "")
    if not node_name:
        return []
    if obj is not None:
        ref = _ref(obj, True)
    elif prev is not None:
        ref = {"namespace": prev.namespace, "name": prev.name, "uid": uid}
    else:
        return []
    return [_event("PodDeleted", {**ref, "nodeName": node_name}, reason, now, rv, round_)]


# -------------------------------------------------------------------------------------------- nodes


class NodeState(NamedTuple):
    name: str
    ready: str  # True / False / Unknown
    deleting: bool
    provider_id: str
    node_pool: str


def _node_ready(node: Obj) -> str:
    for c in _conditions(node):
        if c.get("type") == "Ready":
            status = str(c.get("status") or "Unknown")
            return status if status in ("True", "False") else "Unknown"
    return "Unknown"


def translate_node(
    node: Obj, prev: NodeState | None, reason: Reason, now: str, round_: str = ""
) -> tuple[NodeState, list[Event]]:
    """NodeReady/NodeNotReady when the node appears or its Ready condition changes; NodeDeleting once."""
    meta = _meta(node)
    state = NodeState(
        str(meta.get("name") or ""),
        _node_ready(node),
        bool(meta.get("deletionTimestamp")),
        str(_spec(node).get("providerID") or ""),
        str(_labels(node).get(NODEPOOL_LABEL) or ""),
    )
    rv = _rv(node)
    base = {**_ref(node, False), "providerID": state.provider_id or None, "nodePool": state.node_pool or None}
    events: list[Event] = []
    if prev is None or prev.ready != state.ready:
        obj = {**base, "ready": state.ready, "unschedulable": bool(_spec(node).get("unschedulable"))}
        events.append(_event("NodeReady" if state.ready == "True" else "NodeNotReady", obj, reason, now, rv, round_))
    if state.deleting and not (prev is not None and prev.deleting):
        events.append(_event("NodeDeleting", base, reason, now, rv, round_))
    return state, events


def delete_node(
    uid: str, prev: NodeState | None, obj: Obj | None, reason: Reason, now: str, rv: str, round_: str = ""
) -> list[Event]:
    if obj is not None:
        ref = _ref(obj, False)
        provider_id = str(_spec(obj).get("providerID") or "")
        node_pool = str(_labels(obj).get(NODEPOOL_LABEL) or "")
    elif prev is not None:
        ref = {"name": prev.name, "uid": uid}
        provider_id, node_pool = prev.provider_id, prev.node_pool
    else:
        return []
    body = {**ref, "providerID": provider_id or None, "nodePool": node_pool or None}
    return [_event("NodeDeleted", body, reason, now, rv, round_)]


# ----------------------------------------------------------------------- NodePools, EC2NodeClasses


class VersionState(NamedTuple):
    name: str
    generation: int


def _generation(obj: Obj) -> int:
    try:
        return int(_meta(obj).get("generation") or 0)
    except (TypeError, ValueError):
        return 0


def _versioned(prefix: str) -> tuple[Callable[..., tuple[VersionState, list[Event]]], Callable[..., list[Event]]]:
    changed, deleted = f"{prefix}Changed", f"{prefix}Deleted"

    def translate(
        obj: Obj, prev: VersionState | None, reason: Reason, now: str, round_: str = ""
    ) -> tuple[VersionState, list[Event]]:
        """Changed when created or metadata.generation changed (spec writes; status writes keep it)."""
        state = VersionState(str(_meta(obj).get("name") or ""), _generation(obj))
        if prev is not None and prev.generation == state.generation:
            return state, []
        body = {**_ref(obj, False), "generation": state.generation}
        return state, [_event(changed, body, reason, now, _rv(obj), round_)]

    def delete(
        uid: str, prev: VersionState | None, obj: Obj | None, reason: Reason, now: str, rv: str, round_: str = ""
    ) -> list[Event]:
        if obj is not None:
            body = {**_ref(obj, False), "generation": _generation(obj)}
        elif prev is not None:
            body = {"name": prev.name, "uid": uid, "generation": prev.generation}
        else:
            return []
        return [_event(deleted, body, reason, now, rv, round_)]

    return translate, delete


translate_nodepool, delete_nodepool = _versioned("NodePool")
translate_ec2nodeclass, delete_ec2nodeclass = _versioned("EC2NodeClass")


# --------------------------------------------------------------------------------------- NodeClaims


class NodeClaimState(NamedTuple):
    name: str
    node_pool: str
    provider_id: str
    node_name: str
    conditions: tuple[tuple[str, str], ...]
    deleting: bool


def _nodeclaim_state(obj: Obj) -> NodeClaimState:
    status = _status(obj)
    conditions = tuple(sorted((str(c.get("type") or ""), str(c.get("status") or "")) for c in _conditions(obj)))
    return NodeClaimState(
        str(_meta(obj).get("name") or ""),
        str(_labels(obj).get(NODEPOOL_LABEL) or ""),
        str(status.get("providerID") or ""),
        str(status.get("nodeName") or ""),
        conditions,
        bool(_meta(obj).get("deletionTimestamp")),
    )


def _nodeclaim_fields(state: NodeClaimState) -> Obj:
    return {
        "nodePool": state.node_pool or None,
        "providerID": state.provider_id or None,
        "nodeName": state.node_name or None,
    }


def translate_nodeclaim(
    obj: Obj, prev: NodeClaimState | None, reason: Reason, now: str, round_: str = ""
) -> tuple[NodeClaimState, list[Event]]:
    """NodeClaimChanged when created or a compact field (nodePool, providerID, nodeName, conditions) changed;
    NodeClaimDeleting when deletionTimestamp became set."""
    state = _nodeclaim_state(obj)
    rv = _rv(obj)
    events: list[Event] = []
    if prev is None or prev[:5] != state[:5]:
        body = {**_ref(obj, False), **_nodeclaim_fields(state), "conditions": dict(state.conditions)}
        events.append(_event("NodeClaimChanged", body, reason, now, rv, round_))
    if state.deleting and not (prev is not None and prev.deleting):
        body = {**_ref(obj, False), **_nodeclaim_fields(state)}
        events.append(_event("NodeClaimDeleting", body, reason, now, rv, round_))
    return state, events


def delete_nodeclaim(
    uid: str, prev: NodeClaimState | None, obj: Obj | None, reason: Reason, now: str, rv: str, round_: str = ""
) -> list[Event]:
    if obj is not None:
        ref, state = _ref(obj, False), _nodeclaim_state(obj)
    elif prev is not None:
        ref, state = {"name": prev.name, "uid": uid}, prev
    else:
        return []
    return [_event("NodeClaimDeleted", {**ref, **_nodeclaim_fields(state)}, reason, now, rv, round_)]


# ------------------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Resource:
    """A watched collection and how its objects translate."""

    name: str
    path: str
    translate: Callable[..., tuple[Any, list[Event]]]
    delete: Callable[..., list[Event]]


RESOURCES: tuple[Resource, ...] = (
    Resource("pods", "/api/v1/pods", translate_pod, delete_pod),
    Resource("nodes", "/api/v1/nodes", translate_node, delete_node),
    Resource("nodepools", "/apis/karpenter.sh/v1/nodepools", translate_nodepool, delete_nodepool),
    Resource("nodeclaims", "/apis/karpenter.sh/v1/nodeclaims", translate_nodeclaim, delete_nodeclaim),
    Resource(
        "ec2nodeclasses", "/apis/karpenter.k8s.aws/v1/ec2nodeclasses", translate_ec2nodeclass, delete_ec2nodeclass
    ),
)
