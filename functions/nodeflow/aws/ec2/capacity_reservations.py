"""Capacity reservations: the active reservations an EC2NodeClass's ``capacityReservationSelectorTerms`` select.

It decides the DescribeCapacityReservations requests Karpenter makes for the terms and reads the answer
(``nodeflow.catalog.reservations`` parses and filters it). It must not decide which reservation a launch uses
(``nodeflow.lifecycle.launch``) nor count what is left of one (``nodeflow.lifecycle.reservation_tracking``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from nodeflow.aws.ec2.paging import paginate
from nodeflow.aws.ec2.tags import tag_filters
from nodeflow.aws.errors import NotFound
from nodeflow.catalog.reservations import CapacityReservation, from_describe, select

__all__ = ["capacity_reservation_queries", "describe_capacity_reservations"]


def capacity_reservation_queries(terms: Sequence[Any]) -> list[dict[str, Any]]:
    """The DescribeCapacityReservations requests for ``capacityReservationSelectorTerms``, as Karpenter asks them:
    always only ``active`` reservations; a term's ``id`` by CapacityReservationIds (no MaxResults, which EC2 refuses
    with ids); its tags (``"*"``: the key only), ``ownerID`` and ``instanceMatchCriteria`` as filters, 1,000 a page.
    Equal requests are asked once."""
    out: list[dict[str, Any]] = []
    for term in terms:
        active = [{"Name": "state", "Values": ["active"]}]
        queries: list[dict[str, Any]] = []
        if term.id:
            queries.append({"CapacityReservationIds": [term.id], "Filters": active})
        if term.tags or term.instance_match_criteria:
            filters = list(active)
            if term.owner_id:
                filters.append({"Name": "owner-id", "Values": [term.owner_id]})
            filters.extend(tag_filters(term.tags))
            if term.instance_match_criteria:
                filters.append({"Name": "instance-match-criteria", "Values": [term.instance_match_criteria]})
            queries.append({"Filters": filters, "MaxResults": 1000})
        out.extend(q for q in queries if q not in out)
    return out


def describe_capacity_reservations(
    ec2: Any, terms: Sequence[Any], now: datetime | None = None
) -> list[CapacityReservation]:
    """The capacity reservations ``terms`` select (``capacity_reservation_queries``), parsed
    (``nodeflow.catalog.reservations.from_describe``), one per id, sorted by id; one whose end is not after
    ``now`` is left out. An id EC2 does not know selects nothing (as Karpenter); an item EC2 answers that
    cannot be read (a new reservation type) is skipped, as Karpenter skips it."""
    found: list[CapacityReservation] = []
    for query in capacity_reservation_queries(terms):
        try:
            items = list(paginate(ec2, "describe_capacity_reservations", "CapacityReservations", **query))
        except NotFound:  # asked by id: that reservation does not exist (any more)
            continue
        for item in items:
            try:
                found.append(from_describe(item))
            except ValueError:
                continue
    return select(found, terms, now)
