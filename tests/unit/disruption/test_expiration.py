from __future__ import annotations

from nodeflow.disruption.round import decide

from .builders import CATALOG, NOW, node, pod, pool, snapshot


def test_expired_nodes_are_terminated_regardless_of_budgets_and_blockers() -> None:
    nodes = [
        node("old", expire_after="24h", created="2026-11-19T00:00:00Z"),
        node(
            "older",
            expire_after="1h",
            created="2026-11-21T10:00:00Z",
            node_annotations={"karpenter.sh/do-not-disrupt": "true"},
        ),
        node("young", expire_after="720h"),
        node("forever", expire_after="Never", created="2020-01-01T00:00:00Z"),
    ]
    pods = [pod(f"p-{n.metadata.name}", n.metadata.name) for n, _ in nodes]
    result = decide(snapshot(nodes, pods, pools=[pool(budgets=[{"nodes": "0"}])]), CATALOG, NOW)
    assert [e.node for e in result.expirations] == ["old", "older"]
    assert result.expirations[0].node_claim == "old-claim"
    assert result.command is None


def test_expired_nodes_are_not_also_voluntary_candidates() -> None:
    nodes = [node("old", expire_after="1h")]
    result = decide(snapshot(nodes, [], pools=[pool(budgets=[{"nodes": "100%"}])]), CATALOG, NOW)
    assert [e.node for e in result.expirations] == ["old"]
    assert result.command is None
