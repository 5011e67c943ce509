"""Parity with Karpenter's disruption suite: candidate filtering, budget counting, eviction cost, simulation.

What is a candidate shows in ``disrupt --dry-run``: a node that is one may be disrupted (an empty one is
deleted by emptiness); one that is not is never in the command, and the ones Karpenter reports get a
DisruptionBlocked entry naming why. Graceful disruption (emptiness, consolidation) always respects
do-not-disrupt pods and PDBs; eventual disruption (drift) ignores them when the NodeClaim has a
terminationGracePeriod, which bounds how long they can hold the node.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.parity._candidates import DO_NOT_DISRUPT, base, blocker, disrupted, node_with, run_round, small
from tests.parity.harness import (
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    NODEPOOL,
    ZONE,
    Obj,
    ago,
    managed_node,
    node,
    node_claim,
    pdb,
    pod,
    taint,
)
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/controllers/disruption/suite_test.go"

_METRICS = "metrics are not part of plan / explain / disrupt output"
NOT_EXPRESSIBLE: dict[str, str] = {
    "Simulate Scheduling / should ensure that we do not duplicate capacity for disrupted nodes with provisioning": (
        "a race between the disruption queue's NodeClaim creation and a provisioning pass inside one controller "
        "process; nodeflow's rounds are separate invocations and the dry run creates nothing"
    ),
    "Disruption Taints / should remove taints from NodeClaims that were left tainted from a previous disruption "
    "action": "carrying out a command (tainting, untainting) is the terminate workflow's, not the decision's",
    "Disruption Taints / should add and remove taints from NodeClaims that fail to disrupt": (
        "carrying out a command (tainting, untainting) is the terminate workflow's, not the decision's"
    ),
    "Metrics / should fire metrics for single node empty disruption": _METRICS,
    "Metrics / should fire metrics for single node delete disruption": _METRICS,
    "Metrics / should fire metrics for single node replace disruption": _METRICS,
    "Metrics / should fire metrics for multi-node empty disruption": _METRICS,
    "Metrics / should fire metrics for multi-node delete disruption": _METRICS,
    "Metrics / should fire metrics for multi-node replace disruption": _METRICS,
    "Metrics / should stop multi-node consolidation after context deadline is reached": (
        "a wall-clock timeout of the controller's multi-node search; the pure decision has no deadline"
    ),
}

TGP = "5m"  # a NodeClaim terminationGracePeriod


def _drifted(name: str = "n1", *, tgp: str | None = None, pods: list[Obj] = (), **kw: Any) -> list[Obj]:  # type: ignore[assignment]
    """A node whose NodeClaim runs an AMI its EC2NodeClass no longer resolves (drifted), holding ``pods``."""
    objs = node_with(pods, name, claim_image_id="ami-0old", **kw)
    if tgp is not None:
        objs[1]["spec"]["terminationGracePeriod"] = tgp
    return objs


def _pod_blockers() -> dict[str, tuple[list[Obj], list[Obj]]]:
    """The two kinds of pod-level blockers: (pods, pdbs)."""
    return {
        "do-not-disrupt": ([small("p", annotations={DO_NOT_DISRUPT: "true"})], []),
        "pdb": ([small("p", labels={"app": "web"})], [pdb("web", {"app": "web"}, max_unavailable=0)]),
    }


# --- Candidate Filtering: pods ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tgp", [None, TGP])
@pytest.mark.parametrize("kind", ["do-not-disrupt", "pdb"])
@mirrors(
    "Candidate Filtering / should not consider candidates that have do-not-disrupt pods scheduled and no "
    "terminationGracePeriod",
    "Candidate Filtering / should not consider candidates that have do-not-disrupt pods scheduled with a "
    "terminationGracePeriod set for graceful disruption",
    "Candidate Filtering / should not consider candidates that have PDB-blocked pods scheduled with a "
    "terminationGracePeriod set for graceful disruption",
    "Candidate Filtering / should not consider candidates that have do-not-disrupt pods without a "
    "terminationGracePeriod set for graceful disruption",
    "Candidate Filtering / should not consider candidates that have fully blocking PDBs without a "
    "terminationGracePeriod set for graceful disruption",
    "Candidate Filtering / should not consider candidates that have fully blocking PDBs",
)
def test_pod_blockers_hold_graceful_disruption_with_or_without_grace_period(kind: str, tgp: str | None) -> None:
    """Consolidation (graceful) of a node with one small pod is held by a do-not-disrupt pod or a PDB allowing
    nothing, whether or not the NodeClaim has a terminationGracePeriod."""
    pods, pdbs = _pod_blockers()[kind]
    objs = node_with(pods)
    if tgp is not None:
        objs[1]["spec"]["terminationGracePeriod"] = tgp
    out = run_round([base(), objs, *pdbs])
    assert blocker(out, "n1") is not None
    assert disrupted(out) == []


@mirrors(
    "Candidate Filtering / should consider candidates that have do-not-disrupt pods scheduled with a "
    "terminationGracePeriod set for eventual disruption",
    "Candidate Filtering / should consider candidates that have PDB-blocked pods scheduled with a "
    "terminationGracePeriod set for eventual disruption",
)
def test_grace_period_lets_drift_through_pod_blockers() -> None:
    """Drift (eventual) replaces a node held by a do-not-disrupt pod or a PDB when its NodeClaim has a
    terminationGracePeriod: that period bounds how long they may hold the node."""
    for kind, (pods, pdbs) in _pod_blockers().items():
        out = run_round([base(), _drifted(tgp=TGP, pods=pods), *pdbs])
        assert out["command"] is not None, kind
        assert out["command"]["reason"] == "Drifted", kind
        assert disrupted(out) == ["n1"], kind


@mirrors(
    "Candidate Filtering / should not consider candidates that have do-not-disrupt pods scheduled without a "
    "terminationGracePeriod set for eventual disruption",
    "Candidate Filtering / should not consider candidates that have PDB-blocked pods scheduled without a "
    "terminationGracePeriod set for eventual disruption",
)
def test_without_grace_period_pod_blockers_hold_drift() -> None:
    for kind, (pods, pdbs) in _pod_blockers().items():
        out = run_round([base(), _drifted(pods=pods), *pdbs])
        assert disrupted(out) == [], kind
        assert blocker(out, "n1") is not None, kind


@mirrors(
    "Candidate Filtering / should not consider candidates that have do-not-disrupt mirror pods scheduled",
    "Candidate Filtering / should not consider candidates that have do-not-disrupt daemonset pods scheduled",
)
def test_do_not_disrupt_on_daemonset_or_mirror_pod_blocks() -> None:
    """Such pods are never evicted, but their do-not-disrupt annotation still holds the node (otherwise empty)."""
    for owner in ("Node", "DaemonSet"):
        p = small("p", owner=owner, annotations={DO_NOT_DISRUPT: "true"})
        out = run_round([base(), node_with([p])])
        message = blocker(out, "n1")
        assert message is not None, owner
        assert "default/p" in message, owner
        assert DO_NOT_DISRUPT in message, owner
        assert disrupted(out) == [], owner


@mirrors(
    "Candidate Filtering / should consider candidates that have do-not-disrupt terminating pods",
    "Candidate Filtering / should consider candidates that have do-not-disrupt terminal pods",
)
def test_do_not_disrupt_on_finished_or_terminating_pod_does_not_block() -> None:
    for extra in ({"phase": "Succeeded"}, {"phase": "Failed"}, {"deleting": ago(seconds=10)}):
        p = small("p", annotations={DO_NOT_DISRUPT: "true"}, **extra)  # type: ignore[arg-type]
        out = run_round([base(), node_with([p])])
        assert blocker(out, "n1") is None, extra
        assert disrupted(out) == ["n1"], extra


@mirrors("Candidate Filtering / should not consider candidates that have do-not-disrupt on nodes")
def test_do_not_disrupt_on_the_node_blocks() -> None:
    out = run_round([base(), managed_node("n1", annotations={DO_NOT_DISRUPT: "true"})])
    message = blocker(out, "n1")
    assert message is not None
    assert DO_NOT_DISRUPT in message
    assert disrupted(out) == []


@mirrors("Candidate Filtering / should not consider candidates that have multiple PDBs on the same pod")
def test_two_pdbs_on_one_pod_block() -> None:
    p = small("p", labels={"app": "web", "tier": "front"})
    pdbs = [
        pdb("by-app", {"app": "web"}, max_unavailable=1, disruptions_allowed=1),
        pdb("by-tier", {"tier": "front"}, max_unavailable=1, disruptions_allowed=1),
    ]
    out = run_round([base(), node_with([p]), *pdbs])
    message = blocker(out, "n1")
    assert message is not None
    assert "default/by-app" in message
    assert "default/by-tier" in message
    assert disrupted(out) == []


@mirrors("Candidate Filtering / should not consider candidates that have fully blocking PDBs on daemonset pods")
def test_pdb_on_daemonset_pod_blocks() -> None:
    """A DaemonSet pod that does not tolerate the disrupted taint is evicted when its node drains: its PDB counts."""
    p = small("p", owner="DaemonSet", labels={"app": "agent"})
    out = run_round([base(), node_with([p]), pdb("agent", {"app": "agent"}, max_unavailable=0)])
    message = blocker(out, "n1")
    assert message is not None
    assert "default/agent" in message
    assert disrupted(out) == []


@mirrors(
    "Candidate Filtering / should consider candidates that have fully blocking PDBs on mirror pods",
    "Candidate Filtering / should consider candidates that have fully blocking PDBs on terminal pods",
    "Candidate Filtering / should consider candidates that have fully blocking PDBs on terminating pods",
)
def test_pdb_on_pods_never_evicted_does_not_block() -> None:
    for extra in ({"owner": "Node"}, {"phase": "Succeeded"}, {"phase": "Failed"}, {"deleting": ago(seconds=10)}):
        p = small("p", labels={"app": "web"}, **extra)  # type: ignore[arg-type]
        out = run_round([base(), node_with([p]), pdb("web", {"app": "web"}, max_unavailable=0)])
        assert blocker(out, "n1") is None, extra
        assert disrupted(out) == ["n1"], extra


# --- Candidate Filtering: the node --------------------------------------------------------------------------------


@mirrors("Candidate Filtering / should not consider candidates that has just a Node representation")
def test_node_without_node_claim_is_not_a_candidate() -> None:
    out = run_round([base(), node("n1")])
    assert disrupted(out) == []
    assert out["blocked"] == []


@mirrors("Candidate Filtering / should not consider candidate that has just a NodeClaim representation")
def test_node_claim_without_node_is_not_a_candidate() -> None:
    claim = node_claim(node("n1"))
    out = run_round([base(), claim])
    assert disrupted(out) == []
    assert out["blocked"] == []


@mirrors("Candidate Filtering / should not consider candidates that are nominated")
def test_node_nominated_for_a_pending_pod_is_not_a_candidate() -> None:
    """An empty node a pending pod is nominated to (status.nominatedNodeName) is not deleted."""
    waiting = pod("w", cpu="100m")
    waiting["status"]["nominatedNodeName"] = "n1"
    out = run_round([base(), managed_node("n1"), managed_node("n2"), waiting])
    assert disrupted(out) == ["n2"]
    message = blocker(out, "n1")
    assert message is not None
    assert "nominated" in message


@mirrors("Candidate Filtering / should not consider candidates that are deleting")
def test_deleting_node_is_not_a_candidate() -> None:
    for objs in (managed_node("n1", deleting=ago(seconds=5)), managed_node("n1", claim_deleting=ago(seconds=5))):
        out = run_round([base(), objs])
        assert disrupted(out) == []
        assert out["expirations"] == []


@mirrors(
    "Candidate Filtering / should not consider candidates that are MarkedForDeletion",
    "Candidate Filtering / should not consider candidates that are actively being processed in the queue",
)
def test_node_already_being_disrupted_is_not_a_candidate() -> None:
    """nodeflow has no in-memory queue: a command under way shows as the karpenter.sh/disrupted taint, and a
    NodeClaim whose instance is terminating as its InstanceTerminating condition."""
    tainted = managed_node("n1", taints=[taint("karpenter.sh/disrupted")])
    terminating = managed_node("n1", claim_conditions=[{"type": "InstanceTerminating", "status": "True"}])
    for objs in (tainted, terminating):
        out = run_round([base(), objs])
        assert disrupted(out) == []


@mirrors("Candidate Filtering / should not consider candidates that aren't yet initialized")
def test_uninitialized_node_is_not_a_candidate() -> None:
    out = run_round([base(), managed_node("n1", initialized=False, claim_initialized="")])
    assert disrupted(out) == []
    message = blocker(out, "n1")
    assert message is not None
    assert "initialized" in message


@mirrors(
    "Candidate Filtering / should not consider candidates that are not owned by a NodePool (no karpenter.sh/nodepool "
    "label)"
)
def test_node_without_nodepool_label_is_not_a_candidate() -> None:
    objs = managed_node("n1")
    del objs[0]["metadata"]["labels"][NODEPOOL]
    out = run_round([base(), objs])
    assert disrupted(out) == []


@mirrors("Candidate Filtering / should not consider candidates that are have a non-existent NodePool")
def test_node_of_a_missing_nodepool_is_not_a_candidate() -> None:
    out = run_round([base(), managed_node("n1", pool="gone")])
    assert disrupted(out) == []


@mirrors(
    "Candidate Filtering / should consider candidates that do not have the karpenter.sh/capacity-type label",
    "Candidate Filtering / should consider candidates that do not have the topology.kubernetes.io/zone label",
    "Candidate Filtering / should consider candidates that do not have the node.kubernetes.io/instance-type label",
)
def test_node_missing_offering_labels_is_still_a_candidate() -> None:
    """Such a node is a candidate (an empty one is deleted); consolidation's own filter is another matter."""
    for key in (CAPACITY_TYPE, ZONE, INSTANCE_TYPE):
        objs = managed_node("n1")
        del objs[0]["metadata"]["labels"][key]
        out = run_round([base(), objs])
        assert disrupted(out) == ["n1"], key


