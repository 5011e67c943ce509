"""Lambda: the terminate workflow's Drain step (polled until the node is drained and its volumes detached; hands
over to the next execution of the workflow after ``PASSES_PER_EXECUTION`` passes).

Input: ``{"state": <the execution's state>, "execution": <its name>}`` (the state machine's Parameters); an
execution of an older definition passes its state alone, and never hands over.

Must not touch: what a drain pass does (``nodeflow.lifecycle.termination.drain_step``); this reads the workflow state
and calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nodeflow.aws.sfn import EXECUTION_NAME_PATTERN, start_execution
from nodeflow.handlers.common import TerminationInput, logger, metrics, parse, termination_step, tracer
from nodeflow.handlers.karpenter_metrics import emit, record_drain_pass
from nodeflow.handlers.runtime import SettingsError, runtime
from nodeflow.handlers.taint import deps
from nodeflow.lifecycle.termination import PASSES_PER_EXECUTION, Execution, drain_step


class DrainStep(BaseModel):
    model_config = ConfigDict(extra="ignore")

    state: TerminationInput
    execution: str | None = Field(default=None, pattern=EXECUTION_NAME_PATTERN)

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: Any) -> Any:
        return data if isinstance(data, Mapping) and "state" in data else {"state": data}


def passes_per_execution() -> int:
    configured = runtime().settings.drain_passes_per_execution
    if configured is not None and not 1 <= configured <= PASSES_PER_EXECUTION:
        raise SettingsError(f"DRAIN_PASSES_PER_EXECUTION: expected 1 to {PASSES_PER_EXECUTION}, got {configured}")
    return configured or PASSES_PER_EXECUTION


def start_continuation(name: str, payload: Mapping[str, Any]) -> bool:
    rt = runtime()
    arn = rt.settings.terminate_state_machine_arn
    if not arn:
        raise SettingsError("TERMINATE_STATE_MACHINE_ARN: required to continue a drain in a new execution")
    return start_execution(rt.client("stepfunctions"), arn, name, payload)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@termination_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    step = parse(DrainStep, event)
    state, drained = step.state, step.state.drain
    execution = Execution(
        name=step.execution,
        state=event.get("state", event),
        workflow=state.workflow,
        generation=state.generation,
        passes=drained.passes if drained else 0,
    )
    result = drain_step(
        deps(),
        state.node_claim,
        state.taint.node if state.taint else None,
        held_passes=drained.held_passes if drained else 0,
        execution=execution,
        start=start_continuation,
        passes_per_execution=passes_per_execution(),
    )
    if result.get("evicted"):
        metrics.add_metric(name="PodsEvicted", unit="Count", value=len(result["evicted"]))
    if result.get("deleted"):
        metrics.add_metric(name="PodsDeletedForTerminationGracePeriod", unit="Count", value=len(result["deleted"]))
    record_drain_pass(state.reason, result.pop("evictionRequests", None))  # for the metrics, not the state
    if (pool := result.pop("drainedNodePool", None)) is not None:  # for the metrics, not the workflow's state
        emit("karpenter_nodes_drained_total", 1, nodepool=pool)
    if result.get("handOverFailed"):
        logger.warning("could not continue in a new execution; draining on", extra=result)
    logger.info("drain pass", extra=result)
    return result
