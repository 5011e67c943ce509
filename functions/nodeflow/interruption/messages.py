"""Interruption-queue messages: an SQS body (the EventBridge envelope, JSON) -> a typed message.

What the interruption queue receives (``nodeflow.ingress.routing``):

- ``aws.ec2`` "EC2 Spot Instance Interruption Warning" (``detail.instance-id``, ``detail.instance-action``)
  -> ``SpotInterruption``;
- ``aws.ec2`` "EC2 Instance Rebalance Recommendation" (``detail.instance-id``) -> ``RebalanceRecommendation``;
- ``aws.ec2`` "EC2 Instance State-change Notification" with ``detail.state`` stopping, stopped,
  shutting-down or terminated -> ``StateChange`` (pending / running: ignored);
- ``aws.health`` "AWS Health Event" with ``detail.service`` EC2 and ``detail.eventTypeCategory``
  scheduledChange -> ``ScheduledChange`` for the instance ids among ``detail.affectedEntities[].entityValue``
  (as Karpenter's AWS provider parses the AWSHealthEvent schema: another or a missing service or category, or
  no affected instance, is ignored; a field of the wrong type is malformed);
- ``nodeflow.agent`` "NodeClaim Deleting" / "Node Deleting" (``detail.object`` per agent/PROTOCOL.md) -> ``Deletion``.

Anything else is a ``Rejected``: ``malformed`` (not JSON, not an envelope, a required field missing or of
the wrong type), ``unknown`` (a source / detail-type this queue does not handle, or an envelope ``version``
other than "0": Karpenter's parsers are keyed by version too) or ``ignored`` (understood, nothing to do). Its
``reason`` names what is wrong. Parsing never raises.

EC2 status checks do not come through the queue: ``status_check_failures`` turns what DescribeInstanceStatus
returns (polled every minute, ``STATUS_CHECK_FILTERS``) into ``StatusCheckFailure`` messages, as Karpenter's
instance status controller (v1.12+) does: instance or system status details that have ``failed`` for at least
``UNHEALTHY_THRESHOLD_SECONDS`` (120 s), and every scheduled event (reboot, maintenance, retirement, stop) at once;
attached EBS status is ignored. One message per instance and category (``InstanceStatus``, ``SystemStatus``,
``EventStatus``).

Pure: no AWS or Kubernetes client here.

Must not touch: what is done about a message (``nodeflow.lifecycle.interruption_handling``); AWS, Kubernetes, the clock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, Final, Literal, TypeAlias

from nodeflow.ingress.protocol import DETAIL_TYPES
from nodeflow.ingress.protocol import SOURCE as AGENT_SOURCE

__all__ = [
    "DELETION",
    "EVENT_STATUS",
    "INSTANCE_STATUS",
    "REBALANCE_RECOMMENDATION",
    "SCHEDULED_CHANGE",
    "SPOT_INTERRUPTION",
    "STATE_CHANGE",
    "STATUS_CHECK_FILTERS",
    "STOPPING_STATES",
    "SYSTEM_STATUS",
    "TERMINATING_STATES",
    "Deletion",
    "Envelope",
    "InstanceMessage",
    "Message",
    "RebalanceRecommendation",
    "Rejected",
    "ScheduledChange",
    "SpotInterruption",
    "StateChange",
    "StatusCheckFailure",
    "instance_id_from_provider_id",
    "is_instance_id",
    "parse_message",
    "status_check_failures",
]

SPOT_INTERRUPTION: Final = "SpotInterruption"
REBALANCE_RECOMMENDATION: Final = "RebalanceRecommendation"
STATE_CHANGE: Final = "StateChange"
SCHEDULED_CHANGE: Final = "ScheduledChange"
DELETION: Final = "Deletion"
INSTANCE_STATUS: Final = "InstanceStatus"  # DescribeInstanceStatus categories (Karpenter's names)
SYSTEM_STATUS: Final = "SystemStatus"
EVENT_STATUS: Final = "EventStatus"
UNHEALTHY_THRESHOLD_SECONDS: Final = 120
#: DescribeInstanceStatus filter sets, one call each (filters of different names are ANDed): impaired instance
#: status, impaired system status, scheduled events
STATUS_CHECK_FILTERS: Final = (
    ({"Name": "instance-status.status", "Values": ["impaired"]},),
    ({"Name": "system-status.status", "Values": ["impaired"]},),
    (
        {
            "Name": "event.code",
            "Values": [
                "instance-reboot",
                "system-reboot",
                "system-maintenance",
                "instance-retirement",
                "instance-stop",
            ],
        },
    ),
)

EC2_SOURCE: Final = "aws.ec2"
HEALTH_SOURCE: Final = "aws.health"
SPOT_DETAIL_TYPE: Final = "EC2 Spot Instance Interruption Warning"
REBALANCE_DETAIL_TYPE: Final = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE_DETAIL_TYPE: Final = "EC2 Instance State-change Notification"
HEALTH_DETAIL_TYPE: Final = "AWS Health Event"

STOPPING_STATES: Final = frozenset({"stopping", "stopped"})
TERMINATING_STATES: Final = frozenset({"shutting-down", "terminated"})
_DELETING_DETAIL_TYPES: Final[Mapping[str, Literal["NodeClaim", "Node"]]] = {
    DETAIL_TYPES["NodeClaimDeleting"]: "NodeClaim",
    DETAIL_TYPES["NodeDeleting"]: "Node",
}

_KNOWN: Final = frozenset(
    {
        (EC2_SOURCE, SPOT_DETAIL_TYPE),
        (EC2_SOURCE, REBALANCE_DETAIL_TYPE),
        (EC2_SOURCE, STATE_CHANGE_DETAIL_TYPE),
        (HEALTH_SOURCE, HEALTH_DETAIL_TYPE),
        *((AGENT_SOURCE, dt) for dt in _DELETING_DETAIL_TYPES),
    }
)

_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

_Json: TypeAlias = "Mapping[str, object]"


def is_instance_id(value: object) -> bool:
    """True for an EC2 instance id (``i-`` and 8 or 17 hex digits)."""
    return isinstance(value, str) and _INSTANCE_ID.match(value) is not None


def instance_id_from_provider_id(provider_id: str | None) -> str | None:
    """The instance id of an AWS providerID (``aws:///<zone>/<instance-id>``); None for anything else."""
    if not provider_id or not provider_id.startswith("aws://"):
        return None
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if is_instance_id(last) else None


@dataclass(frozen=True, slots=True)
class Envelope:
    """The EventBridge fields every message has. ``time`` is None when absent or not a timestamp (AWS's
    documentation samples carry the placeholder ``yyyy-mm-ddThh:mm:ssZ``)."""

    id: str
    source: str
    detail_type: str
    account: str = ""
    region: str = ""
    time: datetime | None = None
    resources: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SpotInterruption:
    """EC2 will stop, hibernate or terminate a spot instance in two minutes."""

    kind: ClassVar[str] = SPOT_INTERRUPTION
    envelope: Envelope
    instance_id: str
    action: str  # detail.instance-action as AWS sent it: "terminate", "stop" or "hibernate"

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return (self.instance_id,)


@dataclass(frozen=True, slots=True)
class RebalanceRecommendation:
    """A spot instance is at elevated risk of interruption (a notice only)."""

    kind: ClassVar[str] = REBALANCE_RECOMMENDATION
    envelope: Envelope
    instance_id: str

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return (self.instance_id,)


@dataclass(frozen=True, slots=True)
class StateChange:
    """An instance is stopping, stopped, shutting down or terminated."""

    kind: ClassVar[str] = STATE_CHANGE
    envelope: Envelope
    instance_id: str
    state: str  # one of STOPPING_STATES | TERMINATING_STATES

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return (self.instance_id,)

    @property
    def stopping(self) -> bool:
        return self.state in STOPPING_STATES


@dataclass(frozen=True, slots=True)
class ScheduledChange:
    """AWS Health scheduled a change (maintenance, retirement, ...) for EC2 instances."""

    kind: ClassVar[str] = SCHEDULED_CHANGE
    envelope: Envelope
    instance_ids: tuple[str, ...]
    event_type_code: str = ""
    start_time: str = ""  # as AWS Health wrote it ("Sat, 05 Jun 2016 15:10:09 GMT")
    description: str = ""  # eventDescription[].latestDescription (en_US first)


@dataclass(frozen=True, slots=True)
class StatusCheckFailure:
    """EC2 says an instance is unwell (DescribeInstanceStatus): ``category`` InstanceStatus (the VM), SystemStatus
    (the host) or EventStatus (a scheduled event); ``checks`` the failed checks' names or the events' codes;
    ``since`` the earliest impairment of the instance (for an event: when it was seen)."""

    envelope: Envelope
    instance_id: str
    category: str
    since: datetime
    checks: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return self.category

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return (self.instance_id,)


@dataclass(frozen=True, slots=True)
class Deletion:
    """The agent saw ``metadata.deletionTimestamp`` set on a NodeClaim or a Node."""

    kind: ClassVar[str] = DELETION
    envelope: Envelope
    object_kind: Literal["NodeClaim", "Node"]
    name: str
    uid: str = ""
    provider_id: str | None = None
    node_name: str | None = None  # NodeClaim Deleting: the claim's status.nodeName
    cluster: str = ""
    event_id: str = ""


@dataclass(frozen=True, slots=True)
class Rejected:
    """A body that is not a message this queue acts on; ``reason`` names what is wrong."""

    status: Literal["malformed", "unknown", "ignored"]
    reason: str
    envelope_id: str = ""
    source: str = ""
    detail_type: str = ""

    def __str__(self) -> str:
        return f"{self.status}: {self.reason}"


InstanceMessage: TypeAlias = (
    SpotInterruption | RebalanceRecommendation | StateChange | ScheduledChange | StatusCheckFailure
)
Message: TypeAlias = InstanceMessage | Deletion


class _Malformed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _object(value: object, where: str) -> _Json:
    if not isinstance(value, Mapping):
        raise _Malformed(f"{where}: expected an object, got {_type(value)}")
    return value


def _str(obj: _Json, key: str, where: str) -> str:
    """A required, non-empty string field."""
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        got = "missing" if key not in obj else "empty" if isinstance(value, str) else f"got {_type(value)}"
        raise _Malformed(f"{where}.{key}: expected a non-empty string, {got}")
    return value


def _type(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def _opt(obj: _Json, key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _instance_id(detail: _Json) -> str:
    value = _str(detail, "instance-id", "detail")
    if not is_instance_id(value):
        raise _Malformed(f"detail.instance-id: expected an EC2 instance id (i-...), got {value!r}")
    return value


def _envelope(body: _Json) -> Envelope:
    resources = body.get("resources")
    return Envelope(
        id=_opt(body, "id"),
        source=_str(body, "source", "envelope"),
        detail_type=_str(body, "detail-type", "envelope"),
        account=_opt(body, "account"),
        region=_opt(body, "region"),
        time=_time(body.get("time")),
        resources=tuple(r for r in resources if isinstance(r, str)) if isinstance(resources, list) else (),
    )


def _opt_str(obj: _Json, key: str, where: str) -> str:
    """An optional string field ("" when missing or null); another type is malformed."""
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Malformed(f"{where}.{key}: expected a string, got {_type(value)}")
    return value


def _health(env: Envelope, detail: _Json) -> ScheduledChange | Rejected:
    service = _opt_str(detail, "service", "detail")
    category = _opt_str(detail, "eventTypeCategory", "detail")
    if service != "EC2" or category != "scheduledChange":
        return Rejected(
            "ignored",
            f"AWS Health event for service {service!r}, category {category!r}: only EC2 scheduledChange is acted on",
            env.id,
            env.source,
            env.detail_type,
        )
    entities = detail.get("affectedEntities")
    if entities is None:
        entities = []
    if not isinstance(entities, list):
        raise _Malformed(f"detail.affectedEntities: expected an array, got {_type(entities)}")
    ids: list[str] = []
    for i, entity in enumerate(entities):
        value = _object(entity, f"detail.affectedEntities[{i}]").get("entityValue")
        if isinstance(value, str) and is_instance_id(value) and value not in ids:
            ids.append(value)
    if not ids:
        return Rejected(
            "ignored",
            "AWS Health scheduledChange without an EC2 instance among detail.affectedEntities[].entityValue",
            env.id,
            env.source,
            env.detail_type,
        )
    descriptions = detail.get("eventDescription")
    texts: list[tuple[bool, str]] = []
    if isinstance(descriptions, list):
        for d in descriptions:
            if isinstance(d, Mapping) and isinstance(d.get("latestDescription"), str):
                texts.append((d.get("language") != "en_US", str(d["latestDescription"])))
    return ScheduledChange(
        env,
        tuple(ids),
        event_type_code=_opt(detail, "eventTypeCode"),
        start_time=_opt(detail, "startTime"),
        description=sorted(texts)[0][1] if texts else "",
    )


def _deletion(env: Envelope, detail: _Json, object_kind: Literal["NodeClaim", "Node"]) -> Deletion:
    obj = _object(detail.get("object"), "detail.object")
    name = _str(obj, "name", "detail.object")
    if len(name) > 253 or not _NAME.match(name):
        raise _Malformed(f"detail.object.name: not a Kubernetes object name: {name!r}")
    return Deletion(
        env,
        object_kind,
        name,
        uid=_opt(obj, "uid"),
        provider_id=_opt(obj, "providerID") or None,
        node_name=_opt(obj, "nodeName") or None,
        cluster=_opt(detail, "cluster"),
        event_id=_opt(detail, "eventId"),
    )


def _parse(body: _Json) -> Message | Rejected:
    env = _envelope(body)
    version = body.get("version")
    if version is not None and version != "0":
        return Rejected(
            "unknown",
            f'envelope version {version!r}: only version "0" events are understood',
            env.id,
            env.source,
            env.detail_type,
        )
    if (env.source, env.detail_type) not in _KNOWN:
        return Rejected(
            "unknown",
            f"source {env.source!r} with detail-type {env.detail_type!r} is not an interruption message",
            env.id,
            env.source,
            env.detail_type,
        )
    detail = _object(body.get("detail"), "detail")
    if env.source == EC2_SOURCE:
        if env.detail_type == SPOT_DETAIL_TYPE:
            return SpotInterruption(env, _instance_id(detail), _str(detail, "instance-action", "detail"))
        if env.detail_type == REBALANCE_DETAIL_TYPE:
            return RebalanceRecommendation(env, _instance_id(detail))
        state = _str(detail, "state", "detail")
        if state not in STOPPING_STATES | TERMINATING_STATES:
            return Rejected("ignored", f"instance state {state!r} needs no action", env.id, env.source, env.detail_type)
        return StateChange(env, _instance_id(detail), state)
    if env.source == HEALTH_SOURCE:
        return _health(env, detail)
    return _deletion(env, detail, _DELETING_DETAIL_TYPES[env.detail_type])


def parse_message(body: str | bytes | None) -> Message | Rejected:
    """The typed message in an SQS body (an EventBridge event as JSON), or why it is not one."""
    if body is None or body in ("", b""):
        return Rejected("malformed", "empty message body")
    try:
        doc: object = json.loads(body)
    except ValueError as exc:
        return Rejected("malformed", f"body is not JSON: {exc}")
    if not isinstance(doc, Mapping):
        return Rejected("malformed", f"body: expected an EventBridge event (a JSON object), got {_type(doc)}")
    try:
        return _parse(doc)
    except _Malformed as exc:
        return Rejected("malformed", exc.reason, _opt(doc, "id"), _opt(doc, "source"), _opt(doc, "detail-type"))


# --- EC2 status checks (DescribeInstanceStatus) ------------------------------------------------

_CATEGORY_KEYS: Final = ((INSTANCE_STATUS, "InstanceStatus"), (SYSTEM_STATUS, "SystemStatus"))
_LONG_AGO: Final = datetime(1, 1, 1, tzinfo=UTC)


def _aware(value: object) -> datetime | None:
    if isinstance(value, str):
        value = _time(value.replace("Z", "+00:00"))
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def status_check_failures(
    statuses: Iterable[Mapping[str, object]], now: datetime, threshold_seconds: float = UNHEALTHY_THRESHOLD_SECONDS
) -> list[StatusCheckFailure]:
    """The failures among DescribeInstanceStatus ``InstanceStatuses`` entries (boto3's shape; an instance listed
    twice counts once): per instance, its failed instance / system checks impaired for ``threshold_seconds`` or
    more, and its scheduled events, one message per category."""
    out: list[StatusCheckFailure] = []
    seen: set[str] = set()
    for status in statuses:
        iid = status.get("InstanceId")
        if not is_instance_id(iid) or iid in seen:
            continue
        assert isinstance(iid, str)
        seen.add(iid)
        kept: dict[str, list[tuple[str, datetime]]] = {}
        for category, key in _CATEGORY_KEYS:
            block = status.get(key)
            details = block.get("Details") if isinstance(block, Mapping) else None
            for d in details if isinstance(details, list) else []:
                if not isinstance(d, Mapping) or d.get("Status") != "failed":
                    continue
                since = _aware(d.get("ImpairedSince")) or _LONG_AGO
                if (now - since).total_seconds() >= threshold_seconds:
                    kept.setdefault(category, []).append((str(d.get("Name") or ""), since))
        events = status.get("Events")
        for e in events if isinstance(events, list) else []:
            if isinstance(e, Mapping):  # a scheduled event: acted on at once, whatever its date
                kept.setdefault(EVENT_STATUS, []).append((str(e.get("Code") or ""), now))
        if not kept:
            continue
        since = min(at for found in kept.values() for _, at in found)
        for category in (INSTANCE_STATUS, SYSTEM_STATUS, EVENT_STATUS):
            if category in kept:
                env = Envelope(f"{iid}/{category}", EC2_SOURCE, "DescribeInstanceStatus", time=since)
                checks = tuple(dict.fromkeys(name for name, _ in kept[category] if name))
                out.append(StatusCheckFailure(env, iid, category, since, checks))
    return out
