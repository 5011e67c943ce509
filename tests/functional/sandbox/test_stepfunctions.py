"""sandbox.stepfunctions: real ASL executed by moto, Lambda tasks dispatched to Python handlers in-process."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox.aws import AwsWorld, Clients, create_functions, create_state_machine
from sandbox.stepfunctions import (
    LambdaContext,
    LambdaDispatch,
    UnknownFunctionError,
    check_engine_internals,
    execution_trace,
    quiet_engine_logs,
    scale_waits,
    stretch_task_timeouts,
    wait_for_execution,
)


class Flaky(Exception):
    """Raised by the work handler on its first call: retried."""


class Boom(Exception):
    """Raised when the input asks for it: caught."""


def flaky_asl(work_arn: str) -> dict[str, Any]:
    return {
        "Comment": "Retry on Flaky, Wait 60 s, Catch Boom -> Cleanup",
        "StartAt": "Work",
        "States": {
            "Work": {
                "Type": "Task",
                "Resource": work_arn,
                "Retry": [{"ErrorEquals": ["Flaky"], "IntervalSeconds": 30, "MaxAttempts": 3, "BackoffRate": 2}],
                "Catch": [{"ErrorEquals": ["Boom"], "ResultPath": "$.error", "Next": "Cleanup"}],
                "Next": "Pause",
            },
            "Pause": {"Type": "Wait", "Seconds": 60, "Next": "Done"},
            "Done": {"Type": "Succeed"},
            "Cleanup": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {"FunctionName": "cleanup", "Payload.$": "$"},
                "ResultSelector": {"cleaned.$": "$.Payload.cleaned"},
                "Next": "Failed",
            },
            "Failed": {"Type": "Fail", "Error": "LaunchFailed", "Cause": "cleaned up after Boom"},
        },
    }


@pytest.fixture
def flaky_machine(world: AwsWorld, clients: Clients, tmp_path: Path) -> str:
    create_functions(world, clients, ["work", "cleanup"])
    path = tmp_path / "flaky.asl.json"
    path.write_text(json.dumps(flaky_asl("${WorkArn}")))
    return create_state_machine(world, clients, "flaky", path, {"WorkArn": world.function_arns["work"]})


def test_engine_internals_in_place() -> None:
    """Fails loudly when a moto upgrade moves what LambdaDispatch and scale_waits patch."""
    check_engine_internals()
    with LambdaDispatch({}), scale_waits(0.5):
        check_engine_internals()
    check_engine_internals()


def test_engine_internals_check_notices_a_move(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.awslambda.models import LambdaFunction
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    monkeypatch.delattr(LambdaFunction, "_invoke_lambda")
    monkeypatch.setattr(retrier_decl, "time", None)
    with pytest.raises(RuntimeError, match=r"(?s)_invoke_lambda is gone.*no longer imports the time module"):
        check_engine_internals()


def test_retry_wait_and_catch_end_to_end(clients: Clients, flaky_machine: str) -> None:
    calls: list[dict[str, Any]] = []

    def work(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        calls.append(event)
        if len(calls) == 1:
            raise Flaky("first call flakes")
        if event.get("boom"):
            raise Boom("cannot launch")
        return {"launched": event["claim"]}

    def cleanup(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        assert context.function_name == "cleanup"
        return {"cleaned": event["claim"], "error": event["error"]["Error"]}

    sfn = clients.sfn
    with LambdaDispatch({"work": work, "cleanup": cleanup}) as dispatch, scale_waits(0.001), quiet_engine_logs():
        # 1. Flaky once (retried after 30 s * 0.001), then a 60 s Wait (0.06 s), then success.
        t0 = time.monotonic()
        ok = sfn.start_execution(stateMachineArn=flaky_machine, name="ok", input='{"claim": "a"}')["executionArn"]
        result = wait_for_execution(sfn, ok, timeout=10)
        elapsed = time.monotonic() - t0
        trace = execution_trace(sfn, ok)
        assert result["status"] == "SUCCEEDED", trace.render()
        assert json.loads(result["output"]) == {"launched": "a"}
        assert elapsed < 5, f"waits were not scaled: {elapsed:.1f}s"
        assert trace.names == ["Work", "Pause", "Done"]
        work_visit = trace.visit("Work")
        assert (work_visit.outcome, work_visit.retries, work_visit.errors) == ("retried", 1, ["Flaky"])
        assert trace.visit("Pause").type == "Wait"
        assert 0.05 <= (trace.visit("Pause").duration or 0) < 2
        assert (trace.transitions, trace.task_invocations) == (3, 2)

        # 2. Flaky (retried), then Boom: caught, Cleanup runs, the Fail state ends the execution.
        calls.clear()
        bad = sfn.start_execution(stateMachineArn=flaky_machine, name="bad", input='{"claim": "b", "boom": true}')[
            "executionArn"
        ]
        result = wait_for_execution(sfn, bad, timeout=10)
        trace = execution_trace(sfn, bad)
        assert result["status"] == "FAILED", trace.render()
        assert (result["error"], result["cause"]) == ("LaunchFailed", "cleaned up after Boom")
        assert trace.names == ["Work", "Cleanup", "Failed"]
        work_visit = trace.visit("Work")
        assert (work_visit.outcome, work_visit.error, work_visit.retries) == ("caught", "Boom", 1)
        assert work_visit.message == "Boom: cannot launch"
        assert json.loads(work_visit.cause or "")["errorType"] == "Boom"
        assert trace.visit("Cleanup").outcome == "succeeded"
        assert (trace.visit("Failed").outcome, trace.visit("Failed").error) == ("failed", "LaunchFailed")
        assert (trace.status, trace.error, trace.transitions, trace.task_invocations) == (
            "FAILED",
            "LaunchFailed",
            3,
            3,
        )

        rendered = trace.render()
        assert "caught (1 retry)" in rendered
        assert "Boom: cannot launch" in rendered
        assert rendered.splitlines()[0].startswith("execution flaky:bad: FAILED")

    assert [(i.function_name, i.error) for i in dispatch.invocations] == [
        ("work", "Flaky"),
        ("work", None),
        ("work", "Flaky"),
        ("work", "Boom"),
        ("cleanup", None),
    ]
    assert dispatch.count("work") == 4
    assert dispatch.count(errors=True) == 3
    assert all(i.duration >= 0 for i in dispatch.invocations)


def test_dispatch_direct_invoke_and_context(world: AwsWorld, clients: Clients) -> None:
    create_functions(world, clients, ["echo", "orphan"], timeout=30, memory_size=256)
    seen: list[tuple[Any, LambdaContext]] = []

    def echo(event: Any, context: LambdaContext) -> Any:
        seen.append((event, context))
        return {"got": event}

    from moto.awslambda.models import LambdaFunction

    original = LambdaFunction.__dict__["_invoke_lambda"]
    with LambdaDispatch({"echo": echo}) as dispatch:
        out = clients.lambda_.invoke(FunctionName="echo", Payload=b'{"a": 1}')
        assert json.loads(out["Payload"].read()) == {"got": {"a": 1}}
        assert "FunctionError" not in out
        out = clients.lambda_.invoke(FunctionName="echo")  # no payload: moto passes the string "{}"
        assert json.loads(out["Payload"].read()) == {"got": {}}
        with pytest.raises(UnknownFunctionError, match=r"'orphan' \(known: echo\)"):
            clients.lambda_.invoke(FunctionName="orphan", Payload=b"{}")
        with pytest.raises(RuntimeError, match="already installed"):
            LambdaDispatch({}).install()
        # Non-JSON results fail like the runtime's marshalling does.
        dispatch.register("echo", lambda event, context: {"when": object()})
        out = clients.lambda_.invoke(FunctionName="echo", Payload=b"{}")
        assert out["FunctionError"]
        assert json.loads(out["Payload"].read())["errorType"] == "Runtime.MarshalError"
    assert LambdaFunction.__dict__["_invoke_lambda"] is original

    _event, context = seen[0]
    assert context.function_name == "echo"
    assert context.invoked_function_arn == world.function_arns["echo"]
    assert context.memory_limit_in_mb == 256
    assert 0 < context.get_remaining_time_in_millis() <= 30_000
    assert len(context.aws_request_id) == 36
    assert dispatch.unknown == ["orphan"]
    assert [i.error for i in dispatch.invocations] == [None, None, "Runtime.MarshalError"]


def test_wait_for_execution_times_out_unscaled(world: AwsWorld, clients: Clients, tmp_path: Path) -> None:
    path = tmp_path / "sleep.asl.json"
    path.write_text(json.dumps({"StartAt": "Sleep", "States": {"Sleep": {"Type": "Wait", "Seconds": 60, "End": True}}}))
    arn = create_state_machine(world, clients, "sleep", path, {})
    execution = clients.sfn.start_execution(stateMachineArn=arn, name="long", input="{}")["executionArn"]
    with pytest.raises(TimeoutError, match="execution:sleep:long"):
        wait_for_execution(clients.sfn, execution, timeout=0.2)
    trace = execution_trace(clients.sfn, execution)
    assert (trace.status, trace.names, trace.visit("Sleep").outcome) == ("RUNNING", ["Sleep"], "running")
    clients.sfn.stop_execution(executionArn=execution)  # interrupts the real 60 s wait
    assert wait_for_execution(clients.sfn, execution, timeout=5)["status"] == "ABORTED"


def test_scale_waits_restores_moto() -> None:
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

    wait, clock = WaitFunction.__dict__["_wait_interval"], retrier_decl.__dict__["time"]
    with scale_waits(0.01):
        assert WaitFunction.__dict__["_wait_interval"] is not wait
        scaled = retrier_decl.__dict__["time"]
        t0 = time.monotonic()
        scaled.sleep(5)
        assert time.monotonic() - t0 < 1
        assert scaled.time() == pytest.approx(time.time(), abs=1)
    assert WaitFunction.__dict__["_wait_interval"] is wait
    assert retrier_decl.__dict__["time"] is clock
    with pytest.raises(ValueError, match="factor"), scale_waits(-1):
        pass


def test_stretched_task_timeouts(world: AwsWorld, clients: Clients, tmp_path: Path) -> None:
    """A Task with TimeoutSeconds 1 whose handler takes 1.5 s: States.Timeout, unless the sandbox stretches task
    timeouts (stretch_task_timeouts: the in-process harness's queueing for the interpreter lock is not the
    function's time); the history keeps the state's own timeoutInSeconds."""
    create_functions(world, clients, ["slow"])
    asl = {
        "StartAt": "Slow",
        "States": {"Slow": {"Type": "Task", "Resource": "${SlowArn}", "TimeoutSeconds": 1, "End": True}},
    }
    path = tmp_path / "slow.asl.json"
    path.write_text(json.dumps(asl))
    machine = create_state_machine(world, clients, "slow", path, {"SlowArn": world.function_arns["slow"]})

    def slow(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        time.sleep(1.5)
        return {"done": True}

    sfn = clients.sfn
    with LambdaDispatch({"slow": slow}), quiet_engine_logs():
        plain = sfn.start_execution(stateMachineArn=machine, name="plain")["executionArn"]
        assert wait_for_execution(sfn, plain, timeout=10)["status"] == "FAILED"
        assert execution_trace(sfn, plain).visit("Slow").errors == ["States.Timeout"]
        with stretch_task_timeouts(3):
            stretched = sfn.start_execution(stateMachineArn=machine, name="stretched")["executionArn"]
            assert wait_for_execution(sfn, stretched, timeout=10)["status"] == "SUCCEEDED"
        scheduled = [e for e in execution_trace(sfn, stretched).events if e["type"] == "LambdaFunctionScheduled"]
        assert scheduled[0]["lambdaFunctionScheduledEventDetails"]["timeoutInSeconds"] == 1
