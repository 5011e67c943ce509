"""karpenter.k8s.aws/v1 EC2NodeClass.

Validation mirrors the EC2NodeClass CRD's OpenAPI and CEL rules: selector-term shapes,
AMI aliases and families, role xor instanceProfile, restricted tags, kubelet settings,
block device mappings and metadata options (with their defaults).

Must not touch: how a class resolves to subnets, AMIs or profiles (``nodeflow.aws.ec2``,
``nodeflow.lifecycle.nodeclass``); no I/O.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from nodeflow.api.karpenter_common import (
    Condition,
    GoDuration,
    StatusModel,
    check_quantity,
)
from nodeflow.api.labels import AWS_GROUP
from nodeflow.api.meta import KubeModel, NodeSelectorRequirement, ObjectMeta, is_dns1123_subdomain
from nodeflow.api.quantity import parse_quantity

__all__ = [
    "AMI_ALIAS_FAMILIES",
    "EC2_API_VERSION",
    "AMIFamily",
    "AMISelectorTerm",
    "BlockDevice",
    "BlockDeviceMapping",
    "CPUOptions",
    "CapacityReservationSelectorTerm",
    "ConnectionTracking",
    "EC2NodeClass",
    "EC2NodeClassSpec",
    "EC2NodeClassStatus",
    "KubeletConfiguration",
    "MetadataOptions",
    "NetworkInterface",
    "PlacementGroupSelector",
    "SecurityGroupSelectorTerm",
    "StatusAMI",
    "StatusCapacityReservation",
    "StatusSecurityGroup",
    "StatusSubnet",
    "SubnetSelectorTerm",
]

EC2_API_VERSION = f"{AWS_GROUP}/v1"

AMIFamily = Literal["AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025"]
# alias family (lowercase, as written in "family@version") -> amiFamily
AMI_ALIAS_FAMILIES: dict[str, str] = {
    "al2": "AL2",
    "al2023": "AL2023",
    "bottlerocket": "Bottlerocket",
    "windows2019": "Windows2019",
    "windows2022": "Windows2022",
    "windows2025": "Windows2025",
}
MAX_SELECTOR_TERMS = 30
MAX_SELECTOR_TAGS = 20

# In the kubelet's (and Karpenter's CRD rules') order; tools/gen_crds.py writes the CEL rules from these.
RESERVED_RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage", "pid")
EVICTION_SIGNAL_NAMES = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
)
RESERVED_RESOURCES = frozenset(RESERVED_RESOURCE_NAMES)
EVICTION_SIGNALS = frozenset(EVICTION_SIGNAL_NAMES)
# Kubelet's own defaults, used when an EC2NodeClass does not override them.
DEFAULT_EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"}
DEFAULT_IMAGE_GC_HIGH_THRESHOLD_PERCENT = 85
DEFAULT_IMAGE_GC_LOW_THRESHOLD_PERCENT = 80

_EVICTION_PERCENT = re.compile(r"^(\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%$")
_ALIAS = re.compile(r"^[a-zA-Z0-9]+@.+$")
_SUBNET_ID = re.compile(r"^subnet-[0-9a-z]+$")
_SG_ID = re.compile(r"^sg-[0-9a-z]+$")
_AMI_ID = re.compile(r"^ami-[0-9a-z]+$")
_CR_ID = re.compile(r"^cr-[0-9a-z]+$")
_ACCOUNT_ID = re.compile(r"^[0-9]{12}$")
_PG_ID = re.compile(r"^pg-[0-9a-z]+$")
MAX_NETWORK_INTERFACES = 150
_VOLUME_SIZE = re.compile(
    r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi"
    r"|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G"
    r"|([1-9]|[1-5][0-7]|58)Ti|([1-9]|[1-5][0-9]|6[0-3]|64)T)$"
)


def _selector_tags(tags: dict[str, str] | None) -> dict[str, str] | None:
    if tags is None:
        return None
    if len(tags) > MAX_SELECTOR_TAGS:
        raise ValueError(f"at most {MAX_SELECTOR_TAGS} tags are allowed in a selector term, got {len(tags)}")
    for key, value in tags.items():
        if not key or not value:
            raise ValueError("empty tag keys or values aren't supported (use '*' to match any value)")
    return tags


def _pattern(value: str | None, pattern: re.Pattern[str], example: str) -> str | None:
    if value is not None and not pattern.match(value):
        raise ValueError(f"{value!r} is not a valid id (expected e.g. {example})")
    return value


def _exclusive(term: KubeModel, field: str, others: tuple[str, ...]) -> None:
    """Raise when ``field`` is set together with any of ``others`` (CEL 'mutually exclusive')."""
    if getattr(term, field) is None:
        return
    clash = [o for o in others if getattr(term, o) is not None]
    if clash:
        alias = {"id": "id", "name": "name", "alias": "alias"}.get(field, field)
        raise ValueError(
            f"{alias}: '{alias}' is mutually exclusive, cannot be set with a combination of other fields "
            f"in a selector term (also set: {', '.join(_camel(c) for c in clash)})"
        )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.upper() if p == "id" else p.title() for p in rest)


def _require_one(term: KubeModel, fields: tuple[str, ...]) -> None:
    if all(getattr(term, f) is None for f in fields):
        names = ", ".join(f"'{_camel(f)}'" for f in fields)
        raise ValueError(f"a selector term must set at least one of [{names}], got none")


# ---------------------------------------------------------------------------------------------
# Selector terms


class SubnetSelectorTerm(KubeModel):
    """Selects subnets by tags or by id (fields within a term are ANDed; terms are ORed)."""

    tags: dict[str, str] | None = None
    id: str | None = None

    _tags = field_validator("tags")(classmethod(lambda cls, v: _selector_tags(v)))

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        return _pattern(value, _SUBNET_ID, "subnet-0123456789abcdef0")

    @model_validator(mode="after")
    def _rules(self) -> SubnetSelectorTerm:
        _require_one(self, ("tags", "id"))
        _exclusive(self, "id", ("tags",))
        return self


class SecurityGroupSelectorTerm(KubeModel):
    """Selects security groups by tags, id or name."""

    tags: dict[str, str] | None = None
    id: str | None = None
    name: str | None = None

    _tags = field_validator("tags")(classmethod(lambda cls, v: _selector_tags(v)))

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        return _pattern(value, _SG_ID, "sg-0123456789abcdef0")

    @model_validator(mode="after")
    def _rules(self) -> SecurityGroupSelectorTerm:
        _require_one(self, ("tags", "id", "name"))
        _exclusive(self, "id", ("tags", "name"))
        _exclusive(self, "name", ("tags", "id"))
        return self


class CapacityReservationSelectorTerm(KubeModel):
    """Selects on-demand capacity reservations by tags (optionally owner) or id."""

    tags: dict[str, str] | None = None
    id: str | None = None
    owner_id: str | None = Field(default=None, alias="ownerID")
    instance_match_criteria: Literal["open", "targeted"] | None = None

    _tags = field_validator("tags")(classmethod(lambda cls, v: _selector_tags(v)))

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        return _pattern(value, _CR_ID, "cr-0123456789abcdef0")

    @field_validator("owner_id")
    @classmethod
    def _owner(cls, value: str | None) -> str | None:
        if value is not None and not _ACCOUNT_ID.match(value):
            raise ValueError(f"{value!r} must be a 12-digit AWS account id")
        return value

    @model_validator(mode="after")
    def _rules(self) -> CapacityReservationSelectorTerm:
        _require_one(self, ("tags", "id", "instance_match_criteria"))
        _exclusive(self, "id", ("tags", "owner_id", "instance_match_criteria"))
        return self


class AMISelectorTerm(KubeModel):
    """Selects AMIs by alias (EKS-optimized family@version), id, name/owner, tags or SSM parameter."""

    alias: str | None = Field(default=None, max_length=30)
    tags: dict[str, str] | None = None
    id: str | None = None
    name: str | None = None
    owner: str | None = None
    ssm_parameter: str | None = None

    _tags = field_validator("tags")(classmethod(lambda cls, v: _selector_tags(v)))

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        return _pattern(value, _AMI_ID, "ami-0123456789abcdef0")

    @field_validator("alias")
    @classmethod
    def _alias(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _ALIAS.match(value):
            raise ValueError(f"'alias' {value!r} is improperly formatted, must match the format 'family@version'")
        family, _, version = value.partition("@")
        if family not in AMI_ALIAS_FAMILIES:
            raise ValueError(
                f"alias family {family!r} is not supported, must be one of the following: "
                "'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"
            )
        if family.startswith("windows") and version != "latest":
            raise ValueError(f"alias {value!r}: windows families may only specify version 'latest'")
        return value

    @model_validator(mode="after")
    def _rules(self) -> AMISelectorTerm:
        _require_one(self, ("tags", "id", "name", "alias", "ssm_parameter"))
        _exclusive(self, "id", ("alias", "tags", "name", "owner", "ssm_parameter"))
        _exclusive(self, "alias", ("id", "tags", "name", "owner", "ssm_parameter"))
        return self

    @property
    def alias_family(self) -> str | None:
        """The amiFamily of this term's alias ("AL2023" for "al2023@latest"), or None."""
        return AMI_ALIAS_FAMILIES[self.alias.partition("@")[0]] if self.alias else None

    @property
    def alias_version(self) -> str | None:
        """The version of this term's alias ("latest", "v20240807"), or None."""
        return self.alias.partition("@")[2] if self.alias else None


