"""Launch templates, CreateFleet and instance helpers against moto (capacity errors injected)."""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

import pytest

from nodeflow.api.karpenter_ec2 import BlockDeviceMapping, MetadataOptions
from nodeflow.aws.ec2.fleet import MAX_FLEET_OVERRIDES, FleetRequest, create_fleet, create_fleet_input
from nodeflow.aws.ec2.instances import describe_instance_states, list_cluster_instances, terminate_instances
from nodeflow.aws.ec2.launch_template_data import LaunchTemplateSpec, launch_template_name
from nodeflow.aws.ec2.launch_templates import ensure_launch_template
from nodeflow.aws.errors import AlreadyExists, InsufficientCapacity, InvalidRequest, NotFound, Offering
from tests.functional.aws.conftest import CLUSTER

USER_DATA = base64.b64encode(b"#!/bin/bash\necho hi\n").decode()


def lt_spec(world: Any, **over: Any) -> LaunchTemplateSpec:
    image = world.images.get("node") or world.image("node")
    fields: dict[str, Any] = {
        "cluster_name": CLUSTER,
        "node_pool": "general",
        "node_class": "default",
        "image_id": image,
        "security_group_ids": (world.sg_tagged,),
        "instance_profile": "demo-profile",
        "user_data": USER_DATA,
        "tags": {"team": "infra"},
    }
    fields.update(over)
    return LaunchTemplateSpec(**fields)


def fleet_request(world: Any, lt: str, **over: Any) -> FleetRequest:
    fields: dict[str, Any] = {
        "launch_template_name": lt,
        "capacity_type": "on-demand",
        "instance_types": ("m5.large", "m5.xlarge"),
        "subnets": dict(world.subnets),
        "client_token": "0b1c2d3e-0000-4000-8000-000000000001",
        "cluster_name": CLUSTER,
        "node_pool": "general",
        "node_claim": "general-abcde",
        "node_class": "default",
        "tags": {"team": "infra"},
    }
    fields.update(over)
    return FleetRequest(**fields)


# --- launch templates -------------------------------------------------------------------------


def test_launch_template_reused_for_same_spec(world: Any) -> None:
    spec = lt_spec(world)
    name = ensure_launch_template(world.ec2, spec)
    assert name.startswith("nodeflow/")
    assert ensure_launch_template(world.ec2, lt_spec(world)) == name
    assert len(world.ec2.describe_launch_templates()["LaunchTemplates"]) == 1


def test_launch_template_new_for_different_spec(world: Any) -> None:
    a = ensure_launch_template(world.ec2, lt_spec(world))
    b = ensure_launch_template(world.ec2, lt_spec(world, node_pool="gpu"))
    c = ensure_launch_template(
        world.ec2, lt_spec(world, metadata_options=MetadataOptions.model_validate({"httpPutResponseHopLimit": 2}))
    )
    assert len({a, b, c}) == 3
    assert len(world.ec2.describe_launch_templates()["LaunchTemplates"]) == 3


def test_launch_template_contents(world: Any) -> None:
    bdm = BlockDeviceMapping.model_validate(
        {
            "deviceName": "/dev/xvda",
            "rootVolume": True,
            "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True},
        }
    )
    spec = lt_spec(world, block_device_mappings=(bdm,), detailed_monitoring=True)
    name = ensure_launch_template(world.ec2, spec)
    version = world.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0]
    data = version["LaunchTemplateData"]
    assert data["ImageId"] == spec.image_id
    assert data["IamInstanceProfile"] == {"Name": "demo-profile"}
    assert data["UserData"] == USER_DATA
    assert data["SecurityGroupIds"] == [world.sg_tagged]
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpProtocolIpv6": "disabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
    }
    assert data["Monitoring"] == {"Enabled": True}
    assert data["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/xvda",
            "Ebs": {"DeleteOnTermination": True, "Encrypted": True, "VolumeSize": 100, "VolumeType": "gp3"},
        }
    ]
    lt = world.ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"][0]
    tags = {t["Key"]: t["Value"] for t in lt["Tags"]}
    assert tags == {
        "team": "infra",
        "karpenter.sh/nodepool": "general",
        "karpenter.k8s.aws/ec2nodeclass": "default",
        f"kubernetes.io/cluster/{CLUSTER}": "owned",
        "eks:eks-cluster-name": CLUSTER,
    }
    assert "karpenter.sh/nodeclaim" not in tags


