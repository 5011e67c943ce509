"""Packing: NodeClaims being filled during a solve.

Karpenter's NodeClaim (scheduling) side: which instance types of a NodePool hold a group's pods
(``candidates``), opening a NodeClaim sized for cost (``new_claim``: the type with the lowest
price per pod of the group decides how many pods it takes), adding pods to open NodeClaims while
that does not make them pricier (``place_on_claims``), growing partly filled NodeClaims onto a
larger type when that is cheaper than new ones (``grow_claims``), the final merge pass
(``merge_claims``) and re-packing pass (``repack_claims``, see ``repack``), minValues, and the
NodeClaim plans written at the end (``plan``).

Topology is not decided here: callers pass the hostname limits, and every placement is booked
with ``Topology.record``.
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
from nodeflow.scheduling.existing import ports_conflict
from nodeflow.scheduling.groups import Group
from nodeflow.scheduling.nodepools import (
    NO_NODEPOOL,
    CeilingBudget,
    GroupBudget,
    Pool,
    Reasons,
    Sizes,
    capacity,
    limit_reason,
)
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
from nodeflow.scheduling.requirements import Requirement, Requirements
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
    "cannot_pay",
    "min_values_violation",
    "split_shares",
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
    ) -> None:
        self.pools = pools
        # Under limits (a NodePool's, a NodeflowPolicy group's), pack as Karpenter does: a new NodeClaim keeps every
        # type within what is left and is charged the largest (its subtractMax), takes as many of the group's pods
        # as that type holds, and later pods join it on any of its types (``Claim.upsize``). Otherwise a new
        # NodeClaim is sized for cost and charged only its type (see ``_try_plain``); ``solver._settled`` keeps
        # whichever of the two places more pods.
        self.dense_limits = dense_limits
        self.limit_refusals = 0  # new NodeClaims refused by a limit (a denser packing may place their pods)
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
        # (id(types), limited resources) -> (types, their sizes on them): limits checked without a lookup per type.
        self._sizes_cache: dict[tuple[int, tuple[str, ...]], tuple[Sequence[InstanceType], Sizes]] = {}
        if shared is not None:
            # Another solve of the same pods and NodePools under other bounds (``solver._settled``): what these
            # caches hold does not depend on limits or policies (candidates are keyed by NodePool name).
            self._zone_cache, self._plan_cache = shared._zone_cache, shared._plan_cache
            self._candidate_cache, self._narrow_cache = shared._candidate_cache, shared._narrow_cache
            self._max_alloc_cache, self._sizes_cache = shared._max_alloc_cache, shared._sizes_cache
        # Capacity reservation id -> instances it can still launch (Karpenter's ReservationManager: the least
        # capacity any offering of it reports); every NodeClaim opened on it takes one.
        self.reservations: dict[str, int] = {}
        for pool in pools:
            for it in pool.reserved_types:
                for o in it.offerings:
                    if o.reservation_id:
                        left = self.reservations.get(o.reservation_id)
                        if left is None or o.reservation_capacity < left:
                            self.reservations[o.reservation_id] = o.reservation_capacity
        # id(claim) -> why a NodeClaim that could have used a capacity reservation did not (all used up).
        self.fallback_notes: dict[int, str] = {}
        # NodeflowPolicy $/hour ceilings and group limits: none without policies (every check below is skipped).
        self.governed = bool(inp.ceilings or inp.group_limits)
        self.ns_ceilings: dict[str, list[CeilingBudget]] = {}
        # Group uid -> NodePool -> why a NodeClaim was not made there before one was elsewhere (under policies only:
        # a ceiling or group limit a NodePool ahead refused), for ``explain``.
        self.passed_over: dict[int, dict[str, str]] = {}
        if self.governed:
            self._govern(inp)

    # -- NodeflowPolicy ceilings and group limits ----------------------------------------------------
    def _govern(self, inp: SchedulingInput) -> None:
        """Budgets for the policies' ceilings (what is left under each) and group limits, handed to the pools."""
        budgets = [CeilingBudget(c, c.max_per_hour - c.in_use) for c in inp.ceilings]
        cluster = tuple(b for b in budgets if b.input.scope == "cluster")
        for b in budgets:
            if b.input.scope == "namespace":
                self.ns_ceilings.setdefault(b.input.name, []).append(b)
        groups = [GroupBudget(g, {k: v - g.in_use.get(k, 0) for k, v in g.limits.items()}) for g in inp.group_limits]
        for pool in self.pools:
            name = pool.input.name
            pool.ceilings = cluster + tuple(b for b in budgets if b.input.scope == "nodePool" and b.input.name == name)
            pool.groups = tuple(g for g in groups if name in g.input.nodepools)

    def _budgets(self, pool: Pool, namespace: str) -> list[CeilingBudget]:
        """The ceilings a new NodeClaim of ``pool`` for pods of ``namespace`` counts against."""
        return [*pool.ceilings, *self.ns_ceilings.get(namespace, ())]

    def _limits(self, pool: Pool) -> dict[str, int] | None:
        """What is left under the pool's own limits and its groups' (the least of them per resource)."""
        if not pool.groups:
            return pool.remaining
        merged = dict(pool.remaining or {})
        for g in pool.groups:
            for k, v in g.remaining.items():
                merged[k] = min(merged[k], v) if k in merged else v
        return merged

    def _charge_limits(self, pool: Pool, types: Sequence[InstanceType]) -> None:
        """A new NodeClaim that may launch as any of ``types`` counts the most any of them has against the pool's
        limits and its groups' (Karpenter's subtractMax)."""
        if pool.remaining is not None:
            for name in pool.remaining:
                pool.remaining[name] -= max(capacity(it, name) for it in types)
        for g in pool.groups:
            for name in g.remaining:
                g.remaining[name] -= max(capacity(it, name) for it in types)

    def _limit_reason(self, pool: Pool, types: Sequence[InstanceType], remaining: Mapping[str, int]) -> str:
        """Why none of ``types`` fits: the pool's own limit, else the group limit the smallest type exceeds."""
        self.limit_refusals += 1
        if not pool.groups:
            return limit_reason(pool, types, remaining, self._smallest(types, remaining))
        own = pool.remaining
        if own is not None and not self._within(types, own):
            return limit_reason(pool, types, own, self._smallest(types, own))
        for g in pool.groups:
            if not self._within(types, g.remaining):
                return g.reason(types, self._smallest(types, g.remaining))
        # Each type crosses one budget or another: name them all.
        parts = [limit_reason(pool, types, own, self._smallest(types, own))] if own is not None else []
        return "; ".join([*parts, *(g.reason(types, self._smallest(types, g.remaining)) for g in pool.groups)])

    def _sizes(self, types: Sequence[InstanceType], remaining: Mapping[str, int]) -> Sizes:
        """``types``' sizes on the resources ``remaining`` limits (cached per type list)."""
        keys = tuple(sorted(remaining))
        key = (id(types), keys)
        hit = self._sizes_cache.get(key)
        if hit is not None and hit[0] is types:
            return hit[1]
        sizes = Sizes.of(types, keys)
        self._sizes_cache[key] = (types, sizes)
        return sizes

    def _within(self, types: Sequence[InstanceType], remaining: Mapping[str, int]) -> list[int]:
        """The indices of ``types`` no larger than ``remaining`` on any resource it limits."""
        return self._sizes(types, remaining).within(remaining)

    def _smallest(self, types: Sequence[InstanceType], remaining: Mapping[str, int]) -> InstanceType:
        """The smallest of ``types`` on the resources ``remaining`` limits (in their name order)."""
        return types[self._sizes(types, remaining).smallest]

    def _ceiling_reason(self, pool: Pool, budgets: Sequence[CeilingBudget], price: float) -> str:
        binding = min(budgets, key=lambda b: b.left)
        return binding.reason(pool.input.name, price)

    def _open_charge(self, claim: Claim, budgets: Sequence[CeilingBudget], group: Group, take: int) -> None:
        """A new NodeClaim's price counts against its ceilings (its pods are all of the group's namespace)."""
        for b in budgets:
            b.left -= claim.price
        if self.ns_ceilings:
            claim.shares = {group.namespace: [group.requests.get("cpu", 0) * take, take]}

    def _join_deltas(self, claim: Claim, group: Group, take: int, price: float) -> tuple[float, dict[str, float]]:
        """How the NodeClaim's $/hour changes (in total, and per namespace with a ceiling) when ``take`` pods of
        the group join it and its price becomes ``price``."""
        delta = price - claim.price
        per_ns: dict[str, float] = {}
        if self.ns_ceilings and claim.shares is not None:
            before = split_shares(claim.shares)
            after_shares = {k: list(v) for k, v in claim.shares.items()}
            entry = after_shares.setdefault(group.namespace, [0, 0])
            entry[0] += group.requests.get("cpu", 0) * take
            entry[1] += take
            after = split_shares(after_shares)
            for ns in self.ns_ceilings:
                change = after.get(ns, 0.0) * price - before.get(ns, 0.0) * claim.price
                if change:
                    per_ns[ns] = change
        return delta, per_ns

    def _ns_left(self, group: Group) -> float | None:
        """The least left under the $/hour ceilings of the group's namespace, when it has one and its pods request
        CPU (their share of a NodeClaim goes by CPU), else None."""
        if not self.ns_ceilings or group.requests.get("cpu", 0) <= 0:
            return None
        budgets = self.ns_ceilings.get(group.namespace)
        return None if budgets is None else min(b.left for b in budgets)

    def _join_fits(self, claim: Claim, group: Group, take: int, price: float) -> bool:
        """Do the pods joining keep every ceiling (the NodeClaim's and the namespaces') at or under its max?"""
        delta, per_ns = self._join_deltas(claim, group, take, price)
        if delta > PRICE_EPSILON and any(b.left < delta - PRICE_EPSILON for b in claim.pool.ceilings):
            return False
        return not any(
            change > PRICE_EPSILON and any(b.left < change - PRICE_EPSILON for b in self.ns_ceilings[ns])
            for ns, change in per_ns.items()
        )

    def _join_charge(self, claim: Claim, group: Group, take: int, price: float) -> None:
        delta, per_ns = self._join_deltas(claim, group, take, price)
        for b in claim.pool.ceilings:
            b.left -= delta
        for ns, change in per_ns.items():
            for b in self.ns_ceilings[ns]:
                b.left -= change
        if claim.shares is not None:
            entry = claim.shares.setdefault(group.namespace, [0, 0])
            entry[0] += group.requests.get("cpu", 0) * take
            entry[1] += take

    def merge_claims(self) -> None:
        """Plans of modest size only (see ``_merge_claims`` and ``repack_claims``); then NodeClaims
        are numbered."""
        # Under NodeflowPolicy namespace ceilings the passes are skipped (they would move price among namespaces).
        if len(self.claims) <= _MERGE_MAX_CLAIMS and not self.ns_ceilings:
            self._merge_claims()
        if len(self.claims) <= repack.MAX_CLAIMS and not self.ns_ceilings:
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
                (
                    c
                    for c in self.claims
                    if not c.topology and c.pool.remaining is None and not c.reservation and not _governed(c.pool)
                ),
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
            if claim.topology or claim.ports or pool.remaining is not None or pool.min_values or _governed(pool):
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
        left = self._ns_left(group)  # what the pods' namespace has left under its ceilings (None: no ceiling)
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
                if (denied and pool.input.name in denied) or pool.groups:
                    continue
                if pool.reserved_requirements is not None and pool.remaining is None:
                    options = self._reserved_options(pool, group, alt)[1]
                    if options:
                        _it, o, cap = min(options, key=lambda opt: _option_key(opt, count))
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
                    if not self._join_fits(claim, group, take, price):
                        continue
                    self._join_charge(claim, group, take, price)
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
        if claim.pool.ceilings:  # no larger type than what is left under its ceilings
            budget = min(budget, claim.price + min(b.left for b in claim.pool.ceilings) + PRICE_EPSILON)
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
            if not self._join_fits(claim, group, take, price):
                return 0
            self._join_charge(claim, group, take, price)
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
            self.fallback_notes[id(outcome[0])] = note
        return outcome

    def _reserved_options(
        self, pool: Pool, group: Group, alt: Requirements
    ) -> tuple[Requirements, list[tuple[InstanceType, Offering, int]], list[str]]:
        """The pool's reserved offerings that hold at least one pod of the group under ``alt``, with the pods
        each type holds, and the matching reservations already used up (``"id (type, zone)"``)."""
        reqs = pool.reserved_requirements
        if reqs is None or pool.input.error or untolerated(group.tolerations, pool.input.taints, group.effects):
            return Requirements(), [], []
        if reqs.compatible(alt, ALLOW_UNDEFINED) is not None:
            return reqs, [], []
        if len(alt):
            reqs = reqs.add(alt)
        needed = res.add(pool.daemon, group.requests)
        options: list[tuple[InstanceType, Offering, int]] = []
        exhausted: list[str] = []
        checks = [(k, r) for k, r in reqs.items() if k in OFFERING_KEYS]
        for it in pool.reserved_types:
            if not res.fits(needed, it.allocatable) or not type_matches(it, reqs):
                continue
            cap = 1 if group.host_ports else res.max_count(group.requests, it.allocatable, pool.daemon)
            for o in it.offerings:
                if not o.reservation_id or not all(r.has(offering_label(o, k)) for k, r in checks):
                    continue
                if not o.available and o.reservation_capacity > 0:
                    continue  # not offered in its zone, an expiring capacity block, or recently refused
                if not o.available or self.reservations.get(o.reservation_id, 0) <= 0:
                    exhausted.append(f"{o.reservation_id} ({it.name}, {o.zone})")
                    continue
                options.append((it, o, cap))
        return reqs, options, exhausted

    def _try_reserved(
        self, pool: Pool, group: Group, alt: Requirements, count: int, together: bool
    ) -> tuple[Claim, int, bool] | str:
        """Open a NodeClaim counted against one capacity reservation (its type, zone and id pinned), or say
        ("" when nothing applies) why the matching reservations cannot take it."""
        reqs, options, exhausted = self._reserved_options(pool, group, alt)
        remaining = self._limits(pool) if pool.groups else pool.remaining
        if together:
            options = [opt for opt in options if opt[2] >= count]
        if remaining is not None:
            options = [opt for opt in options if all(capacity(opt[0], k) <= v for k, v in remaining.items())]
        budgets = self._budgets(pool, group.namespace) if self.governed else []
        if budgets:
            allow = min(b.left for b in budgets) + PRICE_EPSILON
            options = [opt for opt in options if opt[1].price <= allow]
        strict = pool.min_values and self.strict_min_values
        for it, o, cap in sorted(options, key=lambda opt: _option_key(opt, count)):
            pins = [
                Requirement(wk.LABEL_CAPACITY_TYPE, False, frozenset({wk.CAPACITY_TYPE_RESERVED})),
                Requirement(wk.LABEL_ZONE, False, frozenset({o.zone})),
                Requirement(wk.LABEL_CAPACITY_RESERVATION_ID, False, frozenset({o.reservation_id})),
                Requirement(wk.LABEL_CAPACITY_RESERVATION_TYPE, False, frozenset({o.reservation_type})),
                Requirement(
                    wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
                    False,
                    frozenset({offering_label(o, wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE)}),
                ),
            ]
            if o.zone_id:
                pins.append(Requirement(wk.LABEL_ZONE_ID, False, frozenset({o.zone_id})))
            claim_reqs = reqs.add(Requirements(pins))
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
            self.reservations[o.reservation_id] -= 1
            self._charge_limits(pool, [it])
            if self.governed:
                self._open_charge(claim, budgets, group, take)
            return claim, take, take < cap
        if exhausted:
            return "capacity reservations used up: " + ", ".join(sorted(set(exhausted)))
        return ""

    def _try_plain(
        self, pool: Pool, group: Group, alt: Requirements, count: int, together: bool = False
    ) -> tuple[Claim, int, bool] | str:
        cands = self.candidates(pool, group, alt)
        if isinstance(cands, str):
            return cands
        types, prices, caps = cands.types, cands.prices, cands.caps
        remaining = self._limits(pool) if pool.groups else pool.remaining
        # Under $/hour ceilings only types priced within what is left under every one of them (so the NodeClaim's
        # fallback types cannot cross it either).
        budgets = self._budgets(pool, group.namespace) if self.governed else []
        allow = min(b.left for b in budgets) + PRICE_EPSILON if budgets else None
        picked: list[int] | None = None  # which of the candidates ``types`` holds (None: all of them)
        if together:
            # As many of the pods as one node holds: all of them on the cheapest type that holds them
            # all, else the most any type holds (the rest cannot share this node).
            count = min(count, max(caps))
            whole = [i for i, cap in enumerate(caps) if cap >= count]
            if remaining is None:
                keep = whole
            else:
                fits = set(self._within(types, remaining))
                keep = [i for i in whole if i in fits]
            if not keep:
                return self._limit_reason(pool, [types[i] for i in whole], remaining or {})
            if allow is not None:
                priced = [i for i in keep if prices[i] <= allow]
                if not priced:
                    return self._ceiling_reason(pool, budgets, prices[keep[0]])
                keep = priced
            types, prices, caps = [types[i] for i in keep], [prices[i] for i in keep], [caps[i] for i in keep]
            picked = keep
            best = 0
        elif remaining is not None or allow is not None:
            indices = list(range(len(types))) if remaining is None else self._within(types, remaining)
            if not indices:
                return self._limit_reason(pool, types, remaining or {})
            if allow is not None:
                priced = [i for i in indices if prices[i] <= allow]
                if not priced:
                    return self._ceiling_reason(pool, budgets, prices[indices[0]])
                indices = priced
            # (every type left: the candidates' own answer, the same one in O(log n))
            best = cands.best(count) if len(indices) == len(types) else _best_index(indices, prices, caps, types, count)
            types, prices, caps = [types[i] for i in indices], [prices[i] for i in indices], [caps[i] for i in indices]
            picked = indices
            best = indices.index(best)
        else:
            best = cands.best(count)
        dense = self.dense_limits and remaining is not None
        if dense and not together:
            # As many pods as the largest type left holds, on the cheapest type that holds them.
            count = min(count, max(caps))
            best = min((i for i in range(len(types)) if caps[i] >= count), key=lambda i: (prices[i], types[i].name))
        take = min(caps[best], count)
        if pool.min_values and self.strict_min_values:
            take = self._min_values_take(cands.requirements, types, caps, pool.daemon, group, take)
            if take <= 0 or (together and take < count):
                fitting = _fitting(types, 0, res.add(pool.daemon, group.requests, max(take, 1)))
                return min_values_violation(cands.requirements, fitting) or "minValues cannot be met"
            best = min((i for i in range(len(types)) if caps[i] >= take), key=lambda i: (prices[i], types[i].name))
        partial = take < caps[best]
        if dense:
            self._charge_limits(pool, types)  # it may grow onto any of them
        elif remaining is not None:
            # Under a limit the NodeClaim keeps only types no larger than the chosen one on the
            # limited resources, so it is charged exactly what it may launch (Karpenter charges
            # the largest option; keeping oversized fallbacks would waste the limit).
            keep = self._sizes(cands.types, remaining).no_larger_than(best, picked)
            best = keep.index(best)
            types, prices, caps = [types[i] for i in keep], [prices[i] for i in keep], [caps[i] for i in keep]
            self._charge_limits(pool, [types[best]])
        # Cheaper types than the chosen one cannot hold ``take`` pods (it would be cheaper per pod).
        first = bisect.bisect_left(prices, prices[best])
        claim = Claim(
            pool=pool,
            requirements=cands.requirements,
            types=types,
            prices=prices,
            start=first,
            used=res.add(pool.daemon, group.requests, take),
            ports=set(group.host_ports),
            upsize=dense,
        )
        if dense:
            allocatable = [it.allocatable for it in types]
            claim.most = (
                max(a.get("cpu", 0) for a in allocatable),
                max(a.get("memory", 0) for a in allocatable),
                max(a.get("pods", 0) for a in allocatable),
            )
        claim.advance()
        if self.governed:
            self._open_charge(claim, budgets, group, take)
        return claim, take, partial

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


