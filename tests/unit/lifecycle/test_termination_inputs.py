"""The terminate workflow's step input and error names (the contract with statemachines/terminate.asl.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeflow.aws import errors as aws
from nodeflow.handlers.common import InvalidInput, TerminationInput, parse
from nodeflow.kube import errors as kube
from nodeflow.lifecycle.errors import TerminationFailed, Transient, as_termination_error

ASL = Path(__file__).resolve().parents[3] / "statemachines" / "terminate.asl.json"


def test_the_input_takes_the_execution_state() -> None:
    step = parse(
        TerminationInput,
        {
            "nodeClaim": "default-abcde",
            "reason": "SpotInterrupted",
            "taint": {"node": "ip-10-0-0-1.ec2.internal", "providerID": "aws:///us-east-1a/i-0abc", "gone": False},
            "drain": {"state": "draining", "waitSeconds": 5},  # other state is ignored
        },
    )
    assert (step.node_claim, step.reason) == ("default-abcde", "SpotInterrupted")
    assert step.taint is not None
    assert (step.taint.node, step.taint.provider_id) == ("ip-10-0-0-1.ec2.internal", "aws:///us-east-1a/i-0abc")
    assert parse(TerminationInput, {"nodeClaim": "default-abcde"}).reason is None


@pytest.mark.parametrize("event", [{}, {"nodeClaim": ""}, {"nodeClaim": "Not_A_Name"}, {"reason": "Expired"}])
def test_bad_input_names_the_field(event: dict[str, object]) -> None:
    with pytest.raises(InvalidInput, match="nodeClaim"):
        parse(TerminationInput, event)


@pytest.mark.parametrize(
    ("error", "name"),
    [
        (aws.Throttled("slow down", code="RequestLimitExceeded"), "Transient"),
        (aws.AwsUnavailable("500"), "Transient"),
        (kube.Unavailable("connection refused"), "Transient"),
        (kube.Conflict("stale", status=409), "Transient"),
        (aws.AccessDenied("no", code="UnauthorizedOperation"), "TerminationFailed"),
        (aws.InvalidRequest("bad", code="InvalidParameterValue"), "TerminationFailed"),
        (kube.Forbidden("no", status=403), "Forbidden"),
    ],
)
def test_error_names(error: Exception, name: str) -> None:
    assert type(as_termination_error(error)).__name__ == name
    assert issubclass(TerminationFailed, Exception)
    assert issubclass(Transient, Exception)


def test_the_state_machine_retries_transient_errors_and_ends_failures_in_a_fail_state() -> None:
    definition = json.loads(ASL.read_text())
    states = definition["States"]
    tasks = {name: s for name, s in states.items() if s["Type"] == "Task"}
    assert set(tasks) == {"Taint", "Drain", "Terminate", "RemoveFinalizer"}
    for name, task in tasks.items():
        assert task["Retry"][0]["ErrorEquals"] == ["Transient"], name
        assert task["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "TerminationFailed"}]
    assert states["TerminationFailed"] == {"Type": "Fail", "ErrorPath": "$.error.Error", "CausePath": "$.error.Cause"}
    for wait in ("WaitForDrain", "WaitForVolumes"):
        assert states[wait]["SecondsPath"] == "$.drain.waitSeconds"
