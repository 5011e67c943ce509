"""The doctor's decisions: for each check, the facts it needs in, OK / WARN / FAIL out, with what was seen
(``detail``) and, when not OK, the one thing to do (``action``).

Pure: no boto3, no Kubernetes client, no clock (``now`` is an argument). A fact the adapters could not read is an
``Unreadable`` (the error says why, e.g. the IAM action that was denied); its check is a WARN saying so, never a
guess. ``CHECKS`` fixes every check's id, title and phase, and the order of the report.

Before install (is the cluster and account ready):
  cluster-auth-mode          EKS authentication mode allows access entries (the stack maps its roles with them)
  endpoint-access            the Lambdas can reach the API server (public endpoint open to them, or in its VPC)
  subnets, security-groups   what every EC2NodeClass selects exists (none yet: the karpenter.sh/discovery tag),
                             in one VPC, with free IP addresses
  node-role                  the node role exists, EC2 may assume it, it is in the instance profile, and the
                             EC2NodeClasses use it (the stack lets nodeflow pass only that role)
  spot-service-linked-role   AWSServiceRoleForEC2Spot exists when a NodePool allows spot
  quota-*                    On-Demand and Spot Standard vCPUs against the NodePools' cpu limits, Step Functions
                             StartExecution tokens, Lambda concurrency left unreserved for a burst of launches
After install (does it work):
  crds                       the karpenter.sh / karpenter.k8s.aws / nodeflow.io CRDs established, serving exactly
                             the versions nodeflow reads
  agent-running              the agent's Deployment ready, pointed at this stack's webhook and cluster
  agent-forwarding           the age of the last request the webhook accepted (its Webhook2xx metric), judged
                             against what the cluster shows should have been sent since
  webhook                    an unsigned probe is refused as it must be (403 from AWS_IAM, 401 in hmac mode)
  dlqs                       every dead-letter queue of the stack empty
  failed-executions          launch / terminate / replace executions failed in the last hour
  stuck-nodeclaims           NodeClaims not Initialized STUCK_AFTER after their creation, or deleting that long
  karpenter-controller       no Karpenter controller running (``nodeflow.karpenter_presence``)

Must not touch: how a fact is read (``aws_facts``, ``kube_facts``); the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from ipaddress import ip_network
from typing import Any

from nodeflow.api.labels import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_CAPACITY_TYPE,
)
from nodeflow.api.quantity import QuantityError, parse_quantity
from nodeflow.karpenter_presence import KarpenterController

__all__ = [
    "AGENT_DEPLOYMENT",
    "AGENT_NAMESPACE",
    "BURST_NODECLAIMS",
    "CHECKS",
    "DISCOVERY_TAG",
    "EXECUTION_WINDOW",
    "FORWARDING_WINDOW",
    "MIN_BURST_VCPUS",
    "MIN_FREE_IPS",
    "MIN_NODE_VCPUS",
    "NOT_INSTALLED",
    "ON_DEMAND_VCPU_QUOTA",
    "SPOT_SLR",
    "SPOT_VCPU_QUOTA",
    "STUCK_AFTER",
    "AccountConcurrency",
    "AgentFacts",
    "Check",
    "CheckSpec",
    "ClusterActivity",
    "ClusterFacts",
    "CrdFact",
    "DlqFact",
    "ExecutionFact",
    "Facts",
    "Forwarding",
    "GroupFact",
    "LambdaFacts",
    "NodeClaimFact",
    "NodeClassFact",
    "NodePoolFact",
    "NodeRoleFacts",
    "ProbeResult",
    "ProfileFact",
    "Report",
    "RoleFact",
    "SfnQuota",
    "StackInfo",
    "Status",
    "SubnetFact",
    "Unreadable",
    "evaluate",
    "node_claim_fact",
    "node_pool_fact",
]


class Status(StrEnum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A fact that could not be read; ``error`` says why (the API's error, naming the denied action if any), ``code``
    is the API's error code ("" when the fact is missing for another reason: the stack lacks an output)."""

    error: str
    code: str = ""

    @property
    def denied(self) -> bool:
        """The caller may not read it (AWS's AccessDenied / UnauthorizedOperation, Kubernetes' Forbidden)."""
        return any(word in self.code for word in ("AccessDenied", "Unauthorized", "Forbidden"))


@dataclass(frozen=True, slots=True)
class CheckSpec:
    id: str
    phase: str  # "before-install" | "after-install"
    title: str


BEFORE, AFTER = "before-install", "after-install"
CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("cluster-auth-mode", BEFORE, "EKS authentication mode allows access entries"),
    CheckSpec("endpoint-access", BEFORE, "The Lambdas can reach the cluster's API endpoint"),
    CheckSpec("subnets", BEFORE, "Subnets the EC2NodeClasses select"),
    CheckSpec("security-groups", BEFORE, "Security groups the EC2NodeClasses select"),
    CheckSpec("node-role", BEFORE, "Node role and its instance profile"),
    CheckSpec("spot-service-linked-role", BEFORE, "Spot service-linked role AWSServiceRoleForEC2Spot"),
    CheckSpec("quota-on-demand-vcpus", BEFORE, "On-Demand Standard vCPU quota (L-1216C47A)"),
    CheckSpec("quota-spot-vcpus", BEFORE, "Spot Standard vCPU quota (L-34B43A08)"),
    CheckSpec("quota-sfn-start-execution", BEFORE, "Step Functions StartExecution rate"),
    CheckSpec("quota-lambda-concurrency", BEFORE, "Lambda concurrency for a burst"),
    CheckSpec("crds", AFTER, "CRDs installed and serving the versions nodeflow reads"),
    CheckSpec("agent-running", AFTER, "Agent Deployment ready"),
    CheckSpec("agent-forwarding", AFTER, "Agent forwarding events"),
    CheckSpec("webhook", AFTER, "Webhook answering"),
    CheckSpec("dlqs", AFTER, "Dead-letter queues empty"),
    CheckSpec("failed-executions", AFTER, "Workflow executions failed in the last hour"),
    CheckSpec("stuck-nodeclaims", AFTER, "NodeClaims stuck"),
    CheckSpec("karpenter-controller", AFTER, "No Karpenter controller running"),
)
_SPECS = {c.id: c for c in CHECKS}

