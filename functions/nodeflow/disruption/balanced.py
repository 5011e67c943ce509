"""Balanced consolidation: Karpenter v1.14's ``consolidationPolicy: Balanced``.

A NodePool with policy Balanced consolidates like WhenEmptyOrUnderutilized (same candidates, same
consolidateAfter, budgets, order and simulations), but a move (delete or replace of one or more nodes) is
taken only when its savings justify its disruption, both measured against the NodePool as a whole:

    savings fraction    = the move's $/hour saved              / the NodePool's $/hour (all its nodes)
    disruption fraction = the move's disruption cost           / the NodePool's disruption cost (all its nodes)
    score               = savings fraction / disruption fraction          approved when score >= 1/k, k = 2

A node's disruption cost is 1 (the cost of draining any node) plus the positive eviction costs of the pods
that must move (``podutil.eviction_cost``: 1 per pod, raised or lowered by pod-deletion-cost and priority, in
[-10, 10]; negatives count 0). A move's disruption cost is the sum over its nodes. Savings of zero or less
score 0 (never approved); a NodePool with no cost scores 0 too. Every node of the NodePool counts in its
totals, blocked and deleting ones included (the move's own nodes too).

A move over several NodePools is scored once per Balanced NodePool among its nodes, with that NodePool's
disruption and its share of the savings (the saving times its nodes' share of the moved nodes' price); it is
approved only when every Balanced NodePool approves. Other NodePools' nodes are not scored.

Single-node consolidation first checks a node's best case, deleting it outright: if even that scores below
1/k, no replace can pass and the node is not simulated. Emptiness, drift and expiration are not scored.
Consolidation's replace bar (nodeflow's, ``consolidation.replace_bar``) asks the same score of every replace, in
NodePools of any policy, at a laxer k (``evaluate(..., k=..., every_pool=True)``).

Must not touch: which moves exist (the consolidation methods propose them; this module only approves or refuses),
Kubernetes, AWS, the clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeflow.disruption.candidates import Candidate
from nodeflow.podutil import eviction_cost

__all__ = [
    "BALANCED",
    "BALANCED_K",
    "PER_NODE_DISRUPTION_COST",
    "PoolTotals",
    "Score",
    "best_case",
    "evaluate",
    "is_balanced",
    "pool_totals",
    "score_move",
]

BALANCED = "Balanced"
BALANCED_K = 2  # Karpenter's fixed k for Balanced: the smallest that lets a same-family halving replace pass
PER_NODE_DISRUPTION_COST = 1.0  # draining any node costs something, even an empty one


def is_balanced(c: Candidate) -> bool:
    return c.pool.spec.disruption.consolidation_policy == BALANCED


@dataclass(frozen=True, slots=True)
class PoolTotals:
    """A NodePool's denominators: the $/hour of all its nodes and the sum of their disruption costs."""

    cost: float
    disruption: float


@dataclass(frozen=True, slots=True)
class Score:
    """One Balanced NodePool's verdict on a move."""

    nodepool: str
    savings: float  # $/hour of the move attributed to this NodePool
    disruption: float  # the disruption cost of the move's nodes of this NodePool
    totals: PoolTotals
    savings_fraction: float
    disruption_fraction: float
    k: float = BALANCED_K  # Balanced: 2; consolidation's replace bar: Settings.replace_bar_k

    @property
    def score(self) -> float:
        if not self.savings_fraction > 0:  # zero, negative (or NaN): no benefit
            return 0.0
        if self.disruption_fraction == 0:
            return math.inf
        return self.savings_fraction / self.disruption_fraction

    @property
    def threshold(self) -> float:
        return 1.0 / self.k

    @property
    def approved(self) -> bool:
        return self.score >= self.threshold

    def describe(self) -> str:
        """As Karpenter's ConsolidationApproved / rejected message: score, threshold, k and the two fractions."""
        op = ">=" if self.approved else "<"
        return (
            f"score {self.score:.2f} {op} threshold {self.threshold:.2f} (k: {self.k}, "
            f"savings {self.savings_fraction * 100:.1f}%, disruption {self.disruption_fraction * 100:.1f}%)"
        )

    def to_json(self) -> dict[str, Any]:
        score = self.score
        return {
            "nodepool": self.nodepool,
            "score": round(score, 6) if math.isfinite(score) else None,
            "threshold": round(self.threshold, 6),
            "k": self.k,
            "approved": self.approved,
            "savingsFraction": round(self.savings_fraction, 6),
            "disruptionFraction": round(self.disruption_fraction, 6),
            "savedPerHour": round(self.savings, 6),
            "disruptionCost": round(self.disruption, 6),
            "nodePoolPricePerHour": round(self.totals.cost, 6),
            "nodePoolDisruptionCost": round(self.totals.disruption, 6),
        }


