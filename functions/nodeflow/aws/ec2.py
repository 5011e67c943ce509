"""The narrow EC2 adapter the launch workflow uses (boto3 clients are injected).

It resolves an EC2NodeClass to concrete subnets, security groups, AMIs and an instance
profile; keeps one launch template per distinct configuration; launches one instance with
an instant CreateFleet; and describes, lists and terminates instances. It makes no business
decision (which instance type, which zone, when to retry): callers do. Every AWS failure
surfaces as a typed error from ``nodeflow.aws.errors``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from nodeflow.api.karpenter import EC2NodeClass
from nodeflow.api.karpenter_ec2 import (
    AMISelectorTerm,
    BlockDeviceMapping,
    ConnectionTracking,
    CPUOptions,
    MetadataOptions,
    NetworkInterface,
    PlacementGroupSelector,
)
from nodeflow.aws.errors import (
    AccessDenied,
    AlreadyExists,
    AwsError,
    InsufficientCapacity,
    InvalidRequest,
    NotFound,
    Offering,
    aws_errors,
    error_class_for,
    is_insufficient_capacity_code,
    map_error,
)
from nodeflow.catalog.reservations import CapacityReservation, from_describe, select

__all__ = [
    "DRY_RUN_CHECKS",
    "MAX_FLEET_OVERRIDES",
    "AMIImage",
    "AuthorizationDenied",
    "CapacityType",
    "FleetRequest",
    "FleetReservation",
    "InstanceInfo",
    "LaunchTemplate",
    "LaunchTemplateSpec",
    "LaunchedInstance",
    "PlacementGroup",
    "ResolvedNodeClass",
    "SecurityGroup",
    "Subnet",
    "alias_ssm_parameters",
    "capacity_reservation_queries",
    "cluster_tags",
    "create_fleet",
    "create_fleet_input",
    "delete_launch_template",
    "describe_capacity_reservations",
    "describe_instance_states",
    "dry_run_launch_authorization",
    "ensure_instance_profile",
    "ensure_launch_template",
    "instance_profile_name",
    "is_launch_template_not_found",
    "launch_template_data",
    "launch_template_name",
    "list_cluster_instances",
    "list_launch_templates",
    "resolve_node_class",
    "resolve_placement_group",
    "tag_filters",
    "terminate_instances",
]

CapacityType = Literal["spot", "on-demand", "reserved"]

TAG_NODEPOOL = "karpenter.sh/nodepool"
TAG_NODECLAIM = "karpenter.sh/nodeclaim"
TAG_NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
TAG_EKS_CLUSTER = "eks:eks-cluster-name"
TAG_LAUNCH_TEMPLATE_ID = "aws:ec2launchtemplate:id"  # EC2 tags every instance launched from a template with it
LAUNCH_TEMPLATE_PREFIX = "nodeflow/"
# The names of the templates a provisioner of the cluster made: nodeflow's, and Karpenter's (left from before nodeflow)
OWNED_LAUNCH_TEMPLATE_PREFIXES = (LAUNCH_TEMPLATE_PREFIX, "karpenter.k8s.aws/")
LAUNCH_TEMPLATE_NOT_FOUND_CODES = frozenset(
    {"InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound"}
)
MAX_FLEET_OVERRIDES = 60
_ARCH = {"x86_64": "amd64", "arm64": "arm64", "x86_64_mac": "amd64", "arm64_mac": "arm64"}
_EC2_ARCH = {"amd64": "x86_64", "arm64": "arm64"}
_GONE_STATES = frozenset({"shutting-down", "terminated"})
_LIVE_STATES = ("pending", "running", "stopping", "stopped")


def cluster_tags(cluster_name: str) -> dict[str, str]:
    """The tags that mark a resource as owned by the cluster."""
    return {f"kubernetes.io/cluster/{cluster_name}": "owned", TAG_EKS_CLUSTER: cluster_name}


# =============================================================================================
# Node class resolution


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    zone_id: str | None
    available_ips: int


@dataclass(frozen=True)
class SecurityGroup:
    id: str
    name: str | None


@dataclass(frozen=True)
class AMIImage:
    id: str
    name: str | None
    architecture: str  # kubernetes.io/arch value: amd64 / arm64
    creation_date: str | None = None
    deprecation_time: str | None = None  # reported, not judged (no clock here)


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
        best: dict[str, Subnet] = {}
        for s in self.subnets:
            cur = best.get(s.zone)
            if cur is None or (s.available_ips, cur.id) > (cur.available_ips, s.id):
                best[s.zone] = s
        return best

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
    subnets = _resolve_subnets(ec2, spec.subnet_selector_terms)
    groups = _resolve_security_groups(ec2, spec.security_group_selector_terms)
    amis = _resolve_amis(ec2, ssm, spec.ami_selector_terms, kubernetes_version)
    terms = spec.capacity_reservation_selector_terms or ()
    reservations = tuple(describe_capacity_reservations(ec2, terms, now)) if terms else ()
    profile_error: str | None = None
    if spec.instance_profile:
        profile = spec.instance_profile
    else:
        assert spec.role is not None  # the model guarantees role xor instanceProfile
        try:
            current = node_class.status.instance_profile if node_class.status is not None else None
            profile = ensure_instance_profile(iam, cluster_name, node_class.name, spec.role, current)
        except (NotFound, InvalidRequest, AccessDenied) as exc:  # e.g. the role does not exist
            profile, profile_error = "", f"spec.role {spec.role!r}: {exc}"
    missing = tuple(
        what
        for what, found in (
            ("subnets", subnets),
            ("securityGroups", groups),
            ("amis", amis),
            ("instanceProfile", profile),
        )
        if not found
    )
    return ResolvedNodeClass(
        name=node_class.name,
        ami_family=node_class.resolved_ami_family,
        subnets=subnets,
        security_groups=groups,
        amis=amis,
        instance_profile=profile,
        missing=missing,
        instance_profile_error=profile_error,
        capacity_reservations=reservations,
    )


def tag_filters(tags: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """DescribeSubnets / DescribeSecurityGroups / ... filters for a selector term's tags (value "*": the key only)."""
    filters = []
    for key, value in (tags or {}).items():
        if value == "*":
            filters.append({"Name": "tag-key", "Values": [key]})
        else:
            filters.append({"Name": f"tag:{key}", "Values": [value]})
    return filters


