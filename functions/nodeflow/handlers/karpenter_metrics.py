"""Decision metrics under Karpenter's metric and label names, as CloudWatch metrics (Powertools EMF).

Each sample is its own EMF record (``single_metric``) in the ``nodeflow`` namespace, its labels as dimensions next
to ``service`` and ``cluster`` (``CLUSTER_NAME``), so one metric's label values do not leak into another's.
CloudWatch refuses an empty dimension value: an empty label (e.g. ``consolidation_type`` of a drift decision) is
left out of the dimensions instead.

Must not touch: what the metrics count (the steps' results say); only their names, labels and EMF shape are decided
here.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit, single_metric

from nodeflow.api import labels as wk
from nodeflow.lifecycle.errors import as_workflow_error

__all__ = [
    "KARPENTER_METRICS",
    "NAMESPACE",
    "emit",
    "message_type",
    "record_allowed_disruptions",
    "record_cloudprovider_error",
    "record_disruption_decision",
    "record_disruptions",
    "record_drain_pass",
    "record_evaluations",
    "record_failed_validation",
    "record_interruption_batch",
    "record_launch_failure",
    "record_nodeclaims_created",
    "record_nodeclaims_disrupted",
    "record_pool_costs",
    "record_queue_failure",
    "record_registration",
    "record_scheduling_duration",
    "record_status_checks",
    "record_termination",
    "record_unhealthy_disrupted",
]

NAMESPACE = "nodeflow"

#: name -> (unit, label names), as Karpenter names them
KARPENTER_METRICS: dict[str, tuple[MetricUnit, tuple[str, ...]]] = {
    "karpenter_nodeclaims_created_total": (MetricUnit.Count, ("reason", "nodepool", "min_values_relaxed")),
    "karpenter_voluntary_disruption_decisions_total": (
        MetricUnit.Count,
        ("decision", "reason", "consolidation_type"),
    ),
    "karpenter_voluntary_disruption_decisions_by_nodepool_total": (
        MetricUnit.Count,
        ("nodepool", "decision", "reason", "consolidation_type"),
    ),
    "karpenter_voluntary_disruption_eligible_nodes": (MetricUnit.Count, ("reason",)),
    "karpenter_voluntary_disruption_failed_validations_total": (MetricUnit.Count, ("consolidation_type",)),
    "karpenter_voluntary_disruption_queue_failures_total": (
        MetricUnit.Count,
        ("decision", "reason", "consolidation_type"),
    ),
    "karpenter_voluntary_disruption_decision_evaluation_duration_seconds": (
        MetricUnit.Seconds,
        ("reason", "consolidation_type"),
    ),
    "karpenter_scheduler_scheduling_duration_seconds": (MetricUnit.Seconds, ("controller",)),
    "karpenter_nodeclaims_disrupted_total": (MetricUnit.Count, ("reason", "nodepool", "capacity_type")),
    "karpenter_nodeclaims_unhealthy_disrupted_total": (
        MetricUnit.Count,
        ("condition", "nodepool", "capacity_type", "image_id"),
    ),
    "karpenter_nodeclaims_terminated_total": (MetricUnit.Count, ("nodepool", "capacity_type", "zone")),
    "karpenter_nodeclaims_termination_duration_seconds": (MetricUnit.Seconds, ("nodepool",)),
    "karpenter_nodeclaims_instance_termination_duration_seconds": (MetricUnit.Seconds, ("nodepool",)),
    "karpenter_nodes_created_total": (MetricUnit.Count, ("nodepool", "zone")),
    "karpenter_nodes_terminated_total": (MetricUnit.Count, ("nodepool", "zone")),
    "karpenter_nodes_termination_duration_seconds": (MetricUnit.Seconds, ("nodepool",)),
    "karpenter_nodes_lifetime_duration_seconds": (MetricUnit.Seconds, ("nodepool",)),
    "karpenter_nodes_drained_total": (MetricUnit.Count, ("nodepool",)),
    "karpenter_nodepools_allowed_disruptions": (MetricUnit.Count, ("nodepool", "reason")),
    "karpenter_nodepools_nodes_consuming_budgets": (MetricUnit.Count, ("nodepool", "reason")),
    "karpenter_nodepools_cost_total": (MetricUnit.NoUnit, ("nodepool",)),  # $/hour, a gauge despite its name
    "karpenter_pods_drained_total": (MetricUnit.Count, ("reason",)),
    "karpenter_pods_eviction_requests_total": (MetricUnit.Count, ("code",)),
    "karpenter_interruption_received_messages_total": (MetricUnit.Count, ("message_type",)),
    "karpenter_interruption_deleted_messages_total": (MetricUnit.Count, ()),
    "karpenter_interruption_message_queue_duration_seconds": (MetricUnit.Seconds, ()),
    "karpenter_interruption_instance_status_unhealthy_total": (MetricUnit.Count, ("category",)),
    "karpenter_cloudprovider_errors_total": (MetricUnit.Count, ("controller", "method", "provider", "error")),
}

#: nodeflow's disruption method -> Karpenter's consolidation_type label
_CONSOLIDATION_TYPE = {
    "emptiness": "empty",
    "single-node consolidation": "single",
    "multi-node consolidation": "multi",
}


def emit(name: str, value: float, **labels: str) -> None:
    """One sample of a Karpenter metric; ValueError names an unknown metric or a missing / unexpected label."""
    if name not in KARPENTER_METRICS:
        raise ValueError(f"unknown Karpenter metric {name!r} (known: {', '.join(sorted(KARPENTER_METRICS))})")
    unit, names = KARPENTER_METRICS[name]
    if set(labels) != set(names):
        missing, extra = sorted(set(names) - set(labels)), sorted(set(labels) - set(names))
        raise ValueError(f"{name}: labels must be {', '.join(names)} (missing: {missing}, unexpected: {extra})")
    dimensions = {"service": NAMESPACE}
    if cluster := os.environ.get("CLUSTER_NAME", "").strip():
        dimensions["cluster"] = cluster
    dimensions.update({k: v for k, v in labels.items() if v})
    with single_metric(name=name, unit=unit, value=value, namespace=NAMESPACE, default_dimensions=dimensions):
        pass


def record_disruption_decision(command: Mapping[str, Any], nodepools: Iterable[str] = ()) -> None:
    """A voluntary disruption command that was executed (its ``to_json()`` form), once in all and once per
    NodePool of its candidates (``nodepools``)."""
    labels = {
        "decision": str(command["decision"]),
        "reason": str(command["reason"]).lower(),
        "consolidation_type": _CONSOLIDATION_TYPE.get(str(command.get("method") or ""), ""),
    }
    for pool in sorted(set(nodepools)):
        emit("karpenter_voluntary_disruption_decisions_by_nodepool_total", 1, nodepool=pool, **labels)
    emit("karpenter_voluntary_disruption_decisions_total", 1, **labels)


def record_failed_validation(command: Mapping[str, Any]) -> None:
    """A consolidation command (its ``to_json()`` form) the validation round did not confirm: its candidates, by
    consolidation type, as Karpenter counts them. Karpenter validates only consolidation (emptiness, single- and
    multi-node), so a drift command that fails validation is not counted."""
    if kind := _CONSOLIDATION_TYPE.get(str(command.get("method") or "")):
        emit(
            "karpenter_voluntary_disruption_failed_validations_total",
            len(command["candidates"]),
            consolidation_type=kind,
        )


def record_evaluations(evaluations: Iterable[Any]) -> None:
    """The disruption methods a round tried (``Evaluation`` each: reason, consolidation_type, eligible,
    seconds): each one's evaluation time, and per reason the eligible-node gauge (multi- and single-node
    consolidation share reason ``underutilized`` and their candidates: one sample)."""
    eligible: dict[str, int] = {}
    for e in evaluations:
        emit(
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            e.seconds,
            reason=e.reason,
            consolidation_type=e.consolidation_type,
        )
        eligible[e.reason] = e.eligible
    for reason, count in eligible.items():
        emit("karpenter_voluntary_disruption_eligible_nodes", count, reason=reason)


def record_scheduling_duration(seconds: float, controller: str) -> None:
    """How long a scheduling simulation took (``controller``: ``provisioner`` or ``disruption``)."""
    emit("karpenter_scheduler_scheduling_duration_seconds", seconds, controller=controller)


def record_nodeclaims_created(nodepools: Iterable[str]) -> None:
    """NodeClaims the provisioner created, one NodePool name each (nodeflow never relaxes minValues on a
    NodeClaim it writes, so ``min_values_relaxed`` is ``false``)."""
    for pool, count in sorted(Counter(nodepools).items()):
        emit(
            "karpenter_nodeclaims_created_total", count, reason="provisioned", nodepool=pool, min_values_relaxed="false"
        )


def record_nodeclaims_disrupted(reason: str, disrupted: Iterable[Mapping[str, str]]) -> None:
    """NodeClaims deleted for ``reason`` (Karpenter's snake_case value: ``drifted``, ``underutilized``,
    ``empty``, ``expired``, ``spot_interrupted``, ``insufficient_capacity``, ...); each item carries the
    NodeClaim's ``nodepool`` and ``capacity_type`` labels."""
    counts = Counter((d.get("nodepool", ""), d.get("capacity_type", "")) for d in disrupted)
    for (pool, capacity), count in sorted(counts.items()):
        emit("karpenter_nodeclaims_disrupted_total", count, reason=reason, nodepool=pool, capacity_type=capacity)