def test_public_ip_moves_groups_to_network_interface(world: Any) -> None:
    name = ensure_launch_template(world.ec2, lt_spec(world, associate_public_ip_address=True))
    data = world.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    assert "SecurityGroupIds" not in data
    nic = data["NetworkInterfaces"][0]
    assert nic["AssociatePublicIpAddress"] is True
    assert nic["DeviceIndex"] == 0
    assert nic["Groups"] == [world.sg_tagged]


def test_launch_template_create_race_is_success(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = lt_spec(world)
    ensure_launch_template(world.ec2, spec)  # "the other launch" created it already
    real = world.ec2.describe_launch_templates
    monkeypatch.setattr(world.ec2, "describe_launch_templates", lambda **kw: {"LaunchTemplates": []})
    assert ensure_launch_template(world.ec2, spec) == launch_template_name(spec)  # AlreadyExists swallowed
    monkeypatch.setattr(world.ec2, "describe_launch_templates", real)
    assert len(world.ec2.describe_launch_templates()["LaunchTemplates"]) == 1


# --- CreateFleet ------------------------------------------------------------------------------


def test_create_fleet_request_shape(world: Any) -> None:
    req = fleet_request(world, "nodeflow/x", capacity_type="spot")
    params = create_fleet_input(req)
    assert params["Type"] == "instant"
    assert params["ClientToken"].startswith(req.client_token + "-0-")
    assert params["TargetCapacitySpecification"] == {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"}
    assert params["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
    assert "OnDemandOptions" not in params
    overrides = params["LaunchTemplateConfigs"][0]["Overrides"]
    assert len(overrides) == 6
    assert overrides[0] == {"InstanceType": "m5.large", "SubnetId": world.subnets["us-east-1a"]}
    assert {t["ResourceType"] for t in params["TagSpecifications"]} == {"instance", "volume", "fleet"}
    od = create_fleet_input(fleet_request(world, "nodeflow/x"))
    assert od["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}


def test_overrides_capped_and_unavailable_skipped(world: Any) -> None:
    types = tuple(f"m5.{i}xlarge" for i in range(40))
    req = fleet_request(world, "lt", instance_types=types)
    assert len(req.overrides()) == MAX_FLEET_OVERRIDES
    req = fleet_request(world, "lt", unavailable=frozenset({("m5.large", "us-east-1a"), ("m5.large", "us-east-1b")}))
    assert [(o["InstanceType"], o["AvailabilityZone"]) for o in req.overrides()][:2] == [
        ("m5.large", "us-east-1c"),
        ("m5.xlarge", "us-east-1a"),
    ]
    req = fleet_request(
        world, "lt", instance_types=("m5.large",), unavailable=frozenset({("m5.large", z) for z in world.subnets})
    )
    with pytest.raises(InvalidRequest):
        create_fleet_input(req)


def test_create_fleet_launches_one_tagged_instance(world: Any) -> None:
    lt = ensure_launch_template(world.ec2, lt_spec(world))
    got = create_fleet(world.ec2, fleet_request(world, lt))
    assert got.instance_id.startswith("i-")
    assert got.instance_type == "m5.large"  # moto picks the first override
    assert got.zone == "us-east-1a"
    assert got.capacity_type == "on-demand"
    assert got.private_dns_name
    assert got.private_dns_name.startswith("ip-")
    assert got.unavailable_offerings == ()
    inst = world.ec2.describe_instances(InstanceIds=[got.instance_id])["Reservations"][0]["Instances"][0]
    tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
    assert tags["karpenter.sh/nodeclaim"] == "general-abcde"
    assert tags["karpenter.sh/nodepool"] == "general"
    assert tags[f"kubernetes.io/cluster/{CLUSTER}"] == "owned"
    assert tags["eks:eks-cluster-name"] == CLUSTER
    assert tags["team"] == "infra"
    assert inst["SubnetId"] == world.subnets["us-east-1a"]
    fleet = world.ec2.describe_fleets(FleetIds=[got.fleet_id])["Fleets"][0]
    assert {t["Key"]: t["Value"] for t in fleet["Tags"]}["karpenter.sh/nodeclaim"] == "general-abcde"


def test_create_fleet_spot(world: Any) -> None:
    lt = ensure_launch_template(world.ec2, lt_spec(world))
    got = create_fleet(world.ec2, fleet_request(world, lt, capacity_type="spot"))
    assert got.capacity_type == "spot"
    assert got.zone == "us-east-1a"


def test_client_token_follows_ec2_idempotency_rules(world: Any) -> None:
    """Against the sandbox's emulation of EC2's ClientToken rules (moto ignores tokens): the same call
    again gets the same instance; a fallback (attempt 1, fewer overrides) is a new request with its own
    token, never IdempotentParameterMismatch; reusing a token for another request is refused."""
    from sandbox.faults import Ec2Faults

    lt = ensure_launch_template(world.ec2, lt_spec(world))
    with Ec2Faults({sid: zone for zone, sid in world.subnets.items()}) as ec2:
        req = fleet_request(world, lt)
        first, again = create_fleet(world.ec2, req), create_fleet(world.ec2, req)
        assert again.instance_id == first.instance_id
        token = create_fleet_input(req)["ClientToken"]
        assert token.startswith(req.client_token + "-0-")
        assert len(token) <= 64
        fallback = replace(req, attempt=1, unavailable=frozenset({("m5.large", "us-east-1a")}))
        assert create_fleet_input(fallback)["ClientToken"] != token
        other = create_fleet(world.ec2, fallback)
        assert other.instance_id != first.instance_id
        assert [c["outcome"] for c in ec2.calls] == ["launched", "replayed", "launched"]
        # EC2's rule, enforced by the emulation: one token, two different requests
        ec2.tokens[create_fleet_input(fallback)["ClientToken"]] = ("another request", {})
        with pytest.raises(AlreadyExists, match="IdempotentParameterMismatch"):
            create_fleet(world.ec2, fallback)
    long = create_fleet_input(fleet_request(world, lt, client_token="x" * 80))["ClientToken"]
    assert len(long) == 64


def _patch_fleet_errors(monkeypatch: pytest.MonkeyPatch, errors: list[dict[str, Any]], *, launch: bool) -> None:
    """Make moto's CreateFleet answer with ``Errors`` (and no instances unless ``launch``)."""
    from moto.ec2.responses.fleets import Fleets

    real = Fleets.create_fleet

    def create_fleet(self: Fleets) -> Any:
        result = real(self)
        body: Any = result.result
        if not launch:
            body.pop("Instances", None)
        body["Errors"] = errors
        return result

    monkeypatch.setattr(Fleets, "create_fleet", create_fleet)


def _err(code: str, itype: str, subnet: str, lifecycle: str = "spot", zone: str | None = None) -> dict[str, Any]:
    ov: dict[str, Any] = {"InstanceType": itype, "SubnetId": subnet}
    if zone:
        ov["AvailabilityZone"] = zone
    return {
        "LaunchTemplateAndOverrides": {"LaunchTemplateSpecification": {"LaunchTemplateName": "lt"}, "Overrides": ov},
        "Lifecycle": lifecycle,
        "ErrorCode": code,
        "ErrorMessage": f"{code} for {itype}",
    }


def test_fleet_errors_without_instance_raise_insufficient_capacity(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    lt = ensure_launch_template(world.ec2, lt_spec(world))
    s = world.subnets
    _patch_fleet_errors(
        monkeypatch,
        [
            _err("InsufficientInstanceCapacity", "m5.large", s["us-east-1a"]),
            _err("InsufficientInstanceCapacity", "m5.large", s["us-east-1b"], zone="us-east-1b"),
            _err("UnfulfillableCapacity", "m5.xlarge", s["us-east-1c"]),
            _err("MaxSpotInstanceCountExceeded", "m5.xlarge", s["us-east-1a"]),
        ],
        launch=False,
    )
    with pytest.raises(InsufficientCapacity) as info:
        create_fleet(world.ec2, fleet_request(world, lt, capacity_type="spot"))
    assert set(info.value.offerings) == {
        Offering("m5.large", "us-east-1a", "spot"),
        Offering("m5.large", "us-east-1b", "spot"),
        Offering("m5.xlarge", "us-east-1c", "spot"),
        Offering("m5.xlarge", "us-east-1a", "spot"),
    }
    assert type(info.value).__name__ == "InsufficientCapacity"


def test_fleet_errors_with_an_instance_are_reported_not_raised(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    lt = ensure_launch_template(world.ec2, lt_spec(world))
    _patch_fleet_errors(
        monkeypatch,
        [_err("InsufficientInstanceCapacity", "m5.xlarge", world.subnets["us-east-1b"], "on-demand")],
        launch=True,
    )
    got = create_fleet(world.ec2, fleet_request(world, lt))
    assert got.instance_id.startswith("i-")
    assert got.unavailable_offerings == (Offering("m5.xlarge", "us-east-1b", "on-demand"),)


def test_non_capacity_fleet_error_maps_to_its_class(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    lt = ensure_launch_template(world.ec2, lt_spec(world))
    _patch_fleet_errors(
        monkeypatch,
        [
            _err("InvalidLaunchTemplateName.NotFoundException", "m5.large", world.subnets["us-east-1a"]),
            _err("InsufficientInstanceCapacity", "m5.xlarge", world.subnets["us-east-1a"]),
        ],
        launch=False,
    )
    with pytest.raises(NotFound) as info:
        create_fleet(world.ec2, fleet_request(world, lt))
    assert info.value.offerings == (Offering("m5.xlarge", "us-east-1a", "spot"),)


def test_fleet_without_instances_or_errors_is_capacity(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    lt = ensure_launch_template(world.ec2, lt_spec(world))
    _patch_fleet_errors(monkeypatch, [], launch=False)
    with pytest.raises(InsufficientCapacity) as info:
        create_fleet(world.ec2, fleet_request(world, lt))
    assert len(info.value.offerings) == 6


# --- instances --------------------------------------------------------------------------------


def test_describe_terminate_list(world: Any) -> None:
    lt = ensure_launch_template(world.ec2, lt_spec(world))
    a = create_fleet(world.ec2, fleet_request(world, lt, client_token="a"))
    b = create_fleet(world.ec2, fleet_request(world, lt, client_token="b", node_claim="general-b"))
    # an instance of someone else: not listed
    world.ec2.run_instances(ImageId=world.images["node"], MinCount=1, MaxCount=1, InstanceType="t3.micro")

    listed = list_cluster_instances(world.ec2, CLUSTER)
    assert {i.instance_id for i in listed} == {a.instance_id, b.instance_id}
    assert {i.tags["karpenter.sh/nodeclaim"] for i in listed} == {"general-abcde", "general-b"}

    states = describe_instance_states(world.ec2, [a.instance_id, b.instance_id, "i-0123456789abcdef0"])
    assert set(states) == {a.instance_id, b.instance_id}
    assert states[a.instance_id].state == "running"
    assert states[a.instance_id].zone == "us-east-1a"

    result = terminate_instances(world.ec2, [a.instance_id, "i-0123456789abcdef0"])
    assert result["i-0123456789abcdef0"] == "terminated"
    assert result[a.instance_id] in ("shutting-down", "terminated")
    assert set(describe_instance_states(world.ec2, [a.instance_id, b.instance_id])) == {b.instance_id}
    assert {i.instance_id for i in list_cluster_instances(world.ec2, CLUSTER)} == {b.instance_id}
    assert terminate_instances(world.ec2, []) == {}
    assert describe_instance_states(world.ec2, []) == {}
