"""The synthesized stacks: the resources nodeflow needs, configured the way the sandbox and the handlers expect."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from infra.cluster_rbac import FUNCTION_GROUPS
from infra.events import TARGET_MAX_EVENT_AGE_SECONDS, TARGET_RETRY_ATTEMPTS
from infra.functions import FUNCTIONS, POWERTOOLS_ENVIRONMENT, SCHEDULE_RETRY_ATTEMPTS
from infra.iam import AGENT_SERVICE_ACCOUNT
from infra.queues import DELIVERY_DLQS, QUEUES
from nodeflow.ingress.routing import (
    AWS_ROUTES,
    PROVISIONING_BATCH_SIZE,
    PROVISIONING_BATCH_WINDOW_SECONDS,
    ROUTES,
    event_pattern,
)
from tests.infra.conftest import Synthesized
from tests.infra.helpers import as_list, function_named, ref_of

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = ROOT / "functions" / "nodeflow" / "handlers"
NOT_HANDLERS = {"__init__", "common", "runtime", "karpenter_metrics"}  # shared by the handlers, not Lambdas


def _settings_variables() -> set[str]:
    """Every environment variable ``nodeflow.handlers.runtime.Settings`` reads."""
    return set(
        re.findall(r'(?:env\.get\(|_(?:flag|int|number)\(env, )"([A-Z_]+)"', (HANDLERS / "runtime.py").read_text())
    )


def test_both_stacks_synthesize(synthesized: Synthesized) -> None:
    assert synthesized.error is None, synthesized.error
    assert synthesized.stack_name("default") == "Nodeflow-demo"
    assert synthesized.stack_name("full") == "Nodeflow-prod-east"
    # The default synthesizer's bootstrap check: `cdk deploy` works after `cdk bootstrap`.
    assert "BootstrapVersion" in synthesized.template()["Parameters"]


def test_every_handler_module_is_a_function_and_back() -> None:
    modules = {p.stem for p in HANDLERS.glob("*.py")} - NOT_HANDLERS
    specs = {s.module for s in FUNCTIONS}
    assert modules - specs == set(), "handlers without a FunctionSpec in infra/functions.py FUNCTIONS"
    assert specs - modules == set(), "FunctionSpecs without a handler module"


def test_table(synthesized: Synthesized) -> None:
    tables = {
        t["Properties"]["TableName"]: t for t in synthesized.resources("default", "AWS::DynamoDB::Table").values()
    }
    assert set(tables) == {
        "nodeflow-demo",
        "nodeflow-demo-decisions",
    }  # the decision log's: tests/infra/test_decisions.py
    p = tables["nodeflow-demo"]["Properties"]
    assert p["TableName"] == "nodeflow-demo"
    assert p["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
    assert p["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    assert p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert p["SSESpecification"]["SSEEnabled"] is True
    assert p["BillingMode"] == "PAY_PER_REQUEST"


def test_queues_have_dead_letter_queues_encryption_and_tls(synthesized: Synthesized) -> None:
    queues = synthesized.resources("default", "AWS::SQS::Queue")
    by_name = {q["Properties"]["QueueName"]: (lid, q["Properties"]) for lid, q in queues.items()}
    routed = {r.queue for r in ROUTES} | {r.queue for r in AWS_ROUTES}
    assert routed <= set(QUEUES)
    for name, spec in QUEUES.items():
        _, props = by_name[f"nodeflow-demo-{name}"]
        dlq_id, dlq = by_name[f"nodeflow-demo-{name}-dlq"]
        assert props["RedrivePolicy"]["maxReceiveCount"] == spec.max_receive_count
        assert ref_of(props["RedrivePolicy"]["deadLetterTargetArn"]) == dlq_id
        assert props["VisibilityTimeout"] == spec.visibility_timeout_seconds
        assert props["SqsManagedSseEnabled"] is True
        assert dlq["SqsManagedSseEnabled"] is True
        assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600
    # Every queue refuses requests without TLS.
    denied = set()
    for policy in synthesized.resources("default", "AWS::SQS::QueuePolicy").values():
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            if st["Effect"] == "Deny" and st.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}:
                denied |= {ref_of(q) for q in policy["Properties"]["Queues"]}
    assert denied == set(queues)


def _rules(synthesized: Synthesized, which: str) -> dict[str, dict[str, Any]]:
    return {
        r["Properties"]["Description"].rsplit("route ", 1)[1]: r["Properties"]
        for r in synthesized.resources(which, "AWS::Events::Rule").values()
    }


def test_rules_are_the_routing_module_and_each_queue_lets_only_its_rules_in(synthesized: Synthesized) -> None:
    res = synthesized.resources("default")
    rules = _rules(synthesized, "default")
    queue_ids = {
        q["Properties"]["QueueName"].removeprefix("nodeflow-demo-"): lid
        for lid, q in res.items()
        if q["Type"] == "AWS::SQS::Queue"
    }
    (bus_id,) = synthesized.resources("default", "AWS::Events::EventBus")
    assert res[bus_id]["Properties"]["Name"] == "nodeflow-demo"
    for route in ROUTES:
        rule = rules[route.name]
        assert rule["EventPattern"] == event_pattern("demo", route.detail_types)
        assert ref_of(rule["EventBusName"]) == bus_id
        assert [ref_of(t["Arn"]) for t in rule["Targets"]] == [queue_ids[route.queue]]
    for aws_route in AWS_ROUTES:
        rule = rules[aws_route.name]
        assert rule["EventPattern"] == dict(aws_route.pattern)
        assert rule["EventBusName"] == "default"
        assert [ref_of(t["Arn"]) for t in rule["Targets"]] == [queue_ids[aws_route.queue]]
    assert len(rules) == len(ROUTES) + len(AWS_ROUTES)

    # The queue policies: events.amazonaws.com may send, only from the rules that target the queue (or name it
    # as their dead-letter queue: SendMessage only).
    rule_ids = {lid for lid, r in res.items() if r["Type"] == "AWS::Events::Rule"}
    dlq_id = queue_ids["events-dlq"]
    allowed: dict[str, set[str]] = {}
    for policy in synthesized.resources("default", "AWS::SQS::QueuePolicy").values():
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            if st["Effect"] == "Allow":
                assert st["Principal"] == {"Service": "events.amazonaws.com"}
                (queue,) = [ref_of(q) or "" for q in policy["Properties"]["Queues"]]
                expected = (
                    ["sqs:SendMessage"]
                    if queue == dlq_id
                    else ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
                )
                assert as_list(st["Action"]) == expected
                allowed.setdefault(queue, set()).add(ref_of(st["Condition"]["ArnEquals"]["aws:SourceArn"]) or "")
    for lid in rule_ids:
        for target in res[lid]["Properties"]["Targets"]:
            assert lid in allowed[ref_of(target["Arn"]) or ""]
    assert allowed[dlq_id] == rule_ids  # exactly the rules may put undeliverable events in the DLQ


@pytest.mark.parametrize("which", ["default", "full"])
def test_every_rule_target_has_a_retry_policy_and_the_events_dlq(synthesized: Synthesized, which: str) -> None:
    res = synthesized.resources(which)
    cluster = synthesized.stacks[which].config.cluster_name
    (dlq_id,) = [
        lid
        for lid, r in res.items()
        if r["Type"] == "AWS::SQS::Queue" and r["Properties"]["QueueName"] == f"nodeflow-{cluster}-events-dlq"
    ]
    dlq = res[dlq_id]["Properties"]
    assert dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600
    rules = synthesized.resources(which, "AWS::Events::Rule")
    assert rules
    for lid, rule in rules.items():
        for target in rule["Properties"]["Targets"]:
            assert target["RetryPolicy"] == {
                "MaximumRetryAttempts": TARGET_RETRY_ATTEMPTS,
                "MaximumEventAgeInSeconds": TARGET_MAX_EVENT_AGE_SECONDS,
            }, lid
            assert ref_of(target["DeadLetterConfig"]["Arn"]) == dlq_id, lid


def test_interruption_off_leaves_the_default_bus_alone(synthesized: Synthesized) -> None:
    rules = _rules(synthesized, "full")
    assert set(rules) == {r.name for r in ROUTES}
    assert all(r["EventBusName"] != "default" for r in rules.values())


@pytest.mark.parametrize("which", ["default", "full"])
def test_functions_runtime_tracing_and_environment(synthesized: Synthesized, which: str) -> None:
    res = synthesized.resources(which)
    cluster = synthesized.stacks[which].config.cluster_name
    readable = _settings_variables() | set(POWERTOOLS_ENVIRONMENT)
    for spec in FUNCTIONS:
        _, fn = function_named(res, f"nodeflow-{cluster}-{spec.suffix}")
        p = fn["Properties"]
        assert p["Runtime"] == "python3.12"
        assert p["Architectures"] == ["arm64"]
        assert p["TracingConfig"] == {"Mode": "Active"}
        assert p["Handler"] == f"nodeflow.handlers.{spec.module}.handler"
        assert p["Timeout"] == spec.timeout_seconds
        env = p["Environment"]["Variables"]
        assert env["CLUSTER_NAME"] == cluster
        assert {k: env[k] for k in POWERTOOLS_ENVIRONMENT} == dict(POWERTOOLS_ENVIRONMENT)
        assert set(env) <= readable, f"{spec.suffix}: variables no handler reads: {set(env) - readable}"
        # Its own log group, kept a month.
        log_group = res[ref_of(p["LoggingConfig"]["LogGroup"]) or ""]["Properties"]
        assert log_group["LogGroupName"] == f"/aws/lambda/nodeflow-{cluster}-{spec.suffix}"
        assert log_group["RetentionInDays"] == 30


EXPECTED_ENV = {
    "provisioner": {
        "CATALOG_SOURCE",
        "TABLE_NAME",
        "LAUNCH_STATE_MACHINE_ARN",
        "DECISION_TABLE_NAME",
        "DECISION_LOG_TTL_DAYS",
        "PROVISIONING_QUEUE_URL",  # its own run when a pause window holding pods closes
    },
    "launch": {"CATALOG_SOURCE", "TABLE_NAME"},
    "register": set(),
    "initialize": set(),
    "cleanup": {"PROVISIONING_QUEUE_URL"},
    "gc": {"PROVISIONING_QUEUE_URL", "LAUNCH_STATE_MACHINE_ARN"},  # launches that ended without cleaning up
    "webhook": {"TABLE_NAME", "EVENT_BUS_NAME", "WEBHOOK_AUTH", "AGENT_PRINCIPAL_ARNS"},
    "taint": set(),
    "drain": {"TERMINATE_STATE_MACHINE_ARN"},  # a long drain continues in a new terminate execution
    "terminate": set(),
    "finalize": set(),
    "interruption": {"TABLE_NAME", "TERMINATE_STATE_MACHINE_ARN", "DECISION_TABLE_NAME", "DECISION_LOG_TTL_DAYS"},
    "disruption": {
        "CATALOG_SOURCE",
        "TABLE_NAME",
        "TERMINATE_STATE_MACHINE_ARN",
        "LAUNCH_STATE_MACHINE_ARN",
        "REPLACE_STATE_MACHINE_ARN",
        "DECISION_TABLE_NAME",
        "DECISION_LOG_TTL_DAYS",
    },
    "replace": {"TERMINATE_STATE_MACHINE_ARN"},
    "install": set(),  # its values are the custom resource's properties (tests/infra/test_install.py)
}
KUBE = {"CLUSTER_ENDPOINT", "CLUSTER_CA_DATA", "KUBERNETES_VERSION"}


@pytest.mark.parametrize("which", ["default", "full"])
def test_each_function_gets_what_its_handler_reads(synthesized: Synthesized, which: str) -> None:
    res = synthesized.resources(which)
    cluster = synthesized.stacks[which].config.cluster_name
    assert {s.suffix for s in FUNCTIONS} <= set(EXPECTED_ENV), "add the new function's variables to EXPECTED_ENV"
    for suffix, expected in EXPECTED_ENV.items():
        if suffix not in {s.suffix for s in FUNCTIONS}:
            continue
        _, fn = function_named(res, f"nodeflow-{cluster}-{suffix}")
        env = set(fn["Properties"]["Environment"]["Variables"]) - set(POWERTOOLS_ENVIRONMENT) - {"CLUSTER_NAME"}
        if which == "full":
            expected = set(expected)
            if suffix == "install":  # reaches the API server, never asks for its version
                expected |= KUBE - {"KUBERNETES_VERSION"}
            elif suffix != "webhook":
                expected |= KUBE
            if suffix == "launch":
                expected |= {"CLUSTER_DNS"}
            if suffix == "webhook":
                expected |= {"WEBHOOK_HMAC_SECRET_ARN"}
            expected |= {"FEATURE_GATES", "CONSOLIDATION_REPLACE_BAR_K"}  # context featureGates, ...ReplaceBarK
        assert env == expected, suffix
        if which == "full":
            assert fn["Properties"]["Environment"]["Variables"]["FEATURE_GATES"] == "NodeRepair=true"
            assert fn["Properties"]["Environment"]["Variables"]["CONSOLIDATION_REPLACE_BAR_K"] == "0"
    _, webhook = function_named(res, f"nodeflow-{cluster}-webhook")
    env = webhook["Properties"]["Environment"]["Variables"]
    if which == "full":
        assert env["AGENT_PRINCIPAL_ARNS"] == "arn:aws:iam::111122223333:role/prod-nodeflow-agent"
        assert env["WEBHOOK_AUTH"] == "hmac"
    else:
        assert ref_of(env["AGENT_PRINCIPAL_ARNS"]) is not None  # the created agent role
        assert env["WEBHOOK_AUTH"] == "iam"


def test_provisioner_batches_like_the_sandbox_one_at_a_time(synthesized: Synthesized) -> None:
    res = synthesized.resources("default")
    lid, fn = function_named(res, "nodeflow-demo-provisioner")
    assert fn["Properties"]["ReservedConcurrentExecutions"] == 1
    mappings = synthesized.resources("default", "AWS::Lambda::EventSourceMapping").values()
    (p,) = [m["Properties"] for m in mappings if ref_of(m["Properties"]["FunctionName"]) == lid]
    assert ref_of(p["FunctionName"]) == lid
    assert res[ref_of(p["EventSourceArn"]) or ""]["Properties"]["QueueName"] == "nodeflow-demo-provisioning"
    assert p["BatchSize"] == PROVISIONING_BATCH_SIZE
    assert p["MaximumBatchingWindowInSeconds"] == PROVISIONING_BATCH_WINDOW_SECONDS
    assert p["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_interruption_consumes_its_queue_reporting_item_failures(synthesized: Synthesized) -> None:
    if "interruption" not in {s.suffix for s in FUNCTIONS}:
        pytest.skip("no interruption function yet")
    res = synthesized.resources("default")
    lid, fn = function_named(res, "nodeflow-demo-interruption")
    assert "ReservedConcurrentExecutions" not in fn["Properties"]
    mappings = synthesized.resources("default", "AWS::Lambda::EventSourceMapping").values()
    (p,) = [m["Properties"] for m in mappings if ref_of(m["Properties"]["FunctionName"]) == lid]
    assert res[ref_of(p["EventSourceArn"]) or ""]["Properties"]["QueueName"] == "nodeflow-demo-interruption"
    assert p["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # Every SQS-triggered function is fed by exactly one mapping, on a queue whose visibility outlasts it.
    triggered = {s.suffix for s in FUNCTIONS if s.queue is not None}
    assert len(list(mappings)) == len(triggered)
    for spec in FUNCTIONS:
        if spec.queue is not None:
            assert QUEUES[spec.queue.queue].visibility_timeout_seconds >= 6 * spec.timeout_seconds


def test_webhook_function_url_iam_with_a_resource_policy_for_the_agent(synthesized: Synthesized) -> None:
    res = synthesized.resources("default")
    lid, _ = function_named(res, "nodeflow-demo-webhook")
    (url,) = synthesized.resources("default", "AWS::Lambda::Url").values()
    assert url["Properties"]["AuthType"] == "AWS_IAM"
    assert ref_of(url["Properties"]["TargetFunctionArn"]) == lid
    perms = [p["Properties"] for p in synthesized.resources("default", "AWS::Lambda::Permission").values()]
    agent_role = next(
        k
        for k, r in res.items()
        if r["Type"] == "AWS::IAM::Role" and "in-cluster agent" in r["Properties"].get("Description", "")
    )
    assert {(p["Action"], ref_of(p["Principal"])) for p in perms if ref_of(p["FunctionName"]) == lid} == {
        ("lambda:InvokeFunctionUrl", agent_role),
        ("lambda:InvokeFunction", agent_role),
    }
    assert all(p.get("FunctionUrlAuthType") == "AWS_IAM" or p.get("InvokedViaFunctionUrl") is True for p in perms)
    # The agent's role: EKS Pod Identity for the agent's ServiceAccount, trusted by this cluster only.
    trust = res[agent_role]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(trust["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
    assert "aws:SourceArn" in trust["Condition"]["ArnEquals"]
    (assoc,) = synthesized.resources("default", "AWS::EKS::PodIdentityAssociation").values()
    namespace, service_account = AGENT_SERVICE_ACCOUNT
    assert assoc["Properties"]["Namespace"] == namespace == "nodeflow"
    assert assoc["Properties"]["ServiceAccount"] == service_account == "nodeflow-agent"
    assert ref_of(assoc["Properties"]["RoleArn"]) == agent_role
    assert "WebhookUrl" in synthesized.template()["Outputs"]


@pytest.mark.parametrize(("which", "reserved"), [("default", 10), ("full", 3)])
def test_webhook_has_reserved_concurrency(synthesized: Synthesized, which: str, reserved: int) -> None:
    """In hmac mode the Function URL is public: a flood of requests must not take the account's concurrency."""
    cluster = synthesized.stacks[which].config.cluster_name
    _, fn = function_named(synthesized.resources(which), f"nodeflow-{cluster}-webhook")
    assert fn["Properties"]["ReservedConcurrentExecutions"] == reserved


