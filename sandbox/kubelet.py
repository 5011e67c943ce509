"""What a simulated kubelet writes (``sandbox.kwok.SimulatedKubelets`` runs them): moto instances launched for
NodeClaims become Kubernetes Nodes.

What a real kubelet started from nodeflow's user data does, seen from the API server: it registers a Node named
after the instance's private DNS name, with ``spec.providerID`` ``aws:///<zone>/<instance id>``, the NodeClaim's
labels plus the well-known ones, the claim's taints and startup taints plus ``karpenter.sh/unregistered``, and
Ready=False. A little later it reports Ready=True, and the daemons that own the startup taints (CNI, CSI, ...)
remove them. When the instance goes away the Node stays, and its Ready condition becomes Unknown (the node
lifecycle controller's doing, in a real cluster). Removing ``karpenter.sh/unregistered`` and linking the Node to
its NodeClaim are Karpenter's (here nodeflow's) job, not the kubelet's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from nodeflow.kube.client import NODE_CLAIMS, NODES, STRATEGIC_MERGE_PATCH, KubeClient
from nodeflow.kube.errors import Conflict, NotFound

__all__ = [
    "DEFAULT_CAPACITY",
    "UNREGISTERED_TAINT",
    "cluster_instances",
    "mark_ready",
    "node_body",
    "node_claim",
    "provider_id",
    "ready_condition",
]

TAG_NODECLAIM = "karpenter.sh/nodeclaim"
UNREGISTERED_TAINT = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
DEFAULT_CAPACITY = {"cpu": "2", "memory": "8Gi", "pods": "110"}
LIVE_STATES = ("pending", "running")
GONE_STATES = ("shutting-down", "terminated", "stopping", "stopped")
_EC2_ARCH = {"x86_64": "amd64", "arm64": "arm64", "x86_64_mac": "amd64", "arm64_mac": "arm64"}


def provider_id(zone: str, instance_id: str) -> str:
    return f"aws:///{zone}/{instance_id}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _taint(t: Mapping[str, Any]) -> dict[str, str]:
    out = {"key": str(t["key"]), "effect": str(t["effect"])}
    if t.get("value"):
        out["value"] = str(t["value"])
    return out


def _taint_id(t: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(t.get("key")), str(t.get("value") or ""), str(t.get("effect")))


def node_claim(kube: KubeClient, name: str) -> dict[str, Any] | None:
    """The NodeClaim ``name`` (None when the name is empty or the claim does not exist)."""
    if not name:
        return None
    try:
        return kube.get(NODE_CLAIMS, name)
    except NotFound:
        return None


def cluster_instances(ec2: Any, cluster_name: str) -> Iterator[dict[str, Any]]:
    """The EC2 instances of ``cluster_name`` launched for a NodeClaim (every state), all pages."""
    filters = [
        {"Name": f"tag:kubernetes.io/cluster/{cluster_name}", "Values": ["owned"]},
        {"Name": "tag-key", "Values": [TAG_NODECLAIM]},
    ]
    kwargs: dict[str, Any] = {"Filters": filters, "MaxResults": 1000}
    while True:
        page = ec2.describe_instances(**kwargs)
        for reservation in page.get("Reservations") or []:
            yield from reservation.get("Instances") or []
        token = page.get("NextToken")
        if not token:
            return
        kwargs["NextToken"] = token


def node_body(inst: Mapping[str, Any], claim: Mapping[str, Any], kubelet_version: str) -> dict[str, Any]:
    """The Node a kubelet started from nodeflow's user data registers for ``inst``/``claim``: Ready=False."""
    iid = inst["InstanceId"]
    zone = (inst.get("Placement") or {}).get("AvailabilityZone", "")
    ip = inst.get("PrivateIpAddress") or ""
    name = inst.get("PrivateDnsName") or (f"ip-{ip.replace('.', '-')}.ec2.internal" if ip else iid)
    claim_meta = claim.get("metadata") or {}
    claim_spec = claim.get("spec") or {}
    claim_status = claim.get("status") or {}
    claim_labels: dict[str, str] = dict(claim_meta.get("labels") or {})
    arch = claim_labels.get("kubernetes.io/arch") or _EC2_ARCH.get(inst.get("Architecture") or "", "amd64")
    labels = {
        **claim_labels,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch,
        "node.kubernetes.io/instance-type": inst.get("InstanceType", ""),
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": zone[:-1] if zone else "",
        "karpenter.sh/capacity-type": "spot" if inst.get("InstanceLifecycle") == "spot" else "on-demand",
    }
    taints: list[dict[str, str]] = []
    for t in [*(claim_spec.get("taints") or []), *(claim_spec.get("startupTaints") or []), UNREGISTERED_TAINT]:
        taint = _taint(t)
        if _taint_id(taint) not in {_taint_id(x) for x in taints}:
            taints.append(taint)
    capacity = dict(claim_status.get("capacity") or DEFAULT_CAPACITY)
    allocatable = dict(claim_status.get("allocatable") or capacity)
    now = _now()
    addresses = [{"type": "InternalIP", "address": ip}] if ip else []
    addresses += [{"type": "InternalDNS", "address": name}, {"type": "Hostname", "address": name}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": provider_id(zone, iid), "taints": taints},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "addresses": addresses,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "KubeletNotReady",
                    "message": "container runtime network not ready: NetworkReady=false",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "nodeInfo": {
                "architecture": arch,
                "operatingSystem": "linux",
                "kubeletVersion": kubelet_version,
                "containerRuntimeVersion": "containerd://1.7.27",
            },
        },
    }


def ready_condition(stamp: str) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def mark_ready(kube: KubeClient, name: str, startup_taints: list[dict[str, str]], attempts: int = 5) -> bool:
    """Report the Node Ready, then remove its startup taints as the daemons owning them would (a strategic merge
    status patch, then a spec patch guarded by the resourceVersion read, read again and retried on a conflict: the
    node lifecycle controller writes the same taints when the Node turns Ready); False when every attempt met a
    conflict (try again on a later pass)."""
    kube.patch(
        NODES,
        name,
        {"status": {"conditions": [ready_condition(_now())]}},
        subresource="status",
        content_type=STRATEGIC_MERGE_PATCH,
    )
    startup = {_taint_id(t) for t in startup_taints}
    if not startup:
        return True
    for _ in range(attempts):
        current = kube.get(NODES, name)
        taints = (current.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if _taint_id(t) not in startup]
        if len(kept) == len(taints):
            return True
        try:
            kube.patch(
                NODES,
                name,
                {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "spec": {"taints": kept}},
            )
        except Conflict:
            continue
        return True
    return False
