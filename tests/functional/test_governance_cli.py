"""`python -m nodeflow governance -f PATH` in-process (nodeflow.cli.main) on examples/governance: Markdown and JSON,
the permissions read from infra/, and bad input named."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from nodeflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "governance")
FREEZE = "2026-11-27T20:00:00Z"  # Friday 20:00 UTC: the quarter-end freeze (Fridays 18:00 for 60h) is open


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def record(*argv: str) -> dict[str, Any]:
    code, out, err = run("governance", "-f", EXAMPLE, "-o", "json", *argv)
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def test_json_record_of_the_example() -> None:
    rec = record("--now", FREEZE)
    assert rec["kind"] == "NodeflowGovernanceRecord"
    assert rec["generatedAt"] == FREEZE
    assert [p["name"] for p in rec["nodePools"]] == ["default", "gpu"]
    assert {c["name"]: c["role"] for c in rec["nodeClasses"]} == {
        "default": "KarpenterNodeRole-governance",
        "gpu": "KarpenterNodeRole-governance",
    }
    groups = {(g["nodePool"], g["capacityType"]): g["count"] for g in rec["capacity"]["byNodePool"]}
    assert groups == {("default", "spot"): 1, ("gpu", "on-demand"): 1}
    by_ns = {ns["namespace"]: ns for ns in rec["access"]["namespaces"]}
    gpu_for = {ns: {r["nodePool"]: r["reason"] for r in row["nodePools"]}["gpu"] for ns, row in by_ns.items()}
    assert gpu_for == {
        "ml-exp": "namespace ml-exp may not use NodePool gpu: policy gpu-access",
        "ml-prod": None,
        "shop": "namespace shop may not use NodePool gpu: policy gpu-access",
    }
    [freeze] = rec["pauses"]
    assert freeze["openUntil"] == "2026-11-30T06:00:00Z"
    assert {(c["scope"], c["name"]) for c in rec["ceilings"]} == {
        ("cluster", ""),
        ("nodePool", "gpu"),
        ("namespace", "ml-exp"),
    }
    assert [m["name"] for m in rec["disruptionControls"]["doNotDisrupt"]] == ["ml-prod/trainer-0"]
    assert rec["disruptionControls"]["pdbs"][0]["pods"] == ["shop/web-1", "shop/web-2"]
    perms = rec["permissions"]
    assert perms["available"] is True, perms["error"]
    launch = next(f for f in perms["lambdas"] if f["function"] == "launch")
    assert "ec2:CreateFleet" in {a for s in launch["statements"] for a in s["actions"]}
    assert perms["kubernetes"]["functionGroups"]["provisioner"][0] == "nodeflow-snapshot"
    assert any(r["name"] == "nodeflow-agent" for r in perms["kubernetes"]["agent"]["clusterRoles"])


def test_pause_closed_outside_the_window() -> None:
    [freeze] = record("--now", "2026-11-25T12:00:00Z")["pauses"]
    assert freeze["openUntil"] is None


def test_markdown_has_a_section_per_part() -> None:
    code, out, err = run("governance", "-f", EXAMPLE, "--now", FREEZE)
    assert code == 0, err
    for heading in (
        "## NodePools",
        "### NodePool gpu",
        "## EC2NodeClasses",
        "## Capacity and cost",
        "## Access under the NodeflowPolicies",
        "## Cost ceilings, group limits and pauses",
        "## Disruption controls",
        "## nodeflow's own permissions",
        "### AWS IAM (one role per Lambda function)",
        "### Kubernetes RBAC",
    ):
        assert f"\n{heading}\n" in out, heading
    assert (
        "| cost-caps | quarter-end-freeze | 0 18 * * 5 | 60h | provisioning, disruption | gpu | until 2026-11-30T06:00:00Z |"
        in out
    )
    assert "review: IMDS hop limit 2" in out


def test_bad_manifests_name_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text(
        "apiVersion: nodeflow.io/v1alpha1\nkind: NodeflowPolicy\nmetadata: {name: caps}\n"
        "spec:\n  costCeilings:\n    cluster: {maxPricePerHour: lots}\n"
    )
    code, out, err = run("governance", "-f", str(bad))
    assert code == 2
    assert out == ""
    assert str(bad) in err
    assert "maxPricePerHour" in err


def test_source_is_files_or_cluster_not_both() -> None:
    assert run("governance")[0] == 2
    code, _, err = run("governance", "-f", EXAMPLE, "--cluster")
    assert code == 2
    assert "not both" in err
    code, _, err = run("governance", "-f", EXAMPLE, "--now", "yesterday")
    assert code == 2
    assert "--now" in err
