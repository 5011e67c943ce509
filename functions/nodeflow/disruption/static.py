"""Static NodePools (``spec.replicas``) in disruption: the scale-down. Pure.

Static NodePools are never consolidated (emptiness and consolidation skip their nodes), and the ordinary
drift method leaves them to static drift (``nodeflow.disruption.static_drift``). Expiration applies as to any node: the
provisioner then brings the pool back to its replicas.

Scale down (Karpenter's static deprovisioning): when a static NodePool has more active NodeClaims than
``spec.replicas`` (counted as ``nodeflow.scheduling.static_capacity.static_counts``), that many of them are deleted, no
budget or blocker applying, chosen in this order:

1. NodeClaims not launched yet (no ``status.providerID``), by name;
2. empty nodes: no pods, or only DaemonSet pods none of which has an active ``karpenter.sh/do-not-disrupt``
   (a NodeClaim launched but not registered has no pods), by name;
3. the other nodes: those without an active do-not-disrupt pod first, then the lowest rescheduling cost (the
   eviction costs of all their pods) times the fraction of the NodeClaim's lifetime left, then name.

Nodes already deleting or being disrupted (``karpenter.sh/disrupted``) are not chosen.

Must not touch: how many NodeClaims a static NodePool needs while scaling up (``nodeflow.scheduling.static_capacity``);
drift (``static_drift``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeflow.api.karpenter import NodePool
from nodeflow.cluster import ClusterState
from nodeflow.disruption.candidates import Candidate, _aware, _lifetime_remaining
from nodeflow.podutil import do_not_disrupt_active, eviction_cost
from nodeflow.scheduling.static_capacity import is_static, static_counts

__all__ = ["OVERPROVISIONED", "ScaleDown", "scale_downs"]

OVERPROVISIONED = "overprovisioned"  # Karpenter's termination reason for a static scale-down


@dataclass(frozen=True, slots=True)
class ScaleDown:
    """A NodeClaim deleted because its static NodePool has more than ``spec.replicas``."""

    node_pool: str
    node_claim: str
    node: str | None  # None: not registered (or not launched) yet
    why: str  # "not launched" | "empty" | "lowest disruption cost"

    def to_json(self) -> dict[str, Any]:
        return {"nodePool": self.node_pool, "nodeClaim": self.node_claim, "node": self.node, "why": self.why}


def _daemon(owner_kinds: set[str]) -> bool:
    return "DaemonSet" in owner_kinds


def _pool_scale_downs(
    pool: NodePool, state: ClusterState, by_claim: dict[str, Candidate], now: datetime
) -> list[ScaleDown]:
    count = static_counts(pool.name, state.node_claims, state.nodes)
    excess = len(count.active) - (pool.spec.replicas or 0)
    if excess <= 0:
        return []
    active = set(count.active)
    claims = sorted((c for c in state.node_claims if c.name in active), key=lambda c: c.name)
    out: list[ScaleDown] = []
    unlaunched = [c for c in claims if c.status is None or not c.status.provider_id]
    out += [ScaleDown(pool.name, c.name, None, "not launched") for c in unlaunched[:excess]]
    skip = {c.name for c in unlaunched}
    empty: list[ScaleDown] = []
    busy: list[tuple[bool, float, str, ScaleDown]] = []
    for claim in claims:
        if claim.name in skip:
            continue
        cand = by_claim.get(claim.name)
        node = claim.status.node_name if claim.status is not None else None
        pods = [p for p in cand.pods if p.metadata.deletion_timestamp is None] if cand is not None else []
        protected = any(do_not_disrupt_active(p.metadata.annotations, p.status.start_time, now) for p in pods)
        if not protected and all(_daemon({o.kind for o in p.metadata.owner_references or ()}) for p in pods):
            empty.append(ScaleDown(pool.name, claim.name, node, "empty"))
            continue
        cost = sum(eviction_cost(p) for p in pods) * _lifetime_remaining(claim, now)
        busy.append((protected, cost, claim.name, ScaleDown(pool.name, claim.name, node, "lowest disruption cost")))
    out += empty[: excess - len(out)]
    busy.sort(key=lambda b: b[:3])
    out += [b[3] for b in busy[: excess - len(out)]]
    return out


def scale_downs(state: ClusterState, candidates: Sequence[Candidate], now: datetime) -> tuple[ScaleDown, ...]:
    """The NodeClaims static NodePools delete to come down to ``spec.replicas`` (NodePools by name)."""
    now = _aware(now)
    by_claim = {c.claim.name: c for c in candidates}
    out: list[ScaleDown] = []
    for pool in sorted(state.node_pools, key=lambda p: p.name):
        if is_static(pool) and pool.metadata.deletion_timestamp is None:
            out += _pool_scale_downs(pool, state, by_claim, now)
    return tuple(out)
