"""While a Karpenter controller runs, nodeflow launches and disrupts nothing and says why; once it is gone, nodeflow
carries on (lifecycle/karpenter_guard.py).

On the real control plane: Karpenter's Deployment (its chart's name and labels) really runs, its pod placed by
kube-scheduler on a node Karpenter made and run by a simulated kubelet, so ``readyReplicas`` is the Deployment
controller's. The functions act as their own identities (RBAC enforced: a denied LIST of Deployments or Leases fails
the test when nodeflow stops).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodeflow.kube.client import NAMESPACES, KubeClient
from nodeflow.lifecycle.karpenter_guard import REASON, karpenter_guard
from sandbox.controlplane.facade import RealKubeAPI, wait_for
from sandbox.nodeflow import LocalNodeflow
from tests.functional.migration.karpenter_state import (
    POOL,
    install_karpenter_objects,
    interrupt,
    karpenter_deployment,
    launch_node,
)
from tests.realk8s.workloads import replica_set, running, unschedulable

NAMESPACE = "karpenter"


def ready_replicas(local: LocalNodeflow) -> int:
    deployment = local.kube_server.get("apps/v1", "Deployment", "karpenter", NAMESPACE)
    return int((deployment.get("status") or {}).get("readyReplicas") or 0)


def pool_events(local: LocalNodeflow) -> list[dict[str, Any]]:
    return [
        e
        for e in local.kube_server.objects("v1", "Event", "default")
        if e.get("reason") == REASON and (e.get("involvedObject") or {}).get("name") == POOL
    ]


def test_nothing_is_launched_or_disrupted_while_karpenter_runs_and_provisioning_goes_on_once_it_is_scaled_to_zero(
    local: LocalNodeflow,
) -> None:
    install_karpenter_objects(local)
    adopted = launch_node(local, "r2t8w")
    local.kube_server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    wait_for("the namespace's default ServiceAccount", lambda: _default_account(local), 30)
    local.kube_server.create(karpenter_deployment(NAMESPACE))
    wait_for("Karpenter's controller ready", lambda: ready_replicas(local) == 1, 60)

    # pods no node can take: nodeflow holds still, and says why on the NodePool
    local.apply([replica_set("web", 2, "3", "1Gi")])
    pending = unschedulable(local.kube_server, "web", 2)
    local.send_pending(pending)
    held = local.provision()["result"]
    assert held["nodeClaimsCreated"] == []
    assert "Deployment karpenter/karpenter has ready replicas" in held["karpenterRunning"]["why"]
    assert held["pauseRetry"]["delaySeconds"] == 30
    [event] = pool_events(local)
    assert event["type"] == "Warning"
    assert "nodeflow launches and disrupts nothing until it is gone" in event["message"]
    assert "kubectl -n karpenter scale deployment karpenter --replicas=0" in event["message"]
    assert local.executions() == []
    assert [c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")] == [adopted.claim]

    # nor a disruption round, garbage collection or an interruption
    round_ = local.invoke("disruption", {})["result"]
    assert "a Karpenter controller is running" in (round_["paused"] or "")
    assert (round_["command"], round_["executed"], round_["expired"]) == (None, [], [])
    gc = local.collect_garbage()
    assert "karpenterRunning" in gc
    assert gc["terminatedInstances"] == []
    # acknowledged untouched: Karpenter handles its own copy
    message = interrupt(local, adopted.instance_id, "EC2 Instance State-change Notification", state="stopping")
    assert "terminationsStarted" not in message
    assert "a Karpenter controller is running" in message["ignored"][0]
    assert local.terminate_executions() == []
    [event] = pool_events(local)  # the same Event, counted again
    assert event["count"] >= 2

    # Karpenter's controller scaled to zero: provisioning goes on
    local.kube_server.patch("apps/v1", "Deployment", "karpenter", {"spec": {"replicas": 0}}, NAMESPACE)
    wait_for("Karpenter's controller gone", lambda: ready_replicas(local) == 0, 60)
    local.send_pending(pending)
    result = local.provision()["result"]
    assert "karpenterRunning" not in result
    assert result["nodeClaimsCreated"], result
    assert {e["status"] for e in local.wait_for_executions()} == {"SUCCEEDED"}
    running(local.kube_server, "web", 2)
    assert local.invoke("disruption", {})["result"]["paused"] is None


def _default_account(local: LocalNodeflow) -> bool:
    return any(a["metadata"]["name"] == "default" for a in local.kube_server.objects("v1", "ServiceAccount", NAMESPACE))


def test_a_held_fresh_lease_pauses_and_a_released_one_does_not(real_kube: RealKubeAPI) -> None:
    """Karpenter's leader-election Lease alone (a controller whatever its Deployment is called): held and renewed
    within its duration pauses; released on a clean stop (no holder) does not."""
    kube = KubeClient(real_kube.api_client())
    kube.create(NAMESPACES, {"metadata": {"name": "kube-karp"}})
    now = datetime.now(UTC)
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "karpenter-leader-election", "namespace": "kube-karp"},
        "spec": {
            "holderIdentity": "karpenter-6b9c7d-x2x4z_8f0c",
            "leaseDurationSeconds": 15,
            "acquireTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }
    real_kube.create(lease)
    pause = karpenter_guard(kube, now)
    assert pause is not None
    assert "its leader-election Lease kube-karp/karpenter-leader-election is held" in pause.why
    real_kube.patch(
        "coordination.k8s.io/v1",
        "Lease",
        "karpenter-leader-election",
        {"spec": {"holderIdentity": None}},
        "kube-karp",
    )
    assert karpenter_guard(kube, now) is None
    kube.api_client.close()  # type: ignore[no-untyped-call]
