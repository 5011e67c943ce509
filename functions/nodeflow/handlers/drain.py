"""Lambda: the terminate workflow's Drain step (polled until the node is drained and its volumes detached)."""

from __future__ import annotations

from typing import Any

from nodeflow.handlers.common import TerminationInput, logger, metrics, parse, termination_step, tracer
from nodeflow.handlers.taint import deps
from nodeflow.lifecycle.termination import drain


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@termination_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    step = parse(TerminationInput, event)
    held = step.drain.held_passes if step.drain else 0
    result = drain(deps(), step.node_claim, step.taint.node if step.taint else None, held_passes=held)
    if result.get("evicted"):
        metrics.add_metric(name="PodsEvicted", unit="Count", value=len(result["evicted"]))
    if result.get("deleted"):
        metrics.add_metric(name="PodsDeletedForTerminationGracePeriod", unit="Count", value=len(result["deleted"]))
    logger.info("drain pass", extra=result)
    return result
