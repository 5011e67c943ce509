"""The synthesized default stack, with its asset zip, deployed into moto's CloudFormation: the core resources come up.

moto deploys IAM, SQS, DynamoDB, Lambda (zip from the asset bucket), the event-source mapping, EventBridge rules
and the state machine; it accepts and skips what it does not model (queue policies, the Function URL, the
Scheduler schedule, EKS access entries) while reporting CREATE_COMPLETE.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.functions import FUNCTIONS
from infra.workflows import WORKFLOWS
from nodeflow.ingress.routing import AWS_ROUTES, PROVISIONING_BATCH_SIZE, ROUTES, event_pattern
from tests.infra.conftest import Synthesized
from tests.infra.helpers import as_list

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:moto.cloudformation.parsing")

ACCOUNT = "123456789012"
REGION = "us-east-1"


def _zip(source: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(source).as_posix())
    return buf.getvalue()


def _getatt_targets(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {str(value["Fn::GetAtt"][0])} if "Fn::GetAtt" in value else set()
        return found.union(*(_getatt_targets(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_getatt_targets(v) for v in value))
    return set()


def for_moto(template: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """The template less what reads an attribute of a resource type moto does not model (moto skips those types,
    then fails on the Fn::GetAtt: the Function URL's WebhookUrl output, the dashboard's alarm widget), and less the
    custom resources (moto would run their function in Docker and wait for its answer; their handler runs in
    tests/realk8s/test_install.py). Returns it and the logical ids left out."""
    from moto.cloudformation.parsing import resource_class_from_type

    resources = dict(template["Resources"])
    custom = {k for k, r in resources.items() if r["Type"].startswith("Custom::")}
    unmodelled = {k for k, r in resources.items() if resource_class_from_type(r["Type"]) is None} - custom
    dropped: set[str] = set(custom)
    while True:
        more = {k for k, r in resources.items() if _getatt_targets(r) & (unmodelled | dropped)} - dropped
        if not more:
            break
        dropped |= more
    outputs = {k: o for k, o in template.get("Outputs", {}).items() if not _getatt_targets(o) & (unmodelled | dropped)}
    kept = {
        k: {**r, "DependsOn": [d for d in as_list(r["DependsOn"]) if d not in dropped]} if "DependsOn" in r else r
        for k, r in resources.items()
        if k not in dropped
    }
    return {**template, "Resources": kept, "Outputs": outputs}, dropped


@pytest.fixture
def deployed(synthesized: Synthesized, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    import boto3
    from moto import mock_aws
    from moto.events.models import EventBus

    # CloudFormation's Ref of an AWS::Events::EventBus is its name; moto's model has no physical_resource_id, so
    # its Ref would hand the rules the Python object.
    if not hasattr(EventBus, "physical_resource_id"):
        monkeypatch.setattr(EventBus, "physical_resource_id", property(lambda bus: bus.name), raising=False)

    with mock_aws():
        session = boto3.Session(region_name=REGION)
        # What `cdk bootstrap` and `cdk deploy` put in place: the asset bucket, its zips, the bootstrap version.
        bucket = f"cdk-hnb659fds-assets-{ACCOUNT}-{REGION}"
        s3 = session.client("s3")
        s3.create_bucket(Bucket=bucket)
        for asset in synthesized.assets("default")["files"].values():
            if asset["source"]["packaging"] != "zip":
                continue
            (dest,) = asset["destinations"].values()
            source = Path(asset["source"]["path"])
            source = source if source.is_absolute() else synthesized.outdir / source
            s3.put_object(Bucket=bucket, Key=dest["objectKey"], Body=_zip(source))
        session.client("ssm").put_parameter(Name="/cdk-bootstrap/hnb659fds/version", Value="30", Type="String")
        cfn = session.client("cloudformation")
        name = synthesized.stack_name("default")
        template, dropped = for_moto(synthesized.template("default"))
        # The in-cluster install reads the Function URL (WebhookUrl); tests/realk8s/test_install.py runs its handler.
        assert {synthesized.resources("default")[k]["Type"] for k in dropped} <= {
            "AWS::CloudWatch::Dashboard",
            "Custom::NodeflowClusterCheck",
            "Custom::NodeflowInstall",
        }
        cfn.create_stack(
            StackName=name,
            TemplateBody=json.dumps(template),
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
        )
        stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
        yield {"session": session, "stack": stack, "cfn": cfn}


def test_the_stack_deploys_into_moto(deployed: dict[str, Any]) -> None:
    session, stack = deployed["session"], deployed["stack"]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")

    table = session.client("dynamodb").describe_table(TableName="nodeflow-demo")["Table"]
    assert [k["AttributeName"] for k in table["KeySchema"]] == ["pk", "sk"]

    sqs = session.client("sqs")
    for queue in ("provisioning", "disruption", "interruption"):
        url = sqs.get_queue_url(QueueName=f"nodeflow-demo-{queue}")["QueueUrl"]
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert json.loads(attrs["RedrivePolicy"])["deadLetterTargetArn"].endswith(f":nodeflow-demo-{queue}-dlq")

    lam = session.client("lambda")
    for spec in FUNCTIONS:
        config = lam.get_function(FunctionName=f"nodeflow-demo-{spec.suffix}")["Configuration"]
        assert config["Runtime"] == "python3.12"
        assert config["Handler"] == f"nodeflow.handlers.{spec.module}.handler"
        assert config["Environment"]["Variables"]["CLUSTER_NAME"] == "demo"
    provisioner = lam.get_function(FunctionName="nodeflow-demo-provisioner")["Configuration"]
    (mapping,) = lam.list_event_source_mappings(FunctionName="nodeflow-demo-provisioner")["EventSourceMappings"]
    assert mapping["EventSourceArn"].endswith(":nodeflow-demo-provisioning")
    assert mapping["BatchSize"] == PROVISIONING_BATCH_SIZE
    env = provisioner["Environment"]["Variables"]
    assert env["TABLE_NAME"] == "nodeflow-demo"
    assert env["LAUNCH_STATE_MACHINE_ARN"].endswith(":stateMachine:nodeflow-demo-launch")

    events = session.client("events")
    rules = events.list_rules(EventBusName="nodeflow-demo")["Rules"]
    patterns = sorted(json.loads(r["EventPattern"])["detail-type"][0] for r in rules)
    assert patterns == sorted(event_pattern("demo", r.detail_types)["detail-type"][0] for r in ROUTES)
    default_rules = events.list_rules(EventBusName="default")["Rules"]
    assert len(default_rules) == len(AWS_ROUTES)
    for rule in rules + default_rules:
        (target,) = events.list_targets_by_rule(Rule=rule["Name"], EventBusName=rule["EventBusName"])["Targets"]
        assert ":nodeflow-demo-" in target["Arn"]

    # The state machine is there (moto leaves DefinitionSubstitutions unapplied: test_workflows checks those).
    sfn = session.client("stepfunctions")
    machines = sfn.list_state_machines()["stateMachines"]
    assert sorted(m["name"] for m in machines) == sorted(f"nodeflow-demo-{w.name}" for w in WORKFLOWS)

    iam = session.client("iam")
    assert iam.get_role(RoleName="KarpenterNodeRole-demo")["Role"]["AssumeRolePolicyDocument"]
