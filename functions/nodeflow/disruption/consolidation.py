"""Simulation and consolidation: can the pods of some nodes run elsewhere, and more cheaply?

``Simulator.run(candidates)`` asks the solver (the same one the provisioner uses) to place the
candidates' movable pods on the OTHER nodes (existing and launching) plus new NodeClaims from any
NodePool. Pending pods are not part of the simulation: they are the provisioner's.

Before simulating, ``Simulator.hopeless`` rules candidates out cheaply (a necessary condition, see
there), which keeps a round over a full cluster fast.

``consolidate`` turns a simulation into a command or a reason why not:
- every pod placed on other nodes: DELETE the candidates (saving their whole price);
- the pods need exactly ONE new NodeClaim whose cheapest option is strictly cheaper than the
  candidates together: REPLACE them with it, its instance types narrowed to those strictly cheaper
  (which must still meet the NodePool's minValues, unless ``minValuesPolicy`` is BestEffort);
- spot-to-spot replacement (all candidates spot, replacement spot) only with the setting on, for one
  candidate at a time, and when at least ``spot_to_spot_min_types`` cheaper types exist;
- anything else (pods left unschedulable, two or more new nodes, no saving): not consolidatable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType
from nodeflow.disruption.candidates import Candidate
from nodeflow.disruption.model import Command, Move, Reason, Settings
from nodeflow.scheduling.solver import min_values_violation, solve, type_matches
from nodeflow.scheduling.types import NodeClaimPlan, NodeInput, PodInput, SchedulingInput, SchedulingResult

__all__ = ["Simulator", "consolidate", "moves_of", "type_prices"]


@dataclass(frozen=True, slots=True)
class _Offer:
    price: float
    allocatable: Mapping[str, int]


def _free(node: NodeInput) -> dict[str, int]:
    return {k: max(0, v - node.requested.get(k, 0)) for k, v in node.allocatable.items()}


@dataclass(frozen=True, slots=True)
class Simulator:
    base: SchedulingInput  # the whole cluster's solver input (pools, nodes, daemons)
    pods: Mapping[str, PodInput]  # every bound pod, as solver input
    free: dict[str, int] = field(init=False)  # room left on every schedulable node, summed
    offers: tuple[_Offer, ...] = field(init=False)  # every type any usable pool may launch, cheapest first

    def __post_init__(self) -> None:
        free: dict[str, int] = {}
        for node in self.base.nodes:
            if node.schedulable:
                for k, v in _free(node).items():
                    free[k] = free.get(k, 0) + v
        offers: list[_Offer] = []
        for pool in self.base.nodepools:
            if pool.error is not None:
                continue
            zone = pool.requirements.get(wk.LABEL_ZONE)
            ctype = pool.requirements.get(wk.LABEL_CAPACITY_TYPE)
            for it in pool.instance_types:
                if not type_matches(it, pool.requirements):
                    continue
                prices = [
                    o.price
                    for o in it.offerings
                    if o.available
                    and (zone is None or zone.has(o.zone))
                    and (ctype is None or ctype.has(o.capacity_type))
                ]
                if prices:
                    offers.append(_Offer(min(prices), it.allocatable))
        object.__setattr__(self, "free", free)
        object.__setattr__(self, "offers", tuple(sorted(offers, key=lambda o: o.price)))

    def hopeless(self, candidates: Sequence[Candidate], before: float) -> str | None:
        """A cheap NECESSARY condition checked before simulating: the pods that cannot fit in the room
        left on the other nodes (summed, constraints ignored) must fit one instance type cheaper than
        ``before``. Returns why not, or None when a simulation is worth running."""
        names = {c.name for c in candidates}
        free = dict(self.free)
        for node in self.base.nodes:
            if node.name in names and node.schedulable:
                for k, v in _free(node).items():
                    free[k] = free.get(k, 0) - v
        need: dict[str, int] = {}
        for c in candidates:
            for p in c.movable:
                inp = self.pods.get(p.key)
                for k, v in (inp.requests if inp is not None else {}).items():
                    need[k] = need.get(k, 0) + v
        need = {k: v - free.get(k, 0) for k, v in need.items() if v > free.get(k, 0)}
        if not need:
            return None
        for offer in self.offers:
            if offer.price >= before:
                break
            if all(offer.allocatable.get(k, 0) >= v for k, v in need.items()):
                return None
        return "its pods fit neither on the other nodes nor on any cheaper instance type"

    def run(self, candidates: Sequence[Candidate]) -> SchedulingResult:
        names = {c.name for c in candidates}
        pods = tuple(
            self.pods[p.key] for c in candidates for p in c.movable if p.key in self.pods and p.key not in c.held
        )
        inp = dataclasses.replace(self.base, pods=pods, nodes=tuple(n for n in self.base.nodes if n.name not in names))
        return solve(inp)


def moves_of(result: SchedulingResult) -> tuple[Move, ...]:
    moves = [Move(pod=p, node=e.name) for e in result.existing for p in e.pods]
    moves += [Move(pod=p, replacement=i) for i, nc in enumerate(result.node_claims) for p in nc.pods]
    return tuple(sorted(moves, key=lambda m: m.pod))


def _pool_types(plan: NodeClaimPlan, base: SchedulingInput) -> dict[str, InstanceType]:
    """The instance types of ``plan``'s NodePool by name."""
    pool = next((p for p in base.nodepools if p.name == plan.nodepool), None)
    return {it.name: it for it in pool.instance_types} if pool else {}


