"""Lambda (scheduled): garbage collection of leaked instances and NodeClaims whose instance is gone."""

from __future__ import annotations

from typing import Any

from nodeflow.handlers.cleanup import deps
from nodeflow.handlers.common import logger, metrics, tracer, workflow_step
from nodeflow.handlers.runtime import runtime
from nodeflow.lifecycle.cleanup import collect_garbage


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@workflow_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    result = collect_garbage(deps(), runtime().settings.gc_grace_seconds)
    metrics.add_metric(name="LeakedInstancesTerminated", unit="Count", value=len(result["terminatedInstances"]))
    logger.info("garbage collected", extra=result)
    return result
