"""The objects a plan is made from: ``ClusterState``, what ``plan`` reads from files or a cluster snapshot. Pure.

Decides nothing: it only holds the Kubernetes, Karpenter and nodeflow objects (and the capacity reservations
known) that the other modules of ``nodeflow.plan`` turn into solver input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

__all__ = ["ClusterState"]


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
