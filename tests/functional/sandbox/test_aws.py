"""sandbox.aws: the moto world, in-process and against a ThreadedMotoServer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeflow.aws.ec2.amis import alias_ssm_parameters
from sandbox.aws import AwsWorld, Clients, build_world, create_functions, create_state_machine, moto_server, substitute
from sandbox.stepfunctions import LambdaDispatch, execution_trace, wait_for_execution
from tests.functional.sandbox.conftest import CLUSTER

DISCOVERY = {"Key": "karpenter.sh/discovery", "Value": CLUSTER}


def test_build_world_network_role_and_images(world: AwsWorld, clients: Clients) -> None:
    ec2 = clients.ec2
    assert world.zones == ["us-east-1a", "us-east-1b", "us-east-1c"]
    subnets = ec2.describe_subnets(Filters=[{"Name": "tag:karpenter.sh/discovery", "Values": [CLUSTER]}])["Subnets"]
    assert {s["AvailabilityZone"]: s["SubnetId"] for s in subnets} == world.subnets
    assert {s["VpcId"] for s in subnets} == {world.vpc_id}
    groups = ec2.describe_security_groups(Filters=[{"Name": "tag:karpenter.sh/discovery", "Values": [CLUSTER]}])
    assert [g["GroupId"] for g in groups["SecurityGroups"]] == [world.security_group_id]

    role = clients.iam.get_role(RoleName=world.node_role_name)["Role"]
    assert world.node_role_name == "KarpenterNodeRole-demo"
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    lambda_role = clients.iam.get_role(RoleName=world.lambda_role_arn.rsplit("/", 1)[1])["Role"]
    assert lambda_role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "lambda.amazonaws.com"}

    images = {
        i["ImageId"]: i["Architecture"] for i in ec2.describe_images(ImageIds=list(world.amis.values()))["Images"]
    }
    assert images == {world.amis["amd64"]: "x86_64", world.amis["arm64"]: "arm64"}

    # Every alias nodeflow resolves with @latest reads a seeded parameter naming the image of its architecture.
    for family in ("al2023", "bottlerocket", "al2"):
        wanted = alias_ssm_parameters(f"{family}@latest", "1.33")
        got = clients.ssm.get_parameters(Names=list(wanted))
        assert got["InvalidParameters"] == []
        assert {p["Name"]: p["Value"] for p in got["Parameters"]} == {n: world.amis[a] for n, a in wanted.items()}


def test_build_world_table_and_queue(world: AwsWorld, clients: Clients) -> None:
    table = clients.dynamodb.describe_table(TableName=world.table_name)["Table"]
    assert world.table_name == "nodeflow-demo"
    assert table["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    ttl = clients.dynamodb.describe_time_to_live(TableName=world.table_name)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "ttl"}

    assert world.queue_url.endswith("/nodeflow-demo-provisioning")
    attrs = clients.sqs.get_queue_attributes(QueueUrl=world.queue_url, AttributeNames=["RedrivePolicy"])["Attributes"]
    dlq_arn = clients.sqs.get_queue_attributes(QueueUrl=world.dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    assert json.loads(attrs["RedrivePolicy"])["deadLetterTargetArn"] == dlq_arn


def test_create_functions_and_state_machine(world: AwsWorld, clients: Clients, tmp_path: Path) -> None:
    arns = create_functions(world, clients, ["nodeflow-demo-launch", "nodeflow-demo-cleanup"])
    assert world.function_arns == arns
    conf = clients.lambda_.get_function(FunctionName="nodeflow-demo-launch")["Configuration"]
    assert (conf["Runtime"], conf["Role"]) == ("python3.12", world.lambda_role_arn)

    asl = tmp_path / "launch.asl.json"
    asl.write_text(
        json.dumps({"StartAt": "L", "States": {"L": {"Type": "Task", "Resource": "${LaunchArn}", "End": True}}})
    )
    arn = create_state_machine(world, clients, "launch", asl, {"LaunchArn": arns["nodeflow-demo-launch"]})
    assert world.state_machine_arns == {"launch": arn}
    definition = json.loads(clients.sfn.describe_state_machine(stateMachineArn=arn)["definition"])
    assert definition["States"]["L"]["Resource"] == arns["nodeflow-demo-launch"]

    asl.write_text('{"A": "${One}", "B": "${Two}", "C": "${Three}"}')
    with pytest.raises(ValueError, match=r"\$\{Three\}, \$\{Two\}"):
        create_state_machine(world, clients, "broken", asl, {"One": "1"})
    assert "broken" not in world.state_machine_arns


def test_substitute() -> None:
    assert substitute("${A}-${A}-$B-${C_d}", {"A": "x", "C_d": "y", "Unused": "z"}) == "x-x-$B-y"
    with pytest.raises(ValueError, match=r"asl\.json: no substitution for \$\{Missing\}"):
        substitute("${Missing}", {}, source="asl.json")


def test_world_against_threaded_moto_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Server mode: everything through endpoint_url; the in-process Lambda dispatch still applies."""
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    asl = tmp_path / "echo.asl.json"
    asl.write_text(
        json.dumps({"StartAt": "Echo", "States": {"Echo": {"Type": "Task", "Resource": "${Echo}", "End": True}}})
    )
    with (
        moto_server() as server,
        LambdaDispatch({"echo": lambda event, ctx: {"echo": event, "fn": ctx.function_name}}) as dispatch,
    ):
        clients = server.clients()
        assert clients("ec2").meta.endpoint_url == server.url
        world = build_world(clients, cluster_name="srv")
        assert len(world.subnets) == 3
        assert (
            clients.ssm.get_parameter(Name=next(iter(world.ssm_parameters)))["Parameter"]["Value"]
            == world.amis["amd64"]
        )
        create_functions(world, clients, ["echo"])
        arn = create_state_machine(world, clients, "echo", asl, {"Echo": world.function_arns["echo"]})
        execution = clients.sfn.start_execution(stateMachineArn=arn, name="one", input='{"n": 1}')["executionArn"]
        result = wait_for_execution(clients.sfn, execution, timeout=20)
        assert result["status"] == "SUCCEEDED", execution_trace(clients.sfn, execution).render()
        assert json.loads(result["output"]) == {"echo": {"n": 1}, "fn": "echo"}
        assert dispatch.count("echo") == 1