def type_prices(plan: NodeClaimPlan, base: SchedulingInput) -> dict[str, float]:
    """The $/hour of each of ``plan``'s instance types, cheapest available offering of its capacity
    type in its zones."""
    by_name = _pool_types(plan, base)
    zones = set(plan.zones)
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
            out[name] = min(prices)
    return out


def _narrowed_min_values(plan: NodeClaimPlan, types: Sequence[str], base: SchedulingInput) -> str | None:
    """Karpenter's rule: a replacement narrowed to cheaper types must still span the NodePool's
    minValues (unless the policy is BestEffort)."""
    if base.min_values_policy == "BestEffort" or not any(r.min_values for r in plan.requirements.values()):
        return None
    by_name = _pool_types(plan, base)
    return min_values_violation(plan.requirements, [by_name[t] for t in types if t in by_name])


def consolidate(candidates: Sequence[Candidate], sim: Simulator, settings: Settings, method: str) -> Command | str:
    """A delete or replace command for ``candidates`` together, or why there is none."""
    unknown = [c.name for c in candidates if c.price is None]
    if unknown:
        return f"the price of node {unknown[0]} is unknown to the catalog"
    before = sum(c.price or 0.0 for c in candidates)
    hopeless = sim.hopeless(candidates, before)
    if hopeless is not None:
        return hopeless
    result = sim.run(candidates)
    if result.unschedulable:
        first = result.unschedulable[0]
        why = "; ".join(f"{k or 'no NodePool'}: {v}" for k, v in sorted(first.reasons.items()))
        return f"pod {first.pod} could not be rescheduled ({why})"
    if not result.node_claims:
        return Command(
            Reason.UNDERUTILIZED, method, tuple(c.name for c in candidates), (), moves_of(result), before, 0.0
        )
    if len(result.node_claims) > 1:
        return f"its pods need {len(result.node_claims)} new nodes; consolidation replaces with at most one"
    plan = result.node_claims[0]
    if plan.price >= before:
        return f"no cheaper replacement: the cheapest option costs ${plan.price:.4f}/h, now ${before:.4f}/h"
    prices = type_prices(plan, sim.base)
    cheaper = tuple(t for t in plan.instance_types if prices.get(t, before) < before)
    if (
        all(c.capacity_type == wk.CAPACITY_TYPE_SPOT for c in candidates)
        and plan.capacity_type == wk.CAPACITY_TYPE_SPOT
    ):
        if not settings.spot_to_spot_consolidation:
            return "spot-to-spot consolidation is disabled"
        if len(candidates) > 1:
            return "spot-to-spot consolidation replaces one node at a time"
        if len(cheaper) < settings.spot_to_spot_min_types:
            return (
                f"only {len(cheaper)} cheaper spot instance types; spot-to-spot consolidation needs "
                f"{settings.spot_to_spot_min_types}"
            )
    if not cheaper:
        return "no cheaper replacement instance type"
    violation = _narrowed_min_values(plan, cheaper, sim.base)
    if violation is not None:
        return f"the cheaper instance types do not meet the NodePool's minValues ({violation})"
    plan = dataclasses.replace(plan, instance_types=cheaper)
    return Command(
        Reason.UNDERUTILIZED, method, tuple(c.name for c in candidates), (plan,), moves_of(result), before, plan.price
    )
