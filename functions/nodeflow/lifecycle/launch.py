"""The Launch step: one EC2 instance for one NodeClaim.

Idempotent: a NodeClaim that already has a providerID, or whose instance exists (found by its
``karpenter.sh/nodeclaim`` tag), is not launched again; each CreateFleet call carries a ClientToken
derived from the NodeClaim uid, the attempt and the request (``nodeflow.aws.ec2.fleet.fleet_client_token``), so a
fallback is a new request to EC2 and a repeated call the same one. Capacity errors mark the
offerings unavailable (3 minutes, shared through DynamoDB) and the launch falls back to the remaining
offerings; when none is left it raises ``NoCapacity``. A launch template garbage collection deleted after this step
found it (CreateFleet answers ``InvalidLaunchTemplateName.NotFoundException``) is made again and the call repeated,
once, as Karpenter's AWS provider retries; a NodeClaim whose EC2NodeClass is being deleted is not launched.

Reserved capacity (Karpenter's priority: reserved, then spot, then on-demand). A NodeClaim that allows
``karpenter.sh/capacity-type: reserved`` launches into one of its EC2NodeClass's capacity reservations when one
fits (``reserved_options``: the reservations the class resolved, live from DescribeCapacityReservations, with
instances left, not ``expiring``, of an instance type, zone and reservation id the NodeClaim allows, and not
marked unavailable), one reservation type at a time as Karpenter (default, then capacity blocks, then
interruptible). Each reservation gets its own launch template that targets it (capacity blocks on the
capacity-block market) and CreateFleet chooses among them; the NodeClaim gets ``karpenter.sh/capacity-type:
reserved`` and the ``karpenter.k8s.aws/capacity-reservation-id`` / ``-type`` / ``-interruptible`` labels. A
reservation EC2 answers as exhausted is marked unavailable (its type and zone, capacity type ``reserved``) and
the launch falls back to spot / on-demand when the NodeClaim allows them; a NodeClaim that allows only reserved
capacity fails with ``NoCapacity``, its pods are provisioned again and the solver no longer offers it the
exhausted reservation (as Karpenter deletes such a NodeClaim and schedules again).

Must not touch: how a launch template is made (``nodeflow.aws.ec2.launch_templates``) or CreateFleet is called
(``nodeflow.aws.ec2.fleet``); registration (the next step).
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.block_devices import launched_block_device_mappings
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim
from nodeflow.api.quantity import format_milli, parse_quantity
from nodeflow.aws.ec2.fleet import (
    MAX_FLEET_OVERRIDES,
    CapacityType,
    FleetRequest,
    FleetReservation,
    LaunchedInstance,
    create_fleet,
)
from nodeflow.aws.ec2.instances import InstanceInfo, describe_instance_states, list_cluster_instances
from nodeflow.aws.ec2.launch_template_data import LaunchTemplateSpec
from nodeflow.aws.ec2.launch_templates import ensure_launch_template, is_launch_template_not_found
from nodeflow.aws.ec2.node_class import ResolvedNodeClass
from nodeflow.aws.ec2.placement_groups import resolve_placement_group
from nodeflow.aws.errors import InsufficientCapacity, NotFound, Offering
from nodeflow.aws.offerings import UnavailableOfferings
from nodeflow.aws.userdata import ClusterInfo, NodeBootstrap, bottlerocket_version, render_user_data
from nodeflow.catalog.instancetypes import NodeClassSettings, resolve_instance_types
from nodeflow.catalog.model import CatalogData, InstanceType
from nodeflow.catalog.reservations import RESERVATION_TYPE_CAPACITY_BLOCK, CapacityReservation, status_state
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import EC2_NODE_CLASSES, NODE_CLAIMS, KubeClient
from nodeflow.kube.events import EventRecorder
from nodeflow.kube.status import set_condition
from nodeflow.kube.writes import get_node_claim
from nodeflow.lifecycle.errors import LaunchFailed, NoCapacity, NodeClaimGone, NodeClassNotReady
from nodeflow.lifecycle.nodeclass import NodeClassResolver, hash_annotations
from nodeflow.plan import node_class_settings
from nodeflow.scheduling.pricing import type_matches
from nodeflow.scheduling.requirements import Requirement, Requirements

__all__ = [
    "LaunchDeps",
    "LaunchOptions",
    "NodeClassCache",
    "claim_requirements",
    "launch",
    "launch_options",
    "provider_id",
    "reservation_labels",
    "reserved_options",
]

MAX_ATTEMPTS = 4  # CreateFleet calls per Launch step that each remove what ran out of capacity (+1: a remade template)
_CAPACITY_ORDER = (wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND)
# Label domains the kubelet may not set on itself (NodeRestriction), except the listed keys.
_KUBELET_ALLOWED = frozenset(
    {
        wk.LABEL_HOSTNAME,
        wk.LABEL_ARCH,
        wk.LABEL_OS,
        wk.LABEL_INSTANCE_TYPE,
        wk.LABEL_ZONE,
        wk.LABEL_REGION,
    }
)


class NodeClassCache:
    """Resolved EC2NodeClasses for ``ttl_seconds`` (a warm Lambda container launches many nodes).

    Keyed by the object's uid and generation: an edited EC2NodeClass resolves again at once."""

    def __init__(self, ttl_seconds: float = 60.0) -> None:
        self.ttl_seconds = ttl_seconds
        self._items: dict[tuple[str, str, int], tuple[ResolvedNodeClass, datetime]] = {}

    @staticmethod
    def _key(node_class: EC2NodeClass) -> tuple[str, str, int]:
        return (node_class.name, node_class.metadata.uid or "", node_class.metadata.generation or 0)

    def get(self, node_class: EC2NodeClass, now: datetime) -> ResolvedNodeClass | None:
        hit = self._items.get(self._key(node_class))
        if hit is None or (now - hit[1]).total_seconds() >= self.ttl_seconds or not hit[0].ready:
            return None
        return hit[0]

    def put(self, node_class: EC2NodeClass, resolved: ResolvedNodeClass, now: datetime) -> None:
        self._items[self._key(node_class)] = (resolved, now)