# ---------------------------------------------------------------------------------------------
# Kubelet


def _reserved(name: str, values: dict[str, str] | None) -> dict[str, str] | None:
    if values is None:
        return None
    for key, value in values.items():
        if key not in RESERVED_RESOURCES:
            raise ValueError(f"[{key}]: valid keys for {name} are ['cpu','memory','ephemeral-storage','pid']")
        if value.startswith("-"):
            raise ValueError(f"[{key}]: {name} value cannot be a negative resource quantity")
    return values


def _eviction(name: str, values: dict[str, str] | None) -> dict[str, str] | None:
    if values is None:
        return None
    for key, value in values.items():
        if key not in EVICTION_SIGNALS:
            raise ValueError(
                f"[{key}]: valid keys for {name} are ['memory.available','nodefs.available',"
                "'nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']"
            )
        if value == "" or _EVICTION_PERCENT.match(value):
            continue
        try:
            parse_quantity(value)
        except ValueError:
            raise ValueError(
                f"[{key}]: {value!r} must be a percentage (e.g. 10%) or a resource quantity (e.g. 100Mi)"
            ) from None
    return values


ReservedQuantity = Annotated[str, BeforeValidator(check_quantity)]


class KubeletConfiguration(KubeModel):
    """``spec.kubelet``: the subset of kubelet settings Karpenter exposes."""

    cluster_dns: list[str] | None = Field(default=None, alias="clusterDNS")
    max_pods: int | None = Field(default=None, ge=0, le=2**31 - 1)
    pods_per_core: int | None = Field(default=None, ge=0, le=2**31 - 1)
    system_reserved: dict[str, ReservedQuantity] | None = None
    kube_reserved: dict[str, ReservedQuantity] | None = None
    eviction_hard: dict[str, str] | None = None
    eviction_soft: dict[str, str] | None = None
    eviction_soft_grace_period: dict[str, GoDuration] | None = None
    eviction_max_pod_grace_period: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    image_gc_high_threshold_percent: int | None = Field(default=None, ge=0, le=100, alias="imageGCHighThresholdPercent")
    image_gc_low_threshold_percent: int | None = Field(default=None, ge=0, le=100, alias="imageGCLowThresholdPercent")
    cpu_cfs_quota: bool | None = Field(default=None, alias="cpuCFSQuota")

    @field_validator("system_reserved")
    @classmethod
    def _system_reserved(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _reserved("systemReserved", value)

    @field_validator("kube_reserved")
    @classmethod
    def _kube_reserved(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _reserved("kubeReserved", value)

    @field_validator("eviction_hard")
    @classmethod
    def _eviction_hard(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _eviction("evictionHard", value)

    @field_validator("eviction_soft")
    @classmethod
    def _eviction_soft(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _eviction("evictionSoft", value)

    @field_validator("eviction_soft_grace_period")
    @classmethod
    def _eviction_soft_grace(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key in value or {}:
            if key not in EVICTION_SIGNALS:
                raise ValueError(
                    f"[{key}]: valid keys for evictionSoftGracePeriod are ['memory.available',"
                    "'nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree',"
                    "'pid.available']"
                )
        return value

    @model_validator(mode="after")
    def _rules(self) -> KubeletConfiguration:
        high, low = self.image_gc_high_threshold_percent, self.image_gc_low_threshold_percent
        if high is not None and low is not None and high <= low:
            raise ValueError(
                f"imageGCHighThresholdPercent: imageGCHighThresholdPercent ({high}) must be greater than "
                f"imageGCLowThresholdPercent ({low})"
            )
        soft = self.eviction_soft or {}
        grace = self.eviction_soft_grace_period or {}
        for key in soft:
            if key not in grace:
                raise ValueError(
                    f"evictionSoft[{key}]: evictionSoft key does not have a matching evictionSoftGracePeriod"
                )
        for key in grace:
            if key not in soft:
                raise ValueError(
                    f"evictionSoftGracePeriod[{key}]: evictionSoftGracePeriod key does not have a matching evictionSoft"
                )
        return self

    # Effective values (Karpenter/kubelet defaults when unset).
    @property
    def effective_eviction_hard(self) -> dict[str, str]:
        """evictionHard with kubelet's defaults for the signals not set."""
        return {**DEFAULT_EVICTION_HARD, **(self.eviction_hard or {})}

    @property
    def effective_image_gc_high_threshold_percent(self) -> int:
        return (
            self.image_gc_high_threshold_percent
            if self.image_gc_high_threshold_percent is not None
            else DEFAULT_IMAGE_GC_HIGH_THRESHOLD_PERCENT
        )

    @property
    def effective_image_gc_low_threshold_percent(self) -> int:
        return (
            self.image_gc_low_threshold_percent
            if self.image_gc_low_threshold_percent is not None
            else DEFAULT_IMAGE_GC_LOW_THRESHOLD_PERCENT
        )

    @property
    def effective_cpu_cfs_quota(self) -> bool:
        return True if self.cpu_cfs_quota is None else self.cpu_cfs_quota


# ---------------------------------------------------------------------------------------------
# Block devices, metadata options


class BlockDevice(KubeModel):
    """``ebs`` of a block device mapping."""

    delete_on_termination: bool | None = None
    encrypted: bool | None = None
    iops: int | None = Field(default=None, ge=0)
    kms_key_id: str | None = Field(default=None, alias="kmsKeyID")
    snapshot_id: str | None = Field(default=None, alias="snapshotID")
    throughput: int | None = Field(default=None, ge=0)
    volume_initialization_rate: int | None = Field(default=None, ge=100, le=300)
    volume_size: Annotated[str, BeforeValidator(check_quantity)] | None = None
    volume_type: Literal["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"] | None = None

    @field_validator("volume_size")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value is not None and not _VOLUME_SIZE.match(value):
            raise ValueError(
                f"{value!r} must be a whole size in Gi, G, Ti or T (e.g. 20Gi, 100G, 1Ti), "
                "at most 59000Gi / 64000G / 58Ti / 64T"
            )
        return value

    @model_validator(mode="after")
    def _rules(self) -> BlockDevice:
        if self.snapshot_id is None and self.volume_size is None:
            raise ValueError("volumeSize: snapshotID or volumeSize must be defined")
        if self.volume_initialization_rate is not None and not self.snapshot_id:
            raise ValueError("snapshotID: snapshotID must be set when volumeInitializationRate is set")
        return self

    @property
    def volume_size_bytes(self) -> int | None:
        return None if self.volume_size is None else int(parse_quantity(self.volume_size))


class BlockDeviceMapping(KubeModel):
    """One entry of ``spec.blockDeviceMappings``."""

    device_name: str | None = None
    ebs: BlockDevice | None = None
    root_volume: bool | None = None


class MetadataOptions(KubeModel):
    """Instance Metadata Service options (defaults: enabled, IPv6 disabled, hop limit 1, IMDSv2)."""

    http_endpoint: Literal["enabled", "disabled"] = "enabled"
    http_protocol_ipv6: Literal["enabled", "disabled"] = Field(default="disabled", alias="httpProtocolIPv6")
    http_put_response_hop_limit: int = Field(default=1, ge=1, le=64)
    http_tokens: Literal["required", "optional"] = "required"


class PlacementGroupSelector(KubeModel):
    """``spec.placementGroupSelector``: the EC2 placement group nodes launch into, by name or by id."""

    name: str | None = Field(default=None, min_length=1)
    id: str | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        return _pattern(value, _PG_ID, "pg-0123456789abcdef0")

    @model_validator(mode="after")
    def _rules(self) -> PlacementGroupSelector:
        if self.name is None and self.id is None:
            raise ValueError("expected at least one, got none, ['name', 'id']")
        if self.name is not None and self.id is not None:
            raise ValueError("'name' and 'id' are mutually exclusive")
        return self


class NetworkInterface(KubeModel):
    """One entry of ``spec.networkInterfaces``: a network interface attached at launch."""

    network_card_index: int = Field(ge=0, le=2**31 - 1)
    device_index: int = Field(ge=0, le=2**31 - 1)
    interface_type: Literal["interface", "efa-only"]


class ConnectionTracking(KubeModel):
    """``spec.connectionTracking``: idle connection tracking timeouts (seconds) of the launched ENIs."""

    tcp_established_timeout: int | None = Field(default=None, ge=60, le=432000, alias="tcpEstablishedTimeout")
    udp_stream_timeout: int | None = Field(default=None, ge=60, le=180, alias="udpStreamTimeout")
    udp_timeout: int | None = Field(default=None, ge=30, le=60, alias="udpTimeout")

    @model_validator(mode="after")
    def _rules(self) -> ConnectionTracking:
        if self.tcp_established_timeout is None and self.udp_stream_timeout is None and self.udp_timeout is None:
            raise ValueError("at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set")
        return self


class CPUOptions(KubeModel):
    """``spec.cpuOptions``: CPU options of the launched instances."""

    nested_virtualization: Literal["enabled", "disabled"] | None = None


def _network_interfaces(interfaces: list[NetworkInterface]) -> None:
    """Karpenter's networkInterfaces rules: a primary ENA interface at card 0 / device 0, no two interfaces
    at one (card, device), at most one efa-only interface per network card."""
    if not interfaces:
        return
    if not any(
        n.network_card_index == 0 and n.device_index == 0 and n.interface_type == "interface" for n in interfaces
    ):
        raise ValueError(
            "networkInterfaces must include a primary interface with interfaceType='interface' "
            "(networkCardIndex 0, deviceIndex 0)"
        )
    seen: set[tuple[int, int]] = set()
    efa_cards: set[int] = set()
    for i, n in enumerate(interfaces):
        slot = (n.network_card_index, n.device_index)
        if slot in seen:
            raise ValueError(
                f"[{i}]: networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs "
                f"(networkCardIndex {slot[0]}, deviceIndex {slot[1]})"
            )
        seen.add(slot)
        if n.interface_type == "efa-only":
            if n.network_card_index in efa_cards:
                raise ValueError(
                    f"[{i}]: networkInterfaces can have at most one efa-only device per network card "
                    f"(networkCardIndex {n.network_card_index})"
                )
            efa_cards.add(n.network_card_index)


# ---------------------------------------------------------------------------------------------
# Spec, status, kind

_RESTRICTED_TAGS = ("eks:eks-cluster-name", "karpenter.sh/nodepool", "karpenter.sh/nodeclaim")


def _terms_size(name: str, terms: list[KubeModel], *, required: bool) -> None:
    if required and not terms:
        raise ValueError(f"{name} cannot be empty")
    if len(terms) > MAX_SELECTOR_TERMS:
        raise ValueError(f"{name} must have at most {MAX_SELECTOR_TERMS} terms, got {len(terms)}")


class EC2NodeClassSpec(KubeModel):
    """``spec`` of an EC2NodeClass."""

    subnet_selector_terms: list[SubnetSelectorTerm]
    security_group_selector_terms: list[SecurityGroupSelectorTerm]
    capacity_reservation_selector_terms: list[CapacityReservationSelectorTerm] | None = None
    associate_public_ip_address: bool | None = Field(default=None, alias="associatePublicIPAddress")
    ip_prefix_count: int | None = Field(default=None, ge=0)
    ami_selector_terms: list[AMISelectorTerm] = Field(alias="amiSelectorTerms")
    ami_family: AMIFamily | None = Field(default=None, alias="amiFamily")
    user_data: str | None = None
    role: str | None = None
    instance_profile: str | None = None
    tags: dict[str, str] | None = None
    kubelet: KubeletConfiguration | None = None
    block_device_mappings: list[BlockDeviceMapping] | None = Field(default=None, max_length=50)
    instance_store_policy: Literal["RAID0"] | None = None
    detailed_monitoring: bool | None = None
    metadata_options: MetadataOptions = Field(default_factory=MetadataOptions)
    context: str | None = None
    placement_group_selector: PlacementGroupSelector | None = None
    network_interfaces: list[NetworkInterface] | None = Field(default=None, max_length=MAX_NETWORK_INTERFACES)
    connection_tracking: ConnectionTracking | None = None
    cpu_options: CPUOptions | None = Field(default=None, alias="cpuOptions")

    @field_validator("subnet_selector_terms")
    @classmethod
    def _subnets(cls, terms: list[SubnetSelectorTerm]) -> list[SubnetSelectorTerm]:
        _terms_size("subnetSelectorTerms", list(terms), required=True)
        return terms

    @field_validator("security_group_selector_terms")
    @classmethod
    def _sgs(cls, terms: list[SecurityGroupSelectorTerm]) -> list[SecurityGroupSelectorTerm]:
        _terms_size("securityGroupSelectorTerms", list(terms), required=True)
        return terms

    @field_validator("capacity_reservation_selector_terms")
    @classmethod
    def _crs(cls, terms: list[CapacityReservationSelectorTerm] | None) -> list[CapacityReservationSelectorTerm] | None:
        _terms_size("capacityReservationSelectorTerms", list(terms or []), required=False)
        return terms

    @field_validator("ami_selector_terms")
    @classmethod
    def _amis(cls, terms: list[AMISelectorTerm]) -> list[AMISelectorTerm]:
        _terms_size("amiSelectorTerms", list(terms), required=True)
        if any(t.alias for t in terms) and len(terms) != 1:
            raise ValueError(
                "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"
            )
        return terms

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: dict[str, str] | None) -> dict[str, str] | None:
        for key in tags or {}:
            if key == "":
                raise ValueError("empty tag keys aren't supported")
            if key in _RESTRICTED_TAGS or key == "karpenter.k8s.aws/ec2nodeclass":
                raise ValueError(f"[{key}]: tag contains a restricted tag matching {key}")
            if key.startswith("kubernetes.io/cluster"):
                raise ValueError(f"[{key}]: tag contains a restricted tag matching kubernetes.io/cluster/")
        return tags

    @field_validator("block_device_mappings")
    @classmethod
    def _bdms(cls, mappings: list[BlockDeviceMapping] | None) -> list[BlockDeviceMapping] | None:
        if mappings and sum(1 for m in mappings if m.root_volume) > 1:
            raise ValueError("must have only one blockDeviceMappings with rootVolume")
        return mappings

    @field_validator("network_interfaces")
    @classmethod
    def _nics(cls, interfaces: list[NetworkInterface] | None) -> list[NetworkInterface] | None:
        _network_interfaces(list(interfaces or []))
        return interfaces

    @model_validator(mode="after")
    def _rules(self) -> EC2NodeClassSpec:
        if (self.role is None) == (self.instance_profile is None):
            raise ValueError("role: must specify exactly one of ['role', 'instanceProfile']")
        if self.role == "":
            raise ValueError("role: role cannot be empty")
        if self.instance_profile == "":
            raise ValueError("instanceProfile: instanceProfile cannot be empty")
        alias_family = self.alias_family
        if alias_family is None and self.ami_family is None:
            raise ValueError("amiFamily: must specify amiFamily if amiSelectorTerms does not contain an alias")
        if alias_family is not None and self.ami_family not in (None, "Custom", alias_family):
            raise ValueError(
                f"amiFamily: if set, amiFamily must be '{alias_family}' or 'Custom' when using an {alias_family} alias"
            )
        return self

    @property
    def alias_term(self) -> AMISelectorTerm | None:
        return next((t for t in self.ami_selector_terms if t.alias), None)

    @property
    def alias_family(self) -> str | None:
        term = self.alias_term
        return term.alias_family if term else None


class StatusSubnet(StatusModel):
    id: str
    zone: str
    zone_id: str | None = Field(default=None, alias="zoneID")


class StatusSecurityGroup(StatusModel):
    id: str
    name: str | None = None


class StatusAMI(StatusModel):
    id: str
    name: str | None = None
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)
    deprecated: bool | None = None


class StatusCapacityReservation(StatusModel):
    id: str
    availability_zone: str
    instance_type: str
    owner_id: str = Field(alias="ownerID")
    instance_match_criteria: str | None = None
    end_time: datetime | None = None
    reservation_type: str | None = None
    interruptible: bool | None = None
    state: str | None = None


class EC2NodeClassStatus(StatusModel):
    """``status`` of an EC2NodeClass (resolved subnets, security groups, AMIs, ...)."""

    subnets: list[StatusSubnet] | None = None
    security_groups: list[StatusSecurityGroup] | None = None
    capacity_reservations: list[StatusCapacityReservation] | None = None
    amis: list[StatusAMI] | None = None
    instance_profile: str | None = None
    conditions: list[Condition] | None = None


_EMPTY_KUBELET = KubeletConfiguration()


class EC2NodeClass(KubeModel):
    """karpenter.k8s.aws/v1 EC2NodeClass."""

    api_version: Literal["karpenter.k8s.aws/v1"] = "karpenter.k8s.aws/v1"
    kind: Literal["EC2NodeClass"] = "EC2NodeClass"
    metadata: ObjectMeta
    spec: EC2NodeClassSpec
    status: EC2NodeClassStatus | None = None

    @model_validator(mode="after")
    def _name(self) -> EC2NodeClass:
        if not self.metadata.name:
            raise ValueError("metadata.name: name is required")
        if not is_dns1123_subdomain(self.metadata.name):
            raise ValueError(
                f"metadata.name: {self.metadata.name!r} must be a lowercase RFC 1123 subdomain "
                "(lowercase alphanumerics, '-' and '.', at most 253 characters)"
            )
        return self

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def resolved_ami_family(self) -> str:
        """amiFamily if set, else the family of the alias (Karpenter's AMIFamily())."""
        return self.spec.ami_family or self.spec.alias_family or "Custom"

    @property
    def ami_alias(self) -> str | None:
        term = self.spec.alias_term
        return term.alias if term else None

    @property
    def kubelet(self) -> KubeletConfiguration:
        """spec.kubelet, or an empty configuration (use its ``effective_*`` properties for defaults)."""
        return self.spec.kubelet or _EMPTY_KUBELET

    @property
    def role(self) -> str | None:
        return self.spec.role

    @property
    def instance_profile(self) -> str | None:
        return self.spec.instance_profile
