"""``nodeflow.ingress.webhook.handle`` with fakes for its store and bus: the order of checks, what
reaches the bus, and that a failure never leaves a claim that would swallow the retry."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeflow.aws.bus import MAX_ENTRIES, BusEntry, entry_size, put_entries
from nodeflow.aws.errors import Throttled
from nodeflow.ingress.auth import hmac_signature
from nodeflow.ingress.protocol import DETAIL_TYPES, KINDS, MAX_BODY_BYTES
from nodeflow.ingress.routing import ROUTES, event_pattern
from nodeflow.ingress.webhook import WebhookConfig, WebhookDeps, handle

NOW = 1_790_000_000.0
SECRET = "s3cret"


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


def _deps(store: FakeStore, bus: FakeBus, mode: str = "hmac") -> WebhookDeps:
    return WebhookDeps(
        config=WebhookConfig(cluster="demo", auth_mode=mode),
        now=lambda: NOW,
        secrets=lambda: [SECRET],
        claim_nonce=store.claim_nonce,
        claim_events=store.claim,
        confirm_events=store.confirm,
        release_events=store.release,
        publish=bus.publish,
    )


def _event(eid: str, kind: str = "NodeReady", **obj: Any) -> dict[str, Any]:
    o = {"name": "n1", "uid": "u1", **obj}
    if kind.startswith("Pod"):
        o.setdefault("namespace", "default")
    if kind == "PodUnschedulable":
        o.setdefault("spec", {})
    return {"id": eid * 16, "kind": kind, "time": "2026-11-21T10:00:00Z", "object": o}


def _request(
    body: bytes | dict[str, Any], *, nonce: str = "a" * 32, ts: int = int(NOW), method: str = "POST", **headers: str
) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    h = {
        "Content-Type": "application/json",
        "X-Nodeflow-Timestamp": str(ts),
        "X-Nodeflow-Nonce": nonce,
        "X-Nodeflow-Signature": hmac_signature(SECRET, str(ts), nonce, raw),
        **headers,
    }
    return {"requestContext": {"http": {"method": method}}, "headers": h, "body": raw.decode(errors="replace")}


def test_accepted_events_carry_the_detail_type_of_their_kind() -> None:
    store, bus = FakeStore(), FakeBus()
    out = handle(
        _deps(store, bus),
        _request({"cluster": "demo", "agent": "a", "events": [_event("1"), _event("2", "PodUnschedulable")]}),
    )
    assert (out.status, out.body) == (202, {"accepted": 2, "duplicates": 0})
    assert [e.detail_type for e in bus.entries] == ["Node Ready", "Pod Unschedulable"]
    assert bus.entries[0].detail["object"] == {"name": "n1", "uid": "u1"}
    assert bus.entries[1].detail["kind"] == "PodUnschedulable"
    assert set(store.events.values()) == {"done"}


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        (_request({"cluster": "demo", "events": [_event("1")]}, method="GET"), 405),
        (_request(b"x" * (MAX_BODY_BYTES + 1)), 413),
        ({"requestContext": {"http": {"method": "POST"}}, "headers": {}, "body": "{}"}, 401),
        (_request({"cluster": "demo", "events": [_event("1")]}, **{"X-Nodeflow-Signature": "v1=bad"}), 403),
        (_request({"cluster": "demo", "events": [_event("1")]}, ts=int(NOW) - 900), 403),
        (_request({"cluster": "demo", "events": [_event("1")]}, **{"Content-Type": "text/plain"}), 415),
        (_request(b"[1, 2"), 400),
        (_request({"cluster": "demo", "events": [{"id": "short"}]}), 400),
        (_request({"cluster": "prod", "events": [_event("1")]}), 403),
    ],
)
def test_refusals_publish_nothing(request_: dict[str, Any], status: int) -> None:
    store, bus = FakeStore(), FakeBus()
    out = handle(_deps(store, bus), request_)
    assert out.status == status, out.body
    assert out.body["message"]
    assert bus.entries == []
    assert store.events == {}


def test_replayed_nonce_is_403() -> None:
    store, bus = FakeStore(), FakeBus()
    req = _request({"cluster": "demo", "events": [_event("1")]})
    assert handle(_deps(store, bus), req).status == 202
    again = handle(_deps(store, bus), req)
    assert (again.status, again.outcome) == (403, "replayed")
    assert len(bus.entries) == 1


def test_base64_bodies_are_decoded() -> None:
    import base64

    store, bus = FakeStore(), FakeBus()
    req = _request({"cluster": "demo", "events": [_event("1")]})
    req["body"], req["isBase64Encoded"] = base64.b64encode(req["body"].encode()).decode(), True
    assert handle(_deps(store, bus), req).status == 202
    broken = _request(b"{}", nonce="b" * 32)
    broken["body"], broken["isBase64Encoded"] = "!!not base64!!", True
    assert handle(_deps(store, bus), broken).status in (400, 403)


def test_partial_bus_failure_releases_only_the_failed_claims() -> None:
    store, bus = FakeStore(), FakeBus(fail={"2" * 16})
    body = {"cluster": "demo", "events": [_event("1"), _event("2")]}
    out = handle(_deps(store, bus), _request(body))
    assert out.status == 503
    assert store.events == {"1" * 16: "done"}
    bus.fail.clear()
    retry = handle(_deps(store, bus), _request(body, nonce="b" * 32))
    assert retry.body == {"accepted": 1, "duplicates": 1}
    assert [e.key for e in bus.entries] == ["1" * 16, "2" * 16]


def test_store_failure_is_503_and_retryable() -> None:
    store, bus = FakeStore(fail_claims=True), FakeBus()
    out = handle(_deps(store, bus), _request({"cluster": "demo", "events": [_event("1")]}))
    assert (out.status, out.outcome) == (503, "unavailable")
    assert bus.entries == []


# --- the bus adapter -------------------------------------------------------------------------


@dataclass
class FakeEvents:
    """boto3 ``events`` client stand-in: fails the listed DetailTypes once each."""

    fail_once: set[str] = field(default_factory=set)
    calls: list[list[dict[str, Any]]] = field(default_factory=list)
    raise_first: bool = False

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append(Entries)
        if self.raise_first:
            self.raise_first = False
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "InternalException", "Message": "down"}}, "PutEvents")
        results = []
        for e in Entries:
            if e["DetailType"] in self.fail_once:
                self.fail_once.discard(e["DetailType"])
                results.append({"ErrorCode": "InternalFailure", "ErrorMessage": "try again"})
            else:
                results.append({"EventId": "x"})
        return {"FailedEntryCount": sum("ErrorCode" in r for r in results), "Entries": results}


def _entries(n: int, size: int = 10) -> list[BusEntry]:
    return [BusEntry("nodeflow.agent", f"T{i}", {"pad": "x" * size}, key=str(i)) for i in range(n)]


def test_put_entries_chunks_by_count_and_size() -> None:
    fake = FakeEvents()
    assert put_entries(fake, "bus", _entries(25)) == []
    assert [len(c) for c in fake.calls] == [MAX_ENTRIES, MAX_ENTRIES, 5]
    big = FakeEvents()
    assert put_entries(big, "bus", _entries(6, size=100_000)) == []
    assert all(sum(entry_size(e) for e in call) <= 256 * 1024 for call in big.calls)
    assert [len(c) for c in big.calls] == [2, 2, 2]


def test_put_entries_retries_failed_entries_and_whole_call_errors() -> None:
    fake = FakeEvents(fail_once={"T3"}, raise_first=True)
    assert put_entries(fake, "bus", _entries(5)) == []
    assert [e["DetailType"] for e in fake.calls[-1]] == ["T3"]


def test_put_entries_reports_what_never_got_through() -> None:
    class Down(FakeEvents):
        def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            self.calls.append(Entries)
            return {"FailedEntryCount": len(Entries), "Entries": [{"ErrorCode": "InternalFailure"} for _ in Entries]}

    failed = put_entries(Down(), "bus", _entries(3))
    assert [k for k, _ in failed] == ["0", "1", "2"]


# --- routing ---------------------------------------------------------------------------------


def test_every_kind_is_routed_and_pending_pods_go_to_provisioning() -> None:
    routed = {dt for r in ROUTES for dt in r.detail_types}
    assert routed == set(DETAIL_TYPES.values())
    assert len(KINDS) == len(DETAIL_TYPES)
    provisioning = next(r for r in ROUTES if r.queue == "provisioning")
    assert "Pod Unschedulable" in provisioning.detail_types
    assert "Node Ready" not in provisioning.detail_types
    pattern = event_pattern("demo", provisioning.detail_types)
    assert pattern["source"] == ["nodeflow.agent"]
    assert pattern["detail"] == {"cluster": ["demo"]}
