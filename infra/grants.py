"""What each Lambda role is granted, as plain data: the governance record's view of nodeflow's own AWS permissions.

No CDK here (``python -m nodeflow governance`` reads it without synthesizing or even importing aws_cdk): the
functions and what they use come from ``infra/functions.py``'s ``FUNCTIONS`` table, read as source text
(``function_specs``), and each use maps to the IAM statements ``infra.iam.Permissions`` and
``infra.functions.Functions`` give it (``USE_GRANTS``), in words for resources and conditions. Statements that
depend on the stack's context carry ``when`` (e.g. the catalog's only with ``catalogSource: aws``).

tests/infra/test_grants.py checks, role by role, that these are exactly the actions the synthesized stacks grant:
a statement added to the stack without an entry here (or the reverse) fails it.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "COMMON_GRANTS",
    "FUNCTIONS_SOURCE",
    "USE_GRANTS",
    "FunctionGrants",
    "FunctionUses",
    "Grant",
    "StackOptions",
    "actions",
    "function_grants",
    "function_specs",
    "lambda_grants",
    "workflow_steps",
]

FUNCTIONS_SOURCE = Path(__file__).resolve().parent / "functions.py"
WORKFLOWS_SOURCE = Path(__file__).resolve().parent / "workflows.py"

# Context conditions (``when``), as infra.config reads them.
WHEN_DESCRIBE_CLUSTER = "clusterEndpoint not given (read from eks:DescribeCluster)"
WHEN_AWS_CATALOG = "catalogSource: aws (the default)"
WHEN_HMAC = "webhookAuth: hmac"
WHEN_INSTALL_HMAC = "webhookAuth: hmac with clusterInstall (the installer copies the secret into the cluster)"
WHEN_VPC = "lambdaVpcId given"


@dataclass(frozen=True, slots=True)
class Grant:
    """One IAM statement: its Sid ("" for the ones CDK's grant methods add), actions, resources and conditions in
    words, and the stack option it depends on ("" when always granted)."""

    sid: str
    actions: tuple[str, ...]
    resources: str
    condition: str = ""
    when: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "sid": self.sid,
            "actions": list(self.actions),
            "resources": self.resources,
            "condition": self.condition,
            "when": self.when,
        }


OWNED_REQUEST = (
    "request tags kubernetes.io/cluster/<cluster>=owned, eks:eks-cluster-name=<cluster>, karpenter.sh/nodepool"
)
OWNED_RESOURCE = "resource tags kubernetes.io/cluster/<cluster>=owned and karpenter.sh/nodepool"
OWNED_TEMPLATE = (
    "resource tags kubernetes.io/cluster/<cluster>=owned, eks:eks-cluster-name=<cluster>, karpenter.sh/nodepool and "
    "karpenter.k8s.aws/ec2nodeclass"
)
IN_REGION = "aws:RequestedRegion = the stack's region"
PROFILES = "instance profiles named <cluster>_* (this account)"
CREATED = "fleet, instance, volume, network-interface, launch-template, spot-instances-request (this account, region)"

_LAUNCH = (
    Grant(
        "LaunchFromSelectedInputs",
        ("ec2:RunInstances", "ec2:CreateFleet"),
        "images, snapshots (region); subnets, security groups (any account)",
    ),
    Grant("LaunchFromOwnedTemplates", ("ec2:RunInstances", "ec2:CreateFleet"), "launch templates", OWNED_RESOURCE),
    Grant(
        "CreateOwnedResources",
        ("ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"),
        CREATED,
        OWNED_REQUEST,
    ),
    Grant("TagOnCreate", ("ec2:CreateTags",), CREATED, OWNED_REQUEST + "; only at creation (ec2:CreateAction)"),
)

# use (infra/functions.py FunctionSpec.uses) -> its statements. "start:<wf>" / "watch:<wf>" are built below.
USE_GRANTS: Mapping[str, tuple[Grant, ...]] = {
    "kube": (Grant("DescribeCluster", ("eks:DescribeCluster",), "the cluster", when=WHEN_DESCRIBE_CLUSTER),),
    "catalog": (
        Grant(
            "CatalogDescribe",
            (
                "ec2:DescribeAvailabilityZones",
                "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeSpotPriceHistory",
            ),
            "*",
            IN_REGION,
            WHEN_AWS_CATALOG,
        ),
        Grant("CatalogPrices", ("pricing:GetProducts",), "*", when=WHEN_AWS_CATALOG),
    ),
    "offerings:read": (
        Grant("Offerings", ("dynamodb:Query",), "the nodeflow table", "partition key: the offerings cache"),
    ),
    "offerings:write": (
        Grant(
            "Offerings",
            ("dynamodb:Query", "dynamodb:BatchWriteItem"),
            "the nodeflow table",
            "partition key: the offerings cache",
        ),
    ),
    "dedup": (
        Grant(
            "SeenRecords",
            ("dynamodb:PutItem", "dynamodb:BatchWriteItem"),
            "the nodeflow table",
            "partition keys: the webhook's nonces and event ids",
        ),
    ),
    "decisions": (Grant("DecisionLog", ("dynamodb:BatchWriteItem",), "the decision log table"),),
    "nodeclass": (
        Grant(
            "NodeClassDescribe",
            (
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeImages",
                "ec2:DescribePlacementGroups",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSubnets",
            ),
            "*",
            IN_REGION,
        ),
        Grant("AmiParameters", ("ssm:GetParameter", "ssm:GetParameters"), "public parameters /aws/service/*"),
        Grant(
            "ReadInstanceProfiles",
            ("iam:GetInstanceProfile",),
            f"{PROFILES}; those Karpenter made for the cluster (path /karpenter/<region>/<cluster>/)",
        ),
        Grant(
            "CreateInstanceProfiles",
            ("iam:CreateInstanceProfile", "iam:TagInstanceProfile"),
            PROFILES,
            "request tags kubernetes.io/cluster/<cluster>=owned, eks:eks-cluster-name, karpenter.k8s.aws/ec2nodeclass",
        ),
        Grant(
            "ManageInstanceProfileRoles",
            ("iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile"),
            PROFILES,
            "resource tags kubernetes.io/cluster/<cluster>=owned, karpenter.k8s.aws/ec2nodeclass",
        ),
    ),
    # EC2NodeClass validation's dry runs of the launch calls: "nodeclass" without "fleet".
    "nodeclass:dry-run": (
        Grant("DryRunDescribe", ("ec2:DescribeLaunchTemplates",), "*", IN_REGION),
        *_LAUNCH,
    ),
    "fleet": (
        Grant("FleetDescribe", ("ec2:DescribeInstances", "ec2:DescribeLaunchTemplates"), "*", IN_REGION),
        *_LAUNCH,
    ),
    "pass-node-role": (
        Grant("PassNodeRole", ("iam:PassRole",), "the node role", "iam:PassedToService = ec2.amazonaws.com"),
    ),
    "ec2:read": (Grant("DescribeInstances", ("ec2:DescribeInstances",), "*", IN_REGION),),
    "ec2:terminate": (
        Grant("DescribeInstances", ("ec2:DescribeInstances",), "*", IN_REGION),
        Grant(
            "TerminateOwnedInstances", ("ec2:TerminateInstances",), "instances (this account, region)", OWNED_RESOURCE
        ),
    ),
    "ec2:status": (Grant("DescribeInstanceStatus", ("ec2:DescribeInstanceStatus",), "*", IN_REGION),),
    # garbage collection: launch templates nothing uses any more, and those of deleted EC2NodeClasses
    "ec2:launch-templates": (
        Grant("DescribeLaunchTemplates", ("ec2:DescribeLaunchTemplates",), "*", IN_REGION),
        Grant(
            "DeleteOwnedLaunchTemplates",
            ("ec2:DeleteLaunchTemplate",),
            "launch templates (this account, region)",
            OWNED_TEMPLATE,
        ),
    ),
    "requeue": (Grant("", ("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"), "the provisioning queue"),),
    "publish": (Grant("", ("events:PutEvents",), "the nodeflow event bus"),),
    "webhook": (
        Grant(
            "",
            ("secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"),
            "the webhook's HMAC secret",
            when=WHEN_HMAC,
        ),
    ),
    # The custom resources' function (infra/install.py): the cluster check, always; the agent's HMAC secret, which
    # it applies as a Secret. Its access to the cluster is an EKS access entry, not IAM.
    "install": (
        Grant("DescribeCluster", ("eks:DescribeCluster",), "the cluster"),
        Grant(
            "",
            ("secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"),
            "the webhook's HMAC secret",
            when=WHEN_INSTALL_HMAC,
        ),
    ),
}

# Every function: X-Ray traces, its own log group; in a VPC, Lambda's managed ENI policy.
COMMON_GRANTS: tuple[Grant, ...] = (
    Grant("", ("xray:PutTraceSegments", "xray:PutTelemetryRecords"), "*"),
    Grant("", ("logs:CreateLogStream", "logs:PutLogEvents"), "the function's log group"),
    Grant(
        "",
        (),
        "managed policy service-role/AWSLambdaVPCAccessExecutionRole (network interfaces)",
        when=WHEN_VPC,
    ),
)
QUEUE_CONSUMER_ACTIONS = (
    "sqs:ReceiveMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueUrl",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
)


@dataclass(frozen=True, slots=True)
class FunctionUses:
    """One row of infra/functions.py ``FUNCTIONS``: what the function uses and how it is triggered."""

    module: str
    description: str
    uses: tuple[str, ...]
    queue: str | None = None
    schedule_minutes: int | None = None
    url: bool = False

    @property
    def suffix(self) -> str:
        return self.module.replace("_", "-")


@dataclass(frozen=True, slots=True)
class FunctionGrants:
    """A Lambda function's role: its statements, and any use this table has no entry for."""

    function: str  # suffix: the function is nodeflow-<cluster>-<suffix>
    description: str
    uses: tuple[str, ...]
    grants: tuple[Grant, ...]
    unknown_uses: tuple[str, ...] = field(default=())

    def actions(self) -> frozenset[str]:
        return frozenset(a for g in self.grants for a in g.actions)


@dataclass(frozen=True, slots=True)
class StackOptions:
    """The context options that change what is granted (None: unknown, every conditional grant is listed with its
    ``when``)."""

    read_cluster_from_eks: bool = True
    aws_catalog: bool = True
    hmac: bool = False
    vpc: bool = False
    cluster_install: bool = True

    def keeps(self, grant: Grant) -> bool:
        return {
            "": True,
            WHEN_DESCRIBE_CLUSTER: self.read_cluster_from_eks,
            WHEN_AWS_CATALOG: self.aws_catalog,
            WHEN_HMAC: self.hmac,
            WHEN_INSTALL_HMAC: self.hmac and self.cluster_install,
            WHEN_VPC: self.vpc,
        }[grant.when]


def _literal(node: ast.expr | None) -> object:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None  # a name or an expression (e.g. a constant imported from elsewhere): not needed here


def _table(source: Path, name: str, call_name: str) -> list[ast.Call]:
    """The calls ``call_name(...)`` of the module-level tuple ``name`` in ``source`` (ValueError naming the file)."""
    tree = ast.parse(source.read_text(), filename=str(source))
    table: ast.expr | None = None
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                table = node.value
    if not isinstance(table, ast.Tuple | ast.List):
        raise ValueError(f"{source}: no {name} = ({call_name}(...), ...) table")
    calls: list[ast.Call] = []
    for i, call in enumerate(table.elts):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == call_name):
            raise ValueError(f"{source}: {name}[{i}] is not a {call_name}(...) call")
        calls.append(call)
    return calls