AGENT_NAMESPACE = "nodeflow"  # agent/manifests (a unit test keeps them equal)
AGENT_DEPLOYMENT = "nodeflow-agent"
DISCOVERY_TAG = "karpenter.sh/discovery"  # what an EC2NodeClass selects by convention (value: the cluster's name)
SPOT_SLR = "AWSServiceRoleForEC2Spot"
ON_DEMAND_VCPU_QUOTA = "L-1216C47A"  # Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances, vCPUs
SPOT_VCPU_QUOTA = "L-34B43A08"  # All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests, vCPUs
LAMBDA_CONCURRENCY_QUOTA = "L-B99A9384"
MIN_FREE_IPS = 256  # per EC2NodeClass: ~10 nodes with their pods' addresses under the VPC CNI
MIN_NODE_VCPUS = 1  # the smallest node there is (m6g.medium); a quota below it launches nothing
MIN_BURST_VCPUS = 64  # below this a burst is a handful of nodes (new accounts start at 5 to 32)
BURST_NODECLAIMS = 100  # NodeClaims launching at once that the StartExecution bucket and Lambda should absorb
STUCK_AFTER = timedelta(minutes=20)  # registration TTL (15 min, nodeflow.lifecycle.registration) + cleanup
FORWARDING_WINDOW = timedelta(hours=6)  # how far back the webhook's metric is read
FORWARDING_FRESH = timedelta(minutes=15)
METRIC_PERIOD = timedelta(
    minutes=1
)  # the resolution the webhook's metric is read at  # a request accepted this recently: forwarding works
# The agent re-sends every still-unschedulable pod each resync (300 s); with the metric's own delay, a pod pending
# this long must have been forwarded within this long.
FORWARDING_EXPECTED = timedelta(minutes=10)
EXECUTION_WINDOW = timedelta(hours=1)
NOT_INSTALLED = "NotInstalled"  # Unreadable.code of a fact whose CRD is not installed (before install)
_LAMBDA_HEADROOM = 100  # Lambda keeps at least 100 of the account's concurrency unreserved


@dataclass(frozen=True, slots=True)
class Check:
    id: str
    phase: str
    title: str
    status: Status
    detail: str
    action: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "phase": self.phase,
            "title": self.title,
            "status": self.status.value,
            "detail": self.detail,
            "action": self.action,
        }


def _check(check_id: str, status: Status, detail: str, action: str | None = None) -> Check:
    spec = _SPECS[check_id]
    return Check(spec.id, spec.phase, spec.title, status, detail, action if status is not Status.OK else None)


def _unreadable(check_id: str, fact: Unreadable, permission: str) -> Check:
    """A WARN saying why the check could not be made; the action grants ``permission`` when that was the reason."""
    if fact.code == NOT_INSTALLED:
        action = "install nodeflow's CRDs first (see the crds check)"
    elif fact.denied or not fact.code:
        action = permission
    else:
        action = f"resolve {fact.code} (above), then run doctor again"
    return _check(check_id, Status.WARN, f"could not be checked: {fact.error}", action)


def _cluster_unreadable(check_id: str, fact: Unreadable, stack: StackInfo) -> Check:
    if fact.code == "ResourceNotFoundException":
        return _check(
            check_id,
            Status.WARN,
            f"could not be checked: no EKS cluster {stack.cluster_name} in {stack.region} (stack output ClusterName)",
            f"check that the stack was deployed for this cluster and region: aws eks describe-cluster --name "
            f"{stack.cluster_name} --region {stack.region}",
        )
    return _unreadable(check_id, fact, f"allow eks:DescribeCluster on cluster {stack.cluster_name}")


# =============================================================================================
# facts


@dataclass(frozen=True, slots=True)
class StackInfo:
    """What the stack's outputs and template say."""

    name: str
    region: str
    cluster_name: str
    webhook_url: str | None = None
    webhook_auth: str = "iam"  # "hmac" when the stack has WebhookHmacSecretArn
    node_role_name: str | None = None
    node_instance_profile: str | None = None
    access_entries: bool = True  # the template maps its roles with AWS::EKS::AccessEntry


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """eks:DescribeCluster."""

    status: str | None
    auth_mode: str | None  # accessConfig.authenticationMode
    public_access: bool
    private_access: bool
    public_cidrs: tuple[str, ...]
    vpc_id: str | None


@dataclass(frozen=True, slots=True)
class LambdaFacts:
    """The stack's functions: how many, the VPCs they run in (none: outside a VPC), their reserved concurrency."""

    functions: int
    vpc_ids: frozenset[str]
    reserved: int


@dataclass(frozen=True, slots=True)
class AccountConcurrency:
    """lambda:GetAccountSettings."""

    limit: int
    unreserved: int


@dataclass(frozen=True, slots=True)
class SubnetFact:
    id: str
    zone: str
    vpc_id: str | None
    free_ips: int


@dataclass(frozen=True, slots=True)
class GroupFact:
    id: str
    vpc_id: str | None


@dataclass(frozen=True, slots=True)
class NodeClassFact:
    """What one EC2NodeClass selects (``name`` "": no EC2NodeClass exists; the discovery tag was used)."""

    name: str
    subnets: tuple[SubnetFact, ...] | Unreadable
    groups: tuple[GroupFact, ...] | Unreadable
    role: str | None = None
    instance_profile: str | None = None

    @property
    def label(self) -> str:
        return f"EC2NodeClass {self.name}" if self.name else "no EC2NodeClass yet; the tag"


@dataclass(frozen=True, slots=True)
class RoleFact:
    name: str
    exists: bool
    trusts_ec2: bool = False


@dataclass(frozen=True, slots=True)
class ProfileFact:
    name: str
    exists: bool
    roles: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeRoleFacts:
    role: RoleFact | None  # None: the stack names no node role
    stack_profile: ProfileFact | None = None
    class_profiles: Mapping[str, ProfileFact] = field(default_factory=dict)  # spec.instanceProfile -> fact


@dataclass(frozen=True, slots=True)
class NodePoolFact:
    name: str
    capacity_types: frozenset[str]
    cpu_limit: Decimal | None  # spec.limits.cpu in cores; None: unlimited


@dataclass(frozen=True, slots=True)
class SfnQuota:
    bucket: float | None
    refill: float | None


@dataclass(frozen=True, slots=True)
class CrdFact:
    name: str
    served: tuple[str, ...]
    established: bool


@dataclass(frozen=True, slots=True)
class AgentFacts:
    exists: bool
    replicas: int = 0
    ready: int = 0
    env: Mapping[str, str] = field(default_factory=dict)  # the agent container's literal env values
    waiting: tuple[str, ...] = ()  # "pod: reason (message)" of its pods' containers not running


