"""Parity: when a NodeClaim becomes consolidatable (Karpenter's nodeclaim/disruption consolidation controller).

nodeflow keeps no Consolidatable condition in the loop of ``disrupt``: it applies the same timer each
round. A consolidatable empty node is deleted by emptiness; one that is not yet is left alone.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.parity._drift import ALL, command, world
from tests.parity.harness import NOW, Obj, ago, managed_node, node_pool
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/controllers/nodeclaim/disruption/consolidation_test.go"

NOT_EXPRESSIBLE: dict[str, str] = {
    "Underutilized / should ignore NodeClaims not managed by this instance of Karpenter": (
        "NodeClaims of another cloud provider's node class next to nodeflow's: nodeflow is the only "
        "provisioner of the cluster by design and judges every NodeClaim of its NodePools"
    ),
}


def _pool(after: str = "1m") -> Obj:
    return node_pool(disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": after, "budgets": ALL})


def _empty(**kw: Any) -> list[Obj]:
    return managed_node("n1", **kw)


def _deleted(objs: list[Obj], **kw: Any) -> bool:
    cmd = command(objs, **kw)
    return cmd is not None and cmd["candidates"] == ["n1"]


@mirrors("Underutilized / should mark NodeClaims as consolidatable")
def test_an_empty_node_past_consolidate_after_is_consolidated() -> None:
    objs = world([_pool()], _empty(claim_initialized=ago(hours=1)))
    assert _deleted(objs)


@mirrors("Underutilized / should mark NodeClaims as consolidatable based on the nodeclaim initialized time")
def test_without_a_pod_event_the_timer_counts_from_initialization() -> None:
    """Made two hours ago, initialized 30 s ago, no pod ever: consolidateAfter (1m) counts from initialization."""
    objs = world([_pool()], _empty(created=ago(hours=2), claim_initialized=ago(seconds=30)))
    assert not _deleted(objs)
    assert _deleted(objs, now=NOW + timedelta(seconds=31))


@mirrors("Underutilized / should remove the status condition from the nodeClaim when lastPodEvent is too recent")
def test_a_recent_pod_event_holds_the_node() -> None:
    objs = world([_pool()], _empty(claim_initialized=ago(hours=1)))
    claim = objs[-1]
    claim["status"]["lastPodEventTime"] = ago(seconds=20)
    assert not _deleted(objs)
    assert _deleted(objs, now=NOW + timedelta(seconds=41))


@mirrors("Underutilized / should remove the status condition from the nodeClaim when consolidateAfter is never")
def test_consolidate_after_never_never_consolidates() -> None:
    objs = world([_pool("Never")], _empty(claim_initialized=ago(hours=5)))
    assert not _deleted(objs)


@mirrors(
    "Underutilized / should remove the status condition from the nodeClaim when the nodeClaim initialization condition is unknown"
)
def test_an_initialization_still_unknown_is_not_consolidated() -> None:
    unknown = {"type": "Initialized", "status": "Unknown", "lastTransitionTime": ago(hours=1)}
    objs = world([_pool()], _empty(initialized=False, claim_initialized="", claim_conditions=[unknown]))
    assert not _deleted(objs)


@mirrors("Underutilized / should remove the status condition from the nodeClaim when the nodeClaim is not initialized")
def test_an_uninitialized_node_is_not_consolidated() -> None:
    objs = world([_pool()], _empty(initialized=False, claim_initialized=""))
    assert not _deleted(objs)
