"""Regenerate the bundled offline catalog snapshot (``make catalog``).

Runs the live adapter (``nodeflow.catalog.aws.AwsCatalogSource``) against moto's ``mock_aws()``,
which ships a copy of real DescribeInstanceTypes data and real us-east-1 per-AZ offerings, adds
on-demand prices from the repo copy of ``ec2-ondemand-prices-us-east-1.json`` (as published by
AWS on 2026-07-20) and the documented spot ESTIMATE of ``nodeflow.catalog.offline``, and writes
``functions/nodeflow/catalog/data/catalog-us-east-1.json.gz``. Types without an on-demand price
are left out. Same inputs, same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "functions"))

from nodeflow.catalog.model import CatalogData  # noqa: E402
from nodeflow.catalog.offline import DATA_DIR, encode_snapshot, estimate_spot_price, snapshot_path  # noqa: E402

PRICES_FILE = DATA_DIR / "ec2-ondemand-prices-us-east-1.json"
SUPPORTED_REGIONS = ("us-east-1",)


@dataclass(frozen=True)
class BuildReport:
    path: Path
    region: str
    types_described: int
    types_written: int
    dropped_unpriced: tuple[str, ...]
    size_bytes: int


def _prices(path: Path, region: str) -> tuple[dict[str, float], str]:
    document = json.loads(path.read_text())
    if document.get("region") != region:
        raise SystemExit(f"{path} holds prices for {document.get('region')!r}, not {region!r}")
    prices = {str(k): float(v) for k, v in document["prices"].items() if float(v) > 0}
    return prices, str(document.get("description", ""))


def build_catalog(region: str = "us-east-1", prices_path: Path = PRICES_FILE) -> tuple[CatalogData, tuple[str, ...]]:
    """The snapshot's ``CatalogData`` and every type EC2 (moto) described."""
    if region not in SUPPORTED_REGIONS:
        raise SystemExit(f"no on-demand price data for {region}; have: {', '.join(SUPPORTED_REGIONS)}")
    import boto3
    import moto
    from moto import mock_aws

    from nodeflow.catalog.aws import AwsCatalogSource

    prices, price_description = _prices(prices_path, region)
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_SESSION_TOKEN="testing")
    try:
        with mock_aws():
            ec2 = boto3.client("ec2", region_name=region)
            facts = AwsCatalogSource(ec2=ec2).ec2_facts(region)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    keep = sorted(n for n in facts.infos if n in prices and facts.offerings.get(n))
    infos = {n: facts.infos[n] for n in keep}
    offerings = {n: facts.offerings[n] for n in keep}
    spot = {
        (n, zone): estimate_spot_price(n, prices[n]) for n in keep if infos[n].supports_spot for zone in offerings[n]
    }
    provenance = (
        f"Instance types, zones and offerings: moto {moto.__version__}'s copy of EC2 DescribeInstanceTypes, "
        f"DescribeAvailabilityZones and DescribeInstanceTypeOfferings for {region}, read through "
        "nodeflow.catalog.aws.AwsCatalogSource. On-demand prices: ec2-ondemand-prices-us-east-1.json, "
        f"as published by AWS on 2026-07-20 ({price_description}). Spot prices: ESTIMATED as on-demand "
        "x a per-category factor (nodeflow.catalog.offline.estimate_spot_price), same in every zone."
    )
    data = CatalogData(
        region=region,
        infos=infos,
        zones=dict(facts.zones),
        offerings=offerings,
        on_demand_prices={n: prices[n] for n in keep},
        spot_prices=spot,
        spot_prices_estimated=True,
        provenance=provenance,
    )
    return data, tuple(facts.infos)


def build_snapshot(out: Path, region: str = "us-east-1", prices_path: Path = PRICES_FILE) -> BuildReport:
    """Build the snapshot of ``region`` and write it to ``out``."""
    data, described = build_catalog(region, prices_path)
    blob = encode_snapshot(data)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(blob)
    return BuildReport(
        path=out,
        region=region,
        types_described=len(described),
        types_written=len(data.infos),
        dropped_unpriced=tuple(n for n in described if n not in data.infos),
        size_bytes=len(blob),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--out", type=Path, default=None, help="default: the bundled snapshot path")
    args = parser.parse_args(argv)
    out = args.out or snapshot_path(args.region)
    report = build_snapshot(out, args.region)
    dropped = report.dropped_unpriced
    print(
        f"wrote {report.path} ({report.size_bytes:,} bytes): {report.types_written} instance types; "
        f"{len(dropped)} of {report.types_described} described types left out (no on-demand price or "
        f"no offering): {', '.join(dropped)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
