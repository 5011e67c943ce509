"""What an EC2NodeClass resolves to in EC2 and IAM: its subnets, security groups, AMIs, instance profile and
capacity reservations, read together (``resolve_node_class``) and shaped as its ``status``.

It decides what "ready" means (each of subnets, security groups, AMIs and instance profile found) and the status
fields; each resource family's selection is its own module's. It must not write the EC2NodeClass (the lifecycle's
``nodeflow.lifecycle.nodeclass`` does), nor launch, nor check authorization (``nodeflow.aws.ec2.validation``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeflow.api.karpenter import EC2NodeClass
from nodeflow.aws.ec2.amis import AMIImage, resolve_amis
from nodeflow.aws.ec2.capacity_reservations import describe_capacity_reservations
from nodeflow.aws.ec2.instance_profiles import ensure_instance_profile
from nodeflow.aws.ec2.security_groups import SecurityGroup, resolve_security_groups
from nodeflow.aws.ec2.subnets import Subnet, one_per_zone, resolve_subnets
from nodeflow.aws.errors import AccessDenied, InvalidRequest, NotFound
from nodeflow.catalog.reservations import CapacityReservation

__all__ = ["ResolvedNodeClass", "resolve_node_class"]


@dataclass(frozen=True)
class ResolvedNodeClass:
    """What an EC2NodeClass resolved to. Empty tuples mean nothing matched (see ``missing``)."""

    name: str
    ami_family: str
    subnets: tuple[Subnet, ...]
    security_groups: tuple[SecurityGroup, ...]
    amis: tuple[AMIImage, ...]
    instance_profile: str
    missing: tuple[str, ...] = ()  # of "subnets", "securityGroups", "amis", "instanceProfile"
    instance_profile_error: str | None = None  # why the instance profile could not be made ready
    # What capacityReservationSelectorTerms selected (active, not ended, sorted by id; live counts).
    capacity_reservations: tuple[CapacityReservation, ...] = ()

    @property
    def ready(self) -> bool:
        return not self.missing

    def ami_for(self, architecture: str) -> AMIImage | None:
        return next((a for a in self.amis if a.architecture == architecture), None)

    @property
    def subnets_by_zone(self) -> dict[str, Subnet]:
        """One subnet per zone: the one with the most available IPs (ties: lowest id)."""
        return one_per_zone(self.subnets)

    @property
    def status(self) -> dict[str, Any]:
        """Shaped like EC2NodeClass ``status`` (camelCase keys)."""
        return {
            "subnets": [
                {"id": s.id, "zone": s.zone, **({"zoneID": s.zone_id} if s.zone_id else {})} for s in self.subnets
            ],
            "securityGroups": [{"id": g.id, **({"name": g.name} if g.name else {})} for g in self.security_groups],
            "amis": [
                {
                    "id": a.id,
                    **({"name": a.name} if a.name else {}),
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": [a.architecture]}],
                }
                for a in self.amis
            ],
            **({"instanceProfile": self.instance_profile} if self.instance_profile else {}),
        }


def resolve_node_class(
    ec2: Any,
    ssm: Any,
    iam: Any,
    node_class: EC2NodeClass,
    cluster_name: str,
    *,
    kubernetes_version: str | None = None,
    now: datetime | None = None,
) -> ResolvedNodeClass:
    """Resolve the selector terms, AMIs and instance profile of ``node_class``.

    ``kubernetes_version`` ("1.31") is required when the AMI selector is an alias. With
    ``spec.role`` an instance profile named by ``instance_profile_name`` is created (if
    missing) holding that role; with ``spec.instanceProfile`` that name is used as is.
    ``capacityReservationSelectorTerms`` are resolved with ``describe_capacity_reservations``
    (reservations whose end is not after ``now`` are left out); none selected is not "missing".
    """
    spec = node_class.spec
    subnets = resolve_subnets(ec2, spec.subnet_selector_terms)
    groups = resolve_security_groups(ec2, spec.security_group_selector_terms)
    amis = resolve_amis(ec2, ssm, spec.ami_selector_terms, kubernetes_version)
    terms = spec.capacity_reservation_selector_terms or ()
    reservations = tuple(describe_capacity_reservations(ec2, terms, now)) if terms else ()
    profile, profile_error = _instance_profile(iam, node_class, cluster_name)
    found = {"subnets": subnets, "securityGroups": groups, "amis": amis, "instanceProfile": profile}
    return ResolvedNodeClass(
        name=node_class.name,
        ami_family=node_class.resolved_ami_family,
        subnets=subnets,
        security_groups=groups,
        amis=amis,
        instance_profile=profile,
        missing=tuple(what for what, value in found.items() if not value),
        instance_profile_error=profile_error,
        capacity_reservations=reservations,
    )


def _instance_profile(iam: Any, node_class: EC2NodeClass, cluster_name: str) -> tuple[str, str | None]:
    """The class's instance profile name (``spec.instanceProfile`` as is, else the one made for ``spec.role``), or
    ``""`` and why, when the role's profile could not be made ready (e.g. the role does not exist)."""
    spec = node_class.spec
    if spec.instance_profile:
        return spec.instance_profile, None
    assert spec.role is not None  # the model guarantees role xor instanceProfile
    try:
        current = node_class.status.instance_profile if node_class.status is not None else None
        return ensure_instance_profile(iam, cluster_name, node_class.name, spec.role, current), None
    except (NotFound, InvalidRequest, AccessDenied) as exc:
        return "", f"spec.role {spec.role!r}: {exc}"
