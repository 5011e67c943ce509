"""NodePools as the solver sees them: requirements (template labels and the NodePool name
included), daemonset overhead, compatible instance types cheapest first, the instance types with
capacity reservations, and what is left under the NodePool's limits when a solve starts. Pure.

Must not touch: what a solve spends (limits are counted down by ``limits``, ceilings by ``ceilings``,
reservations by ``reservation_manager``), NodeClaims or pods' placement."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.pricing import ALLOW_UNDEFINED, Pricer, type_matches
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.taints import Taint, untolerated
from nodeflow.scheduling.types import (
    NO_NODEPOOL,
    NodePoolInput,
    PodInput,
    SchedulingInput,
)

__all__ = [
    "NO_NODEPOOL",
    "Pool",
    "Reasons",
    "all_pools",
    "daemon_excluded",
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
    remaining: dict[str, int] | None  # limits minus what the pool runs (counted down by ``limits.Limits.charge``)
    min_values: bool  # some requirement has minValues
    # Capacity reservations (``reserved`` offerings): what a NodeClaim holding one must satisfy (capacity type
    # reserved; None when the NodePool does not allow reserved) and the pool's types with reserved offerings.
    reserved_requirements: Requirements | None = None
    reserved_types: tuple[InstanceType, ...] = ()


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
