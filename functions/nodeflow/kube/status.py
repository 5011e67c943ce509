"""NodePool status, written through the status subresource.

``status.resources``: as Karpenter's NodePool counter reports it, the summed capacity of the pool's
nodes (every resource, extended ones included) plus ``nodes`` (their count), with cpu, memory, pods,
ephemeral-storage and nodes always present ("0" when none). A node is a Node, a NodeClaim, or both
(matched by providerID); it belongs to the pool its labels name (the Node's when there is one). Its
capacity is the Node's ``status.capacity``; while the NodeClaim is not Initialized, the NodeClaim's
``status.capacity`` (a launched NodeClaim without a Node yet counts) fills what the Node reports as
zero or lacks. A Node or NodeClaim being deleted does not count. ``status.nodes``: the count.
Conditions (operatorpkg style, lastTransitionTime kept while
a condition's status does not change):

- ``ValidationSucceeded``: False with the ``"field.path: rule"`` lines of an invalid NodePool,
- ``NodeClassReady``: the referenced EC2NodeClass exists, is not being deleted (else False with Karpenter's
  ``NodeClassTerminating``) and its Ready condition is True,
- ``Ready``: both are True (root condition).

Must not touch: what a status should say (the steps decide); only how it is patched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from nodeflow.api import labels as wk
from nodeflow.api.core import Node, resource_milli
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim
from nodeflow.api.quantity import format_milli
from nodeflow.kube.client import NODE_CLAIMS, NODE_POOLS, NODES, KubeClient
from nodeflow.kube.errors import Conflict, KubeError, NotFound
from nodeflow.kube.reports import Reports

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from nodeflow.kube.snapshot import Snapshot

__all__ = [
    "CONDITION_NODECLASS_READY",
    "CONDITION_READY",
    "CONDITION_VALIDATION_SUCCEEDED",
    "NodePoolStatusChange",
    "node_class_ready",
    "node_pool_resources",
    "node_pool_status",
    "node_pool_status_changes",
    "recount_node_pool",
    "set_condition",
    "set_node_claim_conditions",
    "update_node_pool_statuses",
    "write_node_pool_status",
    "write_node_pool_status_change",
]

CONDITION_READY = "Ready"
CONDITION_VALIDATION_SUCCEEDED = "ValidationSucceeded"
CONDITION_NODECLASS_READY = "NodeClassReady"


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """``conditions`` with ``type_`` set, like meta.SetStatusCondition.

    The lastTransitionTime moves only when the status changes.
    """
    out = [dict(c) for c in conditions]
    new: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": _stamp(now),
    }
    if generation is not None:
        new["observedGeneration"] = generation
    for i, old in enumerate(out):
        if old.get("type") == type_:
            if old.get("status") == status and old.get("lastTransitionTime"):
                new["lastTransitionTime"] = old["lastTransitionTime"]
            out[i] = new
            return out
    out.append(new)
    return out


_BASE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage", "nodes")


def _counted_nodes(nodes: Iterable[Node], node_claims: Iterable[NodeClaim]) -> list[tuple[str, dict[str, int]]]:
    """(nodepool label, capacity in milli-units) of every node not being deleted, as Karpenter's cluster
    state sees it: Nodes and NodeClaims paired by providerID."""
    claims = list(node_claims)
    by_provider = {c.status.provider_id: c for c in claims if c.status and c.status.provider_id}
    paired: set[int] = set()
    out: list[tuple[str, dict[str, int]]] = []
    for node in nodes:
        claim = by_provider.get(node.spec.provider_id or "") if node.spec.provider_id else None
        if claim is not None:
            paired.add(id(claim))
        if node.metadata.deletion_timestamp or (claim is not None and claim.metadata.deletion_timestamp):
            continue
        capacity = node.capacity_milli()
        if claim is not None and not _initialized(claim):
            for key, milli in _claim_capacity(claim).items():
                if not capacity.get(key):
                    capacity[key] = milli
        out.append((node.labels.get(wk.LABEL_NODEPOOL, ""), capacity))
    for claim in claims:
        if id(claim) in paired or claim.metadata.deletion_timestamp:
            continue
        out.append(((claim.metadata.labels or {}).get(wk.LABEL_NODEPOOL, ""), _claim_capacity(claim)))
    return out


def _initialized(claim: NodeClaim) -> bool:
    condition = claim.status.condition("Initialized") if claim.status else None
    return condition is not None and condition.status == "True"


def _claim_capacity(claim: NodeClaim) -> dict[str, int]:
    return resource_milli(claim.status.capacity or {}) if claim.status else {}


def node_pool_resources(
    pool_name: str, nodes: Iterable[Node], node_claims: Iterable[NodeClaim] = ()
) -> tuple[dict[str, str], int]:
    """(summed capacity of the pool's nodes as quantities incl. ``nodes``, node count); see the module."""
    total: dict[str, int] = dict.fromkeys(_BASE_RESOURCES, 0)
    count = 0
    for pool, capacity in _counted_nodes(nodes, node_claims):
        if pool != pool_name:
            continue
        count += 1
        for key, milli in capacity.items():
            total[key] = total.get(key, 0) + milli
    total["nodes"] = count * 1000
    resources = {key: format_milli(milli, key if _binary(key) else "cpu") for key, milli in sorted(total.items())}
    return resources, count


def _binary(resource: str) -> bool:
    """Byte amounts (printed with Ki/Mi/Gi suffixes); counts such as pods or GPUs print as plain numbers."""
    return resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")


def node_class_ready(ref_name: str | None, node_class: EC2NodeClass | None) -> tuple[str, str, str]:
    """(status, reason, message) of NodeClassReady for a NodePool referencing ``ref_name``."""
    if not ref_name:
        return "False", "NodeClassNotFound", "spec.template.spec.nodeClassRef: no EC2NodeClass is referenced"
    if node_class is None:
        return "False", "NodeClassNotFound", f"EC2NodeClass {ref_name!r} not found"
    from nodeflow.plan import node_class_readiness  # not at the top: the step handlers would import the solver

    if node_class.metadata.deletion_timestamp is not None:
        return "False", "NodeClassTerminating", f"EC2NodeClass {ref_name!r} is terminating"
    status, message = node_class_readiness(node_class)
    if status == "Unknown":
        return "Unknown", "AwaitingReconciliation", message
    if status == "True":
        return "True", "NodeClassReady", ""
    return status, "NodeClassNotReady", f"EC2NodeClass {ref_name!r} is not ready: {message}"


def node_pool_status(
    pool_name: str,
    *,
    nodes: Iterable[Node],
    node_claims: Iterable[NodeClaim] = (),
    node_class_ref: str | None,
    node_class: EC2NodeClass | None,
    validation_errors: Sequence[str] = (),
    previous: Mapping[str, Any] | None = None,
    generation: int | None = None,
    now: datetime,
) -> dict[str, Any]:
    """The NodePool's new ``status`` (pure)."""
    resources, count = node_pool_resources(pool_name, nodes, node_claims)
    conditions: list[dict[str, Any]] = list((previous or {}).get("conditions") or [])
    if validation_errors:
        valid = ("False", "ValidationFailed", "; ".join(validation_errors))
    else:
        valid = ("True", "ValidationSucceeded", "")
    conditions = set_condition(conditions, CONDITION_VALIDATION_SUCCEEDED, *valid, now=now, generation=generation)
    ready_class = node_class_ready(node_class_ref, node_class)
    conditions = set_condition(conditions, CONDITION_NODECLASS_READY, *ready_class, now=now, generation=generation)
    deps = {CONDITION_VALIDATION_SUCCEEDED: valid, CONDITION_NODECLASS_READY: ready_class}
    unhealthy = [f"{t}={s}" for t, (s, _, _) in deps.items() if s != "True"]
    if not unhealthy:
        root = ("True", "Ready", "")
    else:
        status = "False" if any(s == "False" for s, _, _ in deps.values()) else "Unknown"
        root = (status, "UnhealthyDependents", ", ".join(unhealthy))
    conditions = set_condition(conditions, CONDITION_READY, *root, now=now, generation=generation)
    return {"resources": resources, "nodes": count, "conditions": conditions}


def write_node_pool_status(client: KubeClient | ApiClient, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
    """Merge-patch ``status`` into the NodePool's status subresource."""
    return KubeClient.of(client).patch(NODE_POOLS, name, {"status": dict(status)}, subresource="status")


def _raw_ref(raw: Mapping[str, Any]) -> str | None:
    try:
        name = raw["spec"]["template"]["spec"]["nodeClassRef"]["name"]
    except (KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None


def _comparable(status: Mapping[str, Any]) -> Any:
    return {
        "resources": status.get("resources"),
        "nodes": status.get("nodes"),
        "conditions": sorted(
            (
                (
                    c.get("type"),
                    c.get("status"),
                    c.get("reason"),
                    c.get("message") or "",
                    c.get("lastTransitionTime"),
                    c.get("observedGeneration"),
                )
                for c in status.get("conditions") or []
            ),
            key=str,
        ),
    }


@dataclass(frozen=True, slots=True)
class NodePoolStatusChange:
    """A NodePool whose status changes: its new ``status`` and the ``previous`` one (as stored)."""

    name: str
    status: dict[str, Any]
    previous: Mapping[str, Any]


def node_pool_status_changes(snapshot: Snapshot, *, now: datetime) -> list[NodePoolStatusChange]:
    """The new status of every NodePool of ``snapshot`` (valid or not) whose status changes (pure)."""
    classes = {c.name: c for c in snapshot.node_classes}
    todo: list[tuple[str, str | None, Sequence[str], Mapping[str, Any], int | None]] = []
    for pool in snapshot.node_pools:
        previous: Mapping[str, Any] = (
            pool.status.model_dump(by_alias=True, exclude_none=True, mode="json") if pool.status else {}
        )
        ref = pool.spec.template.spec.node_class_ref.name
        todo.append((pool.name, ref, (), previous, pool.metadata.generation))
    for bad in snapshot.invalid_of("NodePool"):
        raw_status = bad.raw.get("status")
        raw_generation = (bad.raw.get("metadata") or {}).get("generation")
        todo.append(
            (
                bad.name,
                _raw_ref(bad.raw),
                bad.errors,
                raw_status if isinstance(raw_status, dict) else {},
                raw_generation if isinstance(raw_generation, int) else None,
            )
        )
    out: list[NodePoolStatusChange] = []
    for name, ref_name, errors, previous, generation in todo:
        if not name:
            continue
        status = node_pool_status(
            name,
            nodes=snapshot.nodes,
            node_claims=snapshot.node_claims,
            node_class_ref=ref_name,
            node_class=classes.get(ref_name or ""),
            validation_errors=errors,
            previous=previous,
            generation=generation,
            now=now,
        )
        if _comparable(status) != _comparable(previous):
            out.append(NodePoolStatusChange(name, status, previous))
    return out


def write_node_pool_status_change(client: KubeClient | ApiClient, change: NodePoolStatusChange) -> dict[str, Any]:
    """Write ``change`` (a merge patch keeps map keys it does not name: a resource no node has any more is
    removed with a null)."""
    status, previous = change.status, change.previous
    gone = {key: None for key in previous.get("resources") or {} if key not in status["resources"]}
    return write_node_pool_status(client, change.name, {**status, "resources": {**gone, **status["resources"]}})


def update_node_pool_statuses(
    client: KubeClient | ApiClient, snapshot: Snapshot, *, now: datetime, reports: Reports | None = None
) -> dict[str, dict[str, Any]]:
    """Compute and write the status of every NodePool of ``snapshot`` (valid or not), each on its own: one the API
    server refuses or fails is left out (logged and counted in ``reports``), the others are written.

    Only NodePools whose status changes are written. Returns name -> status written.
    """
    reports = reports if reports is not None else Reports()
    written: dict[str, dict[str, Any]] = {}
    for change in node_pool_status_changes(snapshot, now=now):
        if reports.run("NodePool status", f"NodePool/{change.name}", partial(_write_change, client, change)):
            written[change.name] = change.status
    return written


def _write_change(client: KubeClient | ApiClient, change: NodePoolStatusChange) -> bool:
    write_node_pool_status_change(client, change)
    return True


def set_node_claim_conditions(
    kube: KubeClient, claim: NodeClaim, updates: Sequence[tuple[str, str, str, str]], *, now: datetime
) -> bool:
    """Set (type, status, reason, message) conditions on the NodeClaim's status; written only when one
    changes (False when nothing was written or the NodeClaim is gone)."""
    current = (
        [c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in (claim.status.conditions or [])]
        if claim.status
        else []
    )
    have = {c.get("type"): (c.get("status"), c.get("reason"), c.get("message") or "") for c in current}
    if all(have.get(kind) == (status, reason, message) for kind, status, reason, message in updates):
        return False
    conditions = current
    for kind, status, reason, message in updates:
        conditions = set_condition(
            conditions, kind, status, reason, message, now=now, generation=claim.metadata.generation
        )
    try:
        kube.patch(NODE_CLAIMS, claim.name, {"status": {"conditions": conditions}}, subresource="status")
    except NotFound:  # gone meanwhile: nothing to record it on
        return False
    return True


RECOUNT_ATTEMPTS = 2  # see recount_node_pool: a second 409 proves a count that includes the caller's change landed


def recount_node_pool(client: KubeClient | ApiClient, pool_name: str) -> bool:
    """Recount one NodePool's ``status.resources`` / ``status.nodes`` from its own Nodes and NodeClaims (a LIST of
    each by the ``karpenter.sh/nodepool`` label, not the whole cluster) and merge-patch them, with the NodePool's
    resourceVersion, only when they changed; conditions are left alone. Called after the caller changed a Node
    (registered it, removed its finalizer).

    A write that raced another (409) is counted once more, and no more: each attempt GETs the NodePool, then LISTs,
    then writes on the version it read. The first attempt's 409 means a write W landed after its GET, so after the
    caller's change; the second attempt read W's version or a later one, so a write that beats it again read the
    NodePool (and then LISTed) after W, after the caller's change: its count includes the change, and a later one
    cannot be older. A burst of N registrations of one pool then costs at most two counts each, not a loop (Karpenter
    recounts every pool from its cache every few seconds instead; gc here recounts on its schedule, which also
    corrects a count written without a resourceVersion from an older snapshot).

    True when written; False when unchanged, the NodePool is gone, a newer count landed, or the API server refused
    or failed (status is for people: never worth failing the step). An object nodeflow cannot read is not counted."""
    if not pool_name:
        return False
    kube = KubeClient.of(client)
    selector = f"{wk.LABEL_NODEPOOL}={pool_name}"
    for _ in range(RECOUNT_ATTEMPTS):
        try:
            pool = kube.get(NODE_POOLS, pool_name)
            nodes = _readable(Node, kube.list_items(NODES, label_selector=selector))
            claims = _readable(NodeClaim, kube.list_items(NODE_CLAIMS, label_selector=selector))
            resources, count = node_pool_resources(pool_name, nodes, claims)
            previous = pool.get("status") or {}
            if previous.get("resources") == resources and previous.get("nodes") == count:
                return False
            gone = {key: None for key in previous.get("resources") or {} if key not in resources}
            patch = {
                "metadata": {"resourceVersion": pool["metadata"]["resourceVersion"]},
                "status": {"resources": {**gone, **resources}, "nodes": count},
            }
            kube.patch(NODE_POOLS, pool_name, patch, subresource="status")
        except Conflict:
            continue
        except KubeError:
            return False
        return True
    return False


def _readable(model: Any, items: Iterable[Mapping[str, Any]]) -> list[Any]:
    out = []
    for item in items:
        try:
            out.append(model.model_validate(item))
        except ValueError:
            continue
    return out
