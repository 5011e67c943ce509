"""Fixtures: the real control plane with nodeflow's CRDs (``RealKubeAPI``, reset before each test), clients
through its fault proxy, and object factories."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.kube.client import DAEMON_SETS, NODES, PODS, KubeClient, Resource
from sandbox.controlplane.facade import RealKubeAPI, ready_condition, wait_for
from tests.realk8s.workloads import NO_SCHEDULER


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


@pytest.fixture
def server(kube_server: RealKubeAPI) -> RealKubeAPI:
    return kube_server


@pytest.fixture
def api(server: RealKubeAPI) -> Any:
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
            "conditions": [ready_condition(reason="KubeletReady", message="ok")],
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
    else:  # its scheduling status is the test's to seed: kube-scheduler leaves it alone
        spec["schedulerName"] = NO_SCHEDULER
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


def create_node(kube: KubeClient, body: dict[str, Any]) -> dict[str, Any]:
    """Create a Node reporting Ready and wait for the node lifecycle controller to lift the
    ``node.kubernetes.io/not-ready`` taint the API server adds to every new Node (tens of milliseconds): for tests
    that compare a Node's taints."""
    name = body["metadata"]["name"]
    kube.create(NODES, body)

    def settled() -> dict[str, Any] | None:
        got = kube.get(NODES, name)
        return None if any(t["key"] == "node.kubernetes.io/not-ready" for t in got["spec"].get("taints") or []) else got

    return wait_for(f"Node {name} without the not-ready taint", settled)


REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)


def create_owned_pod(kube: KubeClient, body: dict[str, Any], kind: str, status: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the pod of a real ReplicaSet or DaemonSet named after it (the garbage collector deletes a pod whose
    owner does not exist). A ReplicaSet of one replica adopts the pod (created first, so it makes none of its own);
    a DaemonSet for no node owns it from its creation (the controller leaves pods not bound to a node alone)."""
    meta = body["metadata"]
    ns, name = meta.get("namespace", "default"), meta["name"]
    meta["labels"] = {**meta.get("labels", {}), "owned-pod": name}
    template = {"metadata": {"labels": meta["labels"]}, "spec": body["spec"]}
    owner: dict[str, Any] = {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"owned-pod": name}}}}
    if kind == "ReplicaSet":
        create_pod(kube, body)
        kube.create(REPLICA_SETS, {**owner, "spec": {**owner["spec"], "replicas": 1, "template": template}}, ns)
        wait_for(
            f"ReplicaSet {name} to adopt its pod", lambda: kube.get(PODS, name, ns)["metadata"].get("ownerReferences")
        )
    else:
        template["spec"] = {**body["spec"], "nodeSelector": {"nodeflow-test/no-such-node": "true"}}
        made = kube.create(DAEMON_SETS, {**owner, "spec": {**owner["spec"], "template": template}}, ns)
        ref = {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": made["metadata"]["uid"], "controller": True}
        meta["ownerReferences"] = [ref]
        create_pod(kube, body)
    return kube.patch(PODS, name, {"status": status}, namespace=ns, subresource="status")


def create_pod(kube: KubeClient, body: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    ns = body["metadata"].get("namespace", "default")
    created = kube.create(PODS, body, namespace=ns)
    if status is not None:
        created = kube.patch(PODS, body["metadata"]["name"], {"status": status}, namespace=ns, subresource="status")
    return created
