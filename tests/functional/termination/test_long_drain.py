"""A drain held for days keeps going (the real terminate.asl.json in moto, waits scaled): PodDisruptionBudget and
do-not-disrupt holds back off; an execution that has run its Drain passes hands over to the next execution of
the workflow (``<claim>_c2``, ...), which finishes the termination; held counts far above 1,000 are fine; the
history of an execution stays under ``max_history_events``; a hand-over that fails keeps the execution
draining; the terminate poll loops through Drain."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.kube.client import PODS
from nodeflow.lifecycle.termination import HAND_OVER_ATTEMPTS, max_history_events
from sandbox.nodeflow import LocalNodeflow
from tests.functional.termination.conftest import Launched, eventually, kube, launch, replacement
from tests.functional.termination.test_terminate_workflow import (
    claim_of,
    finished,
    instance_state,
    node_of,
    pod_names,
)

PDB = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "db", "namespace": "default"},
    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
}


def execution_arn(local: LocalNodeflow, name: str) -> str:
    return f"{local.terminate_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def exists(local: LocalNodeflow, name: str) -> bool:
    return any(e["name"] == name for e in local.terminate_executions())


def drain_passes(local: LocalNodeflow, execution: str | None = None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(input, output) of every successful Drain invocation (of one execution), in order."""
    name = local.function_name("drain")
    return [
        (i.event, i.result)
        for i in local.dispatch.invocations
        if i.function_name == name
        and isinstance(i.result, dict)
        and (execution is None or (isinstance(i.event, dict) and i.event.get("execution") == execution))
    ]


def hold(local: LocalNodeflow, pod: str) -> None:
    kube(local).patch(
        PODS, pod, {"metadata": {"annotations": {wk.ANNOTATION_DO_NOT_DISRUPT: "true"}}}, namespace="default"
    )


def release(local: LocalNodeflow, pod: str) -> None:
    kube(local).patch(
        PODS, pod, {"metadata": {"annotations": {wk.ANNOTATION_DO_NOT_DISRUPT: None}}}, namespace="default"
    )


def settled(local: LocalNodeflow, node: Launched) -> list[dict[str, Any]]:
    """Once the pod may go: wait until the chain of executions terminated ``node`` (the one running may still hand
    over before its next pass sees the pod gone); every execution, finished."""
    eventually(lambda: claim_of(local, node.claim) is None, timeout=60, what=f"NodeClaim {node.claim} to go")
    return local.wait_for_terminations()


def gone(local: LocalNodeflow, node: Launched) -> None:
    assert claim_of(local, node.claim) is None
    assert node_of(local, node.node) is None
    assert instance_state(local, node.instance_id) in ("shutting-down", "terminated")


def stop_all(local: LocalNodeflow) -> None:
    """Stop every running terminate execution (continuations would outlive the test)."""
    for _ in range(3):  # a hand-over may start one more while stopping
        for e in local.terminate_executions():
            if e["status"] != "RUNNING":
                continue
            for _ in range(100):  # moto: AttributeError while the execution's worker is starting
                try:
                    local.clients.sfn.stop_execution(executionArn=e["executionArn"])
                    break
                except AttributeError:
                    time.sleep(0.02)
        time.sleep(0.1)


@pytest.fixture
def make(make_local: Callable[..., LocalNodeflow]) -> Iterator[Callable[..., LocalNodeflow]]:
    made: list[LocalNodeflow] = []

    def factory(**options: Any) -> LocalNodeflow:
        made.append(make_local(**options))
        return made[-1]

    yield factory
    for local in made:
        stop_all(local)


@pytest.fixture
def local(make: Callable[..., LocalNodeflow]) -> LocalNodeflow:
    return make()


@pytest.fixture
def short(make: Callable[..., LocalNodeflow]) -> LocalNodeflow:
    """Executions hand over after 3 Drain passes (the production default is 100)."""
    return make(env={"DRAIN_PASSES_PER_EXECUTION": "3"})


