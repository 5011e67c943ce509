"""A consolidation replace end to end with the simulated kube-scheduler placing pods: the candidate is
tainted, the replacement launched, the candidate drained (its pod evicted, recreated Pending by the
simulated ReplicaSet controller) and terminated, and the scheduler binds the pod to the replacement."""

from __future__ import annotations

from typing import Any

from nodeflow.kube.client import KubeClient
from sandbox.nodeflow import LocalNodeflow
from sandbox.replicasets import SimulatedReplicaSets
from sandbox.stepfunctions import wait_for_execution
from tests.functional.disruption.test_disruption_lambda import ON_DEMAND, TOGETHER, _execution, _later, _launch, _wait


def _web(local: LocalNodeflow) -> list[dict[str, Any]]:
    return [
        p
        for p in local.kube_server.objects("v1", "Pod", "default")
        if p["metadata"]["name"].startswith("web") and not p["metadata"].get("deletionTimestamp")
    ]


def test_a_replace_moves_the_pods_onto_the_replacement(local: LocalNodeflow) -> None:
    local.scheduler.place_pending = True
    old = _launch(local, "web", 4, cpu="1", affinity=TOGETHER, nodeSelector=ON_DEMAND)
    old_node = old["status"]["nodeName"]
    replicasets = SimulatedReplicaSets(KubeClient(local.kube_server.api_client())).track_existing()
    replicasets.track_existing()  # again (as the demo does for ReplicaSets created since): the desired count stays
    assert [o.replicas for o in replicasets.owned.values()] == [4]
    replicasets.run_in_background(0.05)
    try:
        kept = replicasets.scale("default", "web", 1)  # the Deployment scaled down: one pod left on a big node
        assert len(kept) == 3
        _later(5)
        result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
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
        # the evicted pod came back from its ReplicaSet and the scheduler bound it to the replacement
        assert _wait(lambda: replicasets.created, what="the ReplicaSet recreating the evicted pod")
        moved = _wait(
            lambda: [p for p in _web(local) if p["spec"].get("nodeName") == new_node],
            what="the scheduler binding the evicted pod to the replacement",
        )
        assert [f"default/{p['metadata']['name']}" for p in moved] == replicasets.created
        assert moved[0]["status"]["phase"] == "Running"
        assert len(_web(local)) == 1
        names = {c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")}
        assert names == {new}
        assert old_node not in {n["metadata"]["name"] for n in local.kube_server.objects("v1", "Node")}
        assert not replicasets.errors
        assert not local.scheduler.errors
    finally:
        replicasets.stop()
