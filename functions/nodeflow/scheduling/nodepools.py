"""NodePools as the solver sees them: requirements (template labels and the NodePool name
included), daemonset overhead, compatible instance types cheapest first, and what is left
under the NodePool's limits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nodeflow.api import labels as wk
from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.pricing import ALLOW_UNDEFINED, Pricer, type_matches
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.taints import Taint, untolerated
from nodeflow.scheduling.types import (
    NO_NODEPOOL,
    CeilingInput,
    GroupLimitInput,
    NodePoolInput,
    PodInput,
    SchedulingInput,
)

__all__ = [
    "NO_NODEPOOL",
    "CeilingBudget",
    "GroupBudget",
    "Pool",
    "Reasons",
    "Sizes",
    "all_pools",
    "capacity",
    "daemon_excluded",
    "limit_reason",
    "limits_in_use",
    "make_pool",
]

Reasons = dict[str, str]  # NodePool name -> why the pods cannot go there


@dataclass(slots=True)
class Pool:
    input: NodePoolInput
    requirements: Requirements
    daemon: dict[str, int]
    types: list[InstanceType]  # compatible with the pool's requirements, cheapest first
    prices: list[float]
    remaining: dict[str, int] | None  # limits minus what the pool runs
    min_values: bool  # some requirement has minValues
    # Capacity reservations (``reserved`` offerings): what a NodeClaim holding one must satisfy (capacity type
    # reserved; None when the NodePool does not allow reserved) and the pool's types with reserved offerings.
    reserved_requirements: Requirements | None = None
    reserved_types: tuple[InstanceType, ...] = ()
    # NodeflowPolicy group limits covering this NodePool (budgets shared with the group's other NodePools) and the
    # cluster / NodePool $/hour ceilings that apply to its NodeClaims (set by ``Packer``; empty without policies).
    groups: tuple[GroupBudget, ...] = ()
    ceilings: tuple[CeilingBudget, ...] = ()


@dataclass(slots=True)
class GroupBudget:
    """What is left under a NodeflowPolicy group limit during a solve (shared by the group's NodePools)."""

    input: GroupLimitInput
    remaining: dict[str, int]

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


@dataclass(slots=True)
class CeilingBudget:
    """What is left under a NodeflowPolicy $/hour ceiling during a solve (shared by every NodeClaim it covers)."""

    input: CeilingInput
    left: float

    @property
    def in_use(self) -> float:
        return self.input.max_per_hour - self.left

    def reason(self, pool: str, price: float) -> str:
        """ "NodeClaim of NodePool gpu ($3.0600/hour) would cross the $/hour ceiling of NodePool gpu ($20.00/hour,
        $18.50 in use): policy cost-caps"."""
        return (
            f"NodeClaim of NodePool {pool} (${price:.4f}/hour) would cross {self.input.describe(self.in_use)}: "
            f"policy {self.input.policy}"
        )


def make_pool(np: NodePoolInput, inp: SchedulingInput, pricer: Pricer) -> Pool:
    reqs = np.requirements.add(
        Requirements.from_labels(np.labels),
        Requirements([Requirement(wk.LABEL_NODEPOOL, False, frozenset({np.name}))]),
    )
    reserved_reqs, reserved_types = _reserved(np, reqs)
    # Without a capacity-type requirement every capacity type is allowed, as in Karpenter (each NodeClaim then
    # lists the capacity types its instance types offer, ``pricing.offered_capacity_types``, and launches spot
    # before on-demand).
    if reserved_reqs is not None and wk.LABEL_CAPACITY_TYPE in reqs:
        # NodeClaims that hold no reservation launch spot / on-demand only (never into a reservation they
        # were not counted against; without a requirement, pricing never offers them a reserved offering).
        plain = reqs[wk.LABEL_CAPACITY_TYPE].intersection(_NOT_RESERVED)
        if len(plain):
            reqs = Requirements([*(r for k, r in reqs.items() if k != wk.LABEL_CAPACITY_TYPE), plain])
    daemon: dict[str, int] = {}
    for dpod in inp.daemon_pods:
        if daemon_excluded(dpod, reqs, np.taints) is None:
            daemon = res.add(daemon, dpod.requests)
    types, prices = pricer.sorted_types([it for it in np.instance_types if type_matches(it, reqs)], reqs)
    remaining: dict[str, int] | None = None
    if np.limits is not None:
        in_use = limits_in_use(np.name, inp)
        remaining = {k: v - in_use.get(k, 0) for k, v in np.limits.items()}
    min_values = any(r.min_values for r in reqs.values())
    return Pool(np, reqs, daemon, types, prices, remaining, min_values, reserved_reqs, reserved_types)


_RESERVED = Requirement(wk.LABEL_CAPACITY_TYPE, False, frozenset({wk.CAPACITY_TYPE_RESERVED}))
_NOT_RESERVED = Requirement(wk.LABEL_CAPACITY_TYPE, True, frozenset({wk.CAPACITY_TYPE_RESERVED}))


def _reserved(np: NodePoolInput, reqs: Requirements) -> tuple[Requirements | None, tuple[InstanceType, ...]]:
    """Requirements of a NodeClaim launched into a capacity reservation of this NodePool, and the types
    with reserved offerings. A NodePool allows ``reserved`` unless its capacity-type requirement excludes it
    (with no such requirement every capacity type is allowed, as in Karpenter; the NodeClaims that hold no
    reservation then launch spot or on-demand)."""
    if not any(o.reservation_id for it in np.instance_types for o in it.offerings):
        return None, ()
    current = reqs.get(wk.LABEL_CAPACITY_TYPE)
    if current is not None and not current.has(wk.CAPACITY_TYPE_RESERVED):
        return None, ()
    reserved = Requirements([*(r for k, r in reqs.items() if k != wk.LABEL_CAPACITY_TYPE), _RESERVED])
    types = tuple(
        it for it in np.instance_types if any(o.reservation_id for o in it.offerings) and type_matches(it, reserved)
    )
    return (reserved, types) if types else (None, ())


def daemon_excluded(daemon: PodInput, requirements: Requirements, taints: Iterable[Taint]) -> str | None:
    """Why a DaemonSet's pod does not run on a NodePool's nodes (its ``requirements`` and ``taints``), or None when
    it does: its requests are then overhead on each of them."""
    taint = untolerated(daemon.tolerations, taints)
    if taint is not None:
        return f"did not tolerate taint {taint}"
    conflicts = [requirements.compatible(alt, ALLOW_UNDEFINED) for alt in daemon.requirements]
    if any(c is None for c in conflicts):
        return None
    return "incompatible requirements: " + "; ".join(c for c in conflicts if c)


def all_pools(pools: Iterable[Pool], reason: str) -> Reasons:
    """The same reason for every NodePool (or for "no NodePool" when there is none)."""
    return {p.input.name: reason for p in pools} or {NO_NODEPOOL: reason}


def limits_in_use(nodepool: str, inp: SchedulingInput) -> dict[str, int]:
    """What the NodePool's nodes and launching NodeClaims hold against its limits (``nodes``: 1000 a node)."""
    return res.total({**(n.capacity or n.allocatable), "nodes": 1000} for n in inp.nodes if n.nodepool == nodepool)


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