@pytest.fixture
def start_fails(short: LocalNodeflow) -> Iterator[Callable[[int], list[int]]]:
    """``start_fails(n)``: the handlers' next ``n`` StartExecution calls fail (throttled); returns the list of
    calls seen (1 per failed call, 0 per call let through)."""
    from botocore.exceptions import ClientError

    from nodeflow.handlers import runtime

    client = runtime.runtime().client("stepfunctions")
    state = {"left": 0}
    seen: list[int] = []

    def hook(**_: Any) -> None:
        if state["left"] > 0:
            state["left"] -= 1
            seen.append(1)
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "StartExecution")
        seen.append(0)

    def arm(times: int) -> list[int]:
        state["left"] = times
        seen.clear()
        return seen

    client.meta.events.register("before-call.sfn.StartExecution", hook)
    yield arm
    client.meta.events.unregister("before-call.sfn.StartExecution", hook)


# ---------------------------------------------------------------------------------------------------------


def test_a_pod_disruption_budget_hold_backs_off_then_completes(local: LocalNodeflow) -> None:
    node = launch(local, "db", 1)
    (db,) = node.pods
    local.apply([PDB])
    local.terminate(node.claim)
    eventually(lambda: len(drain_passes(local)) >= 5, what="five refused drain passes")
    refused = [(out["heldPasses"], out["waitSeconds"]) for _, out in drain_passes(local)[:5]]
    assert refused == [(1, 10), (2, 20), (3, 40), (4, 80), (5, 160)]
    assert all(out["blockedByPDB"] == [f"default/{db}"] for _, out in drain_passes(local)[:5])
    assert db in pod_names(local)
    assert instance_state(local, node.instance_id) == "running"

    # a replacement runs elsewhere (the workload scaled up, a node provisioned for it): the budget lets the
    # eviction through and the count starts again
    replacement(local, "db")
    eventually(lambda: claim_of(local, node.claim) is None, timeout=60, what="the termination to finish")
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_terminations())
    after = [out for _, out in drain_passes(local) if out.get("evicted") == [f"default/{db}"]]
    assert after
    assert after[0]["heldPasses"] == 0
    gone(local, node)


def test_a_held_drain_continues_as_new_and_the_continuation_terminates(short: LocalNodeflow) -> None:
    local = short
    node = launch(local, "batch", 1)
    (batch,) = node.pods
    hold(local, batch)
    first = local.terminate(node.claim, reason="Expired")
    second, third = f"{node.claim}_c2", f"{node.claim}_c3"
    eventually(lambda: exists(local, third), timeout=90, what="two hand-overs")  # 7 passes: slow when loaded

    # the first execution ran its 3 passes, handed over and succeeded at ContinuedAsNew
    desc = finished(local, first)
    assert desc["status"] == "SUCCEEDED"
    trace = local.trace(first)
    assert trace.names[-3:] == ["Drain", "Drained?", "ContinuedAsNew"]
    assert len(trace.visits("Drain")) == 4  # 3 passes + the hand-over
    output = json.loads(desc["output"])
    assert output["drain"]["state"] == "continued"
    assert output["drain"]["continuedAs"] == second
    # everything needed to go on is carried; held counts go on growing (10, 20, 40 | 80, 160, 300 | 300 ...)
    carried = json.loads(local.clients.sfn.describe_execution(executionArn=execution_arn(local, second))["input"])
    assert carried["nodeClaim"] == node.claim
    assert carried["reason"] == "Expired"
    assert carried["taint"]["node"] == node.node
    assert (carried["workflow"], carried["generation"], carried["continuedFrom"]) == (node.claim, 2, node.claim)
    assert (carried["drain"]["heldPasses"], carried["drain"]["passes"]) == (3, 0)
    waits = [out["waitSeconds"] for _, out in drain_passes(local) if out["state"] == "draining"]
    assert waits[:6] == [10, 20, 40, 80, 160, 300]
    assert [out["heldPasses"] for _, out in drain_passes(local, second)][:3] == [4, 5, 6]

    # another start of "the terminate workflow of this NodeClaim" while the chain runs is a no-op
    before = {e["name"] for e in local.terminate_executions()}
    latest = local.terminate(node.claim, reason="SpotInterrupted")
    assert latest.rsplit(":", 1)[-1].startswith(f"{node.claim}_c")
    assert {e["name"] for e in local.terminate_executions()} - before <= {f"{node.claim}_c{g}" for g in range(3, 99)}
    assert not exists(local, f"{node.claim}-2")
    assert instance_state(local, node.instance_id) == "running"  # never terminated under a do-not-disrupt pod

    # the pod may go: the latest execution finishes the termination
    release(local, batch)
    done = settled(local, node)
    assert all(d["status"] == "SUCCEEDED" for d in done), [(d["name"], d["status"]) for d in done]
    names = sorted(d["name"] for d in done)
    assert names[0] == node.claim
    assert all(n.startswith(f"{node.claim}_c") for n in names[1:])
    last = max(done, key=lambda d: d["startDate"])
    assert local.trace(last["executionArn"]).names[-1] == "Terminated"
    assert all(local.trace(d["executionArn"]).names[-1] == "ContinuedAsNew" for d in done if d is not last)
    gone(local, node)
    assert batch not in pod_names(local)


