"""``python -m nodeflow doctor --stack NAME [--kubeconfig PATH] [-o json]``: is the cluster and account ready for
nodeflow, and does the installed nodeflow work? Every check of ``nodeflow.doctor.checks.CHECKS`` says OK, WARN or
FAIL and, when not OK, the one thing to do.

The stack (``--stack``, in ``--region``) names the cluster (output ``ClusterName``), its webhook, node role, queues
and state machines. The cluster is reached through ``--kubeconfig PATH`` (its current context, or ``--context``),
else ``$KUBECONFIG``, else as EKS: eks:DescribeCluster for the stack's cluster and a token from the AWS
credentials (what the Lambdas do; the identity needs an access entry or aws-auth mapping that may read).

Exit codes: 0 every check OK or WARN, 1 at least one FAIL, 2 bad input (unknown stack, no region, a kubeconfig that
does not exist, a cluster that cannot be reached), said on stderr before any check.

JSON (``-o json``), a stable shape:
  {"stack": str, "cluster": str, "region": str, "checkedAt": RFC 3339,
   "checks": [{"id": str, "phase": "before-install"|"after-install", "title": str,
               "status": "OK"|"WARN"|"FAIL", "detail": str, "action": str|null}],
   "summary": {"status": "OK"|"WARN"|"FAIL", "ok": int, "warn": int, "fail": int}}
``checks`` always lists every check, in the order of ``CHECKS``; ``action`` is null exactly when the status is OK.

Must not touch: what a check decides (``nodeflow.doctor.checks``) or how its facts are gathered (``aws_facts``,
``kube_facts``).
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from nodeflow.aws.region import REGION_HELP
from nodeflow.cli_exits import EXIT_INPUT, EXIT_OK, EXIT_UNAVAILABLE

if TYPE_CHECKING:
    import boto3

    from nodeflow.doctor.aws_facts import Clients, StackResources
    from nodeflow.doctor.checks import Report
    from nodeflow.kube.client import KubeClient

__all__ = ["EXIT_FAIL", "EXIT_INPUT", "EXIT_OK", "add_parser", "render", "run"]

EXIT_FAIL = EXIT_UNAVAILABLE  # a check failed
PHASES = {
    "before-install": "Before install: is the cluster and account ready",
    "after-install": "After install: does it work",
}


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "doctor",
        help="check a cluster and account before installing nodeflow, and the installed nodeflow after",
        description="Check whether the cluster and account are ready for nodeflow (before install) and whether the "
        "installed nodeflow works (after): each check says OK, WARN or FAIL and, when not OK, the one thing to do. "
        "Exit codes: 0 no FAIL, 1 a check failed, 2 bad input (unknown stack, unreachable cluster).",
    )
    p.add_argument("--stack", required=True, help="the nodeflow CloudFormation stack, e.g. Nodeflow-my-cluster")
    p.add_argument(
        "--kubeconfig",
        help="the kubeconfig of the cluster (default: $KUBECONFIG, else the stack's EKS cluster with a token from "
        "the AWS credentials)",
    )
    p.add_argument("--context", help="with a kubeconfig: the context to use (default: its current one)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument("--region", help=f"the stack's region ({REGION_HELP})")
    p.add_argument("--profile", help="the AWS profile (default: the AWS SDK's, e.g. AWS_PROFILE)")
    p.add_argument("--now", help=argparse.SUPPRESS)  # tests: the time to judge at (RFC 3339)


class _InputError(ValueError):
    pass


def _clients(session: boto3.Session) -> Clients:
    cache: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in cache:
            cache[service] = session.client(service)
        return cache[service]

    return client


def _kube(args: argparse.Namespace, stack: StackResources, session: boto3.Session) -> tuple[KubeClient, str]:
    """The cluster's client, and how it was found (for messages)."""
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.connection import api_client_for_eks, api_client_from_kubeconfig

    env_path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0].strip()
    path = args.kubeconfig or env_path
    if path:
        flag = "--kubeconfig" if args.kubeconfig else "KUBECONFIG"
        if not os.path.exists(path):
            raise _InputError(f"{flag}: {path} does not exist")
        try:
            api = api_client_from_kubeconfig(path, context=args.context)
        except Exception as exc:  # the kubernetes client's ConfigException and friends: a bad kubeconfig
            raise _InputError(f"{flag} {path}: {exc}") from None
        return KubeClient(api), f"{flag} {path}" + (f", context {args.context}" if args.context else "")
    from botocore.exceptions import BotoCoreError, ClientError

    name = stack.info.cluster_name
    try:
        api = api_client_for_eks(name, session=session, region=stack.info.region)
    except (ClientError, BotoCoreError) as exc:
        raise _InputError(
            f"cluster {name!r} (output ClusterName of stack {stack.info.name}) could not be described in "
            f"{stack.info.region}: {exc}; give --kubeconfig to reach it otherwise"
        ) from None
    return KubeClient(api), f"EKS cluster {name} at {api.configuration.host}"


