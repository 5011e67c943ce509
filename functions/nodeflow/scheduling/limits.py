"""Resource limits during a solve: NodePool ``spec.limits`` and NodeflowPolicy group limits. Pure.

Decides what is left under a NodePool's limits and its groups' (``Limits.left``), which instance types a new
NodeClaim may still launch as (``Limits.within``, ``Sizes``), what a new NodeClaim is charged (``Limits.charge``:
the most any of its types has, Karpenter's subtractMax) and why a NodeClaim is refused (``Limits.refusal``). The
packer (``packing``) asks; it alone opens NodeClaims. Which limits are bound to a solve at all is ``bounds``'; the
$/hour ceilings are ``ceilings``'.

Must not touch: NodeClaims, pods or prices (a limit is resources only), the clock, or anything outside the solve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling.nodepools import Pool
from nodeflow.scheduling.types import GroupLimitInput, SchedulingInput

__all__ = ["GroupBudget", "Limits", "Sizes", "capacity", "limit_reason"]


def capacity(it: InstanceType, name: str) -> int:
    """What one node of this type counts against a NodePool limit (``nodes`` counts one)."""
    return 1000 if name == "nodes" else it.capacity.get(name, 0)


@dataclass(frozen=True, slots=True)
class Sizes:
    """Instance types' sizes on some limited resources (``keys``, sorted): what limits compare, read once."""

    keys: tuple[str, ...]
    count: int  # how many types
    columns: tuple[tuple[int, ...], ...]  # per key, each type's capacity on it
    most: tuple[int, ...]  # the most any type has, per key
    smallest: int  # the index of the smallest type (its sizes in key order the least, then the first)

    @staticmethod
    def of(types: Sequence[InstanceType], keys: tuple[str, ...]) -> Sizes:
        columns = tuple(tuple(capacity(it, k) for it in types) for k in keys)
        most = tuple(max(column, default=0) for column in columns)
        vectors = list(zip(*columns, strict=True)) if keys else [() for _ in types]
        smallest = min(range(len(vectors)), key=vectors.__getitem__) if vectors else 0
        return Sizes(keys, len(types), columns, most, smallest)

    def _no_larger(self, bound: Sequence[int], subset: Sequence[int] | None) -> list[int]:
        """Of ``subset`` (indices; None: every type), those no larger than ``bound`` (per key), in order."""
        picked: list[int] | None = None if subset is None else list(subset)
        for column, most, limit in zip(self.columns, self.most, bound, strict=True):
            if most <= limit:
                continue  # no type exceeds it on this key
            if picked is None:
                picked = [i for i, size in enumerate(column) if size <= limit]
            else:
                picked = [i for i in picked if column[i] <= limit]
        return list(range(self.count)) if picked is None else picked

    def within(self, remaining: Mapping[str, int]) -> list[int]:
        """The indices of the types no larger than ``remaining`` on any key."""
        return self._no_larger([remaining[k] for k in self.keys], None)

    def no_larger_than(self, index: int, subset: Sequence[int] | None = None) -> list[int]:
        """Of the types ``subset`` picks (indices; None: all of them), the positions of those no larger than the
        one at position ``index`` on any key."""
        chosen = index if subset is None else subset[index]
        kept = self._no_larger([column[chosen] for column in self.columns], subset)
        if subset is None:
            return kept
        position = {t: i for i, t in enumerate(subset)}
        return [position[t] for t in kept]


@dataclass(slots=True)
class GroupBudget:
    """What is left under a NodeflowPolicy group limit during a solve (shared by the group's NodePools)."""

    input: GroupLimitInput
    remaining: dict[str, int]

    @staticmethod
    def start(limit: GroupLimitInput) -> GroupBudget:
        """The budget before anything is planned: the limits less what the group's nodes hold."""
        return GroupBudget(limit, {k: v - limit.in_use.get(k, 0) for k, v in limit.limits.items()})

    def reason(self, types: Sequence[InstanceType], smallest: InstanceType | None = None) -> str:
        """Why none of ``types`` fits under the group's limits (``smallest``: the smallest of them on the limited
        resources, when known)."""
        remaining = self.remaining
        keys = sorted(remaining)
        if smallest is None:
            smallest = types[Sizes.of(types, tuple(keys)).smallest]
        name = next((k for k in keys if capacity(smallest, k) > remaining[k]), keys[0])
        limit = self.input.limits[name]
        return (
            f"exceeds limit {name}={format_milli(limit, name)} of NodePool group {self.input.name} "
            f"({self.input.nodepools.describe()}): {format_milli(max(remaining[name], 0), name)} remaining, "
            f"the smallest fitting instance type {smallest.name} has {format_milli(capacity(smallest, name), name)}: "
            f"policy {self.input.policy}"
        )


