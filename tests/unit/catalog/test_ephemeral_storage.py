"""Ephemeral storage per AMI family, from an EC2NodeClass as the planner and Launch read it: the volume the launch
template gets (the family's default without ``blockDeviceMappings``), as the AWS provider v1.14.1 counts it
(``pkg/providers/instancetype/types.go`` ephemeralStorage over the AMI families' default mappings)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.api.block_devices import (
    default_block_device_mappings,
    ephemeral_device,
    ephemeral_volume_bytes,
    launched_block_device_mappings,
)
from nodeflow.api.karpenter_ec2 import EC2NodeClass
from nodeflow.catalog.instancetypes import AMI_FAMILIES, NodeClassSettings, resolve_instance_type
from nodeflow.catalog.model import CatalogData
from nodeflow.catalog.offline import load_offline
from nodeflow.plan import node_class_settings

GI = 2**30


@pytest.fixture(scope="module")
def data() -> CatalogData:
    return load_offline("us-east-1")


def node_class(family: str, mappings: list[dict[str, Any]] | None = None, **spec: Any) -> EC2NodeClass:
    return EC2NodeClass.model_validate(
        {
            "metadata": {"name": "nc"},
            "spec": {
                "role": "r",
                "amiFamily": family,
                "amiSelectorTerms": [{"id": "ami-0123"}],
                "subnetSelectorTerms": [{"id": "subnet-0123"}],
                "securityGroupSelectorTerms": [{"id": "sg-0123"}],
                **({"blockDeviceMappings": mappings} if mappings is not None else {}),
                **spec,
            },
        }
    )


def ephemeral(data: CatalogData, nc: EC2NodeClass, instance_type: str = "m5.large") -> int:
    it = resolve_instance_type(data, instance_type, node_class_settings(nc))
    assert it is not None
    return it.capacity["ephemeral-storage"] // 1000


DEFAULT_GIB = {
    "AL2": 20,
    "AL2023": 20,
    "Bottlerocket": 20,  # of its 4Gi + 20Gi: the data volume /dev/xvdb
    "Windows2019": 50,
    "Windows2022": 50,
    "Windows2025": 50,
    "Custom": 20,  # no volumes of its own: the AMI's; counted as the provider's default 20Gi
}


@pytest.mark.parametrize("family", AMI_FAMILIES)
def test_without_mappings_the_families_default_volume(data: CatalogData, family: str) -> None:
    assert ephemeral(data, node_class(family)) == DEFAULT_GIB[family] * GI
    assert ephemeral_volume_bytes(family, None) == DEFAULT_GIB[family] * GI
    # what is counted is what is launched: the default volume on the family's ephemeral device
    device = ephemeral_device(family)
    launched = {m.device_name: m for m in launched_block_device_mappings(family, None)}
    if device is None:
        assert launched == {}
    else:
        ebs = launched[device].ebs
        assert ebs is not None
        assert ebs.volume_size_bytes == DEFAULT_GIB[family] * GI
        assert (ebs.encrypted, ebs.volume_type) == (True, "gp3")
    # NodeClassSettings without a size means the same default
    settings = NodeClassSettings(ami_family=family)
    it = resolve_instance_type(data, "m5.large", settings)
    assert it is not None
    assert it.capacity["ephemeral-storage"] == DEFAULT_GIB[family] * GI * 1000


def test_default_volumes_per_family() -> None:
    def sizes(family: str) -> list[tuple[str | None, int | None]]:
        return [
            (m.device_name, m.ebs.volume_size_bytes if m.ebs else None) for m in default_block_device_mappings(family)
        ]

    assert sizes("AL2") == sizes("AL2023") == [("/dev/xvda", 20 * GI)]
    assert sizes("Bottlerocket") == [("/dev/xvda", 4 * GI), ("/dev/xvdb", 20 * GI)]
    assert sizes("Windows2019") == sizes("Windows2022") == sizes("Windows2025") == [("/dev/sda1", 50 * GI)]
    assert sizes("Custom") == []
    with pytest.raises(ValueError, match="unknown amiFamily 'Ubuntu'"):
        default_block_device_mappings("Ubuntu")


@pytest.mark.parametrize(
    ("family", "mappings", "gib"),
    [
        # the mapping on the family's ephemeral device
        ("AL2023", [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi"}}], 100),
        ("Bottlerocket", [{"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "80Gi"}}], 80),
        ("Windows2022", [{"deviceName": "/dev/sda1", "ebs": {"volumeSize": "200Gi"}}], 200),
        # none on it: the family's default volume's size
        ("Bottlerocket", [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "10Gi"}}], 20),
        ("Windows2019", [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "10Gi"}}], 50),
        # rootVolume wins over the device
        (
            "AL2023",
            [
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "30Gi"}},
                {"deviceName": "/dev/xvdc", "rootVolume": True, "ebs": {"volumeSize": "300Gi"}},
            ],
            300,
        ),
        # a rootVolume without a size (a snapshot's) says nothing: the device's mapping counts
        (
            "AL2023",
            [
                {"deviceName": "/dev/xvdc", "rootVolume": True, "ebs": {"snapshotID": "snap-0123"}},
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "64Gi"}},
            ],
            64,
        ),
        # Custom: which volume its AMI mounts is unknown; the last mapping counts (20Gi when it has no size)
        (
            "Custom",
            [
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "30Gi"}},
                {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "90Gi"}},
            ],
            90,
        ),
        ("Custom", [{"deviceName": "/dev/xvda", "ebs": {"snapshotID": "snap-0123"}}], 20),
        (
            "Custom",
            [
                {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "40Gi"}},
                {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "90Gi"}},
            ],
            40,
        ),
    ],
)
def test_the_specs_mappings(data: CatalogData, family: str, mappings: list[dict[str, Any]], gib: int) -> None:
    nc = node_class(family, mappings)
    assert ephemeral(data, nc) == gib * GI
    # the spec's mappings are launched as written, none of the family's defaults added
    launched = launched_block_device_mappings(family, nc.spec.block_device_mappings)
    assert list(launched) == nc.spec.block_device_mappings


def test_raid0_counts_the_instance_store_over_any_volume(data: CatalogData) -> None:
    for nc in (
        node_class("AL2023", instanceStorePolicy="RAID0"),
        node_class(
            "Bottlerocket", [{"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "80Gi"}}], instanceStorePolicy="RAID0"
        ),
        node_class(
            "Custom",
            [{"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "40Gi"}}],
            instanceStorePolicy="RAID0",
        ),
    ):
        assert ephemeral(data, nc, "m5d.large") == 75 * 10**9  # 75 GB of NVMe
    # a type without an instance store: the volume
    assert ephemeral(data, node_class("AL2023", instanceStorePolicy="RAID0")) == 20 * GI
    assert ephemeral(data, node_class("Windows2022", instanceStorePolicy="RAID0")) == 50 * GI
