"""Simulation and consolidation: can the pods of some nodes run elsewhere, and more cheaply?

Which nodes consolidation considers (``unconsolidatable``, Karpenter's filter, in its order): a node whose
instance type the catalog does not know, or that lacks the capacity-type or zone label, cannot be priced
(Unconsolidatable); neither can consolidation take a node whose NodePool has consolidateAfter Never
(Unconsolidatable: disabled). Empty nodes are emptiness's; a busy node of a WhenEmpty NodePool is
Unconsolidatable; a node whose consolidateAfter has not passed is simply not considered yet. These filters
are consolidation's only: emptiness and drift still take such nodes.

Order (``consolidation_order``): best savings per disruption first, Karpenter's ratio of the node's price to
1 + the positive eviction costs of its pods; single-node consolidation interleaves the NodePools (the first
of each NodePool, by name, then the second of each, ...).

``Simulator.run(candidates, cluster=True)`` simulates as Karpenter does: the pods of nodes already being
deleted (they are leaving too) and the cluster's pending pods take their places first, on any other node
(existing or launching; a pending pod that fits nowhere is not the candidates' concern), then the
candidates' movable pods (not those held by do-not-disrupt or a PodDisruptionBudget) go to the other nodes
plus new NodeClaims from any NodePool, sharing new capacity with the pods carried over. Nodes being deleted
are no destination; neither, for the candidates' pods, is a node inside its consolidateAfter window
(``on_hold``: its NodeClaim's last pod event, else its initialization, less than consolidateAfter ago), in
consolidation only (``run(..., consolidation=True)``, Karpenter's IsConsolidationSimulation: drift's
simulation does not pass it, so a drifted node's pods may go to such a node). A
simulation that needs an uninitialized node (not yet initialized, or still launching) for a candidate's pod
fails: pods are packed on initialized nodes first, and only if one would still need an uninitialized node
is the move refused (Karpenter cannot trust a node that has not finished initializing). Drift uses
``run(candidates)``: the candidate's pods only, onto any node (consolidateAfter windows do not hold nodes).

Before simulating, ``Simulator.hopeless`` rules candidates out cheaply (a necessary condition, see
there), which keeps a round over a full cluster fast.

``consolidate`` turns a simulation into a command or a reason why not:
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
- anything else (pods left unschedulable, two or more new nodes, no saving): not consolidatable.
Given the NodePools' totals, a move of nodes of a NodePool with consolidationPolicy Balanced must also pass
its score (see ``nodeflow.disruption.balanced``), and a single node whose outright deletion would not pass is
not simulated at all; the command carries the scores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from nodeflow.api import labels as wk
from nodeflow.api.core import Pod
from nodeflow.api.duration import shift
from nodeflow.catalog.model import CatalogData, InstanceType
from nodeflow.disruption import balanced
from nodeflow.disruption.candidates import Candidate
from nodeflow.disruption.model import Command, Move, Reason, Settings
from nodeflow.plan import ClusterState, pod_converter
from nodeflow.podutil import eviction_cost
from nodeflow.scheduling.packing import min_values_violation
from nodeflow.scheduling.pricing import type_matches
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.types import (
    CeilingInput,
    GroupLimitInput,
    NodeClaimPlan,
    NodeInput,
    PodInput,
    SchedulingInput,
    SchedulingResult,
    UnschedulablePod,
)

__all__ = [
    "PodInputs",
    "Simulator",
    "consolidate",
    "consolidation_order",
    "interleave_pools",
    "moves_of",
    "on_hold",
    "type_prices",
    "unconsolidatable",
]


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


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


def on_hold(candidates: Iterable[Candidate], last_pod_events: Mapping[str, datetime], now: datetime) -> frozenset[str]:
    """The nodes inside their consolidateAfter window: no pod may be consolidated onto them. The window
    starts at the last pod event (the round's record, else the NodeClaim's status.lastPodEventTime), else at
    the NodeClaim's initialization; consolidateAfter 0 or Never holds nothing, nor does an uninitialized node."""
    held: set[str] = set()
    for c in candidates:
        after = c.pool.spec.disruption.consolidate_after_seconds
        status = c.claim.status
        initialized = status.condition("Initialized") if status is not None else None
        if not after or initialized is None or initialized.status != "True":
            continue
        since = last_pod_events.get(c.name) or (status.last_pod_event_time if status is not None else None)
        since = since or initialized.last_transition_time
        if since is not None and shift(_aware(since), after) > now:
            held.add(c.name)
    return frozenset(held)


