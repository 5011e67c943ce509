"""Offline catalog: the bundled snapshot ``data/catalog-<region>.json.gz``, behind ``CatalogSource``.

Where the snapshot comes from (``make catalog`` runs ``tools/gen_catalog.py``):

- instance type facts, zones and per-zone offerings: the SAME live adapter
  (``nodeflow.catalog.aws.AwsCatalogSource``) run against moto's ``mock_aws()``, which ships a copy
  of real DescribeInstanceTypes data and real us-east-1 per-AZ offerings;
- on-demand prices: ``data/ec2-ondemand-prices-us-east-1.json`` (Linux, shared tenancy, USD/h,
  as published by AWS on 2026-07-20). Types without an on-demand price are left out;
- spot prices: an ESTIMATE, because moto's spot price history is a constant. See
  ``estimate_spot_price`` below: the one place the estimate is defined.

Spot price estimate
-------------------
``spot = on-demand x SPOT_PRICE_FACTORS[category]`` (``DEFAULT_SPOT_PRICE_FACTOR`` for categories
not listed), rounded to 6 decimals, the same in every zone the type is offered in, and only for
types whose SupportedUsageClasses include "spot". The factors are deliberately round numbers in
the range AWS advertises for spot savings (typically 60-70 % off on-demand for current general
purpose, compute and memory families; smaller discounts for accelerated families, which are in
higher demand). They are not measurements: they exist so offline planning ranks spot below
on-demand and ranks families against each other plausibly. Everything built from this snapshot
carries ``spot_prices_estimated=True``; live data (``AwsCatalogSource``) never does.

The snapshot is compact JSON (sorted keys, no whitespace) gzipped with mtime 0, so regenerating
with the same inputs gives identical bytes. Loading it takes a few tens of milliseconds and is
cached per (directory, region) for the life of the process.

Must not touch: how the data is resolved (``instancetypes``); AWS (``make catalog`` refreshes the snapshot, not this).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Mapping
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from nodeflow.catalog.model import CatalogData, Device, InstanceTypeInfo
from nodeflow.catalog.source import CatalogUnavailable, RegionNotAvailable

__all__ = [
    "DATA_DIR",
    "DEFAULT_SPOT_PRICE_FACTOR",
    "SNAPSHOT_FORMAT",
    "SPOT_PRICE_FACTORS",
    "OfflineCatalog",
    "data_from_snapshot",
    "encode_snapshot",
    "estimate_spot_price",
    "instance_category",
    "load_offline",
    "snapshot_document",
    "snapshot_path",
]

DATA_DIR = Path(__file__).resolve().parent / "data"
SNAPSHOT_FORMAT = 1
_SNAPSHOT_NAME = re.compile(r"^catalog-(?P<region>[a-z0-9-]+)\.json\.gz$")

# Spot price as a fraction of on-demand, per instance category (see the module docstring).
DEFAULT_SPOT_PRICE_FACTOR = 0.40
SPOT_PRICE_FACTORS: Mapping[str, float] = {
    "a": 0.35,
    "c": 0.35,
    "m": 0.35,
    "r": 0.33,
    "t": 0.32,
    "z": 0.35,
    "x": 0.33,
    "u": 0.40,
    "i": 0.32,
    "im": 0.32,
    "is": 0.32,
    "d": 0.30,
    "h": 0.30,
    "hpc": 0.45,
    "g": 0.45,
    "gr": 0.45,
    "p": 0.55,
    "inf": 0.45,
    "trn": 0.55,
    "dl": 0.55,
    "f": 0.50,
    "vt": 0.45,
}
_CATEGORY = re.compile(r"^([a-z]+)")


def instance_category(instance_type: str) -> str:
    """The letters an instance type name starts with ("m6i.large" -> "m", "inf2.xlarge" -> "inf")."""
    match = _CATEGORY.match(instance_type)
    return match.group(1) if match else ""


def estimate_spot_price(instance_type: str, on_demand: float) -> float:
    """THE offline spot estimate: on-demand x the category's factor (deterministic, zone-independent)."""
    factor = SPOT_PRICE_FACTORS.get(instance_category(instance_type), DEFAULT_SPOT_PRICE_FACTOR)
    return round(on_demand * factor, 6)


# -- (de)serialisation -------------------------------------------------------------------------
_INFO_FIELDS = tuple(f.name for f in fields(InstanceTypeInfo))
_INFO_DEFAULTS = {f.name: f.default for f in fields(InstanceTypeInfo) if f.default is not MISSING}
_DEVICE_FIELDS = ("gpus", "accelerators", "neuron_devices")
_TUPLE_FIELDS = ("supported_architectures", "usage_classes", "supported_os")


