"""The doctor's AWS-side checks, each passed once and failed once against a stack deployed in moto
(tests/functional/doctor/stack.py): the readers of nodeflow.doctor.aws_facts gather the facts from moto (and from
botocore's Stubber for the calls moto has no answer to), the pure decisions of nodeflow.doctor.checks judge them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from nodeflow.doctor import aws_facts
from nodeflow.doctor import checks as c
from nodeflow.doctor.aws_facts import DoctorInputError, StackResources, read_stack
from nodeflow.doctor.checks import Status, Unreadable
from sandbox.aws import AwsWorld, Clients
from sandbox.function_url import FunctionUrlServer
from tests.functional.doctor.stack import (
    MOTO_LAMBDA_VPC,
    Aws,
    DoctorStack,
    accepted,
    account_settings,
    deploy,
    describe_cluster,
    ec2_quota,
    run_execution,
    sfn_quotas,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:moto.cloudformation.parsing")

SPOT = c.NodePoolFact("spot", frozenset({"spot", "on-demand"}), Decimal(64))
ON_DEMAND = c.NodePoolFact("general", frozenset({"on-demand"}), Decimal(100))


def resources(aws: Aws, stack: DoctorStack) -> StackResources:
    return read_stack(aws, stack.name, "us-east-1")


def node_class(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": spec}


# --- the stack ------------------------------------------------------------------------------------


def test_the_stack_is_read_from_its_outputs_template_and_resources(aws: Aws, stack: DoctorStack) -> None:
    found = resources(aws, stack)
    assert found.info == c.StackInfo(
        name="Nodeflow-demo",
        region="us-east-1",
        cluster_name="demo",
        webhook_url=stack.webhook.url,
        webhook_auth="iam",
        node_role_name="KarpenterNodeRole-demo",
        node_instance_profile="Nodeflow-demo-NodeRoleInstanceProfile",
        access_entries=True,
    )
    assert sorted(p for _, p in found.of_type("AWS::Lambda::Function")) == sorted(stack.functions)
    assert found.state_machines == stack.machines


def test_an_unknown_or_foreign_stack_is_bad_input_naming_it(aws: Aws, clients: Clients) -> None:
    with pytest.raises(DoctorInputError, match=r"--stack: 'Nodeflow-nope' was not found in us-east-1"):
        read_stack(aws, "Nodeflow-nope", "us-east-1")
    clients("cloudformation").create_stack(
        StackName="Other", TemplateBody='{"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}}'
    )
    with pytest.raises(DoctorInputError, match=r"--stack: 'Other' has no output ClusterName"):
        read_stack(aws, "Other", "us-east-1")


def test_a_stack_whose_resources_cannot_be_listed_is_bad_input_saying_why(aws: Aws, stack: DoctorStack) -> None:
    cfn = aws.stub("cloudformation")
    described = aws.moto("cloudformation").describe_stacks(StackName=stack.name)
    cfn.add_response("describe_stacks", {"Stacks": described["Stacks"]}, {"StackName": stack.name})
    cfn.add_client_error(
        "get_template",
        service_error_code="AccessDenied",
        service_message="User: arn:aws:iam::123456789012:user/dev is not authorized to perform: "
        "cloudformation:GetTemplate",
    )
    with pytest.raises(
        DoctorInputError,
        match=r"--stack: 'Nodeflow-demo': its template and resources could not be "
        r"read: GetTemplate: AccessDenied: User: .* cloudformation:GetTemplate",
    ):
        read_stack(aws, stack.name, "us-east-1")


# --- before install -------------------------------------------------------------------------------


def test_auth_mode(aws: Aws, stack: DoctorStack) -> None:
    info = resources(aws, stack).info
    describe_cluster(aws, "demo", stack.world.vpc_id)
    assert c.auth_mode(aws_facts.cluster(aws, resources(aws, stack)), info).status is Status.OK
    describe_cluster(aws, "demo", stack.world.vpc_id, auth="CONFIG_MAP")
    check = c.auth_mode(aws_facts.cluster(aws, resources(aws, stack)), info)
    assert check.status is Status.FAIL  # the stack made access entries: they are refused
    assert "authenticationMode=API_AND_CONFIG_MAP" in (check.action or "")
    aws.assert_answered()


def test_endpoint_access(aws: Aws, stack: DoctorStack) -> None:
    found = resources(aws, stack)
    lambdas = aws_facts.lambdas(aws, found)
    assert lambdas == c.LambdaFacts(functions=3, vpc_ids=frozenset(), reserved=11)
    describe_cluster(aws, "demo", stack.world.vpc_id)
    assert c.endpoint_access(aws_facts.cluster(aws, found), lambdas, found.info).status is Status.OK
    describe_cluster(aws, "demo", stack.world.vpc_id, cidrs=("203.0.113.0/24",), private=True)
    check = c.endpoint_access(aws_facts.cluster(aws, found), lambdas, found.info)
    assert check.status is Status.FAIL
    assert check.detail == (
        "the 3 Lambdas run outside a VPC (from AWS's public addresses); public endpoint open to 203.0.113.0/24, "
        "which does not admit AWS's Lambda addresses"
    )
    aws.assert_answered()


def test_endpoint_access_from_the_clusters_vpc(aws: Aws, clients: Clients, world: AwsWorld) -> None:
    stack = deploy(clients, world, lambda_vpc=True)
    try:
        found = resources(aws, stack)
        lambdas = aws_facts.lambdas(aws, found)
        assert lambdas.vpc_ids == {MOTO_LAMBDA_VPC}  # type: ignore[union-attr]
        describe_cluster(aws, "demo", MOTO_LAMBDA_VPC, public=False, private=True)
        assert c.endpoint_access(aws_facts.cluster(aws, found), lambdas, found.info).status is Status.OK
        describe_cluster(aws, "demo", MOTO_LAMBDA_VPC, public=False, private=False)
        assert c.endpoint_access(aws_facts.cluster(aws, found), lambdas, found.info).status is Status.FAIL
    finally:
        stack.webhook.stop()


def test_subnets_and_security_groups(aws: Aws, stack: DoctorStack, clients: Clients) -> None:
    found = resources(aws, stack)
    # No EC2NodeClass yet: what the discovery tag selects.
    default = aws_facts.node_classes(aws, [], found)
    assert c.subnets(default, found.info).status is Status.OK
    assert c.security_groups(default, found.info).status is Status.OK
    assert [s.id for s in default[0].subnets] == sorted(stack.world.subnets.values())  # type: ignore[union-attr]

    other_vpc = clients.ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    stray = clients.ec2.create_security_group(GroupName="stray", Description="elsewhere", VpcId=other_vpc)["GroupId"]
    classes = aws_facts.node_classes(
        aws,
        [
            node_class(
                "tagged",
                subnetSelectorTerms=[{"tags": {"karpenter.sh/discovery": "demo"}}],
                securityGroupSelectorTerms=[{"id": stray}],
            ),
            node_class(
                "typo",
                subnetSelectorTerms=[{"tags": {"karpenter.sh/discovery": "dmeo"}}],
                securityGroupSelectorTerms=[{"tags": {"karpenter.sh/discovery": "demo"}}],
            ),
        ],
        found,
    )
    check = c.subnets(classes, found.info)
    assert check.status is Status.FAIL
    assert "EC2NodeClass typo: selects no available subnet" in check.detail
    assert check.action == (
        "fix spec.subnetSelectorTerms of EC2NodeClass typo, or tag the subnets it should select "
        "(kubectl get ec2nodeclass typo -o yaml)"
    )
    check = c.security_groups(classes, found.info)
    assert check.status is Status.FAIL
    assert f"EC2NodeClass tagged: {stray} in {other_vpc}, the subnets in {stack.world.vpc_id}" in check.detail


def test_subnets_without_free_addresses(aws: Aws, stack: DoctorStack, clients: Clients) -> None:
    small = clients.ec2.create_subnet(
        VpcId=stack.world.vpc_id, CidrBlock="10.0.200.0/28", AvailabilityZone="us-east-1a"
    )
    clients.ec2.create_tags(Resources=[small["Subnet"]["SubnetId"]], Tags=[{"Key": "pool", "Value": "tiny"}])
    found = resources(aws, stack)
    classes = aws_facts.node_classes(aws, [node_class("tiny", subnetSelectorTerms=[{"tags": {"pool": "tiny"}}])], found)
    check = c.subnets(classes, found.info)
    assert check.status is Status.WARN
    assert check.detail == (
        "EC2NodeClass tiny: 1 subnet(s) in 1 zone(s) (us-east-1a), 11 free IPs: below 256, a burst runs out of addresses"
    )


def test_node_role(aws: Aws, stack: DoctorStack, clients: Clients) -> None:
    found = resources(aws, stack)
    classes = aws_facts.node_classes(aws, [node_class("default", role="KarpenterNodeRole-demo")], found)
    check = c.node_role(aws_facts.node_role(aws, found, classes), classes, found.info)
    assert (check.status, check.detail) == (
        Status.OK,
        "node role KarpenterNodeRole-demo exists, trusted by ec2.amazonaws.com; instance profile "
        "Nodeflow-demo-NodeRoleInstanceProfile holds it",
    )
    clients.iam.remove_role_from_instance_profile(
        InstanceProfileName=stack.instance_profile, RoleName="KarpenterNodeRole-demo"
    )
    check = c.node_role(aws_facts.node_role(aws, found, classes), classes, found.info)
    assert check.status is Status.FAIL
    assert check.action == (
        "aws iam add-role-to-instance-profile --instance-profile-name Nodeflow-demo-NodeRoleInstanceProfile "
        "--role-name KarpenterNodeRole-demo"
    )
    missing = aws_facts.node_classes(aws, [node_class("custom", instanceProfile="nope")], found)
    facts = aws_facts.node_role(aws, found, missing)
    assert facts.class_profiles == {"nope": c.ProfileFact("nope", False)}  # type: ignore[union-attr]


def test_spot_service_linked_role(aws: Aws, stack: DoctorStack, clients: Clients) -> None:
    check = c.spot_slr(aws_facts.spot_slr(aws), (ON_DEMAND, SPOT))
    assert check.status is Status.FAIL
    assert check.detail == "AWSServiceRoleForEC2Spot is missing; NodePools spot allow spot"
    # As IAM names it (moto's create_service_linked_role would call it AWSServiceRoleForSpot).
    clients.iam.create_role(
        RoleName="AWSServiceRoleForEC2Spot",
        Path="/aws-service-role/spot.amazonaws.com/",
        AssumeRolePolicyDocument='{"Version": "2012-10-17", "Statement": []}',
    )
    assert c.spot_slr(aws_facts.spot_slr(aws), (ON_DEMAND, SPOT)).status is Status.OK


def test_vcpu_quotas(aws: Aws) -> None:
    ec2_quota(aws, "L-1216C47A", 640)
    check = c.vcpu_quota(
        "quota-on-demand-vcpus", aws_facts.vcpu_quota(aws, "L-1216C47A"), (ON_DEMAND,), "on-demand", "L-1216C47A"
    )
    assert (check.status, check.detail) == (Status.OK, "640 vCPUs, at least the NodePools' cpu limits (100)")
    ec2_quota(aws, "L-34B43A08", None, default=0)  # never raised: the account's default, here 0
    check = c.vcpu_quota(
        "quota-spot-vcpus", aws_facts.vcpu_quota(aws, "L-34B43A08"), (ON_DEMAND, SPOT), "spot", "L-34B43A08"
    )
    assert (check.status, check.detail) == (
        Status.FAIL,
        "0 vCPUs: no spot node can launch, and NodePools spot launch spot",
    )
    ec2_quota(aws, "L-1216C47A", 0)  # a new account's, before any increase
    check = c.vcpu_quota(
        "quota-on-demand-vcpus", aws_facts.vcpu_quota(aws, "L-1216C47A"), (ON_DEMAND,), "on-demand", "L-1216C47A"
    )
    assert check.status is Status.FAIL
    ec2_quota(aws, "L-34B43A08", 640)
    check = c.vcpu_quota(
        "quota-spot-vcpus", aws_facts.vcpu_quota(aws, "L-34B43A08"), (ON_DEMAND, SPOT), "spot", "L-34B43A08"
    )
    assert (check.status, check.detail) == (Status.OK, "640 vCPUs, at least the NodePools' cpu limits (64)")
    aws.assert_answered()


def test_a_quota_that_cannot_be_read_is_a_warning_naming_the_error(aws: Aws) -> None:
    aws.stub("service-quotas").add_client_error(
        "get_service_quota",
        service_error_code="AccessDeniedException",
        service_message="User: arn:aws:iam::123456789012:user/dev is not authorized to perform: servicequotas:GetServiceQuota",
    )
    check = c.vcpu_quota(
        "quota-on-demand-vcpus", aws_facts.vcpu_quota(aws, "L-1216C47A"), (), "on-demand", "L-1216C47A"
    )
    assert check.status is Status.WARN
    assert check.detail.startswith("could not be checked: GetServiceQuota: AccessDeniedException: User: ")
    assert check.action == "allow servicequotas:GetServiceQuota (ec2 L-1216C47A)"


def test_step_functions_start_rate(aws: Aws) -> None:
    sfn_quotas(aws, 1300, 300, applied=False)  # nothing applied: the defaults
    check = c.sfn_quota(aws_facts.sfn_quota(aws))
    assert (check.status, check.detail) == (
        Status.OK,
        "bucket 1300 executions, refilled 300/s (one execution per NodeClaim)",
    )
    sfn_quotas(aws, 50, 5)
    assert c.sfn_quota(aws_facts.sfn_quota(aws)).status is Status.WARN  # (it has no FAIL: it only slows a burst)
    aws.assert_answered()


def test_lambda_concurrency(aws: Aws, stack: DoctorStack) -> None:
    lambdas = aws_facts.lambdas(aws, resources(aws, stack))
    account_settings(aws, 1000, 989)
    check = c.lambda_concurrency(aws_facts.account_concurrency(aws), lambdas)
    assert (check.status, check.detail) == (
        Status.OK,
        "account limit 1000, 989 unreserved (the stack's functions reserve 11)",
    )
    account_settings(aws, 100, 89)
    assert c.lambda_concurrency(aws_facts.account_concurrency(aws), lambdas).status is Status.FAIL
    aws.assert_answered()


# --- after install --------------------------------------------------------------------------------


def test_dead_letter_queues(aws: Aws, stack: DoctorStack, clients: Clients) -> None:
    found = resources(aws, stack)
    dlqs = aws_facts.dlqs(aws, found)
    assert [q.name for q in dlqs] == [  # type: ignore[union-attr]
        "nodeflow-demo-disruption-dlq",
        "nodeflow-demo-events-dlq",
        "nodeflow-demo-interruption-dlq",
        "nodeflow-demo-provisioning-dlq",
    ]
    assert c.dlqs(dlqs).status is Status.OK
    clients.sqs.send_message(QueueUrl=stack.world.dlq_url, MessageBody='{"detail-type": "Pod Unschedulable"}')
    clients.sqs.send_message(QueueUrl=stack.delivery_dlq_url, MessageBody="{}")
    check = c.dlqs(aws_facts.dlqs(aws, found))
    assert (check.status, check.detail) == (
        Status.FAIL,
        "messages nodeflow gave up on: nodeflow-demo-events-dlq 1, nodeflow-demo-provisioning-dlq 1",
    )


def test_failed_executions_in_the_last_hour(aws: Aws, stack: DoctorStack, clients: Clients) -> None:
    found = resources(aws, stack)
    run_execution(clients, stack.machines["launch"], "ok-1", fail=False)
    assert c.failed_executions(aws_facts.failed_executions(aws, found, datetime.now(UTC))).status is Status.OK
    run_execution(clients, stack.machines["launch"], "general-abcde", fail=True)
    check = c.failed_executions(aws_facts.failed_executions(aws, found, datetime.now(UTC)))
    assert check.status is Status.WARN  # a launch without capacity: CleanUp ran, the pods are retried
    assert check.detail == (
        "1 launch FAILED in the last 60 min; latest general-abcde: NoCapacity (every offering was unavailable)"
    )
    run_execution(clients, stack.machines["terminate"], "ip-10-0-1-1", fail=True)
    check = c.failed_executions(aws_facts.failed_executions(aws, found, datetime.now(UTC)))
    assert check.status is Status.FAIL
    assert f"--execution-arn {stack.machines['terminate'].replace(':stateMachine:', ':execution:')}:ip-10-0-1-1" in (
        check.action or ""
    )
    # An hour later they are history.
    later = datetime.now(UTC) + timedelta(hours=1, minutes=1)
    assert c.failed_executions(aws_facts.failed_executions(aws, found, later)).status is Status.OK


def test_agent_forwarding_from_the_webhooks_metric(aws: Aws, stack: DoctorStack, clients: Clients) -> None:
    found = resources(aws, stack)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    pending = c.ClusterActivity(unschedulable_since=now - timedelta(minutes=30), unschedulable_pod="shop/web-1")
    check = c.agent_forwarding(aws_facts.forwarding(aws, found, now), pending, now)
    assert (check.status, check.detail) == (
        Status.FAIL,
        "no request accepted by the webhook in the last 6 h, yet pod shop/web-1 unschedulable for 30 min (re-sent "
        "every resync)",
    )
    accepted(clients, "other-cluster", now - timedelta(minutes=1))  # another cluster's webhook in the account
    assert c.agent_forwarding(aws_facts.forwarding(aws, found, now), pending, now).status is Status.FAIL
    accepted(clients, "demo", now - timedelta(minutes=3))
    check = c.agent_forwarding(aws_facts.forwarding(aws, found, now), pending, now)
    assert (check.status, check.detail) == (Status.OK, "last request accepted by the webhook 3 min ago")


@pytest.mark.parametrize("auth", ["iam", "hmac"])
def test_webhook_answers_an_unsigned_probe(auth: str, aws: Aws, clients: Clients, world: AwsWorld) -> None:
    stack = deploy(clients, world, webhook_auth=auth)
    try:
        info = resources(aws, stack).info
        probe = aws_facts.probe_webhook(stack.webhook.url)
        assert probe == c.ProbeResult(403 if auth == "iam" else 401)  # the Function URL's, or the function's own
        assert c.webhook(probe, info).status is Status.OK
        stack.webhook.outage(502)
        check = c.webhook(aws_facts.probe_webhook(stack.webhook.url), info)
        assert (check.status, check.action) == (
            Status.FAIL,
            "aws logs tail /aws/lambda/nodeflow-demo-webhook --since 1h",
        )
    finally:
        stack.webhook.stop()
    check = c.webhook(aws_facts.probe_webhook(stack.webhook.url, timeout=2), info)
    assert check.status is Status.FAIL
    assert check.detail.startswith(f"{stack.webhook.url} did not answer: ConnectionRefusedError")


def test_a_webhook_that_accepts_anyone_fails(aws: Aws, stack: DoctorStack) -> None:
    open_url = FunctionUrlServer(lambda event: {"statusCode": 202, "body": "{}"}, auth_type="NONE").start()
    try:
        info = replace(resources(aws, stack).info, webhook_url=open_url.url)
        check = c.webhook(aws_facts.probe_webhook(open_url.url), info)
    finally:
        open_url.stop()
    assert (check.status, check.detail) == (
        Status.FAIL,
        f"{open_url.url} accepted an unsigned request (202): anyone can post events",
    )


def test_a_stack_without_functions_or_machines_is_unreadable_not_guessed(aws: Aws, clients: Clients) -> None:
    clients("cloudformation").create_stack(
        StackName="Nodeflow-bare",
        TemplateBody='{"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}, "Outputs": {"ClusterName": {"Value": "bare"}}}',
    )
    found = read_stack(aws, "Nodeflow-bare", "us-east-1")
    assert aws_facts.lambdas(aws, found) == Unreadable("stack Nodeflow-bare lists no Lambda function")
    assert isinstance(aws_facts.failed_executions(aws, found, datetime.now(UTC)), Unreadable)
    assert c.webhook(None, found.info).status is Status.WARN
