"""Launch-step choices: pods asking for vpc.amazonaws.com/efa keep the instance types with the EFA
interface count of the cheapest one (one launch template attaches one count) and attach that many EFA
interfaces; CreateFleet's Context is the EC2NodeClass's spec.context unless minValues were relaxed; IPv6
clusters are recognised by their IP family or cluster DNS address."""

from __future__ import annotations

from typing import Any

from nodeflow.api.karpenter import NodeClaim
from nodeflow.catalog.instancetypes import NodeClassSettings, resolve_instance_type
from nodeflow.catalog.model import InstanceType
from nodeflow.catalog.offline import load_offline
from nodeflow.lifecycle.launch import _efa_group


def _claim(requests: dict[str, Any] | None) -> NodeClaim:
    spec: dict[str, Any] = {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [],
    }
    if requests is not None:
        spec["resources"] = {"requests": requests}
    return NodeClaim.model_validate({"metadata": {"name": "default-abcde"}, "spec": spec})


def _types(*names: str) -> list[InstanceType]:
    data = load_offline("us-east-1")
    out = []
    for name in names:
        it = resolve_instance_type(data, name, NodeClassSettings())
        assert it is not None
        out.append(it)
    return out


def test_efa_request_keeps_the_cheapest_types_count() -> None:
    types = _types("c5n.18xlarge", "c6in.32xlarge", "c5n.9xlarge")  # 1, 2 and 1 EFA interfaces
    group, count = _efa_group(_claim({"cpu": "1", "vpc.amazonaws.com/efa": "1"}), types)
    assert [it.name for it in group] == ["c5n.18xlarge", "c5n.9xlarge"]
    assert count == 1
    group, count = _efa_group(_claim({"vpc.amazonaws.com/efa": "2"}), list(reversed(types))[1:])
    assert [it.name for it in group] == ["c6in.32xlarge"]
    assert count == 2


def test_no_efa_request_keeps_every_type_without_interfaces() -> None:
    types = _types("c5n.18xlarge", "c6in.32xlarge", "m5.large")
    for requests in (None, {"cpu": "1"}, {"vpc.amazonaws.com/efa": "0"}):
        group, count = _efa_group(_claim(requests), types)
        assert [it.name for it in group] == ["c5n.18xlarge", "c6in.32xlarge", "m5.large"]
        assert count == 0


def test_fleet_context_is_the_node_class_context_unless_min_values_were_relaxed() -> None:
    from nodeflow.api.karpenter import EC2NodeClass
    from nodeflow.lifecycle.launch import _fleet_context

    nc = EC2NodeClass.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {
                "role": "r",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"id": "subnet-0123"}],
                "securityGroupSelectorTerms": [{"id": "sg-0123"}],
                "context": "ctx-1",
            },
        }
    )
    claim = _claim(None)
    assert _fleet_context(claim, nc) == "ctx-1"
    relaxed = claim.model_copy(
        update={
            "metadata": claim.metadata.model_copy(
                update={"annotations": {"karpenter.sh/nodeclaim-min-values-relaxed": "true"}}
            )
        }
    )
    assert _fleet_context(relaxed, nc) is None


def test_ipv6_cluster_from_its_ip_family_or_dns_address() -> None:
    from nodeflow.aws.userdata import ClusterInfo
    from nodeflow.lifecycle.launch import _is_ipv6_cluster

    base = ClusterInfo(name="demo", endpoint="https://example", ca_bundle="")
    assert not _is_ipv6_cluster(base)
    assert not _is_ipv6_cluster(
        ClusterInfo(name="demo", endpoint="https://example", ca_bundle="", dns_ip="10.100.0.10")
    )
    assert _is_ipv6_cluster(ClusterInfo(name="demo", endpoint="https://example", ca_bundle="", dns_ip="fd00::a"))
    assert _is_ipv6_cluster(ClusterInfo(name="demo", endpoint="https://example", ca_bundle="", ip_family="ipv6"))
    assert not _is_ipv6_cluster(ClusterInfo(name="demo", endpoint="https://example", ca_bundle="", dns_ip="bad"))
