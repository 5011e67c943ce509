"""CreateFleet: one instance from the first available offering among instance types x zones, as Karpenter's
instance provider launches it (an instant fleet, one request per Launch attempt).

It decides the request (overrides, capacity type and allocation strategy, reserved-capacity targeting, tags, the
idempotent ClientToken) and reads the answer: the instance launched, the offerings EC2 reported out of capacity,
and a typed error when nothing launched. It must not choose the instance types, zones or capacity type, nor retry
or remember unavailable offerings: the launch step (``nodeflow.lifecycle.launch``) does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from nodeflow.aws.ec2.instances import describe_instance_states
from nodeflow.aws.ec2.tags import TAG_NODECLAIM, TAG_NODECLASS, TAG_NODEPOOL, cluster_tags, tag_list
from nodeflow.aws.errors import (
    AwsError,
    InsufficientCapacity,
    InvalidRequest,
    Offering,
    aws_errors,
    error_class_for,
    is_insufficient_capacity_code,
)

__all__ = [
    "MAX_FLEET_OVERRIDES",
    "CapacityType",
    "FleetRequest",
    "FleetReservation",
    "LaunchedInstance",
    "create_fleet",
    "create_fleet_input",
    "fleet_client_token",
]

CapacityType = Literal["spot", "on-demand", "reserved"]
MAX_FLEET_OVERRIDES = 60


@dataclass(frozen=True)
class FleetReservation:
    """One capacity reservation a reserved launch may use: its instance type and zone, and the launch template
    that targets it (``LaunchTemplateSpec.capacity_reservation_id``)."""

    reservation_id: str
    instance_type: str
    zone: str
    launch_template_name: str
    reservation_type: str = "default"  # "default" | "capacity-block"
    interruptible: bool = False


@dataclass(frozen=True)
class FleetRequest:
    """One instance from the first available offering among instance types x zones (capacity type ``reserved``:
    among ``reservations``, each through its own launch template)."""

    launch_template_name: str
    capacity_type: CapacityType
    instance_types: Sequence[str]  # in the caller's preference order
    subnets: Mapping[str, str]  # zone -> subnet id (one subnet per allowed zone)
    client_token: str  # the NodeClaim uid; the ClientToken sent is derived from it (``fleet_client_token``)
    cluster_name: str
    node_pool: str
    node_claim: str
    node_class: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    unavailable: frozenset[tuple[str, str]] = frozenset()  # (instance type, zone) to leave out
    attempt: int = 0  # which CreateFleet call of the Launch step this is (0, 1, ...)
    context: str | None = None  # EC2NodeClass spec.context: CreateFleet's reserved Context
    reservations: Sequence[FleetReservation] = ()  # capacity type "reserved": the reservations to launch into

    @property
    def all_tags(self) -> dict[str, str]:
        tags = {**dict(self.tags), **cluster_tags(self.cluster_name), TAG_NODEPOOL: self.node_pool}
        tags[TAG_NODECLAIM] = self.node_claim
        if self.node_class:
            tags[TAG_NODECLASS] = self.node_class
        return tags

    def overrides(self) -> list[dict[str, str]]:
        """At most ``MAX_FLEET_OVERRIDES`` (type, subnet) overrides, types in order, zones sorted; for a reserved
        launch one per reservation (its type, a subnet of its zone), with its template and reservation id."""
        out = []
        if self.capacity_type == "reserved":
            for r in self.reservations:
                if (r.instance_type, r.zone) in self.unavailable or r.zone not in self.subnets:
                    continue
                out.append(
                    {
                        "InstanceType": r.instance_type,
                        "SubnetId": self.subnets[r.zone],
                        "AvailabilityZone": r.zone,
                        "LaunchTemplateName": r.launch_template_name,
                        "CapacityReservationId": r.reservation_id,
                    }
                )
                if len(out) == MAX_FLEET_OVERRIDES:
                    break
            return out
        for instance_type in self.instance_types:
            for zone in sorted(self.subnets):
                if (instance_type, zone) in self.unavailable:
                    continue
                out.append({"InstanceType": instance_type, "SubnetId": self.subnets[zone], "AvailabilityZone": zone})
                if len(out) == MAX_FLEET_OVERRIDES:
                    return out
        return out


@dataclass(frozen=True)
class LaunchedInstance:
    instance_id: str
    instance_type: str
    zone: str | None
    capacity_type: str
    private_dns_name: str | None
    fleet_id: str | None = None
    # Offerings the fleet reported as out of capacity while still launching this instance.
    unavailable_offerings: tuple[Offering, ...] = ()
    capacity_reservation_id: str | None = None  # a reserved launch: the reservation it launched into
    capacity_reservation_type: str | None = None  # and its type ("default" | "capacity-block")


MAX_CLIENT_TOKEN = 64  # EC2's limit on ClientToken


def fleet_client_token(base: str, attempt: int, params: Mapping[str, Any]) -> str:
    """The ClientToken of one CreateFleet call: the NodeClaim's uid, the attempt, and a digest of the request.

    EC2 answers a token it has seen with its first answer, and a token reused with other parameters with
    IdempotentParameterMismatch. Each call of a Launch step therefore has its own token (a fallback after
    a capacity error asks for fewer offerings: a new request), while the same call made again (the step
    retried after a timeout) sends the same token and gets the same instance, never a second one."""
    body = {k: v for k, v in params.items() if k != "ClientToken"}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    suffix = f"-{attempt}-{digest[:16]}"
    return base[: MAX_CLIENT_TOKEN - len(suffix)] + suffix


def create_fleet_input(request: FleetRequest) -> dict[str, Any]:
    """The CreateFleet request for ``request`` (exposed for inspection and tests)."""
    overrides = request.overrides()
    if not overrides:
        raise InvalidRequest("no instance type x zone left to launch", code="NoOverrides")
    tags = tag_list(request.all_tags)
    templates: dict[str, list[dict[str, str]]] = {}
    for o in overrides:
        template = o.get("LaunchTemplateName", request.launch_template_name)
        templates.setdefault(template, []).append({"InstanceType": o["InstanceType"], "SubnetId": o["SubnetId"]})
    target: str = request.capacity_type
    block = interruptible = False
    if request.capacity_type == "reserved":
        # Karpenter launches one reservation type at a time; a capacity block is bought on its own market
        block = any(r.reservation_type == "capacity-block" for r in request.reservations)
        interruptible = not block and any(r.interruptible for r in request.reservations)
        target = "capacity-block" if block else "reserved-capacity" if interruptible else "on-demand"
    params: dict[str, Any] = {
        "Type": "instant",
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": target},
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Latest"},
                "Overrides": template_overrides,
            }
            for template, template_overrides in templates.items()
        ],
        "TagSpecifications": [{"ResourceType": rt, "Tags": tags} for rt in ("instance", "volume", "fleet")],
    }
    if request.context:
        params["Context"] = request.context
    if request.capacity_type == "spot":
        params["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
    elif interruptible:
        params["ReservedCapacityOptions"] = {"ReservationTypes": ["interruptible-capacity-reservation"]}
    elif not block:
        params["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
    params["ClientToken"] = fleet_client_token(request.client_token, request.attempt, params)
    return params


def create_fleet(ec2: Any, request: FleetRequest) -> LaunchedInstance:
    """Launch one instance. Raises ``InsufficientCapacity`` listing every failed offering when none launched."""
    params = create_fleet_input(request)
    with aws_errors(capacity_type=request.capacity_type):
        out = ec2.create_fleet(**params)
    unavailable, other = _fleet_errors(out, request)
    for inst in out.get("Instances", []) or []:
        launched = _launched(ec2, inst, request, out.get("FleetId"), unavailable)
        if launched is not None:
            return launched
    raise _nothing_launched(request, unavailable, other)


def _zone(overrides: Mapping[str, Any], request: FleetRequest) -> str | None:
    """The zone of an answered override: its own, else its subnet's."""
    zone_of_subnet = {subnet: zone for zone, subnet in request.subnets.items()}
    zone: str | None = overrides.get("AvailabilityZone") or zone_of_subnet.get(overrides.get("SubnetId", ""))
    return zone