@mirrors("Candidate Filtering / should consider candidates that have an instance type that cannot be resolved")
def test_node_of_an_unknown_instance_type_is_still_a_candidate() -> None:
    objs = managed_node("n1")
    objs[0]["metadata"]["labels"][INSTANCE_TYPE] = "x9.unheard-of"
    out = run_round([base(), objs])
    assert disrupted(out) == ["n1"]


# --- BuildDisruptionBudgetMapping: which nodes a budget counts ------------------------------------------------------


def _empty_nodes(count: int, **kw: Any) -> list[list[Obj]]:
    return [managed_node(f"e{i}", **kw) for i in range(count)]


def _pool(nodes: str) -> list[Obj]:
    return base(disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": nodes}]})


@mirrors("BuildDisruptionBudgetMapping / should not consider nodes that are not managed as part of disruption count")
def test_budget_ignores_unmanaged_nodes() -> None:
    """50% of the 10 managed nodes is 5; a node no NodePool owns does not raise it to ceil(5.5) = 6."""
    out = run_round([_pool("50%"), *_empty_nodes(10), node("u", pool=None)])
    assert len(disrupted(out)) == 5


@mirrors(
    "BuildDisruptionBudgetMapping / should not consider nodes that are not initialized as part of disruption count"
)
def test_budget_counts_initialized_nodes_only() -> None:
    out = run_round([_pool("50%"), *_empty_nodes(10), managed_node("x", initialized=False, claim_initialized="")])
    assert len(disrupted(out)) == 5


@mirrors(
    "BuildDisruptionBudgetMapping / should not consider nodes that have the terminating status condition as part "
    "of disruption count"
)
def test_budget_ignores_nodes_whose_instance_is_terminating() -> None:
    """25% of 10 rounds up to 3; a NodeClaim whose instance is already terminating is neither counted nor
    disrupting (counted, it would give ceil(2.75) - 1 = 2)."""
    gone = managed_node("x", claim_conditions=[{"type": "InstanceTerminating", "status": "True"}])
    out = run_round([_pool("25%"), *_empty_nodes(10), gone])
    assert len(disrupted(out)) == 3


@mirrors("BuildDisruptionBudgetMapping / should not return a negative disruption value")
def test_budget_used_up_by_deleting_nodes_allows_nothing() -> None:
    """10% of 10 is 1, and 9 nodes are already being deleted: nothing more (not minus 8)."""
    deleting = [managed_node(f"d{i}", deleting=ago(seconds=30), claim_deleting=ago(seconds=30)) for i in range(9)]
    out = run_round([_pool("10%"), *deleting, managed_node("e0")])
    assert disrupted(out) == []
    message = blocker(out, "e0")
    assert message is not None
    assert "budget" in message


@mirrors(
    "BuildDisruptionBudgetMapping / should consider nodes with a deletion timestamp set and MarkedForDeletion to the "
    "disruption count"
)
def test_deleting_and_disrupting_nodes_use_up_budget() -> None:
    """50% of 10 is 5; one node deleting and one already tainted karpenter.sh/disrupted leave 3."""
    nodes = _empty_nodes(8)
    nodes.append(managed_node("gone", deleting=ago(seconds=30), claim_deleting=ago(seconds=30)))
    nodes.append(managed_node("going", taints=[taint("karpenter.sh/disrupted")]))
    out = run_round([_pool("50%"), *nodes])
    assert len(disrupted(out)) == 3


@mirrors("BuildDisruptionBudgetMapping / should consider not ready nodes to the disruption count")
def test_not_ready_nodes_use_up_budget() -> None:
    nodes = _empty_nodes(8)
    nodes += [managed_node("sick1", ready="False"), managed_node("sick2", ready="Unknown")]
    out = run_round([_pool("50%"), *nodes])
    assert len(disrupted(out)) == 3


# --- Pod Eviction Cost: which candidate goes first --------------------------------------------------------------


def _first_of(a: dict[str, Any], b: dict[str, Any]) -> str:
    """With a budget of one node, consolidation takes the candidate cheapest to disrupt: the node whose pod was
    built with ``a`` (node "a") or with ``b`` (node "b")."""
    objs: list[Obj | list[Obj]] = [_pool("1")]
    for name, kw in (("a", a), ("b", b)):
        p = pod(f"p-{name}", node=name, cpu="100m", **kw)
        objs.append(node_with([p], name))
    names = disrupted(run_round(objs))
    assert len(names) == 1
    return names[0]


def _cost(value: str) -> dict[str, Any]:
    return {"annotations": {"controller.kubernetes.io/pod-deletion-cost": value}}


@mirrors(
    "Pod Eviction Cost / should have a standard disruptionCost for a pod with no priority or disruptionCost specified"
)
def test_plain_pod_costs_as_much_as_zero_cost_and_zero_priority() -> None:
    """A pod with neither costs the same as deletion-cost 0 and priority 0: the tie goes by node name."""
    assert _first_of({}, {**_cost("0"), "priority": 0}) == "a"
    assert _first_of({**_cost("0"), "priority": 0}, {}) == "a"


@mirrors(
    "Pod Eviction Cost / should have a higher disruptionCost for a pod with a positive deletion disruptionCost",
    "Pod Eviction Cost / should have a lower disruptionCost for a pod with a positive deletion disruptionCost",
)
def test_deletion_cost_orders_candidates() -> None:
    assert _first_of(_cost("100"), {}) == "b"
    assert _first_of({}, _cost("-100")) == "b"


@mirrors("Pod Eviction Cost / should have higher costs for higher deletion costs")
def test_higher_deletion_cost_goes_later() -> None:
    assert _first_of(_cost("101"), _cost("100")) == "b"
    assert _first_of(_cost("99"), _cost("100")) == "a"


@mirrors(
    "Pod Eviction Cost / should have a higher disruptionCost for a pod with a higher priority",
    "Pod Eviction Cost / should have a lower disruptionCost for a pod with a lower priority",
)
def test_priority_orders_candidates() -> None:
    assert _first_of({"priority": 1}, {}) == "b"
    assert _first_of({}, {"priority": -1}) == "b"


# --- Simulate Scheduling ----------------------------------------------------------------------------------------


@mirrors("Simulate Scheduling / should allow pods on deleting nodes to reschedule to uninitialized nodes")
def test_pod_of_a_candidate_moves_to_a_new_node_when_the_others_are_going() -> None:
    """Nine nodes already being disrupted: the drifted node's 2-CPU pod is simulated onto a replacement."""
    going = [managed_node(f"g{i}", taints=[taint("karpenter.sh/disrupted")]) for i in range(9)]
    p = pod("big", node="n1", cpu="2", memory="100Mi")
    out = run_round([_pool("100%"), *going, _drifted(pods=[p])])
    assert disrupted(out) == ["n1"]
    assert out["command"]["moves"] == [{"pod": "default/big", "replacement": 0}]


@pytest.mark.parametrize("under_way", [0, 1, 2, 3])
@mirrors("Simulate Scheduling / should allow multiple replace operations to happen successively")
def test_successive_drift_replacements_until_the_budget_is_used(under_way: int) -> None:
    """Budget 3: each round replaces one more drifted node while the earlier ones are still being disrupted
    (their replacements launching); with three under way the fourth round does nothing."""
    objs: list[Obj | list[Obj]] = [_pool("3")]
    for i in range(5):
        p = pod(f"p{i}", node=f"n{i}", cpu="100m")
        if i < under_way:
            objs.append(_drifted(f"n{i}", pods=[p], taints=[taint("karpenter.sh/disrupted")]))
            objs.append(node_claim(node(f"r{i}"), initialized=""))
        else:
            objs.append(_drifted(f"n{i}", pods=[p]))
    out = run_round(objs)
    if under_way < 3:
        assert out["command"]["reason"] == "Drifted"
        assert disrupted(out)[0] not in {f"n{i}" for i in range(under_way)}
    else:
        assert out["command"] is None
        assert all("budget" in b["message"] for b in out["blocked"])


@mirrors("Simulate Scheduling / can replace node with a local PV (ignoring hostname affinity)")
def test_pod_with_local_volume_of_its_node_can_be_replaced() -> None:
    """A StatefulSet pod on a local PV pinned to its node's hostname: that affinity dies with the node and is
    ignored, so the node can still be consolidated."""
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "local-path"},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "local-pv"},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-path",
            "local": {"path": "/mnt/disks/ssd1"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}
                    ]
                }
            },
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-path",
            "volumeName": "local-pv",
            "resources": {"requests": {"storage": "10Gi"}},
        },
        "status": {"phase": "Bound"},
    }
    p = pod(
        "db-0",
        node="n1",
        cpu="100m",
        owner="StatefulSet",
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
    )
    out = run_round([base(), sc, pv, pvc, node_with([p])])
    assert disrupted(out) == ["n1"]
    assert out["command"]["decision"] == "replace"


def test_pod_that_cannot_leave_a_deleting_node_takes_no_room_in_the_simulation() -> None:
    """Pods of nodes already being deleted are placed first in a simulation, but not one a fully blocking PDB
    keeps where it is: here it would take the last room on "e", and "c"'s pod would need a new node."""
    stuck = pod("stuck", node="d", cpu="2", labels={"app": "db"})
    going = node_with([stuck], "d", taints=[taint("karpenter.sh/disrupted")])
    keeper = pod("keeper", node="e", cpu="1500m", annotations={DO_NOT_DISRUPT: "true"})
    mover = pod("mover", node="c", cpu="2")
    objs = [_pool("2"), going, node_with([keeper], "e"), node_with([mover], "c")]
    out = run_round([*objs, pdb("db", {"app": "db"}, max_unavailable=0)])
    assert disrupted(out) == ["c"]
    assert out["command"]["decision"] == "delete"
    assert out["command"]["moves"] == [{"pod": "default/mover", "node": "e"}]
    # without the PDB the stuck pod is on its way out too and takes that room first
    out = run_round(objs)
    assert out["command"] is None or out["command"]["moves"] != [{"pod": "default/mover", "node": "e"}]
