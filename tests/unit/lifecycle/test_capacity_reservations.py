"""The pure parts of reserved capacity in the deployed path: which reservations a NodeClaim may launch into
(``launch.reserved_options``), the counts the provisioner plans with (``available_after_launches``), the
NodeClaims on an ending capacity block (``expiring_capacity_blocks``), and drift of a reserved node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nodeflow.api.karpenter import EC2NodeClass, NodeClaim
from nodeflow.catalog.instancetypes import NodeClassSettings, resolve_instance_types
from nodeflow.catalog.offline import load_offline
from nodeflow.catalog.reservations import CapacityReservation
from nodeflow.disruption.drift_detection import drift_reason
from nodeflow.lifecycle.launch import reserved_options
from nodeflow.lifecycle.reservation_tracking import available_after_launches, expiring_capacity_blocks
from tests.unit.disruption.builders import CATALOG, node, pool

NOW = datetime(2026, 11, 25, 2, 0, tzinfo=UTC)
SUBNETS = {"us-east-1a": "subnet-a", "us-east-1b": "subnet-b"}
TYPES = resolve_instance_types(load_offline("us-east-1"), NodeClassSettings.create(ami_family="AL2023"))


def _claim(*requirements: tuple[str, str, list[str]], labels: dict[str, str] | None = None, **status: Any) -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "c", "labels": labels or {}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": k, "operator": op, "values": v} for k, op, v in requirements],
            },
            **({"status": status} if status else {}),
        }
    )


def _cr(rid: str, zone: str = "us-east-1a", available: int = 1, **extra: Any) -> CapacityReservation:
    return CapacityReservation(
        id=rid,
        instance_type=extra.pop("instance_type", "m5.large"),
        zone=zone,
        owner_id="123456789012",
        available_instance_count=available,
        total_instance_count=max(available, 1),
        **extra,
    )


RESERVED_OR_OD = ("karpenter.sh/capacity-type", "In", ["reserved", "on-demand"])


def _ids(options: tuple[tuple[CapacityReservation, Any], ...]) -> list[str]:
    return [r.id for r, _ in options]


def test_reserved_only_when_the_claim_allows_it() -> None:
    reservations = [_cr("cr-0a")]
    od = _claim(("karpenter.sh/capacity-type", "In", ["on-demand"]))
    assert reserved_options(od, TYPES, SUBNETS, {"amd64"}, reservations, frozenset(), NOW) == ()
    assert reserved_options(_claim(), TYPES, SUBNETS, {"amd64"}, reservations, frozenset(), NOW) == ()
    assert _ids(
        reserved_options(_claim(RESERVED_OR_OD), TYPES, SUBNETS, {"amd64"}, reservations, frozenset(), NOW)
    ) == ["cr-0a"]


def test_what_rules_a_reservation_out() -> None:
    reservations = [
        _cr("cr-0a"),
        _cr("cr-0b", available=0),  # used up
        _cr("cr-0c", zone="us-east-1c"),  # no subnet there
        _cr("cr-0d", instance_type="c5.large"),  # a type the claim does not allow
        _cr("cr-0e", zone="us-east-1b"),  # unavailable (exhausted a minute ago)
        _cr("cr-0f", end_date=NOW - timedelta(minutes=1)),  # ended
        _cr("cr-0g", reservation_type="capacity-block", end_date=NOW + timedelta(minutes=30)),  # expiring
        _cr("cr-0h", instance_type="m6g.large"),  # arm64: no AMI for it
    ]
    claim = _claim(RESERVED_OR_OD, ("node.kubernetes.io/instance-type", "In", ["m5.large", "m6g.large"]))
    unavailable = frozenset({("m5.large", "us-east-1b", "reserved")})
    assert _ids(reserved_options(claim, TYPES, SUBNETS, {"amd64"}, reservations, unavailable, NOW)) == ["cr-0a"]
    # a reservation-id requirement (Karpenter pins a reserved NodeClaim to its reservations)
    pinned = _claim(RESERVED_OR_OD, ("karpenter.k8s.aws/capacity-reservation-id", "In", ["cr-0x"]))
    assert reserved_options(pinned, TYPES, SUBNETS, {"amd64"}, reservations, frozenset(), NOW) == ()


def test_one_reservation_type_at_a_time_default_first() -> None:
    block = _cr("cr-0b", reservation_type="capacity-block", end_date=NOW + timedelta(hours=5))
    interruptible = _cr("cr-0i", interruptible=True)
    claim = _claim(RESERVED_OR_OD)
    assert _ids(
        reserved_options(claim, TYPES, SUBNETS, {"amd64"}, [block, interruptible, _cr("cr-0z")], frozenset(), NOW)
    ) == ["cr-0z"]
    assert _ids(reserved_options(claim, TYPES, SUBNETS, {"amd64"}, [block, interruptible], frozenset(), NOW)) == [
        "cr-0b"
    ]
    assert _ids(reserved_options(claim, TYPES, SUBNETS, {"amd64"}, [interruptible], frozenset(), NOW)) == ["cr-0i"]
    blocks_only = _claim(RESERVED_OR_OD, ("karpenter.k8s.aws/capacity-reservation-type", "In", ["capacity-block"]))
    assert _ids(reserved_options(blocks_only, TYPES, SUBNETS, {"amd64"}, [block, _cr("cr-0z")], frozenset(), NOW)) == [
        "cr-0b"
    ]


def test_claims_not_launched_yet_hold_their_reservations() -> None:
    live = (_cr("cr-0a", available=2), _cr("cr-0b", available=1), _cr("cr-0c", available=3))
    pinned = ("karpenter.sh/capacity-type", "In", ["reserved"])
    claims = [
        _claim(pinned, ("karpenter.k8s.aws/capacity-reservation-id", "In", ["cr-0a", "cr-0b"])),  # holds both
        _claim(pinned, ("karpenter.k8s.aws/capacity-reservation-id", "In", ["cr-0a"])),
        # launched: EC2's count has it already
        _claim(pinned, ("karpenter.k8s.aws/capacity-reservation-id", "In", ["cr-0c"]), providerID="aws:///a/i-1"),
        # may fall back to on-demand: not held
        _claim(RESERVED_OR_OD, ("karpenter.k8s.aws/capacity-reservation-id", "In", ["cr-0c"])),
    ]
    left = {r.id: r.available_instance_count for r in available_after_launches(live, claims)}
    assert left == {"cr-0a": 0, "cr-0b": 0, "cr-0c": 3}
    assert available_after_launches(live, []) == live


def _node_class(*reservations: dict[str, Any]) -> EC2NodeClass:
    return EC2NodeClass.model_validate(
        {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "r",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
            },
            "status": {"capacityReservations": list(reservations)},
        }
    )


def _status(rid: str, rtype: str, end: datetime | None, state: str = "active") -> dict[str, Any]:
    out = {
        "id": rid,
        "availabilityZone": "us-east-1a",
        "instanceType": "p5.48xlarge",
        "ownerID": "123456789012",
        "reservationType": rtype,
        "state": state,
    }
    if end is not None:
        out["endTime"] = end.strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


def test_nodes_on_a_capacity_block_ending_within_40_minutes() -> None:
    nc = _node_class(
        _status("cr-0soon", "capacity-block", NOW + timedelta(minutes=40)),
        _status("cr-0late", "capacity-block", NOW + timedelta(minutes=41)),
        _status("cr-0odcr", "default", NOW + timedelta(minutes=5)),  # an ODCR ending: the node stays (on-demand)
        _status("cr-0said", "capacity-block", None, state="expiring"),
    )

    def on(rid: str, name: str, **meta: Any) -> NodeClaim:
        claim = _claim(labels={"karpenter.k8s.aws/capacity-reservation-id": rid})
        return claim.model_copy(update={"metadata": claim.metadata.model_copy(update={"name": name, **meta})})

    claims = [
        on("cr-0soon", "b"),
        on("cr-0late", "c"),
        on("cr-0odcr", "d"),
        on("cr-0said", "a"),
        on("cr-0soon", "e", deletion_timestamp=NOW),  # already going
        on("cr-0gone", "f"),  # not in the status (any more)
    ]
    assert expiring_capacity_blocks(claims, [nc], NOW) == [("a", "cr-0said"), ("b", "cr-0soon")]
    assert expiring_capacity_blocks(claims, [nc], NOW + timedelta(minutes=1)) == [
        ("a", "cr-0said"),
        ("b", "cr-0soon"),
        ("c", "cr-0late"),
    ]


def test_a_reserved_node_is_not_drifted_for_its_offering() -> None:
    # an hour after launch the catalog (no reservations in it) still sells the type on-demand in its zone
    p = pool(capacity=("reserved", "on-demand"))
    n, c = node("a", "m5.2xlarge", capacity="reserved")
    later = datetime(2026, 11, 21, 14, 0, tzinfo=UTC)
    assert drift_reason(c, p, None, n.metadata.labels, catalog=CATALOG, now=later) is None
    n, c = node("a", "m5.2xlarge", capacity="reserved", zone="us-east-1z")
    assert "no on-demand offering in us-east-1z" in (
        drift_reason(c, p, None, n.metadata.labels, catalog=CATALOG, now=later) or ""
    )