def _option_key(option: tuple[InstanceType, Offering, int], count: int) -> tuple[float, int, str, str, str]:
    """Reserved offerings, best first for ``count`` pods: lowest price per pod, more pods, then by name."""
    it, o, cap = option
    take = min(cap, count)
    return (o.price / take, -take, it.name, o.zone, o.reservation_id)


def _best_index(
    indices: Iterable[int],
    prices: Sequence[float],
    caps: Sequence[int],
    types: Sequence[InstanceType],
    count: int,
) -> int:
    """The type with the lowest price per pod for ``count`` pods (more pods, then name, break ties)."""
    return min(indices, key=lambda i: (prices[i] / min(caps[i], count), -min(caps[i], count), types[i].name))


def _governed(pool: Pool) -> bool:
    """Under NodeflowPolicy ceilings or group limits: the final merge and re-packing passes leave it alone (as
    under a NodePool's own limits), so its NodeClaims keep the instance types each was trimmed to."""
    return bool(pool.ceilings or pool.groups)


def _first_price(types: Sequence[InstanceType], prices: Sequence[float], first: int, used: Mapping[str, int]) -> float:
    """The price a NodeClaim holding ``used`` has over ``types`` from ``first`` on (its cheapest fitting type)."""
    for i in range(first, len(types)):
        if res.fits(used, types[i].allocatable):
            return prices[i]
    return float("inf")


