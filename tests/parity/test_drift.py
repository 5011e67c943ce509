"""Parity: the drift disruption method (Karpenter's pkg/controllers/disruption drift_test.go).

A node is made drifted the way it happens in a cluster: its NodeClaim carries the hash of an older
template of its NodePool. Its Drifted condition (when a test sets one) only gives the time it drifted.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.parity._drift import (
    ALL,
    DO_NOT_DISRUPT,
    busy_node,
    command,
    drift_pool,
    drifted,
    hashed,
    world,
)
from tests.parity.harness import HOSTNAME, Obj, affinity_term, ago, disrupt, managed_node, pdb, pod
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/controllers/disruption/drift_test.go"

NOT_EXPRESSIBLE: dict[str, str] = {
    "Drift / Metrics / should correctly report eligible drifted nodes": "metrics are not part of disrupt's output",
    "Drift / Drift / should untaint nodes when drift replacement fails": (
        "executing a command (taint, launch, roll back) is the replace workflow's, not the dry-run decision's"
    ),
}

OLD = drift_pool()  # the template the nodes were made from
NEW_LABELS = {"team": "payments"}


def new_pool(name: str = "default", **kw: Any) -> Obj:
    kw.setdefault("labels", NEW_LABELS)
    return drift_pool(name, **kw)


def stale(name: str, *, since: str | None = None, pool: str = "default", **kw: Any) -> list[Obj]:
    """A busy node of ``pool`` made from the old template (drifted ``since``, when given)."""
    conds = (
        [{"type": "Drifted", "status": "True", "reason": "NodePoolDrifted", "lastTransitionTime": since}]
        if since
        else []
    )
    return busy_node(name, pool=pool, claim_annotations=hashed(OLD), claim_conditions=conds, **kw)


def started(p: Obj, created: str) -> Obj:
    p["metadata"]["creationTimestamp"] = created
    p["status"]["startTime"] = created
    return p


@mirrors(
    "Drift / Budgets / should only consider 3 nodes allowed to be disrupted because of budgets",
    "Drift / Budgets / should disrupt 3 nodes, taking into account commands in progress",
)
def test_the_drift_budget_counts_nodes_already_disrupting() -> None:
    pool = new_pool(
        disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never", "budgets": [{"nodes": "3"}]}
    )
    deleting = [managed_node(f"gone{i}", claim_deleting=ago(minutes=1), deleting=ago(minutes=1)) for i in range(3)]
    objs = world([pool], *[stale(f"n{i}") for i in range(4)], *deleting)
    assert drifted(objs) == []
    two = world([pool], *[stale(f"n{i}") for i in range(4)], *deleting[:2])
    assert len(drifted(two)) == 1  # one node per drift command, the budget allows one more


@mirrors("Drift / Budgets / should respect budgets for multiple nodepools")
def test_each_nodepool_has_its_own_drift_budget() -> None:
    closed = new_pool(
        "closed",
        disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never", "budgets": [{"nodes": "0"}]},
    )
    open_ = new_pool("open")
    objs = world(
        [closed, open_], stale("a1", pool="closed", since=ago(hours=3)), stale("b1", pool="open", since=ago(hours=1))
    )
    assert drifted(objs) == ["b1"]


@mirrors("Drift / Drift / should continue to the next drifted node if the first cannot reschedule all pods")
def test_a_drifted_node_whose_pods_cannot_move_is_skipped() -> None:
    pinned = {"node_selector": {"app-host": "only-n1"}}
    objs = world(
        [new_pool()],
        stale("n1", since=ago(hours=3), labels={"app-host": "only-n1"}, pod_kw=pinned),
        stale("n2", since=ago(hours=1)),
    )
    result = disrupt(objs)
    assert result["command"]["candidates"] == ["n2"]
    assert any(b["node"] == "n1" for b in result["blocked"])


@mirrors(
    "Drift / Drift / should ignore nodes without the drifted status condition",
    "Drift / Drift / should ignore nodes with the drifted status condition set to false",
)
def test_a_node_that_matches_its_nodepool_is_not_drifted() -> None:
    not_drifted = {"type": "Drifted", "status": "False", "reason": "NotDrifted", "lastTransitionTime": ago(hours=1)}
    objs = world(
        [OLD],
        busy_node("n1", claim_annotations=hashed(OLD)),
        busy_node("n2", claim_annotations=hashed(OLD), claim_conditions=[not_drifted]),
    )
    assert command(objs) is None


@mirrors("Drift / Drift / should ignore nodes with the karpenter.sh/do-not-disrupt annotation set to true")
def test_a_do_not_disrupt_node_is_not_drifted_away() -> None:
    objs = world([new_pool()], stale("n1", annotations={DO_NOT_DISRUPT: "true"}))
    assert command(objs) is None


@mirrors("Drift / Drift / should delete drifted nodes with the karpenter.sh/do-not-disrupt annotation set to false")
def test_do_not_disrupt_false_does_not_protect_a_drifted_node() -> None:
    objs = world([new_pool()], stale("n1", annotations={DO_NOT_DISRUPT: "false"}))
    assert drifted(objs) == ["n1"]


@mirrors(
    "Drift / Drift / should not create replacements for drifted nodes that have pods with the karpenter.sh/do-not-disrupt annotation set to true"
)
def test_a_do_not_disrupt_pod_holds_its_drifted_node() -> None:
    objs = world([new_pool()], stale("n1", pod_kw={"annotations": {DO_NOT_DISRUPT: "true"}}))
    assert command(objs) is None


@mirrors(
    "Drift / Drift / should not create replacements for drifted nodes that have pods with the karpenter.sh/do-not-disrupt annotation set to true when the NodePool's TerminationGracePeriod is not nil"
)
def test_a_do_not_disrupt_pod_holds_its_drifted_node_with_a_grace_period() -> None:
    objs = world(
        [new_pool(termination_grace_period="5m")], stale("n1", pod_kw={"annotations": {DO_NOT_DISRUPT: "true"}})
    )
    assert command(objs) is None


@mirrors(
    "Drift / Drift / should not create replacements for drifted nodes that have pods with the blocking PDBs when the NodePool's TerminationGracePeriod is not nil"
)
def test_a_blocking_pdb_holds_its_drifted_node_with_a_grace_period() -> None:
    node_objs = stale("n1", pod_kw={"labels": {"app": "db"}})
    for o in node_objs:
        if o["kind"] == "NodeClaim":
            o["spec"]["terminationGracePeriod"] = "5m"
    objs = [
        *world([new_pool(termination_grace_period="5m")], node_objs),
        pdb("db", {"app": "db"}, max_unavailable=0, disruptions_allowed=0),
    ]
    cmd = command(objs)
    assert cmd is None or cmd["replacements"] == []  # the pod cannot be evicted, so nothing is launched for it


@mirrors(
    "Drift / Drift / should not drift nodes with pods that have a duration-based do-not-disrupt annotation that is still active"
)
def test_a_do_not_disrupt_duration_still_running_holds_the_node() -> None:
    node_objs = stale("n1", pod_kw={"annotations": {DO_NOT_DISRUPT: "1h"}})
    started(node_objs[-1], ago(minutes=10))
    assert command(world([new_pool()], node_objs)) is None
    started(node_objs[-1], ago(hours=2))
    assert drifted(world([new_pool()], node_objs)) == ["n1"]


@mirrors("Drift / Drift / should drift nodes with pods that have an invalid do-not-disrupt annotation format")
def test_an_invalid_do_not_disrupt_value_does_not_hold_the_node() -> None:
    objs = world([new_pool()], stale("n1", pod_kw={"annotations": {DO_NOT_DISRUPT: "soon-ish"}}))
    assert drifted(objs) == ["n1"]


@mirrors(
    "Drift / Drift / should not drift nodes until the longest duration-based do-not-disrupt grace period expires across multiple pods"
)
def test_the_longest_do_not_disrupt_duration_wins() -> None:
    node_objs = stale("n1", pods=2)
    for p, value in zip(node_objs[-2:], ("30m", "3h"), strict=True):
        p["metadata"]["annotations"] = {DO_NOT_DISRUPT: value}
        started(p, ago(hours=1))
    assert command(world([new_pool()], node_objs)) is None
    for p in node_objs[-2:]:
        started(p, ago(hours=4))
    assert drifted(world([new_pool()], node_objs)) == ["n1"]


@mirrors("Drift / Drift / should replace drifted nodes")
def test_a_drifted_node_is_replaced() -> None:
    cmd = command(world([new_pool()], stale("n1")))
    assert cmd is not None
    assert (cmd["reason"], cmd["decision"], cmd["candidates"]) == ("Drifted", "replace", ["n1"])
    assert len(cmd["replacements"]) == 1


@mirrors("Drift / Drift / should delete drifted nodes")
def test_a_drifted_node_whose_pods_fit_elsewhere_is_deleted() -> None:
    """As upstream: consolidateAfter 1h, both nodes initialized just now. The spare node is inside its
    consolidateAfter window, which keeps consolidation's pods off it but not drift's (drift.go simulates
    without IsConsolidationSimulation), so the drifted node's pod moves there and the node is deleted."""
    pool = new_pool(
        disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1h", "budgets": ALL}
    )
    just_now = ago(seconds=10)
    spare = managed_node(
        "spare", instance_type="m5.2xlarge", claim_annotations=hashed(pool), claim_initialized=just_now
    )
    cmd = command(world([pool], stale("n1", claim_initialized=just_now), spare))
    assert cmd is not None
    assert (cmd["reason"], cmd["decision"], cmd["candidates"]) == ("Drifted", "delete", ["n1"])
    assert cmd["moves"] == [{"pod": "default/n1-p0", "node": "spare"}]


