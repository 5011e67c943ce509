"""Candidates: the managed nodes of a snapshot with what the decisions need, and their blockers.

A node is a candidate when it has a NodeClaim (``status.nodeName``) and belongs to a known NodePool.
Its pods are the non-terminal pods bound to it; the pods that must MOVE exclude DaemonSet pods and
mirror pods (owned by the Node or annotated kubernetes.io/config.mirror) and pods already deleting.

Last pod event (the consolidateAfter timer): ``Snapshot.last_pod_events[node]`` if given, else the
NodeClaim's ``status.lastPodEventTime``, else the latest creationTimestamp of the pods bound to the
node, else the node's (then the NodeClaim's) creationTimestamp.

Blockers (a blocked candidate is never disrupted voluntarily): the node being deleted (deletion
timestamp on the Node or NodeClaim, or the karpenter.sh/disrupted taint), not initialized, the
karpenter.sh/do-not-disrupt annotation on the Node or NodeClaim, a pod that must move annotated do-not-disrupt
("true", or a Go duration still running since the pod's creationTimestamp), a pod whose
PodDisruptionBudget allows no disruption (status.disruptionsAllowed 0 for a PDB selecting it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from nodeflow.api import labels as wk
from nodeflow.api.core import Node, Pod, PodDisruptionBudget
from nodeflow.api.duration import parse_duration, shift
from nodeflow.api.karpenter import NodeClaim, NodePool
from nodeflow.catalog.model import CatalogData
from nodeflow.disruption.model import Snapshot

__all__ = ["Candidate", "build_candidates", "do_not_disrupt_active", "node_price", "pdb_blockers"]

_TERMINAL = frozenset({"Succeeded", "Failed"})
_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    node: Node
    claim: NodeClaim
    pool: NodePool
    pods: tuple[Pod, ...]  # every non-terminal pod bound to the node
    movable: tuple[Pod, ...]  # the pods that must be evicted and rescheduled
    price: float | None  # $/hour of its offering, None when the catalog does not know it
    capacity_type: str
    last_pod_event: datetime | None
    disruption_cost: float
    deleting: bool
    blocker: str | None  # why it cannot be disrupted voluntarily, None when it can

    @property
    def pool_name(self) -> str:
        return self.pool.name


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def is_daemon_or_mirror(pod: Pod) -> bool:
    owners = {o.kind for o in pod.metadata.owner_references or ()}
    return bool(owners & {"DaemonSet", "Node"}) or wk.ANNOTATION_MIRROR_POD in (pod.metadata.annotations or {})


def do_not_disrupt_active(annotations: Mapping[str, str] | None, since: datetime | None, now: datetime) -> str | None:
    """The do-not-disrupt value if it still protects (``"true"``, or a duration not yet elapsed since
    ``since``; an unparsable value protects, to be safe), else None."""
    value = (annotations or {}).get(wk.ANNOTATION_DO_NOT_DISRUPT)
    if value is None or value == "false":
        return None
    if value == "true":
        return value
    try:
        seconds = parse_duration(value)
    except ValueError:
        return value
    if seconds is None or since is None:
        return value
    return value if shift(_aware(since), seconds) > now else None


def node_price(node: Node, catalog: CatalogData) -> tuple[float | None, str]:
    """The $/hour of ``node``'s offering (instance type, zone, capacity type labels) and its capacity type."""
    labels = node.metadata.labels or {}
    it = labels.get(wk.LABEL_INSTANCE_TYPE, "")
    zone = labels.get(wk.LABEL_ZONE, "")
    ct = labels.get(wk.LABEL_CAPACITY_TYPE, wk.CAPACITY_TYPE_ON_DEMAND)
    if ct == wk.CAPACITY_TYPE_SPOT:
        return catalog.spot_prices.get((it, zone)), ct
    return catalog.on_demand_prices.get(it), ct


def pdb_blockers(pods: Sequence[Pod], pdbs: Sequence[PodDisruptionBudget]) -> str | None:
    """Why evicting ``pods`` would be refused by a PodDisruptionBudget (disruptionsAllowed 0), or None."""
    for pdb in pdbs:
        selector = pdb.spec.selector
        if selector is None or pdb.status.disruptions_allowed > 0:
            continue
        namespace = pdb.metadata.namespace or "default"
        for pod in pods:
            if pod.namespace == namespace and not selector.empty and selector.matches(pod.labels):
                return f"pod {pod.key} is protected by PodDisruptionBudget {namespace}/{pdb.metadata.name} (0 allowed)"
    return None


def _eviction_cost(pod: Pod) -> float:
    """Karpenter's EvictionCost: 1 + pod-deletion-cost / 2^27 + priority / 2^25, clamped to [-10, 10]."""
    cost = 1.0
    raw = (pod.metadata.annotations or {}).get(_DELETION_COST)
    if raw is not None:
        with contextlib.suppress(ValueError):
            cost += int(raw) / 2.0**27
    cost += (pod.spec.priority or 0) / 2.0**25
    return max(-10.0, min(10.0, cost))


