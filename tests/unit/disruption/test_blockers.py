from __future__ import annotations

from datetime import timedelta

from nodeflow.disruption.model import BlockKind
from nodeflow.disruption.round import decide

from .builders import CATALOG, NOW, node, pdb, pod, pool, snapshot

ALL = [{"nodes": "100%"}]


def _one(nodes: list, pods: list, **kw: object) -> tuple:  # type: ignore[type-arg]
    result = decide(snapshot(nodes, pods, pools=[pool(budgets=ALL)], **kw), CATALOG, NOW)  # type: ignore[arg-type]
    return result.command, result.blocked


def test_do_not_disrupt_pod_protects_its_node() -> None:
    command, blocked = _one([node("a")], [pod("p", "a", annotations={"karpenter.sh/do-not-disrupt": "true"})])
    assert command is None
    assert blocked[0].kind is BlockKind.BLOCKED
    assert "pod default/p" in blocked[0].message


def test_do_not_disrupt_duration_runs_out() -> None:
    """A duration counts from the pod's status.startTime (not its creation); without one it protects."""
    started = (NOW - timedelta(minutes=30)).isoformat()
    created = (NOW - timedelta(days=2)).isoformat()
    still = pod("p", "a", annotations={"karpenter.sh/do-not-disrupt": "1h"}, created=created, started=started)
    assert _one([node("a")], [still])[0] is None
    over = pod("p", "a", annotations={"karpenter.sh/do-not-disrupt": "10m"}, created=created, started=started)
    assert _one([node("a")], [over])[0] is not None
    unknown = pod("p", "a", annotations={"karpenter.sh/do-not-disrupt": "10m"}, created=created)
    assert _one([node("a")], [unknown])[0] is None


def test_do_not_disrupt_node() -> None:
    command, blocked = _one([node("a", node_annotations={"karpenter.sh/do-not-disrupt": "true"})], [])
    assert command is None
    assert "node a" in blocked[0].message


def test_pdb_refusing_eviction_blocks() -> None:
    pods = [pod("p", "a", labels={"app": "db"}), pod("q", "b")]
    command, blocked = _one([node("a"), node("b")], pods, pdbs=[pdb({"app": "db"}, 0)])
    assert command is not None
    assert "a" not in command.candidates
    assert any(b.node == "a" and "PodDisruptionBudget" in b.message for b in blocked)
    command, _ = _one([node("a")], [pod("p", "a", labels={"app": "db"})], pdbs=[pdb({"app": "db"}, 1)])
    assert command is not None


def test_not_initialized_node_is_blocked() -> None:
    command, blocked = _one([node("a", initialized=False)], [])
    assert command is None
    assert "not initialized" in blocked[0].message


def test_nodes_being_deleted_are_left_alone() -> None:
    command, blocked = _one([node("a", deleting=True)], [])
    assert command is None
    assert blocked == ()
    tainted = node("b", taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}])
    command, blocked = _one([tainted], [])
    assert command is None
    assert blocked == ()


def test_daemonset_pod_with_do_not_disrupt_blocks() -> None:
    """Never evicted, but its do-not-disrupt annotation still holds the node (Karpenter's rule)."""
    ds = pod("ds", "a", "100m", "64Mi", owner="DaemonSet", annotations={"karpenter.sh/do-not-disrupt": "true"})
    command, blocked = _one([node("a")], [ds])
    assert command is None
    assert "pod default/ds" in blocked[0].message


def test_do_not_disrupt_node_claim_and_unparsable_value() -> None:
    command, blocked = _one([node("a", claim_annotations={"karpenter.sh/do-not-disrupt": "true"})], [])
    assert command is None
    assert "NodeClaim a-claim" in blocked[0].message
    odd = pod("p", "a", annotations={"karpenter.sh/do-not-disrupt": "a while"})
    command, blocked = _one([node("a")], [odd])
    assert command is not None  # a value that is neither "true" nor a positive duration protects nothing
    assert blocked == ()