def _paginate(client: Any, operation: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    with aws_errors():
        for page in client.get_paginator(operation).paginate(**kwargs):
            yield from page.get(key, [])


def _resolve_subnets(ec2: Any, terms: Sequence[Any]) -> tuple[Subnet, ...]:
    found: dict[str, Subnet] = {}
    for term in terms:
        filters = [{"Name": "subnet-id", "Values": [term.id]}] if term.id else tag_filters(term.tags)
        for s in _paginate(ec2, "describe_subnets", "Subnets", Filters=filters):
            if s.get("State", "available") != "available":
                continue
            found[s["SubnetId"]] = Subnet(
                id=s["SubnetId"],
                zone=s["AvailabilityZone"],
                zone_id=s.get("AvailabilityZoneId"),
                available_ips=int(s.get("AvailableIpAddressCount", 0)),
            )
    # Karpenter's order: most free IPs first, then id.
    return tuple(sorted(found.values(), key=lambda s: (-s.available_ips, s.id)))


def _resolve_security_groups(ec2: Any, terms: Sequence[Any]) -> tuple[SecurityGroup, ...]:
    found: dict[str, SecurityGroup] = {}
    for term in terms:
        if term.id:
            filters = [{"Name": "group-id", "Values": [term.id]}]
        elif term.name:
            filters = [{"Name": "group-name", "Values": [term.name]}]
        else:
            filters = tag_filters(term.tags)
        for g in _paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=filters):
            found[g["GroupId"]] = SecurityGroup(id=g["GroupId"], name=g.get("GroupName"))
    return tuple(sorted(found.values(), key=lambda g: g.id))


# --- capacity reservations ---------------------------------------------------------------------


def describe_instance_statuses(
    ec2: Any, filter_sets: Iterable[Sequence[Mapping[str, Any]]]
) -> list[dict[str, Any]] | None:
    """Every ``InstanceStatuses`` item DescribeInstanceStatus returns for each filter set (paginated), or None when
    EC2 answers UnauthorizedOperation (the role may not call it: the caller logs and carries on)."""
    statuses: list[dict[str, Any]] = []
    try:
        for filters in filter_sets:
            statuses += _paginate(ec2, "describe_instance_status", "InstanceStatuses", Filters=list(filters))
    except AccessDenied as exc:
        if exc.code != "UnauthorizedOperation":
            raise
        return None
    return statuses


def capacity_reservation_queries(terms: Sequence[Any]) -> list[dict[str, Any]]:
    """The DescribeCapacityReservations requests for ``capacityReservationSelectorTerms``, as Karpenter asks them:
    always only ``active`` reservations; a term's ``id`` by CapacityReservationIds (no MaxResults, which EC2 refuses
    with ids); its tags (``"*"``: the key only), ``ownerID`` and ``instanceMatchCriteria`` as filters, 1,000 a page.
    Equal requests are asked once."""
    out: list[dict[str, Any]] = []
    for term in terms:
        active = [{"Name": "state", "Values": ["active"]}]
        queries: list[dict[str, Any]] = []
        if term.id:
            queries.append({"CapacityReservationIds": [term.id], "Filters": active})
        if term.tags or term.instance_match_criteria:
            filters = list(active)
            if term.owner_id:
                filters.append({"Name": "owner-id", "Values": [term.owner_id]})
            filters.extend(tag_filters(term.tags))
            if term.instance_match_criteria:
                filters.append({"Name": "instance-match-criteria", "Values": [term.instance_match_criteria]})
            queries.append({"Filters": filters, "MaxResults": 1000})
        out.extend(q for q in queries if q not in out)
    return out


def describe_capacity_reservations(
    ec2: Any, terms: Sequence[Any], now: datetime | None = None
) -> list[CapacityReservation]:
    """The capacity reservations ``terms`` select (``capacity_reservation_queries``), parsed
    (``nodeflow.catalog.reservations.from_describe``), one per id, sorted by id; one whose end is not after
    ``now`` is left out. An id EC2 does not know selects nothing (as Karpenter); an item EC2 answers that
    cannot be read (a new reservation type) is skipped, as Karpenter skips it."""
    found: list[CapacityReservation] = []
    for query in capacity_reservation_queries(terms):
        try:
            items = list(_paginate(ec2, "describe_capacity_reservations", "CapacityReservations", **query))
        except NotFound:  # asked by id: that reservation does not exist (any more)
            continue
        for item in items:
            try:
                found.append(from_describe(item))
            except ValueError:
                continue
    return select(found, terms, now)


