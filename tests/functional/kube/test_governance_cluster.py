"""`python -m nodeflow governance --cluster` against the real API server: the cluster seeded with
examples/governance gives the record the manifests give (policies listed from the cluster too)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from nodeflow.cli import main

if TYPE_CHECKING:
    from sandbox.controlplane.facade import RealKubeAPI

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "governance"
NOW = "2026-11-27T20:00:00Z"


def _record(*argv: str) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["governance", *argv, "-o", "json", "--now", NOW], out=out, err=err)
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def test_cluster_record_matches_the_manifests(server: RealKubeAPI, tmp_path: Path) -> None:
    docs = [d for f in sorted(EXAMPLE.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    for doc in sorted(docs, key=lambda d: d["kind"] != "Namespace"):  # namespaces first
        server.create(doc)
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    from_cluster = _record("--cluster", "--kubeconfig", kubeconfig)
    from_files = _record("-f", str(EXAMPLE))

    assert from_cluster["source"] == {"cluster": "current context"}
    assert from_cluster["access"]["policies"] == ["cost-caps", "gpu-access"]
    for key in ("nodePools", "nodeClasses", "capacity", "ceilings", "groupLimits", "pauses", "disruptionControls"):
        assert from_cluster[key] == from_files[key], key
    # The cluster has its own namespaces too (default, kube-system, ...): each the policies judge as any other.
    cluster_ns = {ns["namespace"]: ns for ns in from_cluster["access"]["namespaces"]}
    for ns in from_files["access"]["namespaces"]:
        mine = cluster_ns[ns["namespace"]]
        assert (mine["nodePools"], mine["resources"]) == (ns["nodePools"], ns["resources"])
        assert mine["labels"].items() >= ns["labels"].items()  # plus kubernetes.io/metadata.name
    gpu = {r["nodePool"]: r["reason"] for r in cluster_ns["kube-system"]["nodePools"]}["gpu"]
    assert gpu == "namespace kube-system may not use NodePool gpu: policy gpu-access"
    out, err = io.StringIO(), io.StringIO()
    assert main(["governance", "--cluster", "--kubeconfig", kubeconfig, "--now", NOW], out=out, err=err) == 0
    assert "| ml-exp | team=research | allowed | denied |" in out.getvalue()  # kubernetes.io/metadata.name not shown


def test_missing_kubeconfig_is_bad_input(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["governance", "--cluster", "--kubeconfig", str(tmp_path / "nope")], out=out, err=err)
    assert code == 2
    assert "--kubeconfig" in err.getvalue()
