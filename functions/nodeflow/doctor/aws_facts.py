"""The doctor's AWS facts: one narrow reader per fact, each returning the fact or ``Unreadable`` with the API's own
error (a denied action, a missing API), never raising past its check. Only ``read_stack`` raises (``DoctorInputError``):
without the stack there is nothing to check.

Calls, all read-only except the webhook probe (an unsigned POST the webhook must refuse, so nothing is written):
CloudFormation DescribeStacks / GetTemplate / ListStackResources; EKS DescribeCluster; Lambda
GetFunctionConfiguration / GetFunctionConcurrency / GetAccountSettings; EC2 DescribeSubnets /
DescribeSecurityGroups; IAM GetRole / GetInstanceProfile; Service Quotas GetServiceQuota / ListServiceQuotas (and
their AWS-default variants when no value was applied); SQS GetQueueUrl / GetQueueAttributes; Step Functions
ListExecutions / DescribeExecution; CloudWatch GetMetricData.

``clients`` is any ``service -> boto3 client`` callable (the CLI's: a session's; tests: moto, or botocore's Stubber
where moto has no such API).

Must not touch: what a fact means (``checks`` decides); anything but reads.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import unquote

from nodeflow.aws.ec2.tags import tag_filters
from nodeflow.doctor.checks import (
    DISCOVERY_TAG,
    EXECUTION_WINDOW,
    FORWARDING_WINDOW,
    ON_DEMAND_VCPU_QUOTA,
    SPOT_SLR,
    SPOT_VCPU_QUOTA,
    AccountConcurrency,
    ClusterFacts,
    DlqFact,
    ExecutionFact,
    Forwarding,
    GroupFact,
    LambdaFacts,
    NodeClassFact,
    NodeRoleFacts,
    ProbeResult,
    ProfileFact,
    RoleFact,
    SfnQuota,
    StackInfo,
    SubnetFact,
    Unreadable,
)

__all__ = [
    "Clients",
    "DoctorInputError",
    "StackResources",
    "account_concurrency",
    "cluster",
    "dlqs",
    "failed_executions",
    "forwarding",
    "lambdas",
    "node_classes",
    "node_role",
    "probe_webhook",
    "read_stack",
    "sfn_quota",
    "spot_slr",
    "vcpu_quota",
]

Clients = Callable[[str], Any]
T = TypeVar("T")
_ACCESS_ENTRY = "AWS::EKS::AccessEntry"
_FAILED_STATUSES = ("FAILED", "TIMED_OUT", "ABORTED")
_EXECUTION_PAGES = 5  # per state machine and status: 5,000 executions, newest first
SFN_BUCKET = "StartExecution throttle token bucket size"
SFN_REFILL = "StartExecution throttle token refill rate per second"
METRICS_NAMESPACE = "nodeflow"  # the handlers' Powertools metrics (infra/monitoring.py)
ACCEPTED_METRIC = "Webhook2xx"
PROBE_TIMEOUT_SECONDS = 10.0


class DoctorInputError(ValueError):
    """The stack cannot be checked (the message names the value): bad input, exit 2."""


@dataclass(frozen=True, slots=True)
class StackResources:
    """The stack's outputs and the physical ids of its resources, by type."""

    info: StackInfo
    outputs: Mapping[str, str]
    resources: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # type -> (logical, physical)

    def of_type(self, resource_type: str) -> tuple[tuple[str, str], ...]:
        return self.resources.get(resource_type, ())

    @property
    def state_machines(self) -> dict[str, str]:
        """workflow -> state machine ARN, from the ``<Workflow>StateMachineArn`` outputs."""
        suffix = "StateMachineArn"
        return {k[: -len(suffix)].lower(): v for k, v in sorted(self.outputs.items()) if k.endswith(suffix) and v}


