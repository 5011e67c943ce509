"""The solver honours NodeflowPolicies (plan / build_input with policies as input data): NodePool and extended-
resource access per namespace, provisioning pauses at a given time, $/hour ceilings (NodePool, namespace, cluster;
NodeClaims trimmed to what is left) and limits across a group of NodePools. New capacity only: existing nodes stay
usable."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeflow.api.core import Namespace, Node, Pod
from nodeflow.api.karpenter import EC2NodeClass, NodePool
from nodeflow.api.nodeflow_policy import NodeflowPolicy
from nodeflow.catalog.model import CatalogData
from nodeflow.catalog.offline import load_offline
from nodeflow.cluster import ClusterState
from nodeflow.plan import build_input, plan, plan_warnings
from nodeflow.scheduling.solver import explain
from nodeflow.scheduling.types import SchedulingResult

NODE_CLASS = EC2NodeClass.model_validate(
    {
        "metadata": {"name": "default"},
        "spec": {
            "role": "R",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
        },
    }
)
FRIDAY_NIGHT = datetime(2026, 11, 27, 20, 0, tzinfo=UTC)  # inside "0 18 * * 5" for 60h
TUESDAY = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def catalog() -> CatalogData:
    return load_offline("us-east-1")


def pool(name: str, family: str = "m6i", weight: int = 0, **spec: Any) -> NodePool:
    return NodePool.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                **({"weight": weight} if weight else {}),
                "template": {
                    "spec": {
                        "requirements": [
                            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": [family]},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        ],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    }
                },
                **spec,
            },
        }
    )


def namespace(name: str, **labels: str) -> Namespace:
    return Namespace.model_validate({"metadata": {"name": name, "labels": labels}})


def pending(name: str, ns: str = "default", cpu: str = "1", **extra: str) -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi", **extra}}}]},
            "status": {"phase": "Pending"},
        }
    )


def node(name: str, pool_name: str, it: str = "m6i.xlarge", cpu: str = "4") -> Node:
    return Node.model_validate(
        {
            "metadata": {
                "name": name,
                "labels": {
                    "karpenter.sh/nodepool": pool_name,
                    "karpenter.sh/initialized": "true",
                    "karpenter.sh/capacity-type": "on-demand",
                    "node.kubernetes.io/instance-type": it,
                    "topology.kubernetes.io/zone": "us-east-1a",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/os": "linux",
                },
            },
            "spec": {"providerID": f"aws:///us-east-1a/i-{name}"},
            "status": {"allocatable": {"cpu": cpu, "memory": "15Gi", "pods": "58"}},
        }
    )


def policy(name: str, **spec: Any) -> NodeflowPolicy:
    return NodeflowPolicy.model_validate(
        {"apiVersion": "nodeflow.io/v1alpha1", "kind": "NodeflowPolicy", "metadata": {"name": name}, "spec": spec}
    )


def state(*pools: NodePool, policies: tuple[NodeflowPolicy, ...] = (), **objects: Any) -> ClusterState:
    return ClusterState(node_pools=pools, node_classes=(NODE_CLASS,), policies=policies, **objects)


def where(result: SchedulingResult) -> dict[str, str]:
    """pod -> NodePool of its new NodeClaim (or the existing node's name)."""
    out = {p: nc.nodepool for nc in result.node_claims for p in nc.pods}
    out.update({p: e.name for e in result.existing for p in e.pods})
    return out


def reasons(result: SchedulingResult) -> dict[str, dict[str, str]]:
    return {u.pod: dict(u.reasons) for u in result.unschedulable}


GPU_ACCESS = policy(
    "gpu-access",
    nodePoolAccess=[
        {"nodePools": ["gpu"], "namespaces": ["ml-prod"], "namespaceSelector": {"matchLabels": {"team": "ml"}}}
    ],
)
NAMESPACES = (namespace("ml-prod"), namespace("ml-lab", team="ml"), namespace("ml-exp", team="research"))


# -- access ---------------------------------------------------------------------------------------------------


def test_pool_access_by_name_and_selector_and_the_denied_fall_through(catalog: CatalogData) -> None:
    pods = (pending("a", "ml-prod"), pending("b", "ml-lab"), pending("c", "ml-exp"))
    s = state(pool("gpu", weight=10), pool("general"), policies=(GPU_ACCESS,), namespaces=NAMESPACES, pods=pods)
    result = plan(s, catalog, now=TUESDAY)
    assert where(result) == {"ml-prod/a": "gpu", "ml-lab/b": "gpu", "ml-exp/c": "general"}
    # no other NodePool: the denial is the reason, where other per-NodePool reasons are
    alone = plan(state(pool("gpu"), policies=(GPU_ACCESS,), namespaces=NAMESPACES, pods=pods), catalog)
    assert reasons(alone) == {"ml-exp/c": {"gpu": "namespace ml-exp may not use NodePool gpu: policy gpu-access"}}
    assert [p for nc in alone.node_claims for p in nc.pods] == ["ml-lab/b", "ml-prod/a"]


def test_a_denied_pod_does_not_join_a_new_nodeclaim_of_the_pool_either(catalog: CatalogData) -> None:
    # ml-prod/a (placed first: larger) opens an m6i.large with room left; ml-exp/c would fit on it
    pods = (pending("a", "ml-prod", cpu="1"), pending("c", "ml-exp", cpu="500m"))
    result = plan(state(pool("gpu"), policies=(GPU_ACCESS,), namespaces=NAMESPACES, pods=pods), catalog)
    assert where(result) == {"ml-prod/a": "gpu"}
    assert reasons(result) == {"ml-exp/c": {"gpu": "namespace ml-exp may not use NodePool gpu: policy gpu-access"}}


def test_several_policies_combine_as_the_most_restrictive(catalog: CatalogData) -> None:
    only_prod = policy("prod-only", nodePoolAccess=[{"nodePools": ["gpu"], "namespaces": ["ml-prod"]}])
    pods = (pending("a", "ml-prod"), pending("b", "ml-lab"))
    result = plan(state(pool("gpu"), policies=(GPU_ACCESS, only_prod), namespaces=NAMESPACES, pods=pods), catalog)
    assert where(result) == {"ml-prod/a": "gpu"}
    assert reasons(result) == {"ml-lab/b": {"gpu": "namespace ml-lab may not use NodePool gpu: policy prod-only"}}


def test_resource_access_denies_every_pool_but_not_existing_nodes(catalog: CatalogData) -> None:
    gpus = policy(
        "gpus",
        resourceAccess=[{"resources": ["example.com/fpga"], "namespaceSelector": {"matchLabels": {"team": "ml"}}}],
    )
    fpga_node = node("fpga-1", "general").model_copy(deep=True)
    fpga_node.status.allocatable["example.com/fpga"] = "1"
    pods = (pending("x", "ml-exp", **{"example.com/fpga": "1"}), pending("y", "ml-exp", **{"example.com/fpga": "1"}))
    s = state(pool("general"), pool("other"), policies=(gpus,), namespaces=NAMESPACES, pods=pods, nodes=(fpga_node,))
    result = plan(s, catalog)
    assert where(result) == {"ml-exp/x": "fpga-1"}  # the existing node still takes one
    why = "namespace ml-exp may not request example.com/fpga: policy gpus"
    assert reasons(result) == {"ml-exp/y": {"general": why, "other": why}}


# -- pauses ---------------------------------------------------------------------------------------------------

FREEZE = policy(
    "freeze",
    pauses=[
        {"name": "quarter-end", "schedule": "0 18 * * 5", "duration": "60h", "provisioning": True, "nodePools": ["gpu"]}
    ],
)


def test_provisioning_pause_only_while_its_window_is_open(catalog: CatalogData) -> None:
    s = state(pool("gpu", weight=10), pool("general"), policies=(FREEZE,), pods=(pending("p"),))
    assert where(plan(s, catalog, now=TUESDAY)) == {"default/p": "gpu"}
    assert where(plan(s, catalog)) == {"default/p": "gpu"}  # no time given: no window is open
    assert where(plan(s, catalog, now=FRIDAY_NIGHT)) == {"default/p": "general"}
    alone = plan(state(pool("gpu"), policies=(FREEZE,), pods=(pending("p"),)), catalog, now=FRIDAY_NIGHT)
    assert reasons(alone)["default/p"]["gpu"] == (
        "provisioning paused for NodePool gpu by policy freeze: window quarter-end (0 18 * * 5 for 60h) "
        "until 2026-11-30T06:00:00Z"
    )


def test_a_pause_stops_static_top_ups_and_says_why(catalog: CatalogData) -> None:
    s = state(pool("gpu", replicas=2), policies=(FREEZE,))
    assert len(plan(s, catalog, now=TUESDAY).node_claims) == 2
    inp = build_input(s, catalog, now=FRIDAY_NIGHT)
    assert inp.static_claims == ()
    assert inp.static_problems == (
        "static NodePool 'gpu' needs 2 NodeClaim(s) but none can be made: provisioning paused for NodePool gpu by "
        "policy freeze: window quarter-end (0 18 * * 5 for 60h) until 2026-11-30T06:00:00Z",
    )


# -- ceilings -------------------------------------------------------------------------------------------------


def caps(**ceilings: Any) -> NodeflowPolicy:
    return policy("cost-caps", costCeilings=ceilings)


def test_pool_ceiling_counts_existing_nodes_and_sends_pods_to_the_next_pool(catalog: CatalogData) -> None:
    # gpu already runs an m6i.xlarge ($0.192); its ceiling leaves $0.10: an m6i.large ($0.096) fits, no more
    ceiling = caps(nodePools=[{"name": "gpu", "maxPricePerHour": "0.292"}])
    full = node("n1", "gpu", cpu="0")  # no room: the pods need new capacity
    pods = (pending("a", cpu="1.5"), pending("b", cpu="1.5", memory="2Gi"))  # one m6i.large each
    s = state(pool("gpu", weight=10), pool("general"), policies=(ceiling,), pods=pods, nodes=(full,))
    result = plan(s, catalog)
    by_pool = sorted((nc.nodepool, nc.instance_types[0]) for nc in result.node_claims)
    assert by_pool == [("general", "m6i.large"), ("gpu", "m6i.large")]
    _, why = explain(build_input(s, catalog), "default/a")  # placed in general: gpu's ceiling said no
    assert why.per_pool["gpu"].startswith("NodeClaim of NodePool gpu ($0.0960/hour) would cross the $/hour ceiling")
    (gpu_claim,) = [nc for nc in result.node_claims if nc.nodepool == "gpu"]
    # trimmed: every instance type it may launch as stays within what was left
    assert max(catalog.on_demand_prices[t] for t in gpu_claim.instance_types) <= 0.10 + 1e-9
    alone = plan(state(pool("gpu"), policies=(ceiling,), pods=(pending("big", cpu="6"),), nodes=(full,)), catalog)
    assert reasons(alone) == {
        "default/big": {
            "gpu": "NodeClaim of NodePool gpu ($0.3840/hour) would cross the $/hour ceiling of NodePool gpu "
            "($0.29/hour, $0.19 in use): policy cost-caps"
        }
    }


def test_namespace_and_cluster_ceilings(catalog: CatalogData) -> None:
    pods = (*tuple(pending(f"p{i}", "ml-exp", cpu="3") for i in range(3)), pending("w", "shop", cpu="3"))
    # each pod needs an m6i.xlarge ($0.192): ml-exp may spend $0.40 -> two of its three pods, shop is not capped
    s = state(pool("general"), policies=(caps(namespaces=[{"name": "ml-exp", "maxPricePerHour": "0.40"}]),), pods=pods)
    result = plan(s, catalog)
    assert sorted(where(result)) == ["ml-exp/p0", "ml-exp/p1", "shop/w"]
    (why,) = reasons(result)["ml-exp/p2"].values()
    assert why == (
        "NodeClaim of NodePool general ($0.1920/hour) would cross the $/hour ceiling of namespace ml-exp "
        "($0.40/hour, $0.38 in use): policy cost-caps"
    )
    # the cluster ceiling counts every node: $0.192 in use leaves room for two more
    cluster = state(
        pool("general"),
        policies=(caps(cluster={"maxPricePerHour": "0.6"}),),
        pods=pods,
        nodes=(node("n", "x", cpu="0"),),
    )
    result = plan(cluster, catalog)
    assert 0 < result.total_price <= 0.6 - 0.192 + 1e-9
    assert {why for u in result.unschedulable for why in u.reasons.values()} == {
        f"NodeClaim of NodePool general ($0.1920/hour) would cross the $/hour ceiling of the cluster ($0.60/hour, "
        f"${0.192 + result.total_price:.2f} in use): policy cost-caps"
    }


def test_joining_a_nodeclaim_counts_the_namespace_share(catalog: CatalogData) -> None:
    # ml-exp/big opens an m6i.large ($0.096) with room; shop/small joining it would take a third of its price
    # ($0.032) to shop, over shop's $0.02: it may neither join nor open its own
    pods = (pending("big", "ml-exp", cpu="1"), pending("small", "shop", cpu="500m"))
    shop = caps(namespaces=[{"name": "shop", "maxPricePerHour": "0.02"}])
    result = plan(state(pool("general"), policies=(shop,), pods=pods), catalog)
    assert where(result) == {"ml-exp/big": "general"}
    assert set(reasons(result)) == {"shop/small"}
    loose = caps(namespaces=[{"name": "shop", "maxPricePerHour": "0.04"}])
    assert where(plan(state(pool("general"), policies=(loose,), pods=pods), catalog)) == {
        "ml-exp/big": "general",
        "shop/small": "general",
    }
    (claim,) = plan(state(pool("general"), policies=(loose,), pods=pods), catalog).node_claims
    assert claim.pods == ("ml-exp/big", "shop/small")


def test_no_policy_and_a_loose_ceiling_plan_alike(catalog: CatalogData) -> None:
    pods = tuple(pending(f"p{i}", cpu="500m") for i in range(7))
    free = plan(state(pool("general"), pods=pods), catalog)
    loose = plan(state(pool("general"), policies=(caps(cluster={"maxPricePerHour": "1000"}),), pods=pods), catalog)
    assert loose.to_json()["nodeClaims"] == free.to_json()["nodeClaims"]


def test_policies_that_bind_nothing_leave_the_plan_as_it_is_without_them(catalog: CatalogData) -> None:
    """A roomy namespace ceiling, cluster ceiling and group limit: the plan is the one without policies (bound to
    them, the solver split the pods by namespace and left the merge and re-packing passes out: 5 nodes, $0.389/hour
    instead of 1 node, $0.308/hour)."""
    general = NodePool.model_validate(
        {
            "metadata": {"name": "general"},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["m", "c", "r"]},
                        ],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    }
                }
            },
        }
    )
    pods = (
        *(pending(f"a{i}", "team-a", cpu="1500m") for i in range(3)),
        *(pending(f"b{i}", "team-b", cpu="250m", memory="6Gi") for i in range(3)),
        *(pending(f"c{i}", "team-a", cpu="700m", memory="700Mi") for i in range(2)),
    )
    roomy = policy(
        "caps",
        costCeilings={
            "namespaces": [{"name": "team-a", "maxPricePerHour": "1000"}],
            "cluster": {"maxPricePerHour": "1000"},
        },
        limits=[{"name": "g", "nodePools": ["general"], "resources": {"cpu": "1000"}}],
    )
    free = plan(state(general, pods=pods), catalog)
    governed = plan(state(general, policies=(roomy,), pods=pods), catalog)
    assert len(free.node_claims) == 1
    assert governed.to_json() == free.to_json()