def _fleet_errors(out: Mapping[str, Any], request: FleetRequest) -> tuple[tuple[Offering, ...], list[tuple[str, str]]]:
    """CreateFleet's ``Errors``: the offerings out of capacity (sorted, each once; capacity type ``reserved`` for a
    reserved launch), and every other error as (code, message)."""
    reserved = request.capacity_type == "reserved"
    ice: list[Offering] = []
    other: list[tuple[str, str]] = []
    for err in out.get("Errors", []) or []:
        code = err.get("ErrorCode", "")
        ov = (err.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        if is_insufficient_capacity_code(code):
            lifecycle = "reserved" if reserved else err.get("Lifecycle") or request.capacity_type
            ice.append(Offering(ov.get("InstanceType"), _zone(ov, request), lifecycle))
        else:
            other.append((code, err.get("ErrorMessage", code)))
    unavailable = tuple(sorted(set(ice), key=lambda o: (o.instance_type or "", o.zone or "", o.capacity_type or "")))
    return unavailable, other


def _launched(
    ec2: Any, inst: Mapping[str, Any], request: FleetRequest, fleet_id: str | None, unavailable: tuple[Offering, ...]
) -> LaunchedInstance | None:
    """The instance one ``Instances`` item of the answer launched (None when it names none), completed from
    DescribeInstances (type, zone, capacity type, private DNS name) and, for a reserved launch, with the
    reservation its type and zone target."""
    ids = inst.get("InstanceIds") or []
    if not ids:
        return None
    reserved = request.capacity_type == "reserved"
    ov = (inst.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
    launched = LaunchedInstance(
        instance_id=ids[0],
        instance_type=inst.get("InstanceType") or ov.get("InstanceType", ""),
        zone=_zone(ov, request),
        capacity_type="reserved" if reserved else inst.get("Lifecycle") or request.capacity_type,
        private_dns_name=None,
        fleet_id=fleet_id,
        unavailable_offerings=unavailable,
    )
    info = describe_instance_states(ec2, [launched.instance_id]).get(launched.instance_id)
    if info is not None:
        launched = dataclasses.replace(
            launched,
            instance_type=info.instance_type or launched.instance_type,
            zone=info.zone or launched.zone,
            # EC2 describes an instance in a reservation as on-demand (a capacity block: its own lifecycle)
            capacity_type=launched.capacity_type if reserved else info.capacity_type or launched.capacity_type,
            private_dns_name=info.private_dns_name,
        )
    if not reserved:
        return launched
    reservation_of = {(r.instance_type, r.zone): r for r in reversed(request.reservations)}  # the first wins
    target = reservation_of.get((launched.instance_type, launched.zone or ""))
    if target is None:
        return launched
    return dataclasses.replace(
        launched, capacity_reservation_id=target.reservation_id, capacity_reservation_type=target.reservation_type
    )


def _nothing_launched(
    request: FleetRequest, unavailable: tuple[Offering, ...], other: Sequence[tuple[str, str]]
) -> AwsError:
    """The error of an answer without an instance: the first other error's class (carrying the unavailable
    offerings) when there was one, else ``InsufficientCapacity`` for what ran out (or, when EC2 said nothing,
    for every offering asked)."""
    if other:
        code = other[0][0]
        cls = error_class_for(code)
        return cls(
            "; ".join(sorted({f"{c}: {m}" for c, m in other})),
            code=code,
            operation="CreateFleet",
            offerings=unavailable,
        )
    if not unavailable:
        # No instance and no error: treat as capacity for everything we asked for.
        unavailable = tuple(
            Offering(o["InstanceType"], o["AvailabilityZone"], request.capacity_type) for o in request.overrides()
        )
    return InsufficientCapacity(
        f"no capacity for {len(unavailable)} offering(s): "
        + ", ".join(f"{o.instance_type}/{o.zone}/{o.capacity_type}" for o in unavailable[:10])
        + (" ..." if len(unavailable) > 10 else ""),
        code="InsufficientInstanceCapacity",
        operation="CreateFleet",
        offerings=unavailable,
    )