# --- AMIs -------------------------------------------------------------------------------------


WINDOWS2025_MIN_MINOR = 35  # EKS publishes Windows Server 2025 AMIs from Kubernetes 1.35 on


def _minor(kubernetes_version: str) -> int:
    try:
        return int(kubernetes_version.split(".")[1])
    except (IndexError, ValueError):
        return 10**6  # not "major.minor": do not refuse on a version we cannot read


def alias_ssm_parameters(alias: str, kubernetes_version: str) -> dict[str, str]:
    """SSM parameter name -> kubernetes.io/arch for an AMI alias ("al2023@latest", "bottlerocket@v1.20.1")."""
    family, _, version = alias.partition("@")
    latest = version == "latest"
    k8s = kubernetes_version
    if family == "al2023":
        return {
            f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/standard/"
            + ("recommended" if latest else f"amazon-eks-node-al2023-{arch}-standard-{k8s}-{version}")
            + "/image_id": _ARCH[arch]
            for arch in ("x86_64", "arm64")
        }
    if family == "al2":
        x86 = "recommended" if latest else f"amazon-eks-node-{k8s}-{version}"
        arm = "recommended" if latest else f"amazon-eks-arm64-node-{k8s}-{version}"
        return {
            f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2/{x86}/image_id": "amd64",
            f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2-arm64/{arm}/image_id": "arm64",
        }
    if family == "bottlerocket":
        ver = "latest" if latest else version.lstrip("v")
        return {
            f"/aws/service/bottlerocket/aws-k8s-{k8s}/{arch}/{ver}/image_id": _ARCH[arch]
            for arch in ("x86_64", "arm64")
        }
    if family in ("windows2019", "windows2022", "windows2025"):
        year = family.removeprefix("windows")
        if year == "2025" and _minor(k8s) < WINDOWS2025_MIN_MINOR:
            raise InvalidRequest(
                f"AMI alias {alias!r}: Windows Server 2025 requires Kubernetes 1.{WINDOWS2025_MIN_MINOR} or newer, "
                f"the cluster runs {k8s}"
            )
        return {
            f"/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id": "amd64"
        }
    raise InvalidRequest(f"unsupported AMI alias {alias!r}")


def _resolve_amis(
    ec2: Any, ssm: Any, terms: Sequence[AMISelectorTerm], kubernetes_version: str | None
) -> tuple[AMIImage, ...]:
    candidates: list[AMIImage] = []
    for term in terms:
        if term.alias:
            if not kubernetes_version:
                raise InvalidRequest(f"AMI alias {term.alias!r} needs the cluster's Kubernetes version")
            candidates.extend(_amis_from_ssm(ec2, ssm, alias_ssm_parameters(term.alias, kubernetes_version)))
        elif term.ssm_parameter:
            candidates.extend(_amis_from_ssm(ec2, ssm, {term.ssm_parameter: ""}))
        else:
            candidates.extend(_describe_images(ec2, **_image_query(term)))
    # Newest creation date wins per architecture (ties: highest id, for determinism).
    best: dict[str, AMIImage] = {}
    for ami in candidates:
        cur = best.get(ami.architecture)
        if cur is None or (ami.creation_date or "", ami.id) > (cur.creation_date or "", cur.id):
            best[ami.architecture] = ami
    return tuple(best[arch] for arch in sorted(best))


def _image_query(term: AMISelectorTerm) -> dict[str, Any]:
    filters: list[dict[str, Any]] = [{"Name": "state", "Values": ["available"]}]
    query: dict[str, Any] = {}
    if term.id:
        filters.append({"Name": "image-id", "Values": [term.id]})
    if term.name:
        filters.append({"Name": "name", "Values": [term.name]})
    filters.extend(tag_filters(term.tags))
    if term.owner:
        query["Owners"] = [term.owner]
    elif term.name and not term.id:
        # Karpenter: a name without an owner means images of this account or Amazon's.
        query["Owners"] = ["self", "amazon"]
    query["Filters"] = filters
    return query


def _describe_images(ec2: Any, **query: Any) -> list[AMIImage]:
    images = []
    for img in _paginate(ec2, "describe_images", "Images", **query):
        arch = _ARCH.get(img.get("Architecture", ""))
        if arch is None:
            continue
        images.append(
            AMIImage(
                id=img["ImageId"],
                name=img.get("Name"),
                architecture=arch,
                creation_date=img.get("CreationDate"),
                deprecation_time=img.get("DeprecationTime"),
            )
        )
    return images


def _amis_from_ssm(ec2: Any, ssm: Any, parameters: Mapping[str, str]) -> list[AMIImage]:
    """Read image ids from SSM (missing parameters skipped), then describe them."""
    ids: dict[str, str] = {}
    names = list(parameters)
    for i in range(0, len(names), 10):
        with aws_errors():
            out = ssm.get_parameters(Names=names[i : i + 10])
        for p in out.get("Parameters", []):
            ids[p["Value"]] = parameters.get(p["Name"], "")
    if not ids:
        return []
    described = {a.id: a for a in _describe_images(ec2, ImageIds=sorted(ids))} if ids else {}
    result = []
    for image_id, arch in ids.items():
        ami = described.get(image_id)
        if ami is None:
            if not arch:
                continue  # unknown architecture and not describable: unusable
            ami = AMIImage(id=image_id, name=None, architecture=arch)
        result.append(ami)
    return result


