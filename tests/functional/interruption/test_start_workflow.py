"""``nodeflow.aws.sfn.start_workflow`` against moto's executing Step Functions: a workflow starts once per
name; a retry (``<name>-2``, ...) only after a failed or aborted execution, never while one runs or
after one succeeded."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from nodeflow.aws.errors import InvalidRequest
from nodeflow.aws.sfn import start_workflow
from sandbox.aws import MOCK_CONFIG
from sandbox.stepfunctions import wait_for_execution

REGION = "us-east-1"
# The input picks the outcome: {"outcome": "fail" | "wait" | anything else (succeed)}.
DEFINITION = {
    "StartAt": "Route",
    "States": {
        "Route": {
            "Type": "Choice",
            "Choices": [
                {"Variable": "$.outcome", "StringEquals": "fail", "Next": "Fail"},
                {"Variable": "$.outcome", "StringEquals": "wait", "Next": "Wait"},
            ],
            "Default": "Done",
        },
        "Wait": {"Type": "Wait", "Seconds": 3600, "Next": "Done"},
        "Fail": {"Type": "Fail", "Error": "Boom", "Cause": "the test asked for it"},
        "Done": {"Type": "Succeed"},
    },
}


@pytest.fixture
def sfn(aws_env: None) -> Iterator[tuple[Any, str]]:
    from moto import mock_aws

    with mock_aws(config=MOCK_CONFIG):
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(
            RoleName="sfn", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []})
        )["Role"]["Arn"]
        client = boto3.client("stepfunctions", region_name=REGION)
        arn = client.create_state_machine(name="terminate", definition=json.dumps(DEFINITION), roleArn=role)[
            "stateMachineArn"
        ]
        try:
            yield client, arn
        finally:
            for e in client.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
                _stop(client, e["executionArn"])


def _stop(client: Any, execution_arn: str) -> None:
    """StopExecution; moto raises AttributeError when the execution's worker has not started yet (a race
    under load), so retry briefly."""
    for _ in range(100):
        try:
            client.stop_execution(executionArn=execution_arn)
            return
        except AttributeError:
            time.sleep(0.02)
    client.stop_execution(executionArn=execution_arn)


def _execution(arn: str, name: str) -> str:
    return f"{arn.replace(':stateMachine:', ':execution:')}:{name}"


def _finish(client: Any, arn: str, name: str) -> str:
    return str(wait_for_execution(client, _execution(arn, name), timeout=10)["status"])


def test_first_start_is_named_after_the_node_claim(sfn: tuple[Any, str]) -> None:
    client, arn = sfn
    assert start_workflow(client, arn, "default-abcde", {"nodeClaim": "default-abcde", "outcome": "succeed"}) == (
        True,
        "default-abcde",
    )
    desc = client.describe_execution(executionArn=_execution(arn, "default-abcde"))
    assert json.loads(desc["input"]) == {"nodeClaim": "default-abcde", "outcome": "succeed"}


def test_no_second_start_while_running_or_after_success(sfn: tuple[Any, str]) -> None:
    client, arn = sfn
    assert start_workflow(client, arn, "c", {"outcome": "wait"}) == (True, "c")
    # running: no-op (StartExecution itself answers a same-name, same-input start of a running execution
    # with that execution, without an error)
    assert start_workflow(client, arn, "c", {"outcome": "wait"}) == (False, "c")
    assert start_workflow(client, arn, "c", {"outcome": "other"}) == (False, "c")
    _stop(client, _execution(arn, "c"))
    assert _finish(client, arn, "c") == "ABORTED"
    assert start_workflow(client, arn, "c", {"outcome": "succeed"}) == (True, "c-2")  # after an abort
    assert _finish(client, arn, "c-2") == "SUCCEEDED"
    assert start_workflow(client, arn, "c", {"outcome": "fail"}) == (False, "c-2")  # after success: no-op
    names = sorted(e["name"] for e in client.list_executions(stateMachineArn=arn)["executions"])
    assert names == ["c", "c-2"]


def test_a_new_name_only_after_a_failure(sfn: tuple[Any, str]) -> None:
    client, arn = sfn
    assert start_workflow(client, arn, "c", {"outcome": "fail"}) == (True, "c")
    assert _finish(client, arn, "c") == "FAILED"
    assert start_workflow(client, arn, "c", {"outcome": "fail"}) == (True, "c-2")
    assert _finish(client, arn, "c-2") == "FAILED"
    assert start_workflow(client, arn, "c", {"outcome": "wait"}) == (True, "c-3")
    assert start_workflow(client, arn, "c", {"outcome": "wait"}) == (False, "c-3")  # c-3 runs


def test_attempts_are_bounded(sfn: tuple[Any, str]) -> None:
    client, arn = sfn
    for expected in ("c", "c-2"):
        assert start_workflow(client, arn, "c", {"outcome": "fail"}, attempts=2) == (True, expected)
        assert _finish(client, arn, expected) == "FAILED"
    assert start_workflow(client, arn, "c", {"outcome": "fail"}, attempts=2) == (False, "c-2")


def test_unknown_state_machine_is_a_typed_error(sfn: tuple[Any, str]) -> None:
    client, arn = sfn
    with pytest.raises(InvalidRequest, match="StateMachineDoesNotExist"):
        start_workflow(client, arn.replace(":terminate", ":missing"), "c", {})
