"""Live catalog from AWS: EC2 Describe* calls and the Pricing API, behind ``CatalogSource``.

- ``DescribeInstanceTypes`` (paginated) -> ``InstanceTypeInfo`` per type (``info_from_aws``).
- ``DescribeAvailabilityZones`` -> zone name -> zone id (availability zones only, no local zones).
- ``DescribeInstanceTypeOfferings`` (location type availability-zone) -> zones per type.
- ``DescribeSpotPriceHistory`` from "now" (injected clock) -> the latest Linux/UNIX price per
  (type, zone).
- Pricing ``GetProducts`` (the Pricing API lives in us-east-1 whatever the region) filtered to
  Linux, shared tenancy, no pre-installed software, capacity status Used -> on-demand USD/h.

Clients are injected (or made from an injected boto3 session) so tests run against moto and
botocore's Stubber. Every AWS failure is translated in ``_aws_errors`` into the typed errors of
``nodeflow.catalog.source``; nothing else here catches botocore exceptions.

Must not touch: how instance types resolve for a class (``instancetypes``), prices beyond reading them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from nodeflow.catalog.model import CatalogData, Device, InstanceTypeInfo
from nodeflow.catalog.source import AccessDenied, CatalogError, CatalogUnavailable, Throttled

__all__ = [
    "PRICING_REGION",
    "AwsCatalogSource",
    "Ec2Facts",
    "info_from_aws",
    "parse_network_performance",
    "parse_price_list",
]

PRICING_REGION = "us-east-1"

# EC2 architecture names -> Kubernetes ones (i386 alone is never the only one on a usable type).
_ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64", "x86_64_mac": "amd64", "arm64_mac": "arm64"}
_CPU_MANUFACTURERS = {"intel": "intel", "amd": "amd", "aws": "aws", "apple": "apple"}
_THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
    }
)
_ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "AuthFailure",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "OptInRequired",
    }
)
_NETWORK_PERFORMANCE = re.compile(r"(?:(\d+)\s*x\s*)?(?:up to\s*)?([\d.]+)\s*gigabit", re.IGNORECASE)
_PRICING_FILTERS = (
    ("operatingSystem", "Linux"),
    ("tenancy", "Shared"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
    ("productFamily", "Compute Instance"),
)
_SPOT_PRODUCTS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]


@contextmanager
def _aws_errors(operation: str) -> Iterator[None]:
    """The one place AWS errors become catalog errors."""
    try:
        yield
    except CatalogError:
        raise
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message", "")) or str(exc)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        text = f"{operation}: {code}: {message}"
        if code in _THROTTLING_CODES or status == 429:
            raise Throttled(text) from exc
        if code in _ACCESS_CODES or status == 403:
            raise AccessDenied(text) from exc
        raise CatalogUnavailable(text) from exc
    except BotoCoreError as exc:  # endpoint unreachable, timeouts, bad credentials config, ...
        raise CatalogUnavailable(f"{operation}: {type(exc).__name__}: {exc}") from exc


def parse_network_performance(text: str) -> int:
    """Mbps from EC2's NetworkPerformance text ("25 Gigabit", "Up to 10 Gigabit", "4x 100 Gigabit").

    "Up to" figures are burst ceilings; this is only the fallback when EC2 gives no per-card
    baseline. Qualitative values ("High", "Moderate") give 0 (unknown).
    """
    match = _NETWORK_PERFORMANCE.search(text or "")
    if match is None:
        return 0
    cards = int(match.group(1) or 1)
    return round(cards * float(match.group(2)) * 1000)


def _devices(items: Iterable[Mapping[str, Any]], *, neuron: bool = False) -> tuple[Device, ...]:
    out = []
    for item in items:
        cores = int(item.get("CoreInfo", {}).get("Count", 0)) if neuron else 0
        out.append(
            Device(
                name=str(item.get("Name", "")),
                manufacturer="AWS" if neuron else str(item.get("Manufacturer", "")),
                count=int(item.get("Count", 0)),
                memory_mib=int(item.get("MemoryInfo", {}).get("SizeInMiB", 0)),
                cores=cores,
            )
        )
    return tuple(out)


def info_from_aws(raw: Mapping[str, Any]) -> InstanceTypeInfo:
    """One DescribeInstanceTypes entry -> ``InstanceTypeInfo`` (pure; missing fields -> defaults)."""
    processor = raw.get("ProcessorInfo", {})
    architectures = tuple(str(a) for a in processor.get("SupportedArchitectures", ()))
    architecture = next((_ARCHITECTURES[a] for a in architectures if a in _ARCHITECTURES), "")
    mac = any(a.endswith("_mac") for a in architectures)
    if mac:
        supported_os: tuple[str, ...] = ("macos",)
    elif architecture == "amd64":
        supported_os = ("linux", "windows")
    else:
        supported_os = ("linux",)
    clock = processor.get("SustainedClockSpeedInGhz")

    network = raw.get("NetworkInfo", {})
    cards = network.get("NetworkCards", ())
    baseline = [c["BaselineBandwidthInGbps"] for c in cards if c.get("BaselineBandwidthInGbps") is not None]
    if baseline:
        network_mbps = round(sum(float(b) for b in baseline) * 1000)
    else:
        network_mbps = parse_network_performance(str(network.get("NetworkPerformance", "")))
    default_card = int(network.get("DefaultNetworkCardIndex", 0) or 0)
    enis = next(
        (int(c["MaximumNetworkInterfaces"]) for c in cards if int(c.get("NetworkCardIndex", 0)) == default_card),
        int(network.get("MaximumNetworkInterfaces", 0) or 0),
    )
    efa = 0
    if network.get("EfaSupported"):
        efa = int(network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0) or 0)

    ebs = raw.get("EbsInfo", {})
    ebs_optimized = ebs.get("EbsOptimizedInfo", {}) if ebs.get("EbsOptimizedSupport") != "unsupported" else {}
    storage = raw.get("InstanceStorageInfo") or {}
    local_gb = int(storage.get("TotalSizeInGB", 0) or 0)

    neuron = _devices(raw.get("NeuronInfo", {}).get("NeuronDevices", ()), neuron=True)
    accelerators = () if neuron else _devices(raw.get("InferenceAcceleratorInfo", {}).get("Accelerators", ()))
    return InstanceTypeInfo(
        name=str(raw["InstanceType"]),
        vcpus=int(raw.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
        memory_mib=int(raw.get("MemoryInfo", {}).get("SizeInMiB", 0)),
        architecture=architecture,
        supported_architectures=architectures,
        cpu_manufacturer=_CPU_MANUFACTURERS.get(str(processor.get("Manufacturer", "")).lower(), ""),
        sustained_clock_mhz=round(float(clock) * 1000) if clock is not None else 0,
        gpus=_devices(raw.get("GpuInfo", {}).get("Gpus", ())),
        accelerators=accelerators,
        neuron_devices=neuron,
        local_storage_gb=local_gb,
        local_nvme=local_gb > 0 and storage.get("NvmeSupport", "unsupported") != "unsupported",
        network_bandwidth_mbps=network_mbps,
        ebs_bandwidth_mbps=int(ebs_optimized.get("BaselineBandwidthInMbps", 0) or 0),
        ebs_max_bandwidth_mbps=int(ebs_optimized.get("MaximumBandwidthInMbps", 0) or 0),
        hypervisor=str(raw.get("Hypervisor", "") or ""),
        bare_metal=bool(raw.get("BareMetal", False)),
        burstable=bool(raw.get("BurstablePerformanceSupported", False)),
        current_generation=bool(raw.get("CurrentGeneration", True)),
        max_enis=enis,
        ipv4_per_eni=int(network.get("Ipv4AddressesPerInterface", 0) or 0),
        efa_max_interfaces=efa,
        encryption_in_transit=bool(network.get("EncryptionInTransitSupported", False)),
        usage_classes=tuple(sorted(str(u) for u in raw.get("SupportedUsageClasses", ()))),
        supported_os=supported_os,
    )


def _on_demand_usd(product: Mapping[str, Any]) -> float | None:
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dimension in term.get("priceDimensions", {}).values():
            usd = dimension.get("pricePerUnit", {}).get("USD")
            if usd is None:
                continue
            price = float(usd)
            if price > 0 and math.isfinite(price):
                return price
    return None


def parse_price_list(items: Iterable[str | Mapping[str, Any]]) -> dict[str, float]:
    """GetProducts ``PriceList`` entries (JSON strings) -> instance type -> on-demand USD per hour.

    Entries without an instance type or a positive USD price are skipped. When two products name
    the same type, the lower price wins (deterministic whatever the page order).
    """
    prices: dict[str, float] = {}
    for item in items:
        product: Mapping[str, Any] = json.loads(item) if isinstance(item, str) else item
        instance_type = product.get("product", {}).get("attributes", {}).get("instanceType")
        price = _on_demand_usd(product)
        if not instance_type or price is None:
            continue
        name = str(instance_type)
        prices[name] = min(price, prices.get(name, price))
    return prices


@dataclass(frozen=True, slots=True)
class Ec2Facts:
    """What EC2 alone says about a region (no prices)."""

    region: str
    infos: dict[str, InstanceTypeInfo]
    zones: dict[str, str]
    offerings: dict[str, tuple[str, ...]]


class AwsCatalogSource:
    """``CatalogSource`` backed by live AWS APIs.

    Give either ``session`` (a boto3 Session; clients are made per region, Pricing in us-east-1)
    or ready clients: ``ec2`` (bound to the region you will load) and ``pricing``. ``clock``
    supplies "now" for the spot price history window.
    """

    def __init__(
        self,
        *,
        session: Any = None,
        ec2: Any = None,
        pricing: Any = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if session is None and ec2 is None:
            raise ValueError("AwsCatalogSource needs a boto3 session or an ec2 client")
        self._session = session
        self._ec2_client = ec2
        self._pricing_client = pricing
        self._clock = clock or (lambda: datetime.now(UTC))

    # -- clients -------------------------------------------------------------------------------
    def _ec2(self, region: str) -> Any:
        if self._ec2_client is not None:
            bound = getattr(getattr(self._ec2_client, "meta", None), "region_name", region)
            if bound != region:
                raise ValueError(f"ec2 client is bound to {bound!r}, cannot load {region!r}")
            return self._ec2_client
        return self._session.client("ec2", region_name=region)

    def _pricing(self) -> Any:
        if self._pricing_client is None:
            if self._session is None:
                raise ValueError("AwsCatalogSource needs a pricing client or a session for on-demand prices")
            self._pricing_client = self._session.client("pricing", region_name=PRICING_REGION)
        return self._pricing_client

    # -- EC2 -----------------------------------------------------------------------------------
    def instance_types(self, region: str) -> dict[str, InstanceTypeInfo]:
        infos: dict[str, InstanceTypeInfo] = {}
        with _aws_errors("ec2:DescribeInstanceTypes"):
            paginator = self._ec2(region).get_paginator("describe_instance_types")
            for page in paginator.paginate():
                for raw in page.get("InstanceTypes", ()):
                    info = info_from_aws(raw)
                    infos[info.name] = info
        return dict(sorted(infos.items()))

    def zones(self, region: str) -> dict[str, str]:
        with _aws_errors("ec2:DescribeAvailabilityZones"):
            response = self._ec2(region).describe_availability_zones(
                Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]
            )
        zones = {
            str(z["ZoneName"]): str(z.get("ZoneId", ""))
            for z in response.get("AvailabilityZones", ())
            if z.get("ZoneType", "availability-zone") == "availability-zone"
        }
        return dict(sorted(zones.items()))

    def offerings(self, region: str, zones: Iterable[str]) -> dict[str, tuple[str, ...]]:
        known = set(zones)
        by_type: dict[str, set[str]] = {}
        with _aws_errors("ec2:DescribeInstanceTypeOfferings"):
            paginator = self._ec2(region).get_paginator("describe_instance_type_offerings")
            for page in paginator.paginate(LocationType="availability-zone"):
                for offering in page.get("InstanceTypeOfferings", ()):
                    zone = str(offering["Location"])
                    if zone in known:
                        by_type.setdefault(str(offering["InstanceType"]), set()).add(zone)
        return {name: tuple(sorted(z)) for name, z in sorted(by_type.items())}

    def spot_prices(self, region: str, zones: Iterable[str]) -> dict[tuple[str, str], float]:
        """Latest Linux/UNIX spot price per (type, zone), from the history at the clock's "now"."""
        known = set(zones)
        latest: dict[tuple[str, str], tuple[datetime, float]] = {}
        with _aws_errors("ec2:DescribeSpotPriceHistory"):
            paginator = self._ec2(region).get_paginator("describe_spot_price_history")
            pages = paginator.paginate(ProductDescriptions=_SPOT_PRODUCTS, StartTime=self._clock())
            for page in pages:
                for entry in page.get("SpotPriceHistory", ()):
                    zone = str(entry.get("AvailabilityZone", ""))
                    if zone not in known:
                        continue
                    key = (str(entry["InstanceType"]), zone)
                    price = float(entry["SpotPrice"])
                    stamp: datetime = entry.get("Timestamp") or datetime.min.replace(tzinfo=UTC)
                    seen = latest.get(key)
                    if price > 0 and (seen is None or stamp > seen[0]):
                        latest[key] = (stamp, price)
        return {key: value[1] for key, value in sorted(latest.items())}

    def ec2_facts(self, region: str) -> Ec2Facts:
        infos = self.instance_types(region)
        zones = self.zones(region)
        offerings = {name: z for name, z in self.offerings(region, zones).items() if name in infos}
        return Ec2Facts(region=region, infos=infos, zones=zones, offerings=offerings)

    # -- Pricing -------------------------------------------------------------------------------
    def on_demand_prices(self, region: str) -> dict[str, float]:
        filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}]
        filters += [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in _PRICING_FILTERS]
        items: list[str] = []
        with _aws_errors("pricing:GetProducts"):
            paginator = self._pricing().get_paginator("get_products")
            for page in paginator.paginate(ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1"):
                items.extend(page.get("PriceList", ()))
        try:
            return dict(sorted(parse_price_list(items).items()))
        except (ValueError, TypeError, AttributeError) as exc:
            raise CatalogUnavailable(f"pricing:GetProducts: unreadable PriceList: {exc}") from exc

    # -- CatalogSource -------------------------------------------------------------------------
    def load(self, region: str) -> CatalogData:
        facts = self.ec2_facts(region)
        on_demand = {k: v for k, v in self.on_demand_prices(region).items() if k in facts.infos}
        spot = {
            key: price
            for key, price in self.spot_prices(region, facts.zones).items()
            if key[0] in facts.infos and facts.infos[key[0]].supports_spot
        }
        return CatalogData(
            region=region,
            infos=facts.infos,
            zones=facts.zones,
            offerings=facts.offerings,
            on_demand_prices=on_demand,
            spot_prices=spot,
            spot_prices_estimated=False,
            provenance=(
                f"live AWS APIs for {region} at {self._clock().isoformat()}: EC2 DescribeInstanceTypes, "
                "DescribeInstanceTypeOfferings, DescribeAvailabilityZones, DescribeSpotPriceHistory; "
                "Pricing GetProducts (us-east-1 endpoint)"
            ),
        )
