"""Consolidation: which nodes consolidation may take, in what order, and whether some nodes' pods can run
elsewhere more cheaply. Pure. What multi-node and single-node consolidation share (Karpenter's ``consolidation.go``);
the two methods are ``multi_node_consolidation`` and ``single_node_consolidation``.

Which nodes consolidation considers (``unconsolidatable``, Karpenter's filter, in its order): a node whose
instance type the catalog does not know, or that lacks the capacity-type or zone label, cannot be priced
(Unconsolidatable); neither can consolidation take a node whose NodePool has consolidateAfter Never
(Unconsolidatable: disabled). Empty nodes are emptiness's; a busy node of a WhenEmpty NodePool is
Unconsolidatable; a node whose consolidateAfter has not passed is simply not considered yet; nodes of static
NodePools never are. These filters are consolidation's only: emptiness and drift still take such nodes.

Order (``consolidation_order``): best savings per disruption first, Karpenter's ratio of the node's price to
1 + the positive eviction costs of its pods; single-node consolidation interleaves the NodePools (the first
of each NodePool, by name, then the second of each, ...). Nodes of a NodePool whose budget (Underutilized) has
nothing left are reported blocked.

``consolidate`` turns a simulation (``nodeflow.disruption.simulation``) into a command or a reason why not:
- every pod placed on other nodes: DELETE the candidates (saving their whole price);
- the pods need exactly ONE new NodeClaim: REPLACE the candidates with it, its instance types narrowed to
  those strictly cheaper than the candidates together. An instance type is priced at its DEAREST offering
  the replacement may launch (its capacity type, any of its zones), as Karpenter's launch price is the
  worst case. The narrowed types must still meet the NodePool's minValues (under minValuesPolicy
  BestEffort, the minValues the unnarrowed replacement reached: consolidation never relaxes them further).
  Several candidates replaced by one: a type one of them already runs must also be strictly cheaper than
  the cheapest candidate of that type (otherwise deleting fewer nodes is the better move);
- spot-to-spot (all candidates spot, replacement spot) only with the setting on; several candidates
  need nothing more; ONE candidate needs at least ``spot_to_spot_min_types`` (15) cheaper types and is
  launched from the 15 cheapest (or as many as the cheapest that meet minValues, if more);
- anything else (pods left unschedulable, two or more new nodes, no saving): not consolidatable. "Two or more new
  nodes" is asked twice: the simulation sizes new nodes for cost (several small ones where they cost less than one
  large), so when it needs several, it runs again with the pods packed as Karpenter's scheduler packs them
  (``Simulator.run(..., packed=True)``, ``scheduling.solver.solve_packed``: one NodeClaim takes pods while any of
  its types holds them), and one new node there is the replacement, judged by the rules above; with the replace
  bar on (below), not one costing more than ``PACKED_SLACK`` times the nodes sized for cost (a dead end no later
  round leaves).
Given the NodePools' totals, a move of nodes of a NodePool with consolidationPolicy Balanced must also pass
its score (see ``nodeflow.disruption.balanced``), and a single node whose outright deletion would not pass is
not simulated at all; the command carries the scores. nodeflow's replace bar (``replace_bar``; not Karpenter's:
``Settings.replace_bar_k``, 4.5, 0 turns it off) then asks the same score of every REPLACE, whatever the NodePool's
policy, at 1/k: a replacement that saves little for the pods it evicts (an m5.2xlarge for an m5a.2xlarge, 10 %
saved for all its pods; dozens of nodes packed into one large node for a few percent) is refused, so consolidation
tries fewer nodes or ends instead of churning. Deletes are never held back. ``Consolidation.attempt`` then asks the
round whether the NodeflowPolicies admit the command (``method.Round.validate``).

Must not touch: the order in which the methods run and the budgets (``round``), the packing itself
(``nodeflow.scheduling``: simulations go through the solver), Kubernetes, AWS, the clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from nodeflow.api import labels as wk
from nodeflow.catalog.model import CatalogData, InstanceType
from nodeflow.disruption import balanced
from nodeflow.disruption.candidates import Candidate, settled
from nodeflow.disruption.method import BudgetClass, Round
from nodeflow.disruption.model import BlockKind, Command, Reason, Settings
from nodeflow.disruption.simulation import HOPELESS, Simulator, moves_of
from nodeflow.podutil import eviction_cost
from nodeflow.scheduling.packing import min_values_violation
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.types import NodeClaimPlan, SchedulingInput

__all__ = [
    "Consolidation",
    "ConsolidationMethod",
    "consolidate",
    "consolidation_order",
    "interleave_pools",
    "replace_bar",
    "type_prices",
    "unconsolidatable",
]


# --- which nodes consolidation considers, and in what order -------------------------------------------------------


def unconsolidatable(c: Candidate, catalog: CatalogData) -> str | None:
    """Why consolidation cannot consider ``c`` at all (an Unconsolidatable event), or None."""
    labels = c.node.metadata.labels or {}
    it = labels.get(wk.LABEL_INSTANCE_TYPE, "")
    if it not in catalog.infos:
        return f'instance type "{it}" not found'
    for key in (wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE):
        if key not in labels:
            return f'node does not have label "{key}"'
    if c.pool.spec.disruption.consolidate_after_seconds is None:
        return f"NodePool {c.pool_name} has consolidation disabled (consolidateAfter: Never)"
    if c.movable and c.pool.spec.disruption.consolidation_policy == "WhenEmpty":
        return f"NodePool {c.pool_name} has consolidation policy WhenEmpty, but node is not empty"
    return None


def _eviction_cost(c: Candidate) -> float:
    """1 + the positive eviction costs of ``c``'s pods (Karpenter's reschedule disruption cost)."""
    if c.reschedule_cost is not None:
        return c.reschedule_cost  # computed with the candidate
    return 1.0 + sum(max(0.0, eviction_cost(pod)) for pod in c.movable)


def consolidation_order(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Best savings per disruption first: price / (1 + positive eviction costs); ties keep their order."""
    return sorted(candidates, key=lambda c: -(c.price or 0.0) / _eviction_cost(c))