def workflow_steps(source: Path = WORKFLOWS_SOURCE) -> dict[str, frozenset[str]]:
    """Workflow name -> the functions its tasks call (infra/workflows.py ``WORKFLOWS``, read from its source)."""
    steps: dict[str, frozenset[str]] = {}
    for i, call in enumerate(_table(source, "WORKFLOWS", "WorkflowSpec")):
        kw = {k.arg: k.value for k in call.keywords if k.arg is not None}
        name = _literal(call.args[0] if call.args else kw.get("name"))
        functions = _literal(call.args[2] if len(call.args) > 2 else kw.get("functions"))
        if not isinstance(name, str) or not isinstance(functions, dict):
            raise ValueError(f"{source}: WORKFLOWS[{i}]: name and functions must be literals")
        steps[name] = frozenset(str(v) for v in functions.values())
    return steps


def function_specs(source: Path = FUNCTIONS_SOURCE) -> tuple[FunctionUses, ...]:
    """The ``FUNCTIONS`` table of infra/functions.py, read from its source (no import, no CDK). ValueError naming
    the file when the table cannot be read."""
    specs: list[FunctionUses] = []
    for i, call in enumerate(_table(source, "FUNCTIONS", "FunctionSpec")):
        kw = {k.arg: k.value for k in call.keywords if k.arg is not None}
        module = _literal(call.args[0] if call.args else kw.get("module"))
        description = _literal(call.args[1] if len(call.args) > 1 else kw.get("description"))
        uses = _literal(kw.get("uses")) or ()
        if not isinstance(module, str) or not isinstance(uses, tuple) or not all(isinstance(u, str) for u in uses):
            raise ValueError(f"{source}: FUNCTIONS[{i}]: module and uses must be literal strings")
        queue = None
        trigger = kw.get("queue")
        if isinstance(trigger, ast.Call) and trigger.args:
            queue = _literal(trigger.args[0])
        schedule = _literal(kw.get("schedule_minutes"))
        specs.append(
            FunctionUses(
                module=module,
                description=description if isinstance(description, str) else "",
                uses=tuple(uses),
                queue=queue if isinstance(queue, str) else None,
                schedule_minutes=schedule if isinstance(schedule, int) else None,
                url=_literal(kw.get("url")) is True,
            )
        )
    return tuple(specs)


