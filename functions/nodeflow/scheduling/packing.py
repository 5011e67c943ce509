"""Packing: NodeClaims being filled during a solve.

Karpenter's NodeClaim (scheduling) side: opening a NodeClaim sized for cost (``new_claim``: the type with the lowest
price per pod of the group decides how many pods it takes; into a capacity reservation first), adding pods to open
NodeClaims while that does not make them pricier (``place_on_claims``), which of the final passes run
(``merge_claims``), and the NodeClaim plans written at the end (``plan``).

The rest is asked of collaborators, each its own module: ``candidate_types.CandidateTypes`` (which instance types
hold a group's pods, type lists narrowed), ``growth.Growth`` (growing open NodeClaims onto larger types),
``merging`` and ``repack`` (the final passes), ``min_values``, ``limits.Limits`` (NodePool and group limits: what is
left, what a NodeClaim is charged, why one is refused), ``ceilings.Ceilings`` ($/hour ceilings of the cluster,
NodePools and namespaces) and ``reservation_manager.Reservations`` (what each capacity reservation can still launch).
``nodeclaim.Claim`` is a NodeClaim being filled.

Must not touch: topology (callers pass the hostname limits, and every placement is booked with
``Topology.record``), existing nodes, which bounds bind a solve (``bounds``), the clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling import merging, repack
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.candidate_types import Candidates, CandidateTypes, best_index, cheapest_holding
from nodeflow.scheduling.ceilings import CeilingBudget, Ceilings, cannot_pay
from nodeflow.scheduling.existing import ports_conflict
from nodeflow.scheduling.groups import Group
from nodeflow.scheduling.growth import Growth
from nodeflow.scheduling.limits import Limits, capacity
from nodeflow.scheduling.min_values import min_values_take, min_values_violation
from nodeflow.scheduling.nodeclaim import MAX_INSTANCE_TYPES, Claim, first_price, fitting_types, opened
from nodeflow.scheduling.nodepools import NO_NODEPOOL, Pool, Reasons
from nodeflow.scheduling.pricing import ALLOW_UNDEFINED, OFFERING_KEYS, PRICE_EPSILON, Pricer
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.reservation_manager import Reservations, best_first, pinned
from nodeflow.scheduling.types import NodeClaimPlan, SchedulingInput

if TYPE_CHECKING:
    from nodeflow.scheduling.topology import HostCaps, Topology

# MAX_INSTANCE_TYPES, Claim and min_values_violation are re-exported: callers outside the packer read them here.
__all__ = [
    "MAX_INSTANCE_TYPES",
    "Claim",
    "Packer",
    "min_values_violation",
]

# How many of the most recently opened NodeClaims with room are offered each group's pods.
_OPEN_WINDOW = 16384


class Packer:
    """The NodeClaims of one solve. ``claims`` is shared with the solver and its ``Topology``
    (filled and emptied here only)."""

    def __init__(
        self,
        inp: SchedulingInput,
        pools: Sequence[Pool],
        pricer: Pricer,
        topology: Topology,
        claims: list[Claim],
        dense_limits: bool = False,
        shared: Packer | None = None,
        dense_all: bool = False,
    ) -> None:
        self.pools = pools
        # Under limits (a NodePool's, a NodeflowPolicy group's), pack as Karpenter does: a new NodeClaim keeps every
        # type within what is left and is charged the largest (its subtractMax), takes as many of the group's pods
        # as that type holds, and later pods join it on any of its types (``Claim.upsize``). Otherwise a new
        # NodeClaim is sized for cost and charged only its type (see ``_try_plain``); ``solver._settled`` keeps
        # whichever of the two places more pods.
        self.dense_limits = dense_limits
        # Every NodePool packed that way, limited or not, and no cost passes after (``merge_claims``): Karpenter's
        # own packing, which consolidation asks for when the cost-sized plan needs several new nodes
        # (``solver.solve_packed``).
        self.dense_all = dense_all
        self.pricer = pricer
        self.topology = topology
        self.claims = claims
        # NodeClaims that may still take a pod at their price: the smallest pending pod fits.
        self.open_claims: list[Claim] = []
        # NodeClaims opened for fewer pods than their type holds: the ones worth growing.
        self.tails: list[Claim] = []
        smallest = [p.requests for p in inp.pods] or [{}]
        self.min_request = (
            min(r.get("cpu", 0) for r in smallest),
            min(r.get("memory", 0) for r in smallest),
            min(r.get("pods", 0) for r in smallest),
        )
        self._zone_cache: dict[tuple[int, str], frozenset[tuple[str, str]]] = {}
        self._plan_cache: dict[
            tuple[object, ...], tuple[list[InstanceType], tuple[str, ...], Offering, tuple[str, ...], Requirements]
        ] = {}
        # Which instance types hold a group's pods, type lists narrowed (cached).
        self.choices = CandidateTypes(pricer)
        self.strict_min_values = inp.min_values_policy != "BestEffort"
        self._pods = inp.pods
        if shared is not None:
            # Another solve of the same pods and NodePools under other bounds (``solver._settled``): what these
            # caches hold does not depend on limits or policies (candidates are keyed by NodePool name).
            self._zone_cache, self._plan_cache = shared._zone_cache, shared._plan_cache
            self.choices = shared.choices
        # What bounds the NodeClaims opened here: NodePool and group limits, $/hour ceilings, capacity reservations.
        self.limits: Limits = Limits(inp, pools, shared.limits if shared is not None else None)
        self.ceilings = Ceilings(inp, pools)
        self.reservations = Reservations(pools)
        # NodeflowPolicy $/hour ceilings and group limits: none without policies (every check below is skipped).
        self.governed = bool(inp.ceilings or inp.group_limits)
        # Group uid -> NodePool -> why a NodeClaim was not made there before one was elsewhere (under policies only:
        # a ceiling or group limit a NodePool ahead refused), for ``explain``.
        self.passed_over: dict[int, dict[str, str]] = {}
        self.growth = Growth(
            pools,
            self.choices,
            self.limits,
            self.ceilings,
            self.reservations,
            topology,
            self.strict_min_values,
            self.governed,
        )

    def _bounded(self, pool: Pool) -> bool:
        """Under a limit (the NodePool's own or a group's) or a $/hour ceiling: the final merge and re-packing passes
        leave its NodeClaims alone, so they keep the instance types each was trimmed to."""
        return self.limits.bounded(pool) or bool(self.ceilings.of(pool))

    def merge_claims(self) -> None:
        """The final passes, for plans of modest size only (``merging.merge_claims``, ``repack.repack_claims``); then
        NodeClaims are numbered."""
        # Under NodeflowPolicy namespace ceilings the passes are skipped (they would move price among namespaces);
        # packed as Karpenter packs (``dense_all``), too: they size NodeClaims for cost, not for fewer of them.
        skip = self.ceilings.namespaced or self.dense_all
        if len(self.claims) <= merging.MAX_CLAIMS and not skip:
            merging.merge_claims(self.claims, self.tails, self.choices, self._bounded, self.strict_min_values)
        if len(self.claims) <= repack.MAX_CLAIMS and not skip:
            repack.repack_claims(self.claims, self._pods, self._bounded)
        for index, claim in enumerate(self.claims):
            claim.index = index

    # -- adding pods to open NodeClaims ------------------------------------------------------------
    def place_on_claims(
        self,
        group: Group,
        pending: list[str],
        alts: tuple[Requirements, ...],
        caps: HostCaps,
        blocked: set[int],
        allowed: set[int] | None,
        whole: int = 0,
    ) -> list[str]:
        """Add the group's pods to open NodeClaims (only to ``allowed`` ones, growing them if need be, when hostname
        affinity names them), in order; the rest is returned. ``whole`` > 0: the pods must share one node, so only
        the first NodeClaim that takes at least that many is used."""
        # Zone / capacity-type values the group allows: a cheap first test before the resource check (a NodeClaim
        # pinned to none of them is skipped). Every allowed value counts, not one of them taken as "the" pin.
        pins = (
            [(k, r.values) for k, r in alts[0].items() if k in OFFERING_KEYS and r.operator == "In"]
            if len(alts) == 1
            else []
        )
        upsize = allowed is not None  # pods that must join given NodeClaims may grow them
        denied = group.denied
        cpu, memory = group.requests.get("cpu", 0), group.requests.get("memory", 0)
        left = self.ceilings.left_for(group)  # what the pods' namespace has left under its ceilings (None: no ceiling)
        closed = False
        if upsize:
            candidates = self.claims
        else:
            # One pass in a comprehension drops the NodeClaims without room first (cheap: most are).
            # Only the most recent open NodeClaims are looked at: in very large plans the room
            # left on old ones is small, and scanning tens of thousands per group is not.
            recent = self.open_claims[-_OPEN_WINDOW:]
            candidates = [c for c in recent if c.free[0] >= cpu and c.free[1] >= memory and c.free[2] > 0]
        before = len(pending)
        for claim in candidates:
            if not pending:
                break
            cid = id(claim)
            if cid in blocked or (allowed is not None and cid not in allowed):
                continue
            if denied and claim.pool.input.name in denied:
                continue
            if left is not None and cannot_pay(claim, group.namespace, cpu, left):
                continue  # one more pod's share of the NodeClaim would cost the namespace more than it has left
            if pins and any(
                (r := claim.requirements.get(k)) is not None and not any(r.has(v) for v in values) for k, values in pins
            ):
                continue
            if group.host_ports and ports_conflict(group.host_ports, claim.ports):
                continue
            if claim.room(group.requests, claim.types, claim.prices, claim.start, upsize, want=1) == 0:
                continue
            if not group.tolerates(claim.pool.input.taints):
                continue
            cap = self.topology.cap(cid, caps)
            if cap <= 0:
                continue
            for alt in alts:
                if claim.requirements.compatible(alt, ALLOW_UNDEFINED) is not None:
                    continue
                take = self._add_to_claim(claim, group, alt, min(len(pending), cap), upsize, whole)
                if take:
                    claim.pods.extend(pending[:take])
                    self.topology.record(group, claim, take)
                    pending = pending[take:]
                    free, least = claim.free, self.min_request
                    closed = closed or free[0] < least[0] or free[1] < least[1] or free[2] < least[2]
                    break
            if whole and len(pending) < before:
                break
        if closed:
            least = self.min_request
            self.open_claims = [
                c for c in self.open_claims if c.free[0] >= least[0] and c.free[1] >= least[1] and c.free[2] >= least[2]
            ]
        return pending

    def few_nodes(self, group: Group, alts: tuple[Requirements, ...], count: int) -> bool:
        """The group would fill only a few new NodeClaims: worth growing open ones for (``growth``)."""
        return self.growth.few_nodes(group, alts, count)

    def grow_claims(
        self,
        group: Group,
        pending: list[str],
        alts: tuple[Requirements, ...],
        blocked: set[int],
    ) -> list[str]:
        """Move partly filled NodeClaims onto larger types for the group's pods when that costs less than new
        NodeClaims (``growth.Growth.grow``); the pods left are returned."""
        return self.growth.grow(group, pending, alts, blocked, self.tails)

    def candidates(self, pool: Pool, group: Group, alt: Requirements) -> Candidates | str:
        """Instance types of a pool that can hold at least one pod of the group (``CandidateTypes``), or why none."""
        return self.choices.candidates(pool, group, alt)

    def _add_to_claim(
        self, claim: Claim, group: Group, alt: Requirements, count: int, upsize: bool = False, least: int = 0
    ) -> int:
        """Add up to ``count`` pods of the group without making the NodeClaim pricier (unless
        ``upsize``: pods that can only go here may move it onto a larger type); none unless at least ``least``."""
        upsize = upsize or claim.upsize
        reqs, types, prices, first, narrowed = self.choices.joined(claim, alt)
        if narrowed:
            while first < len(types) and not res.fits(claim.used, types[first].allocatable):
                first += 1
            if first == len(types) or (not upsize and prices[first] > claim.price + PRICE_EPSILON):
                return 0
        best = claim.room(group.requests, types, prices, first, upsize, want=1 if group.host_ports else count)
        if group.host_ports:
            best = min(best, 1)
        take = min(best, count)
        if take <= 0 or take < least:
            return 0
        used = res.add(claim.used, group.requests, take)
        strict = claim.pool.min_values and self.strict_min_values
        if strict and min_values_violation(reqs, fitting_types(types, first, used)) is not None:
            return 0
        if self.governed:
            price = first_price(types, prices, first, used)
            if not self.ceilings.join_fits(claim, group, take, price):
                return 0
            self.ceilings.join(claim, group, take, price)
        claim.requirements, claim.types, claim.prices, claim.start = reqs, types, prices, first
        claim.used = used
        claim.ports |= group.host_ports
        claim.advance()
        return take

    def new_claim(
        self, group: Group, pending: list[str], alts: tuple[Requirements, ...], cap: int, together: bool = False
    ) -> int | Reasons:
        """Open a NodeClaim for the group's pending pods: the number placed, or why not per pool.
        ``together``: as many of them as one node holds, on one node (pods with hostname affinity
        to each other, or a hostname spread's share of a new node)."""
        reasons: dict[str, list[str]] = {}
        count = min(len(pending), cap)
        denied = group.denied
        for alt_index, alt in enumerate(alts):
            for pool in self.pools:
                if denied and (why := denied.get(pool.input.name)) is not None:
                    reasons.setdefault(pool.input.name, [why])  # once, whatever the node affinity term
                    continue
                outcome = self._try_pool(pool, group, alt, count, together)
                if not isinstance(outcome, str):
                    claim, take, partial = outcome
                    if self.governed and reasons:
                        self.passed_over.setdefault(group.uid, {}).update((k, "; ".join(v)) for k, v in reasons.items())
                    if partial:
                        self.tails.append(claim)
                    claim.index = len(self.claims)
                    claim.pods.extend(pending[:take])
                    self.claims.append(claim)
                    self.open_claims.append(claim)
                    self.topology.register(claim)
                    self.topology.record(group, claim, take)
                    return take
                prefix = f"node affinity term {alt_index + 1}: " if len(alts) > 1 else ""
                reasons.setdefault(pool.input.name, []).append(prefix + outcome)
        merged = {name: "; ".join(parts) for name, parts in reasons.items()}
        return merged or {NO_NODEPOOL: "no NodePool is defined"}

    def _try_pool(
        self, pool: Pool, group: Group, alt: Requirements, count: int, together: bool = False
    ) -> tuple[Claim, int, bool] | str:
        """A new NodeClaim of the pool for the group: into a capacity reservation when one is left (as
        Karpenter, reserved capacity first), else spot / on-demand."""
        note = ""
        if pool.reserved_requirements is not None:
            held = self._try_reserved(pool, group, alt, count, together)
            if not isinstance(held, str):
                return held
            note = held
        outcome = self._try_plain(pool, group, alt, count, together)
        if note:
            if isinstance(outcome, str):
                return f"{outcome}; {note}"
            self.reservations.notes[id(outcome[0])] = note
        return outcome

    def _try_reserved(
        self, pool: Pool, group: Group, alt: Requirements, count: int, together: bool
    ) -> tuple[Claim, int, bool] | str:
        """Open a NodeClaim counted against one capacity reservation (its type, zone and id pinned), or say
        ("" when nothing applies) why the matching reservations cannot take it."""
        reqs, options, exhausted = self.reservations.options(pool, group, alt)
        remaining = self.limits.left(pool)
        if together:
            options = [opt for opt in options if opt[2] >= count]
        if remaining is not None:
            options = [opt for opt in options if all(capacity(opt[0], k) <= v for k, v in remaining.items())]
        budgets = self.ceilings.budgets(pool, group.namespace) if self.governed else []
        allow = Ceilings.allowance(budgets)
        if allow is not None:
            options = [opt for opt in options if opt[1].price <= allow]
        strict = pool.min_values and self.strict_min_values
        for it, o, cap in sorted(options, key=lambda opt: best_first(opt, count)):
            claim_reqs = pinned(reqs, o)
            if strict and min_values_violation(claim_reqs, [it]) is not None:
                continue
            types, prices = self.pricer.sorted_types([it], claim_reqs)
            if not types:
                continue
            take = min(cap, count)
            claim = Claim(
                pool=pool,
                requirements=claim_reqs,
                types=types,
                prices=prices,
                start=0,
                used=res.add(pool.daemon, group.requests, take),
                ports=set(group.host_ports),
                reservation=o.reservation_id,
            )
            claim.advance()
            self.reservations.take(o.reservation_id)
            self.limits.charge(pool, [it])
            if self.governed:
                self.ceilings.open(claim, budgets, group, take)
            return claim, take, take < cap
        if exhausted:
            return "capacity reservations used up: " + ", ".join(sorted(set(exhausted)))
        return ""

    def _try_plain(
        self, pool: Pool, group: Group, alt: Requirements, count: int, together: bool = False
    ) -> tuple[Claim, int, bool] | str:
        """A new spot / on-demand NodeClaim of the pool for the group, its type chosen for the lowest price per pod
        among the candidates the pool's limits and ceilings leave; or why none can be made."""
        cands = self.candidates(pool, group, alt)
        if isinstance(cands, str):
            return cands
        types, prices, caps = cands.types, cands.prices, cands.caps
        remaining = self.limits.left(pool)
        # Under $/hour ceilings only types priced within what is left under every one of them (so the NodeClaim's
        # fallback types cannot cross it either).
        budgets = self.ceilings.budgets(pool, group.namespace) if self.governed else []
        picked: list[int] | None = None  # which of the candidates ``types`` holds (None: all of them)
        if together:
            # As many of the pods as one node holds: all of them on the cheapest type that holds them
            # all, else the most any type holds (the rest cannot share this node).
            count = min(count, max(caps))
            whole = [i for i, cap in enumerate(caps) if cap >= count]
            allowed = self._allowed(pool, types, prices, whole, remaining, budgets)
            if isinstance(allowed, str):
                return allowed
            picked, best = allowed, 0
        elif remaining is not None or budgets:
            allowed = self._allowed(pool, types, prices, None, remaining, budgets)
            if isinstance(allowed, str):
                return allowed
            # (every type left: the candidates' own answer, the same one in O(log n))
            best = cands.best(count) if len(allowed) == len(types) else best_index(allowed, prices, caps, types, count)
            picked, best = allowed, allowed.index(best)
        else:
            best = cands.best(count)
        if picked is not None:
            types, prices, caps = [types[i] for i in picked], [prices[i] for i in picked], [caps[i] for i in picked]
        dense = (self.dense_limits and remaining is not None) or self.dense_all
        if dense and not together:
            # As many pods as the largest type left holds, on the cheapest type that holds them.
            count = min(count, max(caps))
            best = cheapest_holding(types, prices, caps, count)
        take = min(caps[best], count)
        if pool.min_values and self.strict_min_values:
            take = min_values_take(cands.requirements, types, caps, pool.daemon, group, take)
            if take <= 0 or (together and take < count):
                fitting = fitting_types(types, 0, res.add(pool.daemon, group.requests, max(take, 1)))
                return min_values_violation(cands.requirements, fitting) or "minValues cannot be met"
            best = cheapest_holding(types, prices, caps, take)
        partial = take < caps[best]
        if dense:
            self.limits.charge(pool, types)  # it may grow onto any of them
        elif remaining is not None:
            # Under a limit the NodeClaim keeps only types no larger than the chosen one on the
            # limited resources, so it is charged exactly what it may launch (Karpenter charges
            # the largest option; keeping oversized fallbacks would waste the limit).
            keep = self.limits.sizes(cands.types, remaining).no_larger_than(best, picked)
            best = keep.index(best)
            types, prices = [types[i] for i in keep], [prices[i] for i in keep]
            self.limits.charge(pool, [types[best]])
        used = res.add(pool.daemon, group.requests, take)
        claim = opened(pool, cands.requirements, types, prices, best, used, set(group.host_ports), dense)
        if self.governed:
            self.ceilings.open(claim, budgets, group, take)
        return claim, take, partial

    def _allowed(
        self,
        pool: Pool,
        types: Sequence[InstanceType],
        prices: Sequence[float],
        subset: list[int] | None,
        remaining: Mapping[str, int] | None,
        budgets: Sequence[CeilingBudget],
    ) -> list[int] | str:
        """The indices of ``types`` (those ``subset`` picks; None: every one) no larger than what is left under the
        pool's limits (``remaining``; None: no limit) and priced within its ceilings' ``budgets``, or why none is."""
        if remaining is None:
            keep = list(range(len(types))) if subset is None else subset
        elif subset is None:
            keep = self.limits.within(types, remaining)
        else:
            fits = set(self.limits.within(types, remaining))
            keep = [i for i in subset if i in fits]
        if not keep:
            refused = types if subset is None else [types[i] for i in subset]
            return self.limits.refusal(pool, refused, remaining or {})
        allow = Ceilings.allowance(budgets)
        if allow is not None:
            priced = [i for i in keep if prices[i] <= allow]
            if not priced:
                return Ceilings.refusal(pool, budgets, prices[keep[0]])
            keep = priced
        return keep

    def _zones_of(self, it: InstanceType, capacity_type: str) -> frozenset[tuple[str, str]]:
        key = (id(it), capacity_type)
        zones = self._zone_cache.get(key)
        if zones is None:
            zones = frozenset(
                (o.zone, o.zone_id) for o in it.offerings if o.available and o.capacity_type == capacity_type
            )
            self._zone_cache[key] = zones
        return zones

    # -- the plan --------------------------------------------------------------------------------
    def plan(self, claim: Claim) -> NodeClaimPlan:
        reqs = claim.requirements
        requests = dict(sorted(claim.used.items()))
        # NodeClaims of one group are often alike (same type list, requirements and usage):
        # their instance types, capacity type, zones and price are worked out once.
        key = (id(claim.types), claim.start, reqs, tuple(requests.items()))
        hit = self._plan_cache.get(key)
        if hit is None or hit[0] is not claim.types:
            table = self.pricer.table(reqs)
            fitting = fitting_types(claim.types, claim.start, claim.used)
            cheapest = table[id(fitting[0])]
            assert cheapest is not None  # types without an allowed offering were filtered out
            zone_req = reqs.get(wk.LABEL_ZONE)
            zone_id_req = reqs.get(wk.LABEL_ZONE_ID)
            offered: set[tuple[str, str]] = set()
            for it in fitting:
                offered |= self._zones_of(it, cheapest.capacity_type)
            zones = tuple(
                sorted(
                    zone
                    for zone, zone_id in offered
                    if (zone_req is None or zone_req.has(zone)) and (zone_id_req is None or zone_id_req.has(zone_id))
                )
            )
            names = tuple(it.name for it in fitting)
            hit = (claim.types, names, cheapest, zones, self.pricer.with_capacity_types(fitting, reqs))
            self._plan_cache[key] = hit
        _, names, cheapest, zones, written = hit
        return NodeClaimPlan(
            nodepool=claim.pool.input.name,
            requirements=written,
            instance_types=names,
            capacity_type=cheapest.capacity_type,
            zones=zones,
            pods=tuple(claim.pods),
            requests=requests,
            price=cheapest.price,
        )