def interleave_pools(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The first candidate of each NodePool (by name), then the second of each, ... (order kept within one)."""
    by_pool: dict[str, list[Candidate]] = {}
    for c in candidates:
        by_pool.setdefault(c.pool_name, []).append(c)
    pools = sorted(by_pool)
    depth = max((len(v) for v in by_pool.values()), default=0)
    return [by_pool[p][i] for i in range(depth) for p in pools if i < len(by_pool[p])]


# --- what multi-node and single-node consolidation share in one round ---------------------------------------------


class Consolidation:
    """One round's consolidation state, shared by the multi-node and single-node methods (Karpenter's
    ``consolidation`` both embed): which candidates it wants, which of them are within budget, the NodePools'
    totals for Balanced, and one attempt at a command."""

    def __init__(self) -> None:
        self._totals: Mapping[str, balanced.PoolTotals] | None = None
        self._totals_done = False

    def should_disrupt(self, r: Round, c: Candidate) -> bool:
        """Busy, settled and consolidatable; an unconsolidatable candidate is reported (Unconsolidatable)."""
        if c.static:  # static NodePools are never consolidated
            return False
        why = unconsolidatable(c, r.catalog)
        if why is not None:
            r.block(c.name, BlockKind.UNCONSOLIDATABLE, why)
            return False
        return bool(c.movable) and settled(c, r.now)  # empty nodes are emptiness's

    def in_budget(self, r: Round, wanted: Sequence[Candidate]) -> list[Candidate]:
        """``wanted`` in consolidation order, those of NodePools with budget left; the others reported blocked."""
        eligible = consolidation_order(wanted)
        inside = [c for c in eligible if r.budgets.left(c.pool_name, Reason.UNDERUTILIZED) > 0]
        outside = [c for c in eligible if r.budgets.left(c.pool_name, Reason.UNDERUTILIZED) <= 0]
        r.budgets.within(outside, Reason.UNDERUTILIZED, r.blocked)
        return inside

    def totals(self, r: Round) -> Mapping[str, balanced.PoolTotals] | None:
        """The NodePools' totals over all their nodes (blocked and deleting ones too) when a NodePool is Balanced
        or the replace bar is on (``Settings.replace_bar_k``)."""
        if not self._totals_done:
            pools = r.snapshot.state.node_pools
            if r.settings.replace_bar_k > 0 or any(
                p.spec.disruption.consolidation_policy == balanced.BALANCED for p in pools
            ):
                self._totals = balanced.pool_totals(r.candidates)
            self._totals_done = True
        return self._totals

    def attempt(self, r: Round, candidates: Sequence[Candidate], method: str) -> Command | str:
        """A command consolidating ``candidates`` together that the policies admit, or why there is none."""
        totals = self.totals(r)
        outcome = consolidate(candidates, r.sim, r.settings, method, totals)
        if isinstance(outcome, str):
            return outcome
        return r.validate(outcome, candidates, lambda sim: consolidate(candidates, sim, r.settings, method, totals))


class ConsolidationMethod:
    """What the multi-node and single-node methods have in common: reason Underutilized, graceful, simulating,
    and the round's shared ``Consolidation`` deciding which candidates they want."""

    reason = Reason.UNDERUTILIZED
    budget_class = BudgetClass.GRACEFUL
    simulates = True
    evaluated_without_candidates = True

    def __init__(self, shared: Consolidation) -> None:
        self.shared = shared

    def should_disrupt(self, r: Round, c: Candidate) -> bool:
        return self.shared.should_disrupt(r, c)


