"""Interruption handling: parsed interruption-queue messages -> events, unavailable offerings, and one
terminate workflow per NodeClaim.

One call handles one SQS batch. Instance ids are mapped to NodeClaims with ONE LIST of NodeClaims per
batch (by the instance id in ``status.providerID``, ``aws:///<zone>/<instance-id>``); instances nodeflow
does not own are ignored. What each kind does (Karpenter's interruption controller):

- SpotInterruption: the (instance type, zone, spot) offering is marked unavailable, Warning
  ``SpotInterrupted`` on the NodeClaim and its Node, termination starts (reason ``SpotInterrupted``);
- RebalanceRecommendation: Warning ``RebalanceRecommendation`` only;
- StateChange: Warning ``InstanceStopping`` (stopping, stopped) or ``InstanceTerminating`` (shutting-down,
  terminated), termination starts with that reason;
- ScheduledChange: Warning ``InstanceUnhealthy``, termination starts (``InstanceUnhealthy``);
- StatusCheckFailure (DescribeInstanceStatus, polled: ``handle_status_checks``): Warning ``InstanceUnhealthy``;
  a failed instance or system status check terminates forcefully (reasons ``InstanceStatusFailed`` /
  ``SystemStatusFailed``: the Taint step sets the termination timestamp to now, so PodDisruptionBudgets do not hold
  the drain), a scheduled event (``EventStatus``) drains as a scheduled change does (``InstanceUnhealthy``);
- Deletion (kubectl delete of a NodeClaim or a Node): termination starts (``Deleted``) only while the
  deleted object has a deletionTimestamp and the ``karpenter.sh/termination`` finalizer. It is a user's (or another
  controller's) deletion, not an interruption: the decision log files it as kind ``deletion``, and the interruption
  metrics do not count it.

Replacement capacity is not this module's business: the pods of a terminated node become pending and
the provisioner places them.

While a Karpenter controller runs, nothing of the above happens (``lifecycle/karpenter_guard.py``): Karpenter handles
the same interruptions from its own queue; the messages are acknowledged, each outcome saying why.

Redelivery is harmless: the terminate workflow is started idempotently (named after the NodeClaim), an
offering marked twice stays marked (its expiry moves), and a repeated Event bumps the count of one Event.
Each message succeeds or fails on its own; a failed one is reported so SQS delivers it again.

Must not touch: how a message is parsed (``nodeflow.interruption.messages``); how a node is terminated (the terminate
workflow).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.aws.errors import AwsError, Offering
from nodeflow.governance.decisions import Decision, deletion_records, interruption_records, time_key
from nodeflow.interruption.messages import (
    Deletion,
    InstanceMessage,
    Message,
    RebalanceRecommendation,
    ScheduledChange,
    SpotInterruption,
    StateChange,
    StatusCheckFailure,
    instance_id_from_provider_id,
)
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import NODE_CLAIMS, NODES, KubeClient
from nodeflow.kube.events import WARNING, EventRecorder, ObjectRef
from nodeflow.lifecycle.karpenter_guard import Pause

__all__ = [
    "REASON_DELETED",
    "REASON_INSTANCE_STATUS_FAILED",
    "REASON_INSTANCE_STOPPING",
    "REASON_INSTANCE_TERMINATING",
    "REASON_INSTANCE_UNHEALTHY",
    "REASON_REBALANCE_RECOMMENDATION",
    "REASON_SPOT_INTERRUPTED",
    "REASON_SYSTEM_STATUS_FAILED",
    "BatchResult",
    "ClaimRef",
    "InterruptionDeps",
    "Outcome",
    "handle_batch",
    "handle_status_checks",
    "notice",
    "termination_reason",
]

# Event reasons, and the terminate workflow's "reason" input (the contract with statemachines/terminate).
REASON_SPOT_INTERRUPTED = "SpotInterrupted"
REASON_REBALANCE_RECOMMENDATION = "RebalanceRecommendation"
REASON_INSTANCE_STOPPING = "InstanceStopping"
REASON_INSTANCE_TERMINATING = "InstanceTerminating"
REASON_INSTANCE_UNHEALTHY = "InstanceUnhealthy"
REASON_DELETED = "Deleted"
REASON_INSTANCE_STATUS_FAILED = "InstanceStatusFailed"  # forceful (lifecycle.termination.FORCEFUL_REASONS)
REASON_SYSTEM_STATUS_FAILED = "SystemStatusFailed"  # forceful


@dataclass(frozen=True)
class InterruptionDeps:
    kube: KubeClient
    recorder: EventRecorder
    mark_unavailable: Callable[[Iterable[Offering], datetime, str], int]  # UnavailableOfferings.mark
    start_termination: Callable[[str, str], bool]  # (NodeClaim, reason) -> started (False: running / done)
    now: Callable[[], datetime]
    sleep: Callable[[float], None] = time.sleep  # between retries of the NodeClaim LIST
    # The decision log (``nodeflow.aws.decision_log.DecisionLog``; must not raise): the terminations started.
    decisions: Callable[[Sequence[Decision]], Any] | None = None
    # While a Karpenter controller runs (``karpenter_guard``) it handles interruptions from its own queue: every
    # message is acknowledged untouched, saying why (None: never asked).
    karpenter: Callable[[], Pause | None] | None = None


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """What interruption handling reads of a NodeClaim."""

    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    provider_id: str | None = None
    node_name: str | None = None
    deleting: bool = False
    finalizers: tuple[str, ...] = ()

    @property
    def instance_id(self) -> str | None:
        return instance_id_from_provider_id(self.provider_id)

    @staticmethod
    def of(obj: Mapping[str, Any]) -> ClaimRef:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        return ClaimRef(
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            labels=dict(meta.get("labels") or {}),
            provider_id=status.get("providerID") or None,
            node_name=status.get("nodeName") or None,
            deleting=bool(meta.get("deletionTimestamp")),
            finalizers=tuple(meta.get("finalizers") or ()),
        )


@dataclass
class Outcome:
    """What became of one message. ``error`` set: it failed and must be delivered again."""

    message_id: str
    kind: str
    node_claims: list[str] = field(default_factory=list)  # NodeClaims the message was about
    started: list[str] = field(default_factory=list)  # terminate executions started
    ignored: list[str] = field(default_factory=list)  # "<instance or object>: why"
    offerings_marked: int = 0
    disrupted: list[dict[str, str]] = field(default_factory=list)  # labels of the NodeClaims in ``started``
    # (NodeClaim, reason, its labels) of each termination started, for the decision log
    terminations: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    # (NodeClaim, "NodeClaim <name>" / "Node <name>" deleted, its labels) of each termination a deletion started:
    # someone deleted it through the API (kubectl delete), its own decision-log kind, not an interruption
    deletions: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    events: int = 0
    event_errors: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"messageId": self.message_id, "kind": self.kind}
        for key, value in (
            ("nodeClaims", self.node_claims),
            ("terminationsStarted", self.started),
            ("ignored", self.ignored),
            ("offeringsMarked", self.offerings_marked),
            ("events", self.events),
            ("eventErrors", self.event_errors),
            ("error", self.error),
        ):
            if value:
                out[key] = value
        return out


@dataclass
class BatchResult:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> list[str]:
        """Message ids to report in ``batchItemFailures``."""
        return [o.message_id for o in self.outcomes if o.error is not None]

    def to_json(self) -> dict[str, Any]:
        return {"messages": [o.to_json() for o in self.outcomes], "failed": self.failed}


# --- what each kind means ----------------------------------------------------------------------


def termination_reason(msg: Message) -> str | None:
    """The terminate workflow's reason for a message; None when it only warrants an event."""
    if isinstance(msg, SpotInterruption):
        return REASON_SPOT_INTERRUPTED
    if isinstance(msg, StateChange):
        return REASON_INSTANCE_STOPPING if msg.stopping else REASON_INSTANCE_TERMINATING
    if isinstance(msg, ScheduledChange):
        return REASON_INSTANCE_UNHEALTHY
    if isinstance(msg, StatusCheckFailure):
        return {"InstanceStatus": REASON_INSTANCE_STATUS_FAILED, "SystemStatus": REASON_SYSTEM_STATUS_FAILED}.get(
            msg.category, REASON_INSTANCE_UNHEALTHY
        )
    if isinstance(msg, Deletion):
        return REASON_DELETED
    return None