def test_a_ceiling_binding_only_once_another_binds_is_found(catalog: CatalogData) -> None:
    """Without ceilings all three pods go to the weighted NodePool a, crossing a's ceiling; bound to a's, two go to
    b, crossing b's: the solver binds both (one pod in each, the third unschedulable naming b's ceiling)."""
    one_each = caps(
        nodePools=[{"name": "a", "maxPricePerHour": "0.2"}, {"name": "b", "maxPricePerHour": "0.2"}],
    )
    pods = tuple(pending(f"p{i}", cpu="3") for i in range(3))  # an m6i.xlarge ($0.192) each
    result = plan(state(pool("a", weight=10), pool("b"), policies=(one_each,), pods=pods), catalog)
    assert sorted(nc.nodepool for nc in result.node_claims) == ["a", "b"]
    ((_, why),) = [(u.pod, u.reasons["b"]) for u in result.unschedulable]
    assert "would cross the $/hour ceiling of NodePool b" in why, why


# -- group limits ---------------------------------------------------------------------------------------------


def test_group_limit_is_shared_by_its_pools(catalog: CatalogData) -> None:
    group = policy("batch", limits=[{"name": "batch-group", "nodePools": ["a", "b"], "resources": {"cpu": "8"}}])
    existing = node("n1", "a", cpu="0")  # 4 CPUs of capacity in use in the group (allocatable 0: no room)
    existing = existing.model_copy(update={"status": existing.status.model_copy(update={"capacity": {"cpu": "4"}})})
    pods = (pending("p", cpu="3"), pending("q", cpu="3"))
    s = state(pool("a", weight=10), pool("b", weight=5), pool("c"), policies=(group,), pods=pods, nodes=(existing,))
    result = plan(s, catalog)
    # one m6i.xlarge (4 CPUs) fits under the group's 8; the second pod goes to c, outside the group
    assert sorted(nc.nodepool for nc in result.node_claims) == ["a", "c"]
    only_group = plan(state(pool("a"), pool("b"), policies=(group,), pods=pods, nodes=(existing,)), catalog)
    (left,) = list(only_group.unschedulable)
    assert left.reasons["b"] == (
        "exceeds limit cpu=8 of NodePool group batch-group (a, b): 0 remaining, the smallest fitting instance type "
        "m6i.xlarge has 4: policy batch"
    )


