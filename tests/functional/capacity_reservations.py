"""EC2 capacity reservations for moto, which does not implement DescribeCapacityReservations (moto 5.2.5).

``serve_capacity_reservations(monkeypatch, reservations)`` answers DescribeCapacityReservations from
``reservations`` (a list of EC2's item shape: CapacityReservationId, InstanceType, AvailabilityZone, OwnerId,
AvailableInstanceCount, TotalInstanceCount, State, EndDate, ReservationType, InstanceMatchCriteria, Tags), as
EC2 does: CapacityReservationIds (an unknown id is EC2's InvalidCapacityReservationId.NotFound), the filters
``state``, ``owner-id``, ``instance-match-criteria``, ``instance-type``, ``availability-zone``, ``tag:<key>`` and
``tag-key``, and MaxResults refused together with ids. The list is read at each request, so a test can change a
reservation (its available count, its state) between calls. EC2 launches a fleet whose target capacity type is
``capacity-block`` or ``reserved-capacity`` into the reservation its launch template targets; moto launches nothing
for those types, so the fixture has it launch them as on-demand (each fleet's requested type is recorded in
``fleet_targets``). Everything else stays moto's. In-process only (mock_aws)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

__all__ = ["Served", "reservation", "serve_capacity_reservations"]

_FILTER_KEYS = {
    "state": "State",
    "owner-id": "OwnerId",
    "instance-match-criteria": "InstanceMatchCriteria",
    "instance-type": "InstanceType",
    "availability-zone": "AvailabilityZone",
    "reservation-type": "ReservationType",
}


def reservation(rid: str, instance_type: str, zone: str, available: int, **extra: Any) -> dict[str, Any]:
    """One DescribeCapacityReservations item (an active, open, default reservation unless ``extra`` says)."""
    return {
        "CapacityReservationId": rid,
        "OwnerId": "123456789012",
        "InstanceType": instance_type,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": zone,
        "Tenancy": "default",
        "TotalInstanceCount": max(available, 1),
        "AvailableInstanceCount": available,
        "State": "active",
        "InstanceMatchCriteria": "open",
        "EndDateType": "unlimited",
        "ReservationType": "default",
        "Tags": [],
        **extra,
    }


def _matches(item: Mapping[str, Any], name: str, values: list[str]) -> bool:
    tags = {t["Key"]: t["Value"] for t in item.get("Tags") or []}
    if name.startswith("tag:"):
        return tags.get(name[4:]) in values
    if name == "tag-key":
        return any(v in tags for v in values)
    key = _FILTER_KEYS.get(name)
    if key is None:
        raise AssertionError(f"DescribeCapacityReservations filter {name!r} is not served by this fixture")
    return str(item.get(key, "")) in values


@dataclass
class Served:
    requests: list[dict[str, Any]] = field(default_factory=list)  # each DescribeCapacityReservations' parameters
    fleet_targets: list[str] = field(default_factory=list)  # each CreateFleet's DefaultTargetCapacityType


def serve_capacity_reservations(monkeypatch: pytest.MonkeyPatch, reservations: list[dict[str, Any]]) -> Served:
    """Serve ``reservations`` (read at every request); returns what was asked."""
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    served = Served()
    requests = served.requests

    def describe_capacity_reservations(self: Any) -> Any:
        ids = self._get_param("CapacityReservationIds", []) or []
        filters = self._filters_from_querystring()
        max_results = self._get_param("MaxResults")
        requests.append({"CapacityReservationIds": ids, "Filters": filters, "MaxResults": max_results})
        if ids and max_results is not None:
            raise EC2ClientError("InvalidParameterCombination", "MaxResults cannot be used with CapacityReservationIds")
        found = [dict(r) for r in reservations]
        if ids:
            unknown = sorted(set(ids) - {r["CapacityReservationId"] for r in found})
            if unknown:
                raise EC2ClientError(
                    "InvalidCapacityReservationId.NotFound",
                    f"The capacity reservation ID '{unknown[0]}' does not exist",
                )
            found = [r for r in found if r["CapacityReservationId"] in ids]
        for name, values in filters.items():
            found = [r for r in found if _matches(r, name, values)]
        return ActionResult({"CapacityReservations": found})

    monkeypatch.setattr(EC2Response, "describe_capacity_reservations", describe_capacity_reservations, raising=False)
    from moto.ec2.models.fleets import Fleet

    real_init = Fleet.__init__

    signature = inspect.signature(real_init)

    def fleet_init(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        spec = dict(bound.arguments.get("target_capacity_specification") or {})
        served.fleet_targets.append(str(spec.get("DefaultTargetCapacityType")))
        if spec.get("DefaultTargetCapacityType") in ("capacity-block", "reserved-capacity"):
            bound.arguments["target_capacity_specification"] = {**spec, "DefaultTargetCapacityType": "on-demand"}
        real_init(*bound.args, **bound.kwargs)

    monkeypatch.setattr(Fleet, "__init__", fleet_init)
    return served