def test_held_counts_far_above_a_thousand_are_accepted(local: LocalNodeflow) -> None:
    node = launch(local, "batch", 1)
    (batch,) = node.pods
    hold(local, batch)
    payload = {"nodeClaim": node.claim, "reason": "Test", "drain": {"heldPasses": 5000, "state": "draining"}}
    local.clients.sfn.start_execution(stateMachineArn=local.terminate_arn, name=node.claim, input=json.dumps(payload))
    arn = execution_arn(local, node.claim)
    eventually(lambda: len(drain_passes(local)) >= 2, what="two drain passes")
    assert [(o["heldPasses"], o["waitSeconds"]) for _, o in drain_passes(local)[:2]] == [(5001, 300), (5002, 300)]
    assert local.clients.sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"
    release(local, batch)
    assert finished(local, arn)["status"] == "SUCCEEDED"
    gone(local, node)


@pytest.mark.parametrize(
    ("drain", "field"),
    [({"heldPasses": -1}, "heldPasses"), ({"heldPasses": "7"}, "heldPasses"), ({"passes": 1.5}, "passes")],
)
def test_a_bad_drain_state_fails_naming_the_field(local: LocalNodeflow, drain: dict[str, Any], field: str) -> None:
    payload = {"nodeClaim": "default-gone1", "drain": drain}
    local.clients.sfn.start_execution(stateMachineArn=local.terminate_arn, name="bad", input=json.dumps(payload))
    desc = finished(local, execution_arn(local, "bad"))
    assert desc["status"] == "FAILED"
    assert desc["error"] == "InvalidInput"
    assert f"drain.{field}" in json.loads(desc["cause"])["errorMessage"]


def test_the_history_of_a_long_held_execution_stays_under_the_bound(make: Callable[..., LocalNodeflow]) -> None:
    passes = 12
    local = make(env={"DRAIN_PASSES_PER_EXECUTION": str(passes)})
    node = launch(local, "batch", 1)
    hold(local, node.pods[0])
    first = local.terminate(node.claim)
    assert finished(local, first, timeout=60)["status"] == "SUCCEEDED"
    events = local.trace(first).events
    # 9 events a pass (Drain: TaskStateEntered, LambdaFunctionScheduled/-Started/-Succeeded, TaskStateExited;
    # Drained?: entered/exited; WaitForDrain: entered/exited)
    entered = [
        int(e["id"])
        for e in events
        if e["type"] == "TaskStateEntered" and e["stateEnteredEventDetails"]["name"] == "Drain"
    ]
    gaps = {b - a for a, b in itertools.pairwise(entered)}
    assert gaps == {9}, gaps
    assert len(entered) == passes + 1
    # ExecutionStarted, Taint (5), 12 passes (9 each), the hand-over (Drain 5, Drained? 2, ContinuedAsNew 2), end
    assert len(events) == 1 + 5 + passes * 9 + 5 + 2 + 2 + 1
    assert len(events) < max_history_events(passes) < max_history_events() < 25_000
    print(f"\n{len(events)} history events for {passes} held passes + hand-over; bound {max_history_events(passes)}")


def test_a_failed_hand_over_keeps_draining_and_tries_again(
    short: LocalNodeflow, start_fails: Callable[[int], list[int]]
) -> None:
    local = short
    node = launch(local, "batch", 1)
    (batch,) = node.pods
    hold(local, batch)
    calls = start_fails(2)
    first = local.terminate(node.claim)
    eventually(lambda: exists(local, f"{node.claim}_c2"), what="the hand-over")
    assert calls[:3] == [1, 1, 0]  # two failed starts, then one let through
    assert finished(local, first)["status"] == "SUCCEEDED"
    outs = [out for _, out in drain_passes(local, node.claim)]
    assert [o["state"] for o in outs] == ["draining"] * 5 + ["continued"]
    assert [bool(o.get("handOverFailed")) for o in outs] == [False, False, False, True, True, False]
    assert "ThrottlingException" in outs[3]["handOverFailed"]
    assert instance_state(local, node.instance_id) == "running"
    release(local, batch)
    done = settled(local, node)
    assert [d["status"] for d in done] == ["SUCCEEDED"] * len(done)
    gone(local, node)


