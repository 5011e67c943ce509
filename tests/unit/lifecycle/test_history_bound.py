"""The terminate workflow's history bound (``nodeflow.lifecycle.termination.max_history_events``) recomputed from
statemachines/terminate.asl.json itself: every loop goes through Drain, and the longest paths and retry counts
give exactly the documented figure. Also the Drain step's input shapes and the hand-over's pass setting."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from nodeflow.handlers.common import InvalidInput, parse
from nodeflow.handlers.drain import DrainStep
from nodeflow.lifecycle import termination as t

ASL = Path(__file__).resolve().parents[3] / "statemachines" / "terminate.asl.json"
STATES: dict[str, Any] = json.loads(ASL.read_text())["States"]


def successors(state: Mapping[str, Any]) -> Iterator[str]:
    if "Next" in state:
        yield state["Next"]
    for choice in state.get("Choices", []):
        yield choice["Next"]
    if "Default" in state:
        yield state["Default"]
    for catch in state.get("Catch", []):
        yield catch["Next"]


def attempts(state: Mapping[str, Any]) -> int:
    return 1 + sum(int(r.get("MaxAttempts", 3)) for r in state.get("Retry", []))


def weight(name: str) -> int:
    """History events of one visit (Step Functions' and moto's event types)."""
    state = STATES[name]
    if state["Type"] == "Task":
        return 2 + 3 * attempts(state)  # entered, exited; scheduled, started, succeeded/failed/timed out each
    return 2  # entered + exited (a Fail state: entered, then the execution's end, counted apart)


def is_end(name: str) -> bool:
    return STATES[name]["Type"] in ("Succeed", "Fail") or bool(STATES[name].get("End"))


@cache
def longest(name: str, to_drain: bool) -> int | None:
    """The heaviest path from ``name`` (its weight included) to an edge into Drain (``to_drain``) or to an end,
    never entering Drain on the way; None if there is none. Recursion terminates only if the graph without the
    edges into Drain has no cycle (checked below)."""
    best: int | None = 0 if (not to_drain and is_end(name)) else None
    for nxt in successors(STATES[name]):
        rest = (0 if to_drain else None) if nxt == "Drain" else longest(nxt, to_drain)
        if rest is not None and (best is None or rest > best):
            best = rest
    return None if best is None else weight(name) + best


def test_every_loop_goes_through_drain() -> None:
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(name: str) -> None:
        assert name not in visiting, f"a loop avoids Drain at {name}"
        if name in done:
            return
        visiting.add(name)
        for nxt in successors(STATES[name]):
            if nxt != "Drain":
                visit(nxt)
        visiting.discard(name)
        done.add(name)

    for name in STATES:
        if name != "Drain":
            visit(name)
    visit("Drain")


def test_the_bound_is_what_the_state_machine_allows() -> None:
    tasks = [s for s in STATES.values() if s["Type"] == "Task"]
    assert max(attempts(s) for s in tasks) == t.TASK_ATTEMPTS
    prefix = longest("Taint", to_drain=True)  # from the start to the first Drain
    loop = longest("Drain", to_drain=True)  # one Drain visit and the longest way back
    tail = longest("Drain", to_drain=False)  # the last Drain visit and the longest way to an end
    assert (prefix, loop, tail) == (32, 70, 102)
    assert prefix is not None
    assert loop is not None
    assert tail is not None
    visits = t.PASSES_PER_EXECUTION + t.HAND_OVER_ATTEMPTS + 1
    assert t.max_history_events() == 1 + prefix + (visits - 1) * loop + tail + 1 == 10_636
    assert t.max_history_events() < 25_000 / 2
    for n in (1, 3, 12):
        assert t.max_history_events(n) == 1 + prefix + (n + t.HAND_OVER_ATTEMPTS) * loop + tail + 1
    # a pass without retries: Drain (task: 5), Drained? (2), WaitForDrain (2)
    assert weight("Drain") - 3 * (t.TASK_ATTEMPTS - 1) + weight("Drained?") + weight("WaitForDrain") == 9


def test_the_hand_over_ends_in_a_succeed_state() -> None:
    choice = STATES["Drained?"]
    (rule,) = [c for c in choice["Choices"] if c.get("StringEquals") == t.CONTINUED]
    assert rule["Variable"] == "$.drain.state"
    assert STATES[rule["Next"]]["Type"] == "Succeed"
    assert rule["Next"] == "ContinuedAsNew"
    assert STATES["Drain"]["Parameters"] == {"state.$": "$", "execution.$": "$$.Execution.Name"}
    assert STATES["WaitForTermination"]["Next"] == "Drain"


# --- the Drain step's input -----------------------------------------------------------------------------


def test_the_drain_step_takes_the_state_and_the_execution_name() -> None:
    state = {"nodeClaim": "default-abcde", "workflow": "default-abcde", "generation": 7, "drain": {"heldPasses": 5000}}
    step = parse(DrainStep, {"state": state, "execution": "default-abcde_c7"})
    assert step.execution == "default-abcde_c7"
    assert step.state.drain is not None
    assert (step.state.drain.held_passes, step.state.drain.passes, step.state.generation) == (5000, 0, 7)
    # an execution of an older definition passes its state alone: no name, never hands over
    flat = parse(DrainStep, {"nodeClaim": "default-abcde", "drain": {"heldPasses": 3, "passes": 2}})
    assert flat.execution is None
    assert flat.state.node_claim == "default-abcde"


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"state": {"nodeClaim": "c"}, "execution": "a:b"}, "execution"),
        ({"state": {"nodeClaim": "c"}, "execution": "x" * 81}, "execution"),
        ({"state": {"nodeClaim": "c", "generation": 0}}, "state.generation"),
        ({"state": {"nodeClaim": "c", "workflow": "a b"}}, "state.workflow"),
        ({"state": {"nodeClaim": "c", "drain": {"heldPasses": -1}}}, "state.drain.heldPasses"),
        ({"state": {"nodeClaim": "c", "drain": {"heldPasses": True}}}, "state.drain.heldPasses"),
        ({"state": {"nodeClaim": "c", "drain": {"passes": "3"}}}, "state.drain.passes"),
        ({"state": {}}, "state.nodeClaim"),
    ],
)
def test_bad_drain_input_names_the_field(event: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput, match=field.replace(".", r"\.")):
        parse(DrainStep, event)


def test_the_passes_setting_is_bounded_by_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeflow.handlers import drain, runtime

    env = {"CLUSTER_NAME": "demo", "AWS_REGION": "us-east-1"}
    for value, expected in (("", 100), ("0", 100), ("1", 1), ("100", 100), ("101", None), ("-1", None)):
        monkeypatch.setattr(runtime, "_runtime", None)
        monkeypatch.setattr("os.environ", {**env, "DRAIN_PASSES_PER_EXECUTION": value})
        if expected is None:
            with pytest.raises(runtime.SettingsError, match="DRAIN_PASSES_PER_EXECUTION"):
                drain.passes_per_execution()
        else:
            assert drain.passes_per_execution() == expected
    monkeypatch.setattr(runtime, "_runtime", None)
