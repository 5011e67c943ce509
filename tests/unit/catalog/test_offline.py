"""The bundled offline snapshot."""

from __future__ import annotations

import gzip
import json

import pytest

from nodeflow.catalog.model import CatalogData
from nodeflow.catalog.offline import (
    DEFAULT_SPOT_PRICE_FACTOR,
    OfflineCatalog,
    data_from_snapshot,
    encode_snapshot,
    estimate_spot_price,
    instance_category,
    load_offline,
    snapshot_document,
    snapshot_path,
)
from nodeflow.catalog.source import CatalogSource, RegionNotAvailable


@pytest.fixture(scope="module")
def data() -> CatalogData:
    return load_offline("us-east-1")


def test_snapshot_has_priced_types(data: CatalogData) -> None:
    assert len(data.infos) >= 600
    assert set(data.on_demand_prices) == set(data.infos)
    assert data.on_demand_prices["m5.large"] == pytest.approx(0.096)
    assert data.region == "us-east-1"
    assert data.zones["us-east-1a"].startswith("use1-az")


def test_snapshot_has_gpu_and_neuron_types(data: CatalogData) -> None:
    gpu_types = [name for name, info in data.infos.items() if info.gpus]
    assert len(gpu_types) >= 20
    assert {"p4d.24xlarge", "g5.xlarge"} <= set(gpu_types)
    assert data.infos["inf2.xlarge"].neuron_devices


def test_spot_is_an_estimate_below_on_demand(data: CatalogData) -> None:
    assert data.spot_prices_estimated
    assert "ESTIMATED" in data.provenance
    assert "as published by AWS on 2026-07-20" in data.provenance
    assert data.spot_prices
    for (name, zone), price in data.spot_prices.items():
        assert data.infos[name].supports_spot
        assert zone in data.offerings[name]
        assert 0 < price < data.on_demand_prices[name]


def test_types_without_spot_support_have_no_spot_prices(data: CatalogData) -> None:
    no_spot = [name for name, info in data.infos.items() if not info.supports_spot]
    assert no_spot
    spot_types = {name for name, _ in data.spot_prices}
    assert not spot_types & set(no_spot)


def test_spot_estimate_is_the_documented_factor() -> None:
    assert instance_category("inf2.xlarge") == "inf"
    assert instance_category("u-6tb1.metal") == "u"
    assert estimate_spot_price("m5.large", 0.096) == pytest.approx(0.096 * 0.35)
    assert estimate_spot_price("zz9.large", 1.0) == DEFAULT_SPOT_PRICE_FACTOR


def test_unknown_region_is_a_clear_error() -> None:
    with pytest.raises(RegionNotAvailable, match=r"'eu-west-1'.*available: us-east-1"):
        OfflineCatalog().load("eu-west-1")
    assert OfflineCatalog().regions() == ("us-east-1",)


def test_offline_catalog_is_a_catalog_source(data: CatalogData) -> None:
    source = OfflineCatalog()
    assert isinstance(source, CatalogSource)
    assert source.load("us-east-1") is data  # cached per process


def test_snapshot_round_trips(data: CatalogData) -> None:
    again = data_from_snapshot(snapshot_document(data))
    assert again.infos == data.infos
    assert again.offerings == data.offerings
    assert again.spot_prices == data.spot_prices
    assert again.on_demand_prices == data.on_demand_prices
    assert encode_snapshot(again) == encode_snapshot(data)


def test_snapshot_file_is_compact_sorted_json() -> None:
    raw = snapshot_path("us-east-1").read_bytes()
    assert len(raw) < 1_500_000
    assert raw[4:8] == b"\x00\x00\x00\x00"  # gzip mtime 0
    text = gzip.decompress(raw).decode()
    document = json.loads(text)
    assert text == json.dumps(document, sort_keys=True, separators=(",", ":"))
