"""The disruption Lambda against the real workflows on the real control plane: a ReplicaSet scaled down leaves an
empty node, which one round (after consolidateAfter) terminates through the terminate workflow; the pause switch
stops voluntary disruption; expired nodes are terminated whatever the switch says. The pods are real ReplicaSets'
(kube-scheduler binds them, the simulated kubelets run them); PodDisruptionBudget status is the disruption
controller's."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.api.labels import LABEL_INSTANCE_TYPE
from nodeflow.handlers import runtime
from sandbox.controlplane.facade import wait_for
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution
from tests.functional.emf import metric_records
from tests.realk8s.launched import launch_workload
from tests.realk8s.workloads import scale


def _wait(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    return wait_for(what, predicate, timeout)


TOGETHER = {  # all replicas on one node (required pod affinity to themselves by hostname)
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


AWAY_FROM_WEB = {  # never on a node with web pods: the batch node can be emptied on its own
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}
ON_DEMAND = {"karpenter.sh/capacity-type": "on-demand"}  # spot-to-spot consolidation is off by default


def _launch(local: LocalNodeflow, app: str, pods: int, cpu: str = "1", **spec: Any) -> dict[str, Any]:
    """One NodeClaim launched for ReplicaSet ``app``'s pods, which run on its node."""
    (claim,) = launch_workload(local, app, pods, cpu, "1Gi", **spec)
    return claim


def _later(minutes: float) -> None:
    """The handlers' clock, ``minutes`` ahead (consolidateAfter and expireAfter elapse without waiting)."""
    runtime.runtime().clock = lambda: datetime.now(UTC) + timedelta(minutes=minutes)


def _scale_down(local: LocalNodeflow, app: str, replicas: int = 0) -> list[str]:
    """ReplicaSet ``app`` scaled to ``replicas`` (its other pods gone); the names of the pods left."""
    scale(local.kube_server, app, replicas)
    return sorted(
        p["metadata"]["name"]
        for p in local.kube_server.objects("v1", "Pod", "default")
        if p["metadata"]["name"].startswith(f"{app}-")
    )


def _annotate(local: LocalNodeflow, pod: str, value: str | None) -> None:
    """Set (or, with None, remove) a pod's karpenter.sh/do-not-disrupt annotation."""
    patch = {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": value}}}
    local.kube_server.patch("v1", "Pod", pod, patch, "default")


def _patch_pool(local: LocalNodeflow, spec: dict[str, Any]) -> None:
    local.kube_server.patch("karpenter.sh/v1", "NodePool", "default", {"spec": spec})


def _pdb_allows(kube: Any) -> Any:
    """The web PodDisruptionBudget's status.disruptionsAllowed (None until the controller writes it)."""
    return (kube.get("policy/v1", "PodDisruptionBudget", "web", "default").get("status") or {}).get(
        "disruptionsAllowed"
    )


def _settle(local: LocalNodeflow) -> None:
    """Wait for every workflow the test started (nothing may keep writing into the next test's cluster)."""
    for arn in (local.replace_arn, local.terminate_arn, local.launch_arn):
        for e in local.clients.sfn.list_executions(stateMachineArn=arn)["executions"]:
            wait_for_execution(local.clients.sfn, e["executionArn"], timeout=90)


def _execution(local: LocalNodeflow, name: str) -> str:
    return f"{local.terminate_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def test_an_empty_node_is_terminated_after_consolidate_after(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    keep = _launch(local, "web", 2)
    empty = _launch(local, "batch", 2, affinity=AWAY_FROM_WEB)
    _scale_down(local, "batch")

    first = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert first["executed"] == []  # consolidateAfter (1m) has not elapsed since the node's last pod event

    _later(5)
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["command"]["reason"] == "Empty", result
    assert result["executed"] == [empty["metadata"]["name"]]
    # Karpenter's decision metric, as a CloudWatch EMF record with Karpenter's labels as dimensions
    emf = metric_records(capfd.readouterr().out, "karpenter_voluntary_disruption_decisions_total")
    assert [(m["decision"], m["reason"], m["consolidation_type"]) for m in emf] == [("delete", "empty", "empty")]
    done = wait_for_execution(local.clients.sfn, _execution(local, empty["metadata"]["name"]), timeout=60)
    assert done["status"] == "SUCCEEDED", local.trace(done["executionArn"]).render()
    names = {c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")}
    assert names == {keep["metadata"]["name"]}
    reasons = {e.get("reason") for e in local.kube_server.objects("v1", "Event", "default")}
    assert "DisruptionTerminating" in reasons


def test_the_pause_switch_stops_voluntary_disruption(local: LocalNodeflow) -> None:
    _launch(local, "web", 2)
    empty = _launch(local, "batch", 2, affinity=AWAY_FROM_WEB)
    _scale_down(local, "batch")
    _later(5)
    local.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "nodeflow-disruption", "namespace": "nodeflow"},
                "data": {"paused": "true", "reason": "incident 42"},
            },
        ]
    )
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["paused"] == "incident 42"
    assert result["executed"] == []
    assert result["command"] is None
    assert local.terminate_executions() == []
    # resumed: the ConfigMap says so (or is deleted)
    local.kube_server.delete("v1", "ConfigMap", "nodeflow-disruption", "nodeflow")
    resumed = local.invoke("disruption", {"Records": []})["result"]
    assert resumed["executed"] == [empty["metadata"]["name"]]
    _settle(local)


