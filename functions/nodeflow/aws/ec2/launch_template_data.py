"""What a launch template holds (``LaunchTemplateSpec`` -> CreateLaunchTemplate's ``LaunchTemplateData``) and its
name, a hash of that content: equal configurations share one template, an edited one gets a new template.

It decides the template's fields: image, profile, user data, metadata options, block devices, network interfaces
(EFA, IPv6, prefixes, public IPs, connection tracking), CPU options, placement group, enclaves and capacity
reservation targeting. Pure: it must not call AWS (``nodeflow.aws.ec2.launch_templates`` creates and deletes
templates) nor decide what the node needs (the launch step fills the spec).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeflow.api.karpenter_ec2 import (
    BlockDeviceMapping,
    ConnectionTracking,
    CPUOptions,
    MetadataOptions,
    NetworkInterface,
)
from nodeflow.aws.ec2.tags import TAG_NODECLASS, TAG_NODEPOOL, cluster_tags, tag_list

__all__ = ["LAUNCH_TEMPLATE_PREFIX", "LaunchTemplateSpec", "launch_template_data", "launch_template_name"]

LAUNCH_TEMPLATE_PREFIX = "nodeflow/"


@dataclass(frozen=True)
class LaunchTemplateSpec:
    """Everything a launch template holds. Equal specs map to one template."""

    cluster_name: str
    node_pool: str
    node_class: str
    image_id: str
    security_group_ids: Sequence[str]
    instance_profile: str
    user_data: str  # base64
    # as launched: the spec's or the AMI family's defaults (nodeflow.api.block_devices); () leaves the AMI's own
    block_device_mappings: Sequence[BlockDeviceMapping] = ()
    metadata_options: MetadataOptions = field(default_factory=MetadataOptions)
    tags: Mapping[str, str] = field(default_factory=dict)
    detailed_monitoring: bool = False
    associate_public_ip_address: bool | None = None
    ip_prefix_count: int | None = None
    network_interfaces: Sequence[NetworkInterface] = ()
    connection_tracking: ConnectionTracking | None = None
    cpu_options: CPUOptions | None = None
    placement_group_id: str | None = None
    efa_count: int = 0  # EFA interfaces to attach (pods asked for vpc.amazonaws.com/efa); 0: none
    ipv6: bool = False  # an IPv6 cluster: interfaces get a primary IPv6 address, prefixes are IPv6 prefixes
    enclave: bool = False  # Nitro Enclaves enabled (the NodeClaim requests eks.amazonaws.com/nip-slots)
    # A launch into a capacity reservation: the template targets it (one template per reservation, as Karpenter).
    capacity_reservation_id: str | None = None
    capacity_reservation_type: str = "default"  # "default" | "capacity-block" (launched on the capacity-block market)
    capacity_reservation_interruptible: bool = False

    @property
    def all_tags(self) -> dict[str, str]:
        """User tags plus the ownership tags (ownership wins)."""
        return {
            **dict(self.tags),
            **cluster_tags(self.cluster_name),
            TAG_NODEPOOL: self.node_pool,
            TAG_NODECLASS: self.node_class,
        }


def _volume_size_gib(mapping: BlockDeviceMapping) -> int | None:
    size = mapping.ebs.volume_size_bytes if mapping.ebs else None
    return None if size is None else max(1, math.ceil(size / 2**30))


def _block_device_mapping(m: BlockDeviceMapping) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if m.device_name:
        out["DeviceName"] = m.device_name
    if m.ebs:
        ebs = {
            "DeleteOnTermination": m.ebs.delete_on_termination,
            "Encrypted": m.ebs.encrypted,
            "Iops": m.ebs.iops,
            "KmsKeyId": m.ebs.kms_key_id,
            "SnapshotId": m.ebs.snapshot_id,
            "Throughput": m.ebs.throughput,
            "VolumeInitializationRate": m.ebs.volume_initialization_rate,
            "VolumeSize": _volume_size_gib(m),
            "VolumeType": m.ebs.volume_type,
        }
        out["Ebs"] = {k: v for k, v in ebs.items() if v is not None}
    return out


def launch_template_data(spec: LaunchTemplateSpec) -> dict[str, Any]:
    """The CreateLaunchTemplate ``LaunchTemplateData`` for ``spec``."""
    mo = spec.metadata_options
    tags = tag_list(spec.all_tags)
    data: dict[str, Any] = {
        "ImageId": spec.image_id,
        "IamInstanceProfile": {"Name": spec.instance_profile},
        "UserData": spec.user_data,
        "MetadataOptions": {
            "HttpEndpoint": mo.http_endpoint,
            "HttpProtocolIpv6": mo.http_protocol_ipv6,
            "HttpPutResponseHopLimit": mo.http_put_response_hop_limit,
            "HttpTokens": mo.http_tokens,
        },
        "Monitoring": {"Enabled": bool(spec.detailed_monitoring)},
        "TagSpecifications": [{"ResourceType": "network-interface", "Tags": tags}],
    }
    interfaces = _network_interfaces(spec)
    if interfaces:
        data["NetworkInterfaces"] = interfaces  # the security groups go on the interfaces
    else:
        data["SecurityGroupIds"] = sorted(spec.security_group_ids)
    if spec.block_device_mappings:
        data["BlockDeviceMappings"] = [_block_device_mapping(m) for m in spec.block_device_mappings]
    if spec.cpu_options is not None and spec.cpu_options.nested_virtualization is not None:
        data["CpuOptions"] = {"NestedVirtualization": spec.cpu_options.nested_virtualization}
    if spec.placement_group_id:
        data["Placement"] = {"GroupId": spec.placement_group_id}
    if spec.enclave:  # EC2's default is disabled: said only when enabled (other templates keep their names)
        data["EnclaveOptions"] = {"Enabled": True}
    data.update(_capacity_reservation_settings(spec))
    return data


def _capacity_reservation_settings(spec: LaunchTemplateSpec) -> dict[str, Any]:
    """As Karpenter's targeted launch mode: a reserved launch uses only its reservation (capacity blocks on the
    capacity-block market, interruptible reservations on theirs); every other launch opts out of open
    reservations (preference ``none``), so on-demand and spot nodes never use up reserved capacity unseen."""
    if not spec.capacity_reservation_id:
        return {"CapacityReservationSpecification": {"CapacityReservationPreference": "none"}}
    out: dict[str, Any] = {
        "CapacityReservationSpecification": {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {"CapacityReservationId": spec.capacity_reservation_id},
        }
    }
    if spec.capacity_reservation_type == "capacity-block":
        out["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    elif spec.capacity_reservation_interruptible:
        out["InstanceMarketOptions"] = {"MarketType": "interruptible-capacity-reservation"}
    return out


def _connection_tracking(ct: ConnectionTracking | None) -> dict[str, int] | None:
    if ct is None:
        return None
    out = {
        "TcpEstablishedTimeout": ct.tcp_established_timeout,
        "UdpStreamTimeout": ct.udp_stream_timeout,
        "UdpTimeout": ct.udp_timeout,
    }
    return {k: v for k, v in out.items() if v is not None} or None


def _network_interfaces(spec: LaunchTemplateSpec) -> list[dict[str, Any]] | None:
    """The launch template's NetworkInterfaces, or None to use SecurityGroupIds (one default interface).

    With ``networkInterfaces`` every entry becomes an interface on its card and device with the node's
    security groups; EFA-only interfaces carry no IP settings (EC2 refuses prefixes, public IPs and
    connection tracking on them). Else, with ``efa_count``, one EFA interface per network card (device 0
    on card 0, device 1 on the others, so card 0 stays the primary). Otherwise one primary interface is
    written only when a setting needs it (public IP, IP prefixes, connection tracking, an IPv6 cluster)."""
    groups = sorted(spec.security_group_ids)
    if spec.network_interfaces:
        result = []
        for ni in spec.network_interfaces:
            out: dict[str, Any] = {
                "NetworkCardIndex": ni.network_card_index,
                "DeviceIndex": ni.device_index,
                "InterfaceType": ni.interface_type,
                "Groups": groups,
            }
            result.append(out if ni.interface_type == "efa-only" else _ip_settings(spec, out))
        return result
    if spec.efa_count:
        return [
            _ip_settings(
                spec,
                {
                    "NetworkCardIndex": card,
                    "DeviceIndex": 0 if card == 0 else 1,
                    "InterfaceType": "efa",
                    "Groups": groups,
                },
            )
            for card in range(spec.efa_count)
        ]
    tracking = _connection_tracking(spec.connection_tracking)
    if spec.associate_public_ip_address is None and spec.ip_prefix_count is None and not tracking and not spec.ipv6:
        return None
    return [_ip_settings(spec, {"DeviceIndex": 0, "Groups": groups})]


def _ip_settings(spec: LaunchTemplateSpec, interface: dict[str, Any]) -> dict[str, Any]:
    """``interface`` with the spec's IP settings added: public IP, IP prefixes, connection tracking. In an IPv6
    cluster the interface gets one IPv6 address made primary, and ipPrefixCount asks for IPv6 prefixes instead of
    IPv4 ones."""
    if spec.associate_public_ip_address is not None:
        interface["AssociatePublicIpAddress"] = spec.associate_public_ip_address
    if spec.ip_prefix_count is not None:
        interface["Ipv6PrefixCount" if spec.ipv6 else "Ipv4PrefixCount"] = spec.ip_prefix_count
    if spec.ipv6:
        interface["PrimaryIpv6"] = True
        interface["Ipv6AddressCount"] = 1
    tracking = _connection_tracking(spec.connection_tracking)
    if tracking:
        interface["ConnectionTrackingSpecification"] = tracking
    return interface


def launch_template_name(spec: LaunchTemplateSpec) -> str:
    """``nodeflow/<sha256 of the configuration>``: the same spec always gets the same name."""
    canonical = json.dumps(
        {"data": launch_template_data(spec), "tags": spec.all_tags}, sort_keys=True, separators=(",", ":")
    )
    return LAUNCH_TEMPLATE_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()
