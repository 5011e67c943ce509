"""Node repair: which nodes are replaced forcefully because their conditions say they are broken.

Karpenter's ``node.health`` controller (feature gate ``NodeRepair``, alpha, off by default) with the repair
policies of its AWS provider:

==========================  ========  ===========
condition type              status    toleration
==========================  ========  ===========
Ready                       False     30 minutes
Ready                       Unknown   30 minutes
AcceleratedHardwareReady    False     10 minutes
StorageReady                False     30 minutes
NetworkingReady             False     30 minutes
KernelReady                 False     30 minutes
ContainerRuntimeReady       False     30 minutes
==========================  ========  ===========

(the last five are written by the EKS node monitoring agent, or any agent such as Node Problem Detector).

- A node matches a policy when it has a condition of that type with exactly that status; ``since`` is the
  condition's ``lastTransitionTime``. With several matching policies the one whose toleration ends first
  decides. A missing ``lastTransitionTime`` counts as long ago (due at once), as Karpenter's zero time does.
- The node is due for repair once ``now >= since + toleration``.
- Only nodes nodeflow manages are repaired: exactly one NodeClaim has the node's ``spec.providerID`` (none, or
  more than one: left alone).
- The safety valve: a due node is NOT repaired while more than 20 % of its NodePool's nodes (the Nodes labelled
  ``karpenter.sh/nodepool=<pool>``) are unhealthy, rounded up as PodDisruptionBudgets round percentages: of 3
  nodes 1 may be unhealthy, of 10 nodes 2, of 11 nodes 3. A node is unhealthy here when it matches any policy,
  whether or not its toleration has passed. A NodeClaim without the nodepool label is measured against every
  Node of the cluster. Blocked nodes get a ``NodeRepairBlocked`` Warning event.
- Repair is forceful: disruption budgets, ``karpenter.sh/do-not-disrupt`` and PodDisruptionBudgets do not
  apply, and the caller sets the NodeClaim's ``karpenter.sh/nodeclaim-termination-timestamp`` to now (unless an
  earlier one is set), so the drain does not wait for the terminationGracePeriod. The NodeClaim is deleted
  (the terminate workflow); the metric ``karpenter_nodeclaims_disrupted_total{reason="unhealthy"}`` counts it.

PURE (DESIGN.md rule 1): the caller passes the nodes, the NodeClaims and ``now``.

Must not touch: carrying out a repair (``nodeflow.lifecycle.node_repair``); budgets (repair is forceful); the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from nodeflow.api import labels as wk
from nodeflow.api.core import Node
from nodeflow.api.karpenter_core import NodeClaim

__all__ = [
    "ALLOWED_UNHEALTHY_PERCENT",
    "EVENT_NODE_REPAIR_BLOCKED",
    "REASON_UNHEALTHY",
    "REPAIR_POLICIES",
    "TERMINATION_REASON",
    "Repair",
    "RepairBlocked",
    "RepairPolicy",
    "RepairResult",
    "Unhealthy",
    "condition_label",
    "decide_repairs",
    "unhealthy_condition",
    "unhealthy_threshold",
]

ALLOWED_UNHEALTHY_PERCENT: Final = 20
EVENT_NODE_REPAIR_BLOCKED: Final = "NodeRepairBlocked"
REASON_UNHEALTHY: Final = "unhealthy"  # karpenter_nodeclaims_disrupted_total's reason label
TERMINATION_REASON: Final = "Unhealthy"  # the terminate workflow's reason (events: "Disrupting Node: Unhealthy")
_LONG_AGO: Final = datetime(1, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class RepairPolicy:
    """A node condition type and status that means "broken", and how long it is tolerated."""

    condition_type: str
    condition_status: str
    toleration_seconds: int


REPAIR_POLICIES: Final[tuple[RepairPolicy, ...]] = (
    RepairPolicy("Ready", "False", 30 * 60),
    RepairPolicy("Ready", "Unknown", 30 * 60),
    RepairPolicy("AcceleratedHardwareReady", "False", 10 * 60),
    RepairPolicy("StorageReady", "False", 30 * 60),
    RepairPolicy("NetworkingReady", "False", 30 * 60),
    RepairPolicy("KernelReady", "False", 30 * 60),
    RepairPolicy("ContainerRuntimeReady", "False", 30 * 60),
)


def unhealthy_threshold(nodes: int, percent: int = ALLOWED_UNHEALTHY_PERCENT) -> int:
    """How many of ``nodes`` may be unhealthy with repairs still going on: ``percent`` of them, rounded up."""
    if nodes < 0:
        raise ValueError(f"nodes: expected a count >= 0, got {nodes}")
    return -(-nodes * percent // 100)


@dataclass(frozen=True, slots=True)
class Unhealthy:
    """The condition a node is repaired for: its type, status, since when, and when the toleration ends."""

    condition: str
    status: str
    since: datetime | None
    toleration_seconds: int

    @property
    def repair_at(self) -> datetime:
        return (self.since or _LONG_AGO) + timedelta(seconds=self.toleration_seconds)


def unhealthy_condition(node: Node, policies: Sequence[RepairPolicy] = REPAIR_POLICIES) -> Unhealthy | None:
    """The node's condition matching a policy whose toleration ends first; None when it matches none."""
    best: Unhealthy | None = None
    for policy in policies:
        cond = next((c for c in node.status.conditions if c.type == policy.condition_type), None)
        if cond is None or cond.status != policy.condition_status:
            continue
        since = cond.last_transition_time
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        found = Unhealthy(cond.type, cond.status, since, policy.toleration_seconds)
        if best is None or found.repair_at < best.repair_at:
            best = found
    return best


