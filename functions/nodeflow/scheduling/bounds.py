"""Which upper bounds of a solve could bind: NodePool ``spec.limits``, NodeflowPolicy $/hour ceilings and group
limits. Pure.

A bound a plan stays under even when every NodeClaim launches as its dearest available offering and its largest
instance type changes nothing about that plan but the cost of honouring it: bound to it, the solver checks every
placement against it, trims NodeClaims' instance types to what is left, keeps their NodeClaims out of the merge and
re-packing passes, and (a namespace ceiling) splits groups by namespace. So the solver (``solver._settled``) first
plans with none of them but those already ``spent`` (``without``), then binds those the plan ``could_cross``, and
so on.

The worst case counted here is the one Karpenter counts for limits (a NodeClaim may launch as any of its types):
each NodeClaim at the dearest available offering of its instance types, and the most of each resource any of
them has ("nodes": 1000 a NodeClaim); a namespace's share of a NodeClaim is its pods' share of the CPU requests
(per pod when none requests CPU), as the solver charges namespace ceilings.

Must not touch: how a bound is enforced during a solve (``limits``, ``ceilings``); the clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from nodeflow.scheduling.ceilings import split_shares
from nodeflow.scheduling.nodepools import limits_in_use
from nodeflow.scheduling.pricing import PRICE_EPSILON
from nodeflow.scheduling.types import CeilingInput, GroupLimitInput, SchedulingInput, SchedulingResult

__all__ = ["Bounds", "could_cross", "every", "spent", "without"]


@dataclass(frozen=True, slots=True)
class Bounds:
    """A choice of a solve's bounds: its ceilings and group limits, and the NodePools whose limits apply."""

    ceilings: tuple[CeilingInput, ...] = ()
    group_limits: tuple[GroupLimitInput, ...] = ()
    pools: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.ceilings or self.group_limits or self.pools)

    def union(self, other: Bounds, inp: SchedulingInput) -> Bounds:
        """Both, in ``inp``'s order."""
        return Bounds(
            tuple(c for c in inp.ceilings if c in self.ceilings or c in other.ceilings),
            tuple(g for g in inp.group_limits if g in self.group_limits or g in other.group_limits),
            self.pools | other.pools,
        )


def every(inp: SchedulingInput) -> Bounds:
    """All the bounds of ``inp``."""
    limited = frozenset(p.name for p in inp.nodepools if p.limits is not None)
    return Bounds(inp.ceilings, inp.group_limits, limited)


def spent(inp: SchedulingInput) -> Bounds:
    """The bounds of ``inp`` with nothing left under them (any new NodeClaim they cover would cross them): no plan
    needs to be tried without these (a NodePool or group at its limit, a ceiling already reached)."""
    ceilings = tuple(c for c in inp.ceilings if c.max_per_hour - c.in_use <= PRICE_EPSILON)
    groups = tuple(g for g in inp.group_limits if _full(g.limits, g.in_use))
    pools = frozenset(p.name for p in inp.nodepools if p.limits and _full(p.limits, limits_in_use(p.name, inp)))
    return Bounds(ceilings, groups, pools)


def _full(limits: Mapping[str, int], in_use: Mapping[str, int]) -> bool:
    """Is nothing left under one of ``limits``?"""
    return any(limit - in_use.get(k, 0) <= 0 for k, limit in limits.items())


def without(inp: SchedulingInput, keep: Bounds) -> SchedulingInput:
    """``inp`` bound only by ``keep``."""
    pools = tuple(
        p if p.limits is None or p.name in keep.pools else dataclasses.replace(p, limits=None) for p in inp.nodepools
    )
    return dataclasses.replace(inp, nodepools=pools, ceilings=keep.ceilings, group_limits=keep.group_limits)


def could_cross(result: SchedulingResult, inp: SchedulingInput, skip: Bounds = Bounds()) -> Bounds:
    """The bounds of ``inp`` (but ``skip``'s) that ``result``'s new NodeClaims could take over their maximum."""
    limited = [p for p in inp.nodepools if p.limits is not None and p.name not in skip.pools]
    ceilings = [c for c in inp.ceilings if c not in skip.ceilings]
    groups = [g for g in inp.group_limits if g not in skip.group_limits]
    if not (limited or ceilings or groups):
        return Bounds()
    keys = sorted({k for p in limited for k in p.limits or {}} | {k for g in groups for k in g.limits})
    types = {p.name: {it.name: it for it in p.instance_types} for p in inp.nodepools}
    # (NodePool, its instance types) -> (the dearest available offering, the most of each limited resource):
    # NodeClaims of one NodePool and group often carry the same types
    worst_of: dict[tuple[str, tuple[str, ...]], tuple[float, dict[str, int]]] = {}

    def worst(pool: str, names: tuple[str, ...]) -> tuple[float, dict[str, int]]:
        hit = worst_of.get((pool, names))
        if hit is None:
            mine = [it for name in names if (it := types.get(pool, {}).get(name)) is not None]
            price = max((o.price for it in mine for o in it.offerings if o.available), default=0.0)
            most = {k: 1000 if k == "nodes" else max((it.capacity.get(k, 0) for it in mine), default=0) for k in keys}
            hit = worst_of[pool, names] = (price, most)
        return hit

    namespaced = any(c.scope == "namespace" for c in ceilings)
    cpu = {p.key: p.requests.get("cpu", 0) for p in inp.pods} if namespaced else {}
    cluster = 0.0
    by_pool: dict[str, float] = {}
    by_namespace: dict[str, float] = {}
    held: dict[str, dict[str, int]] = {}  # NodePool -> the most its new NodeClaims could hold
    for nc in result.node_claims:
        price, most = worst(nc.nodepool, nc.instance_types)
        if ceilings:
            dearest = max(nc.price, price)
            cluster += dearest
            by_pool[nc.nodepool] = by_pool.get(nc.nodepool, 0.0) + dearest
            if namespaced:
                shares: dict[str, list[int]] = {}
                for key in nc.pods:
                    entry = shares.setdefault(key.split("/", 1)[0], [0, 0])
                    entry[0] += cpu.get(key, 0)
                    entry[1] += 1
                for ns, share in split_shares(shares).items():
                    by_namespace[ns] = by_namespace.get(ns, 0.0) + dearest * share
        if keys:
            pool = held.setdefault(nc.nodepool, {})
            for k, v in most.items():
                pool[k] = pool.get(k, 0) + v
    crossed = []
    for c in ceilings:
        table = {"cluster": {"": cluster}, "nodePool": by_pool}.get(c.scope, by_namespace)
        if c.in_use + table.get(c.name, 0.0) > c.max_per_hour + PRICE_EPSILON:
            crossed.append(c)
    exceeded = [g for g in groups if _over(g.limits, g.in_use, [h for pool, h in held.items() if pool in g.nodepools])]
    pools = frozenset(
        p.name for p in limited if p.name in held and _over(p.limits or {}, limits_in_use(p.name, inp), [held[p.name]])
    )
    return Bounds(tuple(crossed), tuple(exceeded), pools)


def _over(limits: Mapping[str, int], in_use: Mapping[str, int], added: list[dict[str, int]]) -> bool:
    """Would ``added`` (summed) take what is ``in_use`` over one of ``limits``?"""
    for k, limit in limits.items():
        more = sum(a.get(k, 0) for a in added)
        if more and in_use.get(k, 0) + more > limit:
            return True
    return False
