"""Lambda: the launch workflow's CleanUp step (its Catch): no instance outlives a failed NodeClaim.

Must not touch: what is cleaned up (``nodeflow.lifecycle.cleanup.cleanup`` decides); this only reads the event and
settings, calls the step and shapes its answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nodeflow.handlers.common import StepInput, logger, metrics, parse, tracer, workflow_step
from nodeflow.handlers.karpenter_metrics import record_launch_failure
from nodeflow.handlers.runtime import runtime
from nodeflow.lifecycle.cleanup import CleanupDeps, cleanup


def deps() -> CleanupDeps:
    rt = runtime()
    queue = rt.settings.provisioning_queue_url

    def requeue(message: Mapping[str, Any]) -> None:
        rt.client("sqs").send_message(QueueUrl=queue, MessageBody=json.dumps(dict(message)))

    return CleanupDeps(
        kube=rt.kube,
        ec2=rt.client("ec2"),
        recorder=rt.recorder,
        now=rt.now,
        cluster_name=rt.settings.cluster_name,
        requeue=requeue if queue else None,
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@workflow_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    step = parse(StepInput, event)
    result = cleanup(deps(), step.node_claim, step.error, step.launch.instance_id if step.launch else None)
    metrics.add_metric(name="LaunchFailures", unit="Count", value=1)
    record_launch_failure(step.error, result.pop("labels", None))  # for the metrics, not the workflow's state
    logger.warning("cleaned up a failed NodeClaim", extra=result)
    return result
