"""`python -m nodeflow plan --catalog aws` end to end, offline; and every command with --catalog aws (explain,
disrupt, governance) in the region the shell's AWS_REGION names, with no --region and no AWS_DEFAULT_REGION.

EC2 (DescribeInstanceTypes, offerings, zones, spot history) is answered by moto's ``mock_aws()``;
the Pricing API by botocore's Stubber. The CLI builds ``AwsCatalogSource(session=...)`` itself:
the tests wrap that constructor to add the stubbed pricing client and a fixed clock, and leave
everything else (the session, the EC2 calls, the catalog, the solver, the output) to the code
under test. A CLI run costs a few seconds of moto time, so each scenario runs once per module.
"""

from __future__ import annotations

import io
import json
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from nodeflow.catalog import aws as aws_catalog
from nodeflow.cli import EXIT_CATALOG, EXIT_INPUT, EXIT_OK, main

REGION = "eu-west-1"  # only AWS_REGION names it (boto3 alone reads AWS_DEFAULT_REGION, and --region is not given)
NOW = datetime(2026, 7, 20, 12, 0, tzinfo=UTC)

# Live on-demand prices the stubbed Pricing API answers with. m5.large is priced far below its
# published price (0.096 $/h, what the offline snapshot has) so only a live plan picks it at
# this price; m6g.large is the cheapest of all but excluded by the NodePool (arm64).
LIVE_PRICES = {
    "m5.large": "0.0123000000",
    "c5.large": "0.5000000000",
    "r5.large": "0.6000000000",
    "m5.xlarge": "0.9000000000",
    "m6g.large": "0.0010000000",
}
OFFLINE_M5_LARGE = 0.096

MANIFESTS = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5, r5, m6g]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: main
          image: example
          resources: {requests: {cpu: 500m, memory: 1Gi}}
