"""cdk-nag (AwsSolutions): the checks, and every finding acknowledged on purpose, each with its reason.

cdk-nag 3 runs as a CDK validation plugin: synth fails on any finding not acknowledged here, and the report
(``validation-report.json`` in the cloud assembly) lists them. Findings are acknowledged one by one on the
construct that has them (``AwsSolutions::<rule>[<finding>]``), never for a whole stack.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Acknowledgment, App, Stack, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

__all__ = ["REASONS", "acknowledge", "acknowledge_findings", "add_checks"]

_OWNED_EC2 = "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:{}/*]"
# finding (without the pack prefix) -> why it stays. Keys with "{}" are filled in per resource.
REASONS: dict[str, str] = {
    "AwsSolutions-L1": (
        "The functions are pinned to Python 3.12 on purpose: the bundled dependencies are cp312 wheels and the "
        "handlers are tested on it; moving the runtime is a deliberate change with its own tests."
    ),
    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{}]": (
        "The node role carries the AWS managed policies EKS documents for worker nodes (kubelet, VPC CNI, image "
        "pulls, SSM), which AWS keeps current; the same set Karpenter's node role uses."
    ),
    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]": (
        "Lambdas in a VPC need to create and delete their ENIs; CDK attaches the AWS managed policy for exactly that "
        "when lambdaVpcId is set."
    ),
    "AwsSolutions-IAM5[Resource::*]": (
        "Resource '*' only for actions without resource-level permissions: X-Ray PutTraceSegments/"
        "PutTelemetryRecords (active tracing), ec2:Describe* (limited to the stack's region by aws:RequestedRegion), "
        "pricing:GetProducts, and CloudWatch Logs delivery for Step Functions logging. tests/infra checks that no "
        "other action is granted on '*'."
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::image/*]": (
        "An EC2NodeClass selects its AMIs (alias, id, name, tags, SSM parameter); RunInstances/CreateFleet must be "
        "allowed on whichever image it resolves to (read-only input; as Karpenter). The provisioner and gc hold the "
        "same launch statements for EC2NodeClass validation's DryRun calls, which IAM judges as the real calls."
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::snapshot/*]": (
        "The snapshots behind the selected AMIs' block devices are read-only launch inputs (as Karpenter)."
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:*:subnet/*]": (
        "An EC2NodeClass selects subnets by id or tags, possibly shared from another account (RAM); launching into "
        "them is the point (as Karpenter). What is created there is tag-conditioned."
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:*:security-group/*]": (
        "An EC2NodeClass selects security groups by id, name or tags, possibly in a shared VPC; attaching them is "
        "the point (as Karpenter). What is created with them is tag-conditioned."
    ),
    _OWNED_EC2: (
        "Instance, fleet, volume, network interface, launch template and spot request ids are only known once "
        "created: the statement is conditioned on the cluster's ownership tags in the request "
        "(kubernetes.io/cluster/<name>=owned, eks:eks-cluster-name, karpenter.sh/nodepool) or on the resource "
        "(launch templates used, instances terminated), and tagging only at creation (ec2:CreateAction)."
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:<AWS::Region>::parameter/aws/service/*]": (
        "The public AMI parameters AMI aliases resolve through (/aws/service/eks/..., /aws/service/bottlerocket/..., "
        "Windows); they are AWS-owned and read-only."
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:iam::<AWS::AccountId>:instance-profile/{}_*]": (
        "Instance profiles nodeflow creates per EC2NodeClass are named <cluster>_<hash> "
        "(nodeflow.aws.ec2.instance_profiles): the prefix is the cluster's, creation requires the cluster's "
        "tags and role changes require them on the profile."
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:iam::<AWS::AccountId>:instance-profile/karpenter/*/{}/*]": (
        "Read only (GetInstanceProfile): the instance profiles Karpenter created for this cluster's EC2NodeClasses "
        "(path /karpenter/<region>/<cluster>/<uid>/), which an adopted EC2NodeClass keeps while they hold its role."
    ),
    "AwsSolutions-IAM5[Resource::<{}.Arn>:*]": (
        "The EventBridge Scheduler target grant of CDK covers the versions of this one function (it invokes $LATEST)."
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:{}:*]": (
        "Executions are named after their NodeClaims, known only at run time: DescribeExecution on the executions "
        "of this one state machine (start_workflow checks whether the last run of a NodeClaim failed)."
    ),
    "AwsSolutions-SQS3": (
        "This queue is a dead-letter queue, of EventBridge rule targets (events-dlq) or of EventBridge Scheduler "
        "targets (schedules-dlq): they name it in their DeadLetterConfig, which cdk-nag does not see as a DLQ use "
        "(it only looks for an SQS RedrivePolicy). A DLQ has no DLQ of its own; its depth alarms."
    ),
    "AwsSolutions-SMG4": (
        "The HMAC secret is shared with the in-cluster agent (a Kubernetes Secret): rotation is a manual, "
        "two-step change (the webhook accepts every secret listed, one per line, during the switch)."
    ),
}


def add_checks(app: App) -> None:
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def acknowledge(construct: IConstruct, finding: str, reason: str) -> None:
    if not reason.strip():
        raise ValueError(f"cdk-nag: acknowledging {finding} needs a reason")
    Validations.of(construct).acknowledge(Acknowledgment(id=f"AwsSolutions::{finding}", reason=reason))


def _ack(construct: IConstruct, key: str, *fill: str) -> None:
    acknowledge(construct, key.format(*fill), REASONS[key])


def _logical_id(construct: IConstruct) -> str:
    stack = Stack.of(construct)
    return str(stack.resolve(stack.get_logical_id(construct.node.default_child)))  # type: ignore[arg-type]


def acknowledge_findings(stack: Stack) -> None:
    """The findings this stack has on purpose (see ``REASONS``)."""
    from infra.iam import NODE_ROLE_MANAGED_POLICIES
    from infra.stack import NodeflowStack

    assert isinstance(stack, NodeflowStack)
    functions = stack.functions
    for fn in functions.functions.values():
        _ack(fn, "AwsSolutions-L1")
    for role in functions.roles.values():
        _ack(role, "AwsSolutions-IAM5[Resource::*]")
        if stack.config.lambda_vpc_id is not None:
            _ack(
                role,
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaVPCAccessExecutionRole]",
            )
    for machine in stack.workflows.machines.values():
        _ack(machine, "AwsSolutions-IAM5[Resource::*]")

    def roles_using(use: str) -> list[IConstruct]:
        return [functions.roles[suffix] for suffix, spec in functions.specs.items() if use in spec.uses]

    for granted in roles_using("nodeclass"):
        _ack(granted, "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:<AWS::Region>::parameter/aws/service/*]")
        _ack(
            granted,
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:iam::<AWS::AccountId>:instance-profile/{}_*]",
            stack.config.cluster_name,
        )
        _ack(
            granted,
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:iam::<AWS::AccountId>:instance-profile/karpenter/*/{}/*]",
            stack.config.cluster_name,
        )
    # Launching roles, and the roles that validate EC2NodeClasses with dry runs of the same launch calls (IAM judges
    # a DryRun call as the real one, so they hold the same statements: ``Permissions.launch_dry_run``).
    for granted in roles_using("fleet") + [r for r in roles_using("nodeclass") if r not in roles_using("fleet")]:
        for key in (
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::image/*]",
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::snapshot/*]",
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:*:subnet/*]",
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:*:security-group/*]",
        ):
            _ack(granted, key)
        for kind in ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request"):
            _ack(granted, _OWNED_EC2, kind)
    for granted in roles_using("ec2:terminate"):
        _ack(granted, _OWNED_EC2, "instance")
    for dlq in stack.queues.delivery_dead_letter_queues.values():
        _ack(dlq, "AwsSolutions-SQS3")

    if stack.node_role.created:
        for policy in NODE_ROLE_MANAGED_POLICIES:
            _ack(stack.node_role, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{}]", policy)
    for scheduler_role in _scheduler_roles(stack):
        for suffix in functions.schedules:
            _ack(scheduler_role, "AwsSolutions-IAM5[Resource::<{}.Arn>:*]", _logical_id(functions.functions[suffix]))
    for suffix, spec in functions.specs.items():
        for use in spec.uses:
            if use.startswith("watch:"):
                _ack(
                    functions.roles[suffix],
                    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:"
                    "execution:{}:*]",
                    stack.config.name(use.split(":", 1)[1], limit=80),
                )
    if functions.secret is not None:
        _ack(functions.secret, "AwsSolutions-SMG4")


def _scheduler_roles(stack: Stack) -> Iterable[IConstruct]:
    """The roles CDK's scheduler targets create at the stack's root (``SchedulerRoleForTarget-<hash>``)."""
    return [c for c in stack.node.children if c.node.id.startswith("SchedulerRoleForTarget")]