def test_plan_warns_of_a_policy_naming_an_unknown_pool(catalog: CatalogData) -> None:
    s = state(pool("general"), policies=(GPU_ACCESS,))
    assert plan_warnings(s, build_input(s, catalog), "us-east-1")[-1] == (
        "NodeflowPolicy 'gpu-access' names NodePool 'gpu' (nodePoolAccess), which does not exist"
    )


# -- growing an open NodeClaim (packing.grow_claims) under ceilings and group limits ----------------------------


def mixed(name: str, **spec: Any) -> NodePool:
    """A NodePool of c6i, m6i and r6i: a small pod with much memory grows a c6i NodeClaim to an m6i."""
    doc = pool(name, **spec).model_dump(by_alias=True, exclude_none=True)
    doc["spec"]["template"]["spec"]["requirements"][0]["values"] = ["c6i", "m6i", "r6i"]
    return NodePool.model_validate(doc)


# z/c opens a c6i.xlarge ($0.17), x/a0..a4 a c6i.xlarge with 3 and one with 2 pods (room left: a tail);
# y/b (10Gi) then grows the tail to an m6i.xlarge (+$0.022) rather than opening an r6i.large ($0.126).
GROWERS = (
    *(pending(f"a{i}", "x", cpu="1") for i in range(5)),
    pending("c", "z", cpu="3400m"),
    pending("b", "y", cpu="250m", memory="10Gi"),
)