def record_unhealthy_disrupted(repaired: Iterable[Mapping[str, str]]) -> None:
    """NodeClaims node repair deleted: each with its ``condition`` (snake case), ``nodepool``, ``capacity_type``
    and ``image_id`` labels."""
    keys = ("condition", "nodepool", "capacity_type", "image_id")
    counts = Counter(tuple(r.get(k, "") for k in keys) for r in repaired)
    for values, count in sorted(counts.items()):
        emit("karpenter_nodeclaims_unhealthy_disrupted_total", count, **dict(zip(keys, values, strict=True)))


def record_allowed_disruptions(
    allowed: Iterable[tuple[str, str, int]], consuming: Iterable[tuple[str, str, int]] = ()
) -> None:
    """Gauges per (NodePool, reason): how many of its nodes its budgets let be disrupting at once (``allowed``),
    and how many use up its budget now (``consuming``). The reason keeps Karpenter's case here
    (``Underutilized``, ``Empty``, ``Drifted``), as Karpenter labels these gauges."""
    for pool, reason, count in allowed:
        emit("karpenter_nodepools_allowed_disruptions", count, nodepool=pool, reason=reason)
    for pool, reason, count in consuming:
        emit("karpenter_nodepools_nodes_consuming_budgets", count, nodepool=pool, reason=reason)


