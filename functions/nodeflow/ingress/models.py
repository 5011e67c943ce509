"""The agent's request body, read and validated at the webhook's edge; every refusal names the field.

``parse_request`` takes the raw body (only once the request is authenticated) and either returns an
``AgentRequest`` or raises ``RequestInvalid``; nothing else escapes for any input:

- the body must be UTF-8 JSON text (no byte-order mark) whose top level is an object;
- JSON that no consumer could take is refused before the schema, naming where it is: nesting deeper
  than ``MAX_DEPTH``, integers outside int64 (what EventBridge accepts), NaN / Infinity / numbers too
  large for a float (``json.dumps`` would write them as invalid JSON), and in any string or key a
  control character other than tab, newline and carriage return, or a lone surrogate (not UTF-8);
- the schema (pydantic): identifiers have Kubernetes' shapes, the kind-specific fields of
  agent/PROTOCOL.md their types and ranges, and times are RFC 3339 strings with a timezone, not
  before ``MIN_TIME``. A time later than the webhook's clock is valid: the webhook forwards it as its
  receive time. Other object fields are forwarded as sent (they passed the JSON checks above).

Duplicate names in an object: the last one wins (RFC 8259 leaves it to the parser), and that value
is both the one validated and the one forwarded; consumers never see the raw body.

Must not touch: whether the request is authentic (``auth``) or where the events go (``routing``).
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from nodeflow.api.errors import format_loc
from nodeflow.ingress.protocol import KINDS, MAX_EVENTS, NAMESPACED_KINDS

__all__ = [
    "MAX_DEPTH",
    "MIN_TIME",
    "AgentEvent",
    "AgentRequest",
    "FieldError",
    "ObjectRef",
    "RequestInvalid",
    "parse_request",
]

MAX_DEPTH = 32  # JSON nesting levels in a body (a pod's deepest affinity term needs about 15)
MIN_TIME = datetime(2000, 1, 1, tzinfo=UTC)  # earlier times are a broken clock, not an observation
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # PutEvents' range for JSON integers
MAX_ERRORS = 20  # per refusal (the agent bisects a refused batch anyway)

_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_VISIBLE = r"^[!-~]+$"  # printable ASCII, no space: uids, resource versions, provider ids, the cluster
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?P<zone>[Zz]|[+-][0-9]{2}:[0-9]{2})?"
)
# In a string or key: C0 controls but tab, newline and carriage return; DEL and C1; lone surrogates.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_C1_UTF8 = re.compile(b"\xc2[\x80-\x9f]")  # U+0080..U+009F in UTF-8
_CONTAINERS = frozenset({dict, list})

Kind = Literal[
    "PodUnschedulable",
    "PodBound",
    "PodDeleted",
    "NodeReady",
    "NodeNotReady",
    "NodeDeleting",
    "NodeDeleted",
    "NodePoolChanged",
    "NodePoolDeleted",
    "EC2NodeClassChanged",
    "EC2NodeClassDeleted",
    "NodeClaimChanged",
    "NodeClaimDeleting",
    "NodeClaimDeleted",
]
assert set(Kind.__args__) == set(KINDS), "Kind and protocol.KINDS must name the same kinds"  # type: ignore[attr-defined]


def _time(value: object) -> datetime:
    """An RFC 3339 time string with a timezone (ASCII digits only), not before ``MIN_TIME``."""
    if not isinstance(value, str):
        got = "null" if value is None else type(value).__name__
        raise PydanticCustomError(
            "rfc3339", "expected an RFC 3339 time string such as 2026-11-21T10:00:00Z, got {got}", {"got": got}
        )
    m = _RFC3339.fullmatch(value)
    if m is None:
        raise PydanticCustomError("rfc3339", "expected an RFC 3339 time such as 2026-11-21T10:00:00Z")
    if m["zone"] is None:
        raise PydanticCustomError("rfc3339", "has no timezone; RFC 3339 needs Z or an offset such as +00:00")
    try:
        at = datetime.fromisoformat(value.upper())
    except ValueError as exc:
        raise PydanticCustomError("rfc3339", "not a valid date or time ({why})", {"why": str(exc)}) from None
    if at < MIN_TIME:  # (aware comparison: no conversion, so no overflow at year 1 or 9999)
        raise PydanticCustomError("rfc3339", "is before 2000-01-01T00:00:00Z")
    return at


Time = Annotated[datetime, BeforeValidator(_time)]
Int64 = Annotated[int, Field(strict=True, ge=INT64_MIN, le=INT64_MAX)]


class ObjectRef(BaseModel):
    """The object an event is about: the common fields, and the kind-specific ones of agent/PROTOCOL.md
    typed (consumers read them, and may compute with the numbers). Fields not listed are forwarded as
    sent (``extra="allow"``), so the agent can add one before the webhook knows it."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(min_length=1, max_length=253, pattern=_NAME)
    uid: str = Field(min_length=1, max_length=128, pattern=_VISIBLE)
    namespace: str | None = Field(default=None, min_length=1, max_length=63, pattern=_NAME)
    resource_version: str | None = Field(default=None, alias="resourceVersion", max_length=64, pattern=_VISIBLE)
    # nodes, NodeClaims, pods on nodes
    node_name: str | None = Field(default=None, alias="nodeName", max_length=253, pattern=_NAME)
    provider_id: str | None = Field(default=None, alias="providerID", max_length=2048, pattern=_VISIBLE)
    node_pool: str | None = Field(default=None, alias="nodePool", max_length=253, pattern=_NAME)
    ready: Literal["True", "False", "Unknown"] | None = None
    unschedulable: Annotated[bool, Field(strict=True)] | None = None
    conditions: dict[str, str] | None = None
    # NodePools, EC2NodeClasses
    generation: Annotated[int, Field(strict=True, ge=0, le=INT64_MAX)] | None = None
    # unschedulable pods
    labels: dict[str, str] | None = None
    owner_kind: str | None = Field(default=None, alias="ownerKind")
    owner_name: str | None = Field(default=None, alias="ownerName")
    priority: Annotated[int, Field(strict=True, ge=-(2**31), le=2**31 - 1)] | None = None
    priority_class_name: str | None = Field(default=None, alias="priorityClassName")
    scheduler_name: str | None = Field(default=None, alias="schedulerName")
    message: str | None = None
    spec: dict[str, Any] | None = None


class AgentEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str = Field(min_length=16, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    kind: Kind
    time: Time
    reason: Literal["watch", "relist", "resync"] = "watch"
    object: ObjectRef

    @model_validator(mode="after")
    def _namespace(self) -> AgentEvent:
        if self.kind in NAMESPACED_KINDS and not self.object.namespace:
            raise ValueError(f"object.namespace: required for {self.kind}")
        if self.kind == "PodUnschedulable" and self.object.spec is None:
            raise ValueError("object.spec: required for PodUnschedulable (the pod fields the solver reads)")
        return self


class AgentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    cluster: str = Field(min_length=1, max_length=100, pattern=_VISIBLE)
    agent: str | None = Field(default=None, max_length=253, pattern=r"^[!-~]*$")
    sent_at: Time | None = Field(default=None, alias="sentAt")
    events: list[AgentEvent] = Field(min_length=1, max_length=MAX_EVENTS)
    # set by ``parse_request``: no event is longer than this once ``json.dumps`` writes it
    _encoded_bound: int = PrivateAttr(default=2**62)

    @property
    def encoded_bound(self) -> int:
        """Bytes that ``json.dumps`` (ASCII-escaped) writes at most for any one event of this request."""
        return self._encoded_bound


class FieldError(BaseModel):
    loc: str
    msg: str


class RequestInvalid(ValueError):
    """The body is not a valid agent request; ``errors`` name each field."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e.loc}: {e.msg}" for e in errors))
        self.errors = errors


def _errors(exc: ValidationError) -> list[FieldError]:
    out: list[FieldError] = []
    for err in exc.errors(include_url=False)[:MAX_ERRORS]:
        loc = _loc([p for p in err["loc"] if not (isinstance(p, str) and "[" in p)])
        msg = str(err.get("msg", ""))
        if msg.startswith("Value error, "):
            rel, sep, rest = msg[len("Value error, ") :].partition(": ")
            loc, msg = (f"{loc}.{rel}" if loc != "(body)" else rel, rest) if sep else (loc, rel)
        elif err.get("type") == "missing":
            msg = "required field is missing"
        elif err.get("type") == "extra_forbidden":
            msg = "unknown field"
        out.append(FieldError(loc=loc, msg=msg))
    return out


# --- JSON that parses but that no consumer can take ---------------------------------------------


class _Bad(str):
    """A number no consumer can take, kept as the reason why (``_scan`` reports it with its place)."""


class _Numbers:
    """``json.loads`` hooks (called for number literals only): numbers outside int64 or not finite become
    ``_Bad``; ``growth`` adds up how much longer ``json.dumps`` writes a float than it was sent
    (``1e15`` comes back as ``1000000000000000.0``)."""

    __slots__ = ("bad", "growth")

    def __init__(self) -> None:
        self.bad = False
        self.growth = 0

    def integer(self, text: str) -> int | _Bad:
        if len(text) <= 18:
            return int(text)
        value = int(text) if len(text) <= 20 else None  # (int() refuses 4,300 digits and more)
        if value is not None and INT64_MIN <= value <= INT64_MAX:
            return value
        self.bad = True
        return _Bad(f"integer of {len(text.lstrip('-'))} digits is outside the 64-bit range")

    def real(self, text: str) -> float | _Bad:
        value = float(text)
        if not math.isfinite(value):
            self.bad = True
            return _Bad("number too large for a float")
        self.growth += max(0, len(repr(value)) - len(text))
        return value

    def constant(self, text: str) -> _Bad:
        self.bad = True
        return _Bad(f"{text} is not a JSON number")


def _loc(path: list[int | str]) -> str:
    parts = [p if isinstance(p, int) or (p.isprintable() and len(p) <= 64) else repr(p[:64]) for p in path]
    return format_loc(parts) or "(body)"


def _character(text: str) -> str:
    m = _CONTROL.search(text)
    code = ord(m.group()) if m else 0
    what = "a lone surrogate" if 0xD800 <= code <= 0xDFFF else "the control character"
    return f"contains {what} U+{code:04X}"


def _shallow(value: Any, depth: int) -> bool:
    """True when nothing in ``value`` (at ``depth``) is nested deeper than ``MAX_DEPTH``: the one check
    every body needs (the others run only when the parse hooks or ``_may_have_controls`` saw something)."""
    if depth >= MAX_DEPTH:
        return False
    for item in value.values() if type(value) is dict else value:
        if type(item) in _CONTAINERS and not _shallow(item, depth + 1):
            return False
    return True


def _scan(value: dict[str, Any] | list[Any], path: list[int | str], errors: list[FieldError]) -> None:
    """The slow check, when a fast one saw something: every problem (up to ``MAX_ERRORS``) and where it is."""
    if len(path) >= MAX_DEPTH:
        errors.append(FieldError(loc=_loc(path), msg=f"nested deeper than {MAX_DEPTH} levels"))
        return
    items = value.items() if type(value) is dict else enumerate(value)
    for key, item in items:
        if len(errors) >= MAX_ERRORS:
            return
        if type(key) is str and _CONTROL.search(key):
            errors.append(FieldError(loc=_loc(path), msg=f"key {key[:64]!r} {_character(key)}"))
        t = type(item)
        if t is dict or t is list:
            path.append(key)
            _scan(item, path, errors)
            path.pop()
        elif t is _Bad:
            errors.append(FieldError(loc=_loc([*path, key]), msg=str(item)))
        elif t is str and _CONTROL.search(item):
            errors.append(FieldError(loc=_loc([*path, key]), msg=_character(item)))


def _may_have_controls(body: bytes) -> bool:
    """False when no string in the JSON ``body`` can hold a character ``_CONTROL`` matches: raw C0
    controls are not valid JSON (and a lone surrogate not UTF-8), so they can only come from an
    escape, or raw as DEL or C1."""
    if b"\\" in body and (b"\\u" in body or b"\\b" in body or b"\\f" in body):
        return True
    return b"\x7f" in body or (b"\xc2" in body and _C1_UTF8.search(body) is not None)


def _decode(body: bytes) -> tuple[dict[str, Any], int]:
    """The body's JSON object, and a bound on the bytes ``json.dumps`` writes for any part of it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestInvalid([FieldError(loc="(body)", msg=f"not UTF-8: {exc.reason} at byte {exc.start}")]) from None
    numbers = _Numbers()
    try:
        doc = json.loads(text, parse_int=numbers.integer, parse_float=numbers.real, parse_constant=numbers.constant)
    except RecursionError:
        raise RequestInvalid([FieldError(loc="(body)", msg="not readable JSON: nested too deeply")]) from None
    except ValueError as exc:
        raise RequestInvalid([FieldError(loc="(body)", msg=f"not valid JSON: {exc}")]) from None
    if not isinstance(doc, dict):
        raise RequestInvalid([FieldError(loc="(body)", msg="expected a JSON object")])
    if numbers.bad or _may_have_controls(body) or not _shallow(doc, 0):
        errors: list[FieldError] = []
        _scan(doc, [], errors)
        if errors:
            raise RequestInvalid(errors)
    # json.dumps writes ASCII as sent (escapes stay escapes) and a character of n > 1 UTF-8 bytes as a
    # \uXXXX escape (two for n = 4): at most 4 (n - 1) bytes more. Floats may come back longer too.
    return doc, len(body) + 4 * (len(body) - len(text)) + numbers.growth


def parse_request(body: bytes) -> AgentRequest:
    """Read and validate a raw request body; raises ``RequestInvalid`` naming every bad field."""
    doc, bound = _decode(body)
    try:
        request = AgentRequest.model_validate(doc)
    except ValidationError as exc:
        raise RequestInvalid(_errors(exc)) from None
    request._encoded_bound = bound
    return request