def test_growing_a_nodeclaim_counts_against_the_cluster_ceiling(catalog: CatalogData) -> None:
    # w/d may not use g: it opens a c6i.large ($0.085) in other after the tail was opened, leaving less than the
    # growth's +$0.022 under a $0.61 ceiling (the tail may still launch as an m6i.xlarge: it was trimmed at $0.27)
    access = policy("g-access", nodePoolAccess=[{"nodePools": ["g"], "namespaces": ["x", "y", "z"]}])
    pods = (*GROWERS, pending("d", "w", cpu="500m"))
    tight = plan(
        state(
            mixed("g", weight=10),
            mixed("other"),
            policies=(access, caps(cluster={"maxPricePerHour": "0.61"})),
            pods=pods,
        ),
        catalog,
    )
    assert tight.total_price == pytest.approx(0.595)
    assert "y/b" not in where(tight)
    why = "would cross the $/hour ceiling of the cluster ($0.61/hour, $0.60 in use): policy cost-caps"
    assert reasons(tight) == {
        "y/b": {
            "g": f"NodeClaim of NodePool g ($0.1260/hour) {why}",
            "other": f"NodeClaim of NodePool other ($0.1260/hour) {why}",
        }
    }
    roomy = plan(
        state(
            mixed("g", weight=10),
            mixed("other"),
            policies=(access, caps(cluster={"maxPricePerHour": "0.62"})),
            pods=pods,
        ),
        catalog,
    )
    assert roomy.unschedulable == ()
    (grown,) = [nc for nc in roomy.node_claims if "y/b" in nc.pods]
    assert grown.pods == ("x/a3", "x/a4", "y/b")
    assert grown.instance_types[0] == "m6i.xlarge"
    assert roomy.total_price == pytest.approx(0.617)


