"""Capacity reservations in the deployed path: what the provisioner may plan into, and capacity blocks ending.

- ``live_reservations``: the reservations every EC2NodeClass's ``capacityReservationSelectorTerms`` select, live
  from DescribeCapacityReservations (``nodeflow.aws.ec2.capacity_reservations``), with EC2's available
  instance counts; the provisioner gives them to the solver (``ClusterState.capacity_reservations``), which
  offers each class the ones it selects as ``reserved`` offerings (a capacity block within 40 minutes of its end
  is left out: nothing launches into it any more). When EC2 cannot be asked (throttled,
  unavailable) there are none this time: pods go to spot / on-demand rather than wait.
- ``available_after_launches`` (pure): EC2's counts less the NodeClaims not launched yet that may launch into a
  reservation (a NodeClaim that allows only ``reserved`` capacity counts against each reservation id it allows,
  as Karpenter's scheduler holds every compatible reservation for a NodeClaim), so a provisioning run that follows
  another before its launches never plans more NodeClaims into a reservation than it has instances left.
- ``expiring_capacity_blocks`` (pure): NodeClaims on a capacity block (``karpenter.k8s.aws/capacity-reservation-id``
  naming a ``capacity-block`` reservation of an EC2NodeClass's ``status.capacityReservations``) whose block ends
  within ``EXPIRING_WINDOW`` (40 minutes: Karpenter terminates them then, 10 minutes before EC2 starts reclaiming
  the instances), or that the status already calls ``expiring``. The disruption Lambda (every minute) starts
  the terminate workflow of each (reason ``CapacityBlockExpiring``): the node is tainted and drained, its pods
  provisioned elsewhere, the instance terminated; as Karpenter's expiration controller, not paused by the
  disruption pause switch and not limited by budgets (EC2 takes the instances back regardless).

Must not touch: which reservation a launch uses (``launch``) or how reservations are read
(``nodeflow.aws.ec2.capacity_reservations``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim
from nodeflow.aws.ec2.capacity_reservations import describe_capacity_reservations
from nodeflow.aws.errors import AwsError
from nodeflow.catalog.reservations import (
    EXPIRING_WINDOW,
    RESERVATION_TYPE_CAPACITY_BLOCK,
    CapacityReservation,
    status_state,
)

__all__ = [
    "REASON_CAPACITY_BLOCK_EXPIRING",
    "available_after_launches",
    "expiring_capacity_blocks",
    "live_reservations",
]

REASON_CAPACITY_BLOCK_EXPIRING = "CapacityBlockExpiring"


def live_reservations(
    ec2: Any,
    node_classes: Iterable[EC2NodeClass],
    now: datetime,
    log: Callable[[str, dict[str, Any]], None] = lambda _m, _e: None,
) -> tuple[CapacityReservation, ...]:
    """Every reservation some class's ``capacityReservationSelectorTerms`` select (active, not ended, by id), less
    the capacity blocks that are ``expiring`` at ``now`` (nothing may launch into a block about to be reclaimed);
    none when no class has terms or EC2 cannot be asked now (logged)."""
    terms = [t for nc in node_classes for t in nc.spec.capacity_reservation_selector_terms or ()]
    if not terms:
        return ()
    try:
        found = describe_capacity_reservations(ec2, terms, now)
    except AwsError as exc:
        log("capacity reservations not described", {"error": f"{type(exc).__name__}: {exc}"})
        return ()
    return tuple(r for r in found if status_state(r, now) == "active")


def _pinned_reservations(claim: NodeClaim) -> tuple[str, ...]:
    """The reservation ids a NodeClaim that allows only reserved capacity may launch into (else none)."""
    capacity = next((r for r in claim.spec.requirements if r.key == wk.LABEL_CAPACITY_TYPE), None)
    ids = next((r for r in claim.spec.requirements if r.key == wk.LABEL_CAPACITY_RESERVATION_ID), None)
    if capacity is None or capacity.operator != "In" or list(capacity.values or ()) != [wk.CAPACITY_TYPE_RESERVED]:
        return ()
    if ids is None or ids.operator != "In":
        return ()
    return tuple(dict.fromkeys(ids.values or ()))


def available_after_launches(
    reservations: Sequence[CapacityReservation], claims: Iterable[NodeClaim]
) -> tuple[CapacityReservation, ...]:
    """``reservations`` with each available count less the NodeClaims that will launch into it and EC2 does not
    count yet: not deleting, no instance yet (no providerID), allowing only reserved capacity and naming the
    reservation among their ``capacity-reservation-id`` values (pure; never below 0)."""
    held: dict[str, int] = {}
    for claim in claims:
        if claim.metadata.deletion_timestamp is not None or (claim.status is not None and claim.status.provider_id):
            continue
        for rid in _pinned_reservations(claim):
            held[rid] = held.get(rid, 0) + 1
    if not held:
        return tuple(reservations)
    out = []
    for r in reservations:
        taken = held.get(r.id, 0)
        if taken:
            left = max(r.available_instance_count - taken, 0)
            r = dataclasses.replace(r, available_instance_count=left)
        out.append(r)
    return tuple(out)


def expiring_capacity_blocks(
    claims: Iterable[NodeClaim], node_classes: Iterable[EC2NodeClass], now: datetime
) -> list[tuple[str, str]]:
    """(NodeClaim, reservation id) of every NodeClaim not being deleted that runs on a capacity block its class's
    status lists as ending within ``EXPIRING_WINDOW`` of ``now`` (or ``expiring``), in NodeClaim name order (pure)."""
    blocks: dict[tuple[str, str], bool] = {}  # (class, reservation id) -> expiring
    for nc in node_classes:
        for r in (nc.status.capacity_reservations if nc.status is not None else None) or ():
            if r.reservation_type != RESERVATION_TYPE_CAPACITY_BLOCK:
                continue
            ending = r.end_time is not None and now >= r.end_time - EXPIRING_WINDOW
            blocks[(nc.name, r.id)] = ending or r.state == "expiring"
    out = []
    for claim in claims:
        if claim.metadata.deletion_timestamp is not None:
            continue
        rid = (claim.metadata.labels or {}).get(wk.LABEL_CAPACITY_RESERVATION_ID)
        if rid and blocks.get((claim.spec.node_class_ref.name, rid)):
            out.append((claim.name, rid))
    return sorted(out)
