"""The EC2NodeClass hash (karpenter.k8s.aws/ec2nodeclass-hash, version v5) against the AWS provider's own golden
values (aws/karpenter-provider-aws v1.14.1, pkg/apis/v1/ec2nodeclass_hash_test.go): the same spec, the same CA
bundle, the same number."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeflow.api.karpenter import EC2NodeClass
from nodeflow.api.template_hash import (
    EC2NODECLASS_HASH_VERSION,
    ec2nodeclass_hash,
    ec2nodeclass_spec_hash,
    go_quantity_string,
)

CA = "test-ca-bundle"
STATIC = "2608468723537941485"


def base_spec() -> dict[str, Any]:
    """The provider test's base EC2NodeClass spec, as JSON."""
    return {
        "role": "role-1",
        "tags": {"keyTag-1": "valueTag-1", "keyTag-2": "valueTag-2"},
        "context": "fake-context",
        "detailedMonitoring": False,
        "associatePublicIPAddress": False,
        "metadataOptions": {
            "httpEndpoint": "disabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "optional",
        },
        "blockDeviceMappings": [
            {
                "deviceName": "map-device-1",
                "rootVolume": False,
                "ebs": {
                    "deleteOnTermination": False,
                    "encrypted": False,
                    "iops": 0,
                    "kmsKeyID": "fakeKMSKeyID",
                    "snapshotID": "fakeSnapshot",
                    "throughput": 0,
                    "volumeSize": "2G",
                    "volumeType": "standard",
                },
            },
            {"deviceName": "map-device-2"},
        ],
        "userData": "userdata-test-1",
    }