@dataclass(frozen=True, slots=True)
class Forwarding:
    """The webhook's ``Webhook2xx`` metric over ``FORWARDING_WINDOW``: the newest minute with a request accepted."""

    last_accepted: datetime | None


@dataclass(frozen=True, slots=True)
class ClusterActivity:
    """What the cluster shows the agent must have sent: the earliest still-unschedulable pod (its PodScheduled=False
    transition) and the newest Node's creation."""

    unschedulable_since: datetime | None = None
    unschedulable_pod: str | None = None
    newest_node_created: datetime | None = None
    newest_node: str | None = None


@dataclass(frozen=True, slots=True)
class ProbeResult:
    status: int | None  # None: no answer (``error`` says why)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DlqFact:
    name: str
    url: str
    messages: int


@dataclass(frozen=True, slots=True)
class ExecutionFact:
    workflow: str
    name: str
    arn: str
    status: str
    stopped: datetime
    error: str | None = None
    cause: str | None = None


@dataclass(frozen=True, slots=True)
class NodeClaimFact:
    name: str
    created: datetime
    initialized: bool
    deleting_since: datetime | None = None
    why: str = ""  # the first condition not True: "Launched=False (InsufficientCapacity: ...)"


@dataclass(frozen=True, slots=True)
class Facts:
    """Everything the checks judge; each field is the fact, or ``Unreadable`` with why not."""

    stack: StackInfo
    cluster: ClusterFacts | Unreadable
    lambdas: LambdaFacts | Unreadable
    account_concurrency: AccountConcurrency | Unreadable
    node_classes: tuple[NodeClassFact, ...] | Unreadable
    node_role: NodeRoleFacts | Unreadable
    spot_slr: bool | Unreadable
    node_pools: tuple[NodePoolFact, ...] | Unreadable  # empty: none (or the CRD is not installed)
    on_demand_quota: float | Unreadable
    spot_quota: float | Unreadable
    sfn_quota: SfnQuota | Unreadable
    crds: Mapping[str, CrdFact] | Unreadable  # by name; a missing CRD is absent
    expected_crds: Mapping[str, tuple[str, ...]]  # CRD name -> the versions nodeflow reads
    agent: AgentFacts | Unreadable
    forwarding: Forwarding | Unreadable
    activity: ClusterActivity | Unreadable
    probe: ProbeResult | None  # None: the stack has no WebhookUrl output
    dlqs: tuple[DlqFact, ...] | Unreadable
    executions: tuple[ExecutionFact, ...] | Unreadable  # failed, timed out or aborted, stopped in the window
    node_claims: tuple[NodeClaimFact, ...] | Unreadable
    karpenter: KarpenterController | Unreadable


# =============================================================================================
# parsing Kubernetes objects into facts (pure)


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def node_pool_fact(obj: Mapping[str, Any]) -> NodePoolFact:
    """A NodePool's capacity types (Karpenter's default without a ``karpenter.sh/capacity-type`` requirement:
    on-demand) and its ``spec.limits.cpu``."""
    spec = obj.get("spec") or {}
    requirements = ((spec.get("template") or {}).get("spec") or {}).get("requirements") or []
    allowed = {CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_RESERVED}
    constrained = False
    for r in requirements:
        if not isinstance(r, Mapping) or r.get("key") != LABEL_CAPACITY_TYPE:
            continue
        constrained = True
        values = {str(v) for v in r.get("values") or ()}
        op = r.get("operator")
        if op == "In":
            allowed &= values
        elif op == "NotIn":
            allowed -= values
        elif op != "Exists":
            allowed = set()
    if not constrained:
        allowed = {CAPACITY_TYPE_ON_DEMAND}
    raw = (spec.get("limits") or {}).get("cpu")
    limit: Decimal | None = None
    if raw is not None:
        try:
            limit = parse_quantity(raw)
        except QuantityError:
            limit = None
    return NodePoolFact(str((obj.get("metadata") or {}).get("name", "")), frozenset(allowed), limit)


def node_claim_fact(obj: Mapping[str, Any]) -> NodeClaimFact | None:
    """A NodeClaim's age, whether it is Initialized, its deletion time and its first condition not True; None
    without a readable creationTimestamp."""
    meta = obj.get("metadata") or {}
    created = _parse_time(meta.get("creationTimestamp"))
    if created is None:
        return None
    conditions = [c for c in (obj.get("status") or {}).get("conditions") or () if isinstance(c, Mapping)]
    by_type = {str(c.get("type")): c for c in conditions}
    initialized = (by_type.get("Initialized") or {}).get("status") == "True"
    why = ""
    for kind in ("Launched", "Registered", "Initialized"):
        c = by_type.get(kind)
        if c is None:
            why = f"{kind} not reported"
            break
        if c.get("status") != "True":
            said = ": ".join(str(x) for x in (c.get("reason"), c.get("message")) if x)
            why = f"{kind}={c.get('status')}" + (f" ({said})" if said else "")
            break
    return NodeClaimFact(
        name=str(meta.get("name", "")),
        created=created,
        initialized=initialized,
        deleting_since=_parse_time(meta.get("deletionTimestamp")),
        why=why,
    )


# =============================================================================================
# decisions, one per check


def _ago(delta: timedelta) -> str:
    seconds = max(int(delta.total_seconds()), 0)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}".removesuffix(".0") + " h"
    return f"{seconds // 86400} days"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _names(items: Iterable[str], limit: int = 5) -> str:
    items = list(items)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def auth_mode(cluster: ClusterFacts | Unreadable, stack: StackInfo) -> Check:
    cid = "cluster-auth-mode"
    if isinstance(cluster, Unreadable):
        return _cluster_unreadable(cid, cluster, stack)
    mode = cluster.auth_mode
    fix = (
        f"aws eks update-cluster-config --name {stack.cluster_name} --region {stack.region} "
        "--access-config authenticationMode=API_AND_CONFIG_MAP"
    )
    if mode in ("API", "API_AND_CONFIG_MAP"):
        return _check(cid, Status.OK, f"authenticationMode {mode}: access entries map nodeflow's roles")
    if mode is None:
        return _check(cid, Status.WARN, "the cluster does not report its authenticationMode", fix)
    if stack.access_entries:
        return _check(
            cid,
            Status.FAIL,
            f"authenticationMode {mode}: the stack's access entries (Lambdas, nodes) are refused, so nodeflow "
            "cannot reach the API server and its nodes cannot join",
            fix,
        )
    return _check(
        cid,
        Status.WARN,
        f"authenticationMode {mode} and the stack made no access entries (eksAccessEntries=false): nodeflow's "
        "roles work only if mapped in kube-system/aws-auth",
        f"map the stack's Lambda roles and node role in kube-system/aws-auth, or {fix} and redeploy with "
        "-c eksAccessEntries=true",
    )


