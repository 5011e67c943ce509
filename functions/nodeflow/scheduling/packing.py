"""Packing: NodeClaims being filled during a solve.

Karpenter's NodeClaim (scheduling) side: which instance types of a NodePool hold a group's pods
(``candidates``), opening a NodeClaim sized for cost (``new_claim``: the type with the lowest
price per pod of the group decides how many pods it takes; into a capacity reservation first),
adding pods to open NodeClaims while that does not make them pricier (``place_on_claims``),
growing partly filled NodeClaims onto a larger type when that is cheaper than new ones
(``grow_claims``), the final merge pass (``merge_claims``) and re-packing pass (``repack_claims``,
see ``repack``), minValues, and the NodeClaim plans written at the end (``plan``).

What bounds the NodeClaims is asked of three collaborators, each its own module: ``limits.Limits``
(NodePool and group limits: what is left, what a NodeClaim is charged, why one is refused),
``ceilings.Ceilings`` ($/hour ceilings of the cluster, NodePools and namespaces) and
``reservations.Reservations`` (what each capacity reservation can still launch).

Must not touch: topology (callers pass the hostname limits, and every placement is booked with
``Topology.record``), existing nodes, which bounds bind a solve (``bounds``), the clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nodeflow.api import labels as wk
from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling import repack
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.ceilings import CeilingBudget, Ceilings, cannot_pay
from nodeflow.scheduling.existing import ports_conflict
from nodeflow.scheduling.groups import Group
from nodeflow.scheduling.limits import Limits, capacity
from nodeflow.scheduling.nodepools import NO_NODEPOOL, Pool, Reasons
from nodeflow.scheduling.pricing import (
    ALLOW_UNDEFINED,
    OFFERING_KEYS,
    PRICE_EPSILON,
    Pricer,
    describe_offering_reqs,
    offering_label,
    type_keys_changed,
    type_matches,
)
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.reservations import Reservations, best_first, pinned
from nodeflow.scheduling.taints import untolerated
from nodeflow.scheduling.topology import UNBOUNDED
from nodeflow.scheduling.types import HostPort, NodeClaimPlan, PodInput, SchedulingInput

if TYPE_CHECKING:
    from nodeflow.scheduling.topology import HostCaps, Topology

__all__ = [
    "MAX_INSTANCE_TYPES",
    "BestPerPod",
    "Candidates",
    "Claim",
    "Packer",
    "min_values_violation",
]

# Like Karpenter, a NodeClaim carries at most this many instance types (the cheapest).
MAX_INSTANCE_TYPES = 60

# How many of the most recent open NodeClaims may be grown onto a larger type for a group.
_GROW_WINDOW = 64
# ...and how many larger types of each are looked at (the cheapest ones).
_GROW_TYPES = 256
# ...and only for groups that would otherwise fill fewer than this many new NodeClaims.
_GROW_MAX_NODES = 4
# ...in at most this many passes over the NodeClaims.
_GROW_PASSES = 3
# Plans with at most this many NodeClaims get the final merge pass (it compares pairs).
_MERGE_MAX_CLAIMS = 200
# ...and up to this many, every NodeClaim (not only partly filled ones) may be moved.
_MERGE_ALL_CLAIMS = 100
# The re-packing pass keeps its NodeClaims only when they save at least this much per hour.
_REPACK_MIN_SAVING = 1e-6
# How many of the most recently opened NodeClaims with room are offered each group's pods.
_OPEN_WINDOW = 16384


@dataclass(slots=True)
class Claim:
    """A NodeClaim being filled. ``types`` are the instance types its requirements allow,
    cheapest first; types before ``start`` can no longer hold its pods. Types further on
    that no longer fit are dropped when the plan is written, not on every add."""

    pool: Pool
    requirements: Requirements
    types: list[InstanceType]
    prices: list[float]
    start: int
    used: dict[str, int]
    pods: list[str] = field(default_factory=list)
    ports: set[HostPort] = field(default_factory=set)
    entries: list[tuple[str, Mapping[str, str], int]] = field(default_factory=list)
    index: int = 0
    # Most cpu, memory and pods free on a type at the current price: a quick "no room" test.
    free: tuple[int, int, int] = (0, 0, 0)
    # Holds pods that topology constraints or selectors care about: never merged away.
    topology: bool = False
    # The capacity reservation this NodeClaim is counted against ("" for spot / on-demand).
    reservation: str = ""
    # Namespace -> [CPU requested (millicores), pods] of its pods: kept only under NodeflowPolicy namespace
    # ceilings (how its price is shared among namespaces, ``governance.policy.namespace_shares``).
    shares: dict[str, list[int]] | None = None
    # May move onto any of its types as pods join, not only those priced like the cheapest one now: a NodeClaim
    # of a limited NodePool packed as Karpenter packs one (``Packer.dense_limits``), charged its largest type.
    upsize: bool = False
    # Of such a NodeClaim, the most cpu, memory and pods any of its types has allocatable: its ``free`` is measured
    # against that (an upper bound of the room left, which is all the quick test needs).
    most: tuple[int, int, int] = (0, 0, 0)

    def domain(self, key: str) -> str | None:
        """The NodeClaim's value for a topology key, once its requirements pin one."""
        if key == wk.LABEL_HOSTNAME:
            return f"nodeclaim-{self.index}"
        req = self.requirements.get(key)
        if req is not None and not req.complement and len(req.values) == 1:
            return next(iter(req.values))
        return None

    @property
    def price(self) -> float:
        return self.prices[self.start]

    def advance(self) -> None:
        """Skip types that no longer hold the pods; note the room left at the current price (on any of its types
        when it may ``upsize``)."""
        types, used = self.types, self.used
        while not res.fits(used, types[self.start].allocatable):
            self.start += 1
        if self.upsize:
            most = self.most
            self.free = (most[0] - used.get("cpu", 0), most[1] - used.get("memory", 0), most[2] - used.get("pods", 0))
            return
        bound = self.prices[self.start] + PRICE_EPSILON
        cpu = memory = pods = 0
        for i in range(self.start, len(types)):
            if self.prices[i] > bound:
                break
            alloc = types[i].allocatable
            if res.fits(used, alloc):
                cpu = max(cpu, alloc.get("cpu", 0) - used.get("cpu", 0))
                memory = max(memory, alloc.get("memory", 0) - used.get("memory", 0))
                pods = max(pods, alloc.get("pods", 0) - used.get("pods", 0))
        self.free = (cpu, memory, pods)

    def room(
        self,
        request: Mapping[str, int],
        types: list[InstanceType],
        prices: list[float],
        first: int,
        upsize: bool = False,
        want: int = UNBOUNDED,
    ) -> int:
        """Pods of ``request`` that fit on some type priced like the cheapest one now (any type
        when ``upsize``, or when the NodeClaim may always upsize); the scan stops at ``want``."""
        bound = float("inf") if upsize or self.upsize else self.price + PRICE_EPSILON
        used = self.used
        best = 0
        for i in range(first, len(types)):
            if prices[i] > bound:
                break
            alloc = types[i].allocatable
            if res.fits(used, alloc):
                count = res.max_count(request, alloc, used)
                if count > best:
                    best = count
                    if best >= want:
                        break
        return best