def test_webhook_hmac_mode_reads_a_generated_secret(synthesized: Synthesized) -> None:
    res = synthesized.resources("full")
    (url,) = synthesized.resources("full", "AWS::Lambda::Url").values()
    assert url["Properties"]["AuthType"] == "NONE"
    (secret_id,) = synthesized.resources("full", "AWS::SecretsManager::Secret")
    assert res[secret_id]["Properties"]["GenerateSecretString"]["PasswordLength"] == 64
    _, fn = function_named(res, "nodeflow-prod_east-webhook")
    assert ref_of(fn["Properties"]["Environment"]["Variables"]["WEBHOOK_HMAC_SECRET_ARN"]) == secret_id
    assert synthesized.resources("full", "AWS::EKS::PodIdentityAssociation") == {}
    assert synthesized.resources("default", "AWS::SecretsManager::Secret") == {}


def test_gc_and_disruption_run_on_eventbridge_scheduler_schedules(synthesized: Synthesized) -> None:
    res = synthesized.resources("default")
    schedules = [s["Properties"] for s in synthesized.resources("default", "AWS::Scheduler::Schedule").values()]
    assert len(schedules) == 3
    for name, expression in (
        ("gc", "rate(2 minutes)"),
        ("disruption", "rate(1 minute)"),
        ("interruption", "rate(1 minute)"),  # EC2 status checks (DescribeInstanceStatus)
    ):
        lid, _ = function_named(res, f"nodeflow-demo-{name}")
        (p,) = [s for s in schedules if ref_of(s["Target"]["Arn"]) == lid]
        assert p["ScheduleExpression"] == expression
        period = int(expression.split("(")[1].split()[0]) * 60
        # Retried within the period, then kept in the schedules DLQ (which alarms).
        assert p["Target"]["RetryPolicy"] == {
            "MaximumRetryAttempts": SCHEDULE_RETRY_ATTEMPTS,
            "MaximumEventAgeInSeconds": period,
        }
        dlq = res[ref_of(p["Target"]["DeadLetterConfig"]["Arn"]) or ""]["Properties"]
        assert dlq["QueueName"] == "nodeflow-demo-schedules-dlq"
        assert dlq["SqsManagedSseEnabled"] is True
        # The schedule's role may send to that DLQ (and invoke the function).
        role_id = ref_of(p["Target"]["RoleArn"]) or ""
        sends = [
            st
            for r in res.values()
            if r["Type"] == "AWS::IAM::Policy" and any(ref_of(x) == role_id for x in r["Properties"]["Roles"])
            for st in r["Properties"]["PolicyDocument"]["Statement"]
            if "sqs:SendMessage" in as_list(st["Action"])
        ]
        assert [ref_of(r) for st in sends for r in as_list(st["Resource"])] == [
            ref_of(p["Target"]["DeadLetterConfig"]["Arn"])
        ]
        # Lambda's asynchronous queue does not replay a run after the next one.
        (invoke_config,) = [
            c["Properties"]
            for c in synthesized.resources("default", "AWS::Lambda::EventInvokeConfig").values()
            if ref_of(c["Properties"]["FunctionName"]) == lid
        ]
        assert invoke_config["MaximumRetryAttempts"] == 0
        assert invoke_config["MaximumEventAgeInSeconds"] == period


