"""The webhook's decision: from a Lambda Function URL request to an HTTP response, with the side
effects (nonce and event-id records, the bus) behind ``WebhookDeps``.

Order: method (405) → size (413) → credentials and freshness (401/403) → nonce (403 replay) →
content type (415) → JSON and schema (400, naming each field) → cluster (403) → each event fits the
bus once encoded (413) → claim event ids (duplicates are accepted, not forwarded) → publish → confirm
(202) or release and 503, so the agent's retry gets through. Nothing reaches the bus unless every
check before it passed.

Malformed input of any shape is a 4xx, never a 5xx (a 5xx makes the agent retry the same batch
forever): the Lambda event's own fields are read defensively, and the body is read only once the
request is authenticated (``parse_request``, which raises nothing but ``RequestInvalid``; anything
else it raised would be a bug, answered 400 ``unreadable`` and logged, so one bad event cannot
block the agent). Event times are untrusted: a time later than the receive time is forwarded as the
receive time (``observedAt`` and the entry's Time), so no consumer ever sees a future time.

Must not touch: how the bus or the nonce store work (``nodeflow.aws.bus``, ``nodeflow.aws.dedup``); the Function URL's
event shape (``nodeflow.handlers.webhook``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nodeflow.aws.bus import MAX_REQUEST_BYTES, BusEntry, entry_size
from nodeflow.ingress.auth import AuthError, verify
from nodeflow.ingress.models import AgentRequest, RequestInvalid, parse_request
from nodeflow.ingress.protocol import DETAIL_TYPES, MAX_BODY_BYTES, NONCE_TTL_SECONDS, SOURCE

__all__ = ["MAX_ENTRY_BYTES", "Response", "WebhookConfig", "WebhookDeps", "handle"]

# A PutEvents entry may be 256 KB; EventBridge then wraps it in its envelope (id, time, account, ...)
# for the SQS targets, whose messages have the same limit: keep a margin for that envelope.
MAX_ENTRY_BYTES = MAX_REQUEST_BYTES - 1024
# The detail's own fields around an event's object (cluster, agent, eventId, observedAt, ...).
_DETAIL_OVERHEAD_BYTES = 1024


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: dict[str, Any]
    outcome: str  # short label for logs and metrics: accepted, duplicate, unauthorized, ...

    def to_lambda(self) -> dict[str, Any]:
        return {
            "statusCode": self.status,
            "headers": {"content-type": "application/json"},
            "body": json.dumps(self.body, separators=(",", ":")),
        }


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    cluster: str
    auth_mode: str = "iam"  # "iam" | "hmac"
    principals: tuple[str, ...] = ()
    dedup_ttl_seconds: int = 3600
    claim_lease_seconds: int = 60


@dataclass(frozen=True)
class WebhookDeps:
    config: WebhookConfig
    now: Callable[[], float]  # epoch seconds
    secrets: Callable[[], Sequence[str]]  # HMAC secrets (only called in hmac mode)
    claim_nonce: Callable[[str, float, int], bool]
    claim_events: Callable[[Sequence[str], float], list[str]]
    confirm_events: Callable[[Sequence[str], float], None]
    release_events: Callable[[Sequence[str]], None]
    publish: Callable[[Sequence[BusEntry]], list[tuple[str, str]]]  # -> failed (key, error)
    log: Callable[[str, Mapping[str, Any]], None] = field(default=lambda _msg, _extra: None)


def _reject(status: int, outcome: str, message: str, **extra: Any) -> Response:
    return Response(status, {"message": message, **extra}, outcome)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _body(event: Mapping[str, Any]) -> bytes | None:
    """The request body's bytes (None when the Lambda event's ``body`` is not a string)."""
    raw = event.get("body")
    if raw is None:
        return b""
    if not isinstance(raw, str):
        return None
    if event.get("isBase64Encoded") is True:
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            return b"\xff"  # undecodable: fails UTF-8 decoding below with a 400
    return raw.encode("utf-8", "surrogatepass")  # (lone surrogates become bytes that are not UTF-8)


def _entries(request: AgentRequest, received: datetime) -> list[BusEntry]:
    """One entry per event id (its first occurrence); a time later than ``received`` becomes ``received``."""
    out: list[BusEntry] = []
    seen: set[str] = set()
    for e in request.events:
        if e.id in seen:
            continue
        seen.add(e.id)
        at = received if e.time >= received else e.time.astimezone(UTC)
        out.append(
            BusEntry(
                source=SOURCE,
                detail_type=DETAIL_TYPES[e.kind],
                time=at,
                key=e.id,
                detail={
                    "cluster": request.cluster,
                    "eventId": e.id,
                    "kind": e.kind,
                    "reason": e.reason,
                    "observedAt": at.isoformat().replace("+00:00", "Z"),
                    "agent": request.agent,
                    "object": e.object.model_dump(by_alias=True, exclude_none=True),
                },
            )
        )
    return out


def _too_large(request: AgentRequest, entries: Sequence[BusEntry]) -> Response | None:
    index = {e.id: i for i, e in reversed(list(enumerate(request.events)))}
    for entry in entries:
        size = entry_size(entry.request(""))
        if size > MAX_ENTRY_BYTES:
            return _reject(
                413,
                "too-large",
                f"events[{index[entry.key]}] would be {size} bytes on the bus (JSON-escaped); "
                f"the limit is {MAX_ENTRY_BYTES}",
            )
    return None


def _invalid(exc: RequestInvalid) -> Response:
    first = exc.errors[0]
    more = f" (and {len(exc.errors) - 1} more)" if len(exc.errors) > 1 else ""
    return _reject(
        400, "invalid", f"invalid request: {first.loc}: {first.msg}{more}", errors=[e.model_dump() for e in exc.errors]
    )


def handle(deps: WebhookDeps, event: Mapping[str, Any]) -> Response:
    cfg = deps.config
    event = _mapping(event)
    context = _mapping(event.get("requestContext"))
    method = _mapping(context.get("http")).get("method") or event.get("httpMethod") or ""
    method = method.upper() if isinstance(method, str) else ""
    if method != "POST":
        return _reject(405, "method", f"method {method[:10]!r} not allowed; POST events" if method else "no method")
    body = _body(event)
    if body is None:
        return _reject(400, "invalid", "the Lambda event's body is not a string")
    if len(body) > MAX_BODY_BYTES:
        return _reject(413, "too-large", f"body is {len(body)} bytes; the limit is {MAX_BODY_BYTES}")
    headers = {str(k).lower(): v for k, v in _mapping(event.get("headers")).items() if isinstance(v, str)}
    now = deps.now()
    try:
        secrets = deps.secrets() if cfg.auth_mode == "hmac" else ()
    except Exception as exc:
        deps.log("secrets unavailable", {"error": f"{type(exc).__name__}: {exc}"})
        return _reject(503, "unavailable", "the webhook cannot read its secrets; retry")
    try:
        verified = verify(cfg.auth_mode, headers, body, context, now=now, secrets=secrets, principals=cfg.principals)
    except AuthError as exc:
        return _reject(exc.status, "unauthorized" if exc.status == 401 else "forbidden", exc.message)
    try:
        fresh = deps.claim_nonce(verified.nonce, now, NONCE_TTL_SECONDS)
    except Exception as exc:
        deps.log("nonce store failed", {"error": f"{type(exc).__name__}: {exc}"})
        return _reject(503, "unavailable", "the webhook's store is unavailable; retry")
    if not fresh:
        return _reject(403, "replayed", "replayed request: this nonce was already used")
    if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        return _reject(415, "content-type", "content-type must be application/json")
    try:
        request = parse_request(body)
        if request.cluster != cfg.cluster:
            return _reject(403, "forbidden", f"cluster {request.cluster!r} is not this webhook's cluster")
        entries = _entries(request, datetime.fromtimestamp(now, UTC))
        may_be_large = request.encoded_bound + _DETAIL_OVERHEAD_BYTES > MAX_ENTRY_BYTES
        too_large = _too_large(request, entries) if may_be_large else None
    except RequestInvalid as exc:
        return _invalid(exc)
    except Exception as exc:  # a bug reading content: a 5xx would have the agent retry this batch forever
        deps.log("request not readable", {"error": f"{type(exc).__name__}: {exc}"[:1000]})
        return _reject(400, "unreadable", f"the webhook could not read this request ({type(exc).__name__})")
    if too_large is not None:
        return too_large

    ids = [e.id for e in request.events]
    claimed: list[str] = []
    try:
        claimed = deps.claim_events(ids, now)
        new_ids = set(claimed)
        failed = deps.publish([e for e in entries if e.key in new_ids]) if claimed else []
    except Exception as exc:  # a dependency failed before anything was published: retryable
        deps.log("webhook dependency failed", {"error": f"{type(exc).__name__}: {exc}"})
        _release(deps, claimed)
        return _reject(503, "unavailable", "the webhook's store or bus is unavailable; retry")
    duplicates = len(ids) - len(claimed)
    failed_ids = {key for key, _ in failed}
    published = [i for i in claimed if i not in failed_ids]
    if failed:
        _release(deps, sorted(failed_ids))
        deps.log("events not published", {"failed": failed[:10], "count": len(failed)})
    try:
        if published:
            deps.confirm_events(published, now)
    except Exception as exc:  # published but unconfirmed: the claims' lease still de-duplicates a retry
        deps.log("event ids not confirmed", {"error": f"{type(exc).__name__}: {exc}", "count": len(published)})
    if failed:
        return _reject(
            503, "bus-failed", f"{len(failed)} events could not be put on the bus; retry", published=len(published)
        )
    return Response(
        202, {"accepted": len(published), "duplicates": duplicates}, "accepted" if published else "duplicate"
    )


def _release(deps: WebhookDeps, ids: Sequence[str]) -> None:
    if not ids:
        return
    try:
        deps.release_events(ids)
    except Exception as exc:  # the lease runs out on its own; a retry after it gets through
        deps.log("event-id claims not released", {"error": f"{type(exc).__name__}: {exc}", "count": len(ids)})
