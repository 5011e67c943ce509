"""Command line: ``python -m nodeflow plan|explain|disrupt -f PATH [-f PATH ...]`` and ``install-manifests``.

``plan`` reads Karpenter v1 NodePools and EC2NodeClasses with workloads, nodes and
NodeClaims from YAML, and prints the NodeClaims nodeflow would launch with their price.
``explain NAMESPACE/NAME`` says, per NodePool, where that pending pod (or each pending pod of that workload) would
go or exactly why not (``nodeflow.explain_cli``).
``disrupt --dry-run`` says which nodes would be disrupted now, why, what replaces them and the saving.
``install-manifests --stack NAME`` renders the in-cluster manifests from a deployed stack's outputs.
``governance -f PATH | --cluster`` prints the governance record (``nodeflow.governance_cli``).
``decisions --stack NAME`` reads the stack's decision log (``nodeflow.decisions_cli``).
``doctor --stack NAME`` checks the cluster and account before install and nodeflow after (``nodeflow.doctor_cli``;
its exit code 1 means a check failed).
Exit codes (``nodeflow.cli_exits``): 0 done, 2 bad input (manifests, region, unknown pod, stack), 1 the catalog (or
the stack) could not be had.

Must not touch: what a plan, an explanation or a disruption decides (``nodeflow.plan``, ``nodeflow.scheduling.solver``,
``nodeflow.disruption.round``); AWS beyond loading the catalog and reading a stack.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from nodeflow import __version__, decisions_cli, doctor_cli
from nodeflow import governance_cli as governance_command
from nodeflow.api.quantity import format_milli
from nodeflow.aws.region import CATALOG_REGION_HELP, REGION_HELP
from nodeflow.cli_exits import (
    EXIT_CODES,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    load_catalog_or_exit,
    load_manifests_or_exit,
)

if TYPE_CHECKING:
    from datetime import datetime

    from nodeflow.api.manifests import Manifests
    from nodeflow.catalog.model import CatalogData
    from nodeflow.disruption.model import Command, Snapshot
from nodeflow.scheduling.types import SchedulingInput, SchedulingResult, group_unschedulable, pod_list, reason_lines

# EXIT_CATALOG: the name the catalog commands' code had before ``cli_exits`` (the same code as the other commands').
EXIT_CATALOG = EXIT_UNAVAILABLE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nodeflow", description="nodeflow: Karpenter v1 on Lambda")
    parser.add_argument("--version", action="version", version=f"nodeflow {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser(
        "plan",
        help="show the nodes nodeflow would launch for pending pods, offline",
        description="Plan NodeClaims for the pending pods in Kubernetes manifests (no cluster needed).",
        epilog=EXIT_CODES,
    )
    _common(plan)
    plan.add_argument("-o", "--output", choices=("table", "json"), default="table")
    plan.add_argument("--now", help=_NOW_HELP)
    explain = commands.add_parser(
        "explain",
        help="say where a pending pod (or a workload's pending pods) would go, or why not, per NodePool",
        description="Explain the plan for a pending pod, or for each pending pod of a workload (pods with the "
        "same explanation together), NodePool by NodePool.",
        epilog=EXIT_CODES,
    )
    _common(explain)
    explain.add_argument(
        "pod",
        metavar="NAMESPACE/NAME",
        help="a pending pod (shop/web-7d4b9c-x2k8q) or a workload: its pending pods (shop/web: a Deployment, "
        "ReplicaSet, StatefulSet, Job or DaemonSet; NAMESPACE/KIND/NAME picks a kind, e.g. shop/sts/db)",
    )
    explain.add_argument("-o", "--output", choices=("text", "json"), default="text")
    explain.add_argument("--now", help=_NOW_HELP)
    disrupt = commands.add_parser(
        "disrupt",
        help="show what nodeflow would disrupt now (empty, drifted, underutilized, expired nodes), offline",
        description=DISRUPT_HELP,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(disrupt)
    disrupt.add_argument(
        "--dry-run", action="store_true", required=True, help="only say what would be done (required: nothing is done)"
    )
    disrupt.add_argument("--now", help="the time to decide at, RFC 3339 (default: the current time)")
    disrupt.add_argument(
        "--spot-to-spot", action="store_true", help="allow spot-to-spot consolidation (Karpenter's feature gate)"
    )
    disrupt.add_argument(
        "--replace-bar-k",
        type=_replace_bar_k,
        default=None,
        metavar="K",
        help="consolidation replaces only when the move scores at least 1/K on Balanced's savings-per-disruption "
        "score (nodeflow's replace bar; default 4.5; 0: no bar, as Karpenter)",
    )
    disrupt.add_argument(
        "--node-repair",
        action="store_true",
        help="also list the nodes node repair would replace now (Karpenter's NodeRepair feature gate)",
    )
    disrupt.add_argument("-o", "--output", choices=("text", "json"), default="text")
    governance = commands.add_parser(
        "governance",
        help="the governance record: pools, classes, cost, who may use what, protections, nodeflow's permissions",
        description=governance_command.HELP,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    governance_command.add_arguments(governance)
    install = commands.add_parser(
        "install-manifests",
        help="render the in-cluster manifests (kustomization) from a deployed stack's outputs",
        description="Write a kustomization directory with the CRDs, namespace, RBAC and agent, every value taken "
        "from the stack's outputs; then `kubectl apply -k DIR`.",
    )
    install.add_argument("--stack", required=True, help="the CloudFormation stack, e.g. Nodeflow-my-cluster")
    install.add_argument("--region", help=f"the stack's region ({REGION_HELP})")
    install.add_argument(
        "-o", "--output-dir", dest="out_dir", help="the directory to write (default: cdk.out/install/STACK)"
    )
    decisions_cli.add_parser(commands)  # ``decisions --stack NAME``: nodeflow/decisions_cli.py
    doctor_cli.add_parser(commands)  # ``doctor --stack NAME``: nodeflow/doctor_cli.py
    return parser


DISRUPT_HELP = """\
Decide one round of voluntary disruption for the nodes, NodeClaims, bound pods, NodePools,
EC2NodeClasses and PodDisruptionBudgets in Kubernetes manifests, in Karpenter's order:
emptiness, drift, multi-node consolidation, single-node consolidation (at most one command),
plus the nodes past expireAfter (forceful, not limited by budgets). NodeflowPolicies in the
manifests apply at --now: a pause window with disruption: true blocks voluntary disruption of its
NodePools' nodes (each listed DisruptionBlocked with the window; expiration goes on), and
replacements keep to the NodePools the pods' namespaces may use and under the $/hour ceilings
and group limits (the candidates counted as freed).

