"""LocalNodeflow.stop() leaves nothing running: the workflow executions still running are stopped and their engine
threads waited for (a leftover step would otherwise call a handler, and the API server, during the next test), and a
StopExecution that lands just as a Task starts ends the execution ABORTED, as on AWS (moto's engine made it FAILED
with "pop from empty list")."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution


def test_stop_stops_running_executions_and_waits_for_their_threads(
    make_local: Callable[..., LocalNodeflow],
) -> None:
    from moto.stepfunctions.parser.utils import TMP_THREADS

    local = make_local()
    taint = local.function_name("taint")
    original = local.dispatch.handlers[taint]
    entered = threading.Event()
    returned: list[float] = []

    def slow_taint(event: Any, context: Any) -> Any:  # a Lambda still running when the test ends
        entered.set()
        time.sleep(0.5)
        try:
            return original(event, context)
        finally:
            returned.append(time.monotonic())

    local.dispatch.register(taint, slow_taint)
    before = set(TMP_THREADS)
    arn = local.terminate("no-such-claim")
    assert entered.wait(20), "the Taint task never started"
    engine = [t for t in TMP_THREADS if t not in before]
    assert engine
    assert any(t.is_alive() for t in engine)

    local.stop()
    stopped_at = time.monotonic()

    assert [t.name for t in engine if t.is_alive()] == []
    assert returned
    assert returned[0] <= stopped_at
    assert local.clients.sfn.describe_execution(executionArn=arn)["status"] == "ABORTED"
    assert local.dispatch.count(local.function_name("drain")) == 0  # no state started after the stop


def test_an_execution_stopped_as_its_task_starts_ends_aborted(
    make_local: Callable[..., LocalNodeflow], monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.stepfunctions.parser.asl.eval.environment import Environment

    local = make_local()
    opened, release = threading.Event(), threading.Event()
    open_frame = Environment.open_frame

    def held_open_frame(self: Any, *args: Any, **kwargs: Any) -> Any:
        # the engine opens a frame for the first Task (Taint); hold it there until the execution is stopped
        frame = open_frame(self, *args, **kwargs)
        if not opened.is_set():
            opened.set()
            release.wait(20)
        return frame

    monkeypatch.setattr(Environment, "open_frame", held_open_frame)
    arn = local.terminate("no-such-claim")
    assert opened.wait(20), "the Taint task never started"
    local.clients.sfn.stop_execution(executionArn=arn)
    release.set()

    desc = wait_for_execution(local.clients.sfn, arn, timeout=20)
    assert desc["status"] == "ABORTED", desc
    assert local.dispatch.count(local.function_name("taint")) == 0
