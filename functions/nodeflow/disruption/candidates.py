"""Candidates: the managed nodes of a snapshot with what the decisions need, and their blockers.

A node is a candidate when it has a NodeClaim (``status.nodeName``) and belongs to a known NodePool.
Its pods are the non-terminal pods bound to it; the pods that must MOVE exclude DaemonSet pods and
mirror pods (owned by the Node or annotated kubernetes.io/config.mirror) and pods already deleting, except
StatefulSet pods (a terminating one still holds its place: its successor starts only once it is gone).

Last pod event (the consolidateAfter timer): ``Snapshot.last_pod_events[node]`` if given, else the
NodeClaim's ``status.lastPodEventTime``, else the latest creationTimestamp of the pods bound to the
node, else the node's (then the NodeClaim's) creationTimestamp.

Blockers (a blocked candidate is never disrupted voluntarily), as Karpenter's candidate filter:
- the node: being deleted (deletion timestamp on the Node or NodeClaim, the karpenter.sh/disrupted taint,
  or the NodeClaim's InstanceTerminating condition), not initialized, nominated for a pending pod
  (``status.nominatedNodeName``), karpenter.sh/do-not-disrupt "true" on the Node or NodeClaim;
- its pods (``pod_blocked``): any active pod (not terminal, not terminating; DaemonSet and mirror pods
  included) whose do-not-disrupt annotation is active ("true", or a positive Go duration not yet elapsed
  since ``status.startTime``; without a start time a duration protects; any other value protects nothing);
  or a pod that would be evicted (active, not a mirror pod, not tolerating the disrupted taint) and that
  two PodDisruptionBudgets select, or one allowing no disruption now (status.disruptionsAllowed 0) --
  except a pod whose Ready condition is False under a PDB with unhealthyPodEvictionPolicy AlwaysAllow.
  Pod blockers hold graceful disruption (emptiness, consolidation) always, and eventual disruption
  (drift) only when the NodeClaim has no terminationGracePeriod (``eventual_ok``).

Must not touch: which candidate a method disrupts (the methods), budgets (``budgets``); AWS, Kubernetes, the clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from nodeflow.api import labels as wk
from nodeflow.api.core import Node, Pod, PodDisruptionBudget
from nodeflow.api.duration import shift
from nodeflow.api.karpenter import NodeClaim, NodePool
from nodeflow.api.meta import Taint
from nodeflow.catalog.instancetypes import RESERVED_PRICE_DIVISOR
from nodeflow.catalog.model import CatalogData, InstanceType
from nodeflow.catalog.overlays import OverlayPool, apply_overlays
from nodeflow.disruption.model import Snapshot
from nodeflow.podutil import do_not_disrupt_active, eviction_cost, fully_blocking_pdbs, is_daemon_or_mirror

__all__ = [
    "Candidate",
    "budget_standing",
    "build_candidates",
    "held_pods",
    "node_price",
    "pdb_blockers",
    "settled",
]

_TERMINAL = frozenset({"Succeeded", "Failed"})


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
    pod_blocked: bool = False  # the blocker is a pod's (do-not-disrupt or PDB), not the node's
    held: frozenset[str] = frozenset()  # movable pods that will not be evicted now: left out of simulations
    reschedule_cost: float | None = None  # 1 + the positive eviction costs of ``movable`` (None: not computed)

    @property
    def eventual_ok(self) -> bool:
        """May eventual disruption (drift) take it: no blocker, or only a pod blocker and the NodeClaim has a
        terminationGracePeriod (which bounds how long such pods can hold the node)."""
        return self.blocker is None or (self.pod_blocked and self.claim.spec.termination_grace_period is not None)

    @property
    def pool_name(self) -> str:
        return self.pool.name

    @property
    def static(self) -> bool:
        """Owned by a static NodePool (spec.replicas): never consolidated, drift replaced by its pool's template."""
        return self.pool.spec.replicas is not None


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def settled(c: Candidate, now: datetime) -> bool:
    """consolidateAfter has passed since the node's last pod event (never with consolidateAfter Never)."""
    after = c.pool.spec.disruption.consolidate_after_seconds
    if after is None:
        return False
    return c.last_pod_event is None or shift(c.last_pod_event, after) <= now


