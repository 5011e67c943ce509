"""Fixtures: the test Kubernetes API server with Karpenter's CRDs, clients, and object factories."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from nodeflow.kube.client import PODS, KubeClient

if TYPE_CHECKING:
    from tests.kubeapi import KubeAPIServer


@pytest.fixture
def server(kube_server: KubeAPIServer) -> KubeAPIServer:
    kube_server.reset()
    return kube_server


@pytest.fixture
def api(server: KubeAPIServer) -> Any:
    return server.api_client()


@pytest.fixture
def kube(api: Any) -> KubeClient:
    return KubeClient(api)


# --- object factories ---------------------------------------------------------------------------


def node_pool(name: str = "default", node_class: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": node_class},
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                }
            },
            **spec,
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


def node_claim(name: str = "default-abcde", pool: str = "default", instance_type: str = "m5.large") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": [pool]},
            ],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        },
    }


def node(
    name: str, pool: str | None = "default", cpu: str = "4", memory: str = "16Gi", pods: str = "110"
) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    if pool:
        labels["karpenter.sh/nodepool"] = pool
    capacity = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": f"aws:///us-west-2a/i-{abs(hash(name)) % 10**12:012d}"},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
        },
    }


def pod(
    name: str,
    namespace: str = "default",
    *,
    node_name: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: tuple[str, str] | None = None,
    cpu: str = "100m",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {"app": "web"}}
    if annotations:
        meta["annotations"] = annotations
    if owner:
        api_version = "v1" if owner[0] == "Node" else "apps/v1"
        meta["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": owner[0],
                "name": owner[1],
                "uid": f"uid-{owner[1]}",
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}
    ],
}
RUNNING = {
    "phase": "Running",
    "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
}


def create_pod(kube: KubeClient, body: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    ns = body["metadata"].get("namespace", "default")
    created = kube.create(PODS, body, namespace=ns)
    if status is not None:
        created = kube.patch(PODS, body["metadata"]["name"], {"status": status}, namespace=ns, subresource="status")
    return created