@dataclass(slots=True)
class Candidates:
    """The instance types of a pool that hold at least one pod of a group, cheapest first."""

    requirements: Requirements
    types: list[InstanceType]
    prices: list[float]
    caps: list[int]  # pods of the group that fit each type next to the daemonsets
    _by_cap: BestPerPod | None = None

    def best(self, count: int) -> int:
        """Index of the type with the lowest price per pod when ``count`` pods remain."""
        if self._by_cap is None:
            self._by_cap = BestPerPod(self.types, self.prices, self.caps)
        return self._by_cap.best(count)


class BestPerPod:
    """Answers "cheapest per pod for N pods" in O(log n).

    With N pods left, a type holding ``cap >= N`` costs price/N per pod, so the best of those
    is the cheapest among them; a type holding fewer costs price/cap. Sorting by cap gives a
    suffix minimum of price and a prefix minimum of price/cap; the answer is the better of
    the two at the split point. Ties break on more pods, then on name, as ``_best_index``.
    """

    def __init__(self, types: Sequence[InstanceType], prices: Sequence[float], caps: Sequence[int]) -> None:
        order = sorted(range(len(types)), key=lambda i: caps[i])
        self.caps_sorted = [caps[i] for i in order]
        self.types, self.prices, self.caps = types, prices, caps
        n = len(order)
        self.suffix: list[int] = [0] * n
        best = -1
        for k in range(n - 1, -1, -1):
            i = order[k]
            # Every type here holds all N pods: price per pod is price / N, so cheapest, then name.
            if best < 0 or (prices[i], types[i].name) < (prices[best], types[best].name):
                best = i
            self.suffix[k] = best
        self.prefix: list[int] = [0] * (n + 1)
        best = -1
        for k in range(n):
            i = order[k]
            if best < 0 or self._unbounded_key(i) < self._unbounded_key(best):
                best = i
            self.prefix[k + 1] = best

    def _unbounded_key(self, i: int) -> tuple[float, int, str]:
        return (self.prices[i] / self.caps[i], -self.caps[i], self.types[i].name)

    def best(self, count: int) -> int:
        k = bisect.bisect_left(self.caps_sorted, count)
        options = []
        if k < len(self.caps_sorted):
            i = self.suffix[k]
            options.append(((self.prices[i] / count, -count, self.types[i].name), i))
        if k > 0:
            i = self.prefix[k]
            options.append((self._unbounded_key(i), i))
        return min(options)[1]


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
        self._candidate_cache: dict[tuple[object, ...], Candidates | str] = {}
        self._narrow_cache: dict[
            tuple[int, Requirements], tuple[list[InstanceType], list[InstanceType], list[float]]
        ] = {}
        self.strict_min_values = inp.min_values_policy != "BestEffort"
        self._pods = inp.pods
        # id(types) -> (types, the most any of them has allocatable per resource): an upper bound for any sublist.
        self._max_alloc_cache: dict[int, tuple[list[InstanceType], dict[str, int]]] = {}
        if shared is not None:
            # Another solve of the same pods and NodePools under other bounds (``solver._settled``): what these
            # caches hold does not depend on limits or policies (candidates are keyed by NodePool name).
            self._zone_cache, self._plan_cache = shared._zone_cache, shared._plan_cache
            self._candidate_cache, self._narrow_cache = shared._candidate_cache, shared._narrow_cache
            self._max_alloc_cache = shared._max_alloc_cache
        # What bounds the NodeClaims opened here: NodePool and group limits, $/hour ceilings, capacity reservations.
        self.limits: Limits = Limits(inp, pools, shared.limits if shared is not None else None)
        self.ceilings = Ceilings(inp, pools)
        self.reservations = Reservations(pools)
        # NodeflowPolicy $/hour ceilings and group limits: none without policies (every check below is skipped).
        self.governed = bool(inp.ceilings or inp.group_limits)
        # Group uid -> NodePool -> why a NodeClaim was not made there before one was elsewhere (under policies only:
        # a ceiling or group limit a NodePool ahead refused), for ``explain``.
        self.passed_over: dict[int, dict[str, str]] = {}

    def _bounded(self, pool: Pool) -> bool:
        """Under a limit (the NodePool's own or a group's) or a $/hour ceiling: the final merge and re-packing passes
        leave its NodeClaims alone, so they keep the instance types each was trimmed to."""
        return self.limits.bounded(pool) or bool(self.ceilings.of(pool))

    def merge_claims(self) -> None:
        """Plans of modest size only (see ``_merge_claims`` and ``repack_claims``); then NodeClaims
        are numbered."""
        # Under NodeflowPolicy namespace ceilings the passes are skipped (they would move price among namespaces);
        # packed as Karpenter packs (``dense_all``), too: they size NodeClaims for cost, not for fewer of them.
        skip = self.ceilings.namespaced or self.dense_all
        if len(self.claims) <= _MERGE_MAX_CLAIMS and not skip:
            self._merge_claims()
        if len(self.claims) <= repack.MAX_CLAIMS and not skip:
            self.repack_claims()
        for index, claim in enumerate(self.claims):
            claim.index = index

    def _merge_claims(self) -> None:
        """Last pass, for plans of modest size: put the pods of two NodeClaims of one NodePool on
        one node whenever a single instance type that holds them all costs less than the two.
        Only NodeClaims whose pods no topology rule or selector looks at, in NodePools without
        limits, are merged (moving them cannot break a spread, an affinity or a limit)."""
        small_plan = len(self.claims) <= _MERGE_ALL_CLAIMS
        partial = {id(c) for c in self.tails}
        for _ in range(_GROW_PASSES):
            merged = False
            candidates = sorted(
                (c for c in self.claims if not c.topology and not c.reservation and not self._bounded(c.pool)),
                key=lambda c: (c.price, c.index),
            )
            for small in candidates:
                # In larger plans only NodeClaims opened for fewer pods than they hold are moved
                # (full ones are already efficient): the pass stays at (partial x all) pairs.
                if small.topology or (not small_plan and id(small) not in partial):
                    continue
                best: tuple[float, int] | None = None
                plan: tuple[Claim, Requirements, list[InstanceType], list[float], int, dict[str, int]] | None = None
                for big in candidates:
                    if big is small or big.topology or big.pool is not small.pool:
                        continue
                    if ports_conflict(small.ports, big.ports):
                        continue
                    if big.requirements == small.requirements:
                        reqs = big.requirements
                    elif big.requirements.intersects(small.requirements) is None:
                        reqs = big.requirements.add(small.requirements)
                    else:
                        continue
                    used = res.subtract(res.add(big.used, small.used), big.pool.daemon)
                    types, prices = self.narrow(big.pool.types, big.pool.requirements, reqs)
                    # Types cheaper than either NodeClaim's cannot hold its pods; types costing the
                    # two together (or more than the best merge so far) save nothing.
                    ceiling = small.price + big.price - (PRICE_EPSILON if best is None else -best[0])
                    first = None
                    for i in range(bisect.bisect_left(prices, max(big.price, small.price) - PRICE_EPSILON), len(types)):
                        if prices[i] >= ceiling:
                            break
                        if res.fits(used, types[i].allocatable):
                            first = i
                            break
                    if first is None:
                        continue
                    saving = small.price + big.price - prices[first]
                    strict = big.pool.min_values and self.strict_min_values
                    if strict and min_values_violation(reqs, _fitting(types, first, used)) is not None:
                        continue
                    best, plan = (-saving, big.index), (big, reqs, types, prices, first, used)
                if plan is None:
                    continue
                big, reqs, types, prices, first, used = plan
                big.requirements, big.types, big.prices, big.start, big.used = reqs, types, prices, first, used
                big.advance()
                big.pods.extend(small.pods)
                big.ports |= small.ports
                big.entries.extend(small.entries)
                self.claims.remove(small)
                small.topology = True  # gone: never a partner again in this pass
                partial.add(id(big))
                merged = True
            if not merged:
                break

    def repack_claims(self) -> None:
        """Pack the pods of each NodePool's freely movable NodeClaims again, mixing pod shapes on
        shared nodes, and keep the new NodeClaims only when they cost less (see ``repack``)."""
        movable: dict[int, list[Claim]] = {}
        by_key: dict[str, PodInput] | None = None
        for claim in self.claims:
            pool = claim.pool
            if claim.topology or claim.ports or pool.min_values or self._bounded(pool):
                continue
            if claim.requirements != pool.requirements:
                continue
            if by_key is None:
                by_key = {p.key: p for p in self._pods}
            if all(_movable(by_key[key]) for key in claim.pods):
                movable.setdefault(id(pool), []).append(claim)
        for claims in movable.values():
            if len(claims) >= 2:
                assert by_key is not None
                self._repack(claims, by_key)

    def _repack(self, claims: list[Claim], by_key: Mapping[str, PodInput]) -> None:
        pool = claims[0].pool
        shapes = repack.frontier(pool.types, pool.prices, pool.daemon)
        types, prices, daemon = pool.types, pool.prices, pool.daemon

        vectors = [(a.get("cpu", 0), a.get("memory", 0), a.get("pods", 0)) for a in (it.allocatable for it in types)]

        def cheapest(requests: Mapping[str, int]) -> float:
            used = res.add(daemon, requests)
            c, m, p = used.get("cpu", 0), used.get("memory", 0), used.get("pods", 0)
            for i, (ac, am, ap) in enumerate(vectors):
                if c <= ac and m <= am and p <= ap and res.fits(used, types[i].allocatable):
                    return prices[i]
            return float("inf")

        found = repack.repack(
            [([(key, by_key[key].requests) for key in c.pods], c.price) for c in claims],
            shapes,
            cheapest,
            _REPACK_MIN_SAVING,
        )
        if found is None:
            return
        keep, nodes = found
        position = {key: i for i, key in enumerate(key for c in claims for key in c.pods)}
        fresh: list[Claim] = []
        for keys in nodes:
            keys.sort(key=position.__getitem__)
            used = res.add(daemon, res.total(by_key[k].requests for k in keys))
            claim = Claim(pool=pool, requirements=pool.requirements, types=types, prices=prices, start=0, used=used)
            claim.pods = keys
            claim.advance()
            fresh.append(claim)
        stay = {id(claims[i]) for i in keep}
        gone = {id(c) for c in claims if id(c) not in stay}
        at = next(i for i, c in enumerate(self.claims) if id(c) in gone)
        rest = [c for c in self.claims if id(c) not in gone]
        self.claims[:] = [*rest[:at], *fresh, *rest[at:]]

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

    def _standalone(self, group: Group, alts: tuple[Requirements, ...], count: int) -> tuple[float, int] | None:
        """Price per pod, and pods per NodeClaim, of ``count`` pods of the group on NodeClaims of
        their own (from the first NodePool that takes them, without limits)."""
        denied = group.denied
        for alt in alts:
            for pool in self.pools:
                if (denied and pool.input.name in denied) or self.limits.grouped(pool):
                    continue
                if pool.reserved_requirements is not None and pool.remaining is None:
                    options = self.reservations.options(pool, group, alt)[1]
                    if options:
                        _it, o, cap = min(options, key=lambda opt: best_first(opt, count))
                        return o.price / min(cap, count), cap
                cands = self.candidates(pool, group, alt)
                if isinstance(cands, str) or pool.remaining is not None:
                    continue
                best = cands.best(count)
                return cands.prices[best] / min(cands.caps[best], count), cands.caps[best]
        return None

    def few_nodes(self, group: Group, alts: tuple[Requirements, ...], count: int) -> bool:
        standalone = self._standalone(group, alts, count)
        return standalone is not None and standalone[1] * _GROW_MAX_NODES > count

    def grow_claims(
        self,
        group: Group,
        pending: list[str],
        alts: tuple[Requirements, ...],
        blocked: set[int],
    ) -> list[str]:
        """Move open NodeClaims onto a larger instance type when that costs less per pod than
        new NodeClaims would: pods of different shapes then share nodes (a memory-heavy pod
        turns a compute node into a general-purpose one) instead of each shape getting its own."""
        for _ in range(_GROW_PASSES):
            if not pending:
                break
            found = self._standalone(group, alts, len(pending))
            if found is None:
                break
            standalone, per_node = found
            cap = min(len(pending), per_node)
            # One scan finds each NodeClaim's best growth; the best ones are then applied in order.
            options: list[tuple[float, int, int, Claim, Requirements, list[InstanceType], list[float], int]] = []
            for claim in self.tails[-_GROW_WINDOW:]:
                option = self._best_growth(claim, group, alts, blocked, standalone, cap)
                if option is not None:
                    options.append(option)
            if not options:
                break
            options.sort(key=lambda o: (o[0], o[1], o[2]))
            applied = False
            for _marginal, _k, _index, claim, reqs, types, prices, i in options:
                if not pending:
                    break
                take = min(res.max_count(group.requests, types[i].allocatable, claim.used), len(pending))
                if take <= 0:
                    continue
                used = res.add(claim.used, group.requests, take)
                strict = claim.pool.min_values and self.strict_min_values
                if strict and min_values_violation(reqs, _fitting(types, i, used)) is not None:
                    continue
                if self.governed:
                    price = _first_price(types, prices, 0 if types is not claim.types else claim.start, used)
                    if not self.ceilings.join_fits(claim, group, take, price):
                        continue
                    self.ceilings.join(claim, group, take, price)
                if types is not claim.types:
                    claim.start = 0
                claim.requirements, claim.types, claim.prices = reqs, types, prices
                claim.used = used
                claim.advance()
                claim.pods.extend(pending[:take])
                self.topology.record(group, claim, take)
                pending = pending[take:]
                applied = True
            if not applied:
                break
        return pending

    def _best_growth(
        self,
        claim: Claim,
        group: Group,
        alts: tuple[Requirements, ...],
        blocked: set[int],
        standalone: float,
        cap: int,
    ) -> tuple[float, int, int, Claim, Requirements, list[InstanceType], list[float], int] | None:
        """The larger type of one NodeClaim that adds the group's pods most cheaply per pod,
        if that beats ``standalone`` (the price per pod of new NodeClaims)."""
        if id(claim) in blocked or claim.reservation or not group.tolerates(claim.pool.input.taints):
            return None
        if group.denied and claim.pool.input.name in group.denied:
            return None
        # Not one more pod fits on even the largest of its types (any type scanned below is one of them): no
        # growth, whatever the loop would scan. At scale most open NodeClaims are full on some resource.
        largest = self._max_allocatable(claim.types)
        used = claim.used
        if any(
            value > 0 and largest.get(name, 0) - used.get(name, 0) < value for name, value in group.requests.items()
        ):
            return None
        alt = next((a for a in alts if claim.requirements.compatible(a, ALLOW_UNDEFINED) is None), None)
        if alt is None:
            return None
        reqs = claim.requirements.add(alt) if len(alt) else claim.requirements
        if reqs == claim.requirements:
            types, prices, first = claim.types, claim.prices, claim.start
        else:
            types, prices = self.narrow(claim.types, claim.requirements, reqs)
            first = 0
        best: tuple[float, int, int, Claim, Requirements, list[InstanceType], list[float], int] | None = None
        # A larger type costs at least (price - now) / cap per pod: stop once that cannot win.
        budget = claim.price + standalone * cap
        ceilings = self.ceilings.of(claim.pool) if self.governed else ()
        if ceilings:  # no larger type than what is left under its ceilings
            budget = min(budget, claim.price + min(b.left for b in ceilings) + PRICE_EPSILON)
        now, used = claim.price, claim.used
        # ``res.fits(used, alloc)`` and ``res.max_count(request, alloc, used)`` inlined over the resources that
        # count (this loop runs for every open NodeClaim in the window, for every group, at scale).
        held = [(name, value) for name, value in used.items() if value > 0]
        wanted = [(name, value, used.get(name, 0)) for name, value in group.requests.items() if value > 0]
        scanned = 0
        for i in range(first, len(types)):
            price = prices[i]
            if price >= budget or scanned == _GROW_TYPES:
                break
            if price <= now + PRICE_EPSILON:
                continue
            get = types[i].allocatable.get
            fits = True
            for name, value in held:
                if value > get(name, 0):
                    fits = False
                    break
            if not fits:
                continue
            scanned += 1
            most = 1 << 30
            for name, value, taken in wanted:
                free = get(name, 0) - taken
                if free < value:
                    most = 0
                    break
                if free // value < most:
                    most = free // value
            k = min(most, cap)
            if k <= 0:
                continue
            marginal = (price - now) / k
            if marginal < standalone * (1 - 1e-9) and (best is None or (marginal, -k) < (best[0], best[1])):
                best = (marginal, -k, claim.index, claim, reqs, types, prices, i)
                budget = min(budget, now + marginal * cap)
        return best

    def _max_allocatable(self, types: list[InstanceType]) -> dict[str, int]:
        """Per resource, the most any of ``types`` has allocatable (at least 0)."""
        hit = self._max_alloc_cache.get(id(types))
        if hit is not None and hit[0] is types:
            return hit[1]
        most: dict[str, int] = {}
        for it in types:
            for name, value in it.allocatable.items():
                if value > most.get(name, 0):
                    most[name] = value
        self._max_alloc_cache[id(types)] = (types, most)
        return most

    def _add_to_claim(
        self, claim: Claim, group: Group, alt: Requirements, count: int, upsize: bool = False, least: int = 0
    ) -> int:
        """Add up to ``count`` pods of the group without making the NodeClaim pricier (unless
        ``upsize``: pods that can only go here may move it onto a larger type); none unless at least ``least``."""
        upsize = upsize or claim.upsize
        reqs = claim.requirements.add(alt) if len(alt) else claim.requirements
        if reqs == claim.requirements:
            types, prices, first = claim.types, claim.prices, claim.start
        else:
            types, prices = self.narrow(claim.types, claim.requirements, reqs)
            first = 0
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
        if strict and min_values_violation(reqs, _fitting(types, first, used)) is not None:
            return 0
        if self.governed:
            price = _first_price(types, prices, first, used)
            if not self.ceilings.join_fits(claim, group, take, price):
                return 0
            self.ceilings.join(claim, group, take, price)
        claim.requirements, claim.types, claim.prices, claim.start = reqs, types, prices, first
        claim.used = used
        claim.ports |= group.host_ports
        claim.advance()
        return take

    def narrow(
        self, types: list[InstanceType], old: Requirements, new: Requirements
    ) -> tuple[list[InstanceType], list[float]]:
        """``types`` (allowed by ``old``) that ``new`` still allows, cheapest first under ``new``.
        Cached: NodeClaims opened from the same candidates share their type lists."""
        key = (id(types), new)
        hit = self._narrow_cache.get(key)
        if hit is not None and hit[0] is types:
            return hit[1], hit[2]
        kept = [it for it in types if type_matches(it, new)] if type_keys_changed(old, new) else types
        narrowed, prices = self.pricer.sorted_types(kept, new)
        self._narrow_cache[key] = (types, narrowed, prices)
        return narrowed, prices

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

    def candidates(self, pool: Pool, group: Group, alt: Requirements) -> Candidates | str:
        """Instance types of a pool that can hold at least one pod of the group (cached)."""
        key = (
            pool.input.name,
            tuple(sorted(group.requests.items())),
            group.tolerations,
            group.effects,
            bool(group.host_ports),
            alt,
        )
        cached = self._candidate_cache.get(key)
        if cached is not None:
            return cached
        outcome = self._compute_candidates(pool, group, alt)
        self._candidate_cache[key] = outcome
        return outcome

    def _compute_candidates(self, pool: Pool, group: Group, alt: Requirements) -> Candidates | str:
        if pool.input.error:
            return pool.input.error
        taint = untolerated(group.tolerations, pool.input.taints, group.effects)
        if taint is not None:
            return f"did not tolerate taint {taint}"
        conflict = pool.requirements.compatible(alt, ALLOW_UNDEFINED)
        if conflict is not None:
            return f"incompatible requirements: {conflict}"
        if len(alt):
            reqs = pool.requirements.add(alt)
            base_alt = Requirements(r for k, r in alt.items() if k not in OFFERING_KEYS)
            if len(base_alt) < len(alt):
                # Only zone / capacity-type pins on top of an alternative already worked out:
                # re-price its candidates instead of filtering the whole pool again.
                base = self.candidates(pool, group, base_alt)
                if isinstance(base, str):
                    return base
                kept, prices = self.pricer.sorted_types(base.types, reqs)
                if not kept:
                    return "no instance type is offered there" + describe_offering_reqs(reqs)
                caps_by_name = dict(zip((it.name for it in base.types), base.caps, strict=True))
                return Candidates(reqs, kept, prices, [caps_by_name[it.name] for it in kept])
            types, prices = self.pricer.sorted_types([it for it in pool.types if type_matches(it, reqs)], reqs)
        else:
            reqs, types, prices = pool.requirements, pool.types, pool.prices
        if not types:
            return "no instance type satisfies the requirements" + describe_offering_reqs(reqs)
        needed = res.add(pool.daemon, group.requests)
        fitting = [i for i, it in enumerate(types) if res.fits(needed, it.allocatable)]
        if not fitting:
            absent = [k for k in sorted(needed) if needed[k] > 0 and not any(it.allocatable.get(k) for it in types)]
            if absent:
                return f"no instance type offers {absent[0]} (needs {format_milli(needed[absent[0]], absent[0])})"
            largest = max(types, key=lambda it: (it.allocatable.get("cpu", 0), it.allocatable.get("memory", 0)))
            short = res.first_shortfall(needed, largest.allocatable) or "cpu"
            return (
                f"no instance type has enough {short}: needs {format_milli(needed.get(short, 0), short)} "
                f"(pod {format_milli(group.requests.get(short, 0), short)} + daemonsets "
                f"{format_milli(pool.daemon.get(short, 0), short)}), largest candidate {largest.name} has "
                f"{format_milli(largest.allocatable.get(short, 0), short)} allocatable"
            )
        limit = 1 if group.host_ports else UNBOUNDED
        return Candidates(
            requirements=reqs,
            types=[types[i] for i in fitting],
            prices=[prices[i] for i in fitting],
            caps=[min(res.max_count(group.requests, types[i].allocatable, pool.daemon), limit) for i in fitting],
        )

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
            best = cands.best(count) if len(allowed) == len(types) else _best_index(allowed, prices, caps, types, count)
            picked, best = allowed, allowed.index(best)
        else:
            best = cands.best(count)
        if picked is not None:
            types, prices, caps = [types[i] for i in picked], [prices[i] for i in picked], [caps[i] for i in picked]
        dense = (self.dense_limits and remaining is not None) or self.dense_all
        if dense and not together:
            # As many pods as the largest type left holds, on the cheapest type that holds them.
            count = min(count, max(caps))
            best = _cheapest_holding(types, prices, caps, count)
        take = min(caps[best], count)
        if pool.min_values and self.strict_min_values:
            take = self._min_values_take(cands.requirements, types, caps, pool.daemon, group, take)
            if take <= 0 or (together and take < count):
                fitting = _fitting(types, 0, res.add(pool.daemon, group.requests, max(take, 1)))
                return min_values_violation(cands.requirements, fitting) or "minValues cannot be met"
            best = _cheapest_holding(types, prices, caps, take)
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
        claim = _opened(pool, cands.requirements, types, prices, best, used, set(group.host_ports), dense)
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

    def _min_values_take(
        self,
        reqs: Requirements,
        types: list[InstanceType],
        caps: list[int],
        daemon: Mapping[str, int],
        group: Group,
        take: int,
    ) -> int:
        """The most pods (at most ``take``) a NodeClaim can hold while its instance types keep
        minValues distinct values; 0 when even one pod cannot."""
        for candidate in sorted({c for c in caps if c < take} | {take}, reverse=True):
            used = res.add(daemon, group.requests, candidate)
            if min_values_violation(reqs, _fitting(types, 0, used)) is None:
                return candidate
        return 0

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
            fitting = _fitting(claim.types, claim.start, claim.used)
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


