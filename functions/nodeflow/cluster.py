"""The cluster as nodeflow's decisions read it: ``ClusterState`` (the Kubernetes and Karpenter objects, from
manifests or a snapshot of the API server) and the facts about its NodeClaims and Nodes that the planner, the
spend count and the lifecycle share. Pure: plain data, no I/O.

Must not touch: what any decision makes of the objects (plan, disruption, governance); how they are read
(``nodeflow.kube.snapshot``, ``nodeflow.api.manifests``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from nodeflow.api import labels as wk
from nodeflow.api.core import (
    DaemonSet,
    Namespace,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    StorageClass,
)
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.api.karpenter_overlay import NodeOverlay
from nodeflow.api.manifests import Manifests
from nodeflow.api.nodeflow_policy import NodeflowPolicy
from nodeflow.catalog.reservations import CapacityReservation

__all__ = ["ClusterState", "claim_index", "left_behind", "nominated_pods"]


@dataclass(frozen=True, slots=True)
class ClusterState:
    """The objects a plan is made from (what `plan` reads from files, or a cluster snapshot)."""

    node_pools: Sequence[NodePool] = ()
    node_classes: Sequence[EC2NodeClass] = ()
    node_claims: Sequence[NodeClaim] = ()
    pods: Sequence[Pod] = ()
    daemon_sets: Sequence[DaemonSet] = ()
    nodes: Sequence[Node] = ()
    pvcs: Sequence[PersistentVolumeClaim] = ()
    pvs: Sequence[PersistentVolume] = ()
    storage_classes: Sequence[StorageClass] = ()
    namespaces: Sequence[Namespace] = ()
    pdbs: Sequence[PodDisruptionBudget] = ()
    # Every capacity reservation known (DescribeCapacityReservations); each EC2NodeClass gets those its
    # capacityReservationSelectorTerms select, as ``reserved`` offerings of its instance types.
    capacity_reservations: Sequence[CapacityReservation] = ()
    node_overlays: Sequence[NodeOverlay] = ()
    # nodeflow.io/v1alpha1 NodeflowPolicies: who may create which capacity, at what cost, when (``governance``).
    policies: Sequence[NodeflowPolicy] = ()

    @staticmethod
    def from_manifests(manifests: Manifests) -> ClusterState:
        return ClusterState(
            node_pools=manifests.node_pools,
            node_classes=manifests.node_classes,
            node_claims=manifests.node_claims,
            pods=manifests.pods,
            daemon_sets=manifests.daemon_sets,
            nodes=manifests.nodes,
            pvcs=manifests.pvcs,
            pvs=manifests.pvs,
            storage_classes=manifests.storage_classes,
            namespaces=manifests.namespaces,
            pdbs=manifests.pdbs,
            capacity_reservations=manifests.capacity_reservations,
            node_overlays=manifests.node_overlays,
            policies=manifests.policies,
        )


def claim_index(
    claims: Sequence[NodeClaim],
) -> tuple[dict[str, NodeClaim], dict[str, NodeClaim], set[str]]:
    """The NodeClaims not being deleted by their Node's name and by provider id, and the Node names and provider
    ids of those being deleted (their Nodes are going away with them)."""
    live = [c for c in claims if c.status is not None and c.metadata.deletion_timestamp is None]
    by_node = {c.status.node_name: c for c in live if c.status is not None and c.status.node_name}
    by_provider = {c.status.provider_id: c for c in live if c.status is not None and c.status.provider_id}
    going = {
        ref
        for c in claims
        if c.status is not None and c.metadata.deletion_timestamp is not None
        for ref in (c.status.node_name, c.status.provider_id)
        if ref
    }
    return by_node, by_provider, going


def left_behind(node: Node) -> bool:
    """A NodePool's Node that no live NodeClaim names (by status.nodeName or providerID) and that still carries
    ``karpenter.sh/unregistered`` or reports Ready other than True was left by a failed or terminated launch (its
    instance is likely gone): it is not capacity, and garbage collection deletes it. Pods planned onto it would
    wait for ever (Karpenter deletes such a Node with its NodeClaim). A Node without a Ready condition (as in
    manifests given to ``plan``) is taken as it is."""
    if wk.LABEL_NODEPOOL not in (node.metadata.labels or {}):
        return False  # not a NodePool's node: judged like any node (its taints count)
    ready = next((c.status for c in node.status.conditions if c.type == "Ready"), None)
    unregistered = any(t.key == wk.TAINT_UNREGISTERED for t in node.spec.taints or ())
    return unregistered or (ready is not None and ready != "True")


def nominated_pods(claim: NodeClaim) -> tuple[str, ...]:
    """The pods ("namespace/name") ``claim`` was created for (its nominated-pods annotation)."""
    raw = (claim.metadata.annotations or {}).get(wk.ANNOTATION_NOMINATED_PODS)
    if not raw:
        return ()
    try:
        keys = json.loads(raw)
    except ValueError:
        return ()
    return tuple(k for k in keys if isinstance(k, str)) if isinstance(keys, list) else ()
