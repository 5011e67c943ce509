"""Emptiness: delete the nodes that run nothing worth a node (Karpenter's ``emptiness.go``). Pure.

Wants every unblocked candidate (graceful) of a non-static NodePool that holds only DaemonSet and mirror pods
and whose last pod event is at least consolidateAfter ago (``candidates.settled``; never with consolidateAfter
Never), whatever the consolidation policy (WhenEmpty, WhenEmptyOrUnderutilized, Balanced). It deletes as many
of them together as the budgets (reason Empty) allow, in disruption-cost order; the others are reported blocked
by their budget. No replacement, so no simulation and no policy check.

Must not touch: nodes with pods to move (consolidation), budgets (``round``), the clock (``now`` is an input).
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeflow.disruption.candidates import Candidate, settled
from nodeflow.disruption.method import BudgetClass, Round
from nodeflow.disruption.model import Command, Reason

__all__ = ["Emptiness"]


class Emptiness:
    """The emptiness method (see the module docstring)."""

    reason = Reason.EMPTY
    budget_class = BudgetClass.GRACEFUL
    consolidation_type = "empty"
    simulates = False
    evaluated_without_candidates = True

    def should_disrupt(self, r: Round, c: Candidate) -> bool:
        return not c.movable and settled(c, r.now) and not c.static

    def compute(self, r: Round, wanted: Sequence[Candidate]) -> Command | None:
        chosen = r.budgets.within(wanted, Reason.EMPTY, r.blocked)
        if not chosen:
            return None
        before = sum(c.price or 0.0 for c in chosen)
        return Command(Reason.EMPTY, "emptiness", tuple(c.name for c in chosen), (), (), before, 0.0)
