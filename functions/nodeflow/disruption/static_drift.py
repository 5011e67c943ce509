"""Static drift: replace a drifted node of a static NodePool by its pool's template (Karpenter's
``staticdrift.go``, tried after emptiness and before drift). Pure.

Wants the candidates of static NodePools (``spec.replicas``) that drifted (``drift_detection.drift_reason``;
eventual, as drift). The first of them, one per NodePool in the round's order, whose pool allows it is replaced
by a new NodeClaim of its pool's template (``nodeflow.scheduling.static_capacity.static_plan``), not by a simulation of
its pods: not while the pool is above its replicas (scale-down first, ``nodeflow.disruption.static``), not beyond
the pool's disruption budget for Drifted, and not when ``limits.nodes`` leaves no room for the replacement. A
replacement the NodeflowPolicies refuse (a ceiling or group limit) is not taken and the node is reported blocked.

Must not touch: why a node is drifted (``drift_detection``), non-static NodePools (``drift``), budgets (``round``).
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeflow.disruption.candidates import Candidate
from nodeflow.disruption.method import BudgetClass, Round
from nodeflow.disruption.model import BlockKind, Command, Reason
from nodeflow.scheduling.static_capacity import is_static, node_limit, static_counts, static_plan
from nodeflow.scheduling.types import NodeClaimPlan

__all__ = ["STATIC_DRIFT", "StaticDrift"]

STATIC_DRIFT = "static drift"


def _template(r: Round, pool: str) -> NodeClaimPlan | None:
    """A new NodeClaim of static NodePool ``pool``'s template, or None when it cannot make one."""
    inputs = {p.name: p for p in r.base.static_pools}.get(pool)
    made = static_plan(inputs, r.base.daemon_pods) if inputs is not None else None
    return made if isinstance(made, NodeClaimPlan) else None


class StaticDrift:
    """The static drift method (see the module docstring)."""

    reason = Reason.DRIFTED
    budget_class = BudgetClass.EVENTUAL
    consolidation_type = ""
    simulates = True  # the replacement is made from the cluster's solver input (``Round.base``)
    evaluated_without_candidates = False

    def should_disrupt(self, r: Round, c: Candidate) -> bool:
        return c.static and bool(r.drift(c))

    def compute(self, r: Round, wanted: Sequence[Candidate]) -> Command | None:
        command = self._first(r, wanted)
        if command is None:
            return None
        outcome = r.validate(command, [c for c in wanted if c.name in command.candidates])
        if isinstance(outcome, str):
            for name in command.candidates:
                r.block(name, BlockKind.BLOCKED, outcome)
            return None
        return outcome

    def _first(self, r: Round, drifted: Sequence[Candidate]) -> Command | None:
        """The first drifted static node (in ``drifted``'s order) whose pool allows it (see the module docstring),
        with a new NodeClaim of its pool in its place."""
        state = r.snapshot.state
        seen: set[str] = set()
        for c in drifted:
            pool = c.pool
            if not is_static(pool) or pool.name in seen:
                continue
            seen.add(pool.name)
            if r.budgets.left(pool.name, Reason.DRIFTED) <= 0:
                continue
            count = static_counts(pool.name, state.node_claims, state.nodes)
            if len(count.active) + len(count.pending_disruption) > (pool.spec.replicas or 0):
                continue  # scaling down first
            limit = node_limit(pool)
            if limit is not None and limit - count.total <= 0:
                continue  # no room for the replacement under limits.nodes
            plan = _template(r, pool.name)
            if plan is None:
                continue
            return Command(Reason.DRIFTED, STATIC_DRIFT, (c.name,), (plan,), (), c.price or 0.0, plan.price)
        return None
