"""EC2 placement groups for moto, which does not implement DescribePlacementGroups (moto 5.2.5).

``serve_placement_groups(monkeypatch, groups)`` answers DescribePlacementGroups from ``groups`` (EC2's
response shape: GroupName, GroupId, Strategy, State, PartitionCount), honouring GroupIds and the
group-name / strategy / state filters, and answering an unknown id with EC2's
InvalidPlacementGroup.Unknown error. Everything else stays moto's. In-process only (mock_aws)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

__all__ = ["serve_placement_groups"]

_FILTER_KEYS = {"group-name": "GroupName", "strategy": "Strategy", "state": "State", "group-id": "GroupId"}


def serve_placement_groups(monkeypatch: pytest.MonkeyPatch, groups: Sequence[Mapping[str, Any]]) -> list[str]:
    """Serve ``groups``; returns the list the GroupIds / filters of each request are appended to."""
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    requests: list[str] = []

    def describe_placement_groups(self: Any) -> Any:
        ids = self._get_param("GroupIds", []) or []
        names = self._get_param("GroupNames", []) or []
        filters = self._filters_from_querystring()
        requests.append(repr({"GroupIds": ids, "GroupNames": names, "Filters": filters}))
        found = [dict(g) for g in groups]
        if ids:
            unknown = sorted(set(ids) - {g["GroupId"] for g in found})
            if unknown:
                raise EC2ClientError(
                    "InvalidPlacementGroup.Unknown", f"The Placement Group ID '{unknown[0]}' is unknown."
                )
            found = [g for g in found if g["GroupId"] in ids]
        if names:
            found = [g for g in found if g["GroupName"] in names]
        for name, values in filters.items():
            key = _FILTER_KEYS.get(name)
            if key is not None:
                found = [g for g in found if str(g.get(key)) in values]
        return ActionResult({"PlacementGroups": found})

    monkeypatch.setattr(EC2Response, "describe_placement_groups", describe_placement_groups, raising=False)
    return requests