@dataclass(frozen=True)
class LaunchDeps:
    kube: KubeClient
    ec2: Any
    ssm: Any
    iam: Any
    offerings: UnavailableOfferings
    catalog: CatalogData
    cluster: ClusterInfo
    kubernetes_version: Callable[[], str]
    now: Callable[[], datetime]
    recorder: EventRecorder
    node_classes: NodeClassCache | None = None


def provider_id(zone: str | None, instance_id: str) -> str:
    return f"aws:///{zone or ''}/{instance_id}"


def claim_requirements(claim: NodeClaim) -> Requirements:
    return Requirements(
        Requirement.create(r.key, r.operator, r.values or (), r.min_values) for r in claim.spec.requirements
    )


_OFFERING_LABELS = frozenset(
    {
        wk.LABEL_ZONE,
        wk.LABEL_ZONE_ID,
        wk.LABEL_CAPACITY_TYPE,
        wk.LABEL_CAPACITY_RESERVATION_ID,
        wk.LABEL_CAPACITY_RESERVATION_TYPE,
        wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    }
)


def _reservation_rank(r: CapacityReservation) -> int:
    """Karpenter launches one reservation type at a time: default reservations, then capacity blocks, then
    interruptible reservations."""
    if r.reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK:
        return 1
    return 2 if r.interruptible else 0