# --- pricing the replacement --------------------------------------------------------------------------------------


def _pool_types(plan: NodeClaimPlan, base: SchedulingInput) -> dict[str, InstanceType]:
    """The instance types of ``plan``'s NodePool by name."""
    pool = next((p for p in base.nodepools if p.name == plan.nodepool), None)
    return {it.name: it for it in pool.instance_types} if pool else {}


def type_prices(plan: NodeClaimPlan, base: SchedulingInput, *, worst: bool = False) -> dict[str, float]:
    """The $/hour of each of ``plan``'s instance types over the available offerings of its capacity type in
    its zones: the cheapest, or (``worst``) the dearest, which is what a launch may cost."""
    by_name = _pool_types(plan, base)
    zones = set(plan.zones)
    pick = max if worst else min
    out: dict[str, float] = {}
    for name in plan.instance_types:
        it = by_name.get(name)
        if it is None:
            continue
        prices = [
            o.price
            for o in it.offerings
            if o.available and o.capacity_type == plan.capacity_type and (not zones or o.zone in zones)
        ]
        if prices:
            out[name] = pick(prices)
    return out


def _min_values_kept(plan: NodeClaimPlan, types: Sequence[str], base: SchedulingInput) -> str | None:
    """Karpenter's rule: a replacement narrowed by price must still span the NodePool's minValues. Under
    BestEffort the bar is what the unnarrowed replacement reached (relaxed once, never again)."""
    if not any(r.min_values for r in plan.requirements.values()):
        return None
    by_name = _pool_types(plan, base)
    reqs = plan.requirements
    if base.min_values_policy == "BestEffort":
        before = [by_name[t] for t in plan.instance_types if t in by_name]
        relaxed = []
        for r in reqs.values():
            reached = r.min_values
            if r.min_values:
                single = Requirements([dataclasses.replace(r, min_values=1)])
                reached = next(
                    (n for n in range(r.min_values, 0, -1) if min_values_violation(_with(single, n), before) is None),
                    0,
                )
            relaxed.append(dataclasses.replace(r, min_values=reached or None))
        reqs = Requirements(relaxed)
    return min_values_violation(reqs, [by_name[t] for t in types if t in by_name])


def _with(single: Requirements, n: int) -> Requirements:
    return Requirements(dataclasses.replace(r, min_values=n) for r in single.values())


def _first_meeting_min_values(plan: NodeClaimPlan, types: Sequence[str], base: SchedulingInput) -> int:
    """How many of ``types`` (cheapest first) it takes to meet minValues (0 without minValues)."""
    if not any(r.min_values for r in plan.requirements.values()):
        return 0
    by_name = _pool_types(plan, base)
    chosen = [by_name[t] for t in types if t in by_name]
    for n in range(1, len(chosen) + 1):
        if min_values_violation(plan.requirements, chosen[:n]) is None:
            return n
    return len(chosen)


