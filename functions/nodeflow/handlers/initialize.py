"""Lambda: the launch workflow's Initialize step (polled until the node is ready).

Must not touch: what initialization checks (``nodeflow.lifecycle.registration.initialize``); this reads the workflow
state and calls it.
"""

from __future__ import annotations

from typing import Any

from nodeflow.handlers.common import StepInput, logger, parse, tracer, workflow_step
from nodeflow.handlers.register import deps
from nodeflow.lifecycle.registration import initialize


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@workflow_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    step = parse(StepInput, event)
    return initialize(deps(), step.node_claim, step.launch.launched_at if step.launch else None)