def reserved_options(
    claim: NodeClaim,
    types: Sequence[InstanceType],
    subnets_by_zone: Mapping[str, str],
    architectures: Iterable[str],
    reservations: Sequence[CapacityReservation],
    unavailable: frozenset[tuple[str, str, str]],
    now: datetime,
) -> tuple[tuple[CapacityReservation, InstanceType], ...]:
    """The capacity reservations ``claim`` may launch into, with their instance types (pure): none unless it allows
    capacity type ``reserved``; else those with instances left, not expiring (a capacity block within 40 minutes of
    its end), in a zone with a subnet, whose instance type, zone, reservation id, type and interruptibility the
    claim allows, whose (type, zone, ``reserved``) offering is not unavailable, and of an architecture with an AMI.
    Only the first reservation type that has any (default, capacity block, interruptible), all of one
    architecture (the first's), at most ``MAX_FLEET_OVERRIDES``, in id order."""
    reqs = claim_requirements(claim)
    ct_req = reqs.get(wk.LABEL_CAPACITY_TYPE)
    if ct_req is None or not ct_req.has(wk.CAPACITY_TYPE_RESERVED):
        return ()
    arches = set(architectures)
    type_reqs = Requirements(r for key, r in reqs.items() if key not in _OFFERING_LABELS)  # the offerings' below
    by_name = {it.name: it for it in types if type_matches(it, type_reqs) and it.labels.get(wk.LABEL_ARCH) in arches}
    offering_reqs = (
        (wk.LABEL_ZONE, lambda r: r.zone),
        (wk.LABEL_CAPACITY_RESERVATION_ID, lambda r: r.id),
        (wk.LABEL_CAPACITY_RESERVATION_TYPE, lambda r: r.reservation_type),
        (wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE, lambda r: "true" if r.interruptible else "false"),
    )
    fits: list[tuple[CapacityReservation, InstanceType]] = []
    for r in sorted(reservations, key=lambda r: r.id):
        it = by_name.get(r.instance_type)
        if it is None or r.zone not in subnets_by_zone or r.available_instance_count <= 0:
            continue
        if r.state != "active" or r.ended(now) or status_state(r, now) != "active":
            continue
        if (r.instance_type, r.zone, wk.CAPACITY_TYPE_RESERVED) in unavailable:
            continue
        if any((req := reqs.get(key)) is not None and not req.has(value(r)) for key, value in offering_reqs):
            continue
        fits.append((r, it))
    if not fits:
        return ()
    rank = min(_reservation_rank(r) for r, _ in fits)
    arch = next(it.labels.get(wk.LABEL_ARCH) for r, it in fits if _reservation_rank(r) == rank)
    chosen = [(r, it) for r, it in fits if _reservation_rank(r) == rank and it.labels.get(wk.LABEL_ARCH) == arch]
    return tuple(chosen[:MAX_FLEET_OVERRIDES])


@dataclass(frozen=True)
class LaunchOptions:
    """What one CreateFleet call may choose from."""

    capacity_type: str
    instance_types: tuple[InstanceType, ...]  # cheapest first, one architecture
    architecture: str
    subnets: Mapping[str, str]  # zone -> subnet id
    excluded: frozenset[tuple[str, str]]  # (type, zone) pairs not offered / unavailable


def launch_options(
    claim: NodeClaim,
    types: Sequence[InstanceType],
    subnets_by_zone: Mapping[str, str],
    architectures: Iterable[str],
) -> LaunchOptions | None:
    """The capacity type to launch, spot before on-demand as the AWS provider's getCapacityType (the first the
    claim allows, an absent requirement allowing both, that a compatible type offers in a zone with a subnet), and
    for it up to 60 compatible instance types of the cheapest type's architecture. None when nothing is left."""
    reqs = claim_requirements(claim)
    zone_req = reqs.get(wk.LABEL_ZONE)
    zones = sorted(z for z in subnets_by_zone if zone_req is None or zone_req.has(z))
    ct_req = reqs.get(wk.LABEL_CAPACITY_TYPE)
    arches = set(architectures)
    compatible = [it for it in types if type_matches(it, reqs) and it.labels.get(wk.LABEL_ARCH) in arches]
    for capacity_type in _CAPACITY_ORDER:
        if ct_req is not None and not ct_req.has(capacity_type):
            continue
        priced: list[tuple[float, str, InstanceType]] = []
        for it in compatible:
            prices = [
                o.price for o in it.offerings if o.available and o.capacity_type == capacity_type and o.zone in zones
            ]
            if prices:
                priced.append((min(prices), it.name, it))
        if not priced:
            continue
        priced.sort(key=lambda p: (p[0], p[1]))
        arch = priced[0][2].labels.get(wk.LABEL_ARCH, "amd64")
        chosen = tuple(it for _, _, it in priced if it.labels.get(wk.LABEL_ARCH) == arch)[:MAX_FLEET_OVERRIDES]
        excluded = frozenset(
            (it.name, zone)
            for it in chosen
            for zone in zones
            if not any(o.available and o.capacity_type == capacity_type and o.zone == zone for o in it.offerings)
        )
        return LaunchOptions(
            capacity_type=capacity_type,
            instance_types=chosen,
            architecture=arch,
            subnets={z: subnets_by_zone[z] for z in zones},
            excluded=excluded,
        )
    return None


