"""Parity: the emptiness disruption method (Karpenter's pkg/controllers/disruption emptiness_test.go).

An empty node (no pod but DaemonSet / mirror pods) past its pool's consolidateAfter is deleted, as many
at once as the budgets allow. Karpenter's Consolidatable condition is nodeflow's timer, applied each round.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.parity._drift import ALL, DO_NOT_DISRUPT, command, hashed, world
from tests.parity.harness import NOW, Obj, ago, managed_node, node_pool, pod, requirement
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/controllers/disruption/emptiness_test.go"

_BUFFERS = (
    "capacity buffers (CapacityBuffer and the virtual buffer pods cluster state counts per node) are not implemented "
    "in nodeflow: no manifest expresses them"
)
NOT_EXPRESSIBLE: dict[str, str] = {
    "Emptiness / Metrics / should correctly report eligible nodes": "metrics are not part of disrupt's output",
    "Emptiness / Buffer pod protection / should not disrupt a node that hosts virtual buffer pods": _BUFFERS,
    "Emptiness / Buffer pod protection / should disrupt a node once buffer pods are cleared": _BUFFERS,
    "Emptiness / Buffer pod protection / should only protect the specific node with buffer pods, not others": _BUFFERS,
    "Emptiness / Buffer pod protection / should not consider a node with real pods AND buffer pods as empty": _BUFFERS,
    "Emptiness / Buffer pod protection / should protect multiple nodes that each host buffer pods": _BUFFERS,
    "Emptiness / Buffer pod protection / should not protect a node with zero buffer pod count": _BUFFERS,
}


def empty_pool(name: str = "default", *, budgets: list[Obj] | None = None, after: str = "0s", **kw: Any) -> Obj:
    disruption = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": after, "budgets": budgets or ALL}
    return node_pool(name, disruption=disruption, **kw)


def emptied(objects: list[Obj], **kw: Any) -> list[str]:
    """The nodes the round deletes as empty."""
    cmd = command(objects, **kw)
    return sorted(cmd["candidates"]) if cmd is not None and cmd["reason"] == "Empty" else []


def empties(prefix: str, count: int, **kw: Any) -> list[list[Obj]]:
    return [managed_node(f"{prefix}{i}", **kw) for i in range(count)]


@mirrors("Emptiness / Budgets / should allow all empty nodes to be disrupted")
def test_a_full_budget_lets_every_empty_node_go() -> None:
    assert len(emptied(world([empty_pool(budgets=[{"nodes": "100%"}])], *empties("n", 6)))) == 6


@mirrors("Emptiness / Budgets / should allow no empty nodes to be disrupted")
def test_a_zero_budget_keeps_every_empty_node() -> None:
    result = command(world([empty_pool(budgets=[{"nodes": "0"}])], *empties("n", 3)))
    assert result is None


@mirrors("Emptiness / Budgets / should only allow 3 empty nodes to be disrupted")
def test_a_budget_of_three_deletes_three_empty_nodes() -> None:
    assert len(emptied(world([empty_pool(budgets=[{"nodes": "3"}])], *empties("n", 8)))) == 3


@mirrors("Emptiness / Budgets / should allow 2 nodes from each nodePool to be deleted")
def test_each_pool_spends_its_own_budget_of_two() -> None:
    pools = [empty_pool(p, budgets=[{"nodes": "2"}]) for p in ("a", "b", "c")]
    nodes = [n for p in ("a", "b", "c") for n in empties(f"{p}-", 4, pool=p)]
    gone = emptied(world(pools, *nodes))
    assert {p: sum(1 for n in gone if n.startswith(f"{p}-")) for p in ("a", "b", "c")} == {"a": 2, "b": 2, "c": 2}


@mirrors("Emptiness / Budgets / should allow all nodes from each nodePool to be deleted")
def test_each_pool_with_a_full_budget_loses_all_empty_nodes() -> None:
    pools = [empty_pool(p, budgets=[{"nodes": "100%"}]) for p in ("a", "b")]
    nodes = [n for p in ("a", "b") for n in empties(f"{p}-", 3, pool=p)]
    assert len(emptied(world(pools, *nodes))) == 6


@mirrors("Emptiness / Emptiness / can delete empty nodes")
def test_an_empty_node_is_deleted() -> None:
    cmd = command(world([empty_pool()], managed_node("n1")))
    assert cmd is not None
    assert (cmd["reason"], cmd["decision"], cmd["candidates"], cmd["replacements"]) == ("Empty", "delete", ["n1"], [])


@mirrors("Emptiness / can delete multiple empty nodes")
def test_several_empty_nodes_go_in_one_command() -> None:
    assert emptied(world([empty_pool()], *empties("n", 3))) == ["n0", "n1", "n2"]


@mirrors("Emptiness / Emptiness / can delete empty and drifted nodes")
def test_an_empty_drifted_node_is_deleted_as_empty() -> None:
    old = empty_pool()
    new = empty_pool(labels={"team": "payments"})
    assert emptied(world([new], managed_node("n1", claim_annotations=hashed(old)))) == ["n1"]


@mirrors(
    "Emptiness / Emptiness / should ignore nodes without the consolidatable status condition",
    "Emptiness / Emptiness / should ignore nodes with the consolidatable status condition set to false",
)
def test_an_empty_node_inside_consolidate_after_is_kept() -> None:
    objs = world([empty_pool(after="10m")], managed_node("n1", claim_initialized=ago(minutes=2)))
    assert emptied(objs) == []


@mirrors("Emptiness / should wait for the node TTL for empty nodes before consolidating")
def test_an_empty_node_goes_once_consolidate_after_has_passed() -> None:
    objs = world([empty_pool(after="30s")], managed_node("n1", claim_initialized=ago(seconds=10)))
    assert emptied(objs) == []
    assert emptied(objs, now=NOW + timedelta(seconds=21)) == ["n1"]


@mirrors("Emptiness / Emptiness / should ignore nodes with the karpenter.sh/do-not-disrupt annotation")
def test_a_do_not_disrupt_node_is_not_emptied() -> None:
    result = command(world([empty_pool()], managed_node("n1", annotations={DO_NOT_DISRUPT: "true"})))
    assert result is None


@mirrors("Emptiness / Emptiness / should delete nodes with the karpenter.sh/do-not-disrupt annotation set to false")
def test_do_not_disrupt_false_does_not_protect_an_empty_node() -> None:
    assert emptied(world([empty_pool()], managed_node("n1", annotations={DO_NOT_DISRUPT: "false"}))) == ["n1"]


@mirrors("Emptiness / Emptiness / should ignore nodes that have pods")
def test_a_node_with_a_workload_pod_is_not_empty() -> None:
    assert command(world([empty_pool()], managed_node("n1"), [pod("web", node="n1")])) is None


@mirrors("Emptiness / will consider a node with a DaemonSet pod as empty")
def test_a_daemonset_pod_does_not_make_a_node_busy() -> None:
    objs = world([empty_pool()], managed_node("n1"), [pod("agent", node="n1", owner="DaemonSet")])
    assert emptied(objs) == ["n1"]


def test_a_daemonset_pod_with_do_not_disrupt_holds_the_empty_node() -> None:
    """do-not-disrupt on any pod of the node blocks it, DaemonSet pods included."""
    agent = pod("agent", node="n1", owner="DaemonSet", annotations={DO_NOT_DISRUPT: "true"})
    assert command(world([empty_pool()], managed_node("n1"), [agent])) is None


def test_an_invalid_do_not_disrupt_value_does_not_hold_the_empty_node() -> None:
    agent = pod("agent", node="n1", owner="DaemonSet", annotations={DO_NOT_DISRUPT: "yes please"})
    assert emptied(world([empty_pool()], managed_node("n1"), [agent])) == ["n1"]


@mirrors("Emptiness / will consider a node with terminating Deployment pods as empty")
def test_terminating_deployment_pods_do_not_make_a_node_busy() -> None:
    leaving = [pod(f"web-{i}", node="n1", deleting=ago(seconds=5)) for i in range(2)]
    assert emptied(world([empty_pool()], managed_node("n1"), leaving)) == ["n1"]


@mirrors("Emptiness / will not consider a node with a terminating StatefulSet pod as empty")
def test_a_terminating_statefulset_pod_keeps_a_node_busy() -> None:
    """A StatefulSet's replacement pod cannot start before the old one is gone: the old one still counts."""
    leaving = pod("db-0", node="n1", owner="StatefulSet", deleting=ago(seconds=5))
    assert emptied(world([empty_pool()], managed_node("n1"), [leaving])) == []