# --- instance profile --------------------------------------------------------------------------


def instance_profile_name(cluster_name: str, node_class_name: str) -> str:
    """Deterministic instance profile name for (cluster, node class); at most 128 characters."""
    digest = hashlib.sha256(f"{cluster_name}/{node_class_name}".encode()).hexdigest()[:16]
    safe = re.sub(r"[^\w+=,.@-]", "-", cluster_name)[:100]
    return f"{safe}_{digest}"


def _holds(iam: Any, profile: str, role_name: str) -> bool:
    """Whether instance profile ``profile`` exists and its (first) role is ``role_name``; False when it cannot be
    read (gone, or not readable: nodeflow may read only its own and Karpenter's, ``infra/iam.py``)."""
    try:
        with aws_errors():
            roles = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"].get("Roles") or []
    except (NotFound, AccessDenied, InvalidRequest):
        return False
    return bool(roles) and roles[0].get("RoleName") == role_name


def ensure_instance_profile(
    iam: Any, cluster_name: str, node_class_name: str, role: str, current: str | None = None
) -> str:
    """Create (if missing) the node class's instance profile and make ``role`` its only role. Idempotent.

    ``current`` (the class's ``status.instanceProfile``) is kept while it holds ``role``, as Karpenter keeps it: the
    profile Karpenter created for a class nodeflow adopts (``<cluster>_<number>``, under the path
    ``/karpenter/<region>/<cluster>/<uid>/``) goes on being used, no second profile is made."""
    role_name = role.rsplit("/", 1)[-1]  # accept a role ARN too
    name = instance_profile_name(cluster_name, node_class_name)
    if current and current != name and _holds(iam, current, role_name):
        return current
    try:
        with aws_errors():
            profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    except NotFound:
        tags = [
            {"Key": k, "Value": v} for k, v in {**cluster_tags(cluster_name), TAG_NODECLASS: node_class_name}.items()
        ]
        try:
            with aws_errors():
                profile = iam.create_instance_profile(InstanceProfileName=name, Tags=tags)["InstanceProfile"]
        except AlreadyExists:
            with aws_errors():
                profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    roles = [r["RoleName"] for r in profile.get("Roles", [])]
    if roles == [role_name]:
        return name
    for other in roles:
        if other != role_name:
            try:
                with aws_errors():
                    iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=other)
            except NotFound:
                pass
    if role_name not in roles:
        try:
            with aws_errors():
                iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role_name)
        except InvalidRequest as exc:
            # LimitExceeded: a conroles caller added the role first.
            if exc.code != "LimitExceeded":
                raise
            with aws_errors():
                roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"].get("Roles", [])
            if [r["RoleName"] for r in roles] != [role_name]:
                raise
    return name


# --- placement group ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PlacementGroup:
    id: str
    name: str
    strategy: str  # cluster / partition / spread
    partition_count: int | None = None


def resolve_placement_group(ec2: Any, selector: PlacementGroupSelector) -> PlacementGroup | None:
    """The available placement group ``selector`` names (by id or name), or None when there is none."""
    if selector.id:
        query: dict[str, Any] = {"GroupIds": [selector.id]}
    else:
        query = {"Filters": [{"Name": "group-name", "Values": [selector.name or ""]}]}
    try:
        with aws_errors():
            groups = ec2.describe_placement_groups(**query).get("PlacementGroups", [])
    except (NotFound, InvalidRequest):  # an unknown id is an error in EC2, an unknown name an empty list
        return None
    for g in groups:
        if g.get("State", "available") == "available":
            return PlacementGroup(
                id=g["GroupId"],
                name=g.get("GroupName", ""),
                strategy=g.get("Strategy", ""),
                partition_count=g.get("PartitionCount"),
            )
    return None


# =============================================================================================
# Launch templates


@dataclass(frozen=True)
class LaunchTemplateSpec:
    """Everything a launch template holds. Equal specs map to one template."""

    cluster_name: str
    node_pool: str
    node_class: str
    image_id: str
    security_group_ids: Sequence[str]
    instance_profile: str
    user_data: str  # base64
    # as launched: the spec's or the AMI family's defaults (nodeflow.api.block_devices); () leaves the AMI's own
    block_device_mappings: Sequence[BlockDeviceMapping] = ()
    metadata_options: MetadataOptions = field(default_factory=MetadataOptions)
    tags: Mapping[str, str] = field(default_factory=dict)
    detailed_monitoring: bool = False
    associate_public_ip_address: bool | None = None
    ip_prefix_count: int | None = None
    network_interfaces: Sequence[NetworkInterface] = ()
    connection_tracking: ConnectionTracking | None = None
    cpu_options: CPUOptions | None = None
    placement_group_id: str | None = None
    efa_count: int = 0  # EFA interfaces to attach (pods asked for vpc.amazonaws.com/efa); 0: none
    ipv6: bool = False  # an IPv6 cluster: interfaces get a primary IPv6 address, prefixes are IPv6 prefixes
    enclave: bool = False  # Nitro Enclaves enabled (the NodeClaim requests eks.amazonaws.com/nip-slots)
    # A launch into a capacity reservation: the template targets it (one template per reservation, as Karpenter).
    capacity_reservation_id: str | None = None
    capacity_reservation_type: str = "default"  # "default" | "capacity-block" (launched on the capacity-block market)
    capacity_reservation_interruptible: bool = False

    @property
    def all_tags(self) -> dict[str, str]:
        """User tags plus the ownership tags (ownership wins)."""
        return {
            **dict(self.tags),
            **cluster_tags(self.cluster_name),
            TAG_NODEPOOL: self.node_pool,
            TAG_NODECLASS: self.node_class,
        }


