"""Inputs and results of the disruption decisions: plain frozen data.

PURE (DESIGN.md rule 1): nothing here, or anywhere in ``nodeflow.disruption``, calls boto3 or the
Kubernetes API or reads the clock; the caller passes ``now``.

Must not touch: any decision; these are the shapes only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from nodeflow.api.core import PodDisruptionBudget
from nodeflow.api.labels import (  # re-exported: the drift rules read them
    ANNOTATION_EC2NODECLASS_HASH,
    ANNOTATION_SECURITY_GROUP_IDS,
    ANNOTATION_SUBNET_ID,
)
from nodeflow.scheduling.types import NodeClaimPlan

if TYPE_CHECKING:  # an annotation only: the replace step does not import the planner
    from nodeflow.cluster import ClusterState
    from nodeflow.disruption.balanced import Score
    from nodeflow.disruption.static import ScaleDown

__all__ = [
    "ANNOTATION_EC2NODECLASS_HASH",
    "ANNOTATION_SECURITY_GROUP_IDS",
    "ANNOTATION_SUBNET_ID",
    "REPLACE_BAR_K",
    "BlockKind",
    "Blocked",
    "Command",
    "Evaluation",
    "Expiration",
    "Move",
    "Reason",
    "RoundResult",
    "Settings",
    "Snapshot",
]


class Reason(StrEnum):
    """Why a node is disrupted (Karpenter's disruption reasons, as budgets name them)."""

    EMPTY = "Empty"
    DRIFTED = "Drifted"
    UNDERUTILIZED = "Underutilized"


class BlockKind(StrEnum):
    """The event a blocked candidate gets."""

    BLOCKED = "DisruptionBlocked"  # a blocker: do-not-disrupt, PDB, not initialized, deleting, budget
    UNCONSOLIDATABLE = "Unconsolidatable"  # no cheaper way to run its pods was found


# the replace bar's default k: Balanced's 2, 2.25 times laxer (docs/benchmarks/index.md, consolidation)
REPLACE_BAR_K = 4.5


@dataclass(frozen=True, slots=True)
class Settings:
    """Cluster-wide disruption settings (Karpenter's feature gates and constants)."""

    spot_to_spot_consolidation: bool = False
    multi_node_candidates: int = 100  # Karpenter's MultiNodeConsolidation candidate limit
    spot_to_spot_min_types: int = 15  # cheaper instance types needed for spot-to-spot replacement
    preference_policy: str = "Respect"  # "Ignore": the simulations drop preferences (Karpenter's option)
    min_values_policy: str = "Strict"  # "BestEffort": the simulations may relax minValues
    # nodeflow's replace bar (not Karpenter's): a consolidation REPLACE must score at least 1/k on Balanced's score
    # (savings fraction / disruption fraction in each of its NodePools, ``consolidation.replace_bar``); 0: no bar, as
    # Karpenter. ``disrupt --replace-bar-k``, the disruption Lambda's CONSOLIDATION_REPLACE_BAR_K
    replace_bar_k: float = REPLACE_BAR_K


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster as the disruption decisions see it.

    ``state`` holds nodes, NodeClaims, pods (bound ones with ``spec.nodeName``), NodePools and
    EC2NodeClasses. ``last_pod_events`` (node name -> time) overrides when a pod last arrived on or
    left a node; without it the time is the NodeClaim's ``status.lastPodEventTime``, else the latest
    creationTimestamp of the node's pods, else the node's creationTimestamp (see ``candidates``).
    """

    state: ClusterState
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    last_pod_events: Mapping[str, datetime] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Move:
    """One pod leaving a candidate: to an existing node (``node``) or a replacement (``replacement``)."""

    pod: str
    node: str | None = None
    replacement: int | None = None  # index into Command.replacements

    def to_json(self) -> dict[str, Any]:
        if self.node is not None:
            return {"pod": self.pod, "node": self.node}
        return {"pod": self.pod, "replacement": self.replacement}


@dataclass(frozen=True, slots=True)
class Command:
    """One voluntary disruption: delete ``candidates``, launching ``replacements`` first."""

    reason: Reason
    method: str  # "emptiness" | "drift" | "multi-node consolidation" | "single-node consolidation"
    candidates: tuple[str, ...]  # node names
    replacements: tuple[NodeClaimPlan, ...]
    moves: tuple[Move, ...]
    price_before: float  # $/hour of the candidates (what the command removes), not the cluster's
    price_after: float  # $/hour of the replacements (what it adds), not the cluster's
    scores: tuple[Score, ...] = ()  # consolidationPolicy Balanced: each Balanced NodePool's score of the move

    @property
    def saved(self) -> float:
        return self.price_before - self.price_after

    @property
    def decision(self) -> str:
        return "replace" if self.replacements else "delete"

    def to_json(self) -> dict[str, Any]:
        out = {
            "reason": self.reason.value,
            "method": self.method,
            "decision": self.decision,
            "candidates": list(self.candidates),
            "replacements": [r.to_json() for r in self.replacements],
            "moves": [m.to_json() for m in self.moves],
            "candidatesPricePerHour": round(self.price_before, 6),
            "replacementsPricePerHour": round(self.price_after, 6),
            "savedPerHour": round(self.saved, 6),
        }
        if self.scores:  # only moves of Balanced NodePools carry scores
            out["balanced"] = [s.to_json() for s in self.scores]
        return out


@dataclass(frozen=True, slots=True)
class Blocked:
    """A candidate that was not disrupted, and why (the event's message names the blocker)."""

    node: str
    kind: BlockKind
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "event": self.kind.value, "message": self.message}


@dataclass(frozen=True, slots=True)
class Expiration:
    """A node whose NodeClaim outlived expireAfter: terminated forcefully, budgets do not apply."""

    node: str
    node_claim: str
    expired_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "nodeClaim": self.node_claim, "expiredAt": self.expired_at.isoformat()}


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One disruption method a round tried, under Karpenter's labels: ``reason`` (``empty``, ``drifted``,
    ``underutilized``) and ``consolidation_type`` (``empty``, ``multi``, ``single``; empty for drift), how many
    nodes it found eligible, and how long it took by the caller's timer (0 without one)."""

    reason: str
    consolidation_type: str
    eligible: int
    seconds: float


@dataclass(frozen=True, slots=True)
class RoundResult:
    """At most one voluntary command, the forceful expirations, and the blocked candidates; ``evaluations``
    (the methods tried, in order, for the metrics) is not part of the decision: not compared, not in JSON."""

    command: Command | None
    expirations: tuple[Expiration, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    evaluations: tuple[Evaluation, ...] = field(default=(), compare=False)
    # Static NodePools above spec.replicas: the NodeClaims deleted to come down (``nodeflow.disruption.static``).
    scale_downs: tuple[ScaleDown, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = {
            "command": self.command.to_json() if self.command is not None else None,
            "expirations": [e.to_json() for e in self.expirations],
            "blocked": [b.to_json() for b in self.blocked],
        }
        if self.scale_downs:  # only when a static NodePool has more NodeClaims than its replicas
            out["scaleDowns"] = [s.to_json() for s in self.scale_downs]
        return out