@mirrors("Drift / Drift / should delete drifted nodes when they are empty and consolidation is disabled")
def test_an_empty_drifted_node_is_deleted_without_consolidation() -> None:
    cmd = command(world([new_pool()], stale("n1", pods=0)))
    assert cmd is not None
    assert (cmd["reason"], cmd["decision"], cmd["candidates"]) == ("Drifted", "delete", ["n1"])


@mirrors("Drift / Drift / should drift empty nodes before non-empty nodes")
def test_empty_drifted_nodes_go_first() -> None:
    objs = world([new_pool()], stale("busy", since=ago(hours=5)), stale("idle", pods=0, since=ago(minutes=5)))
    assert drifted(objs) == ["idle"]


@mirrors("Drift / Drift / should delete drifted nodes when they are empty and consolidatable")
def test_an_empty_drifted_node_of_a_consolidating_pool_is_deleted() -> None:
    pool = new_pool(
        disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s", "budgets": ALL}
    )
    cmd = command(world([pool], stale("n1", pods=0)))
    assert cmd is not None
    assert (cmd["decision"], cmd["candidates"]) == ("delete", ["n1"])  # emptiness gets to it first


@mirrors("Drift / Drift / can replace drifted nodes with multiple nodes")
def test_a_drifted_node_can_need_several_replacements() -> None:
    apart = {"labels": {"app": "spread"}, "pod_anti_affinity": [affinity_term(HOSTNAME, {"app": "spread"})]}
    node_objs = stale("n1", pods=1)
    extra = [pod(f"n1-q{i}", node="n1", **apart) for i in range(2)]
    node_objs[-1] = pod("n1-p0", node="n1", **apart)
    cmd = command(world([new_pool()], node_objs, extra))
    assert cmd is not None
    assert (cmd["reason"], cmd["candidates"]) == ("Drifted", ["n1"])
    assert len(cmd["replacements"]) == 3