def test_lambdas_in_the_configured_vpc(synthesized: Synthesized) -> None:
    for fn in synthesized.resources("full", "AWS::Lambda::Function").values():
        vpc = fn["Properties"]["VpcConfig"]
        assert vpc["SubnetIds"] == ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]
        assert len(vpc["SecurityGroupIds"]) == 1
    (group,) = synthesized.resources("full", "AWS::EC2::SecurityGroup").values()
    assert group["Properties"]["VpcId"] == "vpc-0123456789abcdef0"
    assert "SecurityGroupIngress" not in group["Properties"]
    assert all(
        "VpcConfig" not in fn["Properties"] for fn in synthesized.resources("default", "AWS::Lambda::Function").values()
    )


def test_eks_access_entries_for_the_kube_functions_and_the_nodes(synthesized: Synthesized) -> None:
    res = synthesized.resources("default")
    entries = [e["Properties"] for e in synthesized.resources("default", "AWS::EKS::AccessEntry").values()]
    kube = {s.suffix for s in FUNCTIONS if "kube" in s.uses}
    # The installer's entry (an access policy, no groups) is tested in tests/infra/test_install.py.
    standard = [e for e in entries if e["Type"] == "STANDARD" and "AccessPolicies" not in e]
    assert len(standard) == len(kube)
    assert set(FUNCTION_GROUPS) == kube
    groups_by_role = {ref_of(e["PrincipalArn"]): e["KubernetesGroups"] for e in standard}
    for e in standard:
        assert e["ClusterName"] == "demo"
        assert "AccessPolicies" not in e  # RBAC (infra/cluster/controller-rbac.yaml) alone decides
    # Each function's role has its own entry, with the function's groups (the ones the sandbox enforces).
    for suffix in kube:
        _, fn = function_named(res, f"nodeflow-demo-{suffix}")
        assert groups_by_role[ref_of(fn["Properties"]["Role"])] == list(FUNCTION_GROUPS[suffix]), suffix
    (nodes,) = [e for e in entries if e["Type"] == "EC2_LINUX"]
    node_role = res[ref_of(nodes["PrincipalArn"]) or ""]["Properties"]
    assert node_role["RoleName"] == "KarpenterNodeRole-demo"
    assert node_role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    (profile,) = synthesized.resources("default", "AWS::IAM::InstanceProfile").values()
    assert [ref_of(r) for r in profile["Properties"]["Roles"]] == [ref_of(nodes["PrincipalArn"])]
    # Full: no entries, no node role created (nodeRoleName names an existing one).
    assert synthesized.resources("full", "AWS::EKS::AccessEntry") == {}
    assert synthesized.resources("full", "AWS::IAM::InstanceProfile") == {}
    assert all(
        r["Properties"].get("RoleName") != "prod-east-nodes"
        for r in synthesized.resources("full", "AWS::IAM::Role").values()
    )


