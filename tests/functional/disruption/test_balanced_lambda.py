"""consolidationPolicy Balanced through the disruption Lambda (moto, the real control plane): the nodes of
examples/disruption/balanced.yaml, whose replacements WhenEmptyOrUnderutilized would take, are left alone; each
gets an Unconsolidatable event with its score, and their NodeClaims are Consolidatable (Balanced consolidates
busy nodes, it only scores the moves)."""

from __future__ import annotations

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
