"""IAM in the synthesized stacks: least privilege, statement by statement."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from infra.functions import FUNCTIONS
from tests.infra.conftest import Synthesized
from tests.infra.helpers import actions_of, as_list, function_named, ref_of, role_statements, statements

# Actions that have no resource-level permissions (the only ones allowed on Resource "*").
STAR_RESOURCE_ACTIONS = re.compile(
    r"^(ec2:Describe[A-Za-z]+|pricing:GetProducts|xray:(PutTraceSegments|PutTelemetryRecords|GetSampling\w+)"
    r"|logs:(CreateLogDelivery|GetLogDelivery|UpdateLogDelivery|DeleteLogDelivery|ListLogDeliveries"
    r"|PutResourcePolicy|DescribeResourcePolicies|DescribeLogGroups))$"
)
WHICH = ["default", "full"]
ROOT = Path(__file__).resolve().parents[2]


def _all_statements(synthesized: Synthesized, which: str) -> list[dict[str, Any]]:
    res = synthesized.resources(which)
    out = [st for _, st in statements(synthesized.resources(which, "AWS::IAM::Policy"))]
    for role in (r for r in res.values() if r["Type"] == "AWS::IAM::Role"):
        for policy in role["Properties"].get("Policies", []):
            out.extend(policy["PolicyDocument"]["Statement"])
    return out


def _function_role_statements(synthesized: Synthesized, which: str, suffix: str) -> list[dict[str, Any]]:
    res = synthesized.resources(which)
    cluster = synthesized.stacks[which].config.cluster_name
    _, fn = function_named(res, f"nodeflow-{cluster}-{suffix}")
    return role_statements(res, ref_of(fn["Properties"]["Role"]) or "")


def _actions(stmts: list[dict[str, Any]]) -> set[str]:
    return {a for st in stmts for a in actions_of(st)}


@pytest.mark.parametrize("which", WHICH)
def test_no_wildcard_actions_except_describe(synthesized: Synthesized, which: str) -> None:
    for st in _all_statements(synthesized, which):
        for action in actions_of(st):
            assert action != "*"
            if "*" in action:
                assert re.fullmatch(r"[a-z0-9-]+:Describe\*", action), action


@pytest.mark.parametrize("which", WHICH)
def test_resource_star_only_for_actions_without_resource_level_permissions(
    synthesized: Synthesized, which: str
) -> None:
    for st in _all_statements(synthesized, which):
        if st["Effect"] == "Allow" and "*" in as_list(st.get("Resource", [])):
            bad = [a for a in actions_of(st) if not STAR_RESOURCE_ACTIONS.match(a)]
            assert bad == [], f"granted on '*': {bad}"
        if any(a.startswith("ec2:Describe") for a in actions_of(st)):
            assert st["Condition"] == {"StringEquals": {"aws:RequestedRegion": {"Ref": "AWS::Region"}}}


@pytest.mark.parametrize("which", WHICH)
def test_pass_role_only_for_the_node_role_only_to_ec2(synthesized: Synthesized, which: str) -> None:
    res = synthesized.resources(which)
    passes = [st for st in _all_statements(synthesized, which) if "iam:PassRole" in actions_of(st)]
    # the functions that resolve EC2NodeClasses (adding the role to an instance profile) or launch, one each
    passing = [s.suffix for s in FUNCTIONS if {"nodeclass", "fleet"} & set(s.uses)]
    assert sorted(passing) == ["gc", "launch", "provisioner"]
    assert len(passes) == len(passing)
    for st in passes:
        assert actions_of(st) == ["iam:PassRole"]
        assert st["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
        (resource,) = as_list(st["Resource"])
        if which == "default":
            node_role = ref_of(resource)
            assert res[node_role or ""]["Properties"]["RoleName"] == "KarpenterNodeRole-demo"
        else:
            assert resource == {
                "Fn::Join": [
                    "",
                    ["arn:", {"Ref": "AWS::Partition"}, ":iam::", {"Ref": "AWS::AccountId"}, ":role/prod-east-nodes"],
                ]
            }
    for suffix in passing:
        assert any(st in passes for st in _function_role_statements(synthesized, which, suffix)), suffix


@pytest.mark.parametrize("which", WHICH)
def test_ec2_writes_are_conditioned_on_the_cluster_tags(synthesized: Synthesized, which: str) -> None:
    cluster = synthesized.stacks[which].config.cluster_name
    owned_request = f"aws:RequestTag/kubernetes.io/cluster/{cluster}"
    owned_resource = f"aws:ResourceTag/kubernetes.io/cluster/{cluster}"
    inputs = ("::image/*", "::snapshot/*", ":*:subnet/*", ":*:security-group/*")
    seen = set()
    for st in _all_statements(synthesized, which):
        writes = [a for a in actions_of(st) if a.startswith("ec2:") and not a.startswith("ec2:Describe")]
        if not writes:
            continue
        seen |= set(writes)
        resources = [str(r) for r in as_list(st["Resource"])]
        cond = st.get("Condition", {})
        if all(any(i in r for i in inputs) for r in resources):
            assert set(writes) == {"ec2:RunInstances", "ec2:CreateFleet"}  # read-only inputs of a launch
            continue
        equals = cond.get("StringEquals", {})
        if "ec2:DeleteLaunchTemplate" in writes:
            assert writes == ["ec2:DeleteLaunchTemplate"], st
            assert all("launch-template/*" in r for r in resources), st
            assert equals == {owned_resource: "owned", "aws:ResourceTag/eks:eks-cluster-name": cluster}, st
            assert cond["StringLike"] == {
                "aws:ResourceTag/karpenter.sh/nodepool": "*",
                "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
            }
        elif "ec2:TerminateInstances" in writes or resources == [str(r) for r in resources if "launch-template" in r]:
            assert equals.get(owned_resource) == "owned", st
            assert cond["StringLike"] == {"aws:ResourceTag/karpenter.sh/nodepool": "*"}
        else:
            assert equals.get(owned_request) == "owned", st
            assert equals.get("aws:RequestTag/eks:eks-cluster-name") == cluster
            assert cond["StringLike"] == {"aws:RequestTag/karpenter.sh/nodepool": "*"}
            if writes == ["ec2:CreateTags"]:
                assert equals["ec2:CreateAction"] == ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]
    assert seen == {
        "ec2:RunInstances",
        "ec2:CreateFleet",
        "ec2:CreateLaunchTemplate",
        "ec2:CreateTags",
        "ec2:TerminateInstances",
        "ec2:DeleteLaunchTemplate",
    }


@pytest.mark.parametrize("which", WHICH)
def test_only_gc_deletes_launch_templates_and_only_the_clusters_own(synthesized: Synthesized, which: str) -> None:
    """ec2:DeleteLaunchTemplate: granted to the gc function alone, in one statement, on launch templates that carry
    the cluster's ownership tags, a NodePool's and an EC2NodeClass's (what nodeflow.aws.ec2.launch_templates
    selects); a template of another cluster or one without these tags cannot be deleted."""
    cluster = synthesized.stacks[which].config.cluster_name
    granted = {
        s.suffix
        for s in FUNCTIONS
        if "ec2:DeleteLaunchTemplate" in _actions(_function_role_statements(synthesized, which, s.suffix))
    }
    assert granted == {"gc"}
    (st,) = [st for st in _all_statements(synthesized, which) if "ec2:DeleteLaunchTemplate" in actions_of(st)]
    assert st["Effect"] == "Allow"
    assert actions_of(st) == ["ec2:DeleteLaunchTemplate"]
    (resource,) = as_list(st["Resource"])
    assert "launch-template/*" in str(resource)
    assert st["Condition"] == {
        "StringEquals": {
            f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned",
            "aws:ResourceTag/eks:eks-cluster-name": cluster,
        },
        "StringLike": {
            "aws:ResourceTag/karpenter.sh/nodepool": "*",
            "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
        },
    }


@pytest.mark.parametrize("suffix", ["launch", "provisioner", "gc"])
def test_instance_profiles_and_ssm_are_scoped(synthesized: Synthesized, suffix: str) -> None:
    stmts = _function_role_statements(synthesized, "default", suffix)
    assert any("iam:AddRoleToInstanceProfile" in actions_of(st) for st in stmts)
    for st in stmts:
        acts = actions_of(st)
        if acts == ["iam:GetInstanceProfile"]:  # reads its own, and those Karpenter made for the cluster (adoption)
            ends = sorted(r["Fn::Join"][1][-1] for r in as_list(st["Resource"]))
            assert ends == [":instance-profile/demo_*", ":instance-profile/karpenter/*/demo/*"]
        elif any(a.startswith("iam:") and a != "iam:PassRole" for a in acts):
            (resource,) = as_list(st["Resource"])
            assert resource["Fn::Join"][1][-1] == ":instance-profile/demo_*"
        if any(a.startswith("ssm:") for a in acts):
            assert set(acts) == {"ssm:GetParameter", "ssm:GetParameters"}
            (resource,) = as_list(st["Resource"])
            assert resource["Fn::Join"][1][-1] == "::parameter/aws/service/*"
        if "iam:CreateInstanceProfile" in acts:
            assert st["Condition"]["StringEquals"]["aws:RequestTag/kubernetes.io/cluster/demo"] == "owned"
        if "iam:AddRoleToInstanceProfile" in acts:
            assert st["Condition"]["StringEquals"]["aws:ResourceTag/kubernetes.io/cluster/demo"] == "owned"


# Resolving EC2NodeClasses (the "nodeclass" use: launch, provisioner, gc).
NODECLASS_ACTIONS = {
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeImages",
    "ec2:DescribePlacementGroups",  # placementGroupSelector
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ssm:GetParameter",
    "ssm:GetParameters",
    "iam:PassRole",
    "iam:GetInstanceProfile",
    "iam:CreateInstanceProfile",
    "iam:TagInstanceProfile",
    "iam:AddRoleToInstanceProfile",
    "iam:RemoveRoleFromInstanceProfile",
    # EC2NodeClass validation: dry runs of the launch calls (evaluated by IAM as the real ones), the class's template
    "ec2:CreateLaunchTemplate",
    "ec2:CreateFleet",
    "ec2:RunInstances",
    "ec2:CreateTags",
    "ec2:DescribeLaunchTemplates",
}
# function -> the AWS actions its role may have (beyond logs for its own log group and X-Ray)
EXPECTED_ACTIONS = {
    "provisioner": {
        *NODECLASS_ACTIONS,
        "eks:DescribeCluster",
        "ec2:DescribeAvailabilityZones",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeSpotPriceHistory",
        "pricing:GetProducts",
        "dynamodb:Query",
        "dynamodb:BatchWriteItem",  # the decision log's table only (tests/infra/test_decisions.py)
        "states:StartExecution",
        "sqs:ReceiveMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueUrl",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:SendMessage",  # its own queue only: the retry of pods a pause window holds
    },
    "register": {"eks:DescribeCluster"},
    "initialize": {"eks:DescribeCluster"},
    "cleanup": {
        "eks:DescribeCluster",
        "ec2:DescribeInstances",
        "ec2:TerminateInstances",
        "sqs:SendMessage",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
    },
    "webhook": {"events:PutEvents", "dynamodb:PutItem", "dynamodb:BatchWriteItem"},
    "taint": {"eks:DescribeCluster"},
    "drain": {
        "eks:DescribeCluster",
        "ec2:DescribeInstances",
        "states:StartExecution",  # a long drain continues in a new terminate execution
        "states:DescribeExecution",
    },
    "terminate": {"eks:DescribeCluster", "ec2:DescribeInstances", "ec2:TerminateInstances"},
    "finalize": {"eks:DescribeCluster"},
    "interruption": {
        "eks:DescribeCluster",
        "ec2:DescribeInstanceStatus",  # the status checks it polls every minute
        "dynamodb:Query",
        "dynamodb:BatchWriteItem",
        "states:StartExecution",
        "states:DescribeExecution",
        "sqs:ReceiveMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueUrl",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
    },
    "disruption": {
        "eks:DescribeCluster",
        "ec2:DescribeAvailabilityZones",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeSpotPriceHistory",
        "pricing:GetProducts",
        "dynamodb:Query",
        "dynamodb:BatchWriteItem",  # the decision log's table only
        "states:StartExecution",
        "states:DescribeExecution",
        "sqs:ReceiveMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueUrl",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
    },
    "replace": {"eks:DescribeCluster", "states:StartExecution", "states:DescribeExecution"},
    "install": {"eks:DescribeCluster"},  # the cluster check; its cluster access is an EKS access entry
}
BASE = {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments", "xray:PutTelemetryRecords"}


def test_each_function_role_has_only_what_its_handler_calls(synthesized: Synthesized) -> None:
    present = {s.suffix for s in FUNCTIONS}
    assert present - {"launch", "gc"} <= set(EXPECTED_ACTIONS), "add the new function's actions to EXPECTED_ACTIONS"
    for suffix, expected in EXPECTED_ACTIONS.items():
        if suffix not in present:
            continue
        assert _actions(_function_role_statements(synthesized, "default", suffix)) == expected | BASE, suffix
    # gc: cleanup's actions and resolving EC2NodeClasses
    assert (
        _actions(_function_role_statements(synthesized, "default", "gc"))
        == _actions(_function_role_statements(synthesized, "default", "cleanup"))
        | NODECLASS_ACTIONS
        | {"states:DescribeExecution"}  # launches that ended without cleaning up
        | {"ec2:DescribeLaunchTemplates", "ec2:DeleteLaunchTemplate"}  # launch templates nothing uses
    )
    # launch: resolving its EC2NodeClass and launching (fleet)
    launch = _actions(_function_role_statements(synthesized, "default", "launch"))
    assert launch >= NODECLASS_ACTIONS
    assert {"ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate", "ec2:CreateTags"} <= launch
    # Endpoint and CA given, offline catalog: no eks:DescribeCluster, no catalog reads.
    full = _actions(_function_role_statements(synthesized, "full", "provisioner"))
    assert "eks:DescribeCluster" not in full
    assert "pricing:GetProducts" not in full
    assert "ec2:DescribeInstanceTypes" not in full


def test_the_provisioner_sends_only_to_its_own_queue(synthesized: Synthesized) -> None:
    """Its retry of pods a pause window holds: SendMessage on the queue it consumes, nothing else."""
    stmts = _function_role_statements(synthesized, "default", "provisioner")
    sends = [ref_of(r) for st in stmts if "sqs:SendMessage" in actions_of(st) for r in as_list(st["Resource"])]
    receives = [ref_of(r) for st in stmts if "sqs:ReceiveMessage" in actions_of(st) for r in as_list(st["Resource"])]
    assert sends
    assert sends == receives


def test_watching_executions_is_limited_to_the_machine(synthesized: Synthesized) -> None:
    if "interruption" not in {s.suffix for s in FUNCTIONS}:
        pytest.skip("no interruption function yet")
    (st,) = [
        s
        for s in _function_role_statements(synthesized, "default", "interruption")
        if "states:DescribeExecution" in actions_of(s)
    ]
    (resource,) = as_list(st["Resource"])
    assert resource["Fn::Join"][1][-1] == ":execution:nodeflow-demo-terminate:*"


def test_logs_are_written_only_to_the_functions_own_log_group(synthesized: Synthesized) -> None:
    res = synthesized.resources("default")
    for spec in FUNCTIONS:
        _, fn = function_named(res, f"nodeflow-demo-{spec.suffix}")
        own = ref_of(fn["Properties"]["LoggingConfig"]["LogGroup"])
        for st in role_statements(res, ref_of(fn["Properties"]["Role"]) or ""):
            if any(a.startswith("logs:") for a in actions_of(st)):
                assert [ref_of(r) for r in as_list(st["Resource"])] == [own]


def test_dynamodb_access_is_per_partition(synthesized: Synthesized) -> None:
    from nodeflow.aws.dedup import EVENT_PARTITION, NONCE_PARTITION
    from nodeflow.aws.offerings import PARTITION

    expected = {
        "provisioner": [PARTITION],
        "launch": [PARTITION],
        "interruption": [PARTITION],
        "disruption": [PARTITION],
        "webhook": [NONCE_PARTITION, EVENT_PARTITION],
    }
    for suffix, partitions in expected.items():
        if suffix not in {s.suffix for s in FUNCTIONS}:
            continue
        for st in _function_role_statements(synthesized, "default", suffix):
            if any(a.startswith("dynamodb:") for a in actions_of(st)) and st.get("Sid") != "DecisionLog":
                assert st["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": partitions}}


@pytest.mark.parametrize("which", WHICH)
def test_function_roles_have_no_managed_policies_outside_a_vpc(synthesized: Synthesized, which: str) -> None:
    res = synthesized.resources(which)
    cluster = synthesized.stacks[which].config.cluster_name
    for spec in FUNCTIONS:
        _, fn = function_named(res, f"nodeflow-{cluster}-{spec.suffix}")
        role = res[ref_of(fn["Properties"]["Role"]) or ""]["Properties"]
        managed = [str(m) for m in role.get("ManagedPolicyArns", [])]
        if which == "default":
            assert managed == []
        else:  # in a VPC: the ENI permissions Lambda needs, and nothing else
            assert len(managed) == 1
            assert "AWSLambdaVPCAccessExecutionRole" in managed[0]
        trust = role["AssumeRolePolicyDocument"]["Statement"]
        assert [s["Principal"] for s in trust] == [{"Service": "lambda.amazonaws.com"}]


def _ec2_operations_called() -> dict[str, set[str]]:
    """EC2 action -> the nodeflow modules naming its boto3 operation (a call, a paginator or a string)."""
    model = botocore.session.get_session().get_service_model("ec2")
    snake = {re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower(): op for op in model.operation_names}
    found: dict[str, set[str]] = {}
    for path in (ROOT / "functions" / "nodeflow").rglob("*.py"):
        for name in re.findall(r"[\"'.]([a-z]+(?:_[a-z0-9]+)+)[\"'(]", path.read_text()):
            if name in snake:
                found.setdefault(f"ec2:{snake[name]}", set()).add(path.name)
    return found


def test_every_ec2_operation_the_functions_call_is_granted(synthesized: Synthesized) -> None:
    """An EC2 call no role may make fails only when deployed (UnauthorizedOperation): each operation named in the
    Lambda code is granted to some function role in the default stack (live catalog; which role:
    test_each_function_role_has_only_what_its_handler_calls)."""
    called = _ec2_operations_called()
    assert "ec2:CreateFleet" in called  # the scan sees the code
    granted = _actions(_all_statements(synthesized, "default"))
    missing = {action: sorted(where) for action, where in called.items() if action not in granted}
    assert not missing, f"EC2 operations called but granted to no role: {missing}"