def _open_to_all(cidrs: Sequence[str]) -> bool:
    if not cidrs:
        return True  # EKS's default: 0.0.0.0/0
    for c in cidrs:
        try:
            if ip_network(c, strict=False).prefixlen == 0:
                return True
        except ValueError:
            continue
    return False


def endpoint_access(cluster: ClusterFacts | Unreadable, lambdas: LambdaFacts | Unreadable, stack: StackInfo) -> Check:
    cid = "endpoint-access"
    if isinstance(cluster, Unreadable):
        return _cluster_unreadable(cid, cluster, stack)
    if isinstance(lambdas, Unreadable):
        return _unreadable(cid, lambdas, "allow lambda:GetFunctionConfiguration on the stack's functions")
    vpc_fix = (
        f"redeploy the stack with its Lambdas in the cluster's VPC: cdk deploy -c clusterName={stack.cluster_name} "
        f"-c lambdaVpcId={cluster.vpc_id or 'VPC'} -c lambdaSubnetIds=SUBNET,SUBNET (private subnets)"
    )
    public = "public endpoint " + (
        "off" if not cluster.public_access else f"open to {', '.join(cluster.public_cidrs) or '0.0.0.0/0'}"
    )
    private = f"private endpoint {'on' if cluster.private_access else 'off'}"
    if not lambdas.vpc_ids:
        where = f"the {lambdas.functions} Lambdas run outside a VPC (from AWS's public addresses)"
        if not cluster.public_access:
            return _check(cid, Status.FAIL, f"{where}; {public}: they cannot reach the API server", vpc_fix)
        if not _open_to_all(cluster.public_cidrs):
            return _check(
                cid,
                Status.FAIL,
                f"{where}; {public}, which does not admit AWS's Lambda addresses",
                vpc_fix,
            )
        return _check(cid, Status.OK, f"{where}; {public}")
    vpcs = ", ".join(sorted(lambdas.vpc_ids))
    where = f"the {lambdas.functions} Lambdas run in {vpcs}"
    if cluster.private_access and cluster.vpc_id in lambdas.vpc_ids and len(lambdas.vpc_ids) == 1:
        return _check(
            cid,
            Status.OK,
            f"{where}, the cluster's VPC; {private} (the cluster security group must admit 443 from the Lambdas' "
            "security group)",
        )
    if cluster.private_access:
        return _check(
            cid,
            Status.WARN,
            f"{where}, not the cluster's VPC {cluster.vpc_id}; {private}: reachable only through peering or a transit "
            "gateway with the endpoint's private DNS",
            vpc_fix,
        )
    fix = (
        f"aws eks update-cluster-config --name {stack.cluster_name} --region {stack.region} "
        "--resources-vpc-config endpointPrivateAccess=true"
    )
    if not cluster.public_access:
        return _check(cid, Status.FAIL, f"{where}; {public}, {private}: no endpoint is reachable", fix)
    return _check(
        cid,
        Status.WARN,
        f"{where}; {private}, {public}: the Lambdas need a NAT gateway (whose address the CIDRs must admit)",
        fix,
    )


def _subnet_fix(stack: StackInfo, name: str) -> str:
    if not name:
        return (
            f"tag the subnets nodes should use: aws ec2 create-tags --resources SUBNET... --tags "
            f"Key={DISCOVERY_TAG},Value={stack.cluster_name}"
        )
    return (
        f"fix spec.subnetSelectorTerms of EC2NodeClass {name}, or tag the subnets it should select "
        f"(kubectl get ec2nodeclass {name} -o yaml)"
    )


class _Worst:
    """One line per EC2NodeClass; the check's status is the worst line's, its action the first of the worst."""

    _ORDER = (Status.OK, Status.WARN, Status.FAIL)

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.status = Status.OK
        self.action: str | None = None

    def add(self, status: Status, line: str, action: str | None = None) -> None:
        self.lines.append(line)
        if self._ORDER.index(status) > self._ORDER.index(self.status):
            self.status, self.action = status, action

    def check(self, check_id: str) -> Check:
        return _check(check_id, self.status, "; ".join(self.lines) or "no EC2NodeClass", self.action)


def _selected(c: NodeClassFact, stack: StackInfo) -> str:
    return c.label if c.name else f"{c.label} {DISCOVERY_TAG}={stack.cluster_name}"


def subnets(classes: Sequence[NodeClassFact] | Unreadable, stack: StackInfo) -> Check:
    cid = "subnets"
    if isinstance(classes, Unreadable):
        return _unreadable(cid, classes, "allow ec2:DescribeSubnets, and read EC2NodeClasses in the cluster")
    verdict = _Worst()
    for c in classes:
        what = _selected(c, stack)
        if isinstance(c.subnets, Unreadable):
            verdict.add(Status.WARN, f"{what}: could not be read: {c.subnets.error}", "allow ec2:DescribeSubnets")
            continue
        found = c.subnets
        if not found:
            status = Status.FAIL if c.name else Status.WARN  # no EC2NodeClass yet: nothing is broken
            verdict.add(status, f"{what}: selects no available subnet", _subnet_fix(stack, c.name))
            continue
        free = sum(s.free_ips for s in found)
        zones = sorted({s.zone for s in found})
        vpcs = sorted({s.vpc_id for s in found if s.vpc_id})
        full = [s.id for s in found if s.free_ips == 0]
        line = f"{what}: {len(found)} subnet(s) in {len(zones)} zone(s) ({', '.join(zones)}), {free} free IPs"
        if len(vpcs) > 1:
            verdict.add(Status.FAIL, f"{line}, in {len(vpcs)} VPCs ({', '.join(vpcs)})", _subnet_fix(stack, c.name))
        elif free < MIN_FREE_IPS:
            verdict.add(
                Status.WARN,
                f"{line}: below {MIN_FREE_IPS}, a burst runs out of addresses"
                + (f" (no free IP in {_names(full)})" if full else ""),
                f"add larger subnets to what {c.name or 'the tag'} selects (tag them {DISCOVERY_TAG}="
                f"{stack.cluster_name}), or free addresses",
            )
        else:
            verdict.add(Status.OK, line + (f" (none free in {_names(full)})" if full else ""))
    return verdict.check(cid)