# --- simulation ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Offer:
    price: float
    allocatable: Mapping[str, int]


def _free(node: NodeInput) -> dict[str, int]:
    return {k: max(0, v - node.requested.get(k, 0)) for k, v in node.allocatable.items()}


def _uninitialized(node: NodeInput) -> bool:
    return node.in_flight or (node.nodepool is not None and node.labels.get(wk.LABEL_INITIALIZED) != "true")


class PodInputs(Mapping[str, PodInput]):
    """The bound pods of ``state`` as solver input, keyed "namespace/name", converted as
    ``nodeflow.plan.convert_pods`` converts them but only when first needed, in batches (``load``): a round
    over a full cluster, where ``Simulator.hopeless`` rules every candidate out, converts none of its pods.
    ``requests`` gives a pod's requests without converting it."""

    def __init__(self, state: ClusterState, pods: Iterable[Pod]) -> None:
        self._state = state
        self._pods = {p.key: p for p in pods}
        self._done: dict[str, PodInput] = {}
        self._convert: Callable[[Iterable[Pod]], dict[str, PodInput]] | None = None  # built at the first batch

    def __getitem__(self, key: str) -> PodInput:
        hit = self._done.get(key)
        if hit is None:
            self.load((key,))
            hit = self._done[key]  # KeyError for a pod it does not hold
        return hit

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def __iter__(self) -> Iterator[str]:
        return iter(self._pods)

    def __len__(self) -> int:
        return len(self._pods)

    def load(self, keys: Iterable[str]) -> None:
        """Convert those of ``keys`` not converted yet, together, as ``convert_pods`` does (one converter for
        every batch: the cluster's namespace and volume maps are built once, not per batch)."""
        missing = [self._pods[k] for k in dict.fromkeys(keys) if k in self._pods and k not in self._done]
        if missing:
            if self._convert is None:
                self._convert = pod_converter(self._state)
            self._done.update(self._convert(missing))

    def requests(self, key: str) -> Mapping[str, int] | None:
        """The pod's requests in milli-units (``PodInput.requests``: ``PodSpec.effective_requests``), None
        for a pod it does not hold."""
        hit = self._done.get(key)
        if hit is not None:
            return hit.requests
        pod = self._pods.get(key)
        return pod.spec.effective_requests() if pod is not None else None