def notice(msg: InstanceMessage, instance_id: str) -> tuple[str, str]:
    """The Event (reason, message) for ``instance_id``: it names the instance and what AWS said.

    Deterministic for a given interruption (no envelope id or receive time), so a redelivery bumps
    the count of the same Event."""
    if isinstance(msg, SpotInterruption):
        return (
            REASON_SPOT_INTERRUPTED,
            f"Spot interruption warning for instance {instance_id}: instance-action {msg.action}",
        )
    if isinstance(msg, RebalanceRecommendation):
        return (
            REASON_REBALANCE_RECOMMENDATION,
            f"Rebalance recommendation for instance {instance_id}: the spot instance is at elevated risk "
            "of interruption",
        )
    if isinstance(msg, StateChange):
        reason = REASON_INSTANCE_STOPPING if msg.stopping else REASON_INSTANCE_TERMINATING
        return reason, f"Instance {instance_id} is {msg.state} (EC2 instance state-change notification)"
    if isinstance(msg, StatusCheckFailure):
        if msg.category == "EventStatus":
            text = f"EC2 scheduled event for instance {instance_id}: {', '.join(msg.checks) or 'unknown'}"
        else:
            checks = ", ".join(msg.checks) or "a check"
            since = msg.since.strftime("%Y-%m-%dT%H:%M:%SZ") if msg.since.year > 1 else "an unknown time"
            text = f"EC2 {msg.category} check {checks} failed for instance {instance_id} since {since}"
        return REASON_INSTANCE_UNHEALTHY, text
    what = msg.event_type_code or "a scheduled change"
    when = f" starting {msg.start_time}" if msg.start_time else ""
    text = f"AWS Health scheduled {what} for instance {instance_id}{when}"
    if msg.description:
        text += f": {msg.description}"
    return REASON_INSTANCE_UNHEALTHY, text