def test_growing_a_nodeclaim_counts_the_joining_namespace_share(catalog: CatalogData) -> None:
    # y/b joining the grown m6i.xlarge ($0.192) takes 250m of its 2.25 CPUs requested: $0.0213 to y
    def run(y_max: str) -> SchedulingResult:
        return plan(
            state(mixed("g"), policies=(caps(namespaces=[{"name": "y", "maxPricePerHour": y_max}]),), pods=GROWERS),
            catalog,
        )

    tight = run("0.02")
    assert tight.total_price == pytest.approx(0.51)
    assert reasons(tight) == {
        "y/b": {
            "g": "NodeClaim of NodePool g ($0.1260/hour) would cross the $/hour ceiling of namespace y ($0.02/hour, "
            "$0.00 in use): policy cost-caps"
        }
    }
    roomy = run("0.03")
    assert roomy.unschedulable == ()
    assert [nc.pods for nc in roomy.node_claims if "y/b" in nc.pods] == [("x/a3", "x/a4", "y/b")]


def test_a_group_limit_keeps_a_nodeclaim_from_growing_past_it(catalog: CatalogData) -> None:
    def run(memory: str, *pools: NodePool) -> SchedulingResult:
        group = policy("batch", limits=[{"name": "bg", "nodePools": ["g"], "resources": {"memory": memory}}])
        return plan(state(*pools, policies=(group,), pods=GROWERS), catalog)

    def memory(result: SchedulingResult, nodepool: str) -> float:  # GiB the NodeClaims may launch with, at most
        return sum(
            max(catalog.infos[t].memory_mib for t in nc.instance_types) / 1024
            for nc in result.node_claims
            if nc.nodepool == nodepool
        )

    # 40Gi: three c6i.xlarge (8Gi each) charged; none of them may grow, y/b gets an r6i.large (16Gi) of its own
    roomy = run("40Gi", mixed("g"))
    assert roomy.unschedulable == ()
    assert [nc.instance_types[0] for nc in roomy.node_claims if "y/b" in nc.pods] == ["r6i.large"]
    assert memory(roomy, "g") <= 40
    # 20Gi: no room for y/b in g (it goes to a NodePool outside the group, or nowhere); the x pods all fit, packed
    # as Karpenter packs under a limit (one c6i.2xlarge for z/c and four of them, charged its largest type, then a
    # c6i.large: sized for cost, three NodeClaims left x/a4 pending too)
    tight = run("20Gi", mixed("g"))
    assert memory(tight, "g") <= 20
    assert reasons(tight) == {
        "y/b": {
            "g": "exceeds limit memory=20Gi of NodePool group bg (g): 1537Mi remaining, the smallest fitting "
            "instance type r6i.large has 15155Mi: policy batch"
        }
    }
    outside = run("20Gi", mixed("g", weight=10), mixed("other"))
    assert memory(outside, "g") <= 20
    assert where(outside)["y/b"] == "other"


