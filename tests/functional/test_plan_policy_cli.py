"""`python -m nodeflow plan` / `explain` with NodeflowPolicy manifests (-f): a denial, a pause and a ceiling are
the reasons, where other per-NodePool reasons are (table, text and -o json); a policy naming an unknown NodePool
is a warning; --now decides pause windows."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

from nodeflow.cli import main

MANIFESTS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  weight: 50
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g5]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: v1
kind: Namespace
metadata: {name: ml-prod, labels: {team: ml}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ml-exp, labels: {team: research}}
---
apiVersion: nodeflow.io/v1alpha1
kind: NodeflowPolicy
metadata: {name: gpu-access}
spec:
  nodePoolAccess:
    - nodePools: [gpu]
      namespaceSelector: {matchLabels: {team: ml}}
  resourceAccess:
    - resources: [nvidia.com/gpu]
      namespaceSelector: {matchLabels: {team: ml}}
---
apiVersion: nodeflow.io/v1alpha1
kind: NodeflowPolicy
metadata: {name: cost-caps}
spec:
  costCeilings:
    namespaces: [{name: ml-prod, maxPricePerHour: "1.50"}]
  pauses:
    - {name: freeze, schedule: "0 18 * * 5", duration: 60h, provisioning: true, nodePools: [gpu, batch]}
"""


def pod(name: str, ns: str, gpus: int = 0) -> str:
    extra = f", nvidia.com/gpu: '{gpus}'" if gpus else ""
    return f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}}}
spec:
  containers:
    - name: c
      image: x
      resources:
        requests: {{cpu: "1", memory: 2Gi{extra}}}
status: {{phase: Pending}}
"""


PODS = (
    pod("notebook", "ml-exp", gpus=1)
    + pod("web", "ml-exp")
    + pod("train-0", "ml-prod", 1)
    + pod("train-1", "ml-prod", 1)
)
TUESDAY = "2026-11-24T12:00:00Z"
FRIDAY_NIGHT = "2026-11-27T20:00:00Z"


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(MANIFESTS) + PODS)
    return path


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out, err)
    return code, out.getvalue(), err.getvalue()


def test_plan_json_gives_denials_and_the_ceiling_as_reasons(manifests: Path) -> None:
    code, out, err = run("plan", "-f", str(manifests), "-o", "json", "--now", TUESDAY)
    assert code == 0, err
    result = json.loads(out)
    placed = {p: c["nodePool"] for c in result["nodeClaims"] for p in c["pods"]}
    # a g5.xlarge is $1.006/hour: ml-prod's $1.50 ceiling holds one GPU node; ml-exp may use only general
    assert placed == {"ml-exp/web": "general", "ml-prod/train-0": "gpu"}
    unschedulable = {pod: u["reasons"] for u in result["unschedulable"] for pod in u["pods"]}
    assert unschedulable["ml-exp/notebook"] == {
        "general": "namespace ml-exp may not request nvidia.com/gpu: policy gpu-access",
        "gpu": "namespace ml-exp may not use NodePool gpu: policy gpu-access",
    }
    assert unschedulable["ml-prod/train-1"]["gpu"] == (
        "NodeClaim of NodePool gpu ($1.0060/hour) would cross the $/hour ceiling of namespace ml-prod "
        "($1.50/hour, $1.01 in use): policy cost-caps"
    )
    assert (
        "NodeflowPolicy 'cost-caps' names NodePool 'batch' (pauses freeze), which does not exist" in result["warnings"]
    )


def test_plan_table_and_explain_text_and_json(manifests: Path) -> None:
    code, out, err = run("plan", "-f", str(manifests), "--now", TUESDAY)
    assert code == 0, err
    assert "    gpu: namespace ml-exp may not use NodePool gpu: policy gpu-access" in out
    assert "warning: NodeflowPolicy 'cost-caps' names NodePool 'batch'" in err
    code, out, err = run("explain", "ml-exp/notebook", "-f", str(manifests), "--now", TUESDAY)
    assert code == 0, err
    assert out.splitlines() == [
        "pod ml-exp/notebook: cannot be scheduled",
        "  general: namespace ml-exp may not request nvidia.com/gpu: policy gpu-access",
        "  gpu: namespace ml-exp may not use NodePool gpu: policy gpu-access",
    ]
    code, out, err = run("explain", "ml-exp/web", "-f", str(manifests), "-o", "json", "--now", TUESDAY)
    assert code == 0, err
    why = json.loads(out)
    assert why["nodePools"]["gpu"] == "namespace ml-exp may not use NodePool gpu: policy gpu-access"
    assert why["placement"].endswith("(NodePool general)")


def test_now_opens_the_pause_window_and_a_bad_now_is_refused(manifests: Path) -> None:
    code, out, err = run("explain", "ml-prod/train-0", "-f", str(manifests), "-o", "json", "--now", FRIDAY_NIGHT)
    assert code == 0, err
    assert json.loads(out)["nodePools"]["gpu"] == (
        "provisioning paused for NodePool gpu by policy cost-caps: window freeze (0 18 * * 5 for 60h) "
        "until 2026-11-30T06:00:00Z"
    )
    code, out, err = run("plan", "-f", str(manifests), "--now", "friday")
    assert code == 2
    assert "error: --now: 'friday' is not an RFC 3339 time" in err


def test_star_means_every_nodepool_in_plan_and_explain(tmp_path: Path) -> None:
    """access for ml-prod only on ["*"]: a pod of another namespace gets no NodeClaim, each NodePool says why."""
    star = """
---
apiVersion: nodeflow.io/v1alpha1
kind: NodeflowPolicy
metadata: {name: prod-only}
spec:
  nodePoolAccess:
    - {nodePools: ["*"], namespaces: [ml-prod]}
"""
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(MANIFESTS) + star + pod("web", "ml-exp") + pod("api", "ml-prod"))
    code, out, err = run("plan", "-f", str(path), "-o", "json", "--now", TUESDAY)
    assert code == 0, err
    result = json.loads(out)
    assert [p for c in result["nodeClaims"] for p in c["pods"]] == ["ml-prod/api"]
    assert {p: u["reasons"] for u in result["unschedulable"] for p in u["pods"]} == {
        "ml-exp/web": {
            "general": "namespace ml-exp may not use NodePool general: policy prod-only",
            "gpu": "namespace ml-exp may not use NodePool gpu: policy gpu-access",  # the first policy denying it
        }
    }
    assert not [w for w in result["warnings"] if "'*'" in w]
    code, out, err = run("explain", "ml-exp/web", "-f", str(path), "--now", TUESDAY)
    assert code == 0, err
    assert "  general: namespace ml-exp may not use NodePool general: policy prod-only" in out.splitlines()


@pytest.mark.parametrize("duration", ["20000000h", "99999999999h"])
def test_a_window_too_long_to_evaluate_is_an_error_naming_the_field(manifests: Path, duration: str) -> None:
    manifests.write_text(manifests.read_text().replace("duration: 60h", f"duration: {duration}"))
    for command in (("plan",), ("explain", "ml-prod/train-0")):
        code, out, err = run(*command, "-f", str(manifests), "--now", TUESDAY)
        assert code == 2, (out, err)
        assert err.startswith("error: "), err
        assert (
            f"(NodeflowPolicy/cost-caps): spec.pauses[0].duration: '{duration}' is longer than 8784h (366 days)" in err
        )
