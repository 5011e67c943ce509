"""consolidationPolicy Balanced through the disruption Lambda (moto, the real control plane): the nodes of
examples/disruption/balanced.yaml, whose replacements WhenEmptyOrUnderutilized would take, are left alone; each
gets an Unconsolidatable event with its score, and their NodeClaims are Consolidatable (Balanced consolidates
busy nodes, it only scores the moves)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from nodeflow.handlers import runtime
from sandbox.nodeflow import LocalNodeflow

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "disruption" / "balanced.yaml"


def test_balanced_rejects_marginal_replacements_in_the_lambda(local: LocalNodeflow) -> None:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    local.apply(docs)  # the NodePool "balanced" (the demo's EC2NodeClass), its two nodes and their pods
    runtime.runtime().clock = lambda: datetime.now(UTC) + timedelta(minutes=5)
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["command"] is None, result
    assert result["executed"] == [], result
    blocked = {b["node"]: b for b in result["blocked"]}
    assert set(blocked) == {"balanced-busy", "balanced-full"}, result["blocked"]
    for b in blocked.values():
        assert b["event"] == "Unconsolidatable"
        assert b["message"].startswith("Balanced consolidation rejected the replace"), b
        assert "NodePool balanced: score 0." in b["message"]
        assert "< threshold 0.50 (k: 2, savings " in b["message"]
    events = [e for e in local.kube_server.objects("v1", "Event", "default") if e.get("reason") == "Unconsolidatable"]
    assert {e["involvedObject"]["name"] for e in events if "Balanced" in e.get("message", "")} >= {
        "balanced-busy",
        "balanced-full",
    }
    for name in ("balanced-busy", "balanced-full"):
        claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", f"{name}-claim")
        conditions = {c["type"]: c for c in claim["status"]["conditions"]}
        assert conditions["Consolidatable"]["status"] == "True", conditions["Consolidatable"]


def test_the_lambdas_replace_bar_follows_consolidation_replace_bar_k(local: LocalNodeflow) -> None:
    """CONSOLIDATION_REPLACE_BAR_K=0 (no bar, as Karpenter; parsed in tests/unit/lifecycle/test_handler_inputs.py):
    under WhenEmptyOrUnderutilized the two nodes of the example are replaced together by one node, the move the
    default bar refuses (tests/functional/test_disrupt_balanced_cli.py)."""
    text = EXAMPLE.read_text().replace("consolidationPolicy: Balanced", "consolidationPolicy: WhenEmptyOrUnderutilized")
    local.apply([d for d in yaml.safe_load_all(text) if d])
    rt = runtime.runtime()
    rt.settings = dataclasses.replace(rt.settings, consolidation_replace_bar_k=0.0)  # as from the environment
    rt.clock = lambda: datetime.now(UTC) + timedelta(minutes=5)
    command = local.invoke("disruption", {"source": "aws.scheduler"})["result"]["command"]
    assert command is not None
    assert command["method"] == "multi-node consolidation"
    assert sorted(command["candidates"]) == ["balanced-busy", "balanced-full"]
    assert command["decision"] == "replace"