@mirrors("Emptiness / considers pending pods when consolidating")
def test_a_pending_pod_that_needs_the_big_node_keeps_it() -> None:
    # m5 only, as upstream's catalog: nothing cheaper than the m5.16xlarge holds both pods (on-demand, the node's
    # capacity type: upstream's node is on its type's cheapest offering, so no cheaper offering replaces it either)
    pool = node_pool(
        requirements=[
            requirement("karpenter.k8s.aws/instance-family", "In", "m5"),
            requirement("karpenter.sh/capacity-type", "In", "on-demand"),
        ],
        disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s", "budgets": ALL},
    )
    big = managed_node("big", instance_type="m5.16xlarge")
    objs = world([pool], big, [pod("small", node="big", cpu="1"), pod("huge", cpu="62")])
    assert command(objs) is None


@mirrors("Emptiness / Static NodePool / should not consolidate static NodePool nodes")
def test_empty_nodes_of_a_static_pool_stay() -> None:
    static = empty_pool("fixed")
    static["spec"]["replicas"] = 2
    nodes = empties("n", 2, pool="fixed")
    assert command(world([static], *nodes)) is None
    del static["spec"]["replicas"]  # the same pool without replicas empties both
    assert emptied(world([static], *nodes)) == ["n0", "n1"]
