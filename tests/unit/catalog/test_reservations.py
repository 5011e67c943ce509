"""Capacity reservations: parsing DescribeCapacityReservations, selector terms, EC2NodeClass status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.api.karpenter_ec2 import CapacityReservationSelectorTerm
from nodeflow.catalog.reservations import (
    CapacityReservation,
    ReservationError,
    from_describe,
    from_document,
    from_status,
    is_document,
    select,
    status_state,
    to_status,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OWNER = "123456789012"
OTHER = "210987654321"


def item(rid: str = "cr-0a1", **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "CapacityReservationId": rid,
        "OwnerId": OWNER,
        "CapacityReservationArn": f"arn:aws:ec2:us-west-2:{OWNER}:capacity-reservation/{rid}",
        "AvailabilityZoneId": "usw2-az1",
        "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-west-2a",
        "Tenancy": "default",
        "TotalInstanceCount": 4,
        "AvailableInstanceCount": 3,
        "EbsOptimized": True,
        "State": "active",
        "StartDate": "2026-02-01T00:00:00+00:00",
        "EndDateType": "unlimited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": "2026-02-01T00:00:00+00:00",
        "Tags": [{"Key": "team", "Value": "ml"}, {"Key": "env", "Value": "prod"}],
        "ReservationType": "default",
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def term(**kw: Any) -> CapacityReservationSelectorTerm:
    return CapacityReservationSelectorTerm.model_validate(kw)


def test_from_describe_reads_every_field() -> None:
    r = from_describe(item(EndDate="2026-03-02T00:00:00.000Z", ReservationType="capacity-block", Interruptible=False))
    assert r == CapacityReservation(
        id="cr-0a1",
        instance_type="p5.48xlarge",
        zone="us-west-2a",
        owner_id=OWNER,
        available_instance_count=3,
        total_instance_count=4,
        reservation_type="capacity-block",
        instance_match_criteria="targeted",
        end_date=datetime(2026, 3, 2, tzinfo=UTC),
        state="active",
        tags=(("env", "prod"), ("team", "ml")),
        zone_id="usw2-az1",
    )
    assert r.tag_map == {"env": "prod", "team": "ml"}


def test_from_describe_defaults_and_datetime_end() -> None:
    raw = item(ReservationType=None, InstanceMatchCriteria=None, Tags=None, AvailabilityZoneId=None)
    raw["EndDate"] = datetime(2026, 3, 2, 1, 0, tzinfo=UTC)  # boto3 gives datetimes
    r = from_describe(raw)
    assert (r.reservation_type, r.instance_match_criteria, r.tags, r.zone_id) == ("default", "open", (), "")
    assert r.end_date == datetime(2026, 3, 2, 1, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"CapacityReservationId": None}, "CapacityReservationId: required field is missing"),
        ({"CapacityReservationId": "r-1"}, "'r-1' is not a capacity reservation id"),
        ({"InstanceType": None}, "cr-0a1].InstanceType: required field is missing"),
        ({"AvailabilityZone": ""}, "AvailabilityZone: expected a non-empty string"),
        ({"OwnerId": "12"}, "OwnerId: '12' must be a 12-digit AWS account id"),
        ({"AvailableInstanceCount": -1}, "AvailableInstanceCount: expected a non-negative integer, got -1"),
        ({"TotalInstanceCount": "4"}, "TotalInstanceCount: expected a non-negative integer, got '4'"),
        ({"ReservationType": "weird"}, "ReservationType: 'weird' is not one of default, capacity-block"),
        ({"InstanceMatchCriteria": "any"}, "InstanceMatchCriteria: 'any' is not one of open, targeted"),
        ({"EndDate": "tomorrow"}, "EndDate: 'tomorrow' is not an ISO 8601 date-time"),
        ({"Tags": [{"Value": "x"}]}, "Tags[0]: expected {Key, Value}"),
        ({"Interruptible": "yes"}, "Interruptible: expected true or false"),
    ],
)
def test_from_describe_names_the_bad_field(over: dict[str, Any], message: str) -> None:
    raw = item()
    raw.update(over)
    raw = {k: v for k, v in raw.items() if v is not None}
    with pytest.raises(ReservationError, match=message.replace("[", r"\[").replace("(", r"\(")):
        from_describe(raw)


def test_document_is_recognised_and_errors_name_the_index() -> None:
    doc = {"CapacityReservations": [item("cr-1"), item("cr-2", AvailableInstanceCount=None)]}
    assert is_document(doc)
    assert not is_document({"kind": "NodePool", "CapacityReservations": []})
    assert not is_document({"apiVersion": "v1"})
    with pytest.raises(ReservationError, match=r"res.json: CapacityReservations\[1\]\[cr-2\].AvailableInstanceCount"):
        from_document(doc, "res.json")
    with pytest.raises(ReservationError, match="CapacityReservations: expected a list"):
        from_document({"CapacityReservations": {}})
    assert [r.id for r in from_document({"CapacityReservations": [item("cr-2"), item("cr-1")]})] == ["cr-2", "cr-1"]


def pool() -> list[CapacityReservation]:
    return [
        from_describe(item("cr-b", Tags=[{"Key": "team", "Value": "ml"}])),
        from_describe(item("cr-a", Tags=[{"Key": "team", "Value": "web"}], InstanceMatchCriteria="open")),
        from_describe(item("cr-c", OwnerId=OTHER, Tags=[{"Key": "team", "Value": "ml"}])),
        from_describe(item("cr-d", State="expired", Tags=[{"Key": "team", "Value": "ml"}])),
        from_describe(item("cr-e", State="cancelled")),
        from_describe(item("cr-f", EndDate="2026-03-01T11:00:00Z", Tags=[{"Key": "team", "Value": "ml"}])),
        from_describe(item("cr-g", Tags=[])),
    ]


def test_select_by_id_tags_owner_and_criteria() -> None:
    rs = pool()
    assert [r.id for r in select(rs, [term(id="cr-a")])] == ["cr-a"]
    assert [r.id for r in select(rs, [term(tags={"team": "ml"})], NOW)] == ["cr-b", "cr-c"]
    assert [r.id for r in select(rs, [term(tags={"team": "ml"}, ownerID=OTHER)], NOW)] == ["cr-c"]
    assert [r.id for r in select(rs, [term(tags={"team": "*"})], NOW)] == ["cr-a", "cr-b", "cr-c"]
    assert [r.id for r in select(rs, [term(instanceMatchCriteria="open")], NOW)] == ["cr-a"]
    # terms are ORed, duplicates dropped, sorted by id
    assert [r.id for r in select(rs, [term(id="cr-g"), term(tags={"team": "ml"}), term(id="cr-b")], NOW)] == [
        "cr-b",
        "cr-c",
        "cr-g",
    ]
    assert select(rs, []) == []
    assert select(rs, None) == []


def test_select_ignores_expired_cancelled_and_ended() -> None:
    rs = pool()
    assert select(rs, [term(id="cr-d")]) == []  # state expired
    assert select(rs, [term(id="cr-e")]) == []  # state cancelled
    assert [r.id for r in select(rs, [term(id="cr-f")])] == ["cr-f"]  # no clock: end date not checked
    assert select(rs, [term(id="cr-f")], NOW) == []  # ended an hour ago


def test_status_entry_and_expiring_capacity_block() -> None:
    end = NOW + timedelta(minutes=39)
    block = from_describe(item("cr-blk", ReservationType="capacity-block", EndDate=end.isoformat()))
    assert status_state(block, NOW) == "expiring"
    assert status_state(block, NOW - timedelta(minutes=2)) == "active"
    assert to_status(block, NOW) == {
        "availabilityZone": "us-west-2a",
        "id": "cr-blk",
        "instanceMatchCriteria": "targeted",
        "instanceType": "p5.48xlarge",
        "interruptible": False,
        "ownerID": OWNER,
        "reservationType": "capacity-block",
        "state": "expiring",
        "endTime": "2026-03-01T12:39:00Z",
    }
    odcr = from_describe(item("cr-odcr"))
    assert "endTime" not in to_status(odcr, NOW)
    assert to_status(odcr, NOW)["state"] == "active"
    back = from_status(to_status(block, NOW - timedelta(hours=1)), available=2)
    assert (back.id, back.reservation_type, back.end_date, back.available_instance_count, back.state) == (
        "cr-blk",
        "capacity-block",
        end,
        2,
        "active",
    )
    with pytest.raises(ReservationError, match="ownerID: required field is missing"):
        from_status({"id": "cr-1", "availabilityZone": "a", "instanceType": "m5.large"}, 1)