# -- static NodePools' top-ups (spec.replicas) under ceilings and group limits ---------------------------------


def test_static_top_ups_stop_at_their_nodepools_ceiling(catalog: CatalogData) -> None:
    # three m6i.large ($0.096) wanted, $0.20 allowed: two, the second trimmed to what is left ($0.104)
    s = state(pool("gpu", replicas=3), policies=(caps(nodePools=[{"name": "gpu", "maxPricePerHour": "0.20"}]),))
    inp = build_input(s, catalog)
    assert [c.instance_types for c in inp.static_claims] == [("m6i.large", "m6i.xlarge"), ("m6i.large",)]
    assert inp.static_problems == (
        "static NodePool 'gpu' needs 3 NodeClaim(s) but only 2 can be made: NodeClaim of NodePool gpu ($0.0960/hour) "
        "would cross the $/hour ceiling of NodePool gpu ($0.20/hour, $0.19 in use): policy cost-caps",
    )
    assert len(plan(s, catalog).node_claims) == 2
    # a ceiling already reached: none
    spent = state(
        pool("gpu", replicas=1),
        policies=(caps(nodePools=[{"name": "gpu", "maxPricePerHour": "0.10"}]),),
        nodes=(node("n1", "gpu"),),
    )
    assert build_input(spent, catalog).static_problems == (
        "static NodePool 'gpu' needs 1 NodeClaim(s) but none can be made: NodeClaim of NodePool gpu ($0.0960/hour) "
        "would cross the $/hour ceiling of NodePool gpu ($0.10/hour, $0.19 in use): policy cost-caps",
    )


