"""Objects the agent tests create on the real control plane."""

from __future__ import annotations

from typing import Any

from sandbox.controlplane.facade import ready_condition
from tests.realk8s.workloads import NO_SCHEDULER

UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/3 nodes are available: 3 Insufficient cpu.",
}


def pod(
    name: str, *, cpu: str = "500m", node_name: str | None = None, scheduler: bool = False, **meta: Any
) -> dict[str, Any]:
    """A pod in ``default``. Unless ``scheduler`` (kube-scheduler decides, and writes its PodScheduled condition) or
    ``node_name``, no scheduler picks it up: its scheduling status is the test's to write."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}},
        ],
        "nodeSelector": {"kubernetes.io/arch": "arm64"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
    }
    if node_name:
        spec["nodeName"] = node_name
    elif not scheduler:
        spec["schedulerName"] = NO_SCHEDULER
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}, **meta},
        "spec": spec,
    }


def unschedulable_pod(name: str, **kwargs: Any) -> dict[str, Any]:
    """For ``server.create`` (which keeps status): already marked unschedulable by the scheduler."""
    return {**pod(name, **kwargs), "status": {"phase": "Pending", "conditions": [UNSCHEDULABLE]}}


def node(name: str, ready: str = "True", pool: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool, "kubernetes.io/hostname": name}},
        "spec": {"providerID": f"aws:///us-east-1a/i-{abs(hash(name)) % 10**12:012x}"},
        "status": {"conditions": [ready_condition(ready, reason="KubeletReady")]},
    }


def node_pool(name: str = "default", cpu_limit: str = "100") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                }
            },
            "limits": {"cpu": cpu_limit},
        },
    }


def node_class(name: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        },
    }


def node_claim(name: str, pool: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        },
    }