def security_groups(classes: Sequence[NodeClassFact] | Unreadable, stack: StackInfo) -> Check:
    cid = "security-groups"
    if isinstance(classes, Unreadable):
        return _unreadable(cid, classes, "allow ec2:DescribeSecurityGroups, and read EC2NodeClasses in the cluster")
    verdict = _Worst()
    for c in classes:
        what = _selected(c, stack)
        if isinstance(c.groups, Unreadable):
            verdict.add(Status.WARN, f"{what}: could not be read: {c.groups.error}", "allow ec2:DescribeSecurityGroups")
            continue
        if not c.groups:
            if c.name:
                verdict.add(
                    Status.FAIL,
                    f"{what}: selects no security group",
                    f"fix spec.securityGroupSelectorTerms of EC2NodeClass {c.name}",
                )
            else:
                verdict.add(
                    Status.WARN,
                    f"{what}: selects no security group",
                    f"tag the nodes' security group: aws ec2 create-tags --resources SG --tags "
                    f"Key={DISCOVERY_TAG},Value={stack.cluster_name}",
                )
            continue
        group_vpcs = {g.vpc_id for g in c.groups if g.vpc_id}
        subnet_vpcs = {s.vpc_id for s in c.subnets if s.vpc_id} if not isinstance(c.subnets, Unreadable) else set()
        ids = _names(g.id for g in c.groups)
        if subnet_vpcs and group_vpcs and group_vpcs != subnet_vpcs:
            verdict.add(
                Status.FAIL,
                f"{what}: {ids} in {', '.join(sorted(group_vpcs))}, the subnets in {', '.join(sorted(subnet_vpcs))}",
                f"select security groups of the subnets' VPC in EC2NodeClass {c.name or '(the tag)'}",
            )
            continue
        verdict.add(Status.OK, f"{what}: {ids}")
    return verdict.check(cid)


def _role_name(role: str) -> str:
    return role.rsplit("/", 1)[-1]


def node_role(
    facts: NodeRoleFacts | Unreadable, classes: Sequence[NodeClassFact] | Unreadable, stack: StackInfo
) -> Check:
    cid = "node-role"
    if isinstance(facts, Unreadable):
        return _unreadable(cid, facts, "allow iam:GetRole and iam:GetInstanceProfile")
    role = facts.role
    if role is None:
        return _check(
            cid,
            Status.WARN,
            f"stack {stack.name} has no NodeRoleName output",
            "redeploy the stack with this version (cdk deploy) so it names its node role",
        )
    if not role.exists:
        return _check(
            cid,
            Status.FAIL,
            f"node role {role.name} does not exist",
            f"create it, or redeploy with -c createNodeRole=true (the default): cdk deploy -c "
            f"clusterName={stack.cluster_name}",
        )
    if not role.trusts_ec2:
        return _check(
            cid,
            Status.FAIL,
            f"node role {role.name} does not let ec2.amazonaws.com assume it: instances cannot use it",
            f"add ec2.amazonaws.com to the trust policy of {role.name} (aws iam update-assume-role-policy)",
        )
    lines = [f"node role {role.name} exists, trusted by ec2.amazonaws.com"]
    if facts.stack_profile is not None:
        where = f"instance profile {facts.stack_profile.name} (stack output NodeInstanceProfileName)"
        redeploy = f"redeploy the stack: cdk deploy -c clusterName={stack.cluster_name}"
        if failed := _profile_problem(cid, facts.stack_profile, role.name, where, redeploy):
            return failed
        lines.append(f"instance profile {facts.stack_profile.name} holds it")
    for c in classes if not isinstance(classes, Unreadable) else ():
        if not c.name:
            continue
        if c.role is not None and _role_name(c.role) != role.name:
            return _check(
                cid,
                Status.FAIL,
                f"EC2NodeClass {c.name} has spec.role {c.role}; nodeflow may pass only {role.name} (the stack's "
                "iam:PassRole grant)",
                f"set spec.role: {role.name} in EC2NodeClass {c.name}",
            )
        if c.instance_profile is not None:
            profile = facts.class_profiles.get(c.instance_profile) or ProfileFact(c.instance_profile, False)
            where = f"EC2NodeClass {c.name}: instance profile {c.instance_profile}"
            create = f"create it with role {role.name}, or use spec.role: {role.name} in EC2NodeClass {c.name}"
            if failed := _profile_problem(cid, profile, role.name, where, create):
                return failed
            lines.append(f"EC2NodeClass {c.name} uses instance profile {profile.name}")
    return _check(cid, Status.OK, "; ".join(lines))


def _profile_problem(cid: str, profile: ProfileFact, role: str, where: str, create: str) -> Check | None:
    """FAIL when ``profile`` does not exist (do ``create``) or does not hold ``role`` (the only one nodeflow may
    pass); None when it is fine."""
    if not profile.exists:
        return _check(cid, Status.FAIL, f"{where} does not exist", create)
    if role not in profile.roles:
        return _check(
            cid,
            Status.FAIL,
            f"{where} holds {', '.join(profile.roles) or 'no role'}, not {role} (the only role nodeflow may pass)",
            f"aws iam add-role-to-instance-profile --instance-profile-name {profile.name} --role-name {role}"
            + (" (after removing the other role)" if profile.roles else ""),
        )
    return None


def _spot_pools(pools: Sequence[NodePoolFact] | Unreadable) -> list[str] | None:
    if isinstance(pools, Unreadable) or not pools:
        return None
    return [p.name for p in pools if CAPACITY_TYPE_SPOT in p.capacity_types]


def spot_slr(exists: bool | Unreadable, pools: Sequence[NodePoolFact] | Unreadable) -> Check:
    cid = "spot-service-linked-role"
    fix = "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"
    if isinstance(exists, Unreadable):
        return _unreadable(cid, exists, f"allow iam:GetRole on {SPOT_SLR}")
    if exists:
        return _check(cid, Status.OK, f"{SPOT_SLR} exists")
    spot = _spot_pools(pools)
    if spot is None:
        return _check(cid, Status.WARN, f"{SPOT_SLR} is missing; spot launches fail without it (no NodePool yet)", fix)
    if spot:
        return _check(cid, Status.FAIL, f"{SPOT_SLR} is missing; NodePools {_names(spot)} allow spot", fix)
    return _check(cid, Status.OK, f"{SPOT_SLR} is missing, but no NodePool allows spot")


