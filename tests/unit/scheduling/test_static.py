"""Static NodePools (spec.replicas) in the plan: the NodeClaims a pool still needs, with no pods; counting as
Karpenter's NodePool state (active / deleting / pending disruption), limits.nodes, and the solver never opening
a static pool's NodeClaim for pending pods (its existing nodes still take them)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.api.core import Node, Pod
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.catalog.instancetypes import resolve_instance_types
from nodeflow.catalog.model import CatalogData
from nodeflow.catalog.offline import load_offline
from nodeflow.cluster import ClusterState
from nodeflow.plan import STATIC_REASON, build_input, node_class_settings, plan, plan_warnings
from nodeflow.scheduling.static_capacity import missing, node_limit, static_counts

REQS = [
    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
    {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["5"]},
    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
]


@pytest.fixture(scope="module")
def catalog() -> CatalogData:
    return load_offline("us-east-1")


def pool(name: str = "fixed", replicas: int | None = 3, **spec: Any) -> NodePool:
    body: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "requirements": REQS,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        },
        **spec,
    }
    if replicas is not None:
        body["replicas"] = replicas
    return NodePool.model_validate({"metadata": {"name": name}, "spec": body})


NODE_CLASS = EC2NodeClass.model_validate(
    {
        "metadata": {"name": "default"},
        "spec": {
            "role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
        },
    }
)


def claim(name: str, pool_name: str = "fixed", *, deleting: bool = False, node: str | None = None) -> NodeClaim:
    meta: dict[str, Any] = {"name": name, "labels": {"karpenter.sh/nodepool": pool_name}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-25T00:00:00Z"
        meta["finalizers"] = ["karpenter.sh/termination"]
    status = {"nodeName": node, "providerID": f"aws:///us-east-1a/i-{name}"} if node else {}
    return NodeClaim.model_validate(
        {
            "metadata": meta,
            "spec": {
                "requirements": REQS,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
            "status": status,
        }
    )


def node(name: str, pool_name: str = "fixed", *, disrupted: bool = False, cpu: str = "2") -> Node:
    taints = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}] if disrupted else []
    return Node.model_validate(
        {
            "metadata": {
                "name": name,
                "labels": {
                    "karpenter.sh/nodepool": pool_name,
                    "karpenter.sh/initialized": "true",
                    "node.kubernetes.io/instance-type": "m6i.large",
                    "topology.kubernetes.io/zone": "us-east-1a",
                    "kubernetes.io/arch": "amd64",
                    "team": "a",
                },
            },
            "spec": {"providerID": f"aws:///us-east-1a/i-c-{name}", "taints": taints},
            "status": {"allocatable": {"cpu": cpu, "memory": "7Gi", "pods": "29"}},
        }
    )


def pending(name: str, cpu: str = "500m", selector: dict[str, str] | None = None) -> Pod:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}
    if selector:
        spec["nodeSelector"] = selector
    return Pod.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        }
    )


def state(
    *pools: NodePool, claims: tuple[NodeClaim, ...] = (), nodes: tuple[Node, ...] = (), pods: tuple[Pod, ...] = ()
) -> ClusterState:
    return ClusterState(node_pools=pools, node_classes=(NODE_CLASS,), node_claims=claims, nodes=nodes, pods=pods)


def test_a_static_pool_gets_its_replicas_without_pods(catalog: CatalogData) -> None:
    s = state(pool(replicas=3))
    result = plan(s, catalog)
    assert len(result.node_claims) == 3
    assert not result.unschedulable
    assert not result.existing
    # the cheapest offering the pool's requirements allow (GPU and metal types aside): no capacity-type
    # requirement allows spot and on-demand, as Karpenter
    priced = sorted(
        (min(o.price for o in it.offerings if o.available and o.capacity_type != "reserved"), it.name)
        for it in resolve_instance_types(catalog, node_class_settings(NODE_CLASS))
        if generic_match(it) and any(o.available for o in it.offerings)
    )
    for nc in result.node_claims:
        assert nc.static
        assert nc.pods == ()
        assert dict(nc.requests) == {}
        assert (nc.price, nc.instance_types[0]) == priced[0]
        assert list(nc.instance_types) == [name for _, name in priced[:60]]
        assert nc.capacity_type == "spot"  # the cheapest type's cheapest offering
        assert nc.requirements["karpenter.sh/capacity-type"].values == {"spot", "on-demand"}
        body = nc.to_json()
        assert body["static"] is True
        assert body["nodePool"] == "fixed"
        assert body["pods"] == []
        assert body["labels"]["team"] == "a"
        assert body["labels"]["karpenter.sh/nodepool"] == "fixed"
    inp = build_input(s, catalog)
    assert inp.nodepools == ()  # the solver is not given the static pool
    assert not any("nothing to plan" in w for w in plan_warnings(s, inp, "us-east-1"))


def generic_match(it: Any) -> bool:
    labels = it.labels
    return (
        labels.get("karpenter.k8s.aws/instance-category") in ("c", "m")
        and int(labels.get("karpenter.k8s.aws/instance-generation", "0")) > 5
        and labels.get("kubernetes.io/arch") == "amd64"
        and "metal" not in labels.get("karpenter.k8s.aws/instance-size", "")
        and not it.capacity.get("nvidia.com/gpu")
    )


def test_dynamic_pools_get_no_static_claims_and_keep_their_json(catalog: CatalogData) -> None:
    result = plan(state(pool(replicas=None), pods=(pending("p"),)), catalog)
    assert len(result.node_claims) == 1
    assert not result.node_claims[0].static
    assert "static" not in result.node_claims[0].to_json()


def test_replicas_zero_needs_nothing(catalog: CatalogData) -> None:
    assert plan(state(pool(replicas=0)), catalog).node_claims == ()


def test_existing_claims_count_and_deleting_ones_are_replaced(catalog: CatalogData) -> None:
    claims = (claim("a", node="n-a"), claim("b"), claim("gone", deleting=True, node="n-gone"))
    nodes = (node("n-a"), node("n-gone"))
    # active: a (registered) and b (launching); deleting: gone -> 3 - 2 = 1 more
    result = plan(state(pool(replicas=3), claims=claims, nodes=nodes), catalog)
    assert [nc.static for nc in result.node_claims] == [True]
    # another pool's NodeClaims do not count
    other = (claim("x", pool_name="other"), claim("y", pool_name="other"))
    assert len(plan(state(pool(replicas=2), claims=other), catalog).node_claims) == 2


def test_limits_nodes_caps_with_every_claim_of_the_pool_counted(catalog: CatalogData) -> None:
    claims = (claim("a", node="n-a"), claim("gone", deleting=True, node="n-gone"))
    nodes = (node("n-a"), node("n-gone"))
    capped = pool(replicas=5, limits={"nodes": "3"})
    result = plan(state(capped, claims=claims, nodes=nodes), catalog)
    assert len(result.node_claims) == 1  # 3 - (1 active + 1 deleting)
    full = pool(replicas=5, limits={"nodes": "2"})
    s = state(full, claims=claims, nodes=nodes)
    assert plan(s, catalog).node_claims == ()
    warnings = plan_warnings(s, build_input(s, catalog), "us-east-1")
    assert any("static NodePool 'fixed'" in w and "limits.nodes=2" in w for w in warnings)


def test_pending_disruption_counts_towards_replicas_but_not_as_active() -> None:
    claims = (claim("a", node="n-a"), claim("b", node="n-b"), claim("c", node="n-c", deleting=True))
    nodes = (node("n-a"), node("n-b", disrupted=True), node("n-c"))
    count = static_counts("fixed", claims, nodes)
    assert (count.active, count.pending_disruption, count.deleting) == (("a",), ("b",), ("c",))
    assert missing(pool(replicas=2), count) == 0  # 1 active + 1 pending disruption
    assert missing(pool(replicas=3), count) == 2  # replicas - active (Karpenter's count)
    assert missing(pool(replicas=3, limits={"nodes": "4"}), count) == 1  # 4 - 3 NodeClaims
    assert missing(pool(replicas=3, limits={"nodes": "3"}), count) == 0
    assert missing(pool(replicas=None), count) == 0
    assert node_limit(pool(limits={"nodes": "2500m"})) == 3
    assert node_limit(pool()) is None


def test_pending_pods_use_existing_static_nodes_but_never_open_new_ones(catalog: CatalogData) -> None:
    claims = (claim("a", node="n-a"),)
    nodes = (node("n-a", cpu="2"),)
    pods = (pending("fits", cpu="500m"), pending("big", cpu="4"))
    result = plan(state(pool(replicas=1), claims=claims, nodes=nodes, pods=pods), catalog)
    assert [(e.name, e.pods) for e in result.existing] == [("n-a", ("default/fits",))]
    assert [u.pod for u in result.unschedulable] == ["default/big"]
    assert dict(result.unschedulable[0].reasons) == {"fixed": STATIC_REASON}  # not "no NodePool is defined"
    assert result.node_claims == ()  # the static pool has its replica; no NodeClaim for "big"
    # with a dynamic pool next to it, "big" gets a dynamic NodeClaim and the static pool none
    result = plan(state(pool(replicas=1), pool("dyn", replicas=None), claims=claims, nodes=nodes, pods=pods), catalog)
    assert [(nc.nodepool, nc.static, nc.pods) for nc in result.node_claims] == [("dyn", False, ("default/big",))]


def test_a_static_pool_whose_class_is_missing_gets_a_warning_not_claims(catalog: CatalogData) -> None:
    s = ClusterState(node_pools=(pool(replicas=2),), node_classes=())
    inp = build_input(s, catalog)
    assert inp.static_claims == ()
    assert any(
        "static NodePool 'fixed' needs 2 NodeClaim(s)" in w and "not found" in w for w in plan_warnings(s, inp, "x")
    )


def family_pool(*families: str) -> NodePool:
    return NodePool.model_validate(
        {
            "metadata": {"name": "gpu"},
            "spec": {
                "replicas": 1,
                "template": {
                    "spec": {
                        "requirements": [
                            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": list(families)}
                        ],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    }
                },
            },
        }
    )


def test_exotic_types_only_when_nothing_else_fits(catalog: CatalogData) -> None:
    (nc,) = plan(state(family_pool("g5", "m6i")), catalog).node_claims
    assert nc.instance_types
    assert all(t.startswith("m6i.") and "metal" not in t for t in nc.instance_types)
    (nc,) = plan(state(family_pool("g5")), catalog).node_claims
    assert nc.instance_types[0] == "g5.xlarge"
