"""Static NodePools (spec.replicas) in the disruption round: never emptied or consolidated, scaled down to their
replicas (not launched, then empty, then cheapest to disrupt; no budget), drift replaced by a NodeClaim of the
pool's template, expiration as for any node."""

from __future__ import annotations

import dataclasses

from nodeflow.api.core import Node
from nodeflow.api.karpenter import NodeClaim, NodePool
from nodeflow.api.template_hash import nodepool_hash
from nodeflow.disruption.model import Snapshot
from nodeflow.disruption.round import decide

from .builders import CATALOG, NOW, node, pod, pool, snapshot

ALL = [{"nodes": "100%"}]


def static(p: NodePool, replicas: int, limits: dict[str, str] | None = None) -> NodePool:
    body = p.model_dump(by_alias=True, exclude_none=True)
    body["spec"]["replicas"] = replicas
    if limits is not None:
        body["spec"]["limits"] = limits
    return NodePool.model_validate(body)


def launched(n: tuple[Node, NodeClaim], hashed: NodePool | None = None) -> tuple[Node, NodeClaim]:
    """``n`` with its NodeClaim's providerID (a launched instance), and its nodepool hash from ``hashed``."""
    node_obj, claim = n
    body = claim.model_dump(by_alias=True, exclude_none=True)
    body["status"]["providerID"] = f"aws:///us-east-1a/i-{node_obj.metadata.name}"
    if hashed is not None:
        body["metadata"]["annotations"] = {
            "karpenter.sh/nodepool-hash": nodepool_hash(hashed),
            "karpenter.sh/nodepool-hash-version": "v3",
        }
    return node_obj, NodeClaim.model_validate(body)


def unlaunched(name: str, pool_name: str = "general") -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool_name}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
        }
    )


def with_claims(snap: Snapshot, *claims: NodeClaim) -> Snapshot:
    state = dataclasses.replace(snap.state, node_claims=(*snap.state.node_claims, *claims))
    return dataclasses.replace(snap, state=state)


def test_static_nodes_are_neither_emptied_nor_consolidated() -> None:
    nodes = [launched(node("a", "m5.2xlarge")), launched(node("b", "m5.2xlarge")), launched(node("idle"))]
    pods = [pod("p1", "a"), pod("p2", "b"), pod("ds", "idle", owner="DaemonSet")]
    dynamic = pool(budgets=ALL)
    # control: the same nodes of a dynamic NodePool are emptied / consolidated
    assert decide(snapshot(nodes, pods, [dynamic]), CATALOG, NOW).command is not None
    result = decide(snapshot(nodes, pods, [static(dynamic, 3)]), CATALOG, NOW)
    assert result.command is None
    assert result.scale_downs == ()
    assert not [b for b in result.blocked if b.kind.value == "Unconsolidatable"]
    assert "scaleDowns" not in result.to_json()


def test_scale_down_order_not_launched_then_empty_then_cheapest_to_disrupt() -> None:
    nodes = [
        launched(node("busy-cheap")),
        launched(node("busy-dear")),
        launched(node("guarded")),
        launched(node("empty")),
    ]
    pods = [
        pod("c1", "busy-cheap"),
        pod("d1", "busy-dear", priority=1_000_000_000),
        pod("g1", "guarded", annotations={"karpenter.sh/do-not-disrupt": "true"}),
        pod("ds", "empty", owner="DaemonSet"),
    ]
    budgets = [{"nodes": "0"}]  # scale-down is not a voluntary disruption: no budget applies
    base = snapshot(nodes, pods, [static(pool(budgets=budgets), 1)])
    snap = with_claims(base, unlaunched("new-1"))
    result = decide(snap, CATALOG, NOW)
    # 5 active NodeClaims, replicas 1: 4 go
    assert [(s.node_claim, s.node, s.why) for s in result.scale_downs] == [
        ("new-1", None, "not launched"),
        ("empty-claim", "empty", "empty"),
        ("busy-cheap-claim", "busy-cheap", "lowest disruption cost"),
        ("busy-dear-claim", "busy-dear", "lowest disruption cost"),
    ]
    assert result.to_json()["scaleDowns"][0] == {
        "nodePool": "general",
        "nodeClaim": "new-1",
        "node": None,
        "why": "not launched",
    }
    # replicas 3: the two cheapest to lose
    snap3 = with_claims(snapshot(nodes, pods, [static(pool(), 3)]), unlaunched("new-1"))
    assert [s.node_claim for s in decide(snap3, CATALOG, NOW).scale_downs] == ["new-1", "empty-claim"]
    # a node being disrupted or deleted is not counted as active, nor chosen
    tainted = [launched(node("busy-cheap", taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]))]
    snap_t = snapshot([*tainted, *nodes[1:]], pods, [static(pool(), 2)])
    assert [s.node_claim for s in decide(snap_t, CATALOG, NOW).scale_downs] == ["empty-claim"]
    # at or under replicas: nothing
    assert decide(snapshot(nodes, pods, [static(pool(), 4)]), CATALOG, NOW).scale_downs == ()


def test_static_drift_replaces_with_a_node_of_the_pools_template() -> None:
    current = static(pool(budgets=ALL, labels={"team": "b"}), 2)
    old = static(pool(budgets=ALL, labels={"team": "a"}), 2)
    nodes = [launched(node("a"), hashed=old), launched(node("b"), hashed=current)]
    pods = [pod("p1", "a", cpu="6"), pod("p2", "b")]
    result = decide(snapshot(nodes, pods, [current]), CATALOG, NOW)
    command = result.command
    assert command is not None
    assert (command.method, command.reason.value, command.candidates) == ("static drift", "Drifted", ("a",))
    (replacement,) = command.replacements
    assert replacement.static
    assert replacement.pods == ()
    assert replacement.nodepool == "general"
    assert replacement.requirements.labels()["team"] == "b"
    assert command.moves == ()
    # above replicas: scaled down first, no drift replacement
    above = static(pool(budgets=ALL, labels={"team": "b"}), 1)
    result = decide(snapshot(nodes, pods, [above]), CATALOG, NOW)
    assert result.command is None
    assert [s.node_claim for s in result.scale_downs] == ["a-claim"]  # equal costs: by name
    # limits.nodes leaves no room for the replacement
    full = static(pool(budgets=ALL, labels={"team": "b"}), 2, limits={"nodes": "2"})
    assert decide(snapshot(nodes, pods, [full]), CATALOG, NOW).command is None
    roomy = static(pool(budgets=ALL, labels={"team": "b"}), 2, limits={"nodes": "3"})
    assert decide(snapshot(nodes, pods, [roomy]), CATALOG, NOW).command is not None
    # the Drifted budget holds it
    held = static(pool(budgets=[{"nodes": "0", "reasons": ["Drifted"]}], labels={"team": "b"}), 2)
    assert decide(snapshot(nodes, pods, [held]), CATALOG, NOW).command is None


def test_static_nodes_still_expire() -> None:
    nodes = [launched(node("old", expire_after="1h")), launched(node("young"))]
    result = decide(snapshot(nodes, [], [static(pool(), 2)]), CATALOG, NOW)
    assert [e.node for e in result.expirations] == ["old"]
    assert result.command is None
