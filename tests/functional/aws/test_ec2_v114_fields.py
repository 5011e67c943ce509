"""Karpenter v1.14 EC2NodeClass launch settings against moto: network interfaces (EFA-only included),
connection tracking, IPv4 prefixes, CPU options and the placement group reach the launch template
that CreateFleet launches from (read back from moto); placement groups resolve by name or id; the
windows2025 alias resolves through EKS's SSM parameter."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.api.karpenter_ec2 import ConnectionTracking, CPUOptions, NetworkInterface, PlacementGroupSelector
from nodeflow.aws.ec2.amis import alias_ssm_parameters
from nodeflow.aws.ec2.fleet import create_fleet
from nodeflow.aws.ec2.launch_templates import ensure_launch_template
from nodeflow.aws.ec2.node_class import resolve_node_class
from nodeflow.aws.ec2.placement_groups import resolve_placement_group
from nodeflow.aws.errors import InvalidRequest
from tests.functional.aws.conftest import CLUSTER, seed_ssm_parameter
from tests.functional.aws.test_ec2_launch import fleet_request, lt_spec
from tests.functional.aws.test_ec2_resolve import node_class
from tests.functional.placement_groups import serve_placement_groups

GROUPS = [
    {"GroupName": "training", "GroupId": "pg-0123456789abcdef0", "Strategy": "cluster", "State": "available"},
    {"GroupName": "old", "GroupId": "pg-0fedcba9876543210", "Strategy": "spread", "State": "deleting"},
]


def _template_data(world: Any, name: str) -> dict[str, Any]:
    versions = world.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
    return versions[0]["LaunchTemplateData"]  # type: ignore[no-any-return]


def _nics(*entries: tuple[int, int, str]) -> tuple[NetworkInterface, ...]:
    return tuple(
        NetworkInterface.model_validate({"networkCardIndex": c, "deviceIndex": d, "interfaceType": t})
        for c, d, t in entries
    )


def test_network_interfaces_cpu_options_and_placement_reach_the_fleet_launch_template(world: Any) -> None:
    spec = lt_spec(
        world,
        network_interfaces=_nics((0, 0, "interface"), (1, 0, "efa-only"), (2, 0, "efa-only")),
        connection_tracking=ConnectionTracking.model_validate({"tcpEstablishedTimeout": 3600, "udpTimeout": 45}),
        ip_prefix_count=2,
        associate_public_ip_address=False,
        cpu_options=CPUOptions.model_validate({"nestedVirtualization": "enabled"}),
        placement_group_id="pg-0123456789abcdef0",
    )
    name = ensure_launch_template(world.ec2, spec)
    data = _template_data(world, name)
    assert "SecurityGroupIds" not in data  # the groups are on the interfaces
    assert data["NetworkInterfaces"] == [
        {
            "NetworkCardIndex": 0,
            "DeviceIndex": 0,
            "InterfaceType": "interface",
            "Groups": [world.sg_tagged],
            "AssociatePublicIpAddress": False,
            "Ipv4PrefixCount": 2,
            "ConnectionTrackingSpecification": {"TcpEstablishedTimeout": 3600, "UdpTimeout": 45},
        },
        # EFA-only interfaces carry no IP settings (EC2 refuses them there)
        {"NetworkCardIndex": 1, "DeviceIndex": 0, "InterfaceType": "efa-only", "Groups": [world.sg_tagged]},
        {"NetworkCardIndex": 2, "DeviceIndex": 0, "InterfaceType": "efa-only", "Groups": [world.sg_tagged]},
    ]
    assert data["CpuOptions"] == {"NestedVirtualization": "enabled"}
    assert data["Placement"] == {"GroupId": "pg-0123456789abcdef0"}

    # CreateFleet launches from that template
    launched = create_fleet(world.ec2, fleet_request(world, name, instance_types=("p5.48xlarge",)))
    [fleet] = world.ec2.describe_fleets(FleetIds=[launched.fleet_id])["Fleets"]
    assert fleet["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"] == name


def test_settings_change_the_launch_template(world: Any) -> None:
    plain = ensure_launch_template(world.ec2, lt_spec(world))
    names = {
        plain,
        ensure_launch_template(world.ec2, lt_spec(world, cpu_options=CPUOptions(nested_virtualization="enabled"))),
        ensure_launch_template(world.ec2, lt_spec(world, placement_group_id="pg-0123456789abcdef0")),
        ensure_launch_template(world.ec2, lt_spec(world, network_interfaces=_nics((0, 0, "interface")))),
        ensure_launch_template(
            world.ec2, lt_spec(world, connection_tracking=ConnectionTracking.model_validate({"udpTimeout": 30}))
        ),
    }
    assert len(names) == 5
    data = _template_data(world, plain)
    assert data["SecurityGroupIds"] == [world.sg_tagged]
    assert not {"NetworkInterfaces", "CpuOptions", "Placement"} & set(data)


def test_connection_tracking_alone_gets_one_primary_interface(world: Any) -> None:
    spec = lt_spec(world, connection_tracking=ConnectionTracking.model_validate({"udpStreamTimeout": 120}))
    data = _template_data(world, ensure_launch_template(world.ec2, spec))
    assert data["NetworkInterfaces"] == [
        {
            "DeviceIndex": 0,
            "Groups": [world.sg_tagged],
            "ConnectionTrackingSpecification": {"UdpStreamTimeout": 120},
        }
    ]


def test_placement_group_resolves_by_name_or_id_when_available(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    serve_placement_groups(monkeypatch, GROUPS)
    by_name = resolve_placement_group(world.ec2, PlacementGroupSelector(name="training"))
    assert by_name is not None
    assert (by_name.id, by_name.strategy) == ("pg-0123456789abcdef0", "cluster")
    by_id = resolve_placement_group(world.ec2, PlacementGroupSelector(id="pg-0123456789abcdef0"))
    assert by_id == by_name
    assert resolve_placement_group(world.ec2, PlacementGroupSelector(name="missing")) is None
    assert resolve_placement_group(world.ec2, PlacementGroupSelector(id="pg-0aaaaaaaaaaaaaaaa")) is None
    assert resolve_placement_group(world.ec2, PlacementGroupSelector(name="old")) is None  # not available


def test_windows2025_alias_resolves_through_its_ssm_parameter(world: Any) -> None:
    image = world.image("windows2025", arch="x86_64")
    parameter = "/aws/service/ami-windows-latest/Windows_Server-2025-English-Core-EKS_Optimized-1.35/image_id"
    assert alias_ssm_parameters("windows2025@latest", "1.35") == {parameter: "amd64"}
    seed_ssm_parameter(parameter, image)
    nc = node_class(amiSelectorTerms=[{"alias": "windows2025@latest"}])
    resolved = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version="1.35")
    assert resolved.ami_family == "Windows2025"
    assert [(a.id, a.architecture) for a in resolved.amis] == [(image, "amd64")]


def test_windows2025_alias_needs_kubernetes_1_35(world: Any) -> None:
    with pytest.raises(InvalidRequest, match=r"windows2025@latest.*requires Kubernetes 1\.35.*1\.34"):
        alias_ssm_parameters("windows2025@latest", "1.34")
    nc = node_class(amiSelectorTerms=[{"alias": "windows2025@latest"}])
    with pytest.raises(InvalidRequest, match="Windows Server 2025"):
        resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version="1.31")


def test_ipv6_cluster_interfaces_get_a_primary_ipv6_address_and_ipv6_prefixes(world: Any) -> None:
    plain = _template_data(world, ensure_launch_template(world.ec2, lt_spec(world, ipv6=True)))
    assert "SecurityGroupIds" not in plain
    assert plain["NetworkInterfaces"] == [
        {"DeviceIndex": 0, "Groups": [world.sg_tagged], "PrimaryIpv6": True, "Ipv6AddressCount": 1}
    ]
    spec = lt_spec(
        world,
        ipv6=True,
        ip_prefix_count=1,
        network_interfaces=_nics((0, 0, "interface"), (1, 0, "efa-only")),
    )
    data = _template_data(world, ensure_launch_template(world.ec2, spec))
    assert data["NetworkInterfaces"] == [
        {
            "NetworkCardIndex": 0,
            "DeviceIndex": 0,
            "InterfaceType": "interface",
            "Groups": [world.sg_tagged],
            "Ipv6PrefixCount": 1,
            "PrimaryIpv6": True,
            "Ipv6AddressCount": 1,
        },
        {"NetworkCardIndex": 1, "DeviceIndex": 0, "InterfaceType": "efa-only", "Groups": [world.sg_tagged]},
    ]
    efa = _template_data(world, ensure_launch_template(world.ec2, lt_spec(world, ipv6=True, efa_count=2)))
    assert [
        (i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"], i["PrimaryIpv6"])
        for i in efa["NetworkInterfaces"]
    ] == [
        (0, 0, "efa", True),
        (1, 1, "efa", True),
    ]


def test_a_launch_for_nitro_enclave_slots_enables_enclaves_in_its_launch_template(world: Any) -> None:
    """As Karpenter's AWS provider: a NodeClaim requesting eks.amazonaws.com/nip-slots launches with Nitro Enclaves
    enabled (EnclaveOptions in the template CreateFleet launches from); other templates do not say it (EC2's
    default is disabled) and keep their names."""
    enclave = ensure_launch_template(world.ec2, lt_spec(world, enclave=True))
    plain = ensure_launch_template(world.ec2, lt_spec(world))
    assert enclave != plain
    assert _template_data(world, enclave)["EnclaveOptions"] == {"Enabled": True}
    assert "EnclaveOptions" not in _template_data(world, plain)
    launched = create_fleet(world.ec2, fleet_request(world, enclave))
    [fleet] = world.ec2.describe_fleets(FleetIds=[launched.fleet_id])["Fleets"]
    assert fleet["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"] == enclave
