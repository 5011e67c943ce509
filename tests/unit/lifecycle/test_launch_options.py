"""Which capacity type, instance types and zones one CreateFleet may choose from."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import NodeClaim
from nodeflow.catalog.instancetypes import NodeClassSettings, resolve_instance_types
from nodeflow.catalog.offline import load_offline
from nodeflow.lifecycle.cleanup import failure_reason
from nodeflow.lifecycle.launch import _kubelet_labels, launch_options

TYPES = resolve_instance_types(load_offline("us-east-1"), NodeClassSettings.create(ami_family="AL2023"))
SUBNETS = {"us-east-1a": "subnet-a", "us-east-1b": "subnet-b", "us-east-1c": "subnet-c"}


def claim(*requirements: dict[str, Any]) -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-abcde"},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": list(requirements),
            },
        }
    )


def req(key: str, *values: str, op: str = "In") -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def test_spot_first_when_allowed() -> None:
    opts = launch_options(
        claim(req(wk.LABEL_CAPACITY_TYPE, "spot", "on-demand"), req("karpenter.k8s.aws/instance-family", "m5")),
        TYPES,
        SUBNETS,
        {"amd64"},
    )
    assert opts is not None
    assert opts.capacity_type == "spot"
    assert all(it.name.startswith("m5.") for it in opts.instance_types)


def test_no_capacity_type_requirement_launches_spot_first() -> None:
    # as the AWS provider's getCapacityType: an absent requirement allows every capacity type, spot before
    # on-demand
    opts = launch_options(claim(req("karpenter.k8s.aws/instance-family", "m5")), TYPES, SUBNETS, {"amd64"})
    assert opts is not None
    assert opts.capacity_type == "spot"


def test_spot_falls_back_to_on_demand_once_no_spot_offering_is_left() -> None:
    # every spot offering unavailable (insufficient capacity marked them): the same claim launches on-demand
    no_spot = resolve_instance_types(
        load_offline("us-east-1"),
        NodeClassSettings.create(ami_family="AL2023"),
        frozenset((it.name, o.zone, "spot") for it in TYPES for o in it.offerings if o.capacity_type == "spot"),
    )
    for requirements in ([], [req(wk.LABEL_CAPACITY_TYPE, "spot", "on-demand")]):
        opts = launch_options(claim(*requirements), no_spot, SUBNETS, {"amd64"})
        assert opts is not None
        assert opts.capacity_type == "on-demand"


def test_types_cheapest_first_one_architecture_at_most_60() -> None:
    opts = launch_options(claim(req(wk.LABEL_CAPACITY_TYPE, "on-demand")), TYPES, SUBNETS, {"amd64", "arm64"})
    assert opts is not None
    assert 0 < len(opts.instance_types) <= 60
    assert {it.labels[wk.LABEL_ARCH] for it in opts.instance_types} == {opts.architecture}
    prices = [min(o.price for o in it.offerings if o.capacity_type == "on-demand") for it in opts.instance_types]
    assert prices == sorted(prices)


def test_architecture_without_an_ami_is_left_out() -> None:
    opts = launch_options(claim(req(wk.LABEL_CAPACITY_TYPE, "on-demand")), TYPES, SUBNETS, {"arm64"})
    assert opts is not None
    assert opts.architecture == "arm64"


def test_zone_requirement_limits_subnets_and_excludes_unoffered_pairs() -> None:
    opts = launch_options(
        claim(req(wk.LABEL_CAPACITY_TYPE, "on-demand"), req(wk.LABEL_ZONE, "us-east-1b")), TYPES, SUBNETS, {"amd64"}
    )
    assert opts is not None
    assert dict(opts.subnets) == {"us-east-1b": "subnet-b"}
    assert all(zone == "us-east-1b" for _, zone in opts.excluded)


def test_nothing_left_is_none() -> None:
    assert launch_options(claim(req(wk.LABEL_INSTANCE_TYPE, "no-such.type")), TYPES, SUBNETS, {"amd64"}) is None
    assert launch_options(claim(req(wk.LABEL_CAPACITY_TYPE, "on-demand")), TYPES, {}, {"amd64"}) is None


def test_kubelet_only_gets_labels_it_may_set() -> None:
    labels = _kubelet_labels(
        {
            "team": "web",
            wk.LABEL_NODEPOOL: "default",
            wk.LABEL_ARCH: "amd64",
            "node.kubernetes.io/lifecycle": "x",
            "node-role.kubernetes.io/worker": "",
            "example.k8s.io/x": "y",
        }
    )
    assert labels == {
        "team": "web",
        wk.LABEL_NODEPOOL: "default",
        wk.LABEL_ARCH: "amd64",
        "node.kubernetes.io/lifecycle": "x",
    }


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            {"Error": "NoCapacity", "Cause": '{"errorType":"NoCapacity","errorMessage":"all gone"}'},
            "InsufficientCapacityError",
        ),
        ({"Error": "RegistrationTimeout", "Cause": "late"}, "RegistrationTimeout"),
        ({"Error": "States.Timeout"}, "LaunchTimeout"),
        ({"Error": "Whatever"}, "LaunchFailed"),
        (None, "LaunchFailed"),
    ],
)
def test_failure_reasons(error: dict[str, str] | None, reason: str) -> None:
    got, message = failure_reason(error)
    assert got == reason
    if error and error.get("Cause", "").startswith("{"):
        assert message.endswith("all gone")