def _encode_info(info: InstanceTypeInfo) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _INFO_FIELDS:
        value = getattr(info, name)
        if name == "name" or (name in _INFO_DEFAULTS and value == _INFO_DEFAULTS[name]):
            continue
        if name in _DEVICE_FIELDS:
            value = [[d.name, d.manufacturer, d.count, d.memory_mib, d.cores] for d in value]
        elif name in _TUPLE_FIELDS:
            value = list(value)
        out[name] = value
    return out


def _decode_info(name: str, raw: dict[str, Any]) -> InstanceTypeInfo:
    for key in _DEVICE_FIELDS:
        if key in raw:
            raw[key] = tuple(Device(*d) for d in raw[key])
    for key in _TUPLE_FIELDS:
        if key in raw:
            raw[key] = tuple(raw[key])
    return InstanceTypeInfo(name=name, **raw)


def snapshot_document(data: CatalogData) -> dict[str, Any]:
    """``CatalogData`` -> the JSON document stored in a snapshot."""
    spot: dict[str, dict[str, float]] = {}
    for (name, zone), price in data.spot_prices.items():
        spot.setdefault(name, {})[zone] = price
    return {
        "format": SNAPSHOT_FORMAT,
        "region": data.region,
        "provenance": data.provenance,
        "spot_prices_estimated": data.spot_prices_estimated,
        "zones": dict(data.zones),
        "instance_types": {name: _encode_info(info) for name, info in data.infos.items()},
        "offerings": {name: list(zones) for name, zones in data.offerings.items()},
        "on_demand_prices": dict(data.on_demand_prices),
        "spot_prices": spot,
    }


def encode_snapshot(data: CatalogData) -> bytes:
    """Deterministic snapshot bytes: sorted compact JSON, gzip with mtime 0 and no file name."""
    text = json.dumps(snapshot_document(data), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return gzip.compress(text.encode("ascii"), compresslevel=9, mtime=0)


def data_from_snapshot(document: Mapping[str, Any]) -> CatalogData:
    """The JSON document of a snapshot -> ``CatalogData``."""
    if document.get("format") != SNAPSHOT_FORMAT:
        raise CatalogUnavailable(f"unsupported catalog snapshot format {document.get('format')!r}")
    infos = {name: _decode_info(name, raw) for name, raw in document["instance_types"].items()}
    spot = {
        (name, zone): float(price)
        for name, by_zone in document["spot_prices"].items()
        for zone, price in by_zone.items()
    }
    return CatalogData(
        region=str(document["region"]),
        infos=infos,
        zones=dict(document["zones"]),
        offerings={name: tuple(zones) for name, zones in document["offerings"].items()},
        on_demand_prices={name: float(p) for name, p in document["on_demand_prices"].items()},
        spot_prices=spot,
        spot_prices_estimated=bool(document["spot_prices_estimated"]),
        provenance=str(document["provenance"]),
    )


def snapshot_path(region: str, data_dir: Path = DATA_DIR) -> Path:
    return data_dir / f"catalog-{region}.json.gz"


_CACHE: dict[tuple[Path, str], CatalogData] = {}


class OfflineCatalog:
    """``CatalogSource`` reading bundled snapshots (default: the package's ``data`` directory)."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self.data_dir = (data_dir or DATA_DIR).resolve()

    def regions(self) -> tuple[str, ...]:
        """Regions there is a snapshot for."""
        if not self.data_dir.is_dir():
            return ()
        found = (_SNAPSHOT_NAME.match(p.name) for p in self.data_dir.iterdir())
        return tuple(sorted(m.group("region") for m in found if m))

    def load(self, region: str) -> CatalogData:
        key = (self.data_dir, region)
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        path = snapshot_path(region, self.data_dir)
        if not path.is_file():
            raise RegionNotAvailable(region, self.regions())
        try:
            document = json.loads(gzip.decompress(path.read_bytes()))
            data = data_from_snapshot(document)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CatalogUnavailable(f"catalog snapshot {path.name} is unreadable: {exc}") from exc
        if data.region != region:
            raise CatalogUnavailable(f"catalog snapshot {path.name} holds region {data.region!r}")
        _CACHE[key] = data
        return data


def load_offline(region: str = "us-east-1") -> CatalogData:
    """The bundled snapshot of ``region`` (cached)."""
    return OfflineCatalog().load(region)