@mirrors("Drift / Drift / should drift one non-empty node at a time, starting with the earliest drift")
def test_the_earliest_drifted_node_goes_first_one_at_a_time() -> None:
    objs = world(
        [new_pool()],
        stale("a", since=ago(hours=1)),
        stale("b", since=ago(hours=6)),
        stale("c", since=ago(hours=3)),
    )
    assert drifted(objs) == ["b"]


# --- static NodePools (spec.replicas) ------------------------------------------------------------------------------


@mirrors("Drift / Static NodePool / should not consider static nodepool for drift")
def test_drifted_nodes_of_a_static_pool_are_left_to_static_drift() -> None:
    """Drift does not take a static pool's nodes; static drift (its own method, as upstream's StaticDrift) replaces
    one with a NodeClaim of the pool's current template and no pods."""
    old = drift_pool("fixed")
    old["spec"]["replicas"] = 2
    new = copy.deepcopy(old)
    new["spec"]["template"].setdefault("metadata", {})["labels"] = NEW_LABELS
    objs = world([new], *(managed_node(f"n{i}", pool="fixed", claim_annotations=hashed(old)) for i in range(2)))
    cmd = command(objs)
    assert cmd is not None
    assert (cmd["method"], cmd["reason"], cmd["decision"], len(cmd["candidates"])) == (
        "static drift",
        "Drifted",
        "replace",
        1,
    )
    (made,) = cmd["replacements"]
    assert (made["nodePool"], made["static"], made["pods"]) == ("fixed", True, [])
    assert made["labels"]["team"] == "payments"
    # the same nodes of a pool without replicas: drift itself takes them
    del new["spec"]["replicas"]
    plain = command(
        world([new], *(managed_node(f"n{i}", pool="fixed", claim_annotations=hashed(old)) for i in range(2)))
    )
    assert plain is not None
    assert (plain["method"], plain["reason"]) == ("drift", "Drifted")
