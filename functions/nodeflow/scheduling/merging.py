"""Merging: the final pass of a solve that puts two NodeClaims' pods on one node when that costs less.

Decides, for plans of modest size (``MAX_CLAIMS``), which pairs of NodeClaims of one NodePool become one: a single
instance type holding both NodeClaims' pods costs less than the two. Only NodeClaims whose pods no topology rule or
selector looks at, outside capacity reservations and NodePools under a limit or ceiling, are merged; minValues still
hold after a merge.

Must not touch: topology (merged NodeClaims carry no pods it counts), bounds, the other passes (``packing`` decides
which passes run; re-packing is ``repack``), the clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.candidate_types import CandidateTypes
from nodeflow.scheduling.existing import ports_conflict
from nodeflow.scheduling.min_values import min_values_violation
from nodeflow.scheduling.nodeclaim import Claim, fitting_types
from nodeflow.scheduling.nodepools import Pool
from nodeflow.scheduling.pricing import PRICE_EPSILON
from nodeflow.scheduling.requirements import Requirements

__all__ = ["MAX_CLAIMS", "merge_claims"]

# Plans with at most this many NodeClaims get the merge pass (it compares pairs).
MAX_CLAIMS = 200
# ...and up to this many, every NodeClaim (not only partly filled ones) may be moved.
_MERGE_ALL_CLAIMS = 100
# ...in at most this many passes over the NodeClaims.
_PASSES = 3


def merge_claims(
    claims: list[Claim],
    tails: Sequence[Claim],
    choices: CandidateTypes,
    bounded: Callable[[Pool], bool],
    strict_min_values: bool,
) -> None:
    """Last pass, for plans of modest size: put the pods of two NodeClaims of one NodePool on
    one node whenever a single instance type that holds them all costs less than the two.
    Only NodeClaims whose pods no topology rule or selector looks at, in NodePools without
    limits, are merged (moving them cannot break a spread, an affinity or a limit). ``tails``: the NodeClaims
    opened for fewer pods than they hold; ``bounded``: NodePools under a limit or ceiling (left alone)."""
    small_plan = len(claims) <= _MERGE_ALL_CLAIMS
    partial = {id(c) for c in tails}
    for _ in range(_PASSES):
        merged = False
        candidates = sorted(
            (c for c in claims if not c.topology and not c.reservation and not bounded(c.pool)),
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
                types, prices = choices.narrow(big.pool.types, big.pool.requirements, reqs)
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
                strict = big.pool.min_values and strict_min_values
                if strict and min_values_violation(reqs, fitting_types(types, first, used)) is not None:
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
            claims.remove(small)
            small.topology = True  # gone: never a partner again in this pass
            partial.add(id(big))
            merged = True
        if not merged:
            break