def vcpu_quota(
    check_id: str, quota: float | Unreadable, pools: Sequence[NodePoolFact] | Unreadable, capacity_type: str, code: str
) -> Check:
    """The quota against what launches that capacity type: FAIL when no node at all fits and a NodePool
    (or, without NodePools, Karpenter's default: on-demand) launches it; WARN below a burst or the cpu limits."""
    if isinstance(quota, Unreadable):
        return _unreadable(check_id, quota, f"allow servicequotas:GetServiceQuota (ec2 {code})")
    increase = (
        f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} --desired-value N"
    )
    known = not isinstance(pools, Unreadable) and bool(pools)
    using = (
        [p for p in pools if capacity_type in p.capacity_types] if known and not isinstance(pools, Unreadable) else []
    )
    if known and not using:
        return _check(check_id, Status.OK, f"{quota:g} vCPUs; no NodePool launches {capacity_type}")
    needed = known or capacity_type == CAPACITY_TYPE_ON_DEMAND
    if quota < MIN_NODE_VCPUS:
        who = f"NodePools {_names(p.name for p in using)} launch" if using else "NodePools launch"
        return _check(
            check_id,
            Status.FAIL if needed else Status.WARN,
            f"{quota:g} vCPUs: no {capacity_type} node can launch, and {who} {capacity_type}"
            if needed
            else f"{quota:g} vCPUs: no {capacity_type} node can launch (no NodePool yet)",
            increase,
        )
    if quota < MIN_BURST_VCPUS:
        return _check(
            check_id,
            Status.WARN,
            f"{quota:g} vCPUs: a burst stops after a handful of nodes (below {MIN_BURST_VCPUS})",
            increase,
        )
    if using:
        limits = [p.cpu_limit for p in using]
        if all(limit is not None for limit in limits):
            total = sum((limit for limit in limits if limit is not None), Decimal(0))
            if total > Decimal(str(quota)):
                return _check(
                    check_id,
                    Status.WARN,
                    f"{quota:g} vCPUs, below the {capacity_type} NodePools' cpu limits ({total:g} for "
                    f"{_names(p.name for p in using)}): launches fail before the limits are reached",
                    increase,
                )
            return _check(check_id, Status.OK, f"{quota:g} vCPUs, at least the NodePools' cpu limits ({total:g})")
        unlimited = [p.name for p in using if p.cpu_limit is None]
        return _check(check_id, Status.OK, f"{quota:g} vCPUs (NodePools without a cpu limit: {_names(unlimited)})")
    return _check(check_id, Status.OK, f"{quota:g} vCPUs")


def sfn_quota(quota: SfnQuota | Unreadable) -> Check:
    cid = "quota-sfn-start-execution"
    if isinstance(quota, Unreadable):
        return _unreadable(cid, quota, "allow servicequotas:ListServiceQuotas (states)")
    if quota.bucket is None or quota.refill is None:
        return _check(
            cid,
            Status.WARN,
            "Service Quotas does not list the StartExecution throttle token bucket of this region",
            "aws service-quotas list-service-quotas --service-code states",
        )
    detail = f"bucket {quota.bucket:g} executions, refilled {quota.refill:g}/s (one execution per NodeClaim)"
    if quota.bucket < BURST_NODECLAIMS:
        return _check(
            cid,
            Status.WARN,
            f"{detail}: a burst of {BURST_NODECLAIMS} NodeClaims is throttled",
            "request an increase of 'StartExecution throttle token bucket size' (Service Quotas, states)",
        )
    return _check(cid, Status.OK, detail)


def lambda_concurrency(account: AccountConcurrency | Unreadable, lambdas: LambdaFacts | Unreadable) -> Check:
    cid = "quota-lambda-concurrency"
    if isinstance(account, Unreadable):
        return _unreadable(cid, account, "allow lambda:GetAccountSettings")
    reserved = 0 if isinstance(lambdas, Unreadable) else lambdas.reserved
    increase = (
        "aws service-quotas request-service-quota-increase --service-code lambda --quota-code "
        f"{LAMBDA_CONCURRENCY_QUOTA} --desired-value N"
    )
    detail = (
        f"account limit {account.limit}, {account.unreserved} unreserved (the stack's functions reserve {reserved})"
    )
    if account.limit < reserved + _LAMBDA_HEADROOM:
        return _check(cid, Status.FAIL, f"{detail}: too low for the stack's reservations", increase)
    if account.unreserved < BURST_NODECLAIMS:
        return _check(
            cid,
            Status.WARN,
            f"{detail}: a burst of {BURST_NODECLAIMS} launches shares the rest with every other function",
            increase,
        )
    return _check(cid, Status.OK, detail)


def crds(found: Mapping[str, CrdFact] | Unreadable, expected: Mapping[str, tuple[str, ...]], stack: StackInfo) -> Check:
    cid = "crds"
    install = (
        f"python -m nodeflow install-manifests --stack {stack.name}, then kubectl apply -k cdk.out/install/{stack.name}"
    )
    if isinstance(found, Unreadable):
        return _unreadable(cid, found, "allow get on customresourcedefinitions (apiextensions.k8s.io)")
    missing = [name for name in expected if name not in found]
    if missing:
        return _check(cid, Status.FAIL, f"not installed: {_names(missing)}", install)
    problems: list[str] = []
    for name, versions in expected.items():
        crd = found[name]
        if not crd.established:
            problems.append(f"{name} is not Established")
        elif set(crd.served) != set(versions):
            problems.append(f"{name} serves {', '.join(crd.served) or 'nothing'}, nodeflow reads {', '.join(versions)}")
    if problems:
        return _check(
            cid,
            Status.FAIL,
            "; ".join(problems),
            f"apply nodeflow's CRDs over these: {install}",
        )
    return _check(cid, Status.OK, f"{len(expected)} CRDs established, serving {_versions(expected)}")


def _versions(expected: Mapping[str, tuple[str, ...]]) -> str:
    return ", ".join(sorted({f"{name.split('.', 1)[1]}/{v}" for name, versions in expected.items() for v in versions}))