def _volume_size_gib(mapping: BlockDeviceMapping) -> int | None:
    size = mapping.ebs.volume_size_bytes if mapping.ebs else None
    return None if size is None else max(1, math.ceil(size / 2**30))


def _block_device_mapping(m: BlockDeviceMapping) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if m.device_name:
        out["DeviceName"] = m.device_name
    if m.ebs:
        ebs = {
            "DeleteOnTermination": m.ebs.delete_on_termination,
            "Encrypted": m.ebs.encrypted,
            "Iops": m.ebs.iops,
            "KmsKeyId": m.ebs.kms_key_id,
            "SnapshotId": m.ebs.snapshot_id,
            "Throughput": m.ebs.throughput,
            "VolumeInitializationRate": m.ebs.volume_initialization_rate,
            "VolumeSize": _volume_size_gib(m),
            "VolumeType": m.ebs.volume_type,
        }
        out["Ebs"] = {k: v for k, v in ebs.items() if v is not None}
    return out


def launch_template_data(spec: LaunchTemplateSpec) -> dict[str, Any]:
    """The CreateLaunchTemplate ``LaunchTemplateData`` for ``spec``."""
    mo = spec.metadata_options
    tags = [{"Key": k, "Value": v} for k, v in sorted(spec.all_tags.items())]
    data: dict[str, Any] = {
        "ImageId": spec.image_id,
        "IamInstanceProfile": {"Name": spec.instance_profile},
        "UserData": spec.user_data,
        "MetadataOptions": {
            "HttpEndpoint": mo.http_endpoint,
            "HttpProtocolIpv6": mo.http_protocol_ipv6,
            "HttpPutResponseHopLimit": mo.http_put_response_hop_limit,
            "HttpTokens": mo.http_tokens,
        },
        "Monitoring": {"Enabled": bool(spec.detailed_monitoring)},
        "TagSpecifications": [{"ResourceType": "network-interface", "Tags": tags}],
    }
    interfaces = _network_interfaces(spec)
    if interfaces:
        data["NetworkInterfaces"] = interfaces  # the security groups go on the interfaces
    else:
        data["SecurityGroupIds"] = sorted(spec.security_group_ids)
    if spec.block_device_mappings:
        data["BlockDeviceMappings"] = [_block_device_mapping(m) for m in spec.block_device_mappings]
    if spec.cpu_options is not None and spec.cpu_options.nested_virtualization is not None:
        data["CpuOptions"] = {"NestedVirtualization": spec.cpu_options.nested_virtualization}
    if spec.placement_group_id:
        data["Placement"] = {"GroupId": spec.placement_group_id}
    if spec.enclave:  # EC2's default is disabled: said only when enabled (other templates keep their names)
        data["EnclaveOptions"] = {"Enabled": True}
    data.update(_capacity_reservation_settings(spec))
    return data