def _active(pod: Pod) -> bool:
    return pod.status.phase not in _TERMINAL and pod.metadata.deletion_timestamp is None


def _reschedulable(pod: Pod) -> bool:
    """Must the pod run elsewhere if its node goes (Karpenter's IsReschedulable): not a DaemonSet or mirror pod,
    and not leaving already, except a terminating StatefulSet pod (its replacement starts only once it is gone,
    so it still needs the room)."""
    if is_daemon_or_mirror(pod):
        return False
    if pod.metadata.deletion_timestamp is None:
        return True
    return any(o.kind == "StatefulSet" for o in pod.metadata.owner_references or ())


def _is_mirror(pod: Pod) -> bool:
    owners = {o.kind for o in pod.metadata.owner_references or ()}
    return "Node" in owners or wk.ANNOTATION_MIRROR_POD in (pod.metadata.annotations or {})


_DISRUPTED_TAINT = Taint(key=wk.TAINT_DISRUPTED, effect="NoSchedule")


def _evicted(pod: Pod, now: datetime) -> bool:
    """Would draining the node evict ``pod`` (Karpenter's IsEvictable): active, not a mirror pod, not
    tolerating the disrupted taint, not protected by do-not-disrupt."""
    return (
        _active(pod)
        and not _is_mirror(pod)
        and not any(t.tolerates(_DISRUPTED_TAINT) for t in pod.spec.tolerations)
        and do_not_disrupt_active(pod.metadata.annotations, pod.status.start_time, now) is None
    )


def node_price(node: Node, catalog: CatalogData) -> tuple[float | None, str]:
    """The $/hour of ``node``'s offering (instance type, zone, capacity type labels) and its capacity type.

    A reserved node is priced as the solver prices reserved offerings (on-demand / ``RESERVED_PRICE_DIVISOR``), so a
    move into the same reservation saves nothing while one into a cheaper type's reservation still does."""
    labels = node.metadata.labels or {}
    it = labels.get(wk.LABEL_INSTANCE_TYPE, "")
    zone = labels.get(wk.LABEL_ZONE, "")
    ct = labels.get(wk.LABEL_CAPACITY_TYPE, wk.CAPACITY_TYPE_ON_DEMAND)
    if ct == wk.CAPACITY_TYPE_SPOT:
        return catalog.spot_prices.get((it, zone)), ct
    on_demand = catalog.on_demand_prices.get(it)
    if ct == wk.CAPACITY_TYPE_RESERVED and on_demand is not None:
        return on_demand / RESERVED_PRICE_DIVISOR, ct
    return on_demand, ct


def overlaid_types(snapshot: Snapshot, catalog: CatalogData) -> Mapping[str, Mapping[str, InstanceType]]:
    """NodePool -> instance type name -> the type as the NodePool's NodeOverlays priced it (only the types whose
    price an overlay changed; empty without overlays): a candidate is priced as its replacements are."""
    state = snapshot.state
    if not state.node_overlays:
        return {}
    from nodeflow.plan import build_input  # the solver input's NodePools (plan imports nothing of disruption)

    bare = dataclasses.replace(state, pods=(), nodes=(), node_claims=(), daemon_sets=(), node_overlays=())
    pools = build_input(bare, catalog).nodepools
    result = apply_overlays(state.node_overlays, [OverlayPool(p.name, p.labels, p.instance_types) for p in pools])
    out: dict[str, dict[str, InstanceType]] = {}
    for pool_name, types in result.instance_types.items():
        for it in types:
            if (pool_name, it.name) in result.price_overlaid:
                out.setdefault(pool_name, {})[it.name] = it
    return out


def _overlaid_price(node: Node, it: InstanceType | None, price: float | None, ct: str) -> float | None:
    if it is None:
        return price
    zone = (node.metadata.labels or {}).get(wk.LABEL_ZONE, "")
    offering = next((o for o in it.offerings if o.zone == zone and o.capacity_type == ct), None)
    return price if offering is None else offering.price