def test_alarms_and_dashboard(synthesized: Synthesized) -> None:
    alarms = {lid: a["Properties"] for lid, a in synthesized.resources("default", "AWS::CloudWatch::Alarm").items()}
    described = " | ".join(a["AlarmDescription"] for a in alarms.values())
    for queue in QUEUES:
        assert f"{queue} queue failed" in described
    # The delivery DLQs alarm on their depth, like the route DLQs.
    queue_names = {
        lid: q["Properties"]["QueueName"] for lid, q in synthesized.resources("default", "AWS::SQS::Queue").items()
    }
    depth_alarmed = {
        queue_names[ref_of(d["Value"]) or ""]
        for a in alarms.values()
        if a.get("MetricName") == "ApproximateNumberOfMessagesVisible"
        for d in a["Dimensions"]
        if d["Name"] == "QueueName"
    }
    assert depth_alarmed == {n for n in queue_names.values() if n.endswith("-dlq")}
    assert {f"nodeflow-demo-{name}-dlq" for name in DELIVERY_DLQS} <= depth_alarmed
    for description in DELIVERY_DLQS.values():
        assert description in described
    assert "launch workflow executions failed" in described
    assert "InsufficientCapacityError" in described
    assert "the webhook answered 5xx" in described
    assert "the webhook refused requests" in described
    url_metrics = {a.get("MetricName") for a in alarms.values()}
    assert {"Url4xxCount", "Url5xxCount", "ApproximateNumberOfMessagesVisible", "Errors"} <= url_metrics
    # The capacity-error metric is counted from the CleanUp function's log.
    (mf,) = synthesized.resources("default", "AWS::Logs::MetricFilter").values()
    assert mf["Properties"]["FilterPattern"] == '{ $.reason = "InsufficientCapacityError" }'
    (transformation,) = mf["Properties"]["MetricTransformations"]
    assert transformation["MetricName"] == "CapacityErrors"
    assert transformation["Dimensions"] == [{"Key": "FunctionName", "Value": "$.function_name"}]
    assert len(synthesized.resources("default", "AWS::CloudWatch::Dashboard")) == 1
    # The handlers' metrics are read with the dimensions Powertools writes: service and this cluster.
    created = [
        m["MetricStat"]["Metric"]
        for a in alarms.values()
        for m in a.get("Metrics", [])
        if m.get("MetricStat", {}).get("Metric", {}).get("MetricName") == "NodeClaimsCreated"
    ]
    assert created
    for metric in created:
        assert metric["Namespace"] == "nodeflow"
        assert sorted(metric["Dimensions"], key=lambda d: d["Name"]) == [
            {"Name": "cluster", "Value": "demo"},
            {"Name": "service", "Value": "nodeflow"},
        ]
    (dashboard,) = synthesized.resources("default", "AWS::CloudWatch::Dashboard").values()
    body = "".join(p for p in dashboard["Properties"]["DashboardBody"]["Fn::Join"][1] if isinstance(p, str))
    assert '"nodeflow","PendingPods","cluster","demo","service","nodeflow"' in body, body[:2000]
    # Alarm actions only when a topic is configured.
    assert all("AlarmActions" not in a for a in alarms.values())
    for a in synthesized.resources("full", "AWS::CloudWatch::Alarm").values():
        assert as_list(a["Properties"]["AlarmActions"]) == ["arn:aws:sns:us-east-1:111122223333:nodeflow-alarms"]