def actions(sid: str) -> list[str]:
    """The actions of the statement ``sid`` (``infra.iam.Permissions`` builds its statements from these; KeyError
    naming the Sid when the table has none, or two with different actions)."""
    found = {g.actions for grants in USE_GRANTS.values() for g in grants if g.sid == sid}
    if len(found) != 1:
        raise KeyError(f"infra.grants: {len(found)} action lists for Sid {sid!r} in USE_GRANTS (want exactly one)")
    return list(next(iter(found)))


def function_grants(
    spec: FunctionUses, options: StackOptions | None = None, steps: Mapping[str, frozenset[str]] | None = None
) -> FunctionGrants:
    """The statements of ``spec``'s role, in the order infra/functions.py adds them (``options`` None: every
    conditional statement, with its ``when``; ``steps``: ``workflow_steps()`` unless given)."""
    steps = workflow_steps() if steps is None else steps
    uses = set(spec.uses)
    keys: list[str] = [u for u in ("kube", "catalog") if u in uses]
    if "offerings:write" in uses:
        keys.append("offerings:write")
    elif "offerings:read" in uses:
        keys.append("offerings:read")
    keys += [u for u in ("dedup", "decisions", "nodeclass") if u in uses]
    if "nodeclass" in uses and "fleet" not in uses:
        keys.append("nodeclass:dry-run")
    if "fleet" in uses:
        keys.append("fleet")
    if uses & {"nodeclass", "fleet"}:
        keys.append("pass-node-role")
    if "ec2:terminate" in uses:
        keys.append("ec2:terminate")
    elif "ec2:read" in uses:
        keys.append("ec2:read")
    keys += [u for u in ("ec2:status", "ec2:launch-templates", "requeue", "publish", "webhook", "install") if u in uses]
    grants: list[Grant] = [g for k in keys for g in USE_GRANTS[k]]
    grants += COMMON_GRANTS
    if spec.queue is not None:
        grants.append(Grant("", QUEUE_CONSUMER_ACTIONS, f"the {spec.queue} queue (its trigger)"))
    for use in spec.uses:
        kind, _, workflow = use.partition(":")
        if kind == "start":
            # a step of the workflow it starts continues it: a statement of its own (ARN built from the name)
            sid = f"Continue{workflow.capitalize()}" if spec.suffix in steps.get(workflow, ()) else ""
            grants.append(Grant(sid, ("states:StartExecution",), f"the {workflow} state machine"))
        elif kind == "watch":
            grants.append(
                Grant(
                    f"Watch{workflow.capitalize()}",
                    ("states:DescribeExecution",),
                    f"the {workflow} state machine's executions",
                )
            )
    known = set(USE_GRANTS) | {"offerings:read"}
    unknown = tuple(u for u in spec.uses if u not in known and not u.startswith(("start:", "watch:")))
    if options is not None:
        grants = [g for g in grants if options.keeps(g)]
    return FunctionGrants(spec.suffix, spec.description, spec.uses, tuple(grants), unknown)


def lambda_grants(
    options: StackOptions | None = None, specs: Sequence[FunctionUses] | None = None
) -> tuple[FunctionGrants, ...]:
    """Every function's role (``specs``: infra/functions.py ``FUNCTIONS`` unless given)."""
    steps = workflow_steps()
    return tuple(function_grants(s, options, steps) for s in (function_specs() if specs is None else specs))