def _movable(pod: PodInput) -> bool:
    """A pod any type of its NodeClaim's NodePool may hold: no node constraints of its own, no
    preferences, no host ports, only cpu / memory requests."""
    return (
        all(not len(alt) for alt in pod.requirements)
        and not pod.preferred
        and not pod.host_ports
        and repack.movable_requests(pod.requests)
    )


def _fitting(types: Sequence[InstanceType], first: int, used: Mapping[str, int]) -> list[InstanceType]:
    """The (at most MAX_INSTANCE_TYPES) cheapest types from ``first`` on that hold ``used``."""
    out: list[InstanceType] = []
    for it in types[first:]:
        if res.fits(used, it.allocatable):
            out.append(it)
            if len(out) == MAX_INSTANCE_TYPES:
                break
    return out


def min_values_violation(reqs: Requirements, types: Sequence[InstanceType]) -> str | None:
    """Karpenter's minValues: a NodeClaim's instance types must span that many distinct values."""
    for key, req in sorted(reqs.items()):
        if not req.min_values:
            continue
        if key in OFFERING_KEYS:
            seen = {offering_label(o, key) for it in types for o in it.offerings if o.available}
            seen = {v for v in seen if req.has(v)}
        else:
            seen = {it.labels[key] for it in types if key in it.labels}
        if len(seen) < req.min_values:
            shown = ", ".join(sorted(seen)[:8]) or "none"
            return (
                f"minValues: {key} needs {req.min_values} distinct values among the instance types that fit, "
                f"only {len(seen)} ({shown})"
            )
    return None


