"""``python -m nodeflow decisions --stack NAME [--since 1h] [--pod NS/NAME] [--nodepool NAME] [-o json]``: read the
decision log of a deployed stack (its table is the stack's ``DecisionTableName`` output).

Prints the records newest first: time (UTC), kind, NodePools, pods, summary; ``-o json`` prints a JSON list of
records (``nodeflow.governance.decisions.Decision.to_json``: time, kind, id, run, nodePools, summary, podCount,
pods, policy, detail). AWS access as the SDK finds it (AWS_PROFILE / --profile, AWS_REGION / --region,
AWS_ENDPOINT_URL for a local moto server such as the demo's).
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

from nodeflow.aws.region import REGION_HELP

if TYPE_CHECKING:
    from nodeflow.governance.decisions import Decision

__all__ = ["DecisionsError", "add_parser", "find_table", "parse_since", "render", "run"]

EXIT_OK, EXIT_AWS, EXIT_INPUT = 0, 1, 2
OUTPUT_KEY = "DecisionTableName"
_DURATION = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_POD = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class DecisionsError(ValueError):
    """Bad input or a stack without a decision log (the message names the option and the value)."""


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "decisions",
        help="read the decision log of a deployed stack: why NodeClaims were made and nodes removed",
        description="Read the decision log (provisioning and disruption decisions, blocked candidates, policy "
        "denials) of a deployed nodeflow stack, newest first.",
    )
    p.add_argument("--stack", required=True, help="the CloudFormation stack, e.g. Nodeflow-my-cluster")
    p.add_argument("--since", default="1h", help="how far back: a duration (30m, 1h, 2d, 90d) or an RFC 3339 time")
    p.add_argument("--pod", metavar="NS/NAME", help="only the records naming this pod")
    p.add_argument("--nodepool", metavar="NAME", help="only the records naming this NodePool")
    p.add_argument("--limit", type=int, default=500, help="at most this many records (default 500)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument("--region", help=f"the stack's region ({REGION_HELP})")
    p.add_argument("--profile", help="the AWS profile (default: the AWS SDK's, e.g. AWS_PROFILE)")
    p.add_argument("--now", help=argparse.SUPPRESS)  # tests: the time to read up to (RFC 3339)


def parse_since(text: str, now: datetime) -> datetime:
    """``30m``, ``1h``, ``2d``, ``1h30m``, ``90d`` before ``now``, or an RFC 3339 time."""
    raw = text.strip()
    if raw and _DURATION.sub("", raw) == "" and _DURATION.search(raw):
        seconds = sum(int(n) * _UNITS[u] for n, u in _DURATION.findall(raw))
        if seconds <= 0:
            raise DecisionsError(f"--since: {text!r} is not a duration like 30m, 1h, 2d (it must be positive)")
        return now - timedelta(seconds=seconds)
    if raw[:1].isdigit() and "T" in raw:
        try:
            at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    raise DecisionsError(f"--since: {text!r} is not a duration like 30m, 1h, 2d (or an RFC 3339 time)")


def find_table(cloudformation: Any, stack: str, region: str) -> str:
    """The decision log table of ``stack``: its ``DecisionTableName`` output, else its table resource."""
    from botocore.exceptions import ClientError

    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        raise DecisionsError(f"--stack: {stack!r} could not be described in {region}: {exc}") from None
    if not stacks:
        raise DecisionsError(f"--stack: {stack!r} was not found in {region}")
    outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in stacks[0].get("Outputs") or ()}
    if outputs.get(OUTPUT_KEY):
        return str(outputs[OUTPUT_KEY])
    resources = cloudformation.describe_stack_resources(StackName=stack).get("StackResources") or ()
    for r in resources:
        if r.get("ResourceType") == "AWS::DynamoDB::Table" and "Decisions" in str(r.get("LogicalResourceId", "")):
            return str(r["PhysicalResourceId"])
    raise DecisionsError(
        f"--stack: {stack!r} has no decision log (no output {OUTPUT_KEY}): is it a nodeflow stack deployed with "
        "this version (cdk deploy)?"
    )


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def render(records: list[Decision], out: TextIO) -> None:
    """The readable table, newest first (as given)."""
    rows = [(_when(r.at), r.kind, ",".join(r.node_pools) or "-", str(r.pod_count), r.summary) for r in records]
    head = ("TIME (UTC)", "KIND", "NODEPOOL", "PODS", "SUMMARY")
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head[:4])]
    widths[2] = min(widths[2], 24)
    fmt = "{{:<{}}}  {{:<{}}}  {{:<{}}}  {{:>{}}}  {{}}".format(*widths)
    print(fmt.format(*head), file=out)
    for record, row in zip(records, rows, strict=True):
        pools = row[2] if len(row[2]) <= widths[2] else row[2][: widths[2] - 3] + "..."
        print(fmt.format(row[0], row[1], pools, row[3], row[4]), file=out)
        # the policy checks that decided it, one a line under the summary (a run's are its records', shown there)
        for reason in record.policy if record.kind != "provisioning" else ():
            print(" " * (sum(widths) + 8) + f"policy: {reason}", file=out)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from botocore.exceptions import BotoCoreError

    from nodeflow.aws.decisions import read_decisions
    from nodeflow.aws.errors import AwsError
    from nodeflow.aws.region import NoRegion, aws_session
    from nodeflow.governance.decisions import DecisionError

    try:
        now = parse_since(args.now, datetime.now(UTC)) if args.now else datetime.now(UTC)
        since = parse_since(args.since, now)
        if args.pod is not None and not _POD.match(args.pod):
            raise DecisionsError(f"--pod: {args.pod!r} is not NAMESPACE/NAME (e.g. shop/web-7d4b9c-x2k8q)")
        if args.nodepool is not None and not args.nodepool.strip():
            raise DecisionsError("--nodepool: empty")
        if args.limit < 1:
            raise DecisionsError(f"--limit: {args.limit} is not a positive number")
    except DecisionsError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INPUT
    try:
        session = aws_session(args.region, args.profile)
    except NoRegion as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INPUT
    except BotoCoreError as exc:
        print(f"error: --profile: {exc}", file=err)
        return EXIT_INPUT
    region = session.region_name
    try:
        table = find_table(session.client("cloudformation"), args.stack, region)
        records = read_decisions(
            session.client("dynamodb"),
            table,
            since=since,
            now=now,
            pod=args.pod,
            nodepool=args.nodepool,
            limit=args.limit,
        )
    except DecisionsError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INPUT
    except (AwsError, BotoCoreError, DecisionError) as exc:
        print(f"error: the decision log could not be read: {exc}", file=err)
        return EXIT_AWS
    if args.output == "json":
        json.dump([r.to_json() for r in records], out, indent=2)
        print(file=out)
        return EXIT_OK
    render(records, out)
    what = " ".join(
        x for x in (f"pod {args.pod}" if args.pod else "", f"NodePool {args.nodepool}" if args.nodepool else "") if x
    )
    print(
        f"{len(records)} record{'s' if len(records) != 1 else ''}{' for ' + what if what else ''} "
        f"since {_when(since)} UTC (table {table}, region {region})",
        file=out,
    )
    return EXIT_OK
