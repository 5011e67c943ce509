"""Single-node consolidation: delete one node, or replace it by one cheaper node (Karpenter's
``singlenodeconsolidation.go``). Pure.

Wants what consolidation wants (``consolidation.Consolidation.should_disrupt``). Tries the nodes of NodePools
with Underutilized budget left one at a time, in consolidation order with the NodePools interleaved (the first of
each NodePool, by name, then the second of each, ...), and takes the first that consolidates
(``Consolidation.attempt``); each node tried before it is reported Unconsolidatable with why.

Must not touch: what a simulation means (``consolidation``), budgets beyond asking which NodePools have
Underutilized budget left, Kubernetes, AWS, the clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeflow.disruption.candidates import Candidate
from nodeflow.disruption.consolidation import ConsolidationMethod, interleave_pools
from nodeflow.disruption.method import Round
from nodeflow.disruption.model import BlockKind, Command

__all__ = ["SingleNodeConsolidation"]


class SingleNodeConsolidation(ConsolidationMethod):
    """The single-node consolidation method (see the module docstring)."""

    consolidation_type = "single"

    def compute(self, r: Round, wanted: Sequence[Candidate]) -> Command | None:
        for c in interleave_pools(self.shared.in_budget(r, wanted)):  # one node per command
            outcome = self.shared.attempt(r, [c], "single-node consolidation")
            if isinstance(outcome, Command):
                return outcome
            r.block(c.name, BlockKind.UNCONSOLIDATABLE, outcome)
        return None
