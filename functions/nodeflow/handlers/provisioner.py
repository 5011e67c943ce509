"""Lambda (SQS, one invocation at a time): provision the cluster's pending pods.

The batch is a trigger: a fresh cluster snapshot decides what to launch. Unreadable messages are
logged and dropped (they cannot be provisioned better by retrying); a failure of the provisioning
itself fails the whole batch so SQS delivers it again (nothing is lost, nothing doubles). Pods a
NodeflowPolicy pause window holds get a run of their own when it closes, and pods placed but not bound yet one a few
seconds later (kube-scheduler may put other pods in their room): a delayed message on this queue.

Must not touch: what is provisioned (``nodeflow.lifecycle.provisioner.provision``); this reads the SQS batch and
settings and calls it.
"""

from __future__ import annotations

import json
from typing import Any

from nodeflow.aws.sfn import start_launch
from nodeflow.handlers.common import decision_log_time, logger, metrics, record_decision_log, tracer
from nodeflow.handlers.karpenter_metrics import record_nodeclaims_created, record_scheduling_duration
from nodeflow.handlers.runtime import runtime
from nodeflow.lifecycle.claims import batch_id
from nodeflow.lifecycle.karpenter_guard import hold
from nodeflow.lifecycle.provisioner import PauseRetry, PendingRetry, ProvisionDeps, provision, retry_attempt
from nodeflow.lifecycle.reservation_tracking import live_reservations


def deps(context: Any = None) -> ProvisionDeps:
    """The provisioner's dependencies; ``context``: the Lambda context (the decision log's deadline)."""
    rt = runtime()
    s = rt.settings.require("launch_state_machine_arn", "table_name")
    arn = s.launch_state_machine_arn or ""
    sfn = rt.client("stepfunctions")
    offerings = rt.offerings

    def log(message: str, extra: dict[str, Any]) -> None:
        logger.warning(message, extra=extra)

    queue = rt.settings.provisioning_queue_url

    def retry(due: PauseRetry | PendingRetry) -> bool:
        """A delayed message on this function's own queue, unless one is delayed there already (only these retries
        are delayed): one retry at a time, each run it starts re-arms it while pods are still held or pending."""
        sqs = rt.client("sqs")
        attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
        if int(attrs.get("Attributes", {}).get("ApproximateNumberOfMessagesDelayed", "0")) > 0:
            return False
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(due.message()), DelaySeconds=due.delay_seconds)
        return True

    return ProvisionDeps(
        kube=rt.kube,
        catalog=rt.catalog,
        unavailable=offerings.current,
        start_launch=lambda name: start_launch(sfn, arn, name),
        recorder=rt.recorder,
        now=rt.now,
        resolver=rt.node_class_resolver(),
        log=log,
        reservations=lambda classes, now: live_reservations(rt.client("ec2"), classes, now, log),
        decisions=rt.decision_log(log, decision_log_time(context)),
        retry=retry if queue else None,
        karpenter=lambda reports: hold(rt.kube, rt.recorder, rt.now(), reports, log),
    )


def _body(record: dict[str, Any]) -> dict[str, Any] | None:
    try:
        body = json.loads(record.get("body") or "")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        logger.warning("dropping an unreadable message", extra={"messageId": record.get("messageId")})
        return None
    return body


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    records = [r for r in event.get("Records") or [] if isinstance(r, dict)]
    readable = [(r, body) for r in records if (body := _body(r)) is not None]
    if not readable:
        return {"batchItemFailures": []}
    d = deps(context)
    batch = batch_id(str(r.get("messageId", "")) for r, _ in readable)
    result = provision(d, batch, retry_attempt([body for _, body in readable]))
    record_decision_log(d.decisions)
    metrics.add_metric(name="NodeClaimsCreated", unit="Count", value=len(result.created))
    metrics.add_metric(name="PendingPods", unit="Count", value=result.pending_pods)
    metrics.add_metric(name="ReportWritesFailed", unit="Count", value=result.report_errors)
    if "solve" in result.timings:
        record_scheduling_duration(result.timings["solve"], "provisioner")
    record_nodeclaims_created(result.pools[name] for name in result.created)
    logger.info("provisioned", extra=result.to_json())
    if result.deferred:  # still throttled after backoff: SQS delivers the batch again, the retry starts them
        raise RuntimeError(f"{len(result.deferred)} launch execution(s) could not be started (throttled); retrying")
    return {"batchItemFailures": [], "result": result.to_json()}
