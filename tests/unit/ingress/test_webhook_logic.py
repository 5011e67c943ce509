"""``nodeflow.ingress.webhook.handle`` with fakes for its store and bus: the order of checks, what
reaches the bus, and that a failure never leaves a claim that would swallow the retry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeflow.aws.bus import MAX_ENTRIES, BusEntry, entry_size, put_entries
from nodeflow.ingress.protocol import DETAIL_TYPES, KINDS, MAX_BODY_BYTES
from nodeflow.ingress.routing import ROUTES, event_pattern
from nodeflow.ingress.webhook import handle
from tests.unit.ingress.fakes import NOW, FakeBus, FakeStore
from tests.unit.ingress.fakes import deps as _deps
from tests.unit.ingress.fakes import event as _event
from tests.unit.ingress.fakes import request as _request


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