def _error(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        err = response.get("Error") or {}
        operation = getattr(exc, "operation_name", "") or ""
        return f"{operation + ': ' if operation else ''}{err.get('Code', '?')}: {err.get('Message', '')}".strip()
    return f"{type(exc).__name__}: {exc}"


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code", "")) if isinstance(response, Mapping) else ""


def _readable(read: Callable[[], T]) -> T | Unreadable:
    """``read()``, or ``Unreadable`` with the error of any AWS call it made. Anything else it raised is reported the
    same way (a doctor that stops at one unreadable fact checks nothing else); its type names it."""
    try:
        return read()
    except Exception as exc:
        return Unreadable(_error(exc), _code(exc) or type(exc).__name__)


def _pages(client: Any, operation: str, key: str, *, max_pages: int | None = None, **kwargs: Any) -> list[Any]:
    out: list[Any] = []
    for i, page in enumerate(client.get_paginator(operation).paginate(**kwargs)):
        out.extend(page.get(key) or ())
        if max_pages is not None and i + 1 >= max_pages:
            break
    return out


# =============================================================================================
# the stack


def read_stack(clients: Clients, name: str, region: str) -> StackResources:
    """The stack's outputs, whether its template maps roles with access entries, and its resources."""
    from botocore.exceptions import ClientError

    cfn = clients("cloudformation")
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except ClientError as exc:
        if _code(exc) == "ValidationError":
            raise DoctorInputError(f"--stack: {name!r} was not found in {region}") from None
        raise DoctorInputError(f"--stack: {name!r} could not be described in {region}: {_error(exc)}") from None
    if not stacks:
        raise DoctorInputError(f"--stack: {name!r} was not found in {region}")
    stack = stacks[0]
    status = str(stack.get("StackStatus", ""))
    if status in ("ROLLBACK_COMPLETE", "DELETE_COMPLETE") or status.endswith("_FAILED"):
        raise DoctorInputError(f"--stack: {name!r} is {status}, not deployed (cdk deploy it first)")
    outputs = {str(o["OutputKey"]): str(o.get("OutputValue", "")) for o in stack.get("Outputs") or ()}
    cluster_name = outputs.get("ClusterName")
    if not cluster_name:
        raise DoctorInputError(
            f"--stack: {name!r} has no output ClusterName (is it a nodeflow stack, deployed by cdk deploy?)"
        )
    try:
        body = cfn.get_template(StackName=name).get("TemplateBody") or {}
        summaries = _pages(cfn, "list_stack_resources", "StackResourceSummaries", StackName=name)
    except ClientError as exc:
        raise DoctorInputError(
            f"--stack: {name!r}: its template and resources could not be read: {_error(exc)}"
        ) from None
    template = json.loads(body) if isinstance(body, str) else body
    types = {str(r.get("Type", "")) for r in (template.get("Resources") or {}).values() if isinstance(r, Mapping)}
    resources: dict[str, list[tuple[str, str]]] = {}
    for r in summaries:
        if r.get("PhysicalResourceId"):
            resources.setdefault(str(r["ResourceType"]), []).append(
                (str(r["LogicalResourceId"]), str(r["PhysicalResourceId"]))
            )
    info = StackInfo(
        name=name,
        region=region,
        cluster_name=cluster_name,
        webhook_url=outputs.get("WebhookUrl") or None,
        webhook_auth="hmac" if outputs.get("WebhookHmacSecretArn") else "iam",
        node_role_name=outputs.get("NodeRoleName") or None,
        node_instance_profile=outputs.get("NodeInstanceProfileName") or None,
        access_entries=_ACCESS_ENTRY in types,
    )
    return StackResources(info, outputs, {k: tuple(v) for k, v in resources.items()})


# =============================================================================================
# before install


def cluster(clients: Clients, stack: StackResources) -> ClusterFacts | Unreadable:
    def read() -> ClusterFacts:
        c = clients("eks").describe_cluster(name=stack.info.cluster_name)["cluster"]
        vpc = c.get("resourcesVpcConfig") or {}
        return ClusterFacts(
            status=c.get("status"),
            auth_mode=(c.get("accessConfig") or {}).get("authenticationMode"),
            public_access=bool(vpc.get("endpointPublicAccess", True)),
            private_access=bool(vpc.get("endpointPrivateAccess", False)),
            public_cidrs=tuple(vpc.get("publicAccessCidrs") or ()),
            vpc_id=vpc.get("vpcId"),
        )

    return _readable(read)


def lambdas(clients: Clients, stack: StackResources) -> LambdaFacts | Unreadable:
    """The stack's functions (its ``AWS::Lambda::Function`` resources): their VPCs and reserved concurrency."""
    names = [physical for _, physical in stack.of_type("AWS::Lambda::Function")]
    if not names:
        return Unreadable(f"stack {stack.info.name} lists no Lambda function")

    def read() -> LambdaFacts:
        lam = clients("lambda")
        vpcs: set[str] = set()
        reserved = 0
        for name in names:
            config = lam.get_function_configuration(FunctionName=name)
            vpc = config.get("VpcConfig") or {}
            if vpc.get("SubnetIds") and vpc.get("VpcId"):
                vpcs.add(str(vpc["VpcId"]))
            reserved += int(lam.get_function_concurrency(FunctionName=name).get("ReservedConcurrentExecutions") or 0)
        return LambdaFacts(functions=len(names), vpc_ids=frozenset(vpcs), reserved=reserved)

    return _readable(read)


def account_concurrency(clients: Clients) -> AccountConcurrency | Unreadable:
    def read() -> AccountConcurrency:
        limit = clients("lambda").get_account_settings()["AccountLimit"]
        return AccountConcurrency(int(limit["ConcurrentExecutions"]), int(limit["UnreservedConcurrentExecutions"]))

    return _readable(read)


def _terms(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [t for t in spec.get(key) or () if isinstance(t, Mapping)]


def _subnets(ec2: Any, terms: Sequence[Mapping[str, Any]]) -> tuple[SubnetFact, ...]:
    found: dict[str, SubnetFact] = {}
    for term in terms:
        filters = [{"Name": "subnet-id", "Values": [term["id"]]}] if term.get("id") else tag_filters(term.get("tags"))
        if not filters:
            continue
        for s in _pages(ec2, "describe_subnets", "Subnets", Filters=filters):
            if s.get("State", "available") == "available":
                found[s["SubnetId"]] = SubnetFact(
                    s["SubnetId"],
                    s.get("AvailabilityZone", ""),
                    s.get("VpcId"),
                    int(s.get("AvailableIpAddressCount", 0)),
                )
    return tuple(sorted(found.values(), key=lambda s: s.id))


def _groups(ec2: Any, terms: Sequence[Mapping[str, Any]]) -> tuple[GroupFact, ...]:
    found: dict[str, GroupFact] = {}
    for term in terms:
        if term.get("id"):
            filters = [{"Name": "group-id", "Values": [term["id"]]}]
        elif term.get("name"):
            filters = [{"Name": "group-name", "Values": [term["name"]]}]
        else:
            filters = tag_filters(term.get("tags"))
        if not filters:
            continue
        for g in _pages(ec2, "describe_security_groups", "SecurityGroups", Filters=filters):
            found[g["GroupId"]] = GroupFact(g["GroupId"], g.get("VpcId"))
    return tuple(sorted(found.values(), key=lambda g: g.id))


def node_classes(
    clients: Clients, classes: Sequence[Mapping[str, Any]], stack: StackResources
) -> tuple[NodeClassFact, ...]:
    """What each EC2NodeClass (as the API returns it) selects; none: the ``karpenter.sh/discovery`` tag."""
    ec2 = clients("ec2")

    def select(
        name: str,
        subnet_terms: Sequence[Mapping[str, Any]],
        group_terms: Sequence[Mapping[str, Any]],
        spec: Mapping[str, Any],
    ) -> NodeClassFact:
        return NodeClassFact(
            name=name,
            subnets=_readable(lambda: _subnets(ec2, subnet_terms)),
            groups=_readable(lambda: _groups(ec2, group_terms)),
            role=spec.get("role"),
            instance_profile=spec.get("instanceProfile"),
        )

    if not classes:
        default = [{"tags": {DISCOVERY_TAG: stack.info.cluster_name}}]
        return (select("", default, default, {}),)
    out = []
    for obj in sorted(classes, key=lambda o: str((o.get("metadata") or {}).get("name", ""))):
        spec = obj.get("spec") or {}
        name = str((obj.get("metadata") or {}).get("name", ""))
        out.append(select(name, _terms(spec, "subnetSelectorTerms"), _terms(spec, "securityGroupSelectorTerms"), spec))
    return tuple(out)


def _trusts_ec2(document: Any) -> bool:
    if isinstance(document, str):
        document = json.loads(unquote(document))
    statements = (document or {}).get("Statement") or []
    for s in statements if isinstance(statements, list) else [statements]:
        actions = s.get("Action") or []
        actions = [actions] if isinstance(actions, str) else actions
        services = (s.get("Principal") or {}).get("Service") or []
        services = [services] if isinstance(services, str) else services
        if s.get("Effect") == "Allow" and "sts:AssumeRole" in actions and "ec2.amazonaws.com" in services:
            return True
    return False


def _found(get: Callable[[], Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """``get()``'s answer, or None when IAM says there is no such entity."""
    from botocore.exceptions import ClientError

    try:
        return get()
    except ClientError as exc:
        if _code(exc) == "NoSuchEntity":
            return None
        raise


def _role(iam: Any, name: str) -> RoleFact:
    role = _found(lambda: iam.get_role(RoleName=name)["Role"])
    if role is None:
        return RoleFact(name, exists=False)
    return RoleFact(name, exists=True, trusts_ec2=_trusts_ec2(role.get("AssumeRolePolicyDocument")))


def _profile(iam: Any, name: str) -> ProfileFact:
    profile = _found(lambda: iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"])
    if profile is None:
        return ProfileFact(name, exists=False)
    return ProfileFact(name, exists=True, roles=tuple(str(r["RoleName"]) for r in profile.get("Roles") or ()))


def node_role(clients: Clients, stack: StackResources, classes: Sequence[NodeClassFact]) -> NodeRoleFacts | Unreadable:
    def read() -> NodeRoleFacts:
        iam = clients("iam")
        name = stack.info.node_role_name
        role = _role(iam, name) if name else None
        profile = stack.info.node_instance_profile
        class_profiles = {
            c.instance_profile: _profile(iam, c.instance_profile) for c in classes if c.instance_profile is not None
        }
        return NodeRoleFacts(role, _profile(iam, profile) if profile else None, class_profiles)

    return _readable(read)


def spot_slr(clients: Clients) -> bool | Unreadable:
    return _readable(lambda: _role(clients("iam"), SPOT_SLR).exists)


def _quota(sq: Any, service: str, code: str) -> float:
    from botocore.exceptions import ClientError

    try:
        return float(sq.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])
    except ClientError as exc:
        if _code(exc) != "NoSuchResourceException":
            raise
    return float(sq.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])


def vcpu_quota(clients: Clients, code: str) -> float | Unreadable:
    """The applied value of EC2 quota ``code`` (``ON_DEMAND_VCPU_QUOTA`` / ``SPOT_VCPU_QUOTA``), else its default."""
    assert code in (ON_DEMAND_VCPU_QUOTA, SPOT_VCPU_QUOTA)
    return _readable(lambda: _quota(clients("service-quotas"), "ec2", code))


def sfn_quota(clients: Clients) -> SfnQuota | Unreadable:
    """Step Functions' StartExecution token bucket, found by its name (applied values, then the defaults)."""

    def read() -> SfnQuota:
        sq = clients("service-quotas")
        values: dict[str, float] = {}
        for operation in ("list_service_quotas", "list_aws_default_service_quotas"):
            for q in _pages(sq, operation, "Quotas", ServiceCode="states"):
                values.setdefault(str(q.get("QuotaName")), float(q.get("Value", 0)))
            if SFN_BUCKET in values and SFN_REFILL in values:
                break
        return SfnQuota(values.get(SFN_BUCKET), values.get(SFN_REFILL))

    return _readable(read)


# =============================================================================================
# after install


def forwarding(clients: Clients, stack: StackResources, now: datetime) -> Forwarding | Unreadable:
    """The newest minute in ``FORWARDING_WINDOW`` in which the webhook accepted a request (``Webhook2xx``)."""

    def read() -> Forwarding:
        result = clients("cloudwatch").get_metric_data(
            MetricDataQueries=[
                {
                    "Id": "accepted",
                    "MetricStat": {
                        "Metric": {
                            "Namespace": METRICS_NAMESPACE,
                            "MetricName": ACCEPTED_METRIC,
                            "Dimensions": [
                                {"Name": "service", "Value": "nodeflow"},
                                {"Name": "cluster", "Value": stack.info.cluster_name},
                            ],
                        },
                        "Period": 60,
                        "Stat": "Sum",
                    },
                }
            ],
            StartTime=now - FORWARDING_WINDOW,
            EndTime=now + timedelta(minutes=1),
            ScanBy="TimestampDescending",
        )
        seen = [
            t
            for r in result.get("MetricDataResults") or ()
            for t, v in zip(r.get("Timestamps") or (), r.get("Values") or (), strict=False)
            if v > 0
        ]
        return Forwarding(max(seen) if seen else None)

    return _readable(read)


def probe_webhook(url: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> ProbeResult:
    """POST ``{}`` to the webhook without credentials: its status (the webhook must refuse it), or why none came."""
    request = urllib.request.Request(
        url, data=b"{}", method="POST", headers={"content-type": "application/json", "user-agent": "nodeflow-doctor"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return ProbeResult(int(response.status))
    except urllib.error.HTTPError as exc:
        return ProbeResult(int(exc.code))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return ProbeResult(None, f"{type(reason).__name__}: {reason}")


def _queue_name(url_or_arn: str) -> str:
    return url_or_arn.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]


def dlqs(clients: Clients, stack: StackResources) -> tuple[DlqFact, ...] | Unreadable:
    """The stack's dead-letter queues: its queues whose logical id says ``Dlq``, and the redrive targets of the
    queues its outputs name (``*QueueUrl``); with their messages (visible, in flight and delayed)."""

    def read() -> tuple[DlqFact, ...]:
        sqs = clients("sqs")
        urls = {url for logical, url in stack.of_type("AWS::SQS::Queue") if "dlq" in logical.lower()}
        for key, url in sorted(stack.outputs.items()):
            if key.endswith("QueueUrl") and url:
                attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"]).get("Attributes")
                policy = json.loads((attrs or {}).get("RedrivePolicy") or "{}")
                if policy.get("deadLetterTargetArn"):
                    urls.add(sqs.get_queue_url(QueueName=_queue_name(policy["deadLetterTargetArn"]))["QueueUrl"])
        found = []
        counted = (
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        )
        for url in sorted(urls, key=_queue_name):
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(counted)).get("Attributes") or {}
            found.append(DlqFact(_queue_name(url), url, sum(int(attrs.get(a, 0)) for a in counted)))
        return tuple(found)

    return _readable(read)


def _executions(sfn: Any, workflow: str, arn: str, since: datetime) -> Iterable[ExecutionFact]:
    for status in _FAILED_STATUSES:
        for e in _pages(
            sfn, "list_executions", "executions", max_pages=_EXECUTION_PAGES, stateMachineArn=arn, statusFilter=status
        ):
            stopped = e.get("stopDate")
            if isinstance(stopped, datetime) and stopped >= since:
                yield ExecutionFact(workflow, str(e["name"]), str(e["executionArn"]), str(e["status"]), stopped)


def failed_executions(clients: Clients, stack: StackResources, now: datetime) -> tuple[ExecutionFact, ...] | Unreadable:
    """Executions of the stack's state machines that failed, timed out or were aborted in ``EXECUTION_WINDOW``;
    the newest of each workflow with its error and cause."""
    machines = stack.state_machines
    if not machines:
        return Unreadable(f"stack {stack.info.name} has no <Workflow>StateMachineArn output")

    def read() -> tuple[ExecutionFact, ...]:
        sfn = clients("stepfunctions")
        found: list[ExecutionFact] = []
        for workflow, arn in machines.items():
            mine = sorted(_executions(sfn, workflow, arn, now - EXECUTION_WINDOW), key=lambda e: e.stopped)
            if mine:
                described = sfn.describe_execution(executionArn=mine[-1].arn)
                last = mine[-1]
                mine[-1] = ExecutionFact(
                    last.workflow,
                    last.name,
                    last.arn,
                    last.status,
                    last.stopped,
                    described.get("error"),
                    described.get("cause"),
                )
            found.extend(mine)
        return tuple(found)

    return _readable(read)
