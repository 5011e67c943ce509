"""A deployed nodeflow stack in moto for ``python -m nodeflow doctor``, and the few AWS answers moto cannot give.

``deploy`` builds on the sandbox's world (``sandbox.aws.build_world``: VPC, discovery-tagged subnets and security
group, node role, queues with their DLQs, table, bus): it adds what the CDK stack adds and the doctor reads (the node
role's instance profile, the launch / terminate / replace state machines, the webhook at a Function URL on
127.0.0.1 running the real webhook decision, Lambda functions with their reserved concurrency, a delivery DLQ) and
registers a CloudFormation stack ``Nodeflow-<cluster>`` whose outputs are named as infra/stack.py names them and
whose template holds the functions, the delivery DLQ and an EKS access entry (moto skips that type, warning).

``Aws`` is the doctor's ``service -> client``: moto's clients, except where moto 5.2.5 has no such API or field —
EKS DescribeCluster's ``accessConfig``, Service Quotas for ec2 and states, Lambda GetAccountSettings — which a
botocore ``Stubber`` answers with responses shaped as AWS's (validated against the service model).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.stub import Stubber

from nodeflow.aws.dedup import SeenRecords
from nodeflow.ingress.webhook import WebhookConfig, WebhookDeps, handle
from sandbox.aws import AwsWorld, Clients
from sandbox.function_url import FunctionUrlServer

CLUSTER_ENDPOINT = "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com"
MOTO_LAMBDA_VPC = "vpc-123abc"  # moto reports this VpcId for every function with security groups
WORKFLOW_DEFINITION = json.dumps(
    {
        "Comment": "ends as its input says: {'fail': {'Error': ..., 'Cause': ...}} fails with them",
        "StartAt": "Decide",
        "States": {
            "Decide": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.fail", "IsPresent": True, "Next": "Failed"}],
                "Default": "Done",
            },
            "Failed": {"Type": "Fail", "Error": "NoCapacity", "Cause": "every offering was unavailable"},
            "Done": {"Type": "Succeed"},
        },
    }
)


@dataclass
class DoctorStack:
    world: AwsWorld
    name: str
    webhook: FunctionUrlServer
    webhook_auth: str
    machines: dict[str, str]  # workflow -> ARN
    functions: list[str]
    instance_profile: str
    delivery_dlq_url: str
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def cluster(self) -> str:
        return self.world.cluster_name


def _invoke(world: AwsWorld, clients: Clients, auth: str) -> Any:
    """The webhook's own decision (``nodeflow.ingress.webhook.handle``) over moto's table; nothing reaches the bus
    in these tests, so publishing is refused loudly."""
    seen = SeenRecords(clients.dynamodb, world.table_name)

    def refuse(entries: Sequence[Any]) -> list[tuple[str, str]]:
        raise AssertionError("the doctor's probe must never reach the bus")

    deps = WebhookDeps(
        config=WebhookConfig(cluster=world.cluster_name, auth_mode=auth),
        now=time.time,
        secrets=lambda: (world.hmac_secret,),
        claim_nonce=seen.claim_nonce,
        claim_events=lambda ids, now: seen.claim_events(ids, now, lease_seconds=60, ttl_seconds=3600),
        confirm_events=lambda ids, now: seen.confirm_events(ids, now, 3600),
        release_events=seen.release_events,
        publish=refuse,
    )
    return lambda event: handle(deps, event).to_lambda()


def _function(name: str, role: str, reserved: int | None, vpc: dict[str, Any] | None) -> dict[str, Any]:
    props: dict[str, Any] = {
        "FunctionName": name,
        "Role": role,
        "Runtime": "python3.12",
        "Handler": "index.handler",
        "Code": {"ZipFile": "def handler(event, context):\n    return event\n"},
    }
    if reserved is not None:
        props["ReservedConcurrentExecutions"] = reserved
    if vpc is not None:
        props["VpcConfig"] = vpc
    return {"Type": "AWS::Lambda::Function", "Properties": props}


def deploy(clients: Clients, world: AwsWorld, *, webhook_auth: str = "iam", lambda_vpc: bool = False) -> DoctorStack:
    """What ``cdk deploy`` leaves in the account, as far as the doctor reads it (stop ``stack.webhook`` after)."""
    cluster = world.cluster_name
    iam, sfn = clients.iam, clients.sfn
    profile = f"Nodeflow-{cluster}-NodeRoleInstanceProfile"
    iam.create_instance_profile(InstanceProfileName=profile)
    iam.add_role_to_instance_profile(InstanceProfileName=profile, RoleName=world.node_role_name)
    machines = {
        workflow: sfn.create_state_machine(
            name=f"nodeflow-{cluster}-{workflow}",
            definition=WORKFLOW_DEFINITION,
            roleArn=world.state_machine_role_arn,
            type="STANDARD",
        )["stateMachineArn"]
        for workflow in ("launch", "replace", "terminate")
    }
    webhook = FunctionUrlServer(
        _invoke(world, clients, webhook_auth), auth_type="AWS_IAM" if webhook_auth == "iam" else "NONE"
    ).start()
    vpc = {"SubnetIds": list(world.subnets.values()), "SecurityGroupIds": [world.security_group_id]}
    functions = {  # reserved concurrency as infra/functions.py sets it
        "ProvisionerFunction": (f"nodeflow-{cluster}-provisioner", 1),
        "LaunchFunction": (f"nodeflow-{cluster}-launch", None),
        "WebhookFunction": (f"nodeflow-{cluster}-webhook", 10),
    }
    resources: dict[str, Any] = {
        logical: _function(name, world.lambda_role_arn, reserved, vpc if lambda_vpc else None)
        for logical, (name, reserved) in functions.items()
    }
    resources["QueuesEventsDeliveryDlq"] = {
        "Type": "AWS::SQS::Queue",
        "Properties": {"QueueName": f"nodeflow-{cluster}-events-dlq"},
    }
    resources["ProvisionerAccessEntry"] = {
        "Type": "AWS::EKS::AccessEntry",
        "Properties": {"ClusterName": cluster, "PrincipalArn": world.lambda_role_arn, "Type": "STANDARD"},
    }
    outputs = {
        "ClusterName": cluster,
        "TableName": world.table_name,
        "EventBusName": world.bus_name,
        "ProvisioningQueueUrl": world.queue_url,
        "DisruptionQueueUrl": world.disruption_queue_url,
        "InterruptionQueueUrl": world.interruption_queue_url,
        **{f"{w.capitalize()}StateMachineArn": arn for w, arn in machines.items()},
        "NodeRoleName": world.node_role_name,
        "NodeInstanceProfileName": profile,
        "WebhookUrl": webhook.url,
        "AgentRoleArn": f"arn:aws:iam::{world.account_id}:role/nodeflow-{cluster}-agent",
    }
    if webhook_auth == "hmac":
        outputs["WebhookHmacSecretArn"] = world.hmac_secret_arn
    name = f"Nodeflow-{cluster}"
    cfn = clients("cloudformation")
    cfn.create_stack(
        StackName=name,
        TemplateBody=json.dumps({"Resources": resources, "Outputs": {k: {"Value": v} for k, v in outputs.items()}}),
    )
    dlq_url = clients.sqs.get_queue_url(QueueName=f"nodeflow-{cluster}-events-dlq")["QueueUrl"]
    return DoctorStack(
        world, name, webhook, webhook_auth, machines, [n for n, _ in functions.values()], profile, dlq_url, outputs
    )


def run_execution(clients: Clients, arn: str, name: str, *, fail: bool) -> dict[str, Any]:
    """Start an execution of one of the stack's workflows and wait until it ends."""
    sfn = clients.sfn
    execution = sfn.start_execution(stateMachineArn=arn, name=name, input=json.dumps({"fail": {}} if fail else {}))
    deadline = time.monotonic() + 10
    while True:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution["executionArn"])
        if described["status"] != "RUNNING":
            return described
        if time.monotonic() > deadline:
            raise AssertionError(f"execution {name} still running")
        time.sleep(0.02)


