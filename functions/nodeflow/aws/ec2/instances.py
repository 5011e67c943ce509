"""Instances: described, listed by the cluster's tags, terminated, and their status checks read.

It decides what an instance's capacity type is (spot, reserved when it runs in a reservation it was launched
to use only, else on-demand), which states count as gone (shutting-down, terminated) and that an unknown id
is already terminated. It must not decide which instances to terminate (garbage collection and the terminate
workflow do) nor launch (``nodeflow.aws.ec2.fleet``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeflow.aws.ec2.paging import chunks, paginate
from nodeflow.aws.ec2.tags import TAG_NODECLAIM, TAG_NODEPOOL
from nodeflow.aws.errors import AccessDenied, NotFound, aws_errors

__all__ = [
    "InstanceInfo",
    "describe_instance_states",
    "describe_instance_statuses",
    "list_cluster_instances",
    "terminate_instances",
]

_GONE_STATES = frozenset({"shutting-down", "terminated"})
_LIVE_STATES = ("pending", "running", "stopping", "stopped")
_ID = re.compile(r"i-[0-9a-f]+")


@dataclass(frozen=True)
class InstanceInfo:
    instance_id: str
    state: str
    instance_type: str | None
    zone: str | None
    capacity_type: str
    private_dns_name: str | None
    launch_time: datetime | None
    tags: Mapping[str, str] = field(default_factory=dict)
    capacity_reservation_id: str | None = None  # capacity type "reserved": the reservation it runs in
    capacity_reservation_type: str | None = None  # "default" | "capacity-block"


def _instance_info(inst: Mapping[str, Any]) -> InstanceInfo:
    lifecycle = inst.get("InstanceLifecycle")
    reservation = inst.get("CapacityReservationId") or None
    preference = (inst.get("CapacityReservationSpecification") or {}).get("CapacityReservationPreference")
    # As Karpenter: an instance is reserved when it runs in a reservation it was launched to use only
    reserved = reservation is not None and preference == "capacity-reservations-only" and lifecycle != "spot"
    return InstanceInfo(
        instance_id=inst["InstanceId"],
        state=(inst.get("State") or {}).get("Name", ""),
        instance_type=inst.get("InstanceType"),
        zone=(inst.get("Placement") or {}).get("AvailabilityZone"),
        capacity_type="spot" if lifecycle == "spot" else "reserved" if reserved else "on-demand",
        private_dns_name=inst.get("PrivateDnsName") or None,
        launch_time=inst.get("LaunchTime"),
        tags={t["Key"]: t["Value"] for t in inst.get("Tags", []) or []},
        capacity_reservation_id=reservation if reserved else None,
        capacity_reservation_type=("capacity-block" if lifecycle == "capacity-block" else "default")
        if reserved
        else None,
    )


def describe_instance_states(ec2: Any, ids: Iterable[str]) -> dict[str, InstanceInfo]:
    """Live instances among ``ids``. Missing, shutting-down and terminated instances are absent (gone)."""
    wanted = sorted(set(ids))
    result: dict[str, InstanceInfo] = {}
    for chunk in chunks(wanted, 200):
        try:
            for reservation in paginate(
                ec2, "describe_instances", "Reservations", Filters=[{"Name": "instance-id", "Values": chunk}]
            ):
                for inst in reservation.get("Instances", []):
                    info = _instance_info(inst)
                    if info.instance_id in chunk and info.state not in _GONE_STATES:
                        result[info.instance_id] = info
        except NotFound:
            continue
    return result


def terminate_instances(ec2: Any, ids: Iterable[str]) -> dict[str, str]:
    """Terminate ``ids``; returns id -> current state. Unknown ids are reported as 'terminated'."""
    states: dict[str, str] = {}
    for chunk in chunks(sorted(set(ids)), 1000):
        pending = list(chunk)
        while pending:
            pending = _terminate(ec2, pending, states)
    return states


def _terminate(ec2: Any, ids: Sequence[str], states: dict[str, str]) -> list[str]:
    """One TerminateInstances call for ``ids``, their states written to ``states``. When EC2 answers that some ids
    do not exist (named in its message; the only id of a call of one), those are terminated and the rest are
    returned to ask again; any other error is raised."""
    try:
        with aws_errors():
            out = ec2.terminate_instances(InstanceIds=list(ids))
    except NotFound as exc:
        missing = set(_ID.findall(exc.message)) & set(ids)
        if not missing:
            missing = set(ids) if len(ids) == 1 else set()
        if not missing:
            raise
        for m in missing:
            states[m] = "terminated"
        return [i for i in ids if i not in missing]
    for change in out.get("TerminatingInstances", []):
        states[change["InstanceId"]] = change.get("CurrentState", {}).get("Name", "shutting-down")
    return []


def list_cluster_instances(ec2: Any, cluster_name: str, *, node_claim: str | None = None) -> list[InstanceInfo]:
    """Live instances nodeflow launched for the cluster (by tag), or for one NodeClaim of it."""
    filters = [
        {"Name": f"tag:kubernetes.io/cluster/{cluster_name}", "Values": ["owned"]},
        {"Name": "tag-key", "Values": [TAG_NODEPOOL]},
        {"Name": "instance-state-name", "Values": list(_LIVE_STATES)},
    ]
    if node_claim is not None:
        filters.append({"Name": f"tag:{TAG_NODECLAIM}", "Values": [node_claim]})
    out: list[InstanceInfo] = []
    for reservation in paginate(ec2, "describe_instances", "Reservations", Filters=filters):
        out.extend(_instance_info(inst) for inst in reservation.get("Instances", []))
    return sorted(out, key=lambda i: i.instance_id)


def describe_instance_statuses(
    ec2: Any, filter_sets: Iterable[Sequence[Mapping[str, Any]]]
) -> list[dict[str, Any]] | None:
    """Every ``InstanceStatuses`` item DescribeInstanceStatus returns for each filter set (paginated), or None when
    EC2 answers UnauthorizedOperation (the role may not call it: the caller logs and carries on)."""
    statuses: list[dict[str, Any]] = []
    try:
        for filters in filter_sets:
            statuses += paginate(ec2, "describe_instance_status", "InstanceStatuses", Filters=list(filters))
    except AccessDenied as exc:
        if exc.code != "UnauthorizedOperation":
            raise
        return None
    return statuses
