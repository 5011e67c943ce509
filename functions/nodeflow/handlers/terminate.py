"""Lambda: the terminate workflow's Terminate step (TerminateInstances; done once the instance shuts down).

Must not touch: what the Terminate step does (``nodeflow.lifecycle.termination.terminate``); this reads the workflow
state and calls it.
"""

from __future__ import annotations

from typing import Any

from nodeflow.aws.errors import AwsError
from nodeflow.handlers.common import TerminationInput, logger, parse, termination_step, tracer
from nodeflow.handlers.karpenter_metrics import record_cloudprovider_error
from nodeflow.handlers.taint import deps
from nodeflow.lifecycle.termination import terminate


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@termination_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    step = parse(TerminationInput, event)
    try:
        result = terminate(deps(), step.node_claim, step.taint.provider_id if step.taint else None)
    except AwsError as exc:  # EC2 refused (a Kubernetes API error is no cloud provider error)
        record_cloudprovider_error("Delete", exc, "node.termination")
        raise
    logger.info("instance terminating", extra=result)
    return result
