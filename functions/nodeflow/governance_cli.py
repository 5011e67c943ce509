"""``python -m nodeflow governance``: the governance record (``nodeflow.governance.record``) of manifests (``-f``)
or of a cluster (``--cluster``, through a kubeconfig), as Markdown for a review or JSON for tooling.

Exit codes as the other commands (``nodeflow.cli_exits``): 0 done, 2 bad input (manifests, region, --now,
kubeconfig), 1 the catalog or the cluster could not be had.

Must not touch: what the record holds (``nodeflow.governance.record``); the cluster beyond one read-only snapshot.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from nodeflow.aws.region import CATALOG_REGION_HELP
from nodeflow.cli_exits import EXIT_INPUT, EXIT_OK, EXIT_UNAVAILABLE, load_catalog_or_exit, load_manifests_or_exit

if TYPE_CHECKING:
    from nodeflow.cluster import ClusterState

__all__ = ["HELP", "add_arguments", "run"]


HELP = """\
The governance record: NodePools (requirements, labels, taints, startup taints, limits, weight, budgets,
expireAfter, terminationGracePeriod, consolidation), EC2NodeClasses (IAM role, AMIs, subnets, security groups,
tags, instance metadata findings), the NodeClaims and nodes observed with their $/hour by NodePool and capacity
type, which namespaces may use which NodePools and accelerators under the NodeflowPolicies (with the ceilings,
group limits and pause windows), the pods protected by karpenter.sh/do-not-disrupt or PodDisruptionBudgets, and
the permissions nodeflow itself holds (IAM per Lambda role, Kubernetes RBAC; read from infra/ of this checkout).

Read from manifests (-f, as `plan`) or from a cluster (--cluster, with --kubeconfig). -o json gives the same
record as data: keys documented in nodeflow/governance/record.py.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        dest="paths",
        action="append",
        metavar="PATH",
        help="a multi-document YAML file or a directory of them (repeatable); or use --cluster",
    )
    parser.add_argument("--cluster", action="store_true", help="read the cluster the kubeconfig points at instead")
    parser.add_argument(
        "--kubeconfig", help="with --cluster: the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)"
    )
    parser.add_argument("--context", help="with --cluster: the kubeconfig context (default: its current one)")
    parser.add_argument("--region", help=CATALOG_REGION_HELP)
    parser.add_argument(
        "--catalog",
        choices=("offline", "aws"),
        default="offline",
        help="offline: the bundled snapshot (default); aws: DescribeInstanceTypes and the Pricing API",
    )
    parser.add_argument("--now", help="the time pause windows are judged at, RFC 3339 (default: the current time)")
    parser.add_argument("-o", "--output", choices=("markdown", "json"), default="markdown")


def _now(text: str | None) -> datetime:
    """``--now``, or the current time (raises ``TimeFlagError`` naming the flag and the value)."""
    from nodeflow.timeflags import parse_time

    return parse_time("--now", text) if text else datetime.now(UTC)


def _from_files(args: argparse.Namespace, err: TextIO) -> ClusterState | None:
    from nodeflow.cluster import ClusterState

    manifests = load_manifests_or_exit(args.paths, err, "record")
    return None if isinstance(manifests, int) else ClusterState.from_manifests(manifests)


def _from_cluster(args: argparse.Namespace, err: TextIO) -> tuple[ClusterState | None, int]:
    from nodeflow.kube.connection import api_client_from_kubeconfig
    from nodeflow.kube.errors import KubeError
    from nodeflow.kube.snapshot import take_snapshot

    path = (
        args.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    )
    if not os.path.isfile(path):
        print(f"error: --kubeconfig: {path} does not exist", file=err)
        return None, EXIT_INPUT
    try:
        api = api_client_from_kubeconfig(path, context=args.context)
    except Exception as exc:  # the kubernetes client's ConfigException and friends: a bad kubeconfig
        print(f"error: --kubeconfig {path}: {exc}", file=err)
        return None, EXIT_INPUT
    try:
        snapshot = take_snapshot(api)  # NodeflowPolicies included (an invalid one as its fail-safe stand-in)
    except (KubeError, OSError) as exc:
        print(f"error: the cluster could not be read: {exc}", file=err)
        return None, EXIT_UNAVAILABLE
    finally:
        api.close()  # type: ignore[no-untyped-call]
    for bad in snapshot.invalid:
        where = f"{bad.namespace}/{bad.name}" if bad.namespace else bad.name
        effect = "counted as its fail-safe stand-in" if bad.kind == "NodeflowPolicy" else "left out"
        print(f"warning: {bad.kind} {where} is invalid ({effect}): {'; '.join(bad.errors)}", file=err)
    return snapshot.state, EXIT_OK


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:

    from nodeflow.governance.permissions import load_permissions
    from nodeflow.governance.record import build_record, render_markdown

    if bool(args.paths) == bool(args.cluster):
        print("error: give manifests with -f PATH, or --cluster (with --kubeconfig), not both", file=err)
        return EXIT_INPUT
    if not args.cluster and (args.kubeconfig or args.context):
        print("error: --kubeconfig and --context go with --cluster", file=err)
        return EXIT_INPUT
    try:
        now = _now(args.now)
    except ValueError as exc:  # TimeFlagError
        print(f"error: {exc}", file=err)
        return EXIT_INPUT
    source: dict[str, Any]
    if args.cluster:
        state, code = _from_cluster(args, err)
        source = {"cluster": args.context or "current context"}
    else:
        state, code = _from_files(args, err), EXIT_INPUT
        source = {"files": list(args.paths)}
    if state is None:
        return code
    catalog = load_catalog_or_exit(args.catalog, args.region, err)
    if isinstance(catalog, int):
        return catalog
    record = build_record(state, catalog, load_permissions(), now, source)
    if args.output == "json":
        json.dump(record, out, indent=2)
        out.write("\n")
    else:
        out.write(render_markdown(record))
    return EXIT_OK