def _same_type_cap(candidates: Sequence[Candidate], plan: NodeClaimPlan) -> float | None:
    """Several candidates replaced by one node: the price of the cheapest candidate whose instance type the
    replacement could also launch (the replacement must be cheaper than that, or deleting fewer is better)."""
    options = set(plan.instance_types)
    prices = [
        c.price
        for c in candidates
        if c.price is not None and (c.node.metadata.labels or {}).get(wk.LABEL_INSTANCE_TYPE) in options
    ]
    return min(prices) if prices else None


# The packed replacement may cost this much more than the nodes sized for cost that it stands for (rounding to
# whole instance types: two xlarge are not always one 2xlarge's price).
PACKED_SLACK = 1.25


def consolidate(
    candidates: Sequence[Candidate],
    sim: Simulator,
    settings: Settings,
    method: str,
    totals: Mapping[str, balanced.PoolTotals] | None = None,
) -> Command | str:
    """A delete or replace command for ``candidates`` together, or why there is none. With ``totals`` (the
    NodePools' totals, ``balanced.pool_totals``), a move of Balanced NodePools must also pass their scores."""
    unknown = [c.name for c in candidates if c.price is None]
    if unknown:
        return f"the price of node {unknown[0]} is unknown to the catalog"
    if totals is not None and len(candidates) == 1:
        best = balanced.best_case(candidates[0], totals)
        if best is not None:
            return f"Balanced consolidation: even deleting it would be rejected: {best.describe()}"
    outcome = _consolidate(candidates, sim, settings, method, totals)
    if totals is None or isinstance(outcome, str):
        return outcome
    if any(balanced.is_balanced(c) for c in candidates):
        approved, scores = balanced.evaluate(candidates, outcome.saved, totals)
        if not approved:
            why = _refusals(scores)
            return f"Balanced consolidation rejected the {outcome.decision} (saving ${outcome.saved:.4f}/h): {why}"
        outcome = dataclasses.replace(outcome, scores=scores)
    if not outcome.replacements:
        return outcome
    return replace_bar(candidates, outcome.saved, settings, totals) or outcome


def replace_bar(
    candidates: Sequence[Candidate],
    saved: float,
    settings: Settings,
    totals: Mapping[str, balanced.PoolTotals],
    *,
    at_most: bool = False,
) -> str | None:
    """Why replacing ``candidates`` for a saving of ``saved`` $/hour (``at_most``: a bound on it) saves too little
    for the pods it evicts (nodeflow's replace bar), or None: a REPLACE must score at least 1 /
    ``settings.replace_bar_k`` on Balanced's score in every NodePool of its candidates (0: no bar). Deletes are
    not asked."""
    if settings.replace_bar_k <= 0:
        return None
    approved, scores = balanced.evaluate(candidates, saved, totals, k=settings.replace_bar_k, every_pool=True)
    if approved:
        return None
    saving = f"saving at most ${saved:.4f}/h" if at_most else f"saving ${saved:.4f}/h"
    return f"the replacement saves too little for the pods it evicts ({saving}): {_refusals(scores)}"


def _rules_before_the_bar(candidates: Sequence[Candidate]) -> bool:
    """Whether a rule that judges the simulated replacement before the bar may refuse it, so the bound must not
    speak first (the Unconsolidatable message names that rule, as Karpenter's would): Balanced (its own score),
    spot-to-spot (every candidate spot) and minValues (a NodePool requirement carries them)."""
    if any(balanced.is_balanced(c) for c in candidates):
        return True
    if all(c.capacity_type == wk.CAPACITY_TYPE_SPOT for c in candidates):
        return True
    return any(r.min_values for c in candidates for r in c.pool.spec.template.spec.requirements)


def _refusals(scores: Sequence[balanced.Score]) -> str:
    """The NodePools whose score refuses a move, each with its score, threshold and shares."""
    return "; ".join(f"NodePool {s.nodepool}: {s.describe()}" for s in scores if not s.approved)


