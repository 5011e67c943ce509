"""resolve_node_class against moto: each selector kind, AMI aliases via SSM, instance profiles."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.api.karpenter import EC2NodeClass
from nodeflow.aws.ec2.amis import alias_ssm_parameters
from nodeflow.aws.ec2.instance_profiles import instance_profile_name
from nodeflow.aws.ec2.node_class import resolve_node_class
from nodeflow.aws.errors import InvalidRequest
from tests.functional.aws.conftest import CLUSTER, K8S, seed_ssm_parameter


def node_class(name: str = "default", **spec: Any) -> EC2NodeClass:
    body: dict[str, Any] = {
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "KarpenterNodeRole-demo",
    }
    body.update(spec)
    return EC2NodeClass.model_validate(
        {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": body}
    )


def seed_al2023(world: Any, version: str = "recommended") -> tuple[str, str]:
    amd = world.image("al2023-amd64", arch="x86_64")
    arm = world.image("al2023-arm64", arch="arm64")
    for arch, image_id in (("x86_64", amd), ("arm64", arm)):
        seed_ssm_parameter(
            f"/aws/service/eks/optimized-ami/{K8S}/amazon-linux-2023/{arch}/standard/{version}/image_id", image_id
        )
    return amd, arm


def test_subnets_by_tags_one_per_zone(world: Any) -> None:
    seed_al2023(world)
    r = resolve_node_class(world.ec2, world.ssm, world.iam, node_class(), CLUSTER, kubernetes_version=K8S)
    assert {s.id for s in r.subnets} == set(world.subnets.values())
    assert {s.zone for s in r.subnets} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert all(s.zone_id and s.available_ips > 0 for s in r.subnets)
    assert r.ready
    assert r.missing == ()


def test_subnet_wildcard_tag_and_id(world: Any) -> None:
    seed_al2023(world)
    nc = node_class(subnetSelectorTerms=[{"tags": {"tier": "*"}}])
    r = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version=K8S)
    assert {s.id for s in r.subnets} == {*world.subnets.values(), world.other_subnet}
    # the /22 has more free IPs: first, and the preferred subnet of its zone
    assert r.subnets[0].id == world.other_subnet
    assert r.subnets_by_zone["us-east-1a"].id == world.other_subnet

    nc = node_class(subnetSelectorTerms=[{"id": world.other_subnet}, {"tags": {"tier": "private"}}])
    r = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version=K8S)
    assert len(r.subnets) == 4


def test_security_groups_by_tags_id_and_name(world: Any) -> None:
    seed_al2023(world)
    r = resolve_node_class(world.ec2, world.ssm, world.iam, node_class(), CLUSTER, kubernetes_version=K8S)
    assert [g.id for g in r.security_groups] == [world.sg_tagged]
    nc = node_class(securityGroupSelectorTerms=[{"id": world.sg_tagged}, {"name": "extra-sg"}])
    r = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version=K8S)
    assert {(g.id, g.name) for g in r.security_groups} == {(world.sg_tagged, "nodes"), (world.sg_named, "extra-sg")}


def test_nothing_matched_is_reported_missing(world: Any) -> None:
    nc = node_class(subnetSelectorTerms=[{"tags": {"nope": "x"}}], securityGroupSelectorTerms=[{"name": "nope"}])
    r = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version=K8S)
    assert r.missing == ("subnets", "securityGroups", "amis")
    assert not r.ready


def test_al2023_latest_alias_per_architecture(world: Any) -> None:
    amd, arm = seed_al2023(world)
    r = resolve_node_class(world.ec2, world.ssm, world.iam, node_class(), CLUSTER, kubernetes_version=K8S)
    assert {(a.architecture, a.id) for a in r.amis} == {("amd64", amd), ("arm64", arm)}
    assert r.ami_for("arm64").name == "al2023-arm64-image"  # type: ignore[union-attr]
    status = r.status
    assert status["amis"][0]["requirements"] == [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]


def test_al2023_pinned_version_alias(world: Any) -> None:
    amd = world.image("pinned", arch="x86_64")
    seed_ssm_parameter(
        f"/aws/service/eks/optimized-ami/{K8S}/amazon-linux-2023/x86_64/standard/"
        f"amazon-eks-node-al2023-x86_64-standard-{K8S}-v20240807/image_id",
        amd,
    )
    nc = node_class(amiSelectorTerms=[{"alias": "al2023@v20240807"}])
    r = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version=K8S)
    assert [(a.architecture, a.id) for a in r.amis] == [("amd64", amd)]  # no arm64 parameter: skipped


def test_bottlerocket_and_al2_alias_paths(world: Any) -> None:
    br = world.image("br", arch="arm64")
    seed_ssm_parameter(f"/aws/service/bottlerocket/aws-k8s-{K8S}/arm64/1.20.1/image_id", br)
    nc = node_class(amiSelectorTerms=[{"alias": "bottlerocket@v1.20.1"}])
    r = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version=K8S)
    assert [(a.architecture, a.id) for a in r.amis] == [("arm64", br)]
    assert r.ami_family == "Bottlerocket"

    assert alias_ssm_parameters("al2@latest", "1.30") == {
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2/recommended/image_id": "amd64",
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/recommended/image_id": "arm64",
    }
    assert alias_ssm_parameters("bottlerocket@latest", "1.30") == {
        "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/latest/image_id": "amd64",
        "/aws/service/bottlerocket/aws-k8s-1.30/arm64/latest/image_id": "arm64",
    }


def test_alias_without_kubernetes_version_is_invalid(world: Any) -> None:
    with pytest.raises(InvalidRequest):
        resolve_node_class(world.ec2, world.ssm, world.iam, node_class(), CLUSTER)


def test_ami_by_id_name_tags_owner_newest_wins(world: Any) -> None:
    old = world.image("custom-old", created="2024-01-01", tags={"team": "a"})
    new = world.image("custom-new", created="2024-06-01", tags={"team": "a"})
    arm = world.image("custom-arm", arch="arm64", created="2023-01-01", tags={"team": "a"})
    other = world.image("other", created="2025-01-01")

    def amis(*terms: dict[str, Any]) -> list[tuple[str, str]]:
        nc = node_class(amiSelectorTerms=list(terms), amiFamily="AL2023")
        r = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER)
        return [(a.architecture, a.id) for a in r.amis]

    assert amis({"tags": {"team": "a"}}) == [("amd64", new), ("arm64", arm)]
    assert amis({"id": old}) == [("amd64", old)]
    assert amis({"id": old}, {"id": other}) == [("amd64", other)]
    assert amis({"name": "custom-*"}) == [("amd64", new), ("arm64", arm)]
    assert amis({"name": "custom-old-image", "owner": "self"}) == [("amd64", old)]
    assert amis({"tags": {"team": "*"}}) == [("amd64", new), ("arm64", arm)]
    assert amis({"tags": {"team": "b"}}) == []


def test_instance_profile_from_role_created_once(world: Any) -> None:
    seed_al2023(world)
    nc = node_class()
    r1 = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version=K8S)
    r2 = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version=K8S)
    assert r1.instance_profile == r2.instance_profile == instance_profile_name(CLUSTER, "default")
    profile = world.iam.get_instance_profile(InstanceProfileName=r1.instance_profile)["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == ["KarpenterNodeRole-demo"]
    assert len(world.iam.list_instance_profiles()["InstanceProfiles"]) == 1
    assert instance_profile_name(CLUSTER, "other") != r1.instance_profile
    assert r1.status["instanceProfile"] == r1.instance_profile


def test_instance_profile_role_change_replaces_role(world: Any) -> None:
    seed_al2023(world)
    resolve_node_class(world.ec2, world.ssm, world.iam, node_class(), CLUSTER, kubernetes_version=K8S)
    world.iam.create_role(RoleName="Other", AssumeRolePolicyDocument="{}")
    r = resolve_node_class(world.ec2, world.ssm, world.iam, node_class(role="Other"), CLUSTER, kubernetes_version=K8S)
    profile = world.iam.get_instance_profile(InstanceProfileName=r.instance_profile)["InstanceProfile"]
    assert [x["RoleName"] for x in profile["Roles"]] == ["Other"]


def test_given_instance_profile_is_used_as_is(world: Any) -> None:
    seed_al2023(world)
    nc = node_class(role=None, instanceProfile="MyProfile")
    r = resolve_node_class(world.ec2, world.ssm, world.iam, nc, CLUSTER, kubernetes_version=K8S)
    assert r.instance_profile == "MyProfile"
    assert world.iam.list_instance_profiles()["InstanceProfiles"] == []


def test_status_shape(world: Any) -> None:
    seed_al2023(world)
    r = resolve_node_class(world.ec2, world.ssm, world.iam, node_class(), CLUSTER, kubernetes_version=K8S)
    status = r.status
    assert set(status) == {"subnets", "securityGroups", "amis", "instanceProfile"}
    assert set(status["subnets"][0]) == {"id", "zone", "zoneID"}
    assert status["securityGroups"] == [{"id": world.sg_tagged, "name": "nodes"}]
    # round-trips through the EC2NodeClass status model
    from nodeflow.api.karpenter_ec2 import EC2NodeClassStatus

    parsed = EC2NodeClassStatus.model_validate(status)
    assert parsed.instance_profile == r.instance_profile
    assert len(parsed.amis or []) == 2
