"""Lambda: the launch workflow's Launch step (one instance for one NodeClaim).

Must not touch: what is launched (``nodeflow.lifecycle.launch.launch``); this reads the workflow state and calls it.
"""

from __future__ import annotations

from typing import Any

from nodeflow.handlers.common import StepInput, logger, metrics, parse, tracer, workflow_step
from nodeflow.handlers.karpenter_metrics import record_cloudprovider_error
from nodeflow.handlers.runtime import runtime
from nodeflow.lifecycle.launch import LaunchDeps, NodeClassCache, launch

_node_classes = NodeClassCache(ttl_seconds=60)  # per warm container


def deps() -> LaunchDeps:
    rt = runtime()
    return LaunchDeps(
        kube=rt.kube,
        ec2=rt.client("ec2"),
        ssm=rt.client("ssm"),
        iam=rt.client("iam"),
        offerings=rt.offerings,
        catalog=rt.catalog,
        cluster=rt.cluster_info(),
        kubernetes_version=lambda: rt.kubernetes_version,
        now=rt.now,
        recorder=rt.recorder,
        node_classes=_node_classes,
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@workflow_step
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    step = parse(StepInput, event)
    try:
        result = launch(deps(), step.node_claim, runtime().settings.cluster_name)
    except Exception as exc:
        record_cloudprovider_error("Create", exc)
        raise
    metrics.add_metric(name="InstancesLaunched", unit="Count", value=1)
    logger.info("launched", extra=result)
    return result