def run(
    args: argparse.Namespace, out: TextIO, err: TextIO, *, clients: Clients | None = None, now: datetime | None = None
) -> int:
    """The command; ``clients`` replaces the AWS SDK session's clients (tests)."""
    from botocore.exceptions import BotoCoreError

    from nodeflow.aws.region import NoRegion, aws_session
    from nodeflow.doctor.aws_facts import DoctorInputError, read_stack
    from nodeflow.doctor.kube_facts import ClusterUnreachable, reachable
    from nodeflow.timeflags import TimeFlagError, parse_time

    try:
        now = now or (parse_time("--now", args.now) if args.now else datetime.now(UTC))
        session = aws_session(args.region, args.profile)
    except (TimeFlagError, NoRegion) as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INPUT
    except BotoCoreError as exc:  # an unknown profile
        print(f"error: --profile: {exc}", file=err)
        return EXIT_INPUT
    aws = clients or _clients(session)
    try:
        stack = read_stack(aws, args.stack, session.region_name)
        kube, where = _kube(args, stack, session)
        reachable(kube, where)
    except (DoctorInputError, _InputError, ClusterUnreachable) as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INPUT
    except BotoCoreError as exc:  # no credentials, no endpoint
        print(f"error: AWS could not be called: {exc}", file=err)
        return EXIT_INPUT
    try:
        report = _examine(aws, kube, stack, now)
    finally:
        kube.api_client.close()  # type: ignore[no-untyped-call]
    if args.output == "json":
        json.dump(report.to_json(), out, indent=2)
        out.write("\n")
    else:
        render(report, out, where)
    return report.exit_code


def _examine(aws: Clients, kube: KubeClient, stack: StackResources, now: datetime) -> Report:
    """Read every fact, then judge them (``nodeflow.doctor.checks.evaluate``)."""
    from nodeflow.doctor import aws_facts, kube_facts
    from nodeflow.doctor.checks import ON_DEMAND_VCPU_QUOTA, SPOT_VCPU_QUOTA, Facts, Unreadable, evaluate

    raw_classes = kube_facts.node_classes(kube)
    classes = raw_classes if isinstance(raw_classes, Unreadable) else aws_facts.node_classes(aws, raw_classes, stack)
    facts = Facts(
        stack=stack.info,
        cluster=aws_facts.cluster(aws, stack),
        lambdas=aws_facts.lambdas(aws, stack),
        account_concurrency=aws_facts.account_concurrency(aws),
        node_classes=classes,
        node_role=aws_facts.node_role(aws, stack, () if isinstance(classes, Unreadable) else classes),
        spot_slr=aws_facts.spot_slr(aws),
        node_pools=kube_facts.node_pools(kube),
        on_demand_quota=aws_facts.vcpu_quota(aws, ON_DEMAND_VCPU_QUOTA),
        spot_quota=aws_facts.vcpu_quota(aws, SPOT_VCPU_QUOTA),
        sfn_quota=aws_facts.sfn_quota(aws),
        crds=kube_facts.crds(kube),
        expected_crds=kube_facts.EXPECTED_CRDS,
        agent=kube_facts.agent(kube),
        forwarding=aws_facts.forwarding(aws, stack, now),
        activity=kube_facts.activity(kube),
        probe=aws_facts.probe_webhook(stack.info.webhook_url) if stack.info.webhook_url else None,
        dlqs=aws_facts.dlqs(aws, stack),
        executions=aws_facts.failed_executions(aws, stack, now),
        node_claims=kube_facts.node_claims(kube),
        karpenter=kube_facts.karpenter(kube, now),
    )
    return evaluate(facts, now)


def render(report: Report, out: TextIO, where: str = "") -> None:
    """The readable report: per phase, one line per check (status, id, title), its detail, and ``->`` what to do."""
    s = report.stack
    at = report.now.isoformat().replace("+00:00", "Z")
    print(f"nodeflow doctor: stack {s.name}, cluster {s.cluster_name} ({s.region}), at {at}", file=out)
    if where:
        print(f"cluster reached through {where}", file=out)
    width = max(len(c.id) for c in report.checks)
    phase = ""
    for c in report.checks:
        if c.phase != phase:
            phase = c.phase
            print(f"\n{PHASES.get(phase, phase)}", file=out)
        print(f"  {c.status.value:<4}  {c.id:<{width}}  {c.title}", file=out)
        print(f"        {c.detail}", file=out)
        if c.action:
            print(f"        -> {c.action}", file=out)
    summary = report.to_json()["summary"]
    print(f"\n{summary['status']}: {summary['ok']} OK, {summary['warn']} WARN, {summary['fail']} FAIL", file=out)
