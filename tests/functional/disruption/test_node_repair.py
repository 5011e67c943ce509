"""Node repair in the deployed path: the disruption Lambda (FEATURE_GATES NodeRepair=true) replaces a node whose
monitoring-agent condition has been False past its toleration, forcefully, through the real terminate workflow:
a PodDisruptionBudget that allows nothing does not hold the drain."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.handlers import runtime
from nodeflow.kube.client import NODES, PDBS, KubeClient
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution
from tests.functional.disruption.test_disruption_lambda import _execution, _launch, _pdb_allows, _settle, _wait
from tests.functional.emf import metric_records

STRATEGIC = "application/strategic-merge-patch+json"


def _sick(local: LocalNodeflow, claim: dict[str, Any], condition: str) -> tuple[str, KubeClient]:
    """The claim's node reports ``condition`` False since now; its pods (Ready: their kubelet runs them) are under a
    PDB allowing nothing (the disruption controller's status says so)."""
    kube = local.kube_server
    client = KubeClient(kube.api_client())
    node = claim["status"]["nodeName"]
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cond = {"type": condition, "status": "False", "reason": "Broken", "lastTransitionTime": since}
    client.patch(NODES, node, {"status": {"conditions": [cond]}}, subresource="status", content_type=STRATEGIC)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}},
    }
    client.create(PDBS, pdb, namespace="default")
    _wait(lambda: _pdb_allows(kube) == 0, what="the PDB status")
    return node, client


def _later(minutes: float) -> None:
    runtime.runtime().clock = lambda: datetime.now(UTC) + timedelta(minutes=minutes)


def test_an_unhealthy_node_is_replaced_forcefully(
    make_local: Callable[..., LocalNodeflow], capfd: pytest.CaptureFixture[str]
) -> None:
    local = make_local(env={"FEATURE_GATES": "NodeRepair=true"})
    claim = _launch(local, "web", 2)
    name = claim["metadata"]["name"]
    node, _ = _sick(local, claim, "NetworkingReady")

    _later(29)  # within NetworkingReady's 30 minutes: nothing yet
    early = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert early["repair"] == {"repaired": [], "repairsBlocked": []}, early
    assert local.terminate_executions() == []

    # a second unhealthy node of the same NodePool (not nodeflow's): 2 of 2 unhealthy, more than 20 %: blocked
    pool = claim["metadata"]["labels"]["karpenter.sh/nodepool"]
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    other = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "other", "labels": {"karpenter.sh/nodepool": pool}},
        "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": since}]},
    }
    local.apply([other])
    _later(31)
    blocked = local.invoke("disruption", {"source": "aws.scheduler"})["result"]["repair"]
    assert blocked["repaired"] == []
    assert [(b["node"], b["event"]) for b in blocked["repairsBlocked"]] == [(node, "NodeRepairBlocked")]
    assert "2 of 2 nodes of NodePool" in blocked["repairsBlocked"][0]["message"]
    assert local.terminate_executions() == []
    _wait(
        lambda: [e for e in local.kube_server.objects("v1", "Event") if e.get("reason") == "NodeRepairBlocked"],
        what="the NodeRepairBlocked event",
    )
    local.kube_server.delete("v1", "Node", "other")

    capfd.readouterr()
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["repair"]["repaired"] == [name], result
    emf = [m for m in metric_records(capfd.readouterr().out) if any(k.startswith("karpenter_nodeclaims_") for k in m)]
    disrupted = [m for m in emf if "karpenter_nodeclaims_disrupted_total" in m]
    assert [(m["reason"], m["nodepool"]) for m in disrupted] == [("unhealthy", pool)]
    unhealthy = [m for m in emf if "karpenter_nodeclaims_unhealthy_disrupted_total" in m]
    assert [m["condition"] for m in unhealthy] == ["networking_ready"]

    done = wait_for_execution(local.clients.sfn, _execution(local, name), timeout=60)
    assert done["status"] == "SUCCEEDED", local.trace(done["executionArn"]).render()
    assert '"Unhealthy"' in done["input"]
    history = local.clients.sfn.get_execution_history(executionArn=done["executionArn"])["events"]
    outputs = [
        json.loads(details["output"])
        for e in history
        for key, details in e.items()
        if key.startswith("lambdaFunctionSucceeded") and '"deadline"' in details.get("output", "")
    ]
    taint = outputs[0]
    assert taint["deadline"] is not None  # the termination timestamp: now
    # the PDB allowed no eviction, yet the node is gone: its pods were deleted for the termination timestamp
    assert name not in {c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")}
    assert node not in {n["metadata"]["name"] for n in local.kube_server.objects("v1", "Node")}
    # a second round does not repair it again
    again = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert again["repair"]["repaired"] == []
    _settle(local)


def test_without_the_gate_nothing_is_repaired(local: LocalNodeflow) -> None:
    claim = _launch(local, "web", 2)
    _sick(local, claim, "KernelReady")
    _later(60)
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["repair"] is None
    assert all(e["name"] != claim["metadata"]["name"] for e in local.terminate_executions())
    _settle(local)
