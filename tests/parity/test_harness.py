"""The harness itself: what it builds is read by the real CLI as a user's YAML would be."""

from __future__ import annotations

from tests.parity.harness import disrupt, explain, managed_node, node_class, node_pool, plan, pod, run


def test_a_pending_pod_gets_a_node_claim_and_an_explanation() -> None:
    world = [node_class(), node_pool(), pod("web", cpu="2", memory="1Gi")]
    result = plan(world)
    claim = result.claim_of("web")
    assert claim is not None
    assert claim["nodePool"] == "default"
    assert explain(world, "default/web")["placement"] is not None


def test_an_empty_managed_node_is_a_disruption_candidate() -> None:
    world = [node_class(), node_pool(), managed_node("idle", claim_initialized="2026-11-21T09:00:00Z")]
    command = disrupt(world)["command"]
    assert command is not None
    assert command["reason"] == "Empty"
    assert command["candidates"] == ["idle"]


def test_bad_manifests_exit_2_naming_the_field() -> None:
    bad = node_pool()
    bad["spec"]["weight"] = 1000
    code, _, err = run("plan", [node_class(), bad, pod("web")])
    assert code == 2
    assert "weight" in err