def _consolidate(
    candidates: Sequence[Candidate],
    sim: Simulator,
    settings: Settings,
    method: str,
    totals: Mapping[str, balanced.PoolTotals] | None = None,
) -> Command | str:
    before = sum(c.price or 0.0 for c in candidates)
    hopeless = sim.hopeless(candidates, before)
    if hopeless is not None:
        return hopeless
    if totals is not None and settings.replace_bar_k > 0 and not _rules_before_the_bar(candidates):
        # a bound before simulating: when the pods cannot all stay on the other nodes (summed room, or a pod no
        # node's room holds), any command is a replace costing at least the cheapest type that holds the rest; if
        # even that saving fails the bar, none passes
        floor = sim.replacement_floor(candidates, before, stranded=True)
        if floor is not None and floor >= before:
            return HOPELESS
        if floor is not None:
            low = replace_bar(candidates, before - floor, settings, totals, at_most=True)
            if low is not None:
                return low
    result = sim.run(candidates, cluster=True, consolidation=True)
    if len(result.node_claims) > 1 and not result.unschedulable:
        # sized for cost, the pods need several new nodes; packed as Karpenter packs them, they may fit one
        packed = sim.run(candidates, cluster=True, consolidation=True, packed=True)
        # one node for all of them; with the replace bar on (nodeflow's, not Karpenter's), not one that costs more
        # than the nodes sized for cost would (a few hundred pods on one 48xlarge): a dead end no later round can
        # leave (it never replaces one node by several), where fewer candidates let the later rounds reach the plan
        sized = sum(nc.price for nc in result.node_claims)
        dear = settings.replace_bar_k > 0 and packed.node_claims and packed.node_claims[0].price > sized * PACKED_SLACK
        if len(packed.node_claims) == 1 and not packed.unschedulable and not dear:
            result = packed
    if result.unschedulable:
        first = result.unschedulable[0]
        why = "; ".join(f"{k or 'no NodePool'}: {v}" if k else v for k, v in sorted(first.reasons.items()))
        return f"pod {first.pod} could not be rescheduled ({why})"
    moves = moves_of(result, candidates)
    if not result.node_claims:
        return Command(Reason.UNDERUTILIZED, method, tuple(c.name for c in candidates), (), moves, before, 0.0)
    if len(result.node_claims) > 1:
        return f"its pods need {len(result.node_claims)} new nodes; consolidation replaces with at most one"
    plan = result.node_claims[0]
    if plan.price >= before:
        return f"no cheaper replacement: the cheapest option costs ${plan.price:.4f}/h, now ${before:.4f}/h"
    worst = type_prices(plan, sim.base, worst=True)
    cheapest = type_prices(plan, sim.base)
    ordered = sorted((t for t in plan.instance_types if t in worst), key=lambda t: (cheapest[t], t))
    cheaper = [t for t in ordered if worst[t] < before]
    spot_to_spot = plan.capacity_type == wk.CAPACITY_TYPE_SPOT and all(
        c.capacity_type == wk.CAPACITY_TYPE_SPOT for c in candidates
    )
    if spot_to_spot and not settings.spot_to_spot_consolidation:
        return "spot-to-spot consolidation is disabled: a spot node is not replaced by a spot node"
    violation = _min_values_kept(plan, cheaper, sim.base)
    if violation is not None:
        return f"the cheaper instance types do not meet the NodePool's minValues ({violation})"
    if not cheaper:
        return "no cheaper replacement instance type"
    if len(candidates) > 1:
        cap = _same_type_cap(candidates, plan)
        if cap is not None:
            cheaper = [t for t in cheaper if worst[t] < cap]
            violation = _min_values_kept(plan, cheaper, sim.base)
            if not cheaper or violation is not None:
                return "the replacement is no cheaper than one of the candidates' own instance type"
    elif spot_to_spot:
        if len(cheaper) < settings.spot_to_spot_min_types:
            return (
                f"only {len(cheaper)} cheaper spot instance types; spot-to-spot consolidation needs "
                f"{settings.spot_to_spot_min_types}"
            )
        keep = max(settings.spot_to_spot_min_types, _first_meeting_min_values(plan, cheaper, sim.base))
        cheaper = cheaper[:keep]
    plan = dataclasses.replace(plan, instance_types=tuple(cheaper), price=min(cheapest[t] for t in cheaper))
    return Command(Reason.UNDERUTILIZED, method, tuple(c.name for c in candidates), (plan,), moves, before, plan.price)
