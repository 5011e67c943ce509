"""`python -m nodeflow disrupt --dry-run` as a subprocess on examples/disruption (text and JSON)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "disruption"
NOW = "2026-11-21T12:00:00Z"


def disrupt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "functions")}
    return subprocess.run(
        [sys.executable, "-m", "nodeflow", "disrupt", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def scenario(name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    pool, case = EXAMPLES / "nodepool.yaml", EXAMPLES / f"{name}.yaml"
    return disrupt("--dry-run", "-f", str(pool), "-f", str(case), "--now", NOW, *extra)


def scenario_json(name: str) -> dict[str, Any]:
    proc = scenario(name, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_empty_node_is_deleted() -> None:
    result = scenario_json("empty")
    command = result["command"]
    assert command["reason"] == "Empty"
    assert command["decision"] == "delete"
    assert command["candidates"] == ["idle-1"]
    assert command["savedPerHour"] > 0
    text = scenario("empty").stdout
    assert "DELETE idle-1 (Empty, emptiness)" in text
    assert "saves" in text


def test_fragmented_cluster_is_consolidated() -> None:
    result = scenario_json("fragmented")
    command = result["command"]
    assert command["reason"] == "Underutilized"
    assert command["method"] == "multi-node consolidation"
    assert len(command["candidates"]) == 2
    moved = {m["pod"]: m for m in command["moves"]}
    assert set(moved) == {f"default/web-{n[-1]}" for n in command["candidates"]}
    assert command["savedPerHour"] > 0
    assert command["replacementsPricePerHour"] < command["candidatesPricePerHour"]
    text = scenario("fragmented").stdout
    assert "move default/web-" in text


def test_the_price_line_is_the_clusters_before_and_after_with_the_candidates_and_replacements() -> None:
    """empty.yaml: idle-1 (m5.2xlarge, empty) and busy-1 (c5.xlarge). Deleting idle-1 takes the cluster from both
    nodes' price to busy-1's; the candidates' and replacements' prices are labelled as such (the line used to read
    "$/hour: 0.3840 -> 0.0000", the candidate's price and the replacements', as if the cluster went to $0)."""
    from nodeflow.catalog.source import load_catalog

    prices = load_catalog("offline", "us-east-1").on_demand_prices
    idle, busy = prices["m5.2xlarge"], prices["c5.xlarge"]
    command = scenario_json("empty")["command"]
    assert command["clusterPricePerHourBefore"] == round(idle + busy, 6)
    assert command["clusterPricePerHourAfter"] == round(busy, 6)
    assert (command["candidatesPricePerHour"], command["replacementsPricePerHour"]) == (round(idle, 6), 0.0)
    assert command["savedPerHour"] == round(idle, 6)
    line = f"  cluster $/hour: {idle + busy:.4f} -> {busy:.4f} (saves {idle:.4f}: candidates {idle:.4f}, replacements 0.0000)"
    assert line in scenario("empty").stdout.splitlines()

    for case in ("fragmented", "drifted"):  # delete and replace: the fields add up
        command = scenario_json(case)["command"]
        saved = command["candidatesPricePerHour"] - command["replacementsPricePerHour"]
        assert abs(command["savedPerHour"] - saved) < 1e-5
        assert abs(command["clusterPricePerHourBefore"] - command["clusterPricePerHourAfter"] - saved) < 1e-5
        assert command["clusterPricePerHourAfter"] >= command["replacementsPricePerHour"]


def test_drifted_node_is_replaced() -> None:
    command = scenario_json("drifted")["command"]
    assert command["reason"] == "Drifted"
    assert command["decision"] == "replace"
    assert command["candidates"] == ["old-ami-1"]
    (replacement,) = command["replacements"]
    assert replacement["nodePool"] == "general"
    assert command["moves"] == [{"pod": "default/batch-0", "replacement": 0}]
    assert "REPLACE old-ami-1 (Drifted, drift)" in scenario("drifted").stdout


def test_expired_nodes_are_listed() -> None:
    result = scenario_json("drifted")
    assert result["expirations"] == []
    later = disrupt("--dry-run", "-f", str(EXAMPLES), "--now", "2027-01-01T00:00:00Z", "-o", "json")
    assert later.returncode == 0, later.stderr
    expired = {e["node"] for e in json.loads(later.stdout)["expirations"]}
    assert {"idle-1", "frag-1", "old-ami-1"} <= expired


def test_bad_input_names_the_problem() -> None:
    proc = disrupt("--dry-run", "-f", str(EXAMPLES), "--now", "yesterday")
    assert proc.returncode == 2
    assert "--now" in proc.stderr
    proc = disrupt("-f", str(EXAMPLES))
    assert proc.returncode == 2
    assert "--dry-run" in proc.stderr


def test_bad_manifest_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\n"
        "spec:\n  template:\n    spec:\n      requirements: []\n"
        "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}\n"
        "  disruption:\n    budgets: [{nodes: lots}]\n"
    )
    proc = disrupt("--dry-run", "-f", str(bad), "--now", NOW)
    assert proc.returncode == 2
    assert "bad.yaml" in proc.stderr
    assert "nodes" in proc.stderr


# A NodePool whose startup taint carries timeAdded, and the karpenter.sh/nodepool-hash Karpenter v1.14.1 writes on
# its NodeClaims: derived by hand-following hashstructure v2.0.2 (FormatV2, SlicesAsSets, IgnoreZeroValue, ZeroNil)
# over the template as Karpenter decodes it (metav1.Time in the Local zone, UTC in its container), with a throwaway
# script independent of nodeflow's code (no Go toolchain here to run upstream's). TIMED_BEFORE: the same template
# when the taint's timeAdded was 2026-03-01T00:00:00Z. Its EC2NodeClass is the examples' (nodepool.yaml).
TIMED_POOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: agents}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: 720h
      requirements: []
      startupTaints:
        - {key: example.com/agent-not-ready, effect: NoSchedule, timeAdded: "2026-01-01T00:00:00Z"}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: Never, budgets: [{nodes: "100%"}]}
"""
TIMED_HASH = "11489507403252514924"
TIMED_BEFORE = "15800420817386285674"


