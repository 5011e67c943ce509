"""A consolidation replace end to end on the real control plane: the candidate is tainted, the replacement
launched, the candidate drained (its pod evicted through the eviction API, recreated Pending by the real ReplicaSet
controller) and terminated, and kube-scheduler binds the pod to the replacement, where it runs."""

from __future__ import annotations

from typing import Any

from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution
from tests.functional.disruption.test_disruption_lambda import (
    ON_DEMAND,
    TOGETHER,
    _execution,
    _later,
    _launch,
    _scale_down,
)
from tests.realk8s.workloads import TEMPLATE_HASH, running


def _web(local: LocalNodeflow) -> list[dict[str, Any]]:
    return [
        p
        for p in local.kube_server.objects("v1", "Pod", "default")
        if p["metadata"]["name"].startswith("web") and not p["metadata"].get("deletionTimestamp")
    ]


def test_a_replace_moves_the_pods_onto_the_replacement(local: LocalNodeflow) -> None:
    old = _launch(local, "web", 4, cpu="1", affinity=TOGETHER, nodeSelector=ON_DEMAND)
    old_node = old["status"]["nodeName"]
    (kept,) = _scale_down(local, "web", 1)  # the Deployment scaled down: one pod left on a big node
    # Its successor is made without the co-location rule: created while the evicted pod is still terminating on the
    # tainted node, a successor that must join it is unschedulable, and kube-scheduler does not retry it when that
    # pod goes (a deleted pod cannot satisfy an affinity: its queueing hint skips it) until its periodic flush of
    # unschedulable pods, 5 minutes later.
    template = {"spec": {"template": {"spec": {"affinity": None}}}}
    local.kube_server.patch("apps/v1", "ReplicaSet", f"web-{TEMPLATE_HASH}", template)
    _later(5)
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    # The workflow's drain then runs on the real clock: five minutes ahead, the evicted pod (its deletionTimestamp
    # 30 s from now) would look stuck terminating, the node would go before the pod did, and the pod would wait for
    # the pod garbage collector's 40 s quarantine of pods on a deleted Node.
    _later(0)
    assert result["command"] is not None, result
    assert result["command"]["reason"] == "Underutilized", result
    replacing = result["replacing"]
    assert replacing is not None, result
    (new,) = replacing["replacements"]
    arn = f"{local.replace_arn.replace(':stateMachine:', ':execution:', 1)}:{replacing['name']}"
    done = wait_for_execution(local.clients.sfn, arn, timeout=90)
    assert done["status"] == "SUCCEEDED", local.trace(arn).render()
    term = wait_for_execution(local.clients.sfn, _execution(local, old["metadata"]["name"]), timeout=60)
    assert term["status"] == "SUCCEEDED"
    new_node = local.kube_server.get("karpenter.sh/v1", "NodeClaim", new)["status"]["nodeName"]
    assert new_node != old_node
    # the evicted pod came back from its ReplicaSet (a new pod) and kube-scheduler bound it to the replacement
    (moved,) = running(local.kube_server, "web", 1, timeout=90)
    assert moved["spec"]["nodeName"] == new_node
    assert moved["metadata"]["name"] != kept
    assert len(_web(local)) == 1
    names = {c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")}
    assert names == {new}
    assert old_node not in {n["metadata"]["name"] for n in local.kube_server.objects("v1", "Node")}
    evictions = [e for e in local.kube_server.exchanges if e.method == "POST" and e.path.endswith("/eviction")]
    assert [e.status for e in evictions if kept in e.path] == [201], evictions