def accepted(clients: Clients, cluster: str, at: datetime, count: float = 1) -> None:
    """What the webhook's Powertools metrics publish when it accepts a request (``Webhook2xx``)."""
    clients("cloudwatch").put_metric_data(
        Namespace="nodeflow",
        MetricData=[
            {
                "MetricName": "Webhook2xx",
                "Dimensions": [{"Name": "service", "Value": "nodeflow"}, {"Name": "cluster", "Value": cluster}],
                "Timestamp": at,
                "Value": count,
                "Unit": "Count",
            }
        ],
    )


# =============================================================================================
# what moto cannot answer


class _Split:
    """A client whose ``names`` calls go to ``stubbed``, every other attribute to ``real``."""

    def __init__(self, real: Any, stubbed: Any, names: frozenset[str]) -> None:
        self._real, self._stubbed, self._names = real, stubbed, names

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stubbed if name in self._names else self._real, name)


class Aws:
    """The doctor's ``service -> client``: moto's clients, and a Stubber per service where moto has no answer
    (``stub(service)``; Lambda's stub answers only GetAccountSettings, the rest of Lambda is moto's)."""

    def __init__(self, moto: Clients, region: str = "us-east-1") -> None:
        self.moto = moto
        self.region = region
        self.stubbers: dict[str, Stubber] = {}
        self._stubbed: dict[str, Any] = {}

    def stub(self, service: str) -> Stubber:
        if service not in self.stubbers:
            client = boto3.Session(
                aws_access_key_id="testing", aws_secret_access_key="testing", region_name=self.region
            ).client(service)
            stubber = Stubber(client)
            stubber.activate()
            self.stubbers[service] = stubber
            self._stubbed[service] = client
        return self.stubbers[service]

    def __call__(self, service: str) -> Any:
        if service == "lambda" and service in self._stubbed:
            return _Split(self.moto(service), self._stubbed[service], frozenset({"get_account_settings"}))
        if service in self._stubbed:
            return self._stubbed[service]
        return self.moto(service)

    def assert_answered(self) -> None:
        for stubber in self.stubbers.values():
            stubber.assert_no_pending_responses()