@dataclass(frozen=True, slots=True)
class Simulator:
    base: SchedulingInput  # the whole cluster's solver input (pools, nodes, daemons)
    pods: Mapping[str, PodInput]  # every bound pod, as solver input
    # nodes inside their consolidateAfter window (see ``on_hold``): no destination in a consolidation simulation
    held: frozenset[str] = frozenset()
    draining: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # deleting node -> its movable pods
    # NodeflowPolicies: the moving pods with the NodePools they may not get new capacity in (``PodInput.denied``,
    # ``nodeflow.disruption.policy.RoundPolicy.denials``); None: no policy restricts access. (The pending pods of
    # ``base`` carry theirs already.)
    deny: Callable[[Sequence[PodInput]], Sequence[PodInput]] | None = None
    # NodeflowPolicies: the $/hour ceilings and group limits the solver is given in a simulation moving these pods
    # off these candidates (``nodeflow.disruption.policy.RoundPolicy.limits``: the candidates counted as freed);
    # None: the solver gets none (``base`` carries none either).
    limits: (
        Callable[
            [Sequence[Candidate], Sequence[PodInput]], tuple[tuple[CeilingInput, ...], tuple[GroupLimitInput, ...]]
        ]
        | None
    ) = None
    free: dict[str, int] = field(init=False)  # room left on every schedulable node, summed
    room: dict[str, list[dict[str, int]]] = field(init=False)  # node name -> its room (schedulable, not held)
    offers: tuple[_Offer, ...] = field(init=False)  # every type any usable pool may launch, cheapest first

    def __post_init__(self) -> None:
        free: dict[str, int] = {}
        room: dict[str, list[dict[str, int]]] = {}
        for node in self.base.nodes:
            if node.schedulable and node.name not in self.held:
                room.setdefault(node.name, []).append(_free(node))
            if node.schedulable and node.name not in self.held and node.name not in self.draining:
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
        object.__setattr__(self, "room", room)
        object.__setattr__(self, "offers", tuple(sorted(offers, key=lambda o: o.price)))

    def _leaving(self, candidates: Sequence[Candidate]) -> list[str]:
        """The pods that must find a place: the candidates' and those of nodes being deleted."""
        keys = [p.key for c in candidates for p in c.movable if p.key not in c.held]
        for pods in self.draining.values():
            keys.extend(pods)
        return keys

    def hopeless(self, candidates: Sequence[Candidate], before: float) -> str | None:
        """A cheap NECESSARY condition checked before simulating: the pods that cannot fit in the room
        left on the other nodes (summed, constraints ignored) must fit one instance type cheaper than
        ``before``. Returns why not, or None when a simulation is worth running."""
        free = dict(self.free)
        for name in dict.fromkeys(c.name for c in candidates):
            for own in self.room.get(name, ()):
                for k, v in own.items():
                    free[k] = free.get(k, 0) - v
        need: dict[str, int] = {}
        for key in self._leaving(candidates):
            for k, v in (self._requests(key) or {}).items():
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

    def requests_of(self, key: str) -> Mapping[str, int] | None:
        """A pod's requests (milli-units): a candidate's or a pending pod's; None for one it does not know."""
        found = self._requests(key)
        if found is None:
            pending = next((p for p in self.base.pods if p.key == key), None)
            found = pending.requests if pending is not None else None
        return found

    def _requests(self, key: str) -> Mapping[str, int] | None:
        if isinstance(self.pods, PodInputs):
            return self.pods.requests(key)  # no conversion needed for the sums
        inp = self.pods.get(key)
        return inp.requests if inp is not None else None

    def _solve(
        self,
        pods: tuple[PodInput, ...],
        nodes: Iterable[NodeInput],
        closed: frozenset[str],
        limits: tuple[tuple[CeilingInput, ...], tuple[GroupLimitInput, ...]] = ((), ()),
    ) -> SchedulingResult:
        kept = tuple(
            n if n.name not in closed else dataclasses.replace(n, schedulable=False, leaving=True) for n in nodes
        )
        if limits[0] or limits[1]:
            return solve(
                dataclasses.replace(self.base, pods=pods, nodes=kept, ceilings=limits[0], group_limits=limits[1])
            )
        return solve(dataclasses.replace(self.base, pods=pods, nodes=kept))

    def _others_first(self, nodes: list[NodeInput]) -> tuple[list[NodeInput], tuple[PodInput, ...], str | None]:
        """Place the pods of the nodes being deleted and the pending pods first, on ``nodes`` (any node may take
        those, initialized or not, held or not, as Karpenter exempts them): (``nodes`` with them placed, those
        that need new capacity, why a pod of a node being deleted finds no place at all)."""
        leaving = [self.pods[k] for keys in self.draining.values() for k in keys if k in self.pods]
        if self.deny is not None and leaving:
            leaving = list(self.deny(leaving))
        draining = self._draining_keys  # the plan may already count them pending: once is enough
        pods = (*leaving, *(p for p in self.base.pods if p.key not in draining))
        if not pods:
            return nodes, (), None
        by_key = {p.key: p for p in pods}
        result = self._solve(pods, nodes, frozenset())
        stuck = [u.pod for u in result.unschedulable if u.pod in self._draining_keys]
        if stuck:
            return nodes, (), f"pod {stuck[0]} of a node being deleted cannot be rescheduled"
        carried = tuple(by_key[k] for nc in result.node_claims for k in nc.pods if k in by_key)
        placed = {e.name: e.pods for e in result.existing}
        out: list[NodeInput] = []
        for n in nodes:
            keys = placed.get(n.name, ())
            if keys:
                requested = dict(n.requested)
                for k in keys:
                    for r, v in by_key[k].requests.items():
                        requested[r] = requested.get(r, 0) + v
                n = dataclasses.replace(n, pods=(*n.pods, *keys), requested=requested)
            out.append(n)
        return out, carried, None

    @property
    def _draining_keys(self) -> frozenset[str]:
        return frozenset(k for keys in self.draining.values() for k in keys)

    def run(
        self, candidates: Sequence[Candidate], *, cluster: bool = False, consolidation: bool = False
    ) -> SchedulingResult:
        """Where the candidates' pods go, or UNSCHEDULABLE entries (needing an uninitialized destination is
        one). With ``cluster`` (consolidation, as Karpenter simulates it), the pods of nodes being deleted and
        the pending pods take their places first and share the new capacity; pending pods that fit nowhere are
        not the candidates' concern. With ``consolidation`` (Karpenter's IsConsolidationSimulation, which only
        consolidation passes), the nodes inside their consolidateAfter window (``held``) take none of the
        candidates' pods; drift's simulation may use them."""
        gone = {c.name for c in candidates} | (set(self.draining) if cluster else set())
        if isinstance(self.pods, PodInputs):  # one conversion for the whole simulation
            own_keys = (p.key for c in candidates for p in c.movable)
            self.pods.load((*own_keys, *(k for keys in self.draining.values() for k in keys)) if cluster else own_keys)
        own = tuple(
            self.pods[p.key] for c in candidates for p in c.movable if p.key in self.pods and p.key not in c.held
        )
        if self.deny is not None and own:
            own = tuple(self.deny(own))
        nodes = [n for n in self.base.nodes if n.name not in gone]
        pods = own
        if cluster:
            nodes, carried, stuck = self._others_first(nodes)
            if stuck is not None:
                return SchedulingResult((), (), (UnschedulablePod(own[0].key if own else "", {"": stuck}),))
            pods = (*own, *carried)
        limits = self.limits(candidates, pods) if self.limits is not None else ((), ())
        held = self.held if consolidation else frozenset()
        result = self._candidates_placed(pods, frozenset(p.key for p in own), nodes, held, limits)
        if cluster and self.base.pods:
            pending = {p.key for p in self.base.pods}
            kept = tuple(u for u in result.unschedulable if u.pod not in pending)
            result = dataclasses.replace(result, unschedulable=kept)
        return result

    def _candidates_placed(
        self,
        pods: tuple[PodInput, ...],
        own: frozenset[str],
        nodes: list[NodeInput],
        held: frozenset[str],
        limits: tuple[tuple[CeilingInput, ...], tuple[GroupLimitInput, ...]] = ((), ()),
    ) -> SchedulingResult:
        unready = frozenset(n.name for n in nodes if _uninitialized(n))
        # initialized nodes first: only what they cannot take may reveal a need for an uninitialized node
        first = self._solve(pods, nodes, held | unready, limits)
        if not unready or (not first.node_claims and not first.unschedulable):
            return first
        second = self._solve(pods, nodes, held, limits)
        used = [(e.name, k) for e in second.existing if e.name in unready for k in e.pods if k in own]
        if not used:
            return first
        name, key = used[0]
        why = f"would schedule against uninitialized node {name}"
        return dataclasses.replace(second, unschedulable=(UnschedulablePod(key, {"": why}),))