# --- the batch ---------------------------------------------------------------------------------


def _list_claims(deps: InterruptionDeps) -> list[ClaimRef]:
    items = kerr.retry_read(lambda: deps.kube.list_items(NODE_CLAIMS), attempts=3, sleep=deps.sleep)
    return [ref for ref in (ClaimRef.of(item) for item in items) if ref.name]


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def handle_batch(deps: InterruptionDeps, messages: Sequence[tuple[str, Message]]) -> BatchResult:
    """Handle ``(SQS message id, parsed message)`` pairs; each outcome says whether its message is done."""
    out = BatchResult()
    if not messages:
        return out
    pause = deps.karpenter() if deps.karpenter is not None else None
    if pause is not None:
        out.outcomes = [Outcome(mid, msg.kind, ignored=[pause.why]) for mid, msg in messages]
        return out
    try:
        claims = _list_claims(deps)
    except (kerr.KubeError, AwsError) as exc:
        out.outcomes = [Outcome(mid, msg.kind, error=f"listing NodeClaims: {_error(exc)}") for mid, msg in messages]
        return out
    by_instance = {iid: c for c in claims if (iid := c.instance_id)}
    by_name = {c.name: c for c in claims}
    for mid, msg in messages:
        outcome = Outcome(mid, msg.kind)
        try:
            if isinstance(msg, Deletion):
                _deletion(deps, msg, claims, by_name, outcome)
            else:
                _instance_message(deps, msg, by_instance, outcome)
        except Exception as exc:  # this message failed; the others go on
            outcome.error = _error(exc)
        out.outcomes.append(outcome)
    if deps.decisions is not None:
        _log_decisions(deps, out)
    return out


