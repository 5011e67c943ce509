"""Catalog data model: the facts about EC2 instance types and what the scheduler sees.

``InstanceTypeInfo`` holds raw facts from DescribeInstanceTypes (one per type, region-wide).
``InstanceType`` is what the solver consumes: one type resolved for one EC2NodeClass, with
Karpenter's well-known labels, capacity, overhead, allocatable and priced offerings.
Resources are ``Mapping[str, int]`` in milli-units (see ``nodeflow.api.quantity``).

Must not touch: how the data is fetched (``source``) or resolved (``instancetypes``); no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Offering:
    """Where and how an instance type can be bought, and what it costs per hour.

    A ``reserved`` offering is one EC2 capacity reservation (``nodeflow.catalog.reservations``):
    ``reservation_id`` its id, ``reservation_type`` "default" (ODCR) or "capacity-block",
    ``reservation_capacity`` how many instances it can still launch (the solver never plans more
    NodeClaims on it). Other offerings leave these empty.
    """

    zone: str
    capacity_type: str  # "spot" | "on-demand" | "reserved"
    price: float
    available: bool = True
    zone_id: str = ""
    reservation_id: str = ""
    reservation_type: str = ""
    reservation_capacity: int = 0
    reservation_interruptible: bool = False


@dataclass(frozen=True, slots=True)
class Overhead:
    """What the node keeps for itself (milli-units per resource)."""

    kube_reserved: Mapping[str, int] = field(default_factory=dict)
    system_reserved: Mapping[str, int] = field(default_factory=dict)
    eviction_threshold: Mapping[str, int] = field(default_factory=dict)

    def total(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for part in (self.kube_reserved, self.system_reserved, self.eviction_threshold):
            for name, value in part.items():
                out[name] = out.get(name, 0) + value
        return out


@dataclass(frozen=True, slots=True)
class InstanceType:
    """An instance type resolved for one EC2NodeClass: what a node of it offers."""

    name: str
    # Single-valued well-known labels of the type (arch, os, instance-family, -cpu, ...).
    # Zone and capacity type are not here: they come from ``offerings``.
    labels: Mapping[str, str]
    capacity: Mapping[str, int]
    overhead: Overhead
    allocatable: Mapping[str, int]
    offerings: tuple[Offering, ...]


@dataclass(frozen=True, slots=True)
class Device:
    """One kind of device on an instance type: a GPU, an inference accelerator or a Neuron device.

    ``count`` is how many of them the type has, ``memory_mib`` the memory of ONE device and
    ``cores`` the cores of one device (Neuron devices only; 0 otherwise).
    """

    name: str
    manufacturer: str
    count: int
    memory_mib: int = 0
    cores: int = 0


@dataclass(frozen=True, slots=True)
class InstanceTypeInfo:
    """Raw, region-wide facts about one EC2 instance type (from DescribeInstanceTypes).

    Nothing here depends on an EC2NodeClass; ``nodeflow.catalog.instancetypes`` turns these facts
    into scheduler ``InstanceType``s. Bandwidths are megabits per second; local storage is the
    instance store total in GB (decimal, as EC2 reports ``TotalSizeInGB``).
    """

    name: str
    vcpus: int
    memory_mib: int
    # Kubernetes architecture ("amd64" | "arm64"; "" when EC2 reports none we recognise).
    architecture: str
    # EC2's own list, in EC2's order (Karpenter's Graviton memory rule looks at the first one).
    supported_architectures: tuple[str, ...] = ()
    cpu_manufacturer: str = ""  # "intel" | "amd" | "aws" | "apple" | ""
    sustained_clock_mhz: int = 0  # 0 when unknown
    gpus: tuple[Device, ...] = ()
    # InferenceAcceleratorInfo devices that are not Neuron devices (e.g. Qualcomm AI100).
    accelerators: tuple[Device, ...] = ()
    # AWS Inferentia / Trainium devices (NeuronInfo).
    neuron_devices: tuple[Device, ...] = ()
    local_storage_gb: int = 0  # instance store total, 0 when none
    local_nvme: bool = False  # instance store present and NVMe-attached
    network_bandwidth_mbps: int = 0  # baseline, summed over network cards; 0 when unknown
    ebs_bandwidth_mbps: int = 0  # EBS-optimized baseline; 0 when unknown
    ebs_max_bandwidth_mbps: int = 0  # EBS-optimized maximum (Karpenter's instance-ebs-bandwidth label)
    hypervisor: str = ""  # "nitro" | "xen" | "" (bare metal)
    bare_metal: bool = False
    burstable: bool = False
    current_generation: bool = True
    max_enis: int = 0  # network interfaces on the default network card (what the VPC CNI uses)
    ipv4_per_eni: int = 0
    efa_max_interfaces: int = 0  # 0 when EFA is not supported
    encryption_in_transit: bool = False
    usage_classes: tuple[str, ...] = ()  # "on-demand", "spot", "capacity-block"
    supported_os: tuple[str, ...] = ("linux",)  # "linux" and, for amd64 non-mac types, "windows"

    @property
    def supports_spot(self) -> bool:
        return "spot" in self.usage_classes

    @property
    def supports_windows(self) -> bool:
        return "windows" in self.supported_os


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class CatalogData:
    """Everything a region's catalog knows: facts, zones, offerings and prices.

    Compared and hashed by identity (resolution results are cached per ``CatalogData`` object).
    """

    region: str
    infos: Mapping[str, InstanceTypeInfo]
    zones: Mapping[str, str]  # zone name -> zone id
    offerings: Mapping[str, tuple[str, ...]]  # instance type -> sorted zone names it is offered in
    on_demand_prices: Mapping[str, float]  # instance type -> USD per hour
    spot_prices: Mapping[tuple[str, str], float]  # (instance type, zone) -> USD per hour
    spot_prices_estimated: bool = False
    provenance: str = ""