def moves_of(result: SchedulingResult, only: Iterable[Candidate] | None = None) -> tuple[Move, ...]:
    """The moves of ``result`` (with ``only``: of those candidates' pods)."""
    keep = {p.key for c in only for p in c.movable} if only is not None else None
    moves = [Move(pod=p, node=e.name) for e in result.existing for p in e.pods]
    moves += [Move(pod=p, replacement=i) for i, nc in enumerate(result.node_claims) for p in nc.pods]
    return tuple(sorted((m for m in moves if keep is None or m.pod in keep), key=lambda m: m.pod))


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
    outcome = _consolidate(candidates, sim, settings, method)
    if totals is None or isinstance(outcome, str) or not any(balanced.is_balanced(c) for c in candidates):
        return outcome
    approved, scores = balanced.evaluate(candidates, outcome.saved, totals)
    if not approved:
        why = "; ".join(f"NodePool {s.nodepool}: {s.describe()}" for s in scores if not s.approved)
        return f"Balanced consolidation rejected the {outcome.decision} (saving ${outcome.saved:.4f}/h): {why}"
    return dataclasses.replace(outcome, scores=scores)


def _consolidate(candidates: Sequence[Candidate], sim: Simulator, settings: Settings, method: str) -> Command | str:
    before = sum(c.price or 0.0 for c in candidates)
    hopeless = sim.hopeless(candidates, before)
    if hopeless is not None:
        return hopeless
    result = sim.run(candidates, cluster=True, consolidation=True)
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
