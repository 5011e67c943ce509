"""The agent process forwards pod, node, NodePool, EC2NodeClass and NodeClaim changes to the webhook."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandbox.controlplane.facade import RealKubeAPI
from tests.functional.agent.conftest import Agent, Webhook, wait_for
from tests.functional.agent.objects import UNSCHEDULABLE, node, node_claim, node_class, node_pool, pod
from tests.functional.kube.conftest import create_owned_pod

KARPENTER = ("karpenter.sh", "v1")


def test_unschedulable_pod_is_forwarded_with_its_spec(
    kube: RealKubeAPI, core: Any, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    """kube-scheduler finds no node for the pod and marks it unschedulable: the agent forwards that."""
    agent = start_agent(kube.url)
    agent.wait_ready()
    core.create_namespaced_pod("default", pod("web-1", scheduler=True))

    event = webhook.wait("PodUnschedulable", "web-1")
    assert event["reason"] == "watch"
    assert len(event["id"]) == 32
    obj = event["object"]
    stored = kube.get("v1", "Pod", "web-1", "default")
    [scheduled] = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")  # kube-scheduler's verdict
    assert obj["uid"] == stored["metadata"]["uid"]
    assert int(obj["resourceVersion"]) <= int(stored["metadata"]["resourceVersion"])  # the scheduler may rewrite it
    assert obj["namespace"] == "default"
    assert obj["labels"] == {"app": "web"}
    assert obj["schedulerName"] == "default-scheduler"
    assert obj["message"] == scheduled["message"]
    assert obj["spec"]["containers"] == [{"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]
    assert obj["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    # the server adds its own tolerations at admission (not-ready and unreachable, 300 s): forwarded as they are
    assert obj["spec"]["tolerations"][0] == {
        "key": "dedicated",
        "operator": "Equal",
        "value": "web",
        "effect": "NoSchedule",
    }
    # only the transition is forwarded: the pod was not reported before it was marked unschedulable
    assert [e["kind"] for e in webhook.of(name="web-1")] == ["PodUnschedulable"]
    [body] = [b for b in webhook.bodies if any(e["id"] == event["id"] for e in b["events"])]
    assert body["cluster"] == "test-cluster"
    assert body["agent"] == "functional-agent"


def test_pod_bound_then_deleted(
    kube: RealKubeAPI, core: Any, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    agent = start_agent(kube.url)
    agent.wait_ready()
    core.create_namespaced_pod("default", pod("web-2"))
    core.patch_namespaced_pod_status("web-2", "default", {"status": {"conditions": [UNSCHEDULABLE]}})
    webhook.wait("PodUnschedulable", "web-2")
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "web-2"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
    }
    kube.create(node("node-a"))
    core.create_namespaced_pod_binding("web-2", "default", binding, _preload_content=False)
    bound = webhook.wait("PodBound", "web-2")
    assert bound["object"]["nodeName"] == "node-a"
    # a bound pod is deleted gracefully (deletionTimestamp set, the pod stays) until its kubelet confirms
    core.delete_namespaced_pod("web-2", "default")
    wait_for(lambda: kube.get("v1", "Pod", "web-2", "default")["metadata"].get("deletionTimestamp"), what="graceful")
    uid = kube.get("v1", "Pod", "web-2", "default")["metadata"]["uid"]
    kube.delete("v1", "Pod", "web-2", "default", grace_period_seconds=0, uid=uid)  # the kubelet's confirmation
    deleted = webhook.wait("PodDeleted", "web-2")
    assert deleted["object"]["nodeName"] == "node-a"
    assert deleted["object"]["namespace"] == "default"
    assert [e["kind"] for e in webhook.of(name="web-2")] == ["PodUnschedulable", "PodBound", "PodDeleted"]


def test_daemonset_and_unbound_deleted_pods_are_not_forwarded(
    kube: RealKubeAPI, core: Any, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    agent = start_agent(kube.url)
    agent.wait_ready()
    # a real DaemonSet's pod (the garbage collector deletes a pod whose owner does not exist)
    create_owned_pod(kube.kube, pod("ds-pod"), "DaemonSet", {"conditions": [UNSCHEDULABLE]})
    core.create_namespaced_pod("default", pod("gone"))
    core.patch_namespaced_pod_status("gone", "default", {"status": {"conditions": [UNSCHEDULABLE]}})
    core.delete_namespaced_pod("gone", "default")
    core.create_namespaced_pod("default", pod("marker"))
    core.patch_namespaced_pod_status("marker", "default", {"status": {"conditions": [UNSCHEDULABLE]}})
    webhook.wait("PodUnschedulable", "marker")  # events arrive in order: everything before it was seen
    assert webhook.of(name="ds-pod") == []
    assert [e["kind"] for e in webhook.of(name="gone")] == ["PodUnschedulable"]  # never bound: no PodDeleted


def test_node_ready_transitions_and_deletion(
    kube: RealKubeAPI, core: Any, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    agent = start_agent(kube.url)
    agent.wait_ready()
    core.create_node(node("node-a", ready="False"))
    appeared = webhook.wait("NodeNotReady", "node-a")
    assert appeared["object"]["ready"] == "False"
    assert appeared["object"]["nodePool"] == "default"
    assert appeared["object"]["providerID"].startswith("aws:///us-east-1a/i-")
    core.patch_node_status("node-a", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    webhook.wait("NodeReady", "node-a", ready="True")
    core.patch_node("node-a", {"metadata": {"labels": {"team": "a"}}})  # not a Ready change: no event
    core.patch_node_status("node-a", {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    webhook.wait("NodeNotReady", "node-a", ready="Unknown")
    core.delete_node("node-a")
    deleted = webhook.wait("NodeDeleted", "node-a")
    assert deleted["object"]["providerID"] == appeared["object"]["providerID"]
    assert [e["kind"] for e in webhook.of(name="node-a")] == [
        "NodeNotReady",
        "NodeReady",
        "NodeNotReady",
        "NodeDeleted",
    ]


def test_nodepool_generation_changes_are_forwarded_status_writes_are_not(
    kube: RealKubeAPI, custom: Any, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    agent = start_agent(kube.url)
    agent.wait_ready()
    custom.create_cluster_custom_object(*KARPENTER, "nodepools", node_pool("default"))
    created = webhook.wait("NodePoolChanged", "default", generation=1)
    status = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ready",
                    "message": "",
                    "lastTransitionTime": "2026-11-21T10:00:00Z",
                }
            ]
        }
    }
    custom.patch_cluster_custom_object_status(*KARPENTER, "nodepools", "default", status)
    assert kube.get("karpenter.sh/v1", "NodePool", "default")["metadata"]["generation"] == 1
    custom.patch_cluster_custom_object(*KARPENTER, "nodepools", "default", {"spec": {"limits": {"cpu": "200"}}})
    changed = webhook.wait("NodePoolChanged", "default", generation=2)
    assert changed["object"]["uid"] == created["object"]["uid"]
    assert [e["object"]["generation"] for e in webhook.of("NodePoolChanged", "default")] == [1, 2]
    custom.delete_cluster_custom_object(*KARPENTER, "nodepools", "default")
    webhook.wait("NodePoolDeleted", "default")

    custom.create_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", node_class("default"))
    webhook.wait("EC2NodeClassChanged", "default", generation=1)


def test_nodeclaim_lifecycle(
    kube: RealKubeAPI, custom: Any, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    agent = start_agent(kube.url)
    agent.wait_ready()
    custom.create_cluster_custom_object(*KARPENTER, "nodeclaims", node_claim("default-abcde"))
    created = webhook.wait("NodeClaimChanged", "default-abcde")
    assert created["object"]["nodePool"] == "default"
    assert created["object"]["providerID"] is None
    launched = {
        "status": {
            "providerID": "aws:///us-east-1a/i-0123456789abcdef0",
            "conditions": [
                {
                    "type": "Launched",
                    "status": "True",
                    "reason": "Launched",
                    "message": "",
                    "lastTransitionTime": "2026-11-21T10:00:00Z",
                }
            ],
        }
    }
    custom.patch_cluster_custom_object_status(*KARPENTER, "nodeclaims", "default-abcde", launched)
    changed = webhook.wait("NodeClaimChanged", "default-abcde", providerID="aws:///us-east-1a/i-0123456789abcdef0")
    assert changed["object"]["conditions"] == {"Launched": "True"}
    custom.patch_cluster_custom_object(
        *KARPENTER, "nodeclaims", "default-abcde", {"metadata": {"finalizers": ["karpenter.sh/termination"]}}
    )
    custom.delete_cluster_custom_object(*KARPENTER, "nodeclaims", "default-abcde")
    deleting = webhook.wait("NodeClaimDeleting", "default-abcde")
    assert deleting["object"]["providerID"] == "aws:///us-east-1a/i-0123456789abcdef0"
    custom.patch_cluster_custom_object(*KARPENTER, "nodeclaims", "default-abcde", {"metadata": {"finalizers": None}})
    webhook.wait("NodeClaimDeleted", "default-abcde")