def record_pool_costs(costs: Iterable[tuple[str, float]]) -> None:
    """Gauge per NodePool: the summed $/hour of its NodeClaims' offerings (Karpenter's
    ``karpenter_nodepools_cost_total``, a gauge despite the name)."""
    for pool, dollars in costs:
        emit("karpenter_nodepools_cost_total", dollars, nodepool=pool)


def record_disruptions(disrupted: Iterable[tuple[str, Mapping[str, str]]]) -> None:
    """NodeClaims a disruption round deleted: (nodeflow's reason, the NodeClaim's Kubernetes labels) each;
    the reason becomes Karpenter's snake_case label value (``Underutilized`` -> ``underutilized``)."""
    by_reason: dict[str, list[dict[str, str]]] = {}
    for reason, labels in disrupted:
        by_reason.setdefault(_snake(reason), []).append(_claim_labels(labels))
    for reason, items in sorted(by_reason.items()):
        record_nodeclaims_disrupted(reason, items)


def record_queue_failure(reason: str, failed_launches: int) -> None:
    """A replace command rolled back (nodeflow's reason; how many of its replacements never initialized), as
    Karpenter counts a failed command of its disruption queue: decision ``replace`` (only commands with
    replacements are queued), the snake_case reason, and ``consolidation_type`` set to the decision too (as
    Karpenter v1.14.1 labels it)."""
    labels = {"decision": "replace", "reason": _snake(reason), "consolidation_type": "replace"}
    emit("karpenter_voluntary_disruption_queue_failures_total", failed_launches, **labels)


def _snake(text: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() and i else ch.lower() for i, ch in enumerate(text))


