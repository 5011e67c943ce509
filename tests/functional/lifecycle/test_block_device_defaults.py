"""The volumes a node launches with, through the Launch step (moto, the real control plane): an EC2NodeClass without
``blockDeviceMappings`` gets its AMI family's default volumes in the launch template, as the AWS provider writes
them (AL2 / AL2023 a 20Gi encrypted gp3 /dev/xvda, Bottlerocket 4Gi + 20Gi, Windows 50Gi, Custom none: the
AMI's own); the NodeClaim's ephemeral-storage capacity is the volume its kubelet really gets; the class's hash
does not change with the defaults, so nodes launched before they were written do not drift."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeflow.api.karpenter import EC2NodeClass
from nodeflow.api.quantity import parse_quantity
from nodeflow.api.template_hash import ec2nodeclass_hash
from nodeflow.handlers import runtime
from sandbox.nodeflow import LocalNodeflow

GI = 2**30
HASH = "karpenter.k8s.aws/ec2nodeclass-hash"


def _ebs(size: int) -> dict[str, Any]:
    return {"Encrypted": True, "VolumeSize": size, "VolumeType": "gp3"}


# amiFamily -> (amiSelectorTerms by alias or None for the test AMI by id, launch template BlockDeviceMappings,
# the NodeClaim's ephemeral-storage capacity in GiB)
FAMILIES: dict[str, tuple[str | None, list[dict[str, Any]] | None, int]] = {
    "AL2": ("al2@latest", [{"DeviceName": "/dev/xvda", "Ebs": _ebs(20)}], 20),
    "AL2023": ("al2023@latest", [{"DeviceName": "/dev/xvda", "Ebs": _ebs(20)}], 20),
    "Bottlerocket": (
        "bottlerocket@latest",
        [{"DeviceName": "/dev/xvda", "Ebs": _ebs(4)}, {"DeviceName": "/dev/xvdb", "Ebs": _ebs(20)}],
        20,
    ),
    "Windows2022": (None, [{"DeviceName": "/dev/sda1", "Ebs": _ebs(50)}], 50),
    "Custom": (None, None, 20),  # the AMI's own volumes; its ephemeral storage is taken as the default 20Gi
}


def _node_class(local: LocalNodeflow, name: str, family: str, **spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(local.kube_server.get("karpenter.k8s.aws/v1", "EC2NodeClass", "default"))
    alias = FAMILIES[family][0]
    obj["metadata"] = {"name": name}
    obj.pop("status", None)
    if alias:
        obj["spec"]["amiSelectorTerms"] = [{"alias": alias}]
    else:
        obj["spec"]["amiFamily"] = family
        obj["spec"]["amiSelectorTerms"] = [{"id": local.world.amis["amd64"]}]
    obj["spec"].update(spec)
    return obj


def _node_claim(name: str, node_class: str, instance_type: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": node_class},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
            "resources": {"requests": {"cpu": "100m"}},
        },
    }


def _launch(local: LocalNodeflow, node_class: dict[str, Any], instance_type: str = "m5.large") -> dict[str, Any]:
    """Launch one NodeClaim of ``node_class``: (its launch template's data, the NodeClaim as launched)."""
    name = node_class["metadata"]["name"]
    local.apply([node_class, _node_claim(name, name, instance_type)])
    local.invoke("launch", {"nodeClaim": name})
    ec2 = local.clients.ec2
    fleets = [f for f in ec2.describe_fleets()["Fleets"] if _tag(f, "karpenter.sh/nodeclaim") == name]
    template = fleets[0]["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
    [version] = ec2.describe_launch_template_versions(LaunchTemplateName=template)["LaunchTemplateVersions"]
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", name)
    return {"data": version["LaunchTemplateData"], "claim": claim}


def _ephemeral(launched: dict[str, Any]) -> int:
    return int(parse_quantity(launched["claim"]["status"]["capacity"]["ephemeral-storage"]))


def _tag(resource: dict[str, Any], key: str) -> str | None:
    tags = [t for spec in resource.get("TagSpecifications", []) for t in spec.get("Tags", [])]
    return next((t["Value"] for t in [*tags, *resource.get("Tags", [])] if t["Key"] == key), None)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_class_without_mappings_launches_its_families_default_volumes(local: LocalNodeflow, family: str) -> None:
    _, expected, ephemeral_gib = FAMILIES[family]
    node_class = _node_class(local, family.lower(), family)
    launched = _launch(local, node_class)
    assert launched["data"].get("BlockDeviceMappings") == expected
    assert _ephemeral(launched) == ephemeral_gib * GI

    # the defaults are the launch's, not the spec's: the class's hash is the hash of what the user wrote, and the
    # NodeClaim carries it (no drift); writing the same volumes into the spec is an edit (a new hash)
    stored = local.kube_server.get("karpenter.k8s.aws/v1", "EC2NodeClass", node_class["metadata"]["name"])
    assert "blockDeviceMappings" not in stored["spec"]
    ca = runtime.runtime().cluster_info().ca_bundle
    written = ec2nodeclass_hash(EC2NodeClass.model_validate(stored), ca)
    assert launched["claim"]["metadata"]["annotations"][HASH] == written
    if expected:
        explicit = copy.deepcopy(stored)
        explicit["spec"]["blockDeviceMappings"] = [
            {
                "deviceName": m["DeviceName"],
                "ebs": {"encrypted": True, "volumeType": "gp3", "volumeSize": f"{m['Ebs']['VolumeSize']}Gi"},
            }
            for m in expected
        ]
        assert ec2nodeclass_hash(EC2NodeClass.model_validate(explicit), ca) != written


def test_the_specs_mappings_replace_the_defaults_and_size_ephemeral_storage(local: LocalNodeflow) -> None:
    """Mappings of the spec are launched as written (no default merged in; rootVolume is not an EC2 setting) and
    the one marked rootVolume is the ephemeral storage."""
    mappings = [
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "30Gi", "volumeType": "gp2"}},
        {"deviceName": "/dev/xvdc", "rootVolume": True, "ebs": {"volumeSize": "120Gi", "encrypted": False}},
    ]
    launched = _launch(local, _node_class(local, "mapped", "Bottlerocket", blockDeviceMappings=mappings))
    assert launched["data"]["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 30, "VolumeType": "gp2"}},
        {"DeviceName": "/dev/xvdc", "Ebs": {"Encrypted": False, "VolumeSize": 120}},
    ]
    assert _ephemeral(launched) == 120 * GI


def test_raid0_keeps_the_default_volumes_and_counts_the_instance_store(local: LocalNodeflow) -> None:
    launched = _launch(local, _node_class(local, "raid", "AL2023", instanceStorePolicy="RAID0"), "m5d.large")
    assert launched["data"]["BlockDeviceMappings"] == FAMILIES["AL2023"][1]
    assert _ephemeral(launched) == 75 * 10**9  # the instance store (75 GB), not the 20Gi volume
