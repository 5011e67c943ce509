"""Command line: ``python -m nodeflow plan -f PATH [-f PATH ...]``.

``plan`` reads Karpenter v1 NodePools and EC2NodeClasses with workloads, nodes and
NodeClaims from YAML, and prints the NodeClaims nodeflow would launch with their price.
Exit codes: 0 plan printed, 2 bad input (manifests, region), 1 the catalog could not be had.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from nodeflow.api.quantity import format_milli
from nodeflow.scheduling.types import SchedulingResult

EXIT_OK = 0
EXIT_CATALOG = 1
EXIT_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nodeflow", description="nodeflow: Karpenter v1 on Lambda")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser(
        "plan",
        help="show the nodes nodeflow would launch for pending pods, offline",
        description="Plan NodeClaims for the pending pods in Kubernetes manifests (no cluster needed).",
    )
    plan.add_argument(
        "-f",
        "--filename",
        dest="paths",
        action="append",
        required=True,
        metavar="PATH",
        help="a multi-document YAML file or a directory of them (repeatable)",
    )
    plan.add_argument("--region", default="us-east-1", help="AWS region of the catalog (default us-east-1)")
    plan.add_argument(
        "--catalog",
        choices=("offline", "aws"),
        default="offline",
        help="offline: the bundled snapshot (default); aws: DescribeInstanceTypes and the Pricing API",
    )
    plan.add_argument("-o", "--output", choices=("table", "json"), default="table")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = _parser().parse_args(argv)
    if args.command == "plan":
        return _plan(args, out, err)
    return EXIT_INPUT  # pragma: no cover - argparse enforces the command


def _plan(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from nodeflow.api.manifests import ManifestError, load_manifests
    from nodeflow.catalog.source import CatalogError, RegionNotAvailable
    from nodeflow.plan import ClusterState, plan

    try:
        manifests = load_manifests(args.paths)
    except ManifestError as exc:
        print(f"error: {len(exc.problems)} problem(s) in the manifests; no plan made:", file=err)
        for problem in exc.problems:
            print(f"  {problem}", file=err)
        return EXIT_INPUT
    try:
        if args.catalog == "aws":
            import boto3

            from nodeflow.catalog.aws import AwsCatalogSource

            catalog = AwsCatalogSource(session=boto3.Session(region_name=args.region)).load(args.region)
        else:
            from nodeflow.catalog.offline import load_offline

            catalog = load_offline(args.region)
    except RegionNotAvailable as exc:
        print(f"error: --region: {exc}", file=err)
        return EXIT_INPUT
    except CatalogError as exc:
        print(f"error: the {args.catalog} catalog could not be loaded: {exc}", file=err)
        return EXIT_CATALOG

    result = plan(ClusterState.from_manifests(manifests), catalog)
    if args.output == "json":
        json.dump(result.to_json(), out, indent=2)
        out.write("\n")
    else:
        render_table(result, out, spot_estimated=catalog.spot_prices_estimated)
    return EXIT_OK


def render_table(result: SchedulingResult, out: TextIO, spot_estimated: bool = False) -> None:
    """The human view: one row per NodeClaim, a total, placements, then unschedulable pods."""
    headers = ("NODEPOOL", "INSTANCE TYPE", "OPTIONS", "CAPACITY", "ZONES", "PODS", "CPU", "MEMORY", "$/HOUR")
    rows = [
        (
            nc.nodepool,
            nc.instance_types[0],
            f"+{len(nc.instance_types) - 1}",
            nc.capacity_type,
            ",".join(nc.zones),
            str(len(nc.pods)),
            format_milli(nc.requests.get("cpu", 0), "cpu"),
            format_milli(nc.requests.get("memory", 0), "memory"),
            f"{nc.price:.4f}",
        )
        for nc in result.node_claims
    ]
    if rows:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        line = "  ".join(f"{{:<{w}}}" for w in widths)
        print(line.format(*headers).rstrip(), file=out)
        for row in rows:
            print(line.format(*row).rstrip(), file=out)
    pods = sum(len(nc.pods) for nc in result.node_claims)
    print(
        f"TOTAL: {len(result.node_claims)} new node(s) for {pods} pod(s), ${result.total_price:.4f}/hour",
        file=out,
    )
    if spot_estimated and any(nc.capacity_type == "spot" for nc in result.node_claims):
        print("note: offline spot prices are estimates (on-demand x a per-family factor)", file=out)
    for placement in result.existing:
        kind = "NodeClaim (launching)" if placement.in_flight else "node"
        print(f"existing {kind} {placement.name}: +{len(placement.pods)} pod(s)", file=out)
    if result.unschedulable:
        print(f"UNSCHEDULABLE: {len(result.unschedulable)} pod(s)", file=out)
        for item in result.unschedulable:
            print(f"  {item.pod}", file=out)
            for pool, reason in sorted(item.reasons.items()):
                print(f"    {pool}: {reason}", file=out)
