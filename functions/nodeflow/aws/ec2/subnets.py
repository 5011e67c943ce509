"""Subnets: which ones an EC2NodeClass's ``subnetSelectorTerms`` select, and the one a launch uses in each zone.

It decides the order Karpenter gives subnets (most free IPs first) and the one subnet per zone a launch
names. It must not choose zones or instance types (the launch step does) nor touch other EC2 resources.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nodeflow.aws.ec2.paging import paginate
from nodeflow.aws.ec2.tags import tag_filters

__all__ = ["Subnet", "one_per_zone", "resolve_subnets"]


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    zone_id: str | None
    available_ips: int


def resolve_subnets(ec2: Any, terms: Sequence[Any]) -> tuple[Subnet, ...]:
    """The available subnets any of ``terms`` selects (by id, else by tags), each once."""
    found: dict[str, Subnet] = {}
    for term in terms:
        filters = [{"Name": "subnet-id", "Values": [term.id]}] if term.id else tag_filters(term.tags)
        for s in paginate(ec2, "describe_subnets", "Subnets", Filters=filters):
            if s.get("State", "available") != "available":
                continue
            found[s["SubnetId"]] = Subnet(
                id=s["SubnetId"],
                zone=s["AvailabilityZone"],
                zone_id=s.get("AvailabilityZoneId"),
                available_ips=int(s.get("AvailableIpAddressCount", 0)),
            )
    # Karpenter's order: most free IPs first, then id.
    return tuple(sorted(found.values(), key=lambda s: (-s.available_ips, s.id)))


def one_per_zone(subnets: Iterable[Subnet]) -> dict[str, Subnet]:
    """One subnet per zone: the one with the most available IPs (ties: lowest id)."""
    best: dict[str, Subnet] = {}
    for s in subnets:
        cur = best.get(s.zone)
        if cur is None or (s.available_ips, cur.id) > (cur.available_ips, s.id):
            best[s.zone] = s
    return best
