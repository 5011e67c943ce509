"""Capacity reservations during a solve (Karpenter's ReservationManager). Pure.

Decides how many instances each EC2 capacity reservation can still launch (the least capacity any offering of it
reports; every NodeClaim opened on it takes one: ``Reservations.take``), which reserved offerings of a NodePool
hold a group's pods (``Reservations.options``, best first by ``best_first``), the requirements that pin a
NodeClaim to one reservation (``pinned``), and why a NodeClaim that could have used one did not (``notes``, for
``explain``). The packer (``packing``) opens the NodeClaims; limits and ceilings are checked there.

Must not touch: NodeClaims, limits or ceilings, the clock, or the reservations themselves (their capacity is an
input: ``catalog.reservations`` and the NodeClass status say what is left).
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.groups import Group
from nodeflow.scheduling.nodepools import Pool
from nodeflow.scheduling.pricing import ALLOW_UNDEFINED, OFFERING_KEYS, offering_label, type_matches
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.taints import untolerated

__all__ = ["Option", "Reservations", "best_first", "pinned"]

Option = tuple[InstanceType, Offering, int]  # a reserved offering and the pods of a group its type holds


class Reservations:
    """The capacity reservations of one solve: what each can still launch, and the notes of NodeClaims that found
    theirs used up."""

    def __init__(self, pools: Sequence[Pool]) -> None:
        # Capacity reservation id -> instances it can still launch.
        self.left: dict[str, int] = {}
        for pool in pools:
            for it in pool.reserved_types:
                for o in it.offerings:
                    if o.reservation_id:
                        left = self.left.get(o.reservation_id)
                        if left is None or o.reservation_capacity < left:
                            self.left[o.reservation_id] = o.reservation_capacity
        # id(claim) -> why a NodeClaim that could have used a capacity reservation did not (all used up).
        self.notes: dict[int, str] = {}

    def take(self, reservation_id: str) -> None:
        """A NodeClaim is opened on the reservation: one instance fewer left."""
        self.left[reservation_id] -= 1

    def options(self, pool: Pool, group: Group, alt: Requirements) -> tuple[Requirements, list[Option], list[str]]:
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
        options: list[Option] = []
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
                if not o.available or self.left.get(o.reservation_id, 0) <= 0:
                    exhausted.append(f"{o.reservation_id} ({it.name}, {o.zone})")
                    continue
                options.append((it, o, cap))
        return reqs, options, exhausted


def best_first(option: Option, count: int) -> tuple[float, int, str, str, str]:
    """Reserved offerings, best first for ``count`` pods: lowest price per pod, more pods, then by name."""
    it, o, cap = option
    take = min(cap, count)
    return (o.price / take, -take, it.name, o.zone, o.reservation_id)


def pinned(reqs: Requirements, o: Offering) -> Requirements:
    """``reqs`` pinned to the reserved offering ``o``: capacity type reserved, its zone (and zone id), its
    reservation's id, type and interruptibility."""
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
    return reqs.add(Requirements(pins))