def agent_running(agent: AgentFacts | Unreadable, stack: StackInfo) -> Check:
    cid = "agent-running"
    where = f"{AGENT_NAMESPACE}/{AGENT_DEPLOYMENT}"
    if isinstance(agent, Unreadable):
        return _unreadable(cid, agent, f"allow get on deployments in namespace {AGENT_NAMESPACE}")
    if not agent.exists:
        return _check(
            cid,
            Status.FAIL,
            f"Deployment {where} does not exist",
            f"python -m nodeflow install-manifests --stack {stack.name}, then kubectl apply -k "
            f"cdk.out/install/{stack.name}",
        )
    wrong = [
        f"{key}={agent.env[key]!r} (the stack's: {value!r})"
        for key, value in (("CLUSTER_NAME", stack.cluster_name), ("WEBHOOK_URL", stack.webhook_url))
        if value and key in agent.env and agent.env[key] != value
    ]
    if wrong:
        return _check(
            cid,
            Status.FAIL,
            f"Deployment {where} points elsewhere: {'; '.join(wrong)}",
            f"re-render and apply it: python -m nodeflow install-manifests --stack {stack.name}, then kubectl "
            f"apply -k cdk.out/install/{stack.name}",
        )
    detail = f"Deployment {where}: {agent.ready}/{agent.replicas} ready"
    if agent.ready < 1:
        why = f" ({_names(agent.waiting, 3)})" if agent.waiting else ""
        return _check(
            cid,
            Status.FAIL,
            detail + why,
            f"kubectl -n {AGENT_NAMESPACE} describe pods -l app.kubernetes.io/name={AGENT_DEPLOYMENT} (and "
            f"kubectl -n {AGENT_NAMESPACE} logs deploy/{AGENT_DEPLOYMENT}: a not-ready agent lists or sends nothing)",
        )
    return _check(cid, Status.OK, detail)


def agent_forwarding(
    forwarding: Forwarding | Unreadable, activity: ClusterActivity | Unreadable, now: datetime
) -> Check:
    cid = "agent-forwarding"
    logs = f"kubectl -n {AGENT_NAMESPACE} logs deploy/{AGENT_DEPLOYMENT} (look for webhook refusals)"
    if isinstance(forwarding, Unreadable):
        return _unreadable(cid, forwarding, "allow cloudwatch:GetMetricData (namespace nodeflow)")
    last = forwarding.last_accepted
    seen = (
        f"last request accepted by the webhook {_ago(now - last)} ago"
        if last is not None
        else f"no request accepted by the webhook in the last {_ago(FORWARDING_WINDOW)}"
    )
    if last is not None and now - last <= FORWARDING_FRESH:
        return _check(cid, Status.OK, seen)
    if not isinstance(activity, Unreadable):
        must_since: list[tuple[datetime, str]] = []
        pending = activity.unschedulable_since
        if pending is not None and now - pending >= FORWARDING_EXPECTED:
            must_since.append(
                (
                    now - FORWARDING_EXPECTED,
                    f"pod {activity.unschedulable_pod} unschedulable for {_ago(now - pending)} (re-sent every resync)",
                )
            )
        created = activity.newest_node_created
        # (a Node older than the metric's window was announced before it: the window cannot show that)
        if created is not None and FORWARDING_EXPECTED <= now - created <= FORWARDING_WINDOW:
            must_since.append((created, f"Node {activity.newest_node} created {_ago(now - created)} ago"))
        for due, why in must_since:
            # the metric's datapoint at ``last`` counts the minute that starts there
            if last is None or last + METRIC_PERIOD <= due:
                return _check(cid, Status.FAIL, f"{seen}, yet {why}", logs)
    if last is None:
        return _check(
            cid,
            Status.WARN,
            f"{seen}; nothing in the cluster required one (an idle cluster sends nothing)",
            "create a pod no node fits and run doctor again; if still none, " + logs,
        )
    return _check(cid, Status.OK, f"{seen}; nothing in the cluster has required one since (idle)")


def webhook(probe: ProbeResult | None, stack: StackInfo) -> Check:
    cid = "webhook"
    if probe is None or stack.webhook_url is None:
        return _check(
            cid,
            Status.WARN,
            f"stack {stack.name} has no WebhookUrl output",
            f"redeploy the stack: cdk deploy -c clusterName={stack.cluster_name}",
        )
    url = stack.webhook_url
    logs = f"aws logs tail /aws/lambda/nodeflow-{stack.cluster_name}-webhook --since 1h"
    expected = 403 if stack.webhook_auth == "iam" else 401
    why = "AWS_IAM refuses it" if expected == 403 else "hmac: the function refuses it"
    if probe.status is None:
        return _check(cid, Status.FAIL, f"{url} did not answer: {probe.error}", f"check that {url} is reachable")
    if probe.status == expected:
        return _check(cid, Status.OK, f"{url} answers an unsigned request {probe.status} ({why}), as it must")
    if 200 <= probe.status < 300:
        return _check(
            cid,
            Status.FAIL,
            f"{url} accepted an unsigned request ({probe.status}): anyone can post events",
            f"redeploy the stack (its Function URL must use {'AWS_IAM' if stack.webhook_auth == 'iam' else 'hmac'})",
        )
    if probe.status == 404:
        return _check(cid, Status.FAIL, f"{url} answers 404: no Function URL there", "redeploy the stack (cdk deploy)")
    if probe.status >= 500 or probe.status == 429:
        return _check(cid, Status.FAIL, f"{url} answers {probe.status} to an unsigned request", logs)
    return _check(
        cid,
        Status.WARN,
        f"{url} answers an unsigned request {probe.status}, expected {expected} ({why})",
        logs,
    )


def dlqs(found: Sequence[DlqFact] | Unreadable) -> Check:
    cid = "dlqs"
    if isinstance(found, Unreadable):
        return _unreadable(cid, found, "allow sqs:GetQueueAttributes on the stack's queues")
    full = [q for q in found if q.messages > 0]
    if full:
        worst = max(full, key=lambda q: q.messages)
        return _check(
            cid,
            Status.FAIL,
            "messages nodeflow gave up on: " + ", ".join(f"{q.name} {q.messages}" for q in full),
            f"read them to find the cause: aws sqs receive-message --queue-url {worst.url} --max-number-of-messages 10",
        )
    if not found:
        return _check(cid, Status.WARN, "the stack has no dead-letter queue", "redeploy the stack (cdk deploy)")
    return _check(
        cid, Status.OK, f"{_count(len(found), 'dead-letter queue')} empty ({_names((q.name for q in found), 6)})"
    )