def _best_index(
    indices: Iterable[int],
    prices: Sequence[float],
    caps: Sequence[int],
    types: Sequence[InstanceType],
    count: int,
) -> int:
    """The type with the lowest price per pod for ``count`` pods (more pods, then name, break ties)."""
    return min(indices, key=lambda i: (prices[i] / min(caps[i], count), -min(caps[i], count), types[i].name))


def _cheapest_holding(types: Sequence[InstanceType], prices: Sequence[float], caps: Sequence[int], count: int) -> int:
    """The cheapest of ``types`` (then by name) that holds ``count`` pods (``caps``: the pods each holds)."""
    return min((i for i in range(len(types)) if caps[i] >= count), key=lambda i: (prices[i], types[i].name))


def _opened(
    pool: Pool,
    requirements: Requirements,
    types: list[InstanceType],
    prices: list[float],
    best: int,
    used: dict[str, int],
    ports: set[HostPort],
    upsize: bool,
) -> Claim:
    """A new NodeClaim of ``pool`` holding ``used``, on ``types`` (cheapest first) from the price of the one at
    ``best`` on: cheaper types cannot hold its pods (one would be cheaper per pod). ``upsize``: it may move onto
    any of its types as pods join (its room is measured against the most any of them has)."""
    claim = Claim(
        pool=pool,
        requirements=requirements,
        types=types,
        prices=prices,
        start=bisect.bisect_left(prices, prices[best]),
        used=used,
        ports=ports,
        upsize=upsize,
    )
    if upsize:
        allocatable = [it.allocatable for it in types]
        claim.most = (
            max(a.get("cpu", 0) for a in allocatable),
            max(a.get("memory", 0) for a in allocatable),
            max(a.get("pods", 0) for a in allocatable),
        )
    claim.advance()
    return claim


def _first_price(types: Sequence[InstanceType], prices: Sequence[float], first: int, used: Mapping[str, int]) -> float:
    """The price a NodeClaim holding ``used`` has over ``types`` from ``first`` on (its cheapest fitting type)."""
    for i in range(first, len(types)):
        if res.fits(used, types[i].allocatable):
            return prices[i]
    return float("inf")
