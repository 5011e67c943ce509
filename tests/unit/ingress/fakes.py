"""Fakes for ``nodeflow.ingress.webhook.handle``: the event-id/nonce store, a bus that records
entries, and one that goes through the real ``put_entries`` to a stand-in for EventBridge that
refuses what EventBridge documents it refuses (invalid JSON, numbers outside int64, nesting over
1,000 levels, entries over 256 KB), and request builders signed as the agent signs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeflow.aws.bus import MAX_ENTRIES, MAX_REQUEST_BYTES, BusEntry, entry_size, put_entries
from nodeflow.aws.errors import Throttled
from nodeflow.ingress.auth import hmac_signature
from nodeflow.ingress.webhook import WebhookConfig, WebhookDeps

NOW = 1_790_000_000.0
SECRET = "s3cret"
AGENT_ARN = "arn:aws:sts::123456789012:assumed-role/nodeflow-agent/session"


@dataclass
class FakeStore:
    nonces: set[str] = field(default_factory=set)
    events: dict[str, str] = field(default_factory=dict)  # id -> "pending" | "done"
    fail_claims: bool = False

    def claim_nonce(self, nonce: str, now: float, ttl: int) -> bool:
        if nonce in self.nonces:
            return False
        self.nonces.add(nonce)
        return True

    def claim(self, ids: Sequence[str], now: float) -> list[str]:
        if self.fail_claims:
            raise Throttled("store throttled")
        fresh = [i for i in dict.fromkeys(ids) if i not in self.events]
        self.events.update(dict.fromkeys(fresh, "pending"))
        return fresh

    def confirm(self, ids: Sequence[str], now: float) -> None:
        self.events.update(dict.fromkeys(ids, "done"))

    def release(self, ids: Sequence[str]) -> None:
        for i in ids:
            self.events.pop(i, None)


@dataclass
class FakeBus:
    entries: list[BusEntry] = field(default_factory=list)
    fail: set[str] = field(default_factory=set)  # keys to fail

    def publish(self, entries: Sequence[BusEntry]) -> list[tuple[str, str]]:
        ok = [e for e in entries if e.key not in self.fail]
        self.entries.extend(ok)
        return [(e.key, "InternalFailure: boom") for e in entries if e.key in self.fail]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _ints_ok(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_ints_ok(v) for v in value.values())
    if isinstance(value, list):
        return all(_ints_ok(v) for v in value)
    if isinstance(value, int) and not isinstance(value, bool):
        return -(2**63) <= value < 2**63
    return True


def eventbridge_problem(entry: dict[str, Any]) -> str | None:
    """Why EventBridge would refuse this PutEvents entry (None: it would take it)."""
    if entry_size(entry) > MAX_REQUEST_BYTES:
        return f"entry is {entry_size(entry)} bytes"
    try:
        detail = json.loads(entry["Detail"], parse_constant=_no_constant)
        entry["Detail"].encode()  # lone surrogates cannot be sent
    except (ValueError, UnicodeEncodeError) as exc:
        return f"Detail is not valid JSON: {exc}"
    if not isinstance(detail, dict):
        return "Detail is not a JSON object"
    if _depth(detail) > 1000:
        return "Detail is nested too deeply"
    if not _ints_ok(detail):
        return "Detail has an integer outside int64"
    if entry.get("Time") is not None and not isinstance(entry["Time"], datetime):
        return "Time is not a timestamp"
    return None


@dataclass
class StrictEvents:
    """A boto3 ``events`` client stand-in that refuses entries as EventBridge documents."""

    accepted: list[dict[str, Any]] = field(default_factory=list)
    refused: list[tuple[dict[str, Any], str]] = field(default_factory=list)

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        assert len(Entries) <= MAX_ENTRIES
        assert sum(entry_size(e) for e in Entries) <= MAX_REQUEST_BYTES
        results: list[dict[str, Any]] = []
        for e in Entries:
            problem = eventbridge_problem(e)
            if problem:
                self.refused.append((e, problem))
                results.append({"ErrorCode": "MalformedDetail", "ErrorMessage": problem})
            else:
                self.accepted.append(e)
                results.append({"EventId": str(len(self.accepted))})
        return {"FailedEntryCount": sum("ErrorCode" in r for r in results), "Entries": results}


@dataclass
class StrictBus:
    events: StrictEvents = field(default_factory=StrictEvents)

    def publish(self, entries: Sequence[BusEntry]) -> list[tuple[str, str]]:
        return put_entries(self.events, "bus", entries)


def deps(store: FakeStore, bus: FakeBus | StrictBus, mode: str = "hmac", now: float = NOW) -> WebhookDeps:
    return WebhookDeps(
        config=WebhookConfig(cluster="demo", auth_mode=mode),
        now=lambda: now,
        secrets=lambda: [SECRET],
        claim_nonce=store.claim_nonce,
        claim_events=store.claim,
        confirm_events=store.confirm,
        release_events=store.release,
        publish=bus.publish,
    )


def event(eid: str, kind: str = "NodeReady", **obj: Any) -> dict[str, Any]:
    o = {"name": "n1", "uid": "u1", **obj}
    if kind.startswith("Pod"):
        o.setdefault("namespace", "default")
    if kind == "PodUnschedulable":
        o.setdefault("spec", {})
    return {"id": eid * 16, "kind": kind, "time": "2026-09-21T14:00:00Z", "object": o}


def request(
    body: bytes | dict[str, Any],
    *,
    nonce: str = "a" * 32,
    ts: int = int(NOW),
    method: str = "POST",
    mode: str = "hmac",
    **headers: str,
) -> dict[str, Any]:
    """A Function URL event for ``body``, signed as the agent signs (HMAC header, or the IAM caller the
    Function URL passes in ``requestContext``). Bodies that are not UTF-8 are sent base64-encoded."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    h = {"Content-Type": "application/json", "X-Nodeflow-Timestamp": str(ts), "X-Nodeflow-Nonce": nonce}
    context: dict[str, Any] = {"http": {"method": method}}
    if mode == "hmac":
        h["X-Nodeflow-Signature"] = hmac_signature(SECRET, str(ts), nonce, raw)
    elif mode == "iam":
        context["authorizer"] = {"iam": {"userArn": AGENT_ARN, "accountId": "123456789012"}}
    h.update(headers)
    try:
        return {"requestContext": context, "headers": h, "body": raw.decode(), "isBase64Encoded": False}
    except UnicodeDecodeError:
        import base64

        return {
            "requestContext": context,
            "headers": h,
            "body": base64.b64encode(raw).decode(),
            "isBase64Encoded": True,
        }