def failed_executions(found: Sequence[ExecutionFact] | Unreadable) -> Check:
    cid = "failed-executions"
    if isinstance(found, Unreadable):
        return _unreadable(cid, found, "allow states:ListExecutions on the stack's state machines")
    if not found:
        return _check(cid, Status.OK, f"none in the last {_ago(EXECUTION_WINDOW)}")
    latest = max(found, key=lambda e: e.stopped)
    counts: dict[str, int] = {}
    for e in found:
        counts[f"{e.workflow} {e.status}"] = counts.get(f"{e.workflow} {e.status}", 0) + 1
    why = f": {latest.error}" + (f" ({latest.cause[:200]})" if latest.cause else "") if latest.error else ""
    detail = (
        ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        + f" in the last {_ago(EXECUTION_WINDOW)}; latest {latest.name}{why}"
    )
    action = f"aws stepfunctions get-execution-history --execution-arn {latest.arn} --reverse-order --max-items 5"
    # A launch fails when no offering had capacity (CleanUp ran, the pods are retried): routine in small numbers.
    # A terminate or replace that failed may have left an instance or a tainted node behind.
    if any(e.workflow != "launch" for e in found):
        first = max((e for e in found if e.workflow != "launch"), key=lambda e: e.stopped)
        return _check(
            cid,
            Status.FAIL,
            detail,
            f"aws stepfunctions get-execution-history --execution-arn {first.arn} --reverse-order --max-items 5",
        )
    return _check(cid, Status.WARN, detail, action)


def stuck_node_claims(found: Sequence[NodeClaimFact] | Unreadable, now: datetime) -> Check:
    cid = "stuck-nodeclaims"
    if isinstance(found, Unreadable):
        return _unreadable(cid, found, "allow list on nodeclaims.karpenter.sh")
    not_up = sorted(
        (c for c in found if not c.initialized and c.deleting_since is None and now - c.created >= STUCK_AFTER),
        key=lambda c: c.created,
    )
    deleting = sorted(
        (c for c in found if c.deleting_since is not None and now - c.deleting_since >= STUCK_AFTER),
        key=lambda c: c.deleting_since or c.created,
    )
    if not_up:
        first = not_up[0]
        return _check(
            cid,
            Status.FAIL,
            f"{len(not_up)} not Initialized after {_ago(STUCK_AFTER)}: {_names(c.name for c in not_up)} (oldest "
            f"{first.name}, {_ago(now - first.created)} old: {first.why or 'no conditions'})",
            f"kubectl describe nodeclaim {first.name}",
        )
    if deleting:
        first = deleting[0]
        assert first.deleting_since is not None
        return _check(
            cid,
            Status.WARN,
            f"{len(deleting)} deleting for over {_ago(STUCK_AFTER)}: {_names(c.name for c in deleting)} (oldest "
            f"{first.name}, {_ago(now - first.deleting_since)}; a PodDisruptionBudget or do-not-disrupt pod may hold "
            "the drain)",
            f"kubectl describe nodeclaim {first.name}",
        )
    return _check(cid, Status.OK, f"{_count(len(found), 'NodeClaim')}, none stuck ({_ago(STUCK_AFTER)})")


def karpenter(found: KarpenterController | Unreadable) -> Check:
    cid = "karpenter-controller"
    if isinstance(found, Unreadable):
        return _unreadable(cid, found, "allow list on deployments and leases (coordination.k8s.io)")
    detail = "; ".join(found.evidence)
    if not found.running:
        return _check(cid, Status.OK, detail)
    if found.deployment is not None:
        namespace, name = found.deployment.split("/", 1)
        action = f"scale it to zero before nodeflow acts: kubectl -n {namespace} scale deployment {name} --replicas=0"
    else:
        namespace = (found.lease or "/").split("/", 1)[0]
        action = f"stop the controller holding the Lease (kubectl -n {namespace} get pods; scale its Deployment to 0)"
    held = (
        "a Karpenter controller is running, so nodeflow holds still (launches and disrupts nothing; each NodePool "
        "has a KarpenterControllerRunning Event) until it is gone"
    )
    return _check(cid, Status.FAIL, f"{held}: {detail}", action)


# =============================================================================================
# the report


@dataclass(frozen=True, slots=True)
class Report:
    stack: StackInfo
    now: datetime
    checks: tuple[Check, ...]

    def count(self, status: Status) -> int:
        return sum(c.status is status for c in self.checks)

    @property
    def status(self) -> Status:
        if self.count(Status.FAIL):
            return Status.FAIL
        return Status.WARN if self.count(Status.WARN) else Status.OK

    @property
    def exit_code(self) -> int:
        """1 when a check failed, else 0 (bad input is 2, before any check: ``nodeflow.doctor_cli``)."""
        return 1 if self.status is Status.FAIL else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack.name,
            "cluster": self.stack.cluster_name,
            "region": self.stack.region,
            "checkedAt": self.now.isoformat().replace("+00:00", "Z"),
            "checks": [c.to_json() for c in self.checks],
            "summary": {
                "status": self.status.value,
                "ok": self.count(Status.OK),
                "warn": self.count(Status.WARN),
                "fail": self.count(Status.FAIL),
            },
        }


def evaluate(facts: Facts, now: datetime) -> Report:
    """Every check of ``CHECKS``, in its order."""
    stack = facts.stack
    checks = (
        auth_mode(facts.cluster, stack),
        endpoint_access(facts.cluster, facts.lambdas, stack),
        subnets(facts.node_classes, stack),
        security_groups(facts.node_classes, stack),
        node_role(facts.node_role, facts.node_classes, stack),
        spot_slr(facts.spot_slr, facts.node_pools),
        vcpu_quota(
            "quota-on-demand-vcpus",
            facts.on_demand_quota,
            facts.node_pools,
            CAPACITY_TYPE_ON_DEMAND,
            ON_DEMAND_VCPU_QUOTA,
        ),
        vcpu_quota("quota-spot-vcpus", facts.spot_quota, facts.node_pools, CAPACITY_TYPE_SPOT, SPOT_VCPU_QUOTA),
        sfn_quota(facts.sfn_quota),
        lambda_concurrency(facts.account_concurrency, facts.lambdas),
        crds(facts.crds, facts.expected_crds, stack),
        agent_running(facts.agent, stack),
        agent_forwarding(facts.forwarding, facts.activity, now),
        webhook(facts.probe, stack),
        dlqs(facts.dlqs),
        failed_executions(facts.executions),
        stuck_node_claims(facts.node_claims, now),
        karpenter(facts.karpenter),
    )
    assert tuple(c.id for c in checks) == tuple(s.id for s in CHECKS)
    return Report(stack, now, checks)