def describe_cluster(
    aws: Aws,
    name: str,
    vpc_id: str,
    *,
    auth: str = "API_AND_CONFIG_MAP",
    public: bool = True,
    private: bool = False,
    cidrs: Sequence[str] = ("0.0.0.0/0",),
) -> None:
    aws.stub("eks").add_response(
        "describe_cluster",
        {
            "cluster": {
                "name": name,
                "arn": f"arn:aws:eks:{aws.region}:123456789012:cluster/{name}",
                "createdAt": datetime(2026, 1, 5, tzinfo=UTC),
                "version": "1.33",
                "endpoint": CLUSTER_ENDPOINT,
                "roleArn": f"arn:aws:iam::123456789012:role/{name}-cluster",
                "resourcesVpcConfig": {
                    "subnetIds": ["subnet-0123456789abcdef0"],
                    "securityGroupIds": [],
                    "clusterSecurityGroupId": "sg-0123456789abcdef0",
                    "vpcId": vpc_id,
                    "endpointPublicAccess": public,
                    "endpointPrivateAccess": private,
                    "publicAccessCidrs": list(cidrs),
                },
                "kubernetesNetworkConfig": {"serviceIpv4Cidr": "172.20.0.0/16", "ipFamily": "ipv4"},
                "status": "ACTIVE",
                "certificateAuthority": {"data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="},
                "platformVersion": "eks.12",
                "accessConfig": {"bootstrapClusterCreatorAdminPermissions": True, "authenticationMode": auth},
            }
        },
        {"name": name},
    )


_QUOTA_NAMES = {
    "L-1216C47A": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    "L-34B43A08": "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
}


def _quota(service: str, code: str, name: str, value: float, region: str) -> dict[str, Any]:
    return {
        "ServiceCode": service,
        "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)" if service == "ec2" else "AWS Step Functions",
        "QuotaArn": f"arn:aws:servicequotas:{region}:123456789012:{service}/{code}",
        "QuotaCode": code,
        "QuotaName": name,
        "Value": value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


def ec2_quota(aws: Aws, code: str, value: float | None, *, default: float | None = None) -> None:
    """GetServiceQuota of an EC2 quota; ``value`` None: none applied (NoSuchResource), then its AWS default."""
    stub = aws.stub("service-quotas")
    if value is not None:
        stub.add_response(
            "get_service_quota",
            {"Quota": _quota("ec2", code, _QUOTA_NAMES[code], value, aws.region)},
            {"ServiceCode": "ec2", "QuotaCode": code},
        )
        return
    stub.add_client_error(
        "get_service_quota",
        service_error_code="NoSuchResourceException",
        service_message="The request failed because the specified resource does not exist.",
        expected_params={"ServiceCode": "ec2", "QuotaCode": code},
    )
    stub.add_response(
        "get_aws_default_service_quota",
        {"Quota": _quota("ec2", code, _QUOTA_NAMES[code], default or 0.0, aws.region)},
        {"ServiceCode": "ec2", "QuotaCode": code},
    )


def sfn_quotas(aws: Aws, bucket: float, refill: float, *, applied: bool = True) -> None:
    """ListServiceQuotas for states (the StartExecution bucket, among others); not ``applied``: an empty applied
    list, then the defaults."""
    quotas = [
        _quota("states", "L-SFNBUCKET", "StartExecution throttle token bucket size", bucket, aws.region),
        _quota("states", "L-SFNREFILL", "StartExecution throttle token refill rate per second", refill, aws.region),
        _quota("states", "L-SFNSTATEM", "Maximum number of registered state machines", 100000, aws.region),
    ]
    for q in quotas:  # the codes are the test's own: the doctor finds these quotas by name
        q.pop("QuotaCode")
        q.pop("QuotaArn")
    stub = aws.stub("service-quotas")
    if applied:
        stub.add_response("list_service_quotas", {"Quotas": quotas}, {"ServiceCode": "states"})
        return
    stub.add_response("list_service_quotas", {"Quotas": []}, {"ServiceCode": "states"})
    stub.add_response("list_aws_default_service_quotas", {"Quotas": quotas}, {"ServiceCode": "states"})


def account_settings(aws: Aws, limit: int, unreserved: int) -> None:
    aws.stub("lambda").add_response(
        "get_account_settings",
        {
            "AccountLimit": {
                "TotalCodeSize": 80530636800,
                "CodeSizeUnzipped": 262144000,
                "CodeSizeZipped": 52428800,
                "ConcurrentExecutions": limit,
                "UnreservedConcurrentExecutions": unreserved,
            },
            "AccountUsage": {"TotalCodeSize": 1048576, "FunctionCount": 14},
        },
        {},
    )


def healthy_answers(aws: Aws, stack: DoctorStack) -> None:
    """The stubbed answers of one doctor run, in the order it asks (see ``nodeflow.doctor_cli._examine``)."""
    describe_cluster(aws, stack.cluster, stack.world.vpc_id)
    account_settings(aws, 1000, 989)
    ec2_quota(aws, "L-1216C47A", 640)
    ec2_quota(aws, "L-34B43A08", 640)
    sfn_quotas(aws, 1300, 300)