def cannot_pay(claim: Claim, namespace: str, cpu: int, left: float) -> bool:
    """Would even one pod of ``namespace`` requesting ``cpu`` millicores (> 0) joining ``claim`` cost the namespace
    more than the ``left`` it has under its ceilings? Its share grows from c/T to (c+cpu)/(T+cpu) of the
    NodeClaim's CPU requests, and the price does not fall: the cost is at least that growth times today's price
    (the check made on a join, ``Packer._join_fits``, cannot pass then). False when it may pay, or when shares go
    by pod count (no CPU requested on it)."""
    shares = claim.shares
    if shares is None:
        return False
    total = 0
    for requested, _ in shares.values():
        total += requested
    if total <= 0:
        return False
    mine = shares[namespace][0] if namespace in shares else 0
    growth = (mine + cpu) / (total + cpu) - mine / total
    return growth * claim.price > left + 2 * PRICE_EPSILON


def split_shares(shares: Mapping[str, list[int]]) -> dict[str, float]:
    """Namespace -> its fraction of a node's price: by CPU requests, per pod when none requests CPU."""
    total = sum(cpu for cpu, _ in shares.values())
    if total:
        return {ns: cpu / total for ns, (cpu, _) in shares.items()}
    pods = sum(n for _, n in shares.values()) or 1
    return {ns: n / pods for ns, (_, n) in shares.items()}
