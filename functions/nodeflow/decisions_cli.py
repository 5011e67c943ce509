"""``python -m nodeflow decisions --stack NAME [--since 1h] [--pod NS/NAME] [--nodepool NAME] [-o json]``: read the
decision log of a deployed stack (its table is the stack's ``DecisionTableName`` output).

Prints the records newest first: time (UTC), kind, NodePools, pods, summary; ``-o json`` prints a JSON list of
records (``nodeflow.governance.decisions.Decision.to_json``: time, kind, id, run, nodePools, summary, podCount,
pods, policy, detail, version: the nodeflow release that wrote it). AWS access as the SDK finds it (AWS_PROFILE /
--profile, AWS_REGION / --region, AWS_ENDPOINT_URL for a local moto server such as the demo's).

``--since`` reads no further back than the log keeps records: the stack's ``DecisionLogTtlDays`` output
(``decisionLogTtlDays``; a stack without it: the default, 90 days); an earlier ``--since`` is clamped to it, and the
output says so. A value that is not a time or duration, is negative, out of range or in the future is an
``error:`` naming the flag (exit 2), before any AWS call.

Must not touch: what the records say (``nodeflow.governance.decisions``) or how they are stored
(``nodeflow.aws.decision_log``); AWS beyond reading the stack and the table.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

from nodeflow.aws.region import REGION_HELP
from nodeflow.cli_exits import EXIT_INPUT, EXIT_OK, EXIT_UNAVAILABLE
from nodeflow.timeflags import TimeFlagError, parse_since, parse_time

if TYPE_CHECKING:
    from nodeflow.governance.decisions import Decision

__all__ = ["DecisionLogStack", "DecisionsError", "add_parser", "find_table", "render", "run"]

EXIT_AWS = EXIT_UNAVAILABLE  # the stack or the decision log could not be read
OUTPUT_KEY = "DecisionTableName"
TTL_OUTPUT_KEY = "DecisionLogTtlDays"
DEFAULT_TTL_DAYS = 90  # infra/config.py's default decisionLogTtlDays
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
    p.add_argument(
        "--since",
        default="1h",
        help="how far back: a duration (30m, 1h, 2d, 90d) or an RFC 3339 time; at most the log's retention "
        "(decisionLogTtlDays, default 90 days)",
    )
    p.add_argument("--pod", metavar="NS/NAME", help="only the records naming this pod")
    p.add_argument("--nodepool", metavar="NAME", help="only the records naming this NodePool")
    p.add_argument("--limit", type=int, default=500, help="at most this many records (default 500)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument("--region", help=f"the stack's region ({REGION_HELP})")
    p.add_argument("--profile", help="the AWS profile (default: the AWS SDK's, e.g. AWS_PROFILE)")
    p.add_argument("--now", help=argparse.SUPPRESS)  # tests: the time to read up to (RFC 3339)


@dataclass(frozen=True)
class DecisionLogStack:
    """What a stack says about its decision log: the table, and the days it keeps a record (None: the stack does
    not say; deployed before ``DecisionLogTtlDays`` was an output)."""

    table: str
    ttl_days: int | None = None


def find_table(cloudformation: Any, stack: str, region: str) -> DecisionLogStack:
    """The decision log of ``stack``: its ``DecisionTableName`` output, else its table resource; and its
    ``DecisionLogTtlDays`` output."""
    from botocore.exceptions import ClientError

    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        raise DecisionsError(f"--stack: {stack!r} could not be described in {region}: {exc}") from None
    if not stacks:
        raise DecisionsError(f"--stack: {stack!r} was not found in {region}")
    outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in stacks[0].get("Outputs") or ()}
    raw_ttl = str(outputs.get(TTL_OUTPUT_KEY) or "").strip()
    ttl = int(raw_ttl) if raw_ttl.isdigit() and int(raw_ttl) > 0 else None
    if outputs.get(OUTPUT_KEY):
        return DecisionLogStack(str(outputs[OUTPUT_KEY]), ttl)
    resources = cloudformation.describe_stack_resources(StackName=stack).get("StackResources") or ()
    for r in resources:
        if r.get("ResourceType") == "AWS::DynamoDB::Table" and "Decisions" in str(r.get("LogicalResourceId", "")):
            return DecisionLogStack(str(r["PhysicalResourceId"]), ttl)
    raise DecisionsError(
        f"--stack: {stack!r} has no decision log (no output {OUTPUT_KEY}): is it a nodeflow stack deployed with "
        "this version (cdk deploy)?"
    )


def retention(log: DecisionLogStack, since: datetime, now: datetime) -> tuple[datetime, str]:
    """``since``, or the oldest time the log can hold a record from (``now`` less its TTL days) when that is
    later; with a note saying so ('' when not clamped)."""
    days = log.ttl_days or DEFAULT_TTL_DAYS
    oldest = now - timedelta(days=days)
    if since >= oldest:
        return since, ""
    source = f"stack output {TTL_OUTPUT_KEY}" if log.ttl_days else f"the default; the stack has no {TTL_OUTPUT_KEY}"
    return oldest, f"--since clamped to {_when(oldest)} UTC: the log keeps records {days} days ({source})"


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

    from nodeflow.aws.decision_log import read_decisions
    from nodeflow.aws.errors import AwsError
    from nodeflow.aws.region import NoRegion, aws_session
    from nodeflow.governance.decisions import DecisionError

    try:
        now = parse_time("--now", args.now) if args.now else datetime.now(UTC)
        since = parse_since("--since", args.since, now)
        if args.pod is not None and not _POD.match(args.pod):
            raise DecisionsError(f"--pod: {args.pod!r} is not NAMESPACE/NAME (e.g. shop/web-7d4b9c-x2k8q)")
        if args.nodepool is not None and not args.nodepool.strip():
            raise DecisionsError("--nodepool: empty")
        if args.limit < 1:
            raise DecisionsError(f"--limit: {args.limit} is not a positive number")
    except (DecisionsError, TimeFlagError) as exc:
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
        log = find_table(session.client("cloudformation"), args.stack, region)
        table = log.table
        since, clamped = retention(log, since, now)
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
        if clamped:
            print(f"note: {clamped}", file=err)
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
    if clamped:
        print(clamped, file=out)
    return EXIT_OK