def pdb_blockers(pods: Sequence[Pod], pdbs: Sequence[PodDisruptionBudget], now: datetime) -> str | None:
    """Why evicting ``pods`` would be refused by PodDisruptionBudgets, or None (see the module docstring)."""
    if not pdbs:
        return None  # nothing can refuse
    for pod in pods:
        if not _evicted(pod, now):
            continue
        namespace = pod.namespace
        matching = [
            p
            for p in pdbs
            if (p.metadata.namespace or "default") == namespace
            and p.spec.selector is not None
            and p.spec.selector.matches(pod.labels)
        ]
        if len(matching) > 1:
            names = ", ".join(sorted(f"{namespace}/{p.metadata.name}" for p in matching))
            return f"pod {pod.key} is selected by several PodDisruptionBudgets ({names}): eviction is refused"
        for pdb in matching:
            ready = pod.status.condition("Ready")
            if (
                pdb.spec.unhealthy_pod_eviction_policy == "AlwaysAllow"
                and ready is not None
                and ready.status == "False"
            ):
                continue
            if pdb.status.disruptions_allowed <= 0:
                return f"pod {pod.key} is protected by PodDisruptionBudget {namespace}/{pdb.metadata.name} (0 allowed)"
    return None


def _fully_blocked(pod: Pod, pdbs: Sequence[PodDisruptionBudget], now: datetime) -> bool:
    """Would PodDisruptionBudgets keep ``pod`` for good: it is evicted when its node drains and they fully block it."""
    return bool(pdbs) and _evicted(pod, now) and fully_blocking_pdbs(pod, pdbs)


def held_pods(pods: Sequence[Pod], pdbs: Sequence[PodDisruptionBudget], now: datetime) -> frozenset[str]:
    """The keys of ``pods`` that will not be evicted now (Karpenter: not "currently reschedulable"): an active
    do-not-disrupt annotation, or fully blocking PDBs. Simulations leave them where they are: launching
    capacity for a pod that cannot leave would be waste."""
    return frozenset(
        p.key
        for p in pods
        if do_not_disrupt_active(p.metadata.annotations, p.status.start_time, now) is not None
        or _fully_blocked(p, pdbs, now)
    )


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
    """When the consolidateAfter timer starts: the round's own record, else ``status.lastPodEventTime`` (the
    first known and not in the future: a future time would hold the node for ever); without a pod event,
    Karpenter counts from initialization, so: the newest pod's creation or the NodeClaim's initialization
    (its Initialized condition, else the node's / NodeClaim's creation), whichever is later."""
    name = node.metadata.name or ""
    recorded = snapshot.last_pod_events.get(name)
    status_time = claim.status.last_pod_event_time if claim.status is not None else None
    for t in (recorded, status_time):
        if t is not None and _aware(t) <= now:
            return _aware(t)
    cond = claim.status.condition("Initialized") if claim.status is not None else None
    initialized = cond.last_transition_time if cond is not None and cond.status == "True" else None
    times = [_aware(p.metadata.creation_timestamp) for p in pods if p.metadata.creation_timestamp is not None]
    start = initialized or node.metadata.creation_timestamp or claim.metadata.creation_timestamp
    if start is not None:
        times.append(_aware(start))
    return min(max(times), now) if times else None


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
    if claim is not None and claim.status is not None:
        cond = claim.status.condition("InstanceTerminating")
        if cond is not None and cond.status == "True":
            return True
    return any(t.key == wk.TAINT_DISRUPTED for t in node.spec.taints)


def _node_blocker(node: Node, claim: NodeClaim, nominated: frozenset[str]) -> str | None:
    name = node.metadata.name or ""
    if is_deleting(node, claim):
        return f"node {name} is already being disrupted or deleted"
    if not _initialized(node, claim):
        return f"node {name} is not initialized"
    if name in nominated:
        return f"node {name} is nominated for a pending pod"
    for obj, meta in (("node", node.metadata), ("NodeClaim", claim.metadata)):
        if (meta.annotations or {}).get(wk.ANNOTATION_DO_NOT_DISRUPT) == "true":
            return f"{obj} {meta.name} has {wk.ANNOTATION_DO_NOT_DISRUPT}=true"
    return None