#: the voluntary disruption reasons Karpenter sets as a NodeClaim's DisruptionReason condition; a node terminated
#: for any other reason (expired, interrupted, deleted) has its pods drained for "Forceful Termination"
_DRAIN_REASONS = frozenset({"Empty", "Drifted", "Underutilized"})


def record_drain_pass(termination_reason: str | None, requests: Mapping[str, int] | None) -> None:
    """One Drain pass of a terminate workflow started for ``termination_reason``: its eviction requests by
    response code (``{"200": n, "429": m}``); each accepted one drained a pod, for the disruption reason."""
    for code, count in sorted((requests or {}).items()):
        if count:
            emit("karpenter_pods_eviction_requests_total", count, code=code)
    if drained := (requests or {}).get("200", 0):
        reason = termination_reason if termination_reason in _DRAIN_REASONS else "Forceful Termination"
        emit("karpenter_pods_drained_total", drained, reason=reason)


def record_registration(created: Mapping[str, str] | None) -> None:
    """A Node the Register step registered for the first time (its ``nodepool`` and ``zone``) was created."""
    if created is not None:
        emit("karpenter_nodes_created_total", 1, nodepool=created.get("nodepool", ""), zone=created.get("zone", ""))


def record_termination(facts: Mapping[str, Any]) -> None:
    """What the RemoveFinalizer step finalized (``node``, ``nodeClaim``), with labels and durations."""
    if node := facts.get("node"):
        pool = node.get("nodepool", "")
        emit("karpenter_nodes_terminated_total", 1, nodepool=pool, zone=node.get("zone", ""))
        emit("karpenter_nodes_termination_duration_seconds", node["terminationSeconds"], nodepool=pool)
        if node.get("lifetimeSeconds") is not None:
            emit("karpenter_nodes_lifetime_duration_seconds", node["lifetimeSeconds"], nodepool=pool)
    if claim := facts.get("nodeClaim"):
        pool = claim.get("nodepool", "")
        labels = {"nodepool": pool, "capacity_type": claim.get("capacity_type", ""), "zone": claim.get("zone", "")}
        emit("karpenter_nodeclaims_terminated_total", 1, **labels)
        emit("karpenter_nodeclaims_termination_duration_seconds", claim["terminationSeconds"], nodepool=pool)
        if claim.get("instanceTerminationSeconds") is not None:  # since the Terminate step's InstanceTerminating
            seconds = claim["instanceTerminationSeconds"]
            emit("karpenter_nodeclaims_instance_termination_duration_seconds", seconds, nodepool=pool)


#: nodeflow's interruption kinds -> Karpenter's message_type (the AWS provider's message kinds)
_MESSAGE_TYPES = {
    "SpotInterruption": "spot_interrupted",
    "RebalanceRecommendation": "rebalance_recommendation",
    "ScheduledChange": "scheduled_change",
    "InstanceStatus": "instance_status",  # DescribeInstanceStatus categories
    "SystemStatus": "system_status",
    "EventStatus": "event_status",
}


def message_type(message: Any) -> str | None:
    """Karpenter's ``message_type`` of an interruption-queue message (parsed, or ``Rejected``): ``no_op`` for
    one nodeflow does not act on; None for an unreadable one and for the agent's deletions (not AWS
    interruption messages: Karpenter learns of deletions by watching, not from its queue)."""
    kind = str(getattr(message, "kind", ""))
    if kind == "StateChange":
        return "instance_stopped" if message.stopping else "instance_terminated"
    if kind in _MESSAGE_TYPES:
        return _MESSAGE_TYPES[kind]
    return "no_op" if getattr(message, "status", None) in ("unknown", "ignored") else None