def limit_reason(
    pool: Pool, types: Sequence[InstanceType], remaining: Mapping[str, int], smallest: InstanceType | None = None
) -> str:
    """Why none of ``types`` fits under the pool's limits (``smallest``: the smallest of them on the limited
    resources, when known)."""
    keys = sorted(remaining)
    if smallest is None:
        smallest = types[Sizes.of(types, tuple(keys)).smallest]
    name = next((k for k in keys if capacity(smallest, k) > remaining[k]), keys[0])
    limit = pool.input.limits[name] if pool.input.limits else 0
    return (
        f"exceeds NodePool limit {name}={format_milli(limit, name)}: "
        f"{format_milli(max(remaining[name], 0), name)} remaining, the smallest fitting "
        f"instance type {smallest.name} has {format_milli(capacity(smallest, name), name)}"
    )


class Limits:
    """The resource limits of one solve: each NodePool's own (``Pool.remaining``, counted down here) and the
    NodeflowPolicy group limits covering it (budgets shared by the group's NodePools)."""

    def __init__(self, inp: SchedulingInput, pools: Sequence[Pool], shared: Limits | None = None) -> None:
        """``shared``: the limits of another solve of the same pods and NodePools, whose size tables this one
        reuses (they do not depend on what is left)."""
        groups = [GroupBudget.start(g) for g in inp.group_limits]
        # NodePool name -> the group limits covering it (none without policies)
        self._groups: dict[str, tuple[GroupBudget, ...]] = {}
        for pool in pools:
            name = pool.input.name
            mine = tuple(g for g in groups if name in g.input.nodepools)
            if mine:
                self._groups[name] = mine
        self.refusals = 0  # new NodeClaims refused by a limit (a denser packing may place their pods)
        # (id(types), limited resources) -> (types, their sizes on them): limits checked without a lookup per type.
        self._sizes_cache: dict[tuple[int, tuple[str, ...]], tuple[Sequence[InstanceType], Sizes]] = (
            shared._sizes_cache if shared is not None else {}
        )

    def grouped(self, pool: Pool) -> bool:
        """Is the pool under a NodeflowPolicy group limit?"""
        return pool.input.name in self._groups

    def bounded(self, pool: Pool) -> bool:
        """Is the pool under any limit (its own or a group's)?"""
        return pool.remaining is not None or pool.input.name in self._groups

    def left(self, pool: Pool) -> dict[str, int] | None:
        """What is left under the pool's own limits and its groups' (the least of them per resource); None when
        nothing limits it."""
        groups = self._groups.get(pool.input.name)
        if not groups:
            return pool.remaining
        merged = dict(pool.remaining or {})
        for g in groups:
            for k, v in g.remaining.items():
                merged[k] = min(merged[k], v) if k in merged else v
        return merged

    def charge(self, pool: Pool, types: Sequence[InstanceType]) -> None:
        """A new NodeClaim that may launch as any of ``types`` counts the most any of them has against the pool's
        limits and its groups' (Karpenter's subtractMax)."""
        if pool.remaining is not None:
            for name in pool.remaining:
                pool.remaining[name] -= max(capacity(it, name) for it in types)
        for g in self._groups.get(pool.input.name, ()):
            for name in g.remaining:
                g.remaining[name] -= max(capacity(it, name) for it in types)

    def refusal(self, pool: Pool, types: Sequence[InstanceType], remaining: Mapping[str, int]) -> str:
        """Why none of ``types`` fits: the pool's own limit, else the group limit the smallest type exceeds (counted
        in ``refusals``)."""
        self.refusals += 1
        groups = self._groups.get(pool.input.name, ())
        if not groups:
            return limit_reason(pool, types, remaining, self._smallest(types, remaining))
        own = pool.remaining
        if own is not None and not self.within(types, own):
            return limit_reason(pool, types, own, self._smallest(types, own))
        for g in groups:
            if not self.within(types, g.remaining):
                return g.reason(types, self._smallest(types, g.remaining))
        # Each type crosses one budget or another: name them all.
        parts = [limit_reason(pool, types, own, self._smallest(types, own))] if own is not None else []
        return "; ".join([*parts, *(g.reason(types, self._smallest(types, g.remaining)) for g in groups)])

    def sizes(self, types: Sequence[InstanceType], remaining: Mapping[str, int]) -> Sizes:
        """``types``' sizes on the resources ``remaining`` limits (cached per type list)."""
        keys = tuple(sorted(remaining))
        key = (id(types), keys)
        hit = self._sizes_cache.get(key)
        if hit is not None and hit[0] is types:
            return hit[1]
        sizes = Sizes.of(types, keys)
        self._sizes_cache[key] = (types, sizes)
        return sizes

    def within(self, types: Sequence[InstanceType], remaining: Mapping[str, int]) -> list[int]:
        """The indices of ``types`` no larger than ``remaining`` on any resource it limits."""
        return self.sizes(types, remaining).within(remaining)

    def _smallest(self, types: Sequence[InstanceType], remaining: Mapping[str, int]) -> InstanceType:
        """The smallest of ``types`` on the resources ``remaining`` limits (in their name order)."""
        return types[self.sizes(types, remaining).smallest]