def _kubelet_labels(labels: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for key, value in labels.items():
        domain = key.split("/", 1)[0] if "/" in key else ""
        restricted = domain.endswith(("kubernetes.io", "k8s.io"))
        allowed = domain.endswith(("node.kubernetes.io", "node-restriction.kubernetes.io"))
        if not restricted or allowed or key in _KUBELET_ALLOWED:
            out[key] = value
    return out


def _find_launched(deps: LaunchDeps, claim: NodeClaim, cluster_name: str) -> InstanceInfo | None:
    """An instance already launched for ``claim`` (a retried Launch after CreateFleet succeeded)."""
    if claim.status is not None and claim.status.provider_id:
        instance_id = claim.status.provider_id.rsplit("/", 1)[-1]
        return describe_instance_states(deps.ec2, [instance_id]).get(instance_id)
    found = list_cluster_instances(deps.ec2, cluster_name, node_claim=claim.name)
    return found[0] if found else None


def _result(
    claim: NodeClaim,
    instance_id: str,
    instance_type: str,
    zone: str | None,
    capacity_type: str,
    at: str,
    private_dns_name: str | None,
) -> dict[str, Any]:
    """The Launch step's result (the execution's ``launch``); ``privateDnsName`` is the name the instance's kubelet
    registers its Node under by default, which the Register step looks up first."""
    return {
        "nodeClaim": claim.name,
        "instanceId": instance_id,
        "providerID": provider_id(zone, instance_id),
        "instanceType": instance_type,
        "zone": zone,
        "capacityType": capacity_type,
        "launchedAt": at,
        "privateDnsName": private_dns_name,
    }


def _resources(values: Mapping[str, int]) -> dict[str, str]:
    return {k: format_milli(v, k) for k, v in sorted(values.items()) if v}


def launch(deps: LaunchDeps, claim_name: str, cluster_name: str) -> dict[str, Any]:
    """Launch the instance for NodeClaim ``claim_name`` and write the NodeClaim's status."""
    claim = _launchable_claim(deps, claim_name)
    existing = _find_launched(deps, claim, cluster_name)
    if existing is not None:
        return _adopt(deps, claim, existing)
    target = _launch_target(deps, claim, cluster_name)
    number = 0  # this CreateFleet call (part of its ClientToken)
    fallbacks = 0
    remade = False  # a launch template gc deleted after this step found it was made again (once)
    while fallbacks < MAX_ATTEMPTS:
        attempt = _next_attempt(deps, target)
        if attempt is None:
            break
        request = _fleet_request(deps, target, attempt, number)
        number += 1
        try:
            instance = create_fleet(deps.ec2, request)
        except InsufficientCapacity as exc:
            offerings = exc.offerings or tuple(
                Offering(o["InstanceType"], o["AvailabilityZone"], attempt.capacity_type) for o in request.overrides()
            )
            deps.offerings.mark(offerings, deps.now(), reason=exc.code or "InsufficientInstanceCapacity")
            fallbacks += 1
            continue
        except NotFound as exc:
            # garbage collection deleted a template between ensure_launch_template and this call: the next pass
            # makes it again (as Karpenter's one retry); a template still missing after that is an error
            if remade or not is_launch_template_not_found(exc):
                raise
            remade = True
            continue
        return _record_launch(deps, target, attempt, instance)

    message = "all offerings the NodeClaim allows are unavailable (insufficient capacity)"
    deps.recorder.insufficient_capacity(claim, message)
    raise NoCapacity(f"NodeClaim {claim.name}: {message}")


@dataclass(frozen=True)
class _LaunchTarget:
    """What a NodeClaim launches from, fixed for the whole Launch step: its EC2NodeClass, what the class resolved to
    (ready), the placement group it selects, its settings, one subnet per zone and the architectures with an AMI."""

    claim: NodeClaim
    cluster_name: str
    node_class: EC2NodeClass
    resolved: ResolvedNodeClass
    placement_group: str | None
    settings: NodeClassSettings
    subnets: Mapping[str, str]  # zone -> subnet id
    architectures: frozenset[str]


@dataclass(frozen=True)
class _Attempt:
    """What one CreateFleet call offers: a capacity type, instance types of one architecture, zones (with their
    subnet), the (type, zone) pairs left out, the EFA interfaces the template attaches, and for a reserved launch
    the reservations it may use."""

    capacity_type: str
    architecture: str
    instance_types: tuple[InstanceType, ...]
    zones: Mapping[str, str]  # zone -> subnet id
    excluded: frozenset[tuple[str, str]]
    efa_count: int
    reservations: tuple[CapacityReservation, ...] = ()


def _launchable_claim(deps: LaunchDeps, claim_name: str) -> NodeClaim:
    """The NodeClaim, unless it is gone or being deleted (``NodeClaimGone``)."""
    try:
        claim = get_node_claim(deps.kube, claim_name)
    except kerr.NotFound:
        raise NodeClaimGone(f"NodeClaim {claim_name} was deleted before it launched") from None
    if claim.metadata.deletion_timestamp is not None:
        raise NodeClaimGone(f"NodeClaim {claim_name} is being deleted")
    return claim


def _adopt(deps: LaunchDeps, claim: NodeClaim, existing: InstanceInfo) -> dict[str, Any]:
    """A retried Launch whose instance exists: its status is written when it was not yet, and it is the result."""
    at = existing.launch_time.isoformat() if existing.launch_time else deps.now().isoformat()
    if not (claim.status and claim.status.provider_id):
        it = _instance_type(deps, claim, existing.instance_type or "")
        _write_launched(
            deps,
            claim,
            existing.instance_id,
            existing.instance_type or "",
            existing.zone,
            existing.capacity_type,
            it,
            None,
        )
    return _result(
        claim,
        existing.instance_id,
        existing.instance_type or "",
        existing.zone,
        existing.capacity_type,
        at,
        existing.private_dns_name,
    )


def _launch_target(deps: LaunchDeps, claim: NodeClaim, cluster_name: str) -> _LaunchTarget:
    """The claim's EC2NodeClass resolved (from the cache while it is fresh) and ready, and its placement group;
    ``NodeClassNotReady`` otherwise."""
    node_class = _node_class(deps, claim)
    resolved = deps.node_classes.get(node_class, deps.now()) if deps.node_classes is not None else None
    if resolved is None:
        resolver = NodeClassResolver(
            deps.kube,
            deps.ec2,
            deps.ssm,
            deps.iam,
            cluster_name,
            deps.kubernetes_version,
            deps.now,
            deps.cluster.ca_bundle,
            dry_runs=False,
        )
        resolved, _ = resolver.resolve(node_class)
        if deps.node_classes is not None:
            deps.node_classes.put(node_class, resolved, deps.now())
    if not resolved.ready:
        raise NodeClassNotReady(f"EC2NodeClass {node_class.name} is not ready: no usable {', '.join(resolved.missing)}")
    return _LaunchTarget(
        claim=claim,
        cluster_name=cluster_name,
        node_class=node_class,
        resolved=resolved,
        placement_group=_placement_group(deps, node_class),
        settings=node_class_settings(node_class),
        subnets={zone: s.id for zone, s in resolved.subnets_by_zone.items()},
        architectures=frozenset(a.architecture for a in resolved.amis),
    )


def _next_attempt(deps: LaunchDeps, target: _LaunchTarget) -> _Attempt | None:
    """What the next CreateFleet call offers, the offerings unavailable now left out: the claim's capacity
    reservations when any fits (``reserved_options``), else spot or on-demand (``launch_options``); None when
    nothing is left."""
    claim = target.claim
    unavailable = deps.offerings.current(deps.now())
    types = resolve_instance_types(deps.catalog, target.settings, unavailable)
    reserved = reserved_options(
        claim,
        types,
        target.subnets,
        target.architectures,
        target.resolved.capacity_reservations,
        unavailable,
        deps.now(),
    )
    if reserved:
        return _reserved_attempt(claim, reserved, target.subnets)
    options = launch_options(claim, types, target.subnets, target.architectures)
    if options is None:
        return None
    chosen_types, efa_count = _efa_group(claim, options.instance_types)
    return _Attempt(
        options.capacity_type, options.architecture, chosen_types, options.subnets, options.excluded, efa_count
    )


def _reserved_attempt(
    claim: NodeClaim, reserved: Sequence[tuple[CapacityReservation, InstanceType]], subnets: Mapping[str, str]
) -> _Attempt:
    """A reserved launch into ``reserved``: those of the instance types one EFA count keeps (``_efa_group``)."""
    arch = reserved[0][1].labels.get(wk.LABEL_ARCH, "amd64")
    kept_types, efa_count = _efa_group(claim, tuple(it for _, it in reserved))
    kept = {it.name for it in kept_types}
    reserved = tuple((r, it) for r, it in reserved if it.name in kept)
    return _Attempt(
        capacity_type=wk.CAPACITY_TYPE_RESERVED,
        architecture=arch,
        instance_types=tuple({it.name: it for _, it in reserved}.values()),
        zones={r.zone: subnets[r.zone] for r, _ in reserved},
        excluded=frozenset(),
        efa_count=efa_count,
        reservations=tuple(r for r, _ in reserved),
    )


def _image_id(target: _LaunchTarget, attempt: _Attempt) -> str:
    ami = target.resolved.ami_for(attempt.architecture)
    assert ami is not None  # options only hold architectures with an AMI
    return ami.id


def _fleet_request(deps: LaunchDeps, target: _LaunchTarget, attempt: _Attempt, number: int) -> FleetRequest:
    """The CreateFleet request of ``attempt``, its launch templates made when missing: the node's, or for a reserved
    launch one per reservation, targeting it."""
    claim, node_class = target.claim, target.node_class
    spec = _template_spec(deps, target, _image_id(target, attempt), attempt.efa_count)
    reservations = tuple(
        FleetReservation(
            r.id,
            r.instance_type,
            r.zone,
            ensure_launch_template(
                deps.ec2,
                dataclasses.replace(
                    spec,
                    capacity_reservation_id=r.id,
                    capacity_reservation_type=r.reservation_type,
                    capacity_reservation_interruptible=r.interruptible,
                ),
            ),
            r.reservation_type,
            r.interruptible,
        )
        for r in attempt.reservations
    )
    template = reservations[0].launch_template_name if reservations else ensure_launch_template(deps.ec2, spec)
    return FleetRequest(
        launch_template_name=template,
        capacity_type=_fleet_capacity_type(attempt.capacity_type),
        instance_types=[it.name for it in attempt.instance_types],
        subnets=attempt.zones,
        client_token=claim.metadata.uid or claim.name,
        cluster_name=target.cluster_name,
        node_pool=(claim.metadata.labels or {}).get(wk.LABEL_NODEPOOL, ""),
        node_claim=claim.name,
        node_class=node_class.name,
        tags=node_class.spec.tags or {},
        unavailable=attempt.excluded,
        attempt=number,
        context=_fleet_context(claim, node_class),
        reservations=reservations,
    )


def _record_launch(
    deps: LaunchDeps, target: _LaunchTarget, attempt: _Attempt, instance: LaunchedInstance
) -> dict[str, Any]:
    """Mark what the fleet reported out of capacity, write the launched claim (labels, where it was launched from,
    status) and return the step's result."""
    claim = target.claim
    if instance.unavailable_offerings:
        deps.offerings.mark(instance.unavailable_offerings, deps.now(), reason="CreateFleet error")
    it = next((t for t in attempt.instance_types if t.name == instance.instance_type), None)
    where = {
        wk.ANNOTATION_SUBNET_ID: attempt.zones.get(instance.zone or "", ""),
        wk.ANNOTATION_SECURITY_GROUP_IDS: ",".join(sorted(g.id for g in target.resolved.security_groups)),
        **hash_annotations(target.node_class, deps.cluster.ca_bundle),  # what the instance was launched from
    }
    targets = {r.id: r for r in attempt.reservations}
    _write_launched(
        deps,
        claim,
        instance.instance_id,
        instance.instance_type,
        instance.zone,
        instance.capacity_type,
        it,
        _image_id(target, attempt),
        {k: v for k, v in where.items() if v},
        targets.get(instance.capacity_reservation_id or ""),
    )
    return _result(
        claim,
        instance.instance_id,
        instance.instance_type,
        instance.zone,
        instance.capacity_type,
        deps.now().isoformat(),
        instance.private_dns_name,
    )


def _fleet_capacity_type(capacity_type: str) -> CapacityType:
    if capacity_type == wk.CAPACITY_TYPE_RESERVED:
        return "reserved"
    return "spot" if capacity_type == wk.CAPACITY_TYPE_SPOT else "on-demand"


def reservation_labels(reservation: CapacityReservation) -> dict[str, str]:
    """The labels of a node launched into ``reservation``, as Karpenter's AWS provider writes them."""
    return {
        wk.LABEL_CAPACITY_RESERVATION_ID: reservation.id,
        wk.LABEL_CAPACITY_RESERVATION_TYPE: reservation.reservation_type,
        wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: "true" if reservation.interruptible else "false",
    }


def _is_ipv6_cluster(cluster: ClusterInfo) -> bool:
    """An IPv6 cluster: said so, or its cluster DNS address is IPv6 (as Karpenter infers it)."""
    if cluster.ip_family == "ipv6":
        return True
    try:
        return bool(cluster.dns_ip) and ipaddress.ip_address(cluster.dns_ip or "").version == 6
    except ValueError:
        return False


def _fleet_context(claim: NodeClaim, node_class: EC2NodeClass) -> str | None:
    """spec.context for CreateFleet, except for a claim whose minValues were relaxed (as Karpenter)."""
    relaxed = (claim.metadata.annotations or {}).get(wk.ANNOTATION_NODECLAIM_MIN_VALUES_RELAXED) == "true"
    return None if relaxed else node_class.spec.context


def _efa_group(claim: NodeClaim, types: Sequence[InstanceType]) -> tuple[tuple[InstanceType, ...], int]:
    """The instance types to launch and the EFA interfaces their launch template attaches.

    Pods asking for vpc.amazonaws.com/efa need every EFA interface of the instance attached at launch. A
    launch template holds one count, so a launch whose claim requests EFA keeps the types with the count of
    its first (cheapest) type; otherwise all the types and no EFA interface."""
    wanted = _requests(claim).get(wk.RESOURCE_EFA)
    if not types or wanted is None or parse_quantity(wanted) <= 0:
        return tuple(types), 0
    count = types[0].capacity.get(wk.RESOURCE_EFA, 0)
    return tuple(it for it in types if it.capacity.get(wk.RESOURCE_EFA, 0) == count), count // 1000  # milli-units


def _requests(claim: NodeClaim) -> Mapping[str, str]:
    """The NodeClaim's ``spec.resources.requests`` (empty when it has none)."""
    return (claim.spec.resources.requests if claim.spec.resources else None) or {}


def _placement_group(deps: LaunchDeps, node_class: EC2NodeClass) -> str | None:
    """The id of the placement group ``spec.placementGroupSelector`` selects (None without a selector)."""
    selector = node_class.spec.placement_group_selector
    if selector is None:
        return None
    group = resolve_placement_group(deps.ec2, selector)
    if group is None:
        what = f"id {selector.id!r}" if selector.id else f"name {selector.name!r}"
        raise NodeClassNotReady(
            f"EC2NodeClass {node_class.name}: spec.placementGroupSelector ({what}) matches no available placement group"
        )
    return group.id


def _node_class(deps: LaunchDeps, claim: NodeClaim) -> EC2NodeClass:
    ref = claim.spec.node_class_ref
    if ref.kind != "EC2NodeClass":
        raise LaunchFailed(f"NodeClaim {claim.name}: nodeClassRef kind {ref.kind!r} is not supported")
    try:
        node_class = EC2NodeClass.model_validate(deps.kube.get(EC2_NODE_CLASSES, ref.name))
    except kerr.NotFound:
        raise NodeClassNotReady(f"EC2NodeClass {ref.name!r} (NodeClaim {claim.name}) was not found") from None
    if node_class.metadata.deletion_timestamp is not None:  # as Karpenter: a terminating class is not found
        raise NodeClassNotReady(f"EC2NodeClass {ref.name!r} (NodeClaim {claim.name}) is being deleted")
    return node_class


def _instance_type(deps: LaunchDeps, claim: NodeClaim, name: str) -> InstanceType | None:
    try:
        node_class = _node_class(deps, claim)
    except NodeClassNotReady:
        return None
    for it in resolve_instance_types(deps.catalog, node_class_settings(node_class)):
        if it.name == name:
            return it
    return None


def _template_spec(deps: LaunchDeps, target: _LaunchTarget, image_id: str, efa_count: int) -> LaunchTemplateSpec:
    """What the node's launch template holds: its image, user data (labels, taints, kubelet), the class's settings."""
    from nodeflow.api.meta import Taint

    claim, node_class, resolved = target.claim, target.node_class, target.resolved

    labels = {**claim_requirements(claim).labels(), **(claim.metadata.labels or {})}
    taints = [
        *(claim.spec.taints or ()),
        *(claim.spec.startup_taints or ()),
        Taint(key=wk.TAINT_UNREGISTERED, effect="NoExecute"),
    ]
    boot = NodeBootstrap(
        cluster=deps.cluster,
        labels=_kubelet_labels(labels),
        taints=taints,
        kubelet=node_class.spec.kubelet,
        ami_family=resolved.ami_family,
        user_data=node_class.spec.user_data,
        instance_store_policy=node_class.spec.instance_store_policy,
        bottlerocket_version=bottlerocket_version(
            alias.alias_version if (alias := node_class.spec.alias_term) else None,
            next((a.name for a in resolved.amis if a.id == image_id), None),
        ),
    )
    user_data = base64.b64encode(render_user_data(boot).encode()).decode()
    spec = node_class.spec
    return LaunchTemplateSpec(
        cluster_name=target.cluster_name,
        node_pool=(claim.metadata.labels or {}).get(wk.LABEL_NODEPOOL, ""),
        node_class=node_class.name,
        image_id=image_id,
        security_group_ids=[g.id for g in resolved.security_groups],
        instance_profile=resolved.instance_profile,
        user_data=user_data,
        block_device_mappings=launched_block_device_mappings(resolved.ami_family, spec.block_device_mappings),
        metadata_options=spec.metadata_options,
        tags=spec.tags or {},
        detailed_monitoring=bool(spec.detailed_monitoring),
        associate_public_ip_address=spec.associate_public_ip_address,
        ip_prefix_count=spec.ip_prefix_count,
        network_interfaces=spec.network_interfaces or (),
        connection_tracking=spec.connection_tracking,
        cpu_options=spec.cpu_options,
        placement_group_id=target.placement_group,
        efa_count=efa_count,
        ipv6=_is_ipv6_cluster(deps.cluster),
        enclave=wk.RESOURCE_NIP_SLOTS in _requests(claim),
    )


def _write_launched(
    deps: LaunchDeps,
    claim: NodeClaim,
    instance_id: str,
    instance_type: str,
    zone: str | None,
    capacity_type: str,
    it: InstanceType | None,
    image_id: str | None,
    annotations: Mapping[str, str] | None = None,
    reservation: CapacityReservation | None = None,
) -> None:
    """Labels (instance type, zone, capacity type and the type's labels; a reserved launch: its reservation's),
    annotations (where it was launched: subnet and security groups, judged by drift) and status of a launched
    claim."""
    labels = {
        **(dict(it.labels) if it is not None else {}),
        wk.LABEL_INSTANCE_TYPE: instance_type,
        wk.LABEL_CAPACITY_TYPE: capacity_type,
        **(reservation_labels(reservation) if reservation is not None else {}),
    }
    if zone:
        labels[wk.LABEL_ZONE] = zone
    meta: dict[str, Any] = {"labels": labels}
    if annotations:
        meta["annotations"] = dict(annotations)
    deps.kube.patch(NODE_CLAIMS, claim.name, {"metadata": meta})
    old = claim.status.model_dump(by_alias=True, exclude_none=True, mode="json") if claim.status else {}
    conditions = set_condition(
        old.get("conditions", []),
        "Launched",
        "True",
        "Launched",
        "",
        now=deps.now(),
        generation=claim.metadata.generation,
    )
    for kind in ("Registered", "Initialized", "Ready"):
        if not any(c.get("type") == kind for c in conditions):
            conditions = set_condition(
                conditions,
                kind,
                "Unknown",
                "AwaitingReconciliation",
                "",
                now=deps.now(),
                generation=claim.metadata.generation,
            )
    status: dict[str, Any] = {"providerID": provider_id(zone, instance_id), "conditions": conditions}
    if image_id:
        status["imageID"] = image_id
    if it is not None:
        status["capacity"] = _resources(it.capacity)
        status["allocatable"] = _resources(it.allocatable)
    deps.kube.patch(NODE_CLAIMS, claim.name, {"status": status}, subresource="status")