def record_interruption_batch(seen: Sequence[tuple[str, Any]], outcomes: Sequence[Any], now: datetime) -> None:
    """One interruption-queue batch, as Karpenter counts: each readable AWS message is received (by
    ``message_type``); each message the batch removes from the queue (all but those whose outcome has an
    ``error``) is deleted, and the time from its event to its handling observed; each NodeClaim whose
    termination a message started is disrupted with the message type as reason. ``seen``: (message id, parsed
    message or ``Rejected``) per record. The agent's deletion messages share the queue but are not counted."""
    by_id = {o.message_id: o for o in outcomes}
    counted: list[tuple[str | None, datetime | None, bool]] = []  # (message_type, event time, deleted)
    for mid, message in seen:
        if getattr(message, "kind", "") == "Deletion":
            continue
        kind, outcome = message_type(message), by_id.get(mid)
        counted.append(
            (kind, getattr(getattr(message, "envelope", None), "time", None), not getattr(outcome, "error", None))
        )
        if kind is not None and outcome is not None and outcome.disrupted:
            record_nodeclaims_disrupted(kind, [_claim_labels(labels) for labels in outcome.disrupted])
    for kind, count in sorted(Counter(k for k, _, _ in counted if k is not None).items()):
        emit("karpenter_interruption_received_messages_total", count, message_type=kind)
    if deleted := [(k, at) for k, at, gone in counted if gone]:
        emit("karpenter_interruption_deleted_messages_total", len(deleted))
    for kind, at in deleted:
        if kind is not None and at is not None:
            emit("karpenter_interruption_message_queue_duration_seconds", max(0.0, (now - at).total_seconds()))


def record_status_checks(outcomes: Sequence[Any]) -> None:
    """EC2 status-check failures acted on (outcomes of ``handle_status_checks``, kind = category): each NodeClaim
    whose termination one started is disrupted with the category's message type as reason, and counted once in
    ``karpenter_interruption_instance_status_unhealthy_total{category}`` (a failure seen again while its node is
    terminating starts nothing, so it is not counted again)."""
    for outcome in outcomes:
        kind = _MESSAGE_TYPES.get(outcome.kind)
        if kind is None or not outcome.disrupted:
            continue
        record_nodeclaims_disrupted(kind, [_claim_labels(labels) for labels in outcome.disrupted])
        emit("karpenter_interruption_instance_status_unhealthy_total", len(outcome.disrupted), category=outcome.kind)


def _claim_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A NodeClaim's ``nodepool`` and ``capacity_type`` metric labels from its Kubernetes labels."""
    return {"nodepool": labels.get(wk.LABEL_NODEPOOL, ""), "capacity_type": labels.get(wk.LABEL_CAPACITY_TYPE, "")}


#: the workflow error a launch failed with -> Karpenter's cloud provider error type
_CLOUDPROVIDER_ERRORS = {
    "NoCapacity": "InsufficientCapacityError",
    "NodeClassNotReady": "NodeClassNotReadyError",
    "NodeClaimGone": "NodeClaimNotFoundError",
}


def record_cloudprovider_error(method: str, error: BaseException, controller: str = "nodeclaim.lifecycle") -> None:
    """A cloud provider call (``Create``: the launch; ``Delete``: the termination, by Karpenter's
    ``node.termination`` controller) failed with ``error`` (an adapter or workflow error). Karpenter labels
    errors it does not classify with an empty value, which CloudWatch takes as no dimension."""
    name = type(as_workflow_error(error)).__name__
    emit(
        "karpenter_cloudprovider_errors_total",
        1,
        controller=controller,
        method=method,
        provider="aws",
        error=_CLOUDPROVIDER_ERRORS.get(name, ""),
    )


#: the workflow error a launch failed with -> Karpenter's reason for deleting its NodeClaim
_LAUNCH_FAILURE_REASONS = {
    "NoCapacity": "insufficient_capacity",
    "NodeClassNotReady": "nodeclass_not_ready",
    "RegistrationTimeout": "registration_timeout",
    "States.Timeout": "launch_timeout",
}


def record_launch_failure(error: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> None:
    """The launch workflow's CleanUp deleted a NodeClaim (``labels``: its Kubernetes labels; None when it did
    not delete it) after ``error`` (``{"Error": name, ...}``). Karpenter counts a NodeClaim deleted for
    insufficient capacity, a not-ready EC2NodeClass or a launch / registration timeout as disrupted; other
    launch failures are not (Karpenter retries those rather than deleting the NodeClaim)."""
    reason = _LAUNCH_FAILURE_REASONS.get(str((error or {}).get("Error") or ""))
    if reason is not None and labels is not None:
        record_nodeclaims_disrupted(reason, [_claim_labels(labels)])
