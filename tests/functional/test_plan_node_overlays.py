"""`plan -f` reads NodeOverlay manifests (karpenter.sh/v1alpha1): prices and capacities in the plan reflect them."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from nodeflow.cli import main
from tests.functional.test_plan_cli import GENERAL, deployment, write

POD_FUSE = """
apiVersion: v1
kind: Pod
metadata: {name: fuse, namespace: default}
spec:
  containers:
    - name: main
      image: example
      resources: {requests: {cpu: "1", memory: 1Gi}, limits: {smarter-devices/fuse: "1"}}
"""


def overlay(name: str, spec: str) -> str:
    return f"""
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {{name: {name}}}
spec:
{spec}
"""


def run(*paths: Path, output: str = "json") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["plan", *[a for p in paths for a in ("-f", str(p))], "-o", output], out, err)
    return code, out.getvalue(), err.getvalue()


def plan_json(*paths: Path) -> dict[str, Any]:
    code, out, err = run(*paths)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def test_price_adjustment_changes_prices_and_choice(tmp_path: Path) -> None:
    base = write(tmp_path, "base.yaml", GENERAL, deployment("web", 1, "1", "1Gi"))
    before = plan_json(base)
    (claim,) = before["nodeClaims"]
    chosen = claim["instanceTypes"][0]
    price = claim["pricePerHour"]

    plus = write(
        tmp_path,
        "plus.yaml",
        overlay("ten-percent", "  requirements: [{key: karpenter.sh/nodepool, operator: In, values: [general]}]\n"
                "  priceAdjustment: \"+10%\""),
    )  # fmt: skip
    after = plan_json(base, plus)
    (claim,) = after["nodeClaims"]
    assert claim["instanceTypes"][0] == chosen
    assert claim["pricePerHour"] == round(price * 1.1, 6)
    assert after["totalPricePerHour"] == round(price * 1.1, 6)
    assert after["warnings"] == before["warnings"]

    # The chosen type made dearer by an absolute amount: another type is cheaper now.
    dear = write(
        tmp_path,
        "dear.yaml",
        overlay("dear", f"  requirements: [{{key: node.kubernetes.io/instance-type, operator: In, values: [{chosen}]}}]\n"
                "  priceAdjustment: \"+0.5\"\n  weight: 5"),
    )  # fmt: skip
    (claim,) = plan_json(base, dear)["nodeClaims"]
    assert claim["instanceTypes"][0] != chosen
    assert claim["pricePerHour"] <= price + 0.5

    # price replaces: the chosen type at 0.001/hour stays the choice, at that price; the table shows it too.
    fixed = write(
        tmp_path,
        "fixed.yaml",
        overlay("fixed", f"  requirements: [{{key: node.kubernetes.io/instance-type, operator: In, values: [{chosen}]}}]\n"
                "  price: \"0.001\""),
    )  # fmt: skip
    (claim,) = plan_json(base, fixed)["nodeClaims"]
    assert (claim["instanceTypes"][0], claim["pricePerHour"]) == (chosen, 0.001)
    code, table, err = run(base, fixed, output="table")
    assert code == 0, err
    assert "0.0010" in table


def test_capacity_overlay_lets_a_pod_requesting_an_extended_resource_schedule(tmp_path: Path) -> None:
    base = write(tmp_path, "base.yaml", GENERAL, POD_FUSE)
    (unschedulable,) = plan_json(base)["unschedulable"]
    assert unschedulable["pods"] == ["default/fuse"]
    fuse = write(
        tmp_path,
        "fuse.yaml",
        overlay("fuse", "  requirements: [{key: karpenter.k8s.aws/instance-category, operator: In, values: [m]}]\n"
                "  capacity: {smarter-devices/fuse: \"4\"}"),
    )  # fmt: skip
    result = plan_json(base, fuse)
    assert result["unschedulable"] == []
    (claim,) = result["nodeClaims"]
    assert all(t.startswith("m") for t in claim["instanceTypes"])
    assert claim["requests"]["smarter-devices/fuse"] == "1"


def test_conflicting_overlay_is_reported_and_not_applied(tmp_path: Path) -> None:
    base = write(tmp_path, "base.yaml", GENERAL, deployment("web", 1, "1", "1Gi"))
    price = plan_json(base)["nodeClaims"][0]["pricePerHour"]
    both = write(
        tmp_path,
        "both.yaml",
        overlay("a-plus", '  requirements: []\n  priceAdjustment: "+100%"\n  weight: 7'),
        overlay("b-minus", '  requirements: []\n  priceAdjustment: "-50%"\n  weight: 7'),
    )
    result = plan_json(base, both)
    assert result["nodeClaims"][0]["pricePerHour"] == round(price * 0.5, 6)
    assert "NodeOverlay 'a-plus' is not applied (Conflict): conflict with another overlay" in result["warnings"]


def test_invalid_overlay_is_a_manifest_error_naming_the_field(tmp_path: Path) -> None:
    base = write(tmp_path, "base.yaml", GENERAL, deployment("web", 1, "1", "1Gi"))
    bad = write(
        tmp_path,
        "bad.yaml",
        overlay("bad", '  requirements: []\n  priceAdjustment: "10%"'),
        overlay("worse", '  requirements: []\n  price: "1"\n  priceAdjustment: "+1"'),
        overlay("cpu", '  requirements: []\n  capacity: {cpu: "4"}'),
    )
    code, _, err = run(base, bad)
    assert code != 0
    assert "document 0 (NodeOverlay/bad): spec.priceAdjustment: '10%' must be a signed price change" in err
    assert "document 1 (NodeOverlay/worse): spec.price: cannot set both 'price' and 'priceAdjustment'" in err
    assert "document 2 (NodeOverlay/cpu): spec.capacity[cpu]: invalid resource restricted" in err
    wrong_version = write(tmp_path, "v1.yaml", overlay("v", "  requirements: []").replace("v1alpha1", "v1"))
    code, _, err = run(base, wrong_version)
    assert code != 0
    assert "apiVersion: NodeOverlay must be karpenter.sh/v1alpha1, got karpenter.sh/v1" in err