def _lifetime_remaining(claim: NodeClaim, now: datetime) -> float:
    seconds = claim.spec.expire_after_seconds
    created = claim.metadata.creation_timestamp
    if seconds is None or created is None or seconds <= 0:
        return 1.0
    left = (shift(_aware(created), seconds) - now).total_seconds()
    return max(0.0, min(1.0, left / seconds))


def _last_event(
    snapshot: Snapshot, node: Node, claim: NodeClaim, pods: Sequence[Pod], now: datetime
) -> datetime | None:
    """The first of these that is known and not in the future (a future time is not trusted: it would hold
    the node for ever): the round's own record, ``status.lastPodEventTime``, the newest pod, the node."""
    name = node.metadata.name or ""
    recorded = snapshot.last_pod_events.get(name)
    status_time = claim.status.last_pod_event_time if claim.status is not None else None
    for t in (recorded, status_time):
        if t is not None and _aware(t) <= now:
            return _aware(t)
    times = [_aware(p.metadata.creation_timestamp) for p in pods if p.metadata.creation_timestamp is not None]
    if times:
        return min(max(times), now)
    created = node.metadata.creation_timestamp or claim.metadata.creation_timestamp
    return min(_aware(created), now) if created is not None else None


def _initialized(node: Node, claim: NodeClaim) -> bool:
    if (node.metadata.labels or {}).get(wk.LABEL_INITIALIZED) == "true":
        return True
    cond = claim.status.condition("Initialized") if claim.status is not None else None
    return cond is not None and cond.status == "True"


def is_deleting(node: Node, claim: NodeClaim | None) -> bool:
    if node.metadata.deletion_timestamp is not None:
        return True
    if claim is not None and claim.metadata.deletion_timestamp is not None:
        return True
    return any(t.key == wk.TAINT_DISRUPTED for t in node.spec.taints)


def _blocker(
    node: Node, claim: NodeClaim, pods: Sequence[Pod], movable: Sequence[Pod], snapshot: Snapshot, now: datetime
) -> str | None:
    name = node.metadata.name or ""
    if is_deleting(node, claim):
        return f"node {name} is already being disrupted or deleted"
    if not _initialized(node, claim):
        return f"node {name} is not initialized"
    for obj, meta in (("node", node.metadata), ("NodeClaim", claim.metadata)):
        value = do_not_disrupt_active(meta.annotations, meta.creation_timestamp, now)
        if value is not None:
            return f"{obj} {meta.name} has {wk.ANNOTATION_DO_NOT_DISRUPT}={value}"
    for pod in movable:  # DaemonSet and mirror pods are never evicted: they do not block
        value = do_not_disrupt_active(pod.metadata.annotations, pod.metadata.creation_timestamp, now)
        if value is not None:
            return f"pod {pod.key} has {wk.ANNOTATION_DO_NOT_DISRUPT}={value}"
    return pdb_blockers(movable, snapshot.pdbs)


def build_candidates(snapshot: Snapshot, catalog: CatalogData, now: datetime) -> tuple[Candidate, ...]:
    """Every managed node of ``snapshot`` as a candidate (blocked ones included, with ``blocker`` set),
    ordered by disruption cost (cheapest to disrupt first), then name."""
    state = snapshot.state
    pools = {p.name: p for p in state.node_pools}
    claims = {
        c.status.node_name: c for c in state.node_claims if c.status is not None and c.status.node_name is not None
    }
    bound: dict[str, list[Pod]] = {}
    for pod in state.pods:
        if pod.spec.node_name and pod.status.phase not in _TERMINAL:
            bound.setdefault(pod.spec.node_name, []).append(pod)
    out: list[Candidate] = []
    for node in state.nodes:
        name = node.metadata.name or ""
        claim = claims.get(name)
        pool_name = (node.metadata.labels or {}).get(wk.LABEL_NODEPOOL) or (
            (claim.metadata.labels or {}).get(wk.LABEL_NODEPOOL) if claim is not None else None
        )
        pool = pools.get(pool_name or "")
        if claim is None or pool is None:
            continue  # not managed by a known NodePool
        pods = tuple(bound.get(name, ()))
        movable = tuple(p for p in pods if not is_daemon_or_mirror(p) and p.metadata.deletion_timestamp is None)
        price, ct = node_price(node, catalog)
        cost = sum(_eviction_cost(p) for p in movable) * _lifetime_remaining(claim, now)
        out.append(
            Candidate(
                name=name,
                node=node,
                claim=claim,
                pool=pool,
                pods=pods,
                movable=movable,
                price=price,
                capacity_type=ct,
                last_pod_event=_last_event(snapshot, node, claim, pods, now),
                disruption_cost=cost,
                deleting=is_deleting(node, claim),
                blocker=_blocker(node, claim, pods, movable, snapshot, now),
            )
        )
    out.sort(key=lambda c: (c.disruption_cost, c.name))
    return tuple(out)