def merged(changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` merged over the base as the provider's test merges them (maps and structs field by field,
    block device mappings element by element)."""

    def merge(dst: Any, src: Any) -> Any:
        if isinstance(dst, dict) and isinstance(src, dict):
            out = dict(dst)
            for k, v in src.items():
                out[k] = merge(dst.get(k), v)
            return out
        if isinstance(dst, list) and isinstance(src, list):
            out_list = list(dst)
            for i, v in enumerate(src):
                out_list[i] = merge(dst[i], v) if i < len(dst) else v
            return out_list
        return copy.deepcopy(src)

    result: dict[str, Any] = merge(base_spec(), changes)
    return result


def _ebs(**fields: Any) -> dict[str, Any]:
    return {"blockDeviceMappings": [{"ebs": fields}]}


GOLDEN = [
    ("base", {}, STATIC),
    ("userData", {"userData": "userdata-test-2"}, "2153344579995979450"),
    ("tags", {"tags": {"keyTag-test-3": "valueTag-test-3"}}, "4608386791045313156"),
    ("context", {"context": "context-2"}, "11612053647989098410"),
    ("detailedMonitoring", {"detailedMonitoring": True}, "11845605438531206428"),
    ("instanceStorePolicy", {"instanceStorePolicy": "RAID0"}, "6430637013089544585"),
    ("associatePublicIPAddress", {"associatePublicIPAddress": True}, "6811176403923819181"),
    ("httpEndpoint", {"metadataOptions": {"httpEndpoint": "enabled"}}, "8158886403801636337"),
    ("httpProtocolIPv6", {"metadataOptions": {"httpProtocolIPv6": "enabled"}}, "12355196004817691031"),
    ("httpPutResponseHopLimit", {"metadataOptions": {"httpPutResponseHopLimit": 10}}, "8968306366664488826"),
    ("httpTokens", {"metadataOptions": {"httpTokens": "required"}}, "12408995450371615650"),
    ("deviceName", {"blockDeviceMappings": [{"deviceName": "map-device-test-3"}]}, "13986335469721503441"),
    ("rootVolume", {"blockDeviceMappings": [{"rootVolume": True}]}, "14242690863945643402"),
    ("deleteOnTermination", _ebs(deleteOnTermination=True), "12316454167870753581"),
    ("encrypted", _ebs(encrypted=True), "17753517657333560591"),
    ("iops", _ebs(iops=10), "2249322442135400321"),
    ("kmsKeyID", _ebs(kmsKeyID="test"), "12259594419287406661"),
    ("snapshotID", _ebs(snapshotID="test"), "1149563513090550380"),
    ("throughput", _ebs(throughput=10), "12068199760789564545"),
    ("volumeType", _ebs(volumeType="io1"), "16361719363399715944"),
    ("volumeSize", _ebs(volumeSize="10G"), "3564293065344858862"),
    ("tcpEstablishedTimeout", {"connectionTracking": {"tcpEstablishedTimeout": 300}}, "12177489405137904098"),
    ("udpStreamTimeout", {"connectionTracking": {"udpStreamTimeout": 120}}, "17567831983996427"),
    ("udpTimeout", {"connectionTracking": {"udpTimeout": 45}}, "5078825826133662844"),
    ("nestedVirtualization", {"cpuOptions": {"nestedVirtualization": "enabled"}}, "17001101224536964682"),
    # selector terms are not hashed: what they select is judged from status
    ("amiSelectorTerms", {"amiSelectorTerms": [{"tags": {"": "ami-test-value"}}]}, STATIC),
    ("subnetSelectorTerms", {"subnetSelectorTerms": [{"tags": {"subnet-test-key": "subnet-test-value"}}]}, STATIC),
    ("securityGroupSelectorTerms", {"securityGroupSelectorTerms": [{"tags": {"sg": "v"}}]}, STATIC),
    ("capacityReservationSelectorTerms", {"capacityReservationSelectorTerms": [{"tags": {"cr": "v"}}]}, STATIC),
]


@pytest.mark.parametrize(("field", "changes", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_provider_golden_values(field: str, changes: dict[str, Any], expected: str) -> None:
    assert ec2nodeclass_spec_hash(merged(changes), "Custom", CA) == expected


def test_instance_profile_instead_of_role() -> None:
    spec = base_spec()
    del spec["role"]
    spec["instanceProfile"] = "test-instance-profile"
    assert ec2nodeclass_spec_hash(spec, "Custom", CA) == "3585768058063247698"
    spec["instanceProfile"] = "other-instance-profile"
    assert ec2nodeclass_spec_hash(spec, "Custom", CA) != "3585768058063247698"


def test_order_of_tags_and_block_device_mappings_does_not_matter() -> None:
    spec = base_spec()
    spec["tags"] = {"keyTag-2": "valueTag-2", "keyTag-1": "valueTag-1"}
    spec["blockDeviceMappings"].reverse()
    assert ec2nodeclass_spec_hash(spec, "Custom", CA) == STATIC


def test_family_and_ca_bundle_are_hashed() -> None:
    spec = base_spec()
    assert ec2nodeclass_spec_hash(spec, "AL2023", CA) != STATIC
    assert ec2nodeclass_spec_hash(spec, "Custom", "other-ca") != STATIC


def test_model_hash_is_the_spec_hash() -> None:
    """Through the EC2NodeClass model: selector terms and amiFamily Custom as the CRD requires them, the same
    number as the provider's base class."""
    nc = EC2NodeClass.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {
                **base_spec(),
                "amiFamily": "Custom",
                "amiSelectorTerms": [{"id": "ami-0123456789abcdef0"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            },
        }
    )
    assert ec2nodeclass_hash(nc, CA) == STATIC
    assert EC2NODECLASS_HASH_VERSION == "v5"


def test_alias_family_counts_as_amifamily() -> None:
    """amiFamily unset with an al2023 alias hashes like amiFamily AL2023 set explicitly (no drift for that edit)."""
    spec = {
        "role": "r",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"k": "v"}}],
        "securityGroupSelectorTerms": [{"tags": {"k": "v"}}],
    }
    implicit = EC2NodeClass.model_validate({"metadata": {"name": "a"}, "spec": spec})
    explicit = EC2NodeClass.model_validate({"metadata": {"name": "a"}, "spec": {**spec, "amiFamily": "AL2023"}})
    assert ec2nodeclass_hash(implicit, CA) == ec2nodeclass_hash(explicit, CA)


def test_new_fields_change_the_hash() -> None:
    """Fields of the spec the hash table does not list (newer than v1.14.1) are hashed too."""
    spec = base_spec()
    assert ec2nodeclass_spec_hash({**spec, "futureField": {"enabled": True}}, "Custom", CA) != STATIC
    assert ec2nodeclass_spec_hash({**spec, "futureField": "x"}, "Custom", CA) != ec2nodeclass_spec_hash(
        {**spec, "futureField": "y"}, "Custom", CA
    )


def test_newer_v114_fields_change_the_hash() -> None:
    spec = base_spec()
    nic = {"networkInterfaces": [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]}
    pg = {"placementGroupSelector": {"name": "pg-1"}}
    kubelet = {"kubelet": {"maxPods": 110, "evictionSoftGracePeriod": {"memory.available": "1m"}}}
    hashes = {ec2nodeclass_spec_hash({**spec, **extra}, "Custom", CA) for extra in (nic, pg, kubelet, {})}
    assert len(hashes) == 4


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("2G", "2G"),
        ("2000M", "2G"),
        ("1500M", "1500M"),
        ("20Gi", "20Gi"),
        ("1024Mi", "1Gi"),
        ("1.5Gi", "1536Mi"),
        ("100", "100"),
        ("1200", "1200"),
        ("0.5", "500m"),
        ("1e3", "1e3"),
        ("0", "0"),
        ("512", "512"),
    ],
)
def test_go_quantity_string(text: str, canonical: str) -> None:
    assert go_quantity_string(text) == canonical
