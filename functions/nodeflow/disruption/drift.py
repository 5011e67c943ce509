"""Drift: replace the nodes that no longer match their NodePool or EC2NodeClass (Karpenter's ``drift.go``). Pure.

Wants every candidate of a non-static NodePool that drifted (``drift_detection.drift_reason``); drift is
eventual, so a node held only by its pods is taken when its NodeClaim has a terminationGracePeriod. Empty drifted
nodes first, then the earliest drifted (the NodeClaim's Drifted condition; drift found only now counts as now),
then disruption cost. The first one within the budgets (reason Drifted) whose pods can be rescheduled is the
command: replaced by as many NodeClaims as its pods need, or deleted when they fit elsewhere (on any other node,
one inside its consolidateAfter window too: Karpenter's drift simulation is no consolidation simulation). A
command the NodeflowPolicies refuse is simulated again under the ceilings and limits that could bind
(``Round.validate``); when that is refused too, the node is reported blocked and the next one is tried.

Must not touch: why a node is drifted (``drift_detection``), static NodePools (``static_drift``), budgets (``round``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial

from nodeflow.disruption.candidates import Candidate, _aware
from nodeflow.disruption.method import BudgetClass, Round
from nodeflow.disruption.model import BlockKind, Command, Reason
from nodeflow.disruption.simulation import Simulator, moves_of

__all__ = ["Drift", "drifted_at"]


def drifted_at(c: Candidate, now: datetime) -> datetime:
    """When the node drifted: its NodeClaim's Drifted condition (True) lastTransitionTime, else now."""
    cond = c.claim.status.condition("Drifted") if c.claim.status is not None else None
    if cond is not None and cond.status == "True" and cond.last_transition_time is not None:
        return min(_aware(cond.last_transition_time), now)
    return now


def _replaced(c: Candidate, sim: Simulator) -> Command | str:
    """The command replacing (or deleting) ``c`` as ``sim`` places its pods, or why its pods cannot move."""
    result = sim.run([c])
    if result.unschedulable:
        first = result.unschedulable[0]
        message = f"drifted, but pod {first.pod} could not be rescheduled"
        governed = sorted((k, v) for k, v in first.reasons.items() if ": policy " in v or " by policy " in v)
        if governed:  # a NodeflowPolicy closed a NodePool to it: say so
            message += " (" + "; ".join(f"{k}: {v}" for k, v in governed) + ")"
        return message
    after = sum(nc.price for nc in result.node_claims)
    return Command(Reason.DRIFTED, "drift", (c.name,), result.node_claims, moves_of(result), c.price or 0.0, after)


class Drift:
    """The drift method (see the module docstring)."""

    reason = Reason.DRIFTED
    budget_class = BudgetClass.EVENTUAL
    consolidation_type = ""
    simulates = True
    evaluated_without_candidates = True

    def should_disrupt(self, r: Round, c: Candidate) -> bool:
        return not c.static and bool(r.drift(c))

    def compute(self, r: Round, wanted: Sequence[Candidate]) -> Command | None:
        ordered = sorted(wanted, key=lambda c: (bool(c.movable), drifted_at(c, r.now)))  # stable: then disruption cost
        for c in r.budgets.within(ordered, Reason.DRIFTED, r.blocked):
            first = _replaced(c, r.sim)
            if isinstance(first, str):
                r.block(c.name, BlockKind.BLOCKED, first)
                continue
            outcome = r.validate(first, [c], partial(_replaced, c))
            if isinstance(outcome, str):
                r.block(c.name, BlockKind.BLOCKED, outcome)
                continue
            return outcome
        return None