def test_report_writes_failed_alarms_on_the_metric_the_handlers_publish(synthesized: Synthesized) -> None:
    """``ReportWritesFailed`` (status / Event writes the API server refused or failed, ``nodeflow.kube.reports``)
    is published by the provisioner, disruption and gc handlers with the shared Powertools ``metrics`` (namespace,
    service dimension, cluster default dimension); the alarm reads the same metric and fires on any failed write in
    3 of 5 periods of 5 minutes (a write refused every run), not on a one-off conflict the next run rewrites."""
    from nodeflow.handlers.common import metrics

    publishers = sorted(
        p.stem
        for p in HANDLERS.glob("*.py")
        if re.search(r'metrics\.add_metric\(name="ReportWritesFailed"', p.read_text())
        and "from nodeflow.handlers.common import" in p.read_text()
    )
    assert publishers == ["disruption", "gc", "provisioner"]
    for which in ("default", "full"):
        res, config = synthesized.resources(which), synthesized.stacks[which].config
        publisher_env = [function_named(res, config.name(name))[1]["Properties"]["Environment"] for name in publishers]
        # the handlers' default dimension: their CLUSTER_NAME (nodeflow.handlers.common)
        (cluster,) = {env["Variables"]["CLUSTER_NAME"] for env in publisher_env}
        alarms = [a["Properties"] for a in synthesized.resources(which, "AWS::CloudWatch::Alarm").values()]
        (alarm,) = [a for a in alarms if a.get("MetricName") == "ReportWritesFailed"]
        assert alarm["Namespace"] == metrics.namespace == "nodeflow"
        assert sorted(alarm["Dimensions"], key=lambda d: d["Name"]) == [
            {"Name": "cluster", "Value": cluster},
            {"Name": "service", "Value": metrics.service},
        ]
        assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 300)
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
        assert (alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]) == (3, 5)
        assert alarm["TreatMissingData"] == "notBreaching"
        assert "status or Event writes about NodePools, EC2NodeClasses or NodeClaims" in alarm["AlarmDescription"]
        assert ("AlarmActions" in alarm) == (which == "full")


def test_the_docs_explain_every_alarm(synthesized: Synthesized) -> None:
    """The Alarms page (docs/operations/alarms.md) names each alarm the stacks create, by its construct id."""
    import aws_cdk as cdk

    page = (ROOT / "docs" / "operations" / "alarms.md").read_text()
    ids = {
        c.node.id
        for which in ("default", "full")
        for c in synthesized.stacks[which].node.find_all()
        if isinstance(c, cdk.aws_cloudwatch.Alarm)
    }
    assert "ReportWritesFailed" in ids
    assert {i for i in ids if f"`{i}`" not in page} == set()


def test_the_stack_carries_the_release_as_a_tag_and_an_output(synthesized: Synthesized) -> None:
    from infra.stack import VERSION_TAG
    from nodeflow import __version__

    assert synthesized.template()["Outputs"]["Version"]["Value"] == __version__
    assert synthesized.stacks["default"].tags.tag_values()[VERSION_TAG] == __version__
    (table,) = (
        t
        for t in synthesized.resources("default", "AWS::DynamoDB::Table").values()
        if "decisions" not in t["Properties"]["TableName"]
    )
    assert {"Key": VERSION_TAG, "Value": __version__} in table["Properties"]["Tags"]  # and its resources
