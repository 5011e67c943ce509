"""Lambda (SQS, the interruption queue, ReportBatchItemFailures): AWS interruption events and the
agent's NodeClaim / Node deletions -> events, unavailable offerings, terminate workflows.

Every minute (EventBridge Scheduler, ``{"source": "aws.scheduler"}``) it also polls EC2 DescribeInstanceStatus for
failed status checks and scheduled events (``nodeflow.interruption.messages.status_check_failures``), as
Karpenter's instance status controller; without the permission it logs the error and does nothing.

Unknown and malformed messages are logged and dropped (retrying cannot make them readable); a message
whose handling failed (Kubernetes or AWS unavailable, ...) is returned in ``batchItemFailures`` so SQS
delivers it again, and after the queue's maxReceiveCount moves it to the dead-letter queue. A message is
deleted only once it is handled.

Must not touch: how a message is parsed or acted on (``nodeflow.interruption.messages``,
``nodeflow.lifecycle.interruption_handling``); this reads the SQS batch and reports the failed items.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from nodeflow.aws.sfn import start_workflow
from nodeflow.handlers.common import decision_log_time, log_warning, logger, metrics, record_decision_log, tracer
from nodeflow.handlers.karpenter_metrics import record_interruption_batch, record_status_checks
from nodeflow.handlers.runtime import runtime
from nodeflow.interruption.messages import STATUS_CHECK_FILTERS, Message, Rejected, parse_message, status_check_failures
from nodeflow.lifecycle.interruption_handling import BatchResult, InterruptionDeps, handle_batch, handle_status_checks
from nodeflow.lifecycle.karpenter_guard import karpenter_guard


def deps(context: Any = None) -> InterruptionDeps:
    """The batch's dependencies; ``context``: the Lambda context (the decision log's deadline)."""
    rt = runtime()
    s = rt.settings.require("terminate_state_machine_arn", "table_name")
    arn = s.terminate_state_machine_arn or ""
    sfn = rt.client("stepfunctions")
    offerings = rt.offerings

    def start_termination(node_claim: str, reason: str) -> bool:
        started, execution = start_workflow(sfn, arn, node_claim, {"nodeClaim": node_claim, "reason": reason})
        logger.info(
            "termination started" if started else "termination already running or done",
            extra={"nodeClaim": node_claim, "reason": reason, "execution": execution},
        )
        return started

    return InterruptionDeps(
        kube=rt.kube,
        recorder=rt.recorder,
        mark_unavailable=offerings.mark,
        start_termination=start_termination,
        now=rt.now,
        decisions=rt.decision_log(log_warning, decision_log_time(context)),
        karpenter=lambda: karpenter_guard(rt.kube, rt.now(), log_warning),
    )


def _log_rejected(message_id: str, rejected: Rejected) -> None:
    extra = {
        "messageId": message_id,
        "status": rejected.status,
        "reason": rejected.reason,
        "eventId": rejected.envelope_id,
        "source": rejected.source,
        "detailType": rejected.detail_type,
    }
    if rejected.status == "ignored":
        logger.info("ignoring an interruption-queue message", extra=extra)
    else:
        logger.warning("dropping an interruption-queue message", extra=extra)


def _metrics(counts: Counter[str], result: BatchResult) -> None:
    for outcome in result.outcomes:
        counts[f"Received{outcome.kind}"] += 1
        counts["TerminationsStarted"] += len(outcome.started)
        counts["OfferingsMarkedUnavailable"] += outcome.offerings_marked
        counts["Ignored"] += len(outcome.ignored)  # instances / objects not ours, or not being deleted
        counts["FailedMessages"] += outcome.error is not None
    for name, value in sorted(counts.items()):
        metrics.add_metric(name=name, unit="Count", value=value)


def _status_checks(context: Any) -> dict[str, Any]:
    from nodeflow.aws.ec2.instances import (
        describe_instance_statuses,  # only on the scheduled run (cold start stays small)
    )

    rt = runtime()
    statuses = describe_instance_statuses(rt.client("ec2"), STATUS_CHECK_FILTERS)
    if statuses is None:
        logger.error("ec2:DescribeInstanceStatus is not allowed: status checks are not watched")
        return {"batchItemFailures": [], "result": {"statusChecks": "UnauthorizedOperation"}}
    d = deps(context)
    result = handle_status_checks(d, status_check_failures(statuses, rt.now()))
    record_decision_log(d.decisions)
    record_status_checks(result.outcomes)
    for outcome in result.outcomes:
        if outcome.node_claims:
            logger.info("instance status check failure handled", extra=outcome.to_json())
    return {"batchItemFailures": [], "result": {"statusChecks": result.to_json()}}


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    if event.get("source") == "aws.scheduler" and not event.get("Records"):
        return _status_checks(context)
    records = [r for r in event.get("Records") or [] if isinstance(r, dict)]
    counts: Counter[str] = Counter()
    messages: list[tuple[str, Message]] = []
    seen: list[tuple[str, Message | Rejected]] = []
    for record in records:
        message_id = str(record.get("messageId") or "")
        parsed = parse_message(record.get("body"))
        seen.append((message_id, parsed))
        if isinstance(parsed, Rejected):
            _log_rejected(message_id, parsed)
            counts[f"Dropped{parsed.status.capitalize()}"] += 1
            continue
        messages.append((message_id, parsed))
    d = deps(context)
    result = handle_batch(d, messages) if messages else BatchResult()
    record_decision_log(d.decisions)
    _metrics(counts, result)
    record_interruption_batch(seen, result.outcomes, runtime().now())
    for outcome in result.outcomes:
        if outcome.error is not None:
            logger.warning("interruption message failed; SQS will deliver it again", extra=outcome.to_json())
        elif outcome.ignored and not outcome.node_claims:
            logger.info("interruption message is not about this cluster's nodes", extra=outcome.to_json())
        else:
            logger.info("interruption message handled", extra=outcome.to_json())
    return {
        "batchItemFailures": [{"itemIdentifier": mid} for mid in result.failed],
        "result": result.to_json(),
    }
