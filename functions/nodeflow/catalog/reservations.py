"""EC2 capacity reservations (ODCRs and capacity blocks) as the catalog and the solver see them.

Pure: no boto3, no clock (callers pass ``now``). Three steps, the same as Karpenter's AWS provider:

1. ``from_describe`` parses one item of ``DescribeCapacityReservations`` (the ``aws ec2
   describe-capacity-reservations`` JSON, or the boto3 response: dates may be strings or datetimes)
   into a frozen ``CapacityReservation``; ``from_document`` reads a whole ``{"CapacityReservations":
   [...]}`` document.
2. ``select`` picks the reservations an EC2NodeClass's ``capacityReservationSelectorTerms`` match:
   a term with ``id`` matches that reservation; a term with ``tags`` and/or ``instanceMatchCriteria``
   (optionally ``ownerID``) matches every reservation carrying all those tags (a ``"*"`` value only
   needs the key), of that match criteria and owner. Terms are ORed. Only ``active`` reservations
   count (EC2's ``state`` filter), duplicates are dropped and a reservation whose end date has passed
   is ignored. The result is sorted by id.
3. ``to_status`` turns a selected reservation into one ``status.capacityReservations`` entry of the
   EC2NodeClass (upstream's field names; a capacity block within 40 minutes of its end is
   ``expiring``), and ``from_status`` reads such an entry back.

Dates: ``end_date`` is a timezone-aware ``datetime`` in UTC, or ``None`` for a reservation without
an end (EC2's ``EndDateType: unlimited``). Status ``endTime`` is RFC 3339 with a ``Z`` suffix.

Must not touch: what each reservation can still launch during a solve (``nodeflow.scheduling.reservation_manager``); the
clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

__all__ = [
    "EXPIRING_WINDOW",
    "MATCH_CRITERIA",
    "RESERVATION_TYPES",
    "CapacityReservation",
    "ReservationError",
    "SelectorTerm",
    "from_describe",
    "from_document",
    "from_status",
    "is_document",
    "parse_time",
    "select",
    "status_state",
    "to_status",
]

RESERVATION_TYPE_DEFAULT = "default"
RESERVATION_TYPE_CAPACITY_BLOCK = "capacity-block"
RESERVATION_TYPES = (RESERVATION_TYPE_DEFAULT, RESERVATION_TYPE_CAPACITY_BLOCK)
MATCH_CRITERIA = ("open", "targeted")
# A capacity block is "expiring" this long before its end: EC2 reclaims the instances then.
EXPIRING_WINDOW = timedelta(minutes=40)

_CR_ID = re.compile(r"^cr-[0-9a-z]+$")
_ACCOUNT = re.compile(r"^[0-9]{12}$")


class ReservationError(ValueError):
    """A capacity reservation document or item is malformed; the message names the field."""


@dataclass(frozen=True, slots=True)
class CapacityReservation:
    """One EC2 capacity reservation.

    ``tags`` is a tuple of ``(key, value)`` pairs sorted by key (hashable; see ``tag_map``).
    ``state`` is EC2's state (``active``, ``expired``, ``cancelled``, ``pending``, ``scheduled``, ...).
    """

    id: str
    instance_type: str
    zone: str
    owner_id: str
    available_instance_count: int
    total_instance_count: int
    reservation_type: str = RESERVATION_TYPE_DEFAULT  # "default" | "capacity-block"
    instance_match_criteria: str = "open"  # "open" | "targeted"
    end_date: datetime | None = None  # aware UTC; None = no end
    state: str = "active"
    tags: tuple[tuple[str, str], ...] = ()
    interruptible: bool = False
    zone_id: str = ""

    @property
    def tag_map(self) -> dict[str, str]:
        return dict(self.tags)

    def ended(self, now: datetime | None) -> bool:
        """True when ``now`` is given and the reservation's end date is not after it."""
        return now is not None and self.end_date is not None and self.end_date <= _aware(now, "now")


class SelectorTerm(Protocol):
    """What ``select`` reads of a ``capacityReservationSelectorTerms`` entry (the API model has these)."""

    @property
    def id(self) -> str | None: ...
    @property
    def tags(self) -> Mapping[str, str] | None: ...
    @property
    def owner_id(self) -> str | None: ...
    @property
    def instance_match_criteria(self) -> str | None: ...


def _aware(value: datetime, field_name: str) -> datetime:
    if value.tzinfo is None:
        raise ReservationError(f"{field_name}: {value.isoformat()!r} has no time zone")
    return value.astimezone(UTC)


