"""Capacity reservations in the EC2 adapter against moto (DescribeCapacityReservations served in-process): what
capacityReservationSelectorTerms ask EC2 and select; the launch template of a reserved launch targets its
reservation (capacity blocks on the capacity-block market) while every other template opts out of open
reservations; CreateFleet of a reserved launch (one template per reservation, the capacity-block target type)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.aws.ec2.capacity_reservations import capacity_reservation_queries, describe_capacity_reservations
from nodeflow.aws.ec2.fleet import FleetReservation, create_fleet, create_fleet_input
from nodeflow.aws.ec2.launch_templates import ensure_launch_template
from nodeflow.aws.ec2.node_class import resolve_node_class
from nodeflow.aws.errors import InsufficientCapacity
from tests.functional.aws.conftest import CLUSTER, K8S
from tests.functional.aws.test_ec2_launch import fleet_request, lt_spec
from tests.functional.aws.test_ec2_resolve import node_class, seed_al2023
from tests.functional.capacity_reservations import reservation, serve_capacity_reservations

NOW = datetime(2026, 11, 25, 2, 0, tzinfo=UTC)


def _reservations() -> list[dict[str, Any]]:
    return [
        reservation("cr-0aaa", "m5.large", "us-east-1a", 2, Tags=[{"Key": "team", "Value": "ml"}]),
        reservation(
            "cr-0bbb",
            "p5.48xlarge",
            "us-east-1b",
            1,
            ReservationType="capacity-block",
            InstanceMatchCriteria="targeted",
            EndDateType="limited",
            EndDate=NOW + timedelta(minutes=30),
        ),
        reservation("cr-0ccc", "m5.large", "us-east-1c", 1, Tags=[{"Key": "team", "Value": "web"}]),
        reservation("cr-0ddd", "m5.large", "us-east-1a", 4, State="expired", Tags=[{"Key": "team", "Value": "ml"}]),
        reservation(
            "cr-0eee", "m5.large", "us-east-1a", 4, OwnerId="210987654321", Tags=[{"Key": "team", "Value": "ml"}]
        ),
    ]


def test_selector_terms_ask_ec2_as_karpenter_does(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    requests = serve_capacity_reservations(monkeypatch, _reservations()).requests
    seed_al2023(world)
    nc = node_class(
        capacityReservationSelectorTerms=[
            {"tags": {"team": "ml"}, "ownerID": "123456789012"},
            {"id": "cr-0bbb"},
            {"id": "cr-0fff"},  # unknown to EC2: selects nothing
        ]
    )
    resolved = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version=K8S, now=NOW)
    assert [r.id for r in resolved.capacity_reservations] == ["cr-0aaa", "cr-0bbb"]  # not expired, not another owner
    assert resolved.ready
    block = resolved.capacity_reservations[1]
    assert (block.reservation_type, block.instance_match_criteria, block.available_instance_count) == (
        "capacity-block",
        "targeted",
        1,
    )
    assert block.end_date == NOW + timedelta(minutes=30)
    # EC2 was asked only for active reservations; ids without MaxResults (EC2 refuses both)
    assert requests[0]["Filters"] == {"state": ["active"], "owner-id": ["123456789012"], "tag:team": ["ml"]}
    assert requests[0]["MaxResults"] is not None
    assert [(r["CapacityReservationIds"], r["MaxResults"]) for r in requests[1:]] == [
        (["cr-0bbb"], None),
        (["cr-0fff"], None),
    ]
    # a reservation whose end has passed is not selected
    later = describe_capacity_reservations(
        world.ec2, nc.spec.capacity_reservation_selector_terms or (), NOW + timedelta(hours=1)
    )
    assert [r.id for r in later] == ["cr-0aaa"]


def test_queries_tag_key_wildcard_and_match_criteria() -> None:
    nc = node_class(capacityReservationSelectorTerms=[{"tags": {"team": "*"}}, {"instanceMatchCriteria": "targeted"}])
    queries = capacity_reservation_queries(nc.spec.capacity_reservation_selector_terms or ())
    assert queries == [
        {
            "Filters": [{"Name": "state", "Values": ["active"]}, {"Name": "tag-key", "Values": ["team"]}],
            "MaxResults": 1000,
        },
        {
            "Filters": [
                {"Name": "state", "Values": ["active"]},
                {"Name": "instance-match-criteria", "Values": ["targeted"]},
            ],
            "MaxResults": 1000,
        },
    ]


def _template_data(world: Any, name: str) -> dict[str, Any]:
    versions = world.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
    return versions[0]["LaunchTemplateData"]  # type: ignore[no-any-return]


def test_launch_templates_target_the_reservation_or_opt_out(world: Any) -> None:
    plain = ensure_launch_template(world.ec2, lt_spec(world))
    odcr = ensure_launch_template(world.ec2, lt_spec(world, capacity_reservation_id="cr-0aaa"))
    block = ensure_launch_template(
        world.ec2, lt_spec(world, capacity_reservation_id="cr-0bbb", capacity_reservation_type="capacity-block")
    )
    assert len({plain, odcr, block}) == 3
    assert _template_data(world, plain)["CapacityReservationSpecification"] == {"CapacityReservationPreference": "none"}
    assert "InstanceMarketOptions" not in _template_data(world, plain)
    assert _template_data(world, odcr)["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0aaa"},
    }
    assert "InstanceMarketOptions" not in _template_data(world, odcr)
    assert _template_data(world, block)["InstanceMarketOptions"] == {"MarketType": "capacity-block"}


def _reserved_request(world: Any, *targets: FleetReservation, **over: Any) -> Any:
    return fleet_request(world, "unused", capacity_type="reserved", reservations=targets, instance_types=(), **over)


def test_reserved_fleet_request_one_template_per_reservation(world: Any) -> None:
    a = FleetReservation("cr-0aaa", "m5.large", "us-east-1a", "nodeflow/a")
    c = FleetReservation("cr-0ccc", "m5.large", "us-east-1c", "nodeflow/c")
    params = create_fleet_input(_reserved_request(world, a, c))
    assert params["TargetCapacitySpecification"] == {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"}
    assert params["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert [
        (cfg["LaunchTemplateSpecification"]["LaunchTemplateName"], cfg["Overrides"])
        for cfg in params["LaunchTemplateConfigs"]
    ] == [
        ("nodeflow/a", [{"InstanceType": "m5.large", "SubnetId": world.subnets["us-east-1a"]}]),
        ("nodeflow/c", [{"InstanceType": "m5.large", "SubnetId": world.subnets["us-east-1c"]}]),
    ]
    block = FleetReservation("cr-0bbb", "p5.48xlarge", "us-east-1b", "nodeflow/b", reservation_type="capacity-block")
    params = create_fleet_input(_reserved_request(world, block))
    assert params["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "capacity-block"
    assert "OnDemandOptions" not in params
    assert "SpotOptions" not in params


def test_reserved_fleet_launches_into_the_reservation(world: Any) -> None:
    template = ensure_launch_template(world.ec2, lt_spec(world, capacity_reservation_id="cr-0ccc"))
    target = FleetReservation("cr-0ccc", "m5.large", "us-east-1c", template)
    launched = create_fleet(world.ec2, _reserved_request(world, target))
    assert (launched.capacity_type, launched.capacity_reservation_id, launched.capacity_reservation_type) == (
        "reserved",
        "cr-0ccc",
        "default",
    )
    assert (launched.instance_type, launched.zone) == ("m5.large", "us-east-1c")
    # nothing left to ask once the reservation's offering is unavailable
    with pytest.raises(Exception, match="no instance type x zone left"):
        create_fleet_input(_reserved_request(world, target, unavailable=frozenset({("m5.large", "us-east-1c")})))


def test_exhausted_reservation_is_reported_as_a_reserved_offering(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.ec2.responses.fleets import Fleets

    def no_capacity(self: Fleets) -> Any:
        from moto.core.responses import ActionResult

        return ActionResult(
            {
                "FleetId": "fleet-0123",
                "Instances": [],
                "Errors": [
                    {
                        "LaunchTemplateAndOverrides": {
                            "Overrides": {"InstanceType": "m5.large", "SubnetId": world.subnets["us-east-1a"]}
                        },
                        "Lifecycle": "on-demand",
                        "ErrorCode": "ReservationCapacityExceeded",
                        "ErrorMessage": "The requested reservation does not have sufficient compatible and available capacity",
                    }
                ],
            }
        )

    monkeypatch.setattr(Fleets, "create_fleet", no_capacity)
    target = FleetReservation("cr-0aaa", "m5.large", "us-east-1a", "nodeflow/a")
    with pytest.raises(InsufficientCapacity) as caught:
        create_fleet(world.ec2, _reserved_request(world, target))
    assert [(o.instance_type, o.zone, o.capacity_type) for o in caught.value.offerings] == [
        ("m5.large", "us-east-1a", "reserved")
    ]