def _log_decisions(deps: InterruptionDeps, out: BatchResult) -> None:
    """The terminations started, to the decision log; never raises (the log is for people)."""
    assert deps.decisions is not None
    with contextlib.suppress(Exception):
        at = deps.now()
        started = [(claim, reason, o.kind, labels) for o in out.outcomes for claim, reason, labels in o.terminations]
        deleted = [d for o in out.outcomes for d in o.deletions]
        if started or deleted:
            run = "i" + time_key(at).replace("-", "").replace(":", "").replace(".", "").rstrip("Z")
            records = interruption_records(run, at, started)
            deps.decisions([*records, *deletion_records(run, at, deleted, len(records) + 1)])


def handle_status_checks(deps: InterruptionDeps, failures: Sequence[StatusCheckFailure]) -> BatchResult:
    """Act on EC2 status-check failures as on queue messages (one outcome per instance and category); instances
    nodeflow does not own are ignored."""
    return handle_batch(deps, [(f.envelope.id, f) for f in failures])


def _instance_message(
    deps: InterruptionDeps, msg: InstanceMessage, by_instance: Mapping[str, ClaimRef], outcome: Outcome
) -> None:
    reason = termination_reason(msg)
    for instance_id in msg.instance_ids:
        claim = by_instance.get(instance_id)
        if claim is None:
            outcome.ignored.append(f"{instance_id}: no NodeClaim of this cluster has it")
            continue
        outcome.node_claims.append(claim.name)
        if isinstance(msg, SpotInterruption):
            offering = Offering(claim.labels.get(wk.LABEL_INSTANCE_TYPE), claim.labels.get(wk.LABEL_ZONE), "spot")
            outcome.offerings_marked += deps.mark_unavailable([offering], deps.now(), msg.kind)
        if reason is not None and deps.start_termination(claim.name, reason):
            outcome.started.append(claim.name)
            outcome.disrupted.append(dict(claim.labels))
            outcome.terminations.append((claim.name, reason, dict(claim.labels)))
        event_reason, text = notice(msg, instance_id)
        _record(deps, claim, event_reason, text, outcome)


def _record(deps: InterruptionDeps, claim: ClaimRef, reason: str, text: str, outcome: Outcome) -> None:
    """Warning events on the NodeClaim and its Node: for people, so a failure does not fail the message."""
    refs = [ObjectRef("NodeClaim", claim.name, None, claim.uid or None, NODE_CLAIMS.api_version)]
    if claim.node_name:
        refs.append(ObjectRef("Node", claim.node_name))
    for ref in refs:
        try:
            deps.recorder.record(ref, WARNING, reason, text)
            outcome.events += 1
        except kerr.KubeError:
            outcome.event_errors += 1


def _deletion(
    deps: InterruptionDeps,
    msg: Deletion,
    claims: Sequence[ClaimRef],
    by_name: Mapping[str, ClaimRef],
    outcome: Outcome,
) -> None:
    what = f"{msg.object_kind} {msg.name}"
    if msg.object_kind == "NodeClaim":
        claim = by_name.get(msg.name)
        if claim is None:
            outcome.ignored.append(f"{what}: gone")
            return
        deleting, finalizers = claim.deleting, claim.finalizers
    else:
        try:
            node = deps.kube.get(NODES, msg.name)
        except kerr.NotFound:
            outcome.ignored.append(f"{what}: gone")
            return
        meta = node.get("metadata") or {}
        deleting, finalizers = bool(meta.get("deletionTimestamp")), tuple(meta.get("finalizers") or ())
        instance_id = instance_id_from_provider_id((node.get("spec") or {}).get("providerID") or msg.provider_id)
        found = [c for c in claims if instance_id and c.instance_id == instance_id] or [
            c for c in claims if c.node_name == msg.name
        ]
        if not found:
            outcome.ignored.append(f"{what}: no NodeClaim of this cluster has it")
            return
        claim = found[0]
    if not deleting:
        outcome.ignored.append(f"{what}: not being deleted")
        return
    if wk.FINALIZER_TERMINATION not in finalizers:
        outcome.ignored.append(f"{what}: no {wk.FINALIZER_TERMINATION} finalizer")
        return
    outcome.node_claims.append(claim.name)
    if deps.start_termination(claim.name, REASON_DELETED):
        outcome.started.append(claim.name)
        outcome.deletions.append((claim.name, what, dict(claim.labels)))
