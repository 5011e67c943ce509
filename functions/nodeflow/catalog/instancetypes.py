"""Resolve raw instance type facts into the scheduler's ``InstanceType``s for one EC2NodeClass.

The behaviour follows the Karpenter AWS provider (``pkg/providers/instancetype/types.go`` and the
AMI family feature flags), re-expressed here:

capacity
    ``cpu`` = vCPUs. ``memory`` = MiB (minus 64 MiB when EC2 lists arm64 first: Graviton's CMA
    reservation) minus ``ceil(MiB x vm_memory_overhead_percent)`` MiB of VM overhead.
    ``ephemeral-storage`` = the instance store total (GB, decimal) under instanceStorePolicy RAID0
    when the type has one, else the volume the node's ephemeral storage lives on: ``root_volume_bytes``,
    or the AMI family's default (``nodeflow.api.block_devices``: the volume the launch template gets).
    ``pods`` = kubelet maxPods when set; else ENI-limited ``enis x (ipv4PerEni - 1) + 2`` (ENIs of the
    default network card minus ``reserved_enis``; 0 if none are left) for AL2/AL2023/Bottlerocket/
    Custom, and 110 for Windows; then capped at ``podsPerCore x vCPUs`` when podsPerCore > 0
    (ignored by Bottlerocket, like Karpenter). Extended resources (only when non-zero):
    ``nvidia.com/gpu``/``amd.com/gpu``/``habana.ai/gaudi`` = GPUs by manufacturer,
    ``aws.amazon.com/neuron`` = Neuron devices, ``aws.amazon.com/neuroncore`` = devices x cores,
    ``vpc.amazonaws.com/efa`` = EFA max interfaces, and on Windows
    ``vpc.amazonaws.com/PrivateIPv4Address`` = IPv4 per ENI - 1. (``vpc.amazonaws.com/pod-eni`` is
    left out: it needs the VPC resource controller's trunking table, which the catalog lacks.)
overhead
    kube-reserved: cpu 6 % of the first core, 1 % of the second, 0.5 % of the next two, 0.25 % of the
    rest (each tier truncated to whole millicores); memory ``11Mi x pods + 255Mi`` (pods = the pods
    capacity above, as current Karpenter does); ephemeral-storage 1Gi. kubeReserved entries
    override per resource; systemReserved is taken as given. Eviction threshold: memory.available
    100Mi and nodefs.available 10 % by default; when evictionHard/evictionSoft set a signal, the
    larger of the two wins (percentages are of the memory / ephemeral-storage capacity, rounded up,
    100 % meaning 0); Bottlerocket ignores evictionSoft.
allocatable
    capacity - overhead.total(), per capacity resource, never below 0.
labels
    Karpenter's well-known labels of the type (see ``_static_labels``) plus ``kubernetes.io/os``
    (windows for Windows AMI families, which only get amd64 types) and the Windows build label.
    Zone and capacity type live in the offerings.
offerings
    One per (zone the type is offered in, capacity type it supports and has a price for), sorted by
    (zone, capacity type); ``available`` is False for entries of ``unavailable``. Types left with
    no offering, or that cannot run the AMI family's OS, are left out.

Results are cached per (``CatalogData`` object, settings, unavailable set); treat them as read-only.

Must not touch: where the facts come from (``source``) or where pods go (``nodeflow.scheduling``); no I/O.
"""

from __future__ import annotations

import math
import re
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from nodeflow.api import labels as L
from nodeflow.api.block_devices import ephemeral_volume_bytes
from nodeflow.api.quantity import to_milli
from nodeflow.catalog.model import CatalogData, InstanceType, InstanceTypeInfo, Offering, Overhead
from nodeflow.catalog.reservations import CapacityReservation

__all__ = [
    "AMI_FAMILIES",
    "NodeClassSettings",
    "clear_cache",
    "eni_limited_pods",
    "known_type",
    "kube_reserved_cpu_milli",
    "name_labels",
    "reserved_offerings",
    "resolve_instance_type",
    "resolve_instance_types",
]

