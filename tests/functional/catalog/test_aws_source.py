"""The live catalog adapter: EC2 against moto, Pricing against botocore's Stubber."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from moto import mock_aws

from nodeflow.catalog.aws import AwsCatalogSource, Ec2Facts, parse_network_performance, parse_price_list
from nodeflow.catalog.model import CatalogData
from nodeflow.catalog.source import (
    AccessDenied,
    CatalogSource,
    CatalogUnavailable,
    Throttled,
)

REGION = "us-east-1"
NOW = datetime(2026, 7, 20, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def aws_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            mp.setenv(key, "testing")
        mp.delenv("AWS_PROFILE", raising=False)
        with mock_aws():
            yield


@pytest.fixture(scope="module")
def ec2(aws_env: None) -> Any:
    return boto3.client("ec2", region_name=REGION)


@pytest.fixture(scope="module")
def facts(ec2: Any) -> Ec2Facts:
    return AwsCatalogSource(ec2=ec2, clock=lambda: NOW).ec2_facts(REGION)


def pricing_client() -> Any:
    return boto3.client(
        "pricing",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def price_item(instance_type: str, usd: str, sku: str) -> str:
    """A GetProducts PriceList entry shaped like the real (aws_v1) ones."""
    term = f"{sku}.JRTCKXETXF"
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": REGION,
                    "location": "US East (N. Virginia)",
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                    "licenseModel": "No License required",
                    "servicecode": "AmazonEC2",
                    "usagetype": f"BoxUsage:{instance_type}",
                    "operation": "RunInstances",
                },
                "sku": sku,
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    term: {
                        "priceDimensions": {
                            f"{term}.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "endRange": "Inf",
                                "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                                "appliesTo": [],
                                "rateCode": f"{term}.6YS6EN2CT7",
                                "beginRange": "0",
                                "pricePerUnit": {"USD": usd},
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2026-07-01T00:00:00Z",
                        "offerTermCode": "JRTCKXETXF",
                        "termAttributes": {},
                    }
                },
                "Reserved": {},
            },
            "version": "20260720000000",
            "publicationDate": "2026-07-20T00:00:00Z",
        }
    )


def expected_get_products(next_token: str | None = None) -> dict[str, Any]:
    filters = [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": REGION},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
        {"Type": "TERM_MATCH", "Field": "productFamily", "Value": "Compute Instance"},
    ]
    params: dict[str, Any] = {"ServiceCode": "AmazonEC2", "Filters": filters, "FormatVersion": "aws_v1"}
    if next_token:
        params["NextToken"] = next_token
    return params


def stub_two_pages(stubber: Stubber) -> None:
    stubber.add_response(
        "get_products",
        {
            "FormatVersion": "aws_v1",
            "PriceList": [
                price_item("m5.large", "0.0960000000", "SKU1"),
                price_item("g5.xlarge", "1.0060000000", "SKU2"),
            ],
            "NextToken": "page-2",
        },
        expected_get_products(),
    )
    stubber.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": [price_item("m6g.large", "0.0770000000", "SKU3")]},
        expected_get_products("page-2"),
    )


# -- EC2 against moto ----------------------------------------------------------------------------
def test_instance_types_come_from_describe_instance_types(facts: Ec2Facts) -> None:
    assert len(facts.infos) > 1000
    m5 = facts.infos["m5.large"]
    assert (m5.vcpus, m5.memory_mib, m5.architecture, m5.cpu_manufacturer) == (2, 8192, "amd64", "intel")
    assert (m5.max_enis, m5.ipv4_per_eni, m5.hypervisor, m5.bare_metal) == (3, 10, "nitro", False)
    assert m5.network_bandwidth_mbps == 750
    assert m5.ebs_bandwidth_mbps == 650
    assert m5.ebs_max_bandwidth_mbps == 4750
    assert m5.supports_spot
    assert m5.supports_windows

    graviton = facts.infos["m6g.large"]
    assert (graviton.architecture, graviton.cpu_manufacturer, graviton.supported_os) == (
        "arm64",
        "aws",
        ("linux",),
    )

    p4d = facts.infos["p4d.24xlarge"]
    assert [(g.name, g.manufacturer, g.count, g.memory_mib) for g in p4d.gpus] == [("A100", "NVIDIA", 8, 40960)]
    assert p4d.efa_max_interfaces == 4
    assert p4d.local_storage_gb == 8000
    assert p4d.local_nvme
    assert p4d.network_bandwidth_mbps == 400_000  # four 100 Gbps cards

    inf2 = facts.infos["inf2.xlarge"]
    assert [(d.name, d.manufacturer, d.count, d.memory_mib, d.cores) for d in inf2.neuron_devices] == [
        ("Inferentia2", "AWS", 1, 32768, 2)
    ]
    assert inf2.accelerators == ()  # Neuron devices are not double-counted as inference accelerators

    metal = facts.infos["m7g.metal"]
    assert metal.bare_metal
    assert metal.hypervisor == ""

    t2 = facts.infos["t2.micro"]  # i386 + x86_64
    assert t2.architecture == "amd64"
    assert t2.supported_architectures == ("i386", "x86_64")
    assert t2.burstable


def test_zones_carry_zone_ids(facts: Ec2Facts) -> None:
    assert facts.zones["us-east-1a"].startswith("use1-az")
    assert list(facts.zones) == sorted(facts.zones)
    assert len(set(facts.zones.values())) == len(facts.zones)


def test_offerings_are_per_zone_and_sorted(facts: Ec2Facts) -> None:
    m5 = facts.offerings["m5.large"]
    assert list(m5) == sorted(m5)
    assert set(m5) <= set(facts.zones)
    assert 2 <= len(m5) <= len(facts.zones)
    assert set(facts.offerings) <= set(facts.infos)


def test_spot_prices_keep_the_latest_per_type_and_zone(ec2: Any, facts: Ec2Facts) -> None:
    spot = AwsCatalogSource(ec2=ec2, clock=lambda: NOW).spot_prices(REGION, facts.zones)
    assert spot, "moto returns a spot price history"
    assert all(zone in facts.zones for _, zone in spot)
    assert all(price > 0 for price in spot.values())
    assert ("m5.large", "us-east-1a") in spot


def test_load_combines_ec2_spot_and_pricing(ec2: Any) -> None:
    pricing = pricing_client()
    with Stubber(pricing) as stubber:
        stub_two_pages(stubber)
        source = AwsCatalogSource(ec2=ec2, pricing=pricing, clock=lambda: NOW)
        assert isinstance(source, CatalogSource)
        data = source.load(REGION)
        stubber.assert_no_pending_responses()
    assert isinstance(data, CatalogData)
    assert data.on_demand_prices == {"g5.xlarge": 1.006, "m5.large": 0.096, "m6g.large": 0.077}
    assert not data.spot_prices_estimated
    assert "live AWS" in data.provenance
    assert all(data.infos[name].supports_spot for name, _ in data.spot_prices)
    assert len(data.infos) > 1000


def test_ec2_client_for_another_region_is_refused(ec2: Any) -> None:
    with pytest.raises(ValueError, match="bound to 'us-east-1'"):
        AwsCatalogSource(ec2=ec2).ec2_facts("eu-west-1")


# -- Pricing with the Stubber ---------------------------------------------------------------------
def test_on_demand_prices_follow_next_token() -> None:
    pricing = pricing_client()
    with Stubber(pricing) as stubber:
        stub_two_pages(stubber)
        prices = AwsCatalogSource(ec2=object(), pricing=pricing).on_demand_prices(REGION)
        stubber.assert_no_pending_responses()
    assert prices == {"g5.xlarge": 1.006, "m5.large": 0.096, "m6g.large": 0.077}


def test_parse_price_list_skips_unpriced_and_keeps_lowest() -> None:
    items = [
        price_item("m5.large", "0.0960000000", "A"),
        price_item("m5.large", "0.1000000000", "B"),
        price_item("x.free", "0.0000000000", "C"),
        json.dumps({"product": {"attributes": {}}, "terms": {}}),
    ]
    assert parse_price_list(items) == {"m5.large": 0.096}


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        ("ThrottlingException", 400, Throttled),
        ("AccessDeniedException", 403, AccessDenied),
        ("InternalErrorException", 500, CatalogUnavailable),
    ],
)
def test_pricing_errors_are_typed(code: str, status: int, error: type[Exception]) -> None:
    pricing = pricing_client()
    with Stubber(pricing) as stubber:
        stubber.add_client_error("get_products", service_error_code=code, http_status_code=status)
        with pytest.raises(error, match=f"pricing:GetProducts: {code}"):
            AwsCatalogSource(ec2=object(), pricing=pricing).on_demand_prices(REGION)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("RequestLimitExceeded", Throttled),
        ("UnauthorizedOperation", AccessDenied),
        ("InvalidParameterValue", CatalogUnavailable),
    ],
)
def test_ec2_errors_are_typed(code: str, error: type[Exception]) -> None:
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    with Stubber(client) as stubber:
        stubber.add_client_error("describe_instance_types", service_error_code=code)
        with pytest.raises(error, match="ec2:DescribeInstanceTypes"):
            AwsCatalogSource(ec2=client).instance_types(REGION)


def test_unreachable_endpoint_is_catalog_unavailable() -> None:
    client = boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1, read_timeout=1),
    )
    with pytest.raises(CatalogUnavailable, match="DescribeAvailabilityZones: EndpointConnectionError"):
        AwsCatalogSource(ec2=client).zones(REGION)


@pytest.mark.parametrize(
    ("text", "mbps"),
    [
        ("25 Gigabit", 25_000),
        ("Up to 12.5 Gigabit", 12_500),
        ("4x 100 Gigabit", 400_000),
        ("High", 0),
        ("", 0),
    ],
)
def test_network_performance_fallback(text: str, mbps: int) -> None:
    assert parse_network_performance(text) == mbps