def _capacity_reservation_settings(spec: LaunchTemplateSpec) -> dict[str, Any]:
    """As Karpenter's targeted launch mode: a reserved launch uses only its reservation (capacity blocks on the
    capacity-block market, interruptible reservations on theirs); every other launch opts out of open
    reservations (preference ``none``), so on-demand and spot nodes never use up reserved capacity unseen."""
    if not spec.capacity_reservation_id:
        return {"CapacityReservationSpecification": {"CapacityReservationPreference": "none"}}
    out: dict[str, Any] = {
        "CapacityReservationSpecification": {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {"CapacityReservationId": spec.capacity_reservation_id},
        }
    }
    if spec.capacity_reservation_type == "capacity-block":
        out["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    elif spec.capacity_reservation_interruptible:
        out["InstanceMarketOptions"] = {"MarketType": "interruptible-capacity-reservation"}
    return out


def _connection_tracking(ct: ConnectionTracking | None) -> dict[str, int] | None:
    if ct is None:
        return None
    out = {
        "TcpEstablishedTimeout": ct.tcp_established_timeout,
        "UdpStreamTimeout": ct.udp_stream_timeout,
        "UdpTimeout": ct.udp_timeout,
    }
    return {k: v for k, v in out.items() if v is not None} or None


def _network_interfaces(spec: LaunchTemplateSpec) -> list[dict[str, Any]] | None:
    """The launch template's NetworkInterfaces, or None to use SecurityGroupIds (one default interface).

    With ``networkInterfaces`` every entry becomes an interface on its card and device with the node's
    security groups; EFA-only interfaces carry no IP settings (EC2 refuses prefixes, public IPs and
    connection tracking on them). Else, with ``efa_count``, one EFA interface per network card (device 0
    on card 0, device 1 on the others, so card 0 stays the primary). Otherwise one primary interface is
    written only when a setting needs it (public IP, IP prefixes, connection tracking, an IPv6 cluster).
    In an IPv6 cluster every interface with IP settings gets one IPv6 address made primary, and
    ipPrefixCount asks for IPv6 prefixes instead of IPv4 ones."""
    groups = sorted(spec.security_group_ids)
    tracking = _connection_tracking(spec.connection_tracking)

    def ip_settings(out: dict[str, Any]) -> dict[str, Any]:
        if spec.associate_public_ip_address is not None:
            out["AssociatePublicIpAddress"] = spec.associate_public_ip_address
        if spec.ip_prefix_count is not None:
            out["Ipv6PrefixCount" if spec.ipv6 else "Ipv4PrefixCount"] = spec.ip_prefix_count
        if spec.ipv6:
            out["PrimaryIpv6"] = True
            out["Ipv6AddressCount"] = 1
        if tracking:
            out["ConnectionTrackingSpecification"] = tracking
        return out

    if spec.network_interfaces:
        result = []
        for ni in spec.network_interfaces:
            out: dict[str, Any] = {
                "NetworkCardIndex": ni.network_card_index,
                "DeviceIndex": ni.device_index,
                "InterfaceType": ni.interface_type,
                "Groups": groups,
            }
            result.append(out if ni.interface_type == "efa-only" else ip_settings(out))
        return result
    if spec.efa_count:
        return [
            ip_settings(
                {
                    "NetworkCardIndex": card,
                    "DeviceIndex": 0 if card == 0 else 1,
                    "InterfaceType": "efa",
                    "Groups": groups,
                }
            )
            for card in range(spec.efa_count)
        ]
    if spec.associate_public_ip_address is None and spec.ip_prefix_count is None and not tracking and not spec.ipv6:
        return None
    return [ip_settings({"DeviceIndex": 0, "Groups": groups})]


def launch_template_name(spec: LaunchTemplateSpec) -> str:
    """``nodeflow/<sha256 of the configuration>``: the same spec always gets the same name."""
    canonical = json.dumps(
        {"data": launch_template_data(spec), "tags": spec.all_tags}, sort_keys=True, separators=(",", ":")
    )
    return LAUNCH_TEMPLATE_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()


def ensure_launch_template(ec2: Any, spec: LaunchTemplateSpec) -> str:
    """Return the name of the launch template for ``spec``, creating it if missing (race-safe)."""
    name = launch_template_name(spec)
    with aws_errors():
        found = ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": [name]}])
    if found.get("LaunchTemplates"):
        return name
    tags = [{"Key": k, "Value": v} for k, v in sorted(spec.all_tags.items())]
    try:
        with aws_errors():
            ec2.create_launch_template(
                LaunchTemplateName=name,
                LaunchTemplateData=launch_template_data(spec),
                TagSpecifications=[{"ResourceType": "launch-template", "Tags": tags}],
            )
    except AlreadyExists:
        pass  # another launch created it first: same name means same configuration
    return name


def is_launch_template_not_found(exc: BaseException) -> bool:
    """Whether ``exc`` says a launch template the call named does not exist (any more)."""
    return isinstance(exc, NotFound) and exc.code in LAUNCH_TEMPLATE_NOT_FOUND_CODES


@dataclass(frozen=True)
class LaunchTemplate:
    """A launch template a provisioner of the cluster made (``list_launch_templates``)."""

    id: str
    name: str
    node_class: str  # its karpenter.k8s.aws/ec2nodeclass tag
    created: datetime | None


def _owned_template(template: Mapping[str, Any], cluster_name: str) -> LaunchTemplate | None:
    """``template`` (a DescribeLaunchTemplates item) when a provisioner of ``cluster_name`` made it: named as nodeflow
    or Karpenter name theirs, and tagged with the cluster (``cluster_tags``), a NodePool and an EC2NodeClass."""
    tags = {str(t.get("Key")): str(t.get("Value")) for t in template.get("Tags") or []}
    name = str(template.get("LaunchTemplateName") or "")
    owned = (
        name.startswith(OWNED_LAUNCH_TEMPLATE_PREFIXES)
        and all(tags.get(k) == v for k, v in cluster_tags(cluster_name).items())
        and TAG_NODEPOOL in tags
        and TAG_NODECLASS in tags
    )
    if not owned or not template.get("LaunchTemplateId"):
        return None
    return LaunchTemplate(str(template["LaunchTemplateId"]), name, tags[TAG_NODECLASS], template.get("CreateTime"))


def list_launch_templates(ec2: Any, cluster_name: str) -> list[LaunchTemplate]:
    """The launch templates a provisioner of ``cluster_name`` made (``_owned_template``), by name. Nothing else is
    returned: a template of another cluster, or one without the ownership tags, is never a candidate for deletion."""
    filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in cluster_tags(cluster_name).items()]
    found = (
        _owned_template(t, cluster_name)
        for t in _paginate(ec2, "describe_launch_templates", "LaunchTemplates", Filters=filters)
    )
    return sorted((t for t in found if t is not None), key=lambda t: t.name)


def delete_launch_template(ec2: Any, template: LaunchTemplate) -> bool:
    """Delete ``template`` (by id); False when it was gone already."""
    try:
        with aws_errors():
            ec2.delete_launch_template(LaunchTemplateId=template.id)
    except NotFound:
        return False
    return True


