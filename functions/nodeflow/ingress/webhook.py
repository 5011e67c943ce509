"""The webhook's decision: from a Lambda Function URL request to an HTTP response, with the side
effects (nonce and event-id records, the bus) behind ``WebhookDeps``.

Order: method (405) → size (413) → credentials and freshness (401/403) → nonce (403 replay) →
content type (415) → JSON and schema (400, naming each field) → cluster (403) → claim event ids
(duplicates are accepted, not forwarded) → publish → confirm (202) or release and 503, so the
agent's retry gets through. Nothing reaches the bus unless every check before it passed.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeflow.aws.bus import BusEntry
from nodeflow.ingress.auth import AuthError, verify
from nodeflow.ingress.models import AgentRequest, RequestInvalid, parse_request
from nodeflow.ingress.protocol import DETAIL_TYPES, MAX_BODY_BYTES, NONCE_TTL_SECONDS, SOURCE

__all__ = ["Response", "WebhookConfig", "WebhookDeps", "handle"]


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


def _body(event: Mapping[str, Any]) -> bytes:
    raw = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            return b"\xff"  # undecodable: fails JSON parsing below with a 400
    return raw.encode() if isinstance(raw, str) else bytes(raw)


def _entries(request: AgentRequest, ids: set[str]) -> list[BusEntry]:
    out: list[BusEntry] = []
    for e in request.events:
        if e.id not in ids:
            continue
        ids.discard(e.id)  # first occurrence only
        out.append(
            BusEntry(
                source=SOURCE,
                detail_type=DETAIL_TYPES[e.kind],
                time=e.time,
                key=e.id,
                detail={
                    "cluster": request.cluster,
                    "eventId": e.id,
                    "kind": e.kind,
                    "reason": e.reason,
                    "observedAt": e.time.isoformat().replace("+00:00", "Z"),
                    "agent": request.agent,
                    "object": e.object.model_dump(by_alias=True, exclude_none=True),
                },
            )
        )
    return out


def handle(deps: WebhookDeps, event: Mapping[str, Any]) -> Response:
    cfg = deps.config
    context = event.get("requestContext") or {}
    method = str((context.get("http") or {}).get("method") or event.get("httpMethod") or "").upper()
    if method != "POST":
        return _reject(405, "method", f"method {method or '(none)'} not allowed; POST events")
    body = _body(event)
    if len(body) > MAX_BODY_BYTES:
        return _reject(413, "too-large", f"body is {len(body)} bytes; the limit is {MAX_BODY_BYTES}")
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
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
        request = parse_request(json.loads(body))
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, RequestInvalid):
            return _reject(400, "invalid", "invalid request", errors=[e.model_dump() for e in exc.errors])
        return _reject(400, "invalid", f"body is not valid JSON: {exc}")
    if request.cluster != cfg.cluster:
        return _reject(403, "forbidden", f"cluster {request.cluster!r} is not this webhook's cluster")

    ids = [e.id for e in request.events]
    claimed: list[str] = []
    try:
        claimed = deps.claim_events(ids, now)
        failed = deps.publish(_entries(request, set(claimed))) if claimed else []
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
