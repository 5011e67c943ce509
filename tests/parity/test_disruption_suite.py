"""Parity with Karpenter's disruption suite: candidate filtering, budget counting, eviction cost, simulation.

What is a candidate shows in ``disrupt --dry-run``: a node that is one may be disrupted (an empty one is
deleted by emptiness); one that is not is never in the command, and the ones Karpenter reports get a
DisruptionBlocked entry naming why. Graceful disruption (emptiness, consolidation) always respects
do-not-disrupt pods and PDBs; eventual disruption (drift) ignores them when the NodeClaim has a
terminationGracePeriod, which bounds how long they can hold the node.
"""

from __future__ import annotations

from typing import Any

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
def test_pod_blockers_hold_graceful_disruption_with_or_without_grace_period() -> None:
    """Consolidation (graceful) of a node with one small pod is held by a do-not-disrupt pod or a PDB allowing
    nothing, whether or not the NodeClaim has a terminationGracePeriod."""
    for kind, (pods, pdbs) in _pod_blockers().items():
        for tgp in (None, TGP):
            objs = node_with(pods)
            if tgp is not None:
                objs[1]["spec"]["terminationGracePeriod"] = tgp
            out = run_round([base(), objs, *pdbs])
            message = blocker(out, "n1")
            assert message is not None, (kind, tgp)
            assert disrupted(out) == [], (kind, tgp)


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
