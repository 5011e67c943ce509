"""Nodes launched for a real workload through nodeflow's normal path, on the real control plane: a ReplicaSet's pods
that kube-scheduler found no node for, the provisioner, the launch workflow, then kube-scheduler binding the pods to
the new nodes where the simulated kubelets run them. What tests of the later phases (disruption, interruption,
faults) start from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.nodeflow import LocalNodeflow
from tests.realk8s.workloads import replica_set, running, unschedulable

__all__ = ["Launched", "launch_node", "launch_workload", "pending_workload"]


@dataclass(frozen=True)
class Launched:
    """One NodeClaim launched for a workload, and what runs on its node."""

    claim: str
    node: str
    instance_id: str
    pods: list[str]  # the names of the workload's pods running there (namespace default)


def pending_workload(
    local: LocalNodeflow, name: str, replicas: int, cpu: str = "1", memory: str = "1Gi", **spec: Any
) -> list[str]:
    """ReplicaSet ``name`` of ``replicas`` pods (``spec``: more pod spec fields), waited for until kube-scheduler
    marked every pod Unschedulable, and reported to the provisioning queue as the agent would; the pods' keys."""
    local.apply([replica_set(name, replicas, cpu, memory, **spec)])
    keys = unschedulable(local.kube_server, name, replicas)
    local.send_pending([f"default/{name}"])
    return keys


def launch_workload(
    local: LocalNodeflow, name: str, replicas: int, cpu: str = "1", memory: str = "1Gi", *, claims: int = 1, **spec: Any
) -> list[dict[str, Any]]:
    """``pending_workload``, provisioned: ``claims`` NodeClaims created and launched, and the pods Running on their
    nodes (bound by kube-scheduler). Returns the NodeClaims, in the order the provisioner created them."""
    pending_workload(local, name, replicas, cpu, memory, **spec)
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert len(created) == claims, created
    done = {d["name"]: d["status"] for d in local.wait_for_executions()}
    assert [done.get(c) for c in created] == ["SUCCEEDED"] * claims, done
    pods = running(local.kube_server, name, replicas)
    out = [local.kube_server.get("karpenter.sh/v1", "NodeClaim", c) for c in created]
    nodes = {c["status"]["nodeName"] for c in out}
    assert {p["spec"]["nodeName"] for p in pods} <= nodes, (pods, nodes)
    return out


def launch_node(
    local: LocalNodeflow, app: str, replicas: int = 1, cpu: str = "500m", memory: str = "512Mi"
) -> Launched:
    """``replicas`` small pods of ReplicaSet ``app`` running on one node launched for them."""
    (claim,) = launch_workload(local, app, replicas, cpu, memory)
    node = claim["status"]["nodeName"]
    pods = sorted(
        p["metadata"]["name"]
        for p in local.kube_server.list_items("v1", "Pod", "default", label_selector=f"app={app}")
        if p["spec"].get("nodeName") == node
    )
    return Launched(claim["metadata"]["name"], node, claim["status"]["providerID"].rsplit("/", 1)[-1], pods)
