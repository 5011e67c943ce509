"""Pod constraints as the solver enforces them, and Karpenter's relaxation of preferences.

A pod's preferred terms are first enforced as if required. When the pod cannot be placed,
one preference is dropped and the pod is tried again, in Karpenter's order:

1. the heaviest preferred pod-affinity term,
2. the heaviest preferred pod-anti-affinity term,
3. the heaviest preferred node-affinity term (the next heaviest then becomes the enforced one),
4. a ``ScheduleAnyway`` topology spread constraint,
5. finally PreferNoSchedule taints are tolerated.

Karpenter first drops the required node-affinity OR-terms one at a time, down to the last, before
any preference. The solver tries every OR-term in order with all the preferences (the same tries),
and from the first relaxation on keeps only the last term, as Karpenter does.

Must not touch: where pods go (``solver``); only the order preferences are relaxed in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.types import AffinityTerm, PodInput, TopologySpread

__all__ = ["Constraints", "Preferences", "initial_preferences"]


@dataclass(frozen=True, slots=True)
class Constraints:
    """What a pod must satisfy at one step of relaxation (hashable: part of a group's identity)."""

    requirements: tuple[Requirements, ...]  # ORed alternatives
    spread: tuple[TopologySpread, ...]
    affinity: tuple[AffinityTerm, ...]  # pod affinity and anti-affinity terms, all enforced
    tolerate_prefer_no_schedule: bool


@dataclass(frozen=True, slots=True)
class Preferences:
    """The preferences of a pod still enforced, heaviest first."""

    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    node: tuple[tuple[int, Requirements], ...] = ()
    schedule_anyway: tuple[TopologySpread, ...] = ()
    tolerate_prefer_no_schedule: bool = False
    # The required OR-terms but the last are gone (every term was tried with all the preferences).
    last_term_only: bool = False

    def constraints(self, pod: PodInput) -> Constraints:
        requirements = pod.requirements[-1:] if self.last_term_only else pod.requirements
        if self.node:
            heaviest = self.node[0][1]
            requirements = tuple(alt.add(heaviest) for alt in requirements)
        required_spread = tuple(s for s in pod.spread if not s.schedule_anyway)
        required_affinity = tuple(t for t in pod.affinity if t.weight == 0)
        return Constraints(
            requirements=requirements,
            spread=required_spread + self.schedule_anyway,
            affinity=required_affinity + self.affinity + self.anti_affinity,
            tolerate_prefer_no_schedule=self.tolerate_prefer_no_schedule,
        )

    def relax(self) -> tuple[Preferences, str] | None:
        """One preference fewer, and what was dropped; None when nothing is left to relax."""
        relaxed = self._relax_one()
        if relaxed is None or self.last_term_only:
            return relaxed
        return replace(relaxed[0], last_term_only=True), relaxed[1]

    def _relax_one(self) -> tuple[Preferences, str] | None:
        if self.affinity:
            return replace(self, affinity=self.affinity[1:]), "preferred pod affinity"
        if self.anti_affinity:
            return replace(self, anti_affinity=self.anti_affinity[1:]), "preferred pod anti-affinity"
        if self.node:
            return replace(self, node=self.node[1:]), "preferred node affinity"
        if self.schedule_anyway:
            return replace(self, schedule_anyway=self.schedule_anyway[1:]), "ScheduleAnyway topology spread"
        if not self.tolerate_prefer_no_schedule:
            return replace(self, tolerate_prefer_no_schedule=True), "PreferNoSchedule taints"
        return None


def initial_preferences(pod: PodInput, ignore: bool = False) -> Preferences:
    """Every preference enforced (Karpenter's Respect policy), or none (Ignore)."""
    if ignore:
        return Preferences(tolerate_prefer_no_schedule=True)

    def by_weight(terms: tuple[AffinityTerm, ...]) -> tuple[AffinityTerm, ...]:
        # Stable: equal weights keep their spec order.
        return tuple(sorted(terms, key=lambda t: -t.weight))

    preferred = tuple(t for t in pod.affinity if t.weight > 0)
    return Preferences(
        affinity=by_weight(tuple(t for t in preferred if not t.anti)),
        anti_affinity=by_weight(tuple(t for t in preferred if t.anti)),
        node=tuple(sorted(pod.preferred, key=lambda wt: -wt[0])),
        schedule_anyway=tuple(s for s in pod.spread if s.schedule_anyway),
    )
