"""The Kubernetes side of the Lambdas' access: the groups each function's EKS access entry puts its role in.

``infra/cluster/controller-rbac.yaml`` binds each group to what its functions call, and nothing else. The stack
(``infra.iam.access_entry``) and the sandbox (each in-process handler invocation impersonates its function's
groups against the tests' real kube-apiserver, which enforces that file) read the same table, so what is tested
is what is deployed. Plain Python, no CDK: the sandbox imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "ACCESS_POLICIES",
    "CONTROLLER_RBAC",
    "EVENTS",
    "FUNCTION_GROUPS",
    "GROUPS",
    "KARPENTER_WATCH",
    "SNAPSHOT",
    "groups_of",
]

CONTROLLER_RBAC = Path(__file__).resolve().parent / "cluster" / "controller-rbac.yaml"

EVENTS = "nodeflow-events"
SNAPSHOT = "nodeflow-snapshot"
KARPENTER_WATCH = "nodeflow-karpenter-watch"

# group -> what it is for (each is bound to the ClusterRole of the same name in controller-rbac.yaml)
GROUPS: Mapping[str, str] = {
    EVENTS: "record Events (create, bump, read)",
    SNAPSHOT: "LIST every kind of the cluster snapshot",
    "nodeflow-provisioner": "create NodeClaims; NodePool and EC2NodeClass status",
    "nodeflow-launch": "the launch step: its NodeClaim, its EC2NodeClass",
    "nodeflow-registration": "the register and initialize steps: NodeClaim status, the Node; NodePool status counts",
    "nodeflow-housekeeping": "cleanup and gc: delete NodeClaims and Nodes, remove their finalizers",
    "nodeflow-nodeclasses": "gc: resolve EC2NodeClasses, NodePool and EC2NodeClass status, list pods (nominations)",
    "nodeflow-termination": (
        "the taint and remove-finalizer steps: delete, taint, finalize NodeClaim and Node; NodePool status counts"
    ),
    "nodeflow-drain": "the drain step: evict (and at the deadline delete) pods, wait for volumes",
    "nodeflow-terminate": "the terminate step: NodeClaim status",
    "nodeflow-interruption": "map interruptions and deletions to NodeClaims",
    "nodeflow-disruption": "taint candidates, create replacements, NodeClaim conditions, the pause switch",
    "nodeflow-replace": "the replace workflow: watch replacements, roll back taints",
    KARPENTER_WATCH: "list Karpenter's Deployments and leader-election Lease (hold still while it runs)",
}

# function suffix (infra.functions FUNCTIONS) -> its Kubernetes groups; exactly the functions that use "kube"
FUNCTION_GROUPS: Mapping[str, tuple[str, ...]] = {
    "provisioner": (SNAPSHOT, EVENTS, "nodeflow-provisioner", KARPENTER_WATCH),
    "launch": (EVENTS, "nodeflow-launch"),
    "register": ("nodeflow-registration",),
    "initialize": ("nodeflow-registration",),
    "cleanup": (EVENTS, "nodeflow-housekeeping"),
    "gc": (EVENTS, "nodeflow-housekeeping", "nodeflow-nodeclasses", KARPENTER_WATCH),
    "taint": (EVENTS, "nodeflow-termination"),
    "drain": (EVENTS, "nodeflow-drain"),
    "terminate": (EVENTS, "nodeflow-terminate"),
    "finalize": ("nodeflow-termination",),
    "interruption": (EVENTS, "nodeflow-interruption", KARPENTER_WATCH),
    "disruption": (SNAPSHOT, EVENTS, "nodeflow-disruption", KARPENTER_WATCH),
    "replace": (EVENTS, "nodeflow-replace"),
}


# function suffix -> (EKS access policy of its access entry, when the stack creates it). Only the installer: it
# installs the CRDs and the RBAC above, which no group can be bound for before they exist (infra/install.py).
ACCESS_POLICIES: Mapping[str, tuple[str, str]] = {
    "install": ("AmazonEKSClusterAdminPolicy", "clusterInstall (default with eksAccessEntries)"),
}


def groups_of(suffix: str) -> tuple[str, ...]:
    """The Kubernetes groups of function ``suffix`` (KeyError naming it when it has none)."""
    try:
        return FUNCTION_GROUPS[suffix]
    except KeyError:
        raise KeyError(f"infra.cluster_rbac: function {suffix!r} has no Kubernetes groups (FUNCTION_GROUPS)") from None
