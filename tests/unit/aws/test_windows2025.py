"""The Windows2025 AMI family (alias windows2025@latest): bootstrapped like the other Windows families,
its instance types carry Windows Server 2025's build label and Windows' pod and root-volume defaults, and
a root volume mapping on /dev/sda1 sizes its ephemeral storage."""

from __future__ import annotations

import pytest

from nodeflow.api import labels as L
from nodeflow.api.karpenter_ec2 import EC2NodeClass
from nodeflow.aws.userdata import render_user_data
from nodeflow.catalog.instancetypes import NodeClassSettings, resolve_instance_type
from nodeflow.catalog.offline import load_offline
from nodeflow.plan import node_class_settings
from tests.unit.aws.test_userdata import boot

GI = 2**30


def test_windows2025_user_data_is_the_eks_powershell_bootstrap() -> None:
    out = render_user_data(boot("Windows2025", user_data="Write-Host 'hi'\r\n"))
    lines = out.split("\n")
    assert lines[0] == "<powershell>"
    assert lines[1] == "Write-Host 'hi'"
    assert "Start-EKSBootstrap.ps1" in lines[2]
    assert lines[3].startswith("& $EKSBootstrapScriptFile -EKSClusterName 'demo'")


def test_windows2025_instance_types() -> None:
    data = load_offline("us-east-1")
    it = resolve_instance_type(data, "m5.large", NodeClassSettings(ami_family="Windows2025"))
    assert it is not None
    assert it.labels[L.LABEL_OS] == "windows"
    assert it.labels[L.LABEL_WINDOWS_BUILD] == "10.0.26100"
    assert it.capacity["pods"] == 110_000
    assert it.capacity["ephemeral-storage"] == 50 * GI * 1000  # milli-units
    assert resolve_instance_type(data, "m6g.large", NodeClassSettings(ami_family="Windows2025")) is None


# a mapping on another device is not the root volume: the family's default volume (50Gi on /dev/sda1) counts
@pytest.mark.parametrize(("device", "expected"), [("/dev/sda1", 200 * GI), ("/dev/xvda", 50 * GI)])
def test_windows2025_root_device(device: str, expected: int) -> None:
    nc = EC2NodeClass.model_validate(
        {
            "metadata": {"name": "win"},
            "spec": {
                "role": "r",
                "amiSelectorTerms": [{"alias": "windows2025@latest"}],
                "subnetSelectorTerms": [{"id": "subnet-0123"}],
                "securityGroupSelectorTerms": [{"id": "sg-0123"}],
                "blockDeviceMappings": [{"deviceName": device, "ebs": {"volumeSize": "200Gi"}}],
            },
        }
    )
    settings = node_class_settings(nc)
    assert settings.ami_family == "Windows2025"
    assert settings.root_volume_bytes == expected