def test_a_hand_over_that_never_succeeds_fails_loudly_and_keeps_the_node(
    short: LocalNodeflow, start_fails: Callable[[int], list[int]]
) -> None:
    local = short
    node = launch(local, "batch", 1)
    hold(local, node.pods[0])
    start_fails(10**6)
    # an execution that has already tried to hand over HAND_OVER_ATTEMPTS - 1 times (3 passes + attempts)
    payload = {"nodeClaim": node.claim, "drain": {"passes": 3 + HAND_OVER_ATTEMPTS - 1}}
    local.clients.sfn.start_execution(stateMachineArn=local.terminate_arn, name=node.claim, input=json.dumps(payload))
    desc = finished(local, execution_arn(local, node.claim))
    assert desc["status"] == "FAILED"
    assert desc["error"] == "TerminationFailed"
    assert f"could not continue in execution {node.claim}_c2 after {HAND_OVER_ATTEMPTS} tries" in desc["cause"]
    claim = claim_of(local, node.claim)
    assert claim is not None
    assert wk.FINALIZER_TERMINATION in claim["metadata"]["finalizers"]
    assert instance_state(local, node.instance_id) == "running"


def test_a_retried_hand_over_starts_one_continuation(short: LocalNodeflow) -> None:
    """The Drain step runs twice each time (as after a lost response and a retry): one continuation."""
    local = short
    node = launch(local, "batch", 1)
    (batch,) = node.pods
    hold(local, batch)
    name = local.function_name("drain")
    original = local.dispatch.handlers[name]

    outputs: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def twice(event: Any, context: Any) -> Any:
        outputs.append((event, original(event, context)))
        outputs.append((event, original(event, context)))
        return outputs[-1][1]

    local.dispatch.register(name, twice)
    first = local.terminate(node.claim)
    eventually(lambda: exists(local, f"{node.claim}_c2"), what="the hand-over")
    assert finished(local, first)["status"] == "SUCCEEDED"
    # both calls of the hand-over pass answered the same continuation (the second start is a no-op)
    handed = [out for event, out in outputs if event.get("execution") == node.claim and out["state"] == "continued"]
    assert [o["continuedAs"] for o in handed] == [f"{node.claim}_c2"] * 2
    started = [
        json.loads(local.clients.sfn.describe_execution(executionArn=e["executionArn"])["input"])
        for e in local.terminate_executions()
        if e["name"] != node.claim
    ]
    assert sorted(i["generation"] for i in started) == list(range(2, len(started) + 2))  # one per generation
    release(local, batch)
    done = settled(local, node)
    assert all(d["status"] == "SUCCEEDED" for d in done)
    assert sorted(d["name"] for d in done)[:2] == [node.claim, f"{node.claim}_c2"]
    assert len({d["name"] for d in done}) == len(done)
    gone(local, node)


def test_an_instance_not_shutting_down_yet_is_looked_at_again_through_drain(local: LocalNodeflow) -> None:
    from nodeflow.handlers import runtime

    node = launch(local, "web", 1)
    client = runtime.runtime().client("ec2")
    answers: list[str] = []

    def still_running(parsed: dict[str, Any], **_: Any) -> None:  # the first answer says "running"
        if not answers:
            for change in parsed.get("TerminatingInstances", []):
                change["CurrentState"] = {"Code": 16, "Name": "running"}
        answers.append("seen")

    client.meta.events.register("after-call.ec2.TerminateInstances", still_running)
    try:
        arn = local.terminate(node.claim)
        assert finished(local, arn)["status"] == "SUCCEEDED"
    finally:
        client.meta.events.unregister("after-call.ec2.TerminateInstances", still_running)
    names = local.trace(arn).names
    at = names.index("WaitForTermination")
    assert names[at:] == [
        "WaitForTermination",
        "Drain",
        "Drained?",
        "Terminate",
        "Terminating?",
        "RemoveFinalizer",
        "Terminated",
    ]
    assert len(answers) == 2
    gone(local, node)