def parse_time(value: object, field_name: str) -> datetime:
    """An ISO 8601 / RFC 3339 string (``Z`` or an offset; a bare time is UTC) or a datetime, as aware UTC."""
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        raise ReservationError(f"{field_name}: expected an ISO 8601 date-time string, got {value!r}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ReservationError(f"{field_name}: {value!r} is not an ISO 8601 date-time") from None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _str(item: Mapping[str, Any], key: str, where: str, *, required: bool = True, default: str = "") -> str:
    value = item.get(key)
    if value is None:
        if required:
            raise ReservationError(f"{where}.{key}: required field is missing")
        return default
    if not isinstance(value, str) or (required and not value):
        raise ReservationError(f"{where}.{key}: expected a non-empty string, got {value!r}")
    return value


def _count(item: Mapping[str, Any], key: str, where: str) -> int:
    value = item.get(key)
    if value is None:
        raise ReservationError(f"{where}.{key}: required field is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ReservationError(f"{where}.{key}: expected a non-negative integer, got {value!r}")
    return value


def from_describe(item: Mapping[str, Any], where: str = "CapacityReservation") -> CapacityReservation:
    """Parse one ``CapacityReservations[]`` item of DescribeCapacityReservations.

    Required: ``CapacityReservationId``, ``InstanceType``, ``AvailabilityZone``, ``OwnerId``,
    ``AvailableInstanceCount``, ``TotalInstanceCount``. ``ReservationType`` defaults to ``default``,
    ``InstanceMatchCriteria`` to ``open``, ``State`` to ``active``. ``where`` prefixes error messages.
    """
    if not isinstance(item, Mapping):
        raise ReservationError(f"{where}: expected an object, got {type(item).__name__}")
    rid = _str(item, "CapacityReservationId", where)
    if not _CR_ID.match(rid):
        raise ReservationError(f"{where}.CapacityReservationId: {rid!r} is not a capacity reservation id (cr-...)")
    where = f"{where}[{rid}]"
    owner = _str(item, "OwnerId", where)
    if not _ACCOUNT.match(owner):
        raise ReservationError(f"{where}.OwnerId: {owner!r} must be a 12-digit AWS account id")
    available = _count(item, "AvailableInstanceCount", where)
    total = _count(item, "TotalInstanceCount", where)
    rtype = _str(item, "ReservationType", where, required=False, default=RESERVATION_TYPE_DEFAULT)
    if rtype not in RESERVATION_TYPES:
        raise ReservationError(f"{where}.ReservationType: {rtype!r} is not one of {', '.join(RESERVATION_TYPES)}")
    criteria = _str(item, "InstanceMatchCriteria", where, required=False, default="open")
    if criteria not in MATCH_CRITERIA:
        raise ReservationError(f"{where}.InstanceMatchCriteria: {criteria!r} is not one of open, targeted")
    end_raw = item.get("EndDate")
    end = None if end_raw is None else parse_time(end_raw, f"{where}.EndDate")
    state = _str(item, "State", where, required=False, default="active")
    raw_tags = item.get("Tags") or []
    if not isinstance(raw_tags, list):
        raise ReservationError(f"{where}.Tags: expected a list of {{Key, Value}}, got {raw_tags!r}")
    tags: dict[str, str] = {}
    for i, tag in enumerate(raw_tags):
        if not isinstance(tag, Mapping) or not isinstance(tag.get("Key"), str):
            raise ReservationError(f"{where}.Tags[{i}]: expected {{Key, Value}}, got {tag!r}")
        value = tag.get("Value", "")
        if not isinstance(value, str):
            raise ReservationError(f"{where}.Tags[{i}].Value: expected a string, got {value!r}")
        tags[tag["Key"]] = value
    interruptible = item.get("Interruptible", False)
    if not isinstance(interruptible, bool):
        raise ReservationError(f"{where}.Interruptible: expected true or false, got {interruptible!r}")
    return CapacityReservation(
        id=rid,
        instance_type=_str(item, "InstanceType", where),
        zone=_str(item, "AvailabilityZone", where),
        owner_id=owner,
        available_instance_count=available,
        total_instance_count=total,
        reservation_type=rtype,
        instance_match_criteria=criteria,
        end_date=end,
        state=state,
        tags=tuple(sorted(tags.items())),
        interruptible=interruptible,
        zone_id=_str(item, "AvailabilityZoneId", where, required=False),
    )


def is_document(doc: object) -> bool:
    """Is this a DescribeCapacityReservations output (a mapping with a ``CapacityReservations`` list)?"""
    return isinstance(doc, Mapping) and "CapacityReservations" in doc and "kind" not in doc


def from_document(doc: Mapping[str, Any], source: str = "") -> list[CapacityReservation]:
    """Every reservation of a ``{"CapacityReservations": [...]}`` document, in document order."""
    prefix = f"{source}: " if source else ""
    items = doc.get("CapacityReservations")
    if not isinstance(items, list):
        raise ReservationError(f"{prefix}CapacityReservations: expected a list, got {type(items).__name__}")
    out: list[CapacityReservation] = []
    for i, item in enumerate(items):
        try:
            out.append(from_describe(item, f"CapacityReservations[{i}]"))
        except ReservationError as exc:
            raise ReservationError(f"{prefix}{exc}") from None
    return out


def _term_matches(term: SelectorTerm, r: CapacityReservation) -> bool:
    if term.id:
        return r.id == term.id
    if not term.tags and not term.instance_match_criteria:
        return False  # an ownerID alone selects nothing (the CRD refuses such a term)
    if term.owner_id and r.owner_id != term.owner_id:
        return False
    if term.instance_match_criteria and r.instance_match_criteria != term.instance_match_criteria:
        return False
    tags = r.tag_map
    return all(key in tags and want in ("*", tags[key]) for key, want in (term.tags or {}).items())


def select(
    reservations: Iterable[CapacityReservation], terms: Sequence[SelectorTerm] | None, now: datetime | None = None
) -> list[CapacityReservation]:
    """The active, not ended reservations any term matches, one per id, sorted by id.

    No terms select nothing. When one id appears twice the first occurrence wins.
    """
    if not terms:
        return []
    seen: dict[str, CapacityReservation] = {}
    for r in reservations:
        if r.id in seen or r.state != "active" or r.ended(now):
            continue
        if any(_term_matches(t, r) for t in terms):
            seen[r.id] = r
    return [seen[k] for k in sorted(seen)]


def status_state(r: CapacityReservation, now: datetime) -> str:
    """``expiring`` for a capacity block within ``EXPIRING_WINDOW`` of its end, else ``active``."""
    if r.reservation_type != RESERVATION_TYPE_CAPACITY_BLOCK or r.end_date is None:
        return "active"
    return "expiring" if _aware(now, "now") >= r.end_date - EXPIRING_WINDOW else "active"


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_status(r: CapacityReservation, now: datetime) -> dict[str, Any]:
    """One EC2NodeClass ``status.capacityReservations`` entry (upstream's field names)."""
    out: dict[str, Any] = {
        "availabilityZone": r.zone,
        "id": r.id,
        "instanceMatchCriteria": r.instance_match_criteria,
        "instanceType": r.instance_type,
        "interruptible": r.interruptible,
        "ownerID": r.owner_id,
        "reservationType": r.reservation_type,
        "state": status_state(r, now),
    }
    if r.end_date is not None:
        out["endTime"] = _rfc3339(r.end_date)
    return out


def from_status(
    entry: Mapping[str, Any], available: int, where: str = "status.capacityReservations"
) -> CapacityReservation:
    """A reservation from a ``status.capacityReservations`` entry; ``available`` is its free instance count.

    The status does not record counts or tags: ``total_instance_count`` is set to ``available`` and tags
    are empty. An ``expiring`` entry keeps ``state="expiring"`` (the catalog offers no capacity then).
    """
    if not isinstance(entry, Mapping):
        raise ReservationError(f"{where}: expected an object, got {type(entry).__name__}")
    rid = entry.get("id")
    if not isinstance(rid, str) or not _CR_ID.match(rid):
        raise ReservationError(f"{where}.id: {rid!r} is not a capacity reservation id (cr-...)")
    where = f"{where}[{rid}]"
    for key in ("availabilityZone", "instanceType", "ownerID"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise ReservationError(f"{where}.{key}: required field is missing")
    rtype = entry.get("reservationType") or RESERVATION_TYPE_DEFAULT
    if rtype not in RESERVATION_TYPES:
        raise ReservationError(f"{where}.reservationType: {rtype!r} is not one of {', '.join(RESERVATION_TYPES)}")
    criteria = entry.get("instanceMatchCriteria") or "open"
    if criteria not in MATCH_CRITERIA:
        raise ReservationError(f"{where}.instanceMatchCriteria: {criteria!r} is not one of open, targeted")
    end = entry.get("endTime")
    return CapacityReservation(
        id=rid,
        instance_type=entry["instanceType"],
        zone=entry["availabilityZone"],
        owner_id=entry["ownerID"],
        available_instance_count=max(available, 0),
        total_instance_count=max(available, 0),
        reservation_type=rtype,
        instance_match_criteria=criteria,
        end_date=None if end is None else parse_time(end, f"{where}.endTime"),
        state=str(entry.get("state") or "active"),
        interruptible=bool(entry.get("interruptible", False)),
    )
