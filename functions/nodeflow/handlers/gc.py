"""Lambda (scheduled): garbage collection — EC2NodeClass and NodePool status, launches whose CleanUp did not
finish, leaked instances, NodeClaims whose instance is gone, Nodes left behind, launch templates nothing uses and
deleted EC2NodeClasses (their finalizer).

Must not touch: what is collected (``nodeflow.lifecycle.cleanup.collect_garbage``); this reads settings, calls it and
emits its metrics.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nodeflow.aws.sfn import launch_status
from nodeflow.handlers import cleanup
from nodeflow.handlers.common import logger, metrics, tracer, workflow_step
from nodeflow.handlers.karpenter_metrics import record_disruptions
from nodeflow.handlers.runtime import runtime
from nodeflow.lifecycle.cleanup import CleanupDeps, collect_garbage
from nodeflow.lifecycle.karpenter_guard import karpenter_guard


def deps() -> CleanupDeps:
    rt = runtime()
    s = rt.settings.require("launch_state_machine_arn")
    sfn, arn = rt.client("stepfunctions"), s.launch_state_machine_arn or ""
    return dataclasses.replace(
        cleanup.deps(),
        launch_status=lambda claim: launch_status(sfn, arn, claim),
        resolver=rt.node_class_resolver(),
        liveness_seconds=s.registration_ttl_seconds + s.initialization_ttl_seconds + 300,
        log=lambda message, extra: logger.warning(message, extra=extra),
        karpenter=lambda: karpenter_guard(
            rt.kube, rt.now(), lambda message, extra: logger.warning(message, extra=extra)
        ),
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@workflow_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    result = collect_garbage(deps(), runtime().settings.gc_grace_seconds)
    record_disruptions(("GarbageCollected", labels) for labels in result.pop("disrupted"))  # not in the result
    metrics.add_metric(name="LeakedInstancesTerminated", unit="Count", value=len(result["terminatedInstances"]))
    metrics.add_metric(name="AbandonedNodeClaimsCleanedUp", unit="Count", value=len(result["abandonedNodeClaims"]))
    metrics.add_metric(name="LeftoverNodesDeleted", unit="Count", value=len(result["deletedNodes"]))
    metrics.add_metric(name="LaunchTemplatesDeleted", unit="Count", value=len(result["deletedLaunchTemplates"]))
    metrics.add_metric(name="NodeClassesFinalized", unit="Count", value=len(result["finalizedNodeClasses"]))
    metrics.add_metric(name="ReportWritesFailed", unit="Count", value=result["reportErrors"])
    logger.info("garbage collected", extra=result)
    return result
