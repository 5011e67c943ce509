"""Builders of cluster objects for the disruption tests (plain dicts validated by the API models)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodeflow.api.core import Node, Pod, PodDisruptionBudget
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.catalog.offline import load_offline
from nodeflow.cluster import ClusterState
from nodeflow.disruption.model import Snapshot

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
EARLIER = "2026-11-20T08:00:00Z"
CATALOG = load_offline("us-east-1")
# (cpu, memory GiB) of the instance types the tests use
SIZES = {"m5.large": (2, 8), "m5.xlarge": (4, 16), "m5.2xlarge": (8, 32), "c5.xlarge": (4, 8), "m5.4xlarge": (16, 64)}


def pool(
    name: str = "general",
    budgets: list[dict[str, Any]] | None = None,
    policy: str = "WhenEmptyOrUnderutilized",
    after: str = "30s",
    capacity: tuple[str, ...] = ("on-demand",),
    extra: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
) -> NodePool:
    disruption: dict[str, Any] = {"consolidationPolicy": policy, "consolidateAfter": after}
    if budgets is not None:
        disruption["budgets"] = budgets
    reqs = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(capacity)},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
        *(extra or []),
    ]
    return NodePool.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "metadata": {"labels": labels or {}},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": reqs,
                    },
                },
                "disruption": disruption,
            },
        }
    )


def node_class(amis: tuple[str, ...] = ("ami-new",), annotations: dict[str, str] | None = None) -> EC2NodeClass:
    return EC2NodeClass.model_validate(
        {
            "metadata": {"name": "default", "annotations": annotations or {}},
            "spec": {
                "role": "R",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"id": "subnet-a"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}],
            },
            "status": {
                "amis": [{"id": a, "name": a} for a in amis],
                "subnets": [{"id": "subnet-a", "zone": "us-east-1a"}, {"id": "subnet-b", "zone": "us-east-1b"}],
                "securityGroups": [{"id": "sg-1"}],
            },
        }
    )


def node(
    name: str,
    it: str = "m5.2xlarge",
    *,
    pool_name: str = "general",
    capacity: str = "on-demand",
    zone: str = "us-east-1a",
    image: str = "ami-new",
    initialized: bool = True,
    claim_annotations: dict[str, str] | None = None,
    node_annotations: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    created: str = EARLIER,
    expire_after: str = "720h",
    claim_requirements: list[dict[str, Any]] | None = None,
    deleting: bool = False,
) -> tuple[Node, NodeClaim]:
    cpu, mem = SIZES[it]
    labels = {
        "karpenter.sh/nodepool": pool_name,
        "karpenter.sh/capacity-type": capacity,
        "node.kubernetes.io/instance-type": it,
        "topology.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
    }
    if initialized:
        labels["karpenter.sh/initialized"] = "true"
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created, "labels": labels}
    if node_annotations:
        meta["annotations"] = node_annotations
    if deleting:
        meta["deletionTimestamp"] = "2026-11-21T11:59:00Z"
    n = Node.model_validate(
        {
            "metadata": meta,
            "spec": {"taints": taints or []},
            "status": {
                "capacity": {"cpu": str(cpu), "memory": f"{mem}Gi", "pods": "58"},
                "allocatable": {"cpu": f"{cpu * 1000 - 200}m", "memory": f"{mem - 1}Gi", "pods": "58"},
            },
        }
    )
    reqs = claim_requirements or [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [it]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity]},
    ]
    conditions = [{"type": "Initialized", "status": "True" if initialized else "False", "lastTransitionTime": created}]
    c = NodeClaim.model_validate(
        {
            "metadata": {
                "name": f"{name}-claim",
                "creationTimestamp": created,
                "labels": {"karpenter.sh/nodepool": pool_name},
                "annotations": claim_annotations or {},
            },
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": reqs,
                "expireAfter": expire_after,
            },
            "status": {"nodeName": name, "imageID": image, "conditions": conditions},
        }
    )
    return n, c


def pod(
    name: str,
    on: str | None,
    cpu: str = "1",
    mem: str = "2Gi",
    *,
    labels: dict[str, str] | None = None,
    owner: str | None = None,
    annotations: dict[str, str] | None = None,
    created: str = "2026-11-20T09:00:00Z",
    priority: int | None = None,
    started: str | None = None,
) -> Pod:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "creationTimestamp": created,
        "labels": labels or {"app": "web"},
        "annotations": annotations or {},
    }
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "u", "controller": True}
        ]
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]
    }
    if on:
        spec["nodeName"] = on
    if priority is not None:
        spec["priority"] = priority
    status: dict[str, Any] = {"phase": "Running" if on else "Pending"}
    if started is not None:
        status["startTime"] = started
    return Pod.model_validate({"metadata": meta, "spec": spec, "status": status})


def pdb(match: dict[str, str], allowed: int) -> PodDisruptionBudget:
    return PodDisruptionBudget.model_validate(
        {
            "metadata": {"name": "pdb", "namespace": "default"},
            "spec": {"selector": {"matchLabels": match}, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": allowed},
        }
    )


def snapshot(
    nodes: list[tuple[Node, NodeClaim]],
    pods: list[Pod],
    pools: list[NodePool] | None = None,
    classes: list[EC2NodeClass] | None = None,
    pdbs: list[PodDisruptionBudget] | None = None,
) -> Snapshot:
    return Snapshot(
        state=ClusterState(
            node_pools=tuple(pools if pools is not None else [pool()]),
            node_classes=tuple(classes if classes is not None else [node_class()]),
            node_claims=tuple(c for _, c in nodes),
            nodes=tuple(n for n, _ in nodes),
            pods=tuple(pods),
        ),
        pdbs=tuple(pdbs or ()),
    )