MI = 2**20
GI = 2**30
CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
MEMORY_AVAILABLE = "memory.available"
NODEFS_AVAILABLE = "nodefs.available"
INSTANCE_STORE_RAID0 = "RAID0"
ON_DEMAND = L.CAPACITY_TYPE_ON_DEMAND
SPOT = L.CAPACITY_TYPE_SPOT
RESERVED = L.CAPACITY_TYPE_RESERVED
# A reserved offering costs the on-demand price divided by this: "free" (0.0 at the plan's 6 decimals),
# yet ordered like the on-demand prices (Karpenter divides by 10^7 for the same reason).
RESERVED_PRICE_DIVISOR = 1e10


@dataclass(frozen=True, slots=True)
class _Family:
    windows_build: str = ""  # non-empty for Windows families
    eni_limited_pods: bool = True
    pods_per_core: bool = True
    eviction_soft: bool = True


_FAMILIES: Mapping[str, _Family] = {
    "AL2023": _Family(),
    "AL2": _Family(),
    "Custom": _Family(),
    "Bottlerocket": _Family(pods_per_core=False, eviction_soft=False),
    "Windows2019": _Family(windows_build="10.0.17763", eni_limited_pods=False),
    "Windows2022": _Family(windows_build="10.0.20348", eni_limited_pods=False),
    "Windows2025": _Family(windows_build="10.0.26100", eni_limited_pods=False),
}
AMI_FAMILIES = tuple(_FAMILIES)

Pairs = tuple[tuple[str, str], ...]


