"""Multi-node consolidation: delete several nodes at once, or replace them by one cheaper node (Karpenter's
``multinodeconsolidation.go``). Pure.

Wants what consolidation wants (``consolidation.Consolidation.should_disrupt``). Takes them in consolidation
order (best savings per disruption first), only nodes of NodePools with Underutilized budget left and no more
of a NodePool than its budget allows, at most ``Settings.multi_node_candidates`` (100); then a binary search finds
the longest prefix, of at least 2 nodes, that consolidates together (``Consolidation.attempt``). Its failures
are not reported: single-node consolidation tries the same nodes next and reports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nodeflow.disruption.candidates import Candidate
from nodeflow.disruption.consolidation import ConsolidationMethod
from nodeflow.disruption.method import Round
from nodeflow.disruption.model import Command, Reason

__all__ = ["MultiNodeConsolidation", "longest_prefix"]


class MultiNodeConsolidation(ConsolidationMethod):
    """The multi-node consolidation method (see the module docstring)."""

    consolidation_type = "multi"

    def compute(self, r: Round, wanted: Sequence[Candidate]) -> Command | None:
        in_budget = self.shared.in_budget(r, wanted)
        # a batch takes no more nodes of a NodePool than its budget has left
        batch = r.budgets.within(in_budget, Reason.UNDERUTILIZED, [])[: r.settings.multi_node_candidates]
        return longest_prefix(batch, lambda cs: self.shared.attempt(r, cs, "multi-node consolidation"))


def longest_prefix(
    candidates: Sequence[Candidate], attempt: Callable[[Sequence[Candidate]], Command | str]
) -> Command | None:
    """Binary search for the longest prefix (>= 2 nodes) of ``candidates`` that consolidates."""
    low, high = 2, len(candidates)
    best: Command | None = None
    while low <= high:
        mid = (low + high) // 2
        outcome = attempt(candidates[:mid])
        if isinstance(outcome, Command):
            best = outcome
            low = mid + 1
        else:
            high = mid - 1
    return best