def condition_label(condition_type: str) -> str:
    """The condition type in snake case (``AcceleratedHardwareReady`` -> ``accelerated_hardware_ready``), as
    ``karpenter_nodeclaims_unhealthy_disrupted_total`` labels it."""
    out: list[str] = []
    for i, ch in enumerate(condition_type):
        if ch.isupper() and i > 0 and (not condition_type[i - 1].isupper() or _next_lower(condition_type, i)):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _next_lower(text: str, i: int) -> bool:
    return i + 1 < len(text) and text[i + 1].islower()


@dataclass(frozen=True, slots=True)
class Repair:
    """A node to replace now: its NodeClaim is deleted forcefully."""

    node: str
    node_claim: str
    node_pool: str | None
    unhealthy: Unhealthy
    capacity_type: str = ""
    image_id: str = ""
    deleting: bool = False  # the NodeClaim is being deleted already (the repair only makes it forceful)

    def to_json(self) -> dict[str, Any]:
        u = self.unhealthy
        return {
            "node": self.node,
            "nodeClaim": self.node_claim,
            "nodePool": self.node_pool,
            "condition": u.condition,
            "status": u.status,
            "since": u.since.isoformat() if u.since is not None else None,
            "tolerationSeconds": u.toleration_seconds,
        }


@dataclass(frozen=True, slots=True)
class RepairBlocked:
    """A node due for repair that is left alone because too much of its NodePool (or cluster) is unhealthy."""

    node: str
    node_claim: str
    node_pool: str | None
    unhealthy: Unhealthy
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "nodeClaim": self.node_claim,
            "nodePool": self.node_pool,
            "condition": self.unhealthy.condition,
            "event": EVENT_NODE_REPAIR_BLOCKED,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class RepairResult:
    repairs: tuple[Repair, ...] = ()
    blocked: tuple[RepairBlocked, ...] = ()
    next_due: datetime | None = None  # the earliest end of a toleration still running (when to look again)

    def to_json(self) -> dict[str, Any]:
        return {
            "repairs": [r.to_json() for r in self.repairs],
            "repairsBlocked": [b.to_json() for b in self.blocked],
        }


@dataclass
class _Group:
    nodes: int = 0
    unhealthy: int = 0


def decide_repairs(
    nodes: Iterable[Node],
    node_claims: Iterable[NodeClaim],
    now: datetime,
    policies: Sequence[RepairPolicy] = REPAIR_POLICIES,
) -> RepairResult:
    """The nodes to repair now, those blocked by the 20 % rule, and when the next toleration ends."""
    nodes = list(nodes)
    by_provider: dict[str, list[NodeClaim]] = {}
    for claim in node_claims:
        pid = claim.status.provider_id if claim.status is not None else None
        if pid:
            by_provider.setdefault(pid, []).append(claim)
    unhealthy = {n.name: unhealthy_condition(n, policies) for n in nodes}
    pools: dict[str, _Group] = {}
    cluster = _Group(nodes=len(nodes), unhealthy=sum(1 for u in unhealthy.values() if u is not None))
    for n in nodes:
        pool = n.labels.get(wk.LABEL_NODEPOOL)
        if pool is not None:
            group = pools.setdefault(pool, _Group())
            group.nodes += 1
            group.unhealthy += unhealthy[n.name] is not None
    repairs: list[Repair] = []
    blocked: list[RepairBlocked] = []
    next_due: datetime | None = None
    for n in sorted(nodes, key=lambda x: x.name):
        u = unhealthy[n.name]
        claims = by_provider.get(n.spec.provider_id or "", []) if n.spec.provider_id else []
        if u is None or len(claims) != 1:
            continue
        claim = claims[0]
        if now < u.repair_at:
            next_due = u.repair_at if next_due is None else min(next_due, u.repair_at)
            continue
        pool = (claim.metadata.labels or {}).get(wk.LABEL_NODEPOOL)
        group = pools.get(pool, _Group()) if pool is not None else cluster
        if group.unhealthy > unhealthy_threshold(group.nodes):
            scope = f"NodePool {pool}" if pool is not None else "the cluster"
            message = (
                f"Node repair blocked: {group.unhealthy} of {group.nodes} nodes of {scope} are unhealthy, "
                f"more than the {ALLOWED_UNHEALTHY_PERCENT}% allowed"
            )
            blocked.append(RepairBlocked(n.name, claim.name, pool, u, message))
            continue
        labels = claim.metadata.labels or {}
        repairs.append(
            Repair(
                node=n.name,
                node_claim=claim.name,
                node_pool=pool,
                unhealthy=u,
                capacity_type=n.labels.get(wk.LABEL_CAPACITY_TYPE) or labels.get(wk.LABEL_CAPACITY_TYPE, ""),
                image_id=(claim.status.image_id if claim.status is not None else None) or "",
                deleting=claim.metadata.deletion_timestamp is not None,
            )
        )
    return RepairResult(tuple(repairs), tuple(blocked), next_due)
