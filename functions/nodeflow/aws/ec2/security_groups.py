"""Security groups: which ones an EC2NodeClass's ``securityGroupSelectorTerms`` select.

It decides only the selection (by id, else name, else tags) and its order (by id). It must not create or
change a group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nodeflow.aws.ec2.paging import paginate
from nodeflow.aws.ec2.tags import tag_filters

__all__ = ["SecurityGroup", "resolve_security_groups"]


@dataclass(frozen=True)
class SecurityGroup:
    id: str
    name: str | None


def resolve_security_groups(ec2: Any, terms: Sequence[Any]) -> tuple[SecurityGroup, ...]:
    """The security groups any of ``terms`` selects, each once, sorted by id."""
    found: dict[str, SecurityGroup] = {}
    for term in terms:
        if term.id:
            filters = [{"Name": "group-id", "Values": [term.id]}]
        elif term.name:
            filters = [{"Name": "group-name", "Values": [term.name]}]
        else:
            filters = tag_filters(term.tags)
        for g in paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=filters):
            found[g["GroupId"]] = SecurityGroup(id=g["GroupId"], name=g.get("GroupName"))
    return tuple(sorted(found.values(), key=lambda g: g.id))