def score_move(
    savings: float, disruption: float, totals: PoolTotals, nodepool: str = "", k: float = BALANCED_K
) -> Score:
    """Score a move of ``savings`` $/hour and ``disruption`` cost against ``totals`` (no totals: scores 0)."""
    if totals.cost <= 0 or totals.disruption <= 0:
        return Score(nodepool, savings, disruption, totals, 0.0, 0.0, k)
    return Score(nodepool, savings, disruption, totals, savings / totals.cost, disruption / totals.disruption, k)


def _price(c: Candidate) -> float:
    """The node's $/hour; unknown or NaN counts 0 (it must not poison the NodePool's total)."""
    return c.price if c.price is not None and math.isfinite(c.price) and c.price > 0 else 0.0


def _disruption(c: Candidate) -> float:
    if c.reschedule_cost is not None:
        return c.reschedule_cost
    return PER_NODE_DISRUPTION_COST + sum(max(0.0, eviction_cost(p)) for p in c.movable)


def pool_totals(candidates: Iterable[Candidate]) -> dict[str, PoolTotals]:
    """The totals of every NodePool among ``candidates`` (pass ALL the managed nodes, blocked ones too)."""
    cost: dict[str, float] = {}
    disruption: dict[str, float] = {}
    for c in candidates:
        cost[c.pool_name] = cost.get(c.pool_name, 0.0) + _price(c)
        disruption[c.pool_name] = disruption.get(c.pool_name, 0.0) + _disruption(c)
    return {name: PoolTotals(cost[name], disruption[name]) for name in cost}


def evaluate(
    candidates: Sequence[Candidate],
    saved: float,
    totals: Mapping[str, PoolTotals],
    *,
    k: float = BALANCED_K,
    every_pool: bool = False,
) -> tuple[bool, tuple[Score, ...]]:
    """Does every Balanced NodePool among ``candidates`` approve the move that saves ``saved`` $/hour, and
    each one's score (by NodePool name; NodePools of other policies are not scored). With ``every_pool``, every
    NodePool among them is scored, whatever its policy (consolidation's replace bar), against ``k``."""
    if not candidates:
        return False, ()
    by_pool: dict[str, list[Candidate]] = {}
    for c in candidates:
        by_pool.setdefault(c.pool_name, []).append(c)
    source = sum(_price(c) for c in candidates)
    scores: list[Score] = []
    for name in sorted(by_pool):
        own = by_pool[name]
        if not every_pool and not is_balanced(own[0]):
            continue
        share = saved
        if source > 0 and len(by_pool) > 1:
            share = saved * (sum(_price(c) for c in own) / source)
        disruption = sum(_disruption(c) for c in own)
        scores.append(score_move(share, disruption, totals.get(name, PoolTotals(0.0, 0.0)), name, k))
    return all(s.approved for s in scores), tuple(scores)


def best_case(c: Candidate, totals: Mapping[str, PoolTotals]) -> Score | None:
    """The score of deleting ``c`` outright when it is of a Balanced NodePool and even that is rejected (no
    move of it can pass), else None."""
    if not is_balanced(c):
        return None
    pool = totals.get(c.pool_name)
    if pool is None or pool.cost <= 0:
        return None
    score = score_move(_price(c), _disruption(c), pool, c.pool_name)
    return None if score.approved else score
