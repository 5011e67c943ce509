"""`python -m nodeflow disrupt --dry-run --node-repair` as a subprocess: the `repairs` key (node, condition, since)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.functional.test_disrupt_cli import EXAMPLES, disrupt

NOW = "2026-11-21T12:00:00Z"


def _node(name: str, conditions: list[dict[str, str]]) -> list[dict[str, Any]]:
    pid = f"aws:///us-east-1a/i-{abs(sum(map(ord, name))):017x}"
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T08:01:00Z"}
    conds = [ready] if not any(c["type"] == "Ready" for c in conditions) else []
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-11-20T08:00:00Z",
            "labels": {
                "karpenter.sh/nodepool": "general",
                "karpenter.sh/initialized": "true",
                "karpenter.sh/capacity-type": "on-demand",
                "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": "us-east-1a",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
            },
        },
        "spec": {"providerID": pid},
        "status": {
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
            "conditions": conds + conditions,
        },
    }
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": f"{name}-claim",
            "creationTimestamp": "2026-11-20T08:00:00Z",
            "labels": {"karpenter.sh/nodepool": "general"},
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}],
        },
        "status": {
            "nodeName": name,
            "providerID": pid,
            "imageID": "ami-0new",
            "conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-20T08:01:00Z"}],
        },
    }
    return [node, claim]


def _cluster(tmp_path: Path, sick: dict[str, list[dict[str, str]]], healthy: int) -> Path:
    docs: list[dict[str, Any]] = []
    for name, conds in sick.items():
        docs += _node(name, conds)
    for i in range(healthy):
        docs += _node(f"fine-{i}", [])
    path = tmp_path / "cluster.yaml"
    path.write_text("\n---\n".join(json.dumps(d) for d in docs))
    return path


def _run(path: Path, *extra: str) -> Any:
    proc = disrupt("--dry-run", "-f", str(EXAMPLES / "nodepool.yaml"), "-f", str(path), "--now", NOW, *extra)
    assert proc.returncode == 0, proc.stderr
    return proc


SICK = {
    "lost-1": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-21T11:20:00Z"}],  # 40 min
    "gpu-1": [{"type": "AcceleratedHardwareReady", "status": "False", "lastTransitionTime": "2026-11-21T11:55:00Z"}],
}


def test_node_repair_lists_due_nodes_under_repairs(tmp_path: Path) -> None:
    path = _cluster(tmp_path, SICK, healthy=8)  # 2 unhealthy of 10: allowed
    out = json.loads(_run(path, "--node-repair", "-o", "json").stdout)
    assert out["repairs"] == [
        {
            "node": "lost-1",
            "nodeClaim": "lost-1-claim",
            "nodePool": "general",
            "condition": "Ready",
            "status": "Unknown",
            "since": "2026-11-21T11:20:00+00:00",
            "tolerationSeconds": 1800,
        }
    ]  # gpu-1: 5 of its 10 minutes so far
    assert out["repairsBlocked"] == []
    text = _run(path, "--node-repair").stdout
    assert "REPAIR lost-1 (NodeClaim lost-1-claim): Ready=Unknown since 2026-11-21T11:20:00+00:00" in text
    assert "REPAIR gpu-1" not in text
    assert "repairs" not in json.loads(_run(path, "-o", "json").stdout)  # the gate is off by default


def test_node_repair_is_blocked_past_twenty_percent(tmp_path: Path) -> None:
    path = _cluster(tmp_path, SICK, healthy=3)  # 2 unhealthy of 5: 1 allowed
    out = json.loads(_run(path, "--node-repair", "-o", "json").stdout)
    assert out["repairs"] == []
    (blocked,) = out["repairsBlocked"]
    assert (blocked["node"], blocked["event"]) == ("lost-1", "NodeRepairBlocked")
    assert "2 of 5 nodes of NodePool general" in blocked["message"]
    assert "NodeRepairBlocked lost-1" in _run(path, "--node-repair").stdout
