"""Lambda: the terminate workflow's RemoveFinalizer step (the Node, then the NodeClaim, go away).

Must not touch: what removing the finalizers does (``nodeflow.lifecycle.termination.remove_finalizers``); this reads the
workflow state and calls it.
"""

from __future__ import annotations

from typing import Any

from nodeflow.handlers.common import TerminationInput, logger, metrics, parse, termination_step, tracer
from nodeflow.handlers.karpenter_metrics import record_termination
from nodeflow.handlers.taint import deps
from nodeflow.lifecycle.termination import remove_finalizers


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@termination_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    step = parse(TerminationInput, event)
    result = remove_finalizers(deps(), step.node_claim, step.taint.node if step.taint else None)
    if result.get("nodeClaimFinalized"):
        metrics.add_metric(name="NodesTerminated", unit="Count", value=1)
    record_termination(result.pop("terminated", {}))  # for the metrics, not the workflow's state
    logger.info("terminated", extra=result)
    return result
