"""Events (Karpenter reasons, client-go style dedup) and NodePool status through the status subresource."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.kube.events import EventRecorder, ObjectRef
from nodeflow.kube.snapshot import take_snapshot
from nodeflow.kube.status import update_node_pool_statuses
from nodeflow.kube.writes import create_node_claim, get_pod
from tests.functional.kube.conftest import UNSCHEDULABLE, create_pod, node, node_claim, node_class, node_pool, pod

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def _events(kube: KubeClient, namespace: str = "default") -> list[dict[str, Any]]:
    """nodeflow's Events (a real cluster has others: kube-scheduler's FailedScheduling, the node lifecycle
    controller's RegisteredNode, the API server's own)."""
    return [
        e
        for e in kube.list_items(kc.EVENTS, namespace=namespace)
        if (e.get("source") or {}).get("component") == "karpenter"
    ]


def test_events_are_deduplicated_with_counts(kube: KubeClient) -> None:
    create_pod(kube, pod("web-0"), UNSCHEDULABLE)
    web = get_pod(kube, "default", "web-0")
    now = [T0]
    recorder = EventRecorder(kube, clock=lambda: now[0])
    recorder.nominated(web, "default-abc12")
    now[0] += timedelta(seconds=5)
    recorder.nominated(web, "default-abc12")
    recorder.failed_scheduling(web, 'incompatible with nodepool "gpu", no instance type satisfied resources')
    (nominated,) = [e for e in _events(kube) if e["reason"] == "Nominated"]
    assert nominated["count"] == 2
    assert nominated["message"] == "Pod should schedule on: nodeclaim/default-abc12"
    assert nominated["type"] == "Normal"
    assert nominated["involvedObject"]["kind"] == "Pod"
    assert nominated["involvedObject"]["uid"] == web.metadata.uid
    assert nominated["firstTimestamp"] == "2025-01-01T12:00:00Z"
    assert nominated["lastTimestamp"] == "2025-01-01T12:00:05Z"
    assert nominated["source"]["component"] == "karpenter"
    (failed,) = [e for e in _events(kube) if e["reason"] == "FailedScheduling"]
    assert failed["type"] == "Warning"
    assert failed["message"].startswith("Failed to schedule pod, incompatible with nodepool")

    # another invocation (a new recorder, no memory) still adds to the same Event
    EventRecorder(kube, clock=lambda: now[0]).nominated(web, "default-abc12")
    (nominated,) = [e for e in _events(kube) if e["reason"] == "Nominated"]
    assert nominated["count"] == 3
    # a different message is a different Event
    recorder.nominated(web, "default-zzz99")
    assert len([e for e in _events(kube) if e["reason"] == "Nominated"]) == 2


def test_events_on_cluster_scoped_objects_go_to_default(kube: KubeClient) -> None:
    kube.create(kc.NODES, node("node-a"))
    claim = create_node_claim(kube, node_claim("default-abc12"))
    recorder = EventRecorder(kube, clock=lambda: T0)
    recorder.record(ObjectRef("Node", "node-a"), "Normal", "DisruptionBlocked", "Pod default/web-0 has do-not-disrupt")
    recorder.disruption_blocked(claim, "Nodeclaim does not have an associated node")
    recorder.disruption_blocked(claim, "Nodeclaim does not have an associated node")
    events = _events(kube)
    assert sorted((e["involvedObject"]["kind"], e["count"]) for e in events) == [("Node", 1), ("NodeClaim", 2)]
    assert all(e["metadata"]["namespace"] == "default" for e in events)


def _seed_pools(kube: KubeClient, server: Any, ready_class: bool = True) -> None:
    kube.create(kc.EC2_NODE_CLASSES, node_class("default"))
    if ready_class:
        kube.patch(
            kc.EC2_NODE_CLASSES,
            "default",
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "Ready",
                            "message": "",
                            "lastTransitionTime": "2025-01-01T00:00:00Z",
                        }
                    ]
                }
            },
            subresource="status",
        )
    kube.create(kc.NODE_POOLS, node_pool("default"))
    kube.create(kc.NODE_POOLS, node_pool("other", node_class="missing"))
    bad = node_pool("bad")
    bad["spec"]["template"]["metadata"] = {"labels": {"karpenter.sh/nodepool": "x"}}
    server.store_bypassing_admission(bad)  # the CRD's CEL rule refuses it on create (one stored before the rule)
    kube.create(kc.NODES, node("node-a", cpu="4", memory="16Gi"))
    kube.create(kc.NODES, node("node-b", cpu="2", memory="8Gi"))
    kube.create(kc.NODES, node("node-c", pool=None))


def _conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c.get("message", "")) for c in obj["status"]["conditions"]}


def test_node_pool_status_resources_and_conditions(kube: KubeClient, server: Any) -> None:
    _seed_pools(kube, server)
    written = update_node_pool_statuses(kube, take_snapshot(kube), now=T0)
    assert set(written) == {"default", "other", "bad"}

    default = kube.get(kc.NODE_POOLS, "default")
    assert default["status"]["resources"] == {
        "cpu": "6",
        "memory": "24Gi",
        "pods": "220",
        "ephemeral-storage": "0",
        "nodes": "2",
    }
    assert default["status"]["nodes"] == 2
    assert _conditions(default) == {
        "ValidationSucceeded": ("True", "ValidationSucceeded", ""),
        "NodeClassReady": ("True", "NodeClassReady", ""),
        "Ready": ("True", "Ready", ""),
    }
    other = kube.get(kc.NODE_POOLS, "other")
    assert other["status"]["resources"] == {
        "cpu": "0",
        "memory": "0",
        "pods": "0",
        "ephemeral-storage": "0",
        "nodes": "0",
    }
    conds = _conditions(other)
    assert conds["NodeClassReady"][:2] == ("False", "NodeClassNotFound")
    assert conds["Ready"][0] == "False"

    bad = kube.get(kc.NODE_POOLS, "bad")
    status, reason, message = _conditions(bad)["ValidationSucceeded"]
    assert (status, reason) == ("False", "ValidationFailed")
    assert "spec.template.metadata.labels" in message
    assert "karpenter.sh/nodepool" in message
    assert _conditions(bad)["Ready"][0] == "False"
    assert server.count("PATCH", "/apis/karpenter.sh/v1/nodepools/bad/status") == 1

    # unchanged: nothing written; lastTransitionTime kept while the status holds
    assert update_node_pool_statuses(kube, take_snapshot(kube), now=T0 + timedelta(minutes=5)) == {}
    kube.create(kc.NODES, node("node-d", cpu="2", memory="8Gi"))
    written = update_node_pool_statuses(kube, take_snapshot(kube), now=T0 + timedelta(minutes=10))
    assert set(written) == {"default"}
    default = kube.get(kc.NODE_POOLS, "default")
    assert default["status"]["resources"]["cpu"] == "8"
    ready = next(c for c in default["status"]["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2025-01-01T12:00:00Z"


def test_node_pool_resources_count_node_claims_as_karpenter_does(kube: KubeClient) -> None:
    """Karpenter's counter: a launched NodeClaim without a Node counts with its capacity; while a NodeClaim
    is not Initialized its capacity fills what its Node reports as zero; Nodes and NodeClaims being deleted
    do not count; extended resources are summed; counts print as plain numbers (1024 pods, not 1Ki)."""
    kube.create(kc.EC2_NODE_CLASSES, node_class("default"))
    kube.create(kc.NODE_POOLS, node_pool("default"))

    def claim(name: str, provider_id: str, capacity: dict[str, str], initialized: bool) -> None:
        kube.create(kc.NODE_CLAIMS, node_claim(name))
        condition = {"type": "Initialized", "status": "True" if initialized else "Unknown", "reason": "x"}
        status = {"providerID": provider_id, "capacity": capacity, "conditions": [{**condition, "message": ""}]}
        kube.patch(kc.NODE_CLAIMS, name, {"status": status}, subresource="status")

    # registered, not Initialized: the Node reports no GPUs yet, the NodeClaim says 1
    gpu = node("node-gpu", cpu="8", memory="32Gi", pods="512")
    gpu["status"]["capacity"]["nvidia.com/gpu"] = "0"
    gpu["status"]["capacity"]["ephemeral-storage"] = "20Gi"
    kube.create(kc.NODES, gpu)
    claim("default-gpu", gpu["spec"]["providerID"], {"cpu": "8", "nvidia.com/gpu": "1", "pods": "1"}, False)
    # Initialized: the Node's capacity only
    plain = node("node-plain", cpu="2", memory="8Gi", pods="512")
    kube.create(kc.NODES, plain)
    claim("default-plain", plain["spec"]["providerID"], {"cpu": "99", "example.com/x": "5"}, True)
    # launched, no Node yet
    claim("default-launching", "aws:///us-west-2a/i-0launching", {"cpu": "4", "memory": "16Gi"}, False)
    # being deleted (a finalizer keeps them): neither counts
    gone = node("node-gone", cpu="64")
    gone["metadata"]["finalizers"] = ["karpenter.sh/termination"]
    kube.create(kc.NODES, gone)
    kube.delete(kc.NODES, "node-gone")
    claim("default-going", "aws:///us-west-2a/i-0going", {"cpu": "64"}, False)
    kube.patch(kc.NODE_CLAIMS, "default-going", {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    kube.delete(kc.NODE_CLAIMS, "default-going")

    update_node_pool_statuses(kube, take_snapshot(kube), now=T0)
    status = kube.get(kc.NODE_POOLS, "default")["status"]
    assert status["resources"] == {
        "cpu": "14",
        "memory": "56Gi",
        "pods": "1024",
        "ephemeral-storage": "20Gi",
        "nvidia.com/gpu": "1",
        "nodes": "3",
    }
    assert status["nodes"] == 3

    # the GPU node goes: its resource leaves status.resources (not kept by the merge patch)
    kube.delete(kc.NODE_CLAIMS, "default-gpu")
    kube.delete(kc.NODES, "node-gpu")
    update_node_pool_statuses(kube, take_snapshot(kube), now=T0)
    status = kube.get(kc.NODE_POOLS, "default")["status"]
    assert status["resources"] == {"cpu": "6", "memory": "24Gi", "pods": "512", "ephemeral-storage": "0", "nodes": "2"}
    assert status["nodes"] == 2


def test_node_class_not_ready_yet_is_unknown(kube: KubeClient, server: Any) -> None:
    _seed_pools(kube, server, ready_class=False)
    update_node_pool_statuses(kube, take_snapshot(kube), now=T0)
    conds = _conditions(kube.get(kc.NODE_POOLS, "default"))
    assert conds["NodeClassReady"][0] == "Unknown"
    assert conds["Ready"][:2] == ("Unknown", "UnhealthyDependents")
