"""Multi-node consolidation: delete several nodes at once, or replace them by one cheaper node (Karpenter's
``multinodeconsolidation.go``). Pure.

Wants what consolidation wants (``consolidation.Consolidation.should_disrupt``). Takes them in consolidation
order (best savings per disruption first), only nodes of NodePools with Underutilized budget left and no more
of a NodePool than its budget allows, at most ``Settings.multi_node_candidates`` (100); then a binary search finds
the longest prefix, of at least 2 nodes, that consolidates together (``Consolidation.attempt``), as Karpenter's
does. Its failures are not reported: single-node consolidation tries the same nodes next and reports them.

The search goes one step further than Karpenter's (every command it may return is still one Karpenter's rules
allow: a set of candidates within budget, deleted, or replaced by ONE cheaper node): a right-sized candidate (no
instance type cheaper than it holds its pods, ``Simulator.right_sized``: e.g. a large node an earlier
consolidation made) placed early in the order makes every longer prefix fail, since its pods need a node as dear
as itself. So when the batch holds right-sized candidates, the same binary search also runs over the batch with
those moved last (their order kept), and the command saving more $/hour of the two is taken (Karpenter's on a
tie). Prefixes both searches try are simulated once.

Must not touch: what a simulation means (``consolidation``), the single-node fallback's reports, Kubernetes, AWS,
the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nodeflow.disruption.candidates import Candidate
from nodeflow.disruption.consolidation import ConsolidationMethod
from nodeflow.disruption.method import Round
from nodeflow.disruption.model import Command, Reason
from nodeflow.scheduling.pricing import PRICE_EPSILON

__all__ = ["MultiNodeConsolidation", "longest_prefix", "right_sized_last"]


class MultiNodeConsolidation(ConsolidationMethod):
    """The multi-node consolidation method (see the module docstring)."""

    consolidation_type = "multi"

    def compute(self, r: Round, wanted: Sequence[Candidate]) -> Command | None:
        in_budget = self.shared.in_budget(r, wanted)
        # a batch takes no more nodes of a NodePool than its budget has left
        batch = r.budgets.within(in_budget, Reason.UNDERUTILIZED, [])[: r.settings.multi_node_candidates]
        tried: dict[tuple[str, ...], Command | str] = {}

        def attempt(cs: Sequence[Candidate]) -> Command | str:
            key = tuple(c.name for c in cs)
            if key not in tried:
                tried[key] = self.shared.attempt(r, cs, "multi-node consolidation")
            return tried[key]

        best = longest_prefix(batch, attempt)
        reordered = right_sized_last(batch, r.sim.right_sized) if len(batch) > 2 else batch
        if reordered != batch:
            other = longest_prefix(reordered, attempt)
            if other is not None and (best is None or other.saved > best.saved + PRICE_EPSILON):
                return other
        return best


def right_sized_last(candidates: Sequence[Candidate], right_sized: Callable[[Candidate], bool]) -> list[Candidate]:
    """``candidates`` with the right-sized ones moved last, each part in its order."""
    sized = [right_sized(c) for c in candidates]
    return [c for c, s in zip(candidates, sized, strict=True) if not s] + [
        c for c, s in zip(candidates, sized, strict=True) if s
    ]


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
