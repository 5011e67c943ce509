"""A NodeClaim being filled during a solve (``Claim``), and what its type list says about it.

Decides, of one NodeClaim: the topology domain its requirements pin (``Claim.domain``), its price (its cheapest type
that holds its pods), the room left at that price (``Claim.advance``, ``Claim.room``), the at most
``MAX_INSTANCE_TYPES`` types written into its plan (``fitting_types``), and the type it opens on (``opened``).

Must not touch: which NodeClaim pods go to (``packing``), bounds (limits, ceilings, reservations), topology, the
clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.nodepools import Pool
from nodeflow.scheduling.pricing import PRICE_EPSILON
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.topology import UNBOUNDED
from nodeflow.scheduling.types import HostPort

__all__ = ["MAX_INSTANCE_TYPES", "Claim", "first_price", "fitting_types", "opened"]

# Like Karpenter, a NodeClaim carries at most this many instance types (the cheapest).
MAX_INSTANCE_TYPES = 60


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
    # of a limited NodePool packed as Karpenter packs one (``packing.Packer.dense_limits``), charged its largest type.
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


def fitting_types(types: Sequence[InstanceType], first: int, used: Mapping[str, int]) -> list[InstanceType]:
    """The (at most MAX_INSTANCE_TYPES) cheapest types from ``first`` on that hold ``used``."""
    out: list[InstanceType] = []
    for it in types[first:]:
        if res.fits(used, it.allocatable):
            out.append(it)
            if len(out) == MAX_INSTANCE_TYPES:
                break
    return out


def opened(
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


def first_price(types: Sequence[InstanceType], prices: Sequence[float], first: int, used: Mapping[str, int]) -> float:
    """The price a NodeClaim holding ``used`` has over ``types`` from ``first`` on (its cheapest fitting type)."""
    for i in range(first, len(types)):
        if res.fits(used, types[i].allocatable):
            return prices[i]
    return float("inf")
