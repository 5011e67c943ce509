"""The decision log's deadline in the Lambdas, for real: the provisioner in the sandbox (moto, the real control plane)
with DynamoDB throttling every decision-log write stops writing at its deadline (the Lambda context's remaining
time less ``DECISION_LOG_MARGIN_SECONDS``), ends before its timeout with its NodeClaims made, and publishes what it
did not write as ``DecisionLogWriteTimeouts``. Every writer (provisioner, disruption, interruption) gets the
invocation's deadline."""

from __future__ import annotations

import importlib

import pytest

from nodeflow.handlers.common import DECISION_LOG_MARGIN_SECONDS
from sandbox.nodeflow import LocalNodeflow
from tests.functional.faults.dynamodb import BatchWriteFaults
from tests.functional.lifecycle.conftest import pending


def test_a_throttled_decision_log_ends_at_the_provisioners_deadline(
    local: LocalNodeflow, published: dict[str, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retries enough for ~28 s of throttling: the run ends at its deadline (timeout - margin) instead, with what it
    did not write counted."""
    from nodeflow.aws import decision_log

    pending(local, "warm", 1)
    local.send_pending(["default/warm"])
    assert local.provision()["result"]["nodeClaimsCreated"]  # the cold start (catalog, clients) out of the way
    faults = BatchWriteFaults(monkeypatch, local.world.decision_table_name)
    faults.throttle.left = -1
    monkeypatch.setattr(decision_log, "ATTEMPTS", 30)
    timeout = int(DECISION_LOG_MARGIN_SECONDS) + 4  # the writes get what is left of 4 s after provisioning
    local.clients.lambda_.update_function_configuration(
        FunctionName=local.function_name("provisioner"), Timeout=timeout
    )
    pending(local, "web", 3)
    local.send_pending(["default/web"])

    result = local.provision()["result"]
    assert result["nodeClaimsCreated"]
    run = [i for i in local.dispatch.invocations if i.function_name == local.function_name("provisioner")][-1]
    assert run.error is None
    assert run.duration < timeout - DECISION_LOG_MARGIN_SECONDS + 1, run.duration  # the deadline, not 28 s
    assert published["DecisionLogWriteTimeouts"] > 0
    assert published["DecisionLogItemsWritten"] == 0
    assert published["DecisionLogWriteErrors"] == 0
    assert faults.throttle.throttled, "the writes were tried"
    local.wait_for_executions()


class _Context:
    """A Lambda context with a fixed remaining time."""

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@pytest.mark.parametrize("function", ["provisioner", "disruption", "interruption"])
def test_every_decision_log_writer_gets_the_invocations_deadline(local: LocalNodeflow, function: str) -> None:
    module = importlib.import_module(f"nodeflow.handlers.{function}")
    writer = module.deps(_Context()).decisions
    assert writer is not None
    assert writer.time_left is not None
    assert writer.time_left() == 60 - DECISION_LOG_MARGIN_SECONDS
    assert module.deps().decisions.time_left is None  # no context (a test calling the handler bare): no deadline