def test_expired_nodes_are_terminated_even_when_paused(local: LocalNodeflow) -> None:
    claim = _launch(local, "web", 1)
    local.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "nodeflow-disruption", "namespace": "nodeflow"},
                "data": {"paused": "true"},
            },
        ]
    )
    _later(721 * 60)  # expireAfter: 720h
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["expired"] == [claim["metadata"]["name"]]
    assert result["paused"] == "paused"
    done = wait_for_execution(local.clients.sfn, _execution(local, claim["metadata"]["name"]), timeout=60)
    assert done["status"] == "SUCCEEDED"
    assert '"Expired"' in done["input"]


def test_an_underused_node_is_replaced_by_a_cheaper_one(local: LocalNodeflow) -> None:
    old = _launch(local, "web", 4, cpu="1", affinity=TOGETHER, nodeSelector=ON_DEMAND)  # one node
    _scale_down(local, "web", 1)  # the Deployment scaled down to one replica
    _later(5)
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["command"] is not None, result
    assert result["command"]["reason"] == "Underutilized", result
    replacing = result["replacing"]
    assert replacing is not None, result
    (new,) = replacing["replacements"]
    assert [c["nodeClaim"] for c in replacing["candidates"]] == [old["metadata"]["name"]]
    arn = f"{local.replace_arn.replace(':stateMachine:', ':execution:', 1)}:{replacing['name']}"
    done = wait_for_execution(local.clients.sfn, arn, timeout=90)
    assert done["status"] == "SUCCEEDED", local.trace(arn).render()
    states = [s.name for s in local.trace(arn).states]
    assert states[-2:] == ["TerminateCandidates", "Replaced"]
    # the old node goes through the terminate workflow; the replacement stays
    term = wait_for_execution(local.clients.sfn, _execution(local, old["metadata"]["name"]), timeout=60)
    assert term["status"] == "SUCCEEDED"
    names = {c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")}
    assert names == {new}
    reasons = {e.get("reason") for e in local.kube_server.objects("v1", "Event", "default")}
    assert {"DisruptionLaunching", "DisruptionTerminating"} <= reasons


def test_a_failed_replacement_rolls_back_and_the_node_stays(local: LocalNodeflow) -> None:
    old = _launch(local, "web", 4, cpu="1", affinity=TOGETHER, nodeSelector=ON_DEMAND)
    _scale_down(local, "web", 1)
    _later(5)
    # no capacity for the replacement: its launch fails and CleanUp removes it
    original = local.dispatch.handlers[local.function_name("launch")]

    def everything_exhausted(event: Any, context: Any) -> Any:
        claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", event["nodeClaim"])
        types = next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == LABEL_INSTANCE_TYPE)
        local.faults.exhaust((t, z) for t in types for z in local.world.subnets)
        return original(event, context)

    local.dispatch.register(local.function_name("launch"), everything_exhausted)
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    replacing = result["replacing"]
    assert replacing is not None, result
    arn = f"{local.replace_arn.replace(':stateMachine:', ':execution:', 1)}:{replacing['name']}"
    done = wait_for_execution(local.clients.sfn, arn, timeout=90)
    assert done["status"] == "FAILED"
    assert done.get("error") == "ReplacementFailed" or "ReplacementFailed" in str(done)
    node = local.kube_server.get("v1", "Node", old["status"]["nodeName"])
    assert not any(t.get("key") == "karpenter.sh/disrupted" for t in node["spec"].get("taints") or [])
    names = {c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")}
    assert names == {old["metadata"]["name"]}
    assert all(e["name"] != old["metadata"]["name"] for e in local.terminate_executions())
    _settle(local)


def _underused(local: LocalNodeflow) -> tuple[dict[str, Any], str]:
    """One on-demand node left with one of its four pods: single-node consolidation would replace it."""
    node = _launch(local, "web", 4, cpu="1", affinity=TOGETHER, nodeSelector=ON_DEMAND)
    (pod,) = _scale_down(local, "web", 1)
    _later(5)
    return node, pod


def _events(local: LocalNodeflow, reason: str) -> list[str]:
    return [e.get("message", "") for e in local.kube_server.objects("v1", "Event") if e.get("reason") == reason]


def test_a_do_not_disrupt_pod_protects_its_node(local: LocalNodeflow) -> None:
    node, pod = _underused(local)
    _annotate(local, pod, "true")
    blocked = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert blocked["command"] is None, blocked
    assert any(b["node"] == node["status"]["nodeName"] and "do-not-disrupt" in b["message"] for b in blocked["blocked"])
    assert any("do-not-disrupt" in m for m in _events(local, "DisruptionBlocked"))
    # the annotation removed: the node is consolidated
    _annotate(local, pod, None)
    freed = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert freed["command"] is not None
    assert freed["command"]["candidates"] == [node["status"]["nodeName"]]
    _settle(local)


def test_a_pod_disruption_budget_blocks_until_it_allows(local: LocalNodeflow) -> None:
    node, _ = _underused(local)
    kube = local.kube_server
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    local.apply([pdb])  # the pod is Ready (its kubelet said so): the disruption controller allows 0
    _wait(lambda: _pdb_allows(kube) == 0, what="the PDB status")
    blocked = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert blocked["command"] is None, blocked
    assert any(
        b["node"] == node["status"]["nodeName"] and "PodDisruptionBudget" in b["message"] for b in blocked["blocked"]
    ), blocked["blocked"]
    # the budget relaxed (maxUnavailable 1): now it may go
    kube.patch("policy/v1", "PodDisruptionBudget", "web", {"spec": {"minAvailable": None, "maxUnavailable": 1}})
    _wait(lambda: _pdb_allows(kube) == 1, what="the PDB status")
    freed = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert freed["command"] is not None, freed
    assert freed["command"]["candidates"] == [node["status"]["nodeName"]]
    _settle(local)


APART = {  # one replica per node (required pod anti-affinity by hostname)
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def _web_apart(local: LocalNodeflow) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two web pods on two nodes (anti-affinity), both running; returns the two NodeClaims."""
    a, b = launch_workload(local, "web", 2, "1", "1Gi", claims=2, affinity=APART)
    nodes = {a["status"]["nodeName"], b["status"]["nodeName"]}
    assert {p["spec"].get("nodeName") for p in local.kube_server.objects("v1", "Pod", "default")} == nodes
    return a, b


def _budget_of_one(local: LocalNodeflow) -> dict[str, Any]:
    _patch_pool(local, {"disruption": {"budgets": [{"nodes": "1"}]}})
    return local.kube_server.get("karpenter.sh/v1", "NodePool", "default")


def _taints(local: LocalNodeflow, node: str) -> list[str]:
    return [t["key"] for t in local.kube_server.get("v1", "Node", node)["spec"].get("taints") or []]


IDLE_WORKFLOW = json.dumps(  # stands in for the terminate workflow: starts, does nothing
    {"StartAt": "Idle", "States": {"Idle": {"Type": "Wait", "Seconds": 1, "End": True}}}
)


def test_a_node_being_deleted_counts_against_the_budget_before_its_workflow_runs(local: LocalNodeflow) -> None:
    a, b = _web_apart(local)
    _budget_of_one(local)
    _scale_down(local, "web")
    _later(5)
    # the terminate workflow has not run a step yet when the next round comes (here: never does)
    local.clients.sfn.update_state_machine(stateMachineArn=local.terminate_arn, definition=IDLE_WORKFLOW)
    first = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert first["command"]["reason"] == "Empty", first
    (node,) = first["command"]["candidates"]
    assert len(first["executed"]) == 1
    assert "karpenter.sh/disrupted" in _taints(local, node)  # marked by the round itself
    second = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert second["command"] is None, second  # the budget of 1 is taken by the node being deleted
    (other,) = {a["status"]["nodeName"], b["status"]["nodeName"]} - {node}
    assert [x["node"] for x in second["blocked"]] == [other], second
    _settle(local)


def test_a_candidate_whose_workflow_cannot_start_is_untainted(local: LocalNodeflow) -> None:
    _web_apart(local)
    _scale_down(local, "web")
    _later(5)
    local.clients.sfn.delete_state_machine(stateMachineArn=local.terminate_arn)
    with pytest.raises(RuntimeError, match="StateMachineDoesNotExist"):
        local.invoke("disruption", {"source": "aws.scheduler"})
    for n in local.kube_server.objects("v1", "Node"):
        assert "karpenter.sh/disrupted" not in _taints(local, n["metadata"]["name"])
    assert local.clients.sfn.list_executions(stateMachineArn=local.launch_arn)["executions"]


def test_drift_replaces_one_node_at_a_time_under_a_budget_of_one(local: LocalNodeflow) -> None:
    a, b = _web_apart(local)
    kube = local.kube_server
    _budget_of_one(local)
    _patch_pool(local, {"template": {"metadata": {"labels": {"team": "payments"}}}})
    first = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert first["command"] is not None, first
    assert first["command"]["reason"] == "Drifted"
    assert len(first["command"]["candidates"]) == 1
    claims = {c["metadata"]["name"]: c for c in kube.objects("karpenter.sh/v1", "NodeClaim")}
    for name in (a["metadata"]["name"], b["metadata"]["name"]):
        conditions = {c["type"]: c for c in claims[name]["status"]["conditions"]}
        assert conditions["Drifted"]["status"] == "True", conditions.get("Drifted")
    # the first node is being disrupted (tainted karpenter.sh/disrupted): the budget of 1 is used up
    second = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert second["command"] is None or second["command"]["reason"] != "Drifted", second
    # once it is gone, the other drifted node is next
    (gone,) = first["command"]["candidates"]
    by_node = {c["status"]["nodeName"]: c["metadata"]["name"] for c in (a, b)}
    if first["replacing"]:
        arn = f"{local.replace_arn.replace(':stateMachine:', ':execution:', 1)}:{first['replacing']['name']}"
        assert wait_for_execution(local.clients.sfn, arn, timeout=90)["status"] == "SUCCEEDED"
    done = wait_for_execution(local.clients.sfn, _execution(local, by_node[gone]), timeout=60)
    assert done["status"] == "SUCCEEDED"
    third = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert third["command"] is not None, third
    assert third["command"]["reason"] == "Drifted"
    assert third["command"]["candidates"] == [n for n in by_node if n != gone]
    _settle(local)


def test_pod_events_from_the_queue_restart_the_consolidate_after_timer(local: LocalNodeflow) -> None:
    _launch(local, "web", 2)
    for p in local.kube_server.objects("v1", "Pod", "default"):  # the web node stays: only the batch node's timer
        if p["metadata"]["name"].startswith("web"):
            _annotate(local, p["metadata"]["name"], "true")
    empty = _launch(local, "batch", 2, affinity=AWAY_FROM_WEB)
    node = empty["status"]["nodeName"]
    _scale_down(local, "batch")
    _later(5)
    deleted_at = datetime.now(UTC) + timedelta(minutes=5)  # "now" for the handlers: the pods just went
    record = {
        "messageId": "m-1",
        "body": json.dumps(
            {
                "source": "nodeflow.agent",
                "detail-type": "Pod Deleted",
                "detail": {
                    "kind": "PodDeleted",
                    "observedAt": deleted_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "object": {"namespace": "default", "name": "batch-x", "uid": "u-1", "nodeName": node},
                },
            }
        ),
    }
    waiting = local.invoke("disruption", {"Records": [record, {"messageId": "m-2", "body": "not json"}]})["result"]
    assert waiting["podEventTimers"] == [empty["metadata"]["name"]]
    assert waiting["executed"] == [], waiting  # consolidateAfter (1m) counts from the pod deletion
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", empty["metadata"]["name"])
    assert claim["status"]["lastPodEventTime"] == deleted_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = {c["type"]: c["status"] for c in claim["status"]["conditions"]}
    assert conditions["Consolidatable"] == "False"
    _later(7)  # two minutes after the deletion
    ready = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert ready["executed"] == [empty["metadata"]["name"]]
    _settle(local)


FAR_FUTURE = "9999-12-31T23:59:59Z"


def _pod_event(node: str, at: str, kind: str = "Pod Bound") -> dict[str, Any]:
    return {
        "messageId": f"m-{kind}-{at}",
        "body": json.dumps(
            {
                "source": "nodeflow.agent",
                "detail-type": kind,
                "detail": {
                    "kind": kind.replace(" ", ""),
                    "observedAt": at,
                    "object": {"namespace": "default", "name": "p", "uid": "u-1", "nodeName": node},
                },
            }
        ),
    }


def test_a_pod_event_from_the_far_future_never_stalls_disruption(local: LocalNodeflow) -> None:
    """Event times are untrusted: one from year 9999 (or days ahead) is clamped to the receive time, a
    lastPodEventTime already in the future is replaced, no round raises, and expiration keeps working."""
    claim = _launch(local, "web", 1)
    name, node = claim["metadata"]["name"], claim["status"]["nodeName"]

    def stored() -> datetime:
        status = local.kube_server.get("karpenter.sh/v1", "NodeClaim", name)["status"]
        return datetime.fromisoformat(status["lastPodEventTime"].replace("Z", "+00:00"))

    days_ahead = (datetime.now(UTC) + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for at in (FAR_FUTURE, days_ahead):
        before = datetime.now(UTC).replace(microsecond=0)
        result = local.invoke("disruption", {"Records": [_pod_event(node, at)]})["result"]
        assert result["podEventTimers"] == [name]
        assert before - timedelta(seconds=1) <= stored() <= datetime.now(UTC), at

    # A time already stored in the future (written by hand, or before this fix) is not trusted either.
    local.kube_server.patch(
        "karpenter.sh/v1", "NodeClaim", name, {"status": {"lastPodEventTime": FAR_FUTURE}}, subresource="status"
    )
    again = local.invoke("disruption", {"source": "aws.scheduler"})["result"]  # no OverflowError
    assert again["command"] is None
    moved = local.invoke("disruption", {"Records": [_pod_event(node, FAR_FUTURE, "Pod Deleted")]})["result"]
    assert moved["podEventTimers"] == [name]
    assert stored() <= datetime.now(UTC)

    _later(721 * 60)  # expireAfter 720h still ends the node
    expired = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert expired["expired"] == [name]
    _settle(local)