def test_static_top_ups_come_before_the_solvers_nodeclaims_under_the_cluster_ceiling(catalog: CatalogData) -> None:
    s = state(
        pool("standby", replicas=2),
        pool("general"),
        policies=(caps(cluster={"maxPricePerHour": "0.25"}),),
        pods=(pending("p"),),
    )
    result = plan(s, catalog)
    assert [(nc.nodepool, nc.static) for nc in result.node_claims] == [("standby", True), ("standby", True)]
    assert reasons(result)["default/p"]["general"] == (
        "NodeClaim of NodePool general ($0.0960/hour) would cross the $/hour ceiling of the cluster ($0.25/hour, "
        "$0.19 in use): policy cost-caps"
    )


def test_static_top_ups_count_against_a_group_limit(catalog: CatalogData) -> None:
    group = policy("batch", limits=[{"name": "bg", "nodePools": ["standby", "general"], "resources": {"nodes": "2"}}])
    s = state(
        pool("standby", replicas=2),
        pool("general"),
        policies=(group,),
        pods=(pending("p"),),
        nodes=(node("n1", "general", cpu="0"),),
    )
    result = plan(s, catalog)
    assert [nc.nodepool for nc in result.node_claims] == ["standby"]
    why = (
        "exceeds limit nodes=2 of NodePool group bg (general, standby): 0 remaining, the smallest fitting instance "
        "type m6i.large has 1: policy batch"
    )
    assert build_input(s, catalog).static_problems == (
        f"static NodePool 'standby' needs 2 NodeClaim(s) but only 1 can be made: {why}",
    )
    assert reasons(result)["default/p"]["general"] == why
    # a loose ceiling changes nothing
    assert plan(dataclasses.replace(s, policies=(caps(cluster={"maxPricePerHour": "100"}),)), catalog).to_json() == (
        plan(dataclasses.replace(s, policies=()), catalog).to_json()
    )


# -- "*": every NodePool (access, pauses, group limits), as "*" in namespaces is every namespace ---------------


def only(name: str, *rules: tuple[list[str], list[str]]) -> NodeflowPolicy:
    return policy(name, nodePoolAccess=[{"nodePools": pools, "namespaces": ns} for pools, ns in rules])


WEB = (namespace("ml-prod"), namespace("web"))