def _pod_blocker(pods: Sequence[Pod], pdbs: Sequence[PodDisruptionBudget], now: datetime) -> str | None:
    for pod in pods:  # every active pod, DaemonSet and mirror pods included
        if not _active(pod):
            continue
        value = do_not_disrupt_active(pod.metadata.annotations, pod.status.start_time, now)
        if value is not None:
            return f"pod {pod.key} has {wk.ANNOTATION_DO_NOT_DISRUPT}={value}"
    return pdb_blockers(pods, pdbs, now)


def budget_standing(c: Candidate) -> tuple[bool, bool]:
    """(counted, disrupting) of ``c`` for its NodePool's disruption budgets, as Karpenter counts: only
    initialized nodes count, and not those whose instance is already terminating (NodeClaim condition
    InstanceTerminating); a counted node uses up budget while it is being deleted or disrupted, or while its
    Ready condition is not True (a Node without one, as in hand-written manifests, is taken as it is)."""
    claim_status = c.claim.status
    terminating = claim_status.condition("InstanceTerminating") if claim_status is not None else None
    if not _initialized(c.node, c.claim) or (terminating is not None and terminating.status == "True"):
        return False, False
    ready = next((cond.status for cond in c.node.status.conditions if cond.type == "Ready"), None)
    return True, c.deleting or ready not in (None, "True")


def build_candidates(snapshot: Snapshot, catalog: CatalogData, now: datetime) -> tuple[Candidate, ...]:
    """Every managed node of ``snapshot`` as a candidate (blocked ones included, with ``blocker`` set),
    ordered by disruption cost (cheapest to disrupt first), then name."""
    state = snapshot.state
    pools = {p.name: p for p in state.node_pools}
    claims = {
        c.status.node_name: c for c in state.node_claims if c.status is not None and c.status.node_name is not None
    }
    bound: dict[str, list[Pod]] = {}
    nominated: set[str] = set()
    for pod in state.pods:
        if pod.spec.node_name and pod.status.phase not in _TERMINAL:
            bound.setdefault(pod.spec.node_name, []).append(pod)
        elif not pod.spec.node_name and pod.status.nominated_node_name and _active(pod):
            nominated.add(pod.status.nominated_node_name)
    out: list[Candidate] = []
    nominated_nodes = frozenset(nominated)
    overlaid = overlaid_types(snapshot, catalog)
    for node in state.nodes:
        name = node.metadata.name or ""
        claim = claims.get(name)
        # The registered Node's own karpenter.sh/nodepool label says which NodePool owns it (Karpenter's rule).
        pool = pools.get((node.metadata.labels or {}).get(wk.LABEL_NODEPOOL) or "")
        if claim is None or pool is None:
            continue  # not managed by a known NodePool
        pods = tuple(bound.get(name, ()))
        movable = tuple(p for p in pods if _reschedulable(p))
        price, ct = node_price(node, catalog)
        if overlaid:
            it = overlaid.get(pool.name, {}).get((node.metadata.labels or {}).get(wk.LABEL_INSTANCE_TYPE, ""))
            price = _overlaid_price(node, it, price, ct)
        node_blocker = _node_blocker(node, claim, nominated_nodes)
        pod_blocker = _pod_blocker(pods, snapshot.pdbs, now) if node_blocker is None else None
        costs = [eviction_cost(p) for p in movable]
        cost = sum(costs) * _lifetime_remaining(claim, now)
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
                blocker=node_blocker or pod_blocker,
                pod_blocked=node_blocker is None and pod_blocker is not None,
                held=held_pods(movable, snapshot.pdbs, now)
                if snapshot.pdbs or node_blocker or pod_blocker
                else frozenset(),
                reschedule_cost=1.0 + sum(max(0.0, e) for e in costs),
            )
        )
    out.sort(key=lambda c: (c.disruption_cost, c.name))
    return tuple(out)
