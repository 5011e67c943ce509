"""Lambda: the launch workflow's Register step (polled until the node appears).

Must not touch: what registration does (``nodeflow.lifecycle.registration.register``); this reads the workflow state and
calls it.
"""

from __future__ import annotations

from typing import Any

from nodeflow.handlers.common import StepInput, logger, parse, tracer, workflow_step
from nodeflow.handlers.karpenter_metrics import record_registration
from nodeflow.handlers.runtime import runtime
from nodeflow.lifecycle.registration import StepDeps, register


def deps() -> StepDeps:
    rt = runtime()
    s = rt.settings
    return StepDeps(rt.kube, rt.now, s.registration_ttl_seconds, s.initialization_ttl_seconds)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@workflow_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    step = parse(StepInput, event)
    launch, previous = step.launch, step.registration
    result = register(
        deps(),
        step.node_claim,
        launch.launched_at if launch else None,
        node_name=launch.private_dns_name if launch else None,
        listed_at=previous.listed_at if previous else None,
    )
    record_registration(result.pop("created", None))  # for the metrics, not the workflow's state
    return result