"""


@dataclass(frozen=True)
class CliRun:
    code: int
    out: str
    err: str
    constructed: list[dict[str, Any]]  # the keyword arguments the CLI gave AwsCatalogSource


def price_item(instance_type: str, usd: str) -> str:
    """A GetProducts PriceList entry shaped like the real (aws_v1) ones."""
    term = f"SKU-{instance_type}.JRTCKXETXF"
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": REGION,
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                },
                "sku": f"SKU-{instance_type}",
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    term: {
                        "priceDimensions": {
                            f"{term}.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}},
                        },
                        "sku": f"SKU-{instance_type}",
                    }
                }
            },
        }
    )


def get_products_params() -> dict[str, Any]:
    """What the CLI must ask the Pricing API: on-demand Linux, shared tenancy, in REGION."""
    filters = [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": REGION},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
        {"Type": "TERM_MATCH", "Field": "productFamily", "Value": "Compute Instance"},
    ]
    return {"ServiceCode": "AmazonEC2", "Filters": filters, "FormatVersion": "aws_v1"}


@pytest.fixture(scope="module")
def aws_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            mp.setenv(key, "testing")
        for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
            mp.delenv(key, raising=False)
        mp.setenv("AWS_REGION", REGION)
        mp.setenv("AWS_CONFIG_FILE", "/nonexistent")  # no profile region either
        with mock_aws():
            yield


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("aws-plan") / "cluster.yaml"
    path.write_text(textwrap.dedent(MANIFESTS).lstrip())
    return path


def run_plan(manifests: Path, stub: Any, command: Sequence[str] = ("plan", "-o", "json")) -> CliRun:
    """Run ``plan --catalog aws -o json`` (or ``command``) with the Pricing client answered by ``stub(stubber)``."""
    pricing = boto3.client("pricing", region_name=aws_catalog.PRICING_REGION)
    constructed: list[dict[str, Any]] = []
    real_source = aws_catalog.AwsCatalogSource

    def source(**kwargs: Any) -> aws_catalog.AwsCatalogSource:
        constructed.append(kwargs)
        return real_source(**kwargs, pricing=pricing, clock=lambda: NOW)

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, Stubber(pricing) as stubber:
        mp.setattr(aws_catalog, "AwsCatalogSource", source)
        stub(stubber)
        code = main([*command, "-f", str(manifests), "--catalog", "aws"], out, err)
        stubber.assert_no_pending_responses()
    return CliRun(code, out.getvalue(), err.getvalue(), constructed)


def live_prices(stubber: Stubber) -> None:
    items = [price_item(name, usd) for name, usd in LIVE_PRICES.items()]
    # Two pages: the CLI must follow NextToken to see every price.
    stubber.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": items[:2], "NextToken": "page-2"},
        get_products_params(),
    )
    stubber.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": items[2:]},
        {**get_products_params(), "NextToken": "page-2"},
    )


@pytest.fixture(scope="module")
def live(aws_env: None, manifests: Path) -> CliRun:
    return run_plan(manifests, live_prices)


@pytest.fixture(scope="module")
def pricing_down(aws_env: None, manifests: Path) -> CliRun:
    def stub(stubber: Stubber) -> None:
        stubber.add_client_error(
            "get_products",
            service_error_code="AccessDeniedException",
            service_message="User is not authorized to perform: pricing:GetProducts",
            http_status_code=403,
        )

    return run_plan(manifests, stub)


# -- live prices -----------------------------------------------------------------------------------


def test_plan_is_priced_with_the_live_on_demand_prices(live: CliRun) -> None:
    assert live.code == EXIT_OK, live.err
    assert live.err == ""
    plan = json.loads(live.out)
    (claim,) = plan["nodeClaims"]
    assert claim["nodePool"] == "general"
    assert len(claim["pods"]) == 3
    assert all(pod.startswith("default/web-") for pod in claim["pods"])
    assert claim["capacityType"] == "on-demand"
    # m5.large at the stubbed price, not the published 0.096 the offline snapshot carries.
    assert claim["instanceTypes"][0] == "m5.large"
    assert claim["pricePerHour"] == 0.0123 != OFFLINE_M5_LARGE
    assert plan["totalPricePerHour"] == 0.0123
    assert plan["unschedulable"] == []


def test_only_live_priced_types_allowed_by_the_pool_are_options(live: CliRun) -> None:
    (claim,) = json.loads(live.out)["nodeClaims"]
    options = claim["instanceTypes"]
    # On-demand offerings exist only for types the Pricing API priced; m6g.large is arm64.
    assert set(options) <= set(LIVE_PRICES) - {"m6g.large"}
    prices = [float(LIVE_PRICES[name]) for name in options]
    assert prices == sorted(prices)
    # The zones come from moto's real per-AZ offerings of the region.
    assert claim["zones"]
    assert all(zone.startswith(REGION) for zone in claim["zones"])


def test_the_cli_builds_the_source_from_a_session_in_the_region(live: CliRun) -> None:
    (kwargs,) = live.constructed
    assert set(kwargs) == {"session"}
    assert kwargs["session"].region_name == REGION


# -- Pricing API down ------------------------------------------------------------------------------


def test_pricing_failure_exits_1_with_the_reason_and_no_plan(pricing_down: CliRun) -> None:
    assert pricing_down.code == EXIT_CATALOG == 1
    assert pricing_down.out == ""
    lines = pricing_down.err.strip().splitlines()
    assert len(lines) == 1, pricing_down.err
    assert lines[0].startswith("error: the aws catalog could not be loaded: ")
    assert "pricing:GetProducts: AccessDeniedException" in lines[0]
    assert "not authorized" in lines[0]
    assert "Traceback" not in pricing_down.err


# -- the region: AWS_REGION alone -----------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("explain", "default/web-6bdbcf556-qgkg4", "-o", "json"),
        ("disrupt", "--dry-run", "-o", "json"),
        ("governance", "-o", "json"),
    ],
)
def test_every_catalog_command_takes_the_region_from_aws_region(
    aws_env: None, manifests: Path, command: tuple[str, ...]
) -> None:
    run = run_plan(manifests, live_prices, command)
    assert run.code == EXIT_OK, run.err
    (kwargs,) = run.constructed
    assert kwargs["session"].region_name == REGION
    assert "Traceback" not in run.err


def test_no_region_anywhere_is_bad_input_naming_where_it_is_looked_for(
    aws_env: None, manifests: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_REGION")
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", "-f", str(manifests), "--catalog", "aws"], out, err) == EXIT_INPUT
    assert err.getvalue().startswith("error: --region: no region given")
    assert "AWS_REGION, AWS_DEFAULT_REGION" in err.getvalue()
    # offline, the catalog's region does not depend on the shell: us-east-1 unless --region says otherwise
    assert main(["plan", "-f", str(manifests), "-o", "json"], out, err) == EXIT_OK