JSON output (-o json):
  {"now": RFC 3339,
   "command": null | {"reason": "Empty"|"Drifted"|"Underutilized", "method": str,
       "decision": "delete"|"replace", "candidates": [node name],
       "replacements": [NodeClaim plan as in `plan -o json`],
       "moves": [{"pod": "ns/name", "node": name} | {"pod": "ns/name", "replacement": index}],
       "candidatesPricePerHour": float (the candidates', what the command removes),
       "replacementsPricePerHour": float (the replacements', what it adds), "savedPerHour": float (the difference),
       "clusterPricePerHourBefore": float, "clusterPricePerHourAfter": float (the whole cluster's: every node not
           going away and every NodeClaim launching, as `governance` and the $/hour ceilings count it),
       "balanced": [{"nodepool": name, "score": float, "threshold": 0.5, "k": 2, "approved": true,
           "savingsFraction": float, "disruptionFraction": float, "savedPerHour": float,
           "disruptionCost": float, "nodePoolPricePerHour": float, "nodePoolDisruptionCost": float}]
           (only on moves of NodePools with consolidationPolicy Balanced: each one's score)},
   "expirations": [{"node": name, "nodeClaim": name, "expiredAt": RFC 3339}],
   only when a static NodePool has more NodeClaims than spec.replicas (nodeflow.disruption.static):
   "scaleDowns": [{"nodePool": name, "nodeClaim": name, "node": name|null,
       "why": "not launched"|"empty"|"lowest disruption cost"}],
   with --node-repair also (nodeflow.disruption.repair):
   "repairs": [{"node": name, "nodeClaim": name, "nodePool": name|null, "condition": type,
       "status": "False"|"Unknown", "since": RFC 3339|null, "tolerationSeconds": int}],
   "repairsBlocked": [{"node": name, "nodeClaim": name, "nodePool": name|null, "condition": type,
       "event": "NodeRepairBlocked", "message": str}],
   "blocked": [{"node": name, "event": "DisruptionBlocked"|"Unconsolidatable", "message": str}]}
"""


_NOW_HELP = "the time NodeflowPolicy pause windows are judged at, RFC 3339 (default: the current time)"


def _now_arg(args: argparse.Namespace, err: TextIO) -> datetime | None:
    """``--now`` (the current UTC time when not given), or None after printing why it is not a usable time."""
    from datetime import UTC, datetime

    from nodeflow.timeflags import TimeFlagError, parse_time

    if not args.now:
        return datetime.now(UTC)
    try:
        return parse_time("--now", args.now)
    except TimeFlagError as exc:
        print(f"error: {exc}", file=err)
        return None


def _replace_bar_k(value: str) -> float:
    """``--replace-bar-k``: a finite number, 0 or more."""
    try:
        k = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number (0: no bar), got {value!r}") from None
    if not 0 <= k < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number, 0 or more, got {value!r}")
    return k


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        dest="paths",
        action="append",
        required=True,
        metavar="PATH",
        help="a multi-document YAML file or a directory of them (repeatable)",
    )
    parser.add_argument("--region", help=CATALOG_REGION_HELP)
    parser.add_argument(
        "--catalog",
        choices=("offline", "aws"),
        default="offline",
        help="offline: the bundled snapshot (default); aws: DescribeInstanceTypes and the Pricing API",
    )
    parser.add_argument(
        "--ignore-preferences",
        action="store_true",
        help="drop preferred affinities, ScheduleAnyway spreads and PreferNoSchedule taints up front "
        "(Karpenter's preference policy Ignore)",
    )
    parser.add_argument(
        "--min-values-policy",
        choices=("Strict", "BestEffort"),
        default="Strict",
        help="Strict: a NodeClaim must keep minValues distinct values (default); BestEffort: relax when it cannot",
    )


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = _parser().parse_args(argv)
    if args.command == "governance":
        return governance_command.run(args, out, err)
    if args.command == "install-manifests":
        return _install(args, out, err)
    if args.command == "decisions":
        return decisions_cli.run(args, out, err)
    if args.command == "doctor":
        return doctor_cli.run(args, out, err)
    return _run(args, out, err)


def _install(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pathlib import Path

    from botocore.exceptions import BotoCoreError

    from nodeflow.aws.region import NoRegion, aws_session
    from nodeflow.install import HMAC_SECRET, NAMESPACE, InstallError, read_stack, render

    try:
        session = aws_session(args.region)
    except (NoRegion, BotoCoreError) as exc:  # BotoCoreError: AWS_PROFILE names no profile
        print(f"error: {exc}", file=err)
        return EXIT_INPUT
    region = session.region_name
    out_dir = Path(args.out_dir or Path("cdk.out") / "install" / args.stack)
    try:
        outputs = read_stack(session.client("cloudformation"), args.stack, region)
        kustomization = render(outputs, out_dir)
    except InstallError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INPUT
    except BotoCoreError as exc:
        print(f"error: the stack could not be read: {exc}", file=err)
        return EXIT_UNAVAILABLE
    print(f"wrote {kustomization.parent}/ (cluster {outputs.cluster_name}, auth {outputs.auth_mode})", file=out)
    if outputs.hmac_secret_arn:
        print(
            f"hmac mode: create the agent's secret first: kubectl -n {NAMESPACE} create secret generic "
            f'{HMAC_SECRET} --from-literal=secret="$(aws secretsmanager get-secret-value --secret-id '
            f'{outputs.hmac_secret_arn} --query SecretString --output text)"',
            file=out,
        )
    print(f"install: kubectl apply -k {kustomization.parent}", file=out)
    return EXIT_OK


def write_plan_json(result: SchedulingResult, warnings: list[str], out: TextIO) -> None:
    """``plan -o json``: the plan's JSON (2-space indents, as ``json.dump(..., indent=2)``) and its warnings, then
    a newline."""
    from nodeflow.jsontext import dumps_indented

    out.write(dumps_indented({**result.to_json(), "warnings": warnings}))
    out.write("\n")


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from nodeflow.cluster import ClusterState
    from nodeflow.plan import build_input, plan_warnings, with_static

    manifests = load_manifests_or_exit(args.paths, err, "plan")
    if isinstance(manifests, int):
        return manifests
    catalog = load_catalog_or_exit(args.catalog, args.region, err)
    if isinstance(catalog, int):
        return catalog

    if args.command == "disrupt":
        return _disrupt(manifests, catalog, args, out, err)
    policy = "Ignore" if args.ignore_preferences else "Respect"
    now = _now_arg(args, err)
    if now is None:
        return EXIT_INPUT
    state = ClusterState.from_manifests(manifests)
    inp = build_input(state, catalog, policy, args.min_values_policy, now=now)
    if args.command == "explain":
        return _explain(manifests, inp, args, out, err)
    from nodeflow.scheduling.solver import solve

    result = with_static(solve(inp), inp)
    warnings = plan_warnings(state, inp, catalog.region)
    if args.output == "json":
        write_plan_json(result, warnings, out)
    else:
        for warning in warnings:
            print(f"warning: {warning}", file=err)
        render_table(result, out, spot_estimated=catalog.spot_prices_estimated)
    return EXIT_OK


def _explain(manifests: Manifests, inp: SchedulingInput, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from nodeflow.explain_cli import ExplainError, explain

    try:
        explain(args.pod, manifests, inp, args.output, out)
    except ExplainError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INPUT
    return EXIT_OK


def _disrupt(manifests: Manifests, catalog: CatalogData, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import dataclasses

    from nodeflow.cluster import ClusterState
    from nodeflow.disruption.model import Settings, Snapshot
    from nodeflow.disruption.repair import RepairResult, decide_repairs
    from nodeflow.disruption.round import decide

    found = _now_arg(args, err)
    if found is None:
        return EXIT_INPUT
    now = found
    snapshot = Snapshot(state=ClusterState.from_manifests(manifests), pdbs=tuple(manifests.pdbs))
    settings = Settings(
        spot_to_spot_consolidation=args.spot_to_spot,
        preference_policy="Ignore" if args.ignore_preferences else "Respect",
        min_values_policy=args.min_values_policy,
    )
    if args.replace_bar_k is not None:
        settings = dataclasses.replace(settings, replace_bar_k=args.replace_bar_k)
    result = decide(snapshot, catalog, now, settings=settings)
    repairs = RepairResult()
    if args.node_repair:
        repairs = decide_repairs(snapshot.state.nodes, snapshot.state.node_claims, now)
    command = result.command
    cluster = _cluster_prices(snapshot, catalog, command) if command is not None else None
    if args.output == "json":
        gated = repairs.to_json() if args.node_repair else {}
        doc = {"now": now.isoformat(), **result.to_json(), **gated}
        if cluster is not None:
            doc["command"].update(
                clusterPricePerHourBefore=round(cluster[0], 6), clusterPricePerHourAfter=round(cluster[1], 6)
            )
        json.dump(doc, out, indent=2)
        out.write("\n")
        return EXIT_OK
    if command is None:
        print("nothing to disrupt now", file=out)
    else:
        print(
            f"{command.decision.upper()} {', '.join(command.candidates)} ({command.reason.value}, {command.method})",
            file=out,
        )
        for i, r in enumerate(command.replacements):
            print(
                f"  replacement {i}: {r.nodepool} {r.instance_types[0]} (+{len(r.instance_types) - 1} options) "
                f"{r.capacity_type} {','.join(r.zones)} ${r.price:.4f}/hour",
                file=out,
            )
        for move in command.moves:
            where = move.node if move.node is not None else f"replacement {move.replacement}"
            print(f"  move {move.pod} -> {where}", file=out)
        assert cluster is not None
        print(
            f"  cluster $/hour: {cluster[0]:.4f} -> {cluster[1]:.4f} ({'saves' if command.saved >= 0 else 'adds'} "
            f"{abs(command.saved):.4f}: candidates {command.price_before:.4f}, replacements {command.price_after:.4f})",
            file=out,
        )
        for score in command.scores:  # consolidationPolicy Balanced
            print(f"  Balanced NodePool {score.nodepool}: {score.describe()}", file=out)
    for e in result.expirations:
        print(f"EXPIRED {e.node} (NodeClaim {e.node_claim}, at {e.expired_at.isoformat()}): terminate", file=out)
    for s in result.scale_downs:
        where = f"node {s.node}" if s.node else "no node yet"
        print(f"SCALE DOWN {s.node_claim} (static NodePool {s.node_pool}, {where}, {s.why}): terminate", file=out)
    for b in result.blocked:
        print(f"{b.kind.value} {b.node}: {b.message}", file=out)
    for rp in repairs.repairs:
        u = rp.unhealthy
        since = u.since.isoformat() if u.since is not None else "unknown"
        print(
            f"REPAIR {rp.node} (NodeClaim {rp.node_claim}): {u.condition}={u.status} since {since}: replace forcefully",
            file=out,
        )
    for rb in repairs.blocked:
        print(f"NodeRepairBlocked {rb.node}: {rb.message}", file=out)
    return EXIT_OK


def _cluster_prices(snapshot: Snapshot, catalog: CatalogData, command: Command) -> tuple[float, float]:
    """The cluster's $/hour before and after ``command``: what it spends now (``governance.spend.cluster_spend``:
    every node not going away and every NodeClaim launching, as ``governance`` and the $/hour ceilings count it),
    then less the candidates and plus the replacements, priced as the round priced them (so the two differ by
    exactly the command's saving)."""
    from nodeflow.governance.spend import cluster_spend

    before = cluster_spend(snapshot.state, catalog)[0].cluster
    return before, before - command.saved


def render_table(result: SchedulingResult, out: TextIO, spot_estimated: bool = False) -> None:
    """The human view: one row per NodeClaim, a total, placements, then unschedulable pods."""
    headers = ("NODEPOOL", "INSTANCE TYPE", "OPTIONS", "CAPACITY", "ZONES", "PODS", "CPU", "MEMORY", "$/HOUR")
    rows = [
        (
            f"{nc.nodepool} (static)" if nc.static else nc.nodepool,
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
    if static := sum(nc.static for nc in result.node_claims):
        print(f"static: {static} of them keep static NodePools at spec.replicas (no pods needed)", file=out)
    if spot_estimated and any(nc.capacity_type == "spot" for nc in result.node_claims):
        print("note: offline spot prices are estimates (on-demand x a per-family factor)", file=out)
    for placement in result.existing:
        kind = "NodeClaim (launching)" if placement.in_flight else "node"
        print(f"existing {kind} {placement.name}: +{len(placement.pods)} pod(s)", file=out)
    if result.unschedulable:
        print(f"UNSCHEDULABLE: {len(result.unschedulable)} pod(s)", file=out)
        for group in group_unschedulable(result.unschedulable):  # pods with the same reasons: said once
            print(f"  {pod_list(group.pods)}", file=out)
            for line in reason_lines(group.reasons):
                print(f"    {line}", file=out)
