"""Which instance types a NodeClaim may be on: a group's candidates in a NodePool, and type lists narrowed.

Decides the instance types of a NodePool that hold at least one pod of a group, cheapest first, with how many each
holds (``CandidateTypes.candidates``, or why none: a taint, a requirement, a resource no type has), which of them is
cheapest per pod for N pods (``Candidates.best``, ``best_index``, ``cheapest_holding``), and the types of a
NodeClaim its new requirements still allow (``CandidateTypes.narrow``). ``CandidateTypes`` caches all of it for one
set of pods and NodePools; the caches do not depend on limits or policies, so the solves of ``solver._settled`` share
one.

Must not touch: the NodeClaims (``packing`` opens and fills them), bounds (limits, ceilings, reservations),
topology, the clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.groups import Group
from nodeflow.scheduling.nodeclaim import Claim
from nodeflow.scheduling.nodepools import Pool
from nodeflow.scheduling.pricing import (
    ALLOW_UNDEFINED,
    OFFERING_KEYS,
    Pricer,
    describe_offering_reqs,
    type_keys_changed,
    type_matches,
)
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.taints import untolerated
from nodeflow.scheduling.topology import UNBOUNDED

__all__ = ["BestPerPod", "CandidateTypes", "Candidates", "best_index", "cheapest_holding"]


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
    the two at the split point. Ties break on more pods, then on name, as ``best_index``.
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


class CandidateTypes:
    """The candidate instance types of one solve's groups, and narrowed type lists (cached)."""

    def __init__(self, pricer: Pricer) -> None:
        self.pricer = pricer
        self._candidate_cache: dict[tuple[object, ...], Candidates | str] = {}
        self._narrow_cache: dict[
            tuple[int, Requirements], tuple[list[InstanceType], list[InstanceType], list[float]]
        ] = {}
        # id(types) -> (types, the most any of them has allocatable per resource): an upper bound for any sublist.
        self._max_alloc_cache: dict[int, tuple[list[InstanceType], dict[str, int]]] = {}

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

    def joined(
        self, claim: Claim, alt: Requirements
    ) -> tuple[Requirements, list[InstanceType], list[float], int, bool]:
        """A NodeClaim's requirements with ``alt`` added, the types they allow (cheapest first) and the first of them
        to look at, and whether ``alt`` narrowed them: its own types from ``claim.start`` when it adds nothing, else
        its types ``narrow``-ed, from the first."""
        reqs = claim.requirements.add(alt) if len(alt) else claim.requirements
        if reqs == claim.requirements:
            return reqs, claim.types, claim.prices, claim.start, False
        types, prices = self.narrow(claim.types, claim.requirements, reqs)
        return reqs, types, prices, 0, True

    def most_allocatable(self, types: list[InstanceType]) -> dict[str, int]:
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


def best_index(
    indices: Iterable[int],
    prices: Sequence[float],
    caps: Sequence[int],
    types: Sequence[InstanceType],
    count: int,
) -> int:
    """The type with the lowest price per pod for ``count`` pods (more pods, then name, break ties)."""
    return min(indices, key=lambda i: (prices[i] / min(caps[i], count), -min(caps[i], count), types[i].name))


def cheapest_holding(types: Sequence[InstanceType], prices: Sequence[float], caps: Sequence[int], count: int) -> int:
    """The cheapest of ``types`` (then by name) that holds ``count`` pods (``caps``: the pods each holds)."""
    return min((i for i in range(len(types)) if caps[i] >= count), key=lambda i: (prices[i], types[i].name))
