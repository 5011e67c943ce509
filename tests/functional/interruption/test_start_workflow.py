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


# --- chains of continued executions (<root>_c2, <root>_c3, ...: a long execution handing over) -------------


def _chain(client: Any, arn: str, root: str, outcomes: list[str]) -> None:
    """Executions ``root``, ``root_c2``, ... as a workflow leaves them: every earlier one succeeded (it handed
    over), the last one has ``outcomes[-1]``."""
    for g, outcome in enumerate(outcomes, 1):
        name = root if g == 1 else f"{root}_c{g}"
        client.start_execution(stateMachineArn=arn, name=name, input=json.dumps({"outcome": outcome}))
        if outcome != "wait":
            _finish(client, arn, name)


def _count(client: Any, operation: str) -> Any:
    calls: list[int] = []
    client.meta.events.register(f"before-call.sfn.{operation}", lambda **_: calls.append(1))
    return lambda: len(calls)


def test_a_start_while_the_latest_continuation_runs_is_a_no_op(sfn: tuple[Any, str]) -> None:
    client, arn = sfn
    _chain(client, arn, "c", ["succeed", "succeed", "wait"])
    starts = _count(client, "StartExecution")
    assert start_workflow(client, arn, "c", {"outcome": "wait"}) == (False, "c_c3")
    assert starts() == 0
    _stop(client, _execution(arn, "c_c3"))
    assert _finish(client, arn, "c_c3") == "ABORTED"
    # the latest continuation failed: the next run starts (and it is a chain of its own)
    assert start_workflow(client, arn, "c", {"outcome": "wait"}) == (True, "c-2")
    assert start_workflow(client, arn, "c", {"outcome": "wait"}) == (False, "c-2")


def test_a_chain_that_ended_in_success_is_done(sfn: tuple[Any, str]) -> None:
    client, arn = sfn
    _chain(client, arn, "c", ["succeed", "succeed"])
    assert start_workflow(client, arn, "c", {"outcome": "wait"}) == (False, "c_c2")
    _chain(client, arn, "d", ["succeed", "fail"])
    assert start_workflow(client, arn, "d", {"outcome": "succeed"}) == (True, "d-2")


def test_a_long_chain_is_found_in_few_lookups(sfn: tuple[Any, str]) -> None:
    client, arn = sfn
    _chain(client, arn, "c", ["succeed"] * 12 + ["wait"])
    lookups = _count(client, "DescribeExecution")
    assert start_workflow(client, arn, "c", {"outcome": "wait"}) == (False, "c_c13")
    assert lookups() <= 9  # generations 1, 2, 4, 8, 16, then 12, 14, 13 (not 14 one by one)


def test_a_hand_over_between_two_lookups_is_followed(sfn: tuple[Any, str]) -> None:
    """c_c3 ends (having started c_c4) after start_workflow saw c_c4 missing and before it looked at c_c3."""
    client, arn = sfn
    _chain(client, arn, "c", ["succeed", "succeed", "succeed"])
    seen: list[str] = []

    def hand_over(params: dict[str, Any], **_: Any) -> None:
        name = params["executionArn"].rsplit(":", 1)[-1]
        seen.append(name)
        if name == "c_c3" and "c_c4" in seen and len(seen) == 4:  # looked up: c, c_c2, c_c4 (missing), c_c3
            client.start_execution(stateMachineArn=arn, name="c_c4", input=json.dumps({"outcome": "wait"}))

    client.meta.events.register("before-parameter-build.sfn.DescribeExecution", hand_over)
    assert start_workflow(client, arn, "c", {"outcome": "succeed"}) == (False, "c_c4")
    assert seen[:4] == ["c", "c_c2", "c_c4", "c_c3"]
    names = sorted(e["name"] for e in client.list_executions(stateMachineArn=arn)["executions"])
    assert names == ["c", "c_c2", "c_c3", "c_c4"]  # no second run


def test_names_stay_within_the_limit(sfn: tuple[Any, str]) -> None:
    client, arn = sfn
    claim = "p" * 240 + "-abcde"  # a valid NodeClaim name of 246 characters
    started, first = start_workflow(client, arn, claim, {"outcome": "fail"})
    assert started
    assert len(first) == 80
    assert _finish(client, arn, first) == "FAILED"
    started, second = start_workflow(client, arn, claim, {"outcome": "wait"})
    assert started
    assert len(second) == 80
    assert second != first
    assert start_workflow(client, arn, claim, {"outcome": "wait"}) == (False, second)
