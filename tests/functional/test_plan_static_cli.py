"""`python -m nodeflow plan` with a static NodePool (spec.replicas): its NodeClaims are listed with no pods, marked
static in the table and in -o json."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

from nodeflow.cli import main

STATIC = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: fixed}
spec:
  replicas: 2
  limits: {nodes: "10"}
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
"""


def run(path: Path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["plan", "-f", str(path), *args], out, err)
    return code, out.getvalue(), err.getvalue()


def test_plan_lists_a_static_pools_nodeclaims_without_pods(tmp_path: Path) -> None:
    path = tmp_path / "static.yaml"
    path.write_text(textwrap.dedent(STATIC))
    code, out, err = run(path, "-o", "json")
    assert code == 0, err
    result = json.loads(out)
    claims = result["nodeClaims"]
    assert [(c["nodePool"], c["static"], c["pods"], c["instanceTypes"][0]) for c in claims] == [
        ("fixed", True, [], "m6i.large")
    ] * 2
    assert result["totalPricePerHour"] == round(2 * claims[0]["pricePerHour"], 6)
    assert not any("nothing to plan" in w for w in result["warnings"])
    code, out, err = run(path)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line.startswith("fixed")]
    assert [r[:3] for r in rows] == [["fixed", "(static)", "m6i.large"]] * 2
    assert "TOTAL: 2 new node(s) for 0 pod(s)" in out
    assert "static: 2 of them keep static NodePools at spec.replicas (no pods needed)" in out


def registered(name: str, pool: str = "fixed") -> str:
    return f"""
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {name}-claim
  creationTimestamp: "2026-11-20T00:00:00Z"
  labels: {{karpenter.sh/nodepool: {pool}}}
spec:
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  requirements: []
status:
  nodeName: {name}
  providerID: aws:///us-east-1a/i-{name}
  conditions: [{{type: Initialized, status: "True", lastTransitionTime: "2026-11-20T00:01:00Z"}}]
---
apiVersion: v1
kind: Node
metadata:
  name: {name}
  creationTimestamp: "2026-11-20T00:00:00Z"
  labels:
    karpenter.sh/nodepool: {pool}
    karpenter.sh/initialized: "true"
    karpenter.sh/capacity-type: on-demand
    node.kubernetes.io/instance-type: m6i.large
    topology.kubernetes.io/zone: us-east-1a
spec: {{providerID: aws:///us-east-1a/i-{name}}}
status:
  allocatable: {{cpu: 1930m, memory: 7Gi, pods: "29"}}
"""


def test_disrupt_dry_run_scales_a_static_pool_down_and_never_empties_it(tmp_path: Path) -> None:
    busy_pod = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  nodeName: busy
  containers: [{name: c, image: x, resources: {requests: {cpu: 500m, memory: 256Mi}}}]
status: {phase: Running}
"""
    text = textwrap.dedent(STATIC).replace("replicas: 2", "replicas: 1")
    path = tmp_path / "cluster.yaml"
    path.write_text("\n---\n".join([text, registered("busy"), registered("idle"), busy_pod]))
    args = ["disrupt", "--dry-run", "-f", str(path), "--now", "2026-11-25T00:00:00Z"]
    out, err = io.StringIO(), io.StringIO()
    assert main([*args, "-o", "json"], out, err) == 0, err.getvalue()
    result = json.loads(out.getvalue())
    assert result["command"] is None  # the empty static node is not emptiness's
    assert result["scaleDowns"] == [{"nodePool": "fixed", "nodeClaim": "idle-claim", "node": "idle", "why": "empty"}]
    out = io.StringIO()
    assert main(args, out, err) == 0, err.getvalue()
    assert "SCALE DOWN idle-claim (static NodePool fixed, node idle, empty): terminate" in out.getvalue()


CEILING = """
---
apiVersion: nodeflow.io/v1alpha1
kind: NodeflowPolicy
metadata: {name: cost-caps}
spec:
  costCeilings:
    nodePools: [{name: fixed, maxPricePerHour: "0.15"}]
"""


def test_plan_stops_static_top_ups_at_a_ceiling_and_says_which(tmp_path: Path) -> None:
    path = tmp_path / "static.yaml"
    on_demand = textwrap.dedent(STATIC).replace(
        "        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}\n",
        "        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}\n"
        "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n",
    )
    assert on_demand != textwrap.dedent(STATIC)
    path.write_text(on_demand + CEILING)  # two on-demand m6i.large ($0.096) wanted, room for one
    why = (
        "static NodePool 'fixed' needs 2 NodeClaim(s) but only 1 can be made: NodeClaim of NodePool fixed "
        "($0.0960/hour) would cross the $/hour ceiling of NodePool fixed ($0.15/hour, $0.10 in use): policy cost-caps"
    )
    code, out, err = run(path, "-o", "json")
    assert code == 0, err
    result = json.loads(out)
    assert [(c["nodePool"], c["static"], c["instanceTypes"]) for c in result["nodeClaims"]] == [
        ("fixed", True, ["m6i.large"])
    ]
    assert why in result["warnings"]
    code, out, err = run(path)
    assert code == 0, err
    assert "TOTAL: 1 new node(s) for 0 pod(s), $0.0960/hour" in out
    assert f"warning: {why}" in err.splitlines()