def test_a_star_access_rule_keeps_other_namespaces_out_of_every_nodepool(catalog: CatalogData) -> None:
    pods = (pending("train", "ml-prod"), pending("shop", "web"))
    s = state(pool("gpu", weight=10), pool("general"), policies=(only("ml", (["*"], ["ml-prod"])),), namespaces=WEB)
    result = plan(dataclasses.replace(s, pods=pods), catalog)
    assert where(result) == {"ml-prod/train": "gpu"}
    assert reasons(result) == {
        "web/shop": {p: f"namespace web may not use NodePool {p}: policy ml" for p in ("general", "gpu")}
    }
    # the policy's other rules naming a NodePool are alternatives to its "*" rule there
    both = only("ml", (["*"], ["ml-prod"]), (["general"], ["web"]))
    assert where(plan(dataclasses.replace(s, pods=pods, policies=(both,)), catalog)) == {
        "ml-prod/train": "gpu",
        "web/shop": "general",
    }
    # another policy's rule does not open what the "*" rule closes (the most restrictive wins), nor the reverse
    general = only("general", (["general"], ["web"]))
    result = plan(dataclasses.replace(s, pods=pods, policies=(only("ml", (["*"], ["ml-prod"])), general)), catalog)
    assert where(result) == {"ml-prod/train": "gpu"}
    assert reasons(result)["web/shop"]["general"] == "namespace web may not use NodePool general: policy ml"
    assert not [w for w in plan_warnings(s, build_input(s, catalog), "us-east-1") if "NodeflowPolicy" in w]


def test_a_star_pause_pauses_every_nodepool(catalog: CatalogData) -> None:
    always = policy(
        "freeze",
        pauses=[{"name": "now", "schedule": "* * * * *", "duration": "1h", "provisioning": True, "nodePools": ["*"]}],
    )
    s = state(pool("gpu", weight=10), pool("general"), policies=(always,), pods=(pending("p", "web"),))
    result = plan(s, catalog, now=TUESDAY)
    assert result.node_claims == ()
    assert reasons(result) == {
        "web/p": {
            p: f"provisioning paused for NodePool {p} by policy freeze: window now (* * * * * for 1h) "
            "until 2026-11-24T13:00:00Z"
            for p in ("general", "gpu")
        }
    }


def test_a_star_group_limit_holds_every_nodepools_nodes(catalog: CatalogData) -> None:
    none = policy("frozen", limits=[{"name": "all", "nodePools": ["*"], "resources": {"nodes": "0"}}])
    s = state(pool("gpu", weight=10), pool("general"), policies=(none,), pods=(pending("p", "web"),))
    result = plan(s, catalog)
    assert result.node_claims == ()
    assert set(reasons(result)["web/p"]) == {"general", "gpu"}
    assert reasons(result)["web/p"]["general"].startswith(
        "exceeds limit nodes=0 of NodePool group all (every NodePool): 0 remaining"
    )
    # every NodePool's nodes count against it (a node of no NodePool does not), static top-ups included
    cpu8 = policy("cpu", limits=[{"name": "all", "nodePools": ["*"], "resources": {"cpu": "8"}}])
    used = node("n1", "general", cpu="0")
    used = used.model_copy(update={"status": used.status.model_copy(update={"capacity": {"cpu": "4"}})})
    loose = node("n2", "none", cpu="0").model_copy(deep=True)
    loose.metadata.labels.pop("karpenter.sh/nodepool")
    loose = loose.model_copy(update={"status": loose.status.model_copy(update={"capacity": {"cpu": "64"}})})
    pods = (pending("p", cpu="3"), pending("q", cpu="3"))
    result = plan(state(pool("gpu"), pool("general"), policies=(cpu8,), pods=pods, nodes=(used, loose)), catalog)
    assert len(result.node_claims) == 1  # 4 CPUs in use + one m6i.xlarge: the second pod would cross 8
    assert len(result.unschedulable) == 1
    inp = build_input(state(pool("gpu", replicas=2), policies=(none,)), catalog)
    assert inp.static_claims == ()
    assert inp.static_problems[0].startswith("static NodePool 'gpu' needs 2 NodeClaim(s) but none can be made")
