"""NodePools and EC2NodeClasses to solver input (``NodePoolInput``). Pure.

Decides what of an EC2NodeClass shapes instance types (``node_class_settings``), whether a class is ready
(``node_class_readiness``: a NodePool whose class is not is unusable, its reason said), a NodePool's requirements
(its template's, the class's subnet zones) and the instance types it may launch (the catalog resolved for its
class, offerings known unavailable left out, the capacity reservations its class selects).

Must not touch: NodeOverlays (``overlays``), NodeflowPolicies (``policies``), pods or nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeflow.api import labels as wk
from nodeflow.api.block_devices import ephemeral_volume_bytes
from nodeflow.api.karpenter import EC2NodeClass, NodePool
from nodeflow.api.quantity import to_milli
from nodeflow.catalog.instancetypes import NodeClassSettings, resolve_instance_types
from nodeflow.catalog.model import CatalogData, InstanceType
from nodeflow.catalog.reservations import CapacityReservation
from nodeflow.plan.pods import taint
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.types import NodePoolInput

__all__ = ["node_class_readiness", "node_class_settings", "pool_input"]


def node_class_settings(node_class: EC2NodeClass) -> NodeClassSettings:
    """What of an EC2NodeClass shapes instance types: AMI family, kubelet, the volume its nodes' ephemeral storage
    lives on (the one the launch template gets: ``nodeflow.api.block_devices``), RAID0."""
    family = node_class.resolved_ami_family
    kubelet = node_class.kubelet
    return NodeClassSettings.create(
        ami_family=family,
        max_pods=kubelet.max_pods,
        pods_per_core=kubelet.pods_per_core,
        kube_reserved=kubelet.kube_reserved,
        system_reserved=kubelet.system_reserved,
        eviction_hard=kubelet.eviction_hard,
        eviction_soft=kubelet.eviction_soft,
        root_volume_bytes=ephemeral_volume_bytes(family, node_class.spec.block_device_mappings),
        instance_store_policy=node_class.spec.instance_store_policy,
    )


def node_class_readiness(node_class: EC2NodeClass) -> tuple[str, str]:
    """("True" | "False" | "Unknown", message) of the EC2NodeClass's Ready condition. A condition written
    for an older generation of the object (it was edited since) says nothing: "Unknown". A class being deleted is
    not ready, whatever its condition says (as Karpenter, which launches nothing from a terminating class)."""
    if node_class.metadata.deletion_timestamp is not None:
        return "False", f"EC2NodeClass {node_class.name!r} is being deleted"
    conditions = node_class.status.conditions if node_class.status is not None else None
    ready = next((c for c in conditions or () if c.type == "Ready"), None)
    if ready is None:
        return "Unknown", f"EC2NodeClass {node_class.name!r} has not been resolved yet"
    observed, generation = ready.observed_generation, node_class.metadata.generation
    if observed is not None and generation is not None and observed != generation:
        return "Unknown", f"EC2NodeClass {node_class.name!r} changed since it was last resolved"
    return ready.status, ready.message or ("" if ready.status == "True" else "not ready")


def _pool_requirements(pool: NodePool, node_class: EC2NodeClass | None = None) -> Requirements:
    reqs = Requirements(
        Requirement.create(r.key, r.operator, r.values or (), r.min_values)
        for r in pool.spec.template.spec.requirements
    )
    # A resolved EC2NodeClass limits the zones to those of its subnets (Karpenter does the same).
    subnets = node_class.status.subnets if node_class is not None and node_class.status is not None else None
    zones = sorted({s.zone for s in subnets or () if s.zone})
    if zones:
        reqs = reqs.add(Requirements([Requirement.create(wk.LABEL_ZONE, "In", zones)]))
    return reqs


def pool_input(
    pool: NodePool,
    classes: Mapping[str, EC2NodeClass],
    catalog: CatalogData,
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
    reservations: Mapping[str, tuple[CapacityReservation, ...]] | None = None,
) -> NodePoolInput:
    spec = pool.spec.template.spec
    ref = spec.node_class_ref
    error: str | None = None
    types: tuple[InstanceType, ...] = ()
    if ref.group != wk.AWS_GROUP or ref.kind != "EC2NodeClass":
        error = f"nodeClassRef {ref.group}/{ref.kind} is not supported (expected {wk.AWS_GROUP}/EC2NodeClass)"
    elif ref.name not in classes:
        error = f"EC2NodeClass {ref.name!r} (spec.template.spec.nodeClassRef) was not found"
    elif (readiness := node_class_readiness(classes[ref.name]))[0] == "False":
        # Karpenter skips a NodePool whose class is not Ready: its launches could only fail.
        error = f"EC2NodeClass {ref.name!r} is not ready: {readiness[1]}"
    else:
        types = tuple(
            resolve_instance_types(
                catalog, node_class_settings(classes[ref.name]), unavailable, (reservations or {}).get(ref.name, ())
            )
        )
    limits = pool.spec.limits
    return NodePoolInput(
        name=pool.name,
        requirements=_pool_requirements(pool, classes.get(ref.name)),
        instance_types=types,
        weight=pool.spec.weight or 0,
        taints=tuple(taint(t) for t in spec.taints or ()),
        startup_taints=tuple(taint(t) for t in spec.startup_taints or ()),
        labels=dict(pool.spec.template.metadata.labels or {}),
        limits={k: to_milli(v) for k, v in limits.items()} if limits is not None else None,
        error=error,
    )
