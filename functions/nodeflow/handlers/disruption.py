"""Lambda (every minute from EventBridge Scheduler, and on the disruption queue's cluster changes):
one round of voluntary disruption, plus expiration. The queue's messages are only a trigger.

Must not touch: what the round decides or does (``nodeflow.lifecycle.disruption_round``); this reads settings, calls the
round and turns its outcome into metrics.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from nodeflow.aws.sfn import start_launch, start_workflow
from nodeflow.disruption.model import Settings as DisruptionSettings
from nodeflow.handlers.common import decision_log_time, log_warning, logger, metrics, record_decision_log, tracer
from nodeflow.handlers.karpenter_metrics import (
    record_allowed_disruptions,
    record_disruption_decision,
    record_disruptions,
    record_evaluations,
    record_failed_validation,
    record_pool_costs,
    record_unhealthy_disrupted,
)
from nodeflow.handlers.runtime import runtime
from nodeflow.kube.reports import Reports
from nodeflow.lifecycle.disruption_round import DisruptionDeps, pod_events, record_pod_events, run
from nodeflow.lifecycle.karpenter_guard import hold


def deps(context: Any = None) -> DisruptionDeps:
    """The round's dependencies; ``context``: the Lambda context (the decision log's deadline)."""
    rt = runtime()
    s = rt.settings.require(
        "terminate_state_machine_arn", "launch_state_machine_arn", "replace_state_machine_arn", "table_name"
    )
    sfn, arn = rt.client("stepfunctions"), s.terminate_state_machine_arn or ""

    def start(claim: str, reason: str) -> bool:
        return start_workflow(sfn, arn, claim, {"nodeClaim": claim, "reason": reason})[0]

    def launch(claim: str) -> bool:
        return start_launch(sfn, s.launch_state_machine_arn or "", claim)

    def replace(name: str, payload: Mapping[str, Any]) -> bool:
        return start_workflow(sfn, s.replace_state_machine_arn or "", name, payload)[0]

    return DisruptionDeps(
        kube=rt.kube,
        catalog=rt.catalog,
        unavailable=rt.offerings.current,
        start_terminate=start,
        recorder=rt.recorder,
        now=rt.now,
        sleep=time.sleep,
        namespace=s.nodeflow_namespace,
        settings=DisruptionSettings(
            spot_to_spot_consolidation=s.spot_to_spot_consolidation, replace_bar_k=s.consolidation_replace_bar_k
        ),
        validation_seconds=float(s.disruption_validation_seconds),
        start_launch=launch,
        start_replace=replace,
        node_repair=s.node_repair,
        decisions=rt.decision_log(log_warning, decision_log_time(context)),
        log=log_warning,
        karpenter=lambda reports: hold(rt.kube, rt.recorder, rt.now(), reports, log_warning),
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    d = deps(context)
    reports = Reports(d.log)
    timers = record_pod_events(d, pod_events(event.get("Records") or []), reports)
    outcome = run(d)
    record_decision_log(d.decisions)
    metrics.add_metric(name="ReportWritesFailed", unit="Count", value=reports.failed + outcome.reports.failed)
    metrics.add_metric(name="NodesExpired", unit="Count", value=len(outcome.expired))
    metrics.add_metric(name="NodesDisrupted", unit="Count", value=len(outcome.executed))
    metrics.add_metric(name="DisruptionBlocked", unit="Count", value=len(outcome.blocked))
    if outcome.command and (outcome.executed or outcome.replacing):  # the command was carried out
        record_disruption_decision(outcome.command, outcome.command_pools)
    if outcome.command and outcome.failed_validation:
        record_failed_validation(outcome.command)
    record_disruptions(outcome.disrupted)
    if outcome.repair is not None:
        record_unhealthy_disrupted(outcome.repair.unhealthy)
    record_allowed_disruptions(outcome.allowed_disruptions, outcome.consuming_budgets)
    record_pool_costs(outcome.pool_costs)
    record_evaluations(outcome.evaluations)
    logger.info("disruption round", extra=outcome.to_json())
    return {"batchItemFailures": [], "result": {**outcome.to_json(), "podEventTimers": timers}}