def timed_node(name: str, nodepool_hash: str) -> str:
    """A busy node of NodePool agents whose NodeClaim carries ``nodepool_hash`` (hash version v3)."""
    return f"""
---
apiVersion: v1
kind: Node
metadata:
  name: {name}
  creationTimestamp: "2026-11-20T08:00:00Z"
  labels:
    karpenter.sh/nodepool: agents
    karpenter.sh/initialized: "true"
    karpenter.sh/capacity-type: on-demand
    node.kubernetes.io/instance-type: c5.xlarge
    topology.kubernetes.io/zone: us-east-1a
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: {name}
status:
  capacity: {{cpu: "4", memory: 8Gi, pods: "58"}}
  allocatable: {{cpu: "3800m", memory: 6Gi, pods: "58"}}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {name}-claim
  creationTimestamp: "2026-11-20T08:00:00Z"
  labels: {{karpenter.sh/nodepool: agents}}
  annotations: {{karpenter.sh/nodepool-hash: "{nodepool_hash}", karpenter.sh/nodepool-hash-version: v3}}
spec:
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  requirements:
    - {{key: node.kubernetes.io/instance-type, operator: In, values: [c5.xlarge]}}
    - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
status:
  nodeName: {name}
  imageID: ami-0new
  conditions:
    - {{type: Initialized, status: "True", lastTransitionTime: "2026-11-20T08:01:00Z"}}
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}-job
  namespace: default
  creationTimestamp: "2026-11-20T09:00:00Z"
spec:
  nodeName: {name}
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: "3", memory: 4Gi}}}}}}]
status: {{phase: Running}}
"""


def test_a_taint_time_is_hashed_as_karpenter_hashes_it(tmp_path: Path) -> None:
    """A NodeClaim Karpenter made from a NodePool with a taint's timeAdded is not drifted; one made before that
    timeAdded changed is (and judging it, legacy-hash fallback included, does not fail on the time)."""
    same = tmp_path / "same.yaml"
    same.write_text(TIMED_POOL + timed_node("by-karpenter", TIMED_HASH))
    proc = disrupt("--dry-run", "-f", str(EXAMPLES / "nodepool.yaml"), "-f", str(same), "--now", NOW, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["command"] is None
    changed = tmp_path / "changed.yaml"
    changed.write_text(TIMED_POOL + timed_node("by-karpenter", TIMED_HASH) + timed_node("older", TIMED_BEFORE))
    proc = disrupt("--dry-run", "-f", str(EXAMPLES / "nodepool.yaml"), "-f", str(changed), "--now", NOW, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    command = json.loads(proc.stdout)["command"]
    assert (command["reason"], command["candidates"]) == ("Drifted", ["older"])
    text = disrupt("--dry-run", "-f", str(EXAMPLES / "nodepool.yaml"), "-f", str(changed), "--now", NOW)
    assert text.returncode == 0, text.stderr
    assert "REPLACE older (Drifted, drift)" in text.stdout or "DELETE older (Drifted, drift)" in text.stdout
