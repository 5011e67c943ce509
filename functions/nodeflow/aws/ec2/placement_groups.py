"""Placement groups: the available group an EC2NodeClass's ``placementGroupSelector`` names.

It decides only whether the named group exists and is available. It must not create groups nor judge
whether a launch may use one (the launch step does: an unmatched selector leaves the class not ready).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodeflow.api.karpenter_ec2 import PlacementGroupSelector
from nodeflow.aws.errors import InvalidRequest, NotFound, aws_errors

__all__ = ["PlacementGroup", "resolve_placement_group"]


@dataclass(frozen=True)
class PlacementGroup:
    id: str
    name: str
    strategy: str  # cluster / partition / spread
    partition_count: int | None = None


def resolve_placement_group(ec2: Any, selector: PlacementGroupSelector) -> PlacementGroup | None:
    """The available placement group ``selector`` names (by id or name), or None when there is none."""
    if selector.id:
        query: dict[str, Any] = {"GroupIds": [selector.id]}
    else:
        query = {"Filters": [{"Name": "group-name", "Values": [selector.name or ""]}]}
    try:
        with aws_errors():
            groups = ec2.describe_placement_groups(**query).get("PlacementGroups", [])
    except (NotFound, InvalidRequest):  # an unknown id is an error in EC2, an unknown name an empty list
        return None
    for g in groups:
        if g.get("State", "available") == "available":
            return PlacementGroup(
                id=g["GroupId"],
                name=g.get("GroupName", ""),
                strategy=g.get("Strategy", ""),
                partition_count=g.get("PartitionCount"),
            )
    return None