# =============================================================================================
# CreateFleet


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
    tags = [{"Key": k, "Value": v} for k, v in sorted(request.all_tags.items())]
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
    zone_of_subnet = {subnet: zone for zone, subnet in request.subnets.items()}
    reserved = request.capacity_type == "reserved"
    reservation_of = {(r.instance_type, r.zone): r for r in reversed(request.reservations)}  # the first wins
    with aws_errors(capacity_type=request.capacity_type):
        out = ec2.create_fleet(**params)
    fleet_id = out.get("FleetId")

    ice: list[Offering] = []
    other: list[tuple[str, str]] = []
    for err in out.get("Errors", []) or []:
        code = err.get("ErrorCode", "")
        ov = (err.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        if is_insufficient_capacity_code(code):
            zone = ov.get("AvailabilityZone") or zone_of_subnet.get(ov.get("SubnetId", ""))
            lifecycle = "reserved" if reserved else err.get("Lifecycle") or request.capacity_type
            ice.append(Offering(ov.get("InstanceType"), zone, lifecycle))
        else:
            other.append((code, err.get("ErrorMessage", code)))
    unavailable = tuple(sorted(set(ice), key=lambda o: (o.instance_type or "", o.zone or "", o.capacity_type or "")))

    for inst in out.get("Instances", []) or []:
        ids = inst.get("InstanceIds") or []
        if not ids:
            continue
        ov = (inst.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        zone = ov.get("AvailabilityZone") or zone_of_subnet.get(ov.get("SubnetId", ""))
        launched = LaunchedInstance(
            instance_id=ids[0],
            instance_type=inst.get("InstanceType") or ov.get("InstanceType", ""),
            zone=zone,
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
        if reserved:
            target = reservation_of.get((launched.instance_type, launched.zone or ""))
            if target is not None:
                launched = dataclasses.replace(
                    launched,
                    capacity_reservation_id=target.reservation_id,
                    capacity_reservation_type=target.reservation_type,
                )
        return launched

    if other:
        code = other[0][0]
        cls = error_class_for(code)
        raise cls(
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
    raise InsufficientCapacity(
        f"no capacity for {len(unavailable)} offering(s): "
        + ", ".join(f"{o.instance_type}/{o.zone}/{o.capacity_type}" for o in unavailable[:10])
        + (" ..." if len(unavailable) > 10 else ""),
        code="InsufficientInstanceCapacity",
        operation="CreateFleet",
        offerings=unavailable,
    )


# =============================================================================================
# Instances


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


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


def describe_instance_states(ec2: Any, ids: Iterable[str]) -> dict[str, InstanceInfo]:
    """Live instances among ``ids``. Missing, shutting-down and terminated instances are absent (gone)."""
    wanted = sorted(set(ids))
    result: dict[str, InstanceInfo] = {}
    for chunk in _chunks(wanted, 200):
        try:
            for reservation in _paginate(
                ec2, "describe_instances", "Reservations", Filters=[{"Name": "instance-id", "Values": chunk}]
            ):
                for inst in reservation.get("Instances", []):
                    info = _instance_info(inst)
                    if info.instance_id in chunk and info.state not in _GONE_STATES:
                        result[info.instance_id] = info
        except NotFound:
            continue
    return result


_ID = re.compile(r"i-[0-9a-f]+")


def terminate_instances(ec2: Any, ids: Iterable[str]) -> dict[str, str]:
    """Terminate ``ids``; returns id -> current state. Unknown ids are reported as 'terminated'."""
    remaining = sorted(set(ids))
    states: dict[str, str] = {}
    for chunk in _chunks(remaining, 1000):
        pending = list(chunk)
        while pending:
            try:
                with aws_errors():
                    out = ec2.terminate_instances(InstanceIds=pending)
            except NotFound as exc:
                missing = set(_ID.findall(exc.message)) & set(pending)
                if not missing:
                    missing = set(pending) if len(pending) == 1 else set()
                if not missing:
                    raise
                for m in missing:
                    states[m] = "terminated"
                pending = [i for i in pending if i not in missing]
                continue
            for change in out.get("TerminatingInstances", []):
                states[change["InstanceId"]] = change.get("CurrentState", {}).get("Name", "shutting-down")
            pending = []
    return states


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
    for reservation in _paginate(ec2, "describe_instances", "Reservations", Filters=filters):
        out.extend(_instance_info(inst) for inst in reservation.get("Instances", []))
    return sorted(out, key=lambda i: i.instance_id)


# =============================================================================================
# Authorization dry runs (the EC2NodeClass ValidationSucceeded condition)

# The calls a launch makes, in the order Karpenter's validation checks them, with its condition reasons.
DRY_RUN_CHECKS: tuple[tuple[str, str], ...] = (
    ("CreateLaunchTemplate", "CreateLaunchTemplateAuthCheckFailed"),
    ("CreateFleet", "CreateFleetAuthCheckFailed"),
    ("RunInstances", "RunInstancesAuthCheckFailed"),
)
_DRY_RUN_INSTANCE_TYPE = {"amd64": "m5.large", "arm64": "m6g.large"}  # any type of the AMI's architecture


@dataclass(frozen=True)
class AuthorizationDenied:
    """EC2 answered a dry run of ``operation`` with an authorization error (``code``: UnauthorizedOperation, ...)."""

    operation: str
    reason: str  # the condition reason, e.g. CreateFleetAuthCheckFailed
    code: str
    why: str  # why, in one line: a permissions boundary, a service control policy, no identity-based policy

    @property
    def message(self) -> str:
        return f"not authorized to call ec2:{self.operation} (dry run answered {self.code}): {self.why}"


def _denial_why(message: str) -> str:
    if "explicit deny in a permissions boundary" in message:
        return "denied by a permissions boundary"
    if "explicit deny in a service control policy" in message:
        return "denied by a service control policy"
    if "Not authorized for images" in message:
        return "not authorized for the AMI"
    return "no identity-based policy allows it"


def _dry_run(call: Callable[..., Any], operation: str, reason: str, **params: Any) -> AuthorizationDenied | None:
    """None when EC2 answers DryRunOperation (the call would have been allowed); the denial when it answers an
    authorization error; any other error is raised typed (``nodeflow.aws.errors``): the check is inconclusive."""
    from botocore.exceptions import ClientError

    try:
        call(DryRun=True, **params)
    except ClientError as exc:
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", "") or "")
        if code == "DryRunOperation":
            return None
        typed = map_error(exc)
        if isinstance(typed, AccessDenied):
            return AuthorizationDenied(operation, reason, code, _denial_why(str(error.get("Message", ""))))
        raise typed from exc
    raise InvalidRequest(f"ec2:{operation} with DryRun=True did not answer DryRunOperation", code="DryRunIgnored")


def dry_run_launch_authorization(
    ec2: Any, resolved: ResolvedNodeClass, cluster_name: str, tags: Mapping[str, str] | None = None
) -> AuthorizationDenied | None:
    """Whether the calls a launch makes for ``resolved``'s class are authorized, asked with DryRun=True as Karpenter's
    EC2NodeClass validation asks them: CreateLaunchTemplate, then CreateFleet (on-demand, instant), then RunInstances
    in each subnet (the first that is allowed is enough; otherwise the first subnet's answer counts), each with the
    class's tags and the cluster's ownership tags as a launch sends them (an IAM policy conditioned on request tags
    sees what it would see). CreateFleet names one of the class's launch templates (the first by name that carries the
    class's and the cluster's tags); before the class's first launch there is none, and only CreateLaunchTemplate
    and RunInstances are asked. Returns the first denial, or None. An answer that is not an authorization one
    (throttling, EC2 unavailable, ...) is raised typed: the check is inconclusive. Nothing is created."""
    ami = resolved.amis[0]
    instance_type = _DRY_RUN_INSTANCE_TYPE.get(ami.architecture, "m5.large")
    all_tags = {**dict(tags or {}), **cluster_tags(cluster_name), TAG_NODEPOOL: "", TAG_NODECLASS: resolved.name}
    tag_list = [{"Key": k, "Value": v} for k, v in sorted(all_tags.items())]
    groups = [g.id for g in resolved.security_groups]
    profile = {"Name": resolved.instance_profile} if resolved.instance_profile else None
    template = LAUNCH_TEMPLATE_PREFIX + "validation-" + resolved.name
    data: dict[str, Any] = {"ImageId": ami.id, "InstanceType": instance_type, "SecurityGroupIds": groups}
    if profile:
        data["IamInstanceProfile"] = profile
    (lt, lt_reason), (fleet, fleet_reason), _ = DRY_RUN_CHECKS
    denied = _dry_run(
        ec2.create_launch_template,
        lt,
        lt_reason,
        LaunchTemplateName=template,
        LaunchTemplateData=data,
        TagSpecifications=[{"ResourceType": "launch-template", "Tags": tag_list}],
    )
    if denied is not None:
        return denied
    with aws_errors():
        found = ec2.describe_launch_templates(
            Filters=[
                {"Name": f"tag:{TAG_NODECLASS}", "Values": [resolved.name]},
                {"Name": f"tag:kubernetes.io/cluster/{cluster_name}", "Values": ["owned"]},
            ]
        ).get("LaunchTemplates", [])
    if not found:  # CreateFleet launches from a template: before the class's first launch there is none to name
        return _dry_run_run_instances(ec2, resolved, ami.id, instance_type, groups, profile, tag_list)
    template = min(str(t["LaunchTemplateName"]) for t in found)
    denied = _dry_run(
        ec2.create_fleet,
        fleet,
        fleet_reason,
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        OnDemandOptions={"AllocationStrategy": "lowest-price"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Latest"},
                "Overrides": [{"InstanceType": instance_type, "SubnetId": s.id} for s in resolved.subnets[:1]],
            }
        ],
        TagSpecifications=[{"ResourceType": rt, "Tags": tag_list} for rt in ("instance", "volume", "fleet")],
    )
    if denied is not None:
        return denied
    return _dry_run_run_instances(ec2, resolved, ami.id, instance_type, groups, profile, tag_list)


def _dry_run_run_instances(
    ec2: Any,
    resolved: ResolvedNodeClass,
    image_id: str,
    instance_type: str,
    groups: list[str],
    profile: dict[str, str] | None,
    tag_list: list[dict[str, str]],
) -> AuthorizationDenied | None:
    """RunInstances dry runs, subnet by subnet: None at the first allowed; else the first subnet's answer."""
    _, _, (run, run_reason) = DRY_RUN_CHECKS
    first: AuthorizationDenied | AwsError | None = None
    for subnet in resolved.subnets:
        params: dict[str, Any] = {
            "ImageId": image_id,
            "InstanceType": instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "SubnetId": subnet.id,
            "SecurityGroupIds": groups,
            "TagSpecifications": [{"ResourceType": rt, "Tags": tag_list} for rt in ("instance", "volume")],
        }
        if profile:
            params["IamInstanceProfile"] = profile
        try:
            denied = _dry_run(ec2.run_instances, run, run_reason, **params)
        except AwsError as exc:
            first = first or exc
            continue
        if denied is None:
            return None
        first = first or denied
    if isinstance(first, AwsError):
        raise first
    return first