def _pairs(value: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> Pairs:
    items = value.items() if isinstance(value, Mapping) else (value or ())
    return tuple(sorted((str(k), str(v)) for k, v in items))


@dataclass(frozen=True, slots=True)
class NodeClassSettings:
    """What of an EC2NodeClass changes the resolved instance types (hashable: a cache key).

    The four maps are tuples of (key, quantity string) pairs, sorted; pass dicts to ``create``.
    ``root_volume_bytes`` is the size of the volume the node's ephemeral storage lives on
    (``nodeflow.api.block_devices.ephemeral_volume_bytes``); None means the AMI family's default volume (what
    the launch template gets without ``blockDeviceMappings``: 20Gi, Windows 50Gi).
    """

    ami_family: str = "AL2023"
    max_pods: int | None = None
    pods_per_core: int | None = None
    kube_reserved: Pairs = ()
    system_reserved: Pairs = ()
    eviction_hard: Pairs = ()
    eviction_soft: Pairs = ()
    root_volume_bytes: int | None = None
    instance_store_policy: str | None = None
    vm_memory_overhead_percent: float = 0.075
    reserved_enis: int = 0
    _derived: _Derived | None = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.ami_family not in _FAMILIES:
            raise ValueError(f"unknown amiFamily {self.ami_family!r}; expected one of {', '.join(AMI_FAMILIES)}")
        if self.instance_store_policy not in (None, INSTANCE_STORE_RAID0):
            raise ValueError(f"instanceStorePolicy must be {INSTANCE_STORE_RAID0!r} or unset")
        for name in ("max_pods", "pods_per_core", "root_volume_bytes"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative")
        if self.reserved_enis < 0:
            raise ValueError("reserved_enis must not be negative")
        if not 0 <= self.vm_memory_overhead_percent < 1:
            raise ValueError("vm_memory_overhead_percent must be in [0, 1)")
        for name in ("kube_reserved", "system_reserved", "eviction_hard", "eviction_soft"):
            object.__setattr__(self, name, _pairs(getattr(self, name)))
        signal_maps = [self.eviction_hard]
        if self.family.eviction_soft:
            signal_maps.append(self.eviction_soft)
        else:
            for key, value in self.eviction_soft:
                _parse_signal(key, value)  # validated even when the family ignores it
        signals = tuple(
            parsed for signals in signal_maps for k, v in signals if (parsed := _parse_signal(k, v)) is not None
        )
        derived = _Derived(
            kube_reserved=tuple((k, _quantity("kube_reserved", k, v)) for k, v in self.kube_reserved),
            system_reserved=tuple((k, _quantity("system_reserved", k, v)) for k, v in self.system_reserved),
            eviction_signals=signals,
        )
        object.__setattr__(self, "_derived", derived)

    @property
    def derived(self) -> _Derived:
        assert self._derived is not None
        return self._derived

    @classmethod
    def create(
        cls,
        *,
        kube_reserved: Mapping[str, str] | None = None,
        system_reserved: Mapping[str, str] | None = None,
        eviction_hard: Mapping[str, str] | None = None,
        eviction_soft: Mapping[str, str] | None = None,
        **kwargs: object,
    ) -> NodeClassSettings:
        """Build from plain dicts (as in ``spec.kubelet``)."""
        return cls(
            kube_reserved=_pairs(kube_reserved),
            system_reserved=_pairs(system_reserved),
            eviction_hard=_pairs(eviction_hard),
            eviction_soft=_pairs(eviction_soft),
            **kwargs,  # type: ignore[arg-type]
        )

    @property
    def family(self) -> _Family:
        return _FAMILIES[self.ami_family]

    @property
    def os(self) -> str:
        return "windows" if self.family.windows_build else "linux"


def _quantity(where: str, key: str, value: str) -> int:
    try:
        return to_milli(value)
    except ValueError as exc:
        raise ValueError(f"{where}[{key}]: {exc}") from exc


# An eviction signal: (resource, percentage as a (numerator, denominator) of 100 or None, milli-units).
_Signal = tuple[str, tuple[int, int] | None, int]
_SIGNAL_RESOURCES = {MEMORY_AVAILABLE: MEMORY, NODEFS_AVAILABLE: EPHEMERAL_STORAGE}


@dataclass(frozen=True, slots=True)
class _Derived:
    """Settings parsed once: quantities in milli-units, eviction signals ready to apply."""

    kube_reserved: tuple[tuple[str, int], ...]
    system_reserved: tuple[tuple[str, int], ...]
    eviction_signals: tuple[_Signal, ...]


def _parse_signal(key: str, value: str) -> _Signal | None:
    """One evictionHard/evictionSoft entry; None for signals that do not reserve capacity."""
    text = value.strip()
    if text.endswith("%"):
        try:
            ratio = Fraction(Decimal(text[:-1]))
        except (InvalidOperation, ValueError, OverflowError) as exc:
            raise ValueError(f"eviction threshold {key}={value!r} is not a percentage") from exc
        if not 0 <= ratio <= 100:
            raise ValueError(f"eviction threshold {key}={value!r} must be between 0% and 100%")
        if ratio == 100:  # kubelet: 100% disables the threshold
            ratio = Fraction(0)
        percent: tuple[int, int] | None = (ratio.numerator, ratio.denominator)
        milli = 0
    else:
        percent = None
        milli = _quantity("eviction", key, text)
    resource = _SIGNAL_RESOURCES.get(key)
    return None if resource is None else (resource, percent, milli)


def _percent_of(capacity_milli: int, numerator: int, denominator: int) -> int:
    """ceil(capacity x numerator / denominator %) in whole base units, returned in milli-units."""
    base = capacity_milli // 1000
    return -(-base * numerator // (denominator * 100)) * 1000


# -- formulas ----------------------------------------------------------------------------------
def eni_limited_pods(info: InstanceTypeInfo, reserved_enis: int = 0) -> int:
    """VPC CNI pod density: usable ENIs x (IPv4 per ENI - 1) + 2 (0 when no ENI is usable)."""
    usable = max(info.max_enis - reserved_enis, 0)
    if usable == 0:
        return 0
    return usable * (info.ipv4_per_eni - 1) + 2


def _pods(info: InstanceTypeInfo, settings: NodeClassSettings) -> int:
    family = settings.family
    if settings.max_pods is not None:
        count = settings.max_pods
    elif family.eni_limited_pods:
        count = eni_limited_pods(info, settings.reserved_enis)
    else:
        count = 110
    if settings.pods_per_core and family.pods_per_core:
        count = min(settings.pods_per_core * info.vcpus, count)
    return count


# (start, end, numerator, denominator) in millicores: 6 %, 1 %, 0.5 %, 0.25 %.
_CPU_TIERS = ((0, 1000, 6, 100), (1000, 2000, 1, 100), (2000, 4000, 5, 1000), (4000, 1 << 31, 25, 10000))


def kube_reserved_cpu_milli(cpu_milli: int) -> int:
    """Karpenter's default kube-reserved CPU for a node of ``cpu_milli`` millicores."""
    total = 0
    for start, end, num, den in _CPU_TIERS:
        if cpu_milli >= start:
            span = min(cpu_milli, end) - start
            total += span * num // den
    return total


def _memory_mib(info: InstanceTypeInfo, overhead_percent: float) -> int:
    mib = info.memory_mib
    if info.supported_architectures[:1] == ("arm64",):
        mib -= 64  # Graviton: CMA reservation
    return mib - math.ceil(mib * overhead_percent)


def _ephemeral_bytes(info: InstanceTypeInfo, settings: NodeClassSettings) -> int:
    if settings.instance_store_policy == INSTANCE_STORE_RAID0 and info.local_storage_gb > 0:
        return info.local_storage_gb * 10**9
    if settings.root_volume_bytes is not None:
        return settings.root_volume_bytes
    return ephemeral_volume_bytes(settings.ami_family, ())


_NAME = re.compile(r"^([a-z]+)(-[0-9]+tb)?([0-9]+).*\.")


def name_labels(name: str) -> dict[str, str]:
    """category / family / generation / size labels parsed from a type name, as Karpenter does.

    "g4dn.xlarge" -> g, g4dn, 4, xlarge; "u-6tb1.metal" -> u, u-6tb1, 1, metal;
    "trn1n.32xlarge" -> trn, trn1n, 1, 32xlarge.
    """
    out: dict[str, str] = {}
    match = _NAME.match(name)
    if match:
        out[L.LABEL_INSTANCE_CATEGORY] = match.group(1)
        out[L.LABEL_INSTANCE_GENERATION] = match.group(3)
    parts = name.split(".")
    if len(parts) == 2:
        out[L.LABEL_INSTANCE_FAMILY] = parts[0]
        out[L.LABEL_INSTANCE_SIZE] = parts[1]
    return out


def _kebab(text: str) -> str:
    return text.replace(" ", "-").lower()


def _static_labels(info: InstanceTypeInfo, region: str) -> dict[str, str]:
    """The labels that do not depend on the node class."""
    labels = {
        L.LABEL_INSTANCE_TYPE: info.name,
        L.LABEL_ARCH: info.architecture,
        L.LABEL_REGION: region,
        L.LABEL_INSTANCE_CPU: str(info.vcpus),
        L.LABEL_INSTANCE_MEMORY: str(info.memory_mib),
        L.LABEL_INSTANCE_HYPERVISOR: info.hypervisor,
        L.LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT: "true" if info.encryption_in_transit else "false",
        L.LABEL_INSTANCE_CAPABILITY_FLEX: "true" if "-flex" in info.name.split(".")[0] else "false",
    }
    labels.update(name_labels(info.name))
    if info.cpu_manufacturer:
        labels[L.LABEL_INSTANCE_CPU_MANUFACTURER] = info.cpu_manufacturer
    if info.sustained_clock_mhz:
        labels[L.LABEL_INSTANCE_CPU_SUSTAINED_CLOCK] = str(info.sustained_clock_mhz)
    if info.local_nvme:
        labels[L.LABEL_INSTANCE_LOCAL_NVME] = str(info.local_storage_gb)
    if info.network_bandwidth_mbps:
        labels[L.LABEL_INSTANCE_NETWORK_BANDWIDTH] = str(info.network_bandwidth_mbps)
    if info.ebs_max_bandwidth_mbps:
        labels[L.LABEL_INSTANCE_EBS_BANDWIDTH] = str(info.ebs_max_bandwidth_mbps)
    if len(info.gpus) == 1:
        gpu = info.gpus[0]
        labels[L.LABEL_INSTANCE_GPU_NAME] = _kebab(gpu.name)
        labels[L.LABEL_INSTANCE_GPU_MANUFACTURER] = _kebab(gpu.manufacturer)
        labels[L.LABEL_INSTANCE_GPU_COUNT] = str(gpu.count)
        labels[L.LABEL_INSTANCE_GPU_MEMORY] = str(gpu.memory_mib)
    accelerators = info.neuron_devices or info.accelerators
    if len(accelerators) == 1:
        device = accelerators[0]
        labels[L.LABEL_INSTANCE_ACCELERATOR_NAME] = _kebab(device.name)
        labels[L.LABEL_INSTANCE_ACCELERATOR_MANUFACTURER] = _kebab(device.manufacturer)
        labels[L.LABEL_INSTANCE_ACCELERATOR_COUNT] = str(device.count)
    return labels


def _extended_resources(info: InstanceTypeInfo) -> dict[str, int]:
    counts: dict[str, int] = {}
    by_manufacturer = {
        "nvidia": L.RESOURCE_NVIDIA_GPU,
        "amd": L.RESOURCE_AMD_GPU,
        "habana": L.RESOURCE_HABANA_GAUDI,
    }
    for gpu in info.gpus:
        resource = by_manufacturer.get(gpu.manufacturer.lower())
        if resource:
            counts[resource] = counts.get(resource, 0) + gpu.count
    if info.neuron_devices:
        counts[L.RESOURCE_AWS_NEURON] = sum(d.count for d in info.neuron_devices)
        first = info.neuron_devices[0]
        counts[L.RESOURCE_AWS_NEURON_CORE] = first.count * first.cores
    if info.efa_max_interfaces:
        counts[L.RESOURCE_EFA] = info.efa_max_interfaces
    return {name: n * 1000 for name, n in counts.items() if n > 0}


@dataclass(frozen=True, slots=True)
class _Resolved:
    """Everything but the offerings: depends on (info, settings) only."""

    labels: Mapping[str, str]
    capacity: Mapping[str, int]
    overhead: Overhead
    allocatable: Mapping[str, int]


def _eviction(signals: tuple[_Signal, ...], memory_milli: int, storage_milli: int) -> dict[str, int]:
    threshold = {MEMORY: 100 * MI * 1000, EPHEMERAL_STORAGE: _percent_of(storage_milli, 10, 1)}
    override: dict[str, int] = {}
    for resource, percent, milli in signals:
        if percent is not None:
            milli = _percent_of(memory_milli if resource == MEMORY else storage_milli, *percent)
        if milli > override.get(resource, -1):
            override[resource] = milli
    threshold.update(override)
    return threshold


def _resolve(info: InstanceTypeInfo, settings: NodeClassSettings, static: Mapping[str, str]) -> _Resolved:
    family = settings.family
    pods = _pods(info, settings)
    cpu_milli = info.vcpus * 1000
    memory_milli = _memory_mib(info, settings.vm_memory_overhead_percent) * MI * 1000
    storage_milli = _ephemeral_bytes(info, settings) * 1000
    capacity = {CPU: cpu_milli, MEMORY: memory_milli, EPHEMERAL_STORAGE: storage_milli, PODS: pods * 1000}
    capacity.update(_extended_resources(info))
    if family.windows_build and info.ipv4_per_eni > 1:
        capacity[L.RESOURCE_PRIVATE_IPV4] = (info.ipv4_per_eni - 1) * 1000

    derived = settings.derived
    kube = {
        CPU: kube_reserved_cpu_milli(cpu_milli),
        MEMORY: (11 * pods + 255) * MI * 1000,
        EPHEMERAL_STORAGE: GI * 1000,
    }
    kube.update(derived.kube_reserved)
    system = dict(derived.system_reserved)
    eviction = _eviction(derived.eviction_signals, memory_milli, storage_milli)
    overhead = Overhead(kube_reserved=kube, system_reserved=system, eviction_threshold=eviction)
    allocatable = {
        name: max(value - kube.get(name, 0) - system.get(name, 0) - eviction.get(name, 0), 0)
        for name, value in capacity.items()
    }

    labels = dict(static)
    labels[L.LABEL_OS] = settings.os
    if family.windows_build:
        labels[L.LABEL_WINDOWS_BUILD] = family.windows_build
    return _Resolved(labels=labels, capacity=capacity, overhead=overhead, allocatable=allocatable)


# -- offerings -------------------------------------------------------------------------------
def _base_offerings(data: CatalogData, name: str) -> tuple[Offering, ...]:
    info = data.infos[name]
    zones = data.offerings.get(name, ())
    if not zones:
        return ()
    on_demand = data.on_demand_prices.get(name) if "on-demand" in info.usage_classes else None
    spot_prices = data.spot_prices if info.supports_spot else {}
    zone_ids = data.zones
    out: list[Offering] = []
    for zone in sorted(zones):
        zone_id = zone_ids.get(zone, "")
        if on_demand is not None:
            out.append(Offering(zone, ON_DEMAND, on_demand, True, zone_id))
        spot = spot_prices.get((name, zone))
        if spot is not None:
            out.append(Offering(zone, SPOT, spot, True, zone_id))
    return tuple(out)


def _usable(info: InstanceTypeInfo, settings: NodeClassSettings) -> bool:
    if not info.architecture or settings.os not in info.supported_os:
        return False
    return not (settings.family.windows_build and info.architecture != "amd64")


# -- cache -------------------------------------------------------------------------------------
_MAX_RESULTS_PER_DATA = 64


class _DataCache:
    __slots__ = ("offerings", "resolved", "results", "static")

    def __init__(self, data: CatalogData) -> None:
        self.static: dict[str, dict[str, str]] = {}
        self.offerings: dict[str, tuple[Offering, ...]] = {}
        for name, info in data.infos.items():
            offerings = _base_offerings(data, name)
            if offerings:
                self.offerings[name] = offerings
                self.static[name] = _static_labels(info, data.region)
        self.resolved: dict[NodeClassSettings, dict[str, _Resolved]] = {}
        self.results: OrderedDict[
            tuple[NodeClassSettings, frozenset[tuple[str, str, str]]], tuple[InstanceType, ...]
        ] = OrderedDict()


_CACHE: weakref.WeakKeyDictionary[CatalogData, _DataCache] = weakref.WeakKeyDictionary()


def clear_cache() -> None:
    """Forget every cached resolution (tests, or after a settings-independent data change)."""
    _CACHE.clear()
    _RESERVED_CACHE.clear()


def _data_cache(data: CatalogData) -> _DataCache:
    cache = _CACHE.get(data)
    if cache is None:
        cache = _DataCache(data)
        _CACHE[data] = cache
    return cache


def _apply_unavailable(
    name: str, offerings: tuple[Offering, ...], unavailable: frozenset[tuple[str, str, str]]
) -> tuple[Offering, ...]:
    return tuple(
        replace(o, available=False) if (name, o.zone, o.capacity_type) in unavailable else o for o in offerings
    )


def reserved_offerings(
    data: CatalogData, name: str, reservations: Iterable[CapacityReservation]
) -> tuple[Offering, ...]:
    """One ``reserved`` offering per reservation of instance type ``name`` (Karpenter's reserved capacity
    offerings): priced near zero (on-demand / ``RESERVED_PRICE_DIVISOR``), available while the reservation is
    active (not an expiring capacity block), has instances left and its zone is one the type is offered in."""
    zones = data.offerings.get(name, ())
    on_demand = data.on_demand_prices.get(name, 0.0)
    out = []
    for r in reservations:
        if r.instance_type != name:
            continue
        out.append(
            Offering(
                zone=r.zone,
                capacity_type=RESERVED,
                price=on_demand / RESERVED_PRICE_DIVISOR,
                available=r.available_instance_count > 0 and r.state == "active" and r.zone in zones,
                zone_id=r.zone_id or data.zones.get(r.zone, ""),
                reservation_id=r.id,
                reservation_type=r.reservation_type,
                reservation_capacity=r.available_instance_count,
                reservation_interruptible=r.interruptible,
            )
        )
    return tuple(out)


def known_type(data: CatalogData, name: str) -> tuple[Mapping[str, str], tuple[Offering, ...]] | None:
    """The node-class-independent labels and every offering (zone x capacity type, available or not) of the
    instance type ``name``; None when the catalog does not sell it. Read-only (cached)."""
    cache = _data_cache(data)
    offerings = cache.offerings.get(name)
    return None if offerings is None else (cache.static[name], offerings)


def resolve_instance_types(
    data: CatalogData,
    settings: NodeClassSettings,
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
    reservations: tuple[CapacityReservation, ...] = (),
) -> list[InstanceType]:
    """Every usable instance type of ``data`` resolved for ``settings``, sorted by name.

    ``unavailable`` holds (instance type, zone, capacity type) offerings to mark available=False
    (e.g. recent InsufficientInstanceCapacity). ``reservations`` are the EC2NodeClass's capacity
    reservations: each adds a ``reserved`` offering (see ``reserved_offerings``) to its instance type,
    after the type's other offerings. Cached per (data object, settings, unavailable, reservations).
    """
    if reservations:
        return _with_reservations(data, settings, unavailable, reservations)
    cache = _data_cache(data)
    key = (settings, unavailable)
    hit = cache.results.get(key)
    if hit is not None:
        cache.results.move_to_end(key)
        return list(hit)
    resolved = cache.resolved.get(settings)
    if resolved is None:
        resolved = {
            name: _resolve(data.infos[name], settings, static)
            for name, static in cache.static.items()
            if _usable(data.infos[name], settings)
        }
        cache.resolved[settings] = resolved
    touched = {entry[0] for entry in unavailable}
    result = tuple(
        InstanceType(
            name=name,
            labels=r.labels,
            capacity=r.capacity,
            overhead=r.overhead,
            allocatable=r.allocatable,
            offerings=(
                _apply_unavailable(name, cache.offerings[name], unavailable)
                if name in touched
                else cache.offerings[name]
            ),
        )
        for name, r in sorted(resolved.items())
    )
    cache.results[key] = result
    while len(cache.results) > _MAX_RESULTS_PER_DATA:
        cache.results.popitem(last=False)
    return list(result)


_RESERVED_CACHE: weakref.WeakKeyDictionary[CatalogData, OrderedDict[object, tuple[InstanceType, ...]]] = (
    weakref.WeakKeyDictionary()
)


def _with_reservations(
    data: CatalogData,
    settings: NodeClassSettings,
    unavailable: frozenset[tuple[str, str, str]],
    reservations: tuple[CapacityReservation, ...],
) -> list[InstanceType]:
    per_data = _RESERVED_CACHE.setdefault(data, OrderedDict())
    key = (settings, unavailable, reservations)
    hit = per_data.get(key)
    if hit is None:
        wanted = {r.instance_type for r in reservations}
        out: list[InstanceType] = []
        for it in resolve_instance_types(data, settings, unavailable):
            extra = reserved_offerings(data, it.name, reservations) if it.name in wanted else ()
            if extra:
                extra = _apply_unavailable(it.name, extra, unavailable)
                it = replace(it, offerings=it.offerings + extra)
            out.append(it)
        hit = per_data[key] = tuple(out)
        while len(per_data) > _MAX_RESULTS_PER_DATA:
            per_data.popitem(last=False)
    return list(hit)


def resolve_instance_type(
    data: CatalogData,
    name: str,
    settings: NodeClassSettings,
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
    reservations: tuple[CapacityReservation, ...] = (),
) -> InstanceType | None:
    """One type resolved (None when it is unknown, unusable for the AMI family or has no offering)."""
    for instance_type in resolve_instance_types(data, settings, unavailable, reservations):
        if instance_type.name == name:
            return instance_type
    return None
