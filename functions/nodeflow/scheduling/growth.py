"""Growth: moving open NodeClaims onto a larger instance type when that costs less than new NodeClaims.

Decides, for a group that would fill only a few new NodeClaims (``Growth.few_nodes``), which partly filled
NodeClaims take its pods on a larger type of theirs (``Growth.grow``): the ones where the added price per pod beats
the price per pod of NodeClaims of the group's own (``Growth.standalone``). Pods of different shapes then share
nodes. A grown NodeClaim still meets minValues and its $/hour ceilings (asked of ``ceilings.Ceilings``).

Must not touch: which NodeClaims are open or opened (``packing``), NodePool and group limits (a NodeClaim under one
is charged once, when opened: ``limits``), capacity reservations (reserved NodeClaims never grow), the clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.candidate_types import CandidateTypes
from nodeflow.scheduling.ceilings import Ceilings
from nodeflow.scheduling.groups import Group
from nodeflow.scheduling.limits import Limits
from nodeflow.scheduling.min_values import min_values_violation
from nodeflow.scheduling.nodeclaim import Claim, first_price, fitting_types
from nodeflow.scheduling.nodepools import Pool
from nodeflow.scheduling.pricing import ALLOW_UNDEFINED, PRICE_EPSILON
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.reservation_manager import Reservations, best_first

if TYPE_CHECKING:
    from nodeflow.scheduling.topology import Topology

__all__ = ["Growth"]

# How many of the most recent open NodeClaims may be grown onto a larger type for a group.
_GROW_WINDOW = 64
# ...and how many larger types of each are looked at (the cheapest ones).
_GROW_TYPES = 256
# ...and only for groups that would otherwise fill fewer than this many new NodeClaims.
_GROW_MAX_NODES = 4
# ...in at most this many passes over the NodeClaims.
_GROW_PASSES = 3


@dataclass(slots=True)
class Growth:
    """Growing the open NodeClaims of one solve (``packing.Packer`` asks). ``governed``: NodeflowPolicy $/hour
    ceilings or group limits bind this solve (else the ceiling checks are skipped)."""

    pools: Sequence[Pool]
    choices: CandidateTypes
    limits: Limits
    ceilings: Ceilings
    reservations: Reservations
    topology: Topology
    strict_min_values: bool
    governed: bool

    def standalone(self, group: Group, alts: tuple[Requirements, ...], count: int) -> tuple[float, int] | None:
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
                cands = self.choices.candidates(pool, group, alt)
                if isinstance(cands, str) or pool.remaining is not None:
                    continue
                best = cands.best(count)
                return cands.prices[best] / min(cands.caps[best], count), cands.caps[best]
        return None

    def few_nodes(self, group: Group, alts: tuple[Requirements, ...], count: int) -> bool:
        standalone = self.standalone(group, alts, count)
        return standalone is not None and standalone[1] * _GROW_MAX_NODES > count

    def grow(
        self,
        group: Group,
        pending: list[str],
        alts: tuple[Requirements, ...],
        blocked: set[int],
        tails: Sequence[Claim],
    ) -> list[str]:
        """Move open NodeClaims onto a larger instance type when that costs less per pod than
        new NodeClaims would: pods of different shapes then share nodes (a memory-heavy pod
        turns a compute node into a general-purpose one) instead of each shape getting its own. ``tails``: the
        NodeClaims opened for fewer pods than they hold (the last ``_GROW_WINDOW`` of them are looked at)."""
        for _ in range(_GROW_PASSES):
            if not pending:
                break
            found = self.standalone(group, alts, len(pending))
            if found is None:
                break
            standalone, per_node = found
            cap = min(len(pending), per_node)
            # One scan finds each NodeClaim's best growth; the best ones are then applied in order.
            options: list[tuple[float, int, int, Claim, Requirements, list[InstanceType], list[float], int]] = []
            for claim in tails[-_GROW_WINDOW:]:
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
                if strict and min_values_violation(reqs, fitting_types(types, i, used)) is not None:
                    continue
                if self.governed:
                    price = first_price(types, prices, 0 if types is not claim.types else claim.start, used)
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
        largest = self.choices.most_allocatable(claim.types)
        used = claim.used
        if any(
            value > 0 and largest.get(name, 0) - used.get(name, 0) < value for name, value in group.requests.items()
        ):
            return None
        alt = next((a for a in alts if claim.requirements.compatible(a, ALLOW_UNDEFINED) is None), None)
        if alt is None:
            return None
        reqs, types, prices, first, _ = self.choices.joined(claim, alt)
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
