"""sender: batching by count/size/time, 400 bisect, 413 split + truncation, retries with re-signing, flush."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodeflow_agent.auth import HMACSigner
from nodeflow_agent.buffer import Buffer, Item
from nodeflow_agent.metrics import Metrics
from nodeflow_agent.sender import Response, Sender, StaleConnection, backoff_delay

SECRET = "unit-secret"
URL = "https://example.lambda-url.us-east-1.on.aws/"


def event(uid: str, *, spec_bytes: int = 0, kind: str = "PodUnschedulable") -> Item:
    obj: dict[str, Any] = {"namespace": "default", "name": uid, "uid": uid}
    if spec_bytes:
        obj["spec"] = {"containers": [{"name": "x" * spec_bytes, "resources": {}}]}
    body = {"id": f"id-{uid}".ljust(16, "0"), "kind": kind, "time": "2026-11-21T10:00:00Z", "reason": "watch"}
    data = json.dumps({**body, "object": obj}, separators=(",", ":")).encode()
    return Item(("Pod", uid), body["id"], data)


class FakeWebhook:
    """A transport that answers as the webhook would: checks the HMAC signature, records accepted events.
    ``policy(uids, body)`` returns the status to answer (default 202)."""

    def __init__(self, policy: Callable[[list[str], bytes], int] | None = None) -> None:
        self.policy = policy or (lambda uids, body: 202)
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.accepted: list[str] = []
        self.lock = threading.Lock()

    def post(self, headers: dict[str, str], body: bytes) -> Response:
        with self.lock:
            self.requests.append((headers, body))
        message = (
            f"v1\n{headers['X-Nodeflow-Timestamp']}\n{headers['X-Nodeflow-Nonce']}\n{hashlib.sha256(body).hexdigest()}"
        )
        expected = "v1=" + hmac.new(SECRET.encode(), message.encode(), hashlib.sha256).hexdigest()
        if headers.get("X-Nodeflow-Signature") != expected:
            return Response(403, b'{"message":"signature does not verify"}')
        payload = json.loads(body)
        uids = [e["object"]["uid"] for e in payload["events"]]
        status = self.policy(uids, body)
        if status == 202:
            with self.lock:
                self.accepted.extend(uids)
        return Response(status, json.dumps({"message": f"status {status}"}).encode())

    @property
    def batches(self) -> list[list[str]]:
        return [[e["object"]["uid"] for e in json.loads(b)["events"]] for _, b in self.requests]


@pytest.fixture
def signer(tmp_path: Path) -> HMACSigner:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    return HMACSigner(str(path))


def make_sender(webhook: Any, signer: HMACSigner, buffer: Buffer | None = None, **kwargs: Any) -> Sender:
    options: dict[str, Any] = {
        "batch_max_events": 100,
        "batch_max_bytes": 200_000,
        "batch_max_wait": 0.05,
        "backoff_base": 0.001,
        "backoff_max": 0.01,
        "rng": random.Random(7),
        **kwargs,
    }
    return Sender(
        url=URL,
        cluster="demo",
        agent="agent-1",
        buffer=buffer if buffer is not None else Buffer(1000),
        transport=webhook,
        signer=signer,
        metrics=Metrics(),
        **options,
    )


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def test_request_body_and_headers_follow_the_protocol(signer: HMACSigner) -> None:
    webhook = FakeWebhook()
    sender = make_sender(webhook, signer)
    assert sender.deliver([event("a"), event("b")])
    [(headers, body)] = webhook.requests
    payload = json.loads(body)
    assert payload["cluster"] == "demo"
    assert payload["agent"] == "agent-1"
    assert payload["sentAt"].endswith("Z")
    assert [e["id"] for e in payload["events"]] == ["id-a000000000000", "id-b000000000000"]
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Nodeflow-Timestamp"].isdigit()
    assert abs(int(headers["X-Nodeflow-Timestamp"]) - time.time()) < 5
    assert len(headers["X-Nodeflow-Nonce"]) == 32
    assert int(headers["X-Nodeflow-Nonce"], 16) >= 0
    assert headers["X-Nodeflow-Signature"].startswith("v1=")
    assert sender.metrics.total("nodeflow_agent_events_sent_total") == 2


def test_batches_by_count_without_waiting(signer: HMACSigner) -> None:
    webhook = FakeWebhook()
    buffer = Buffer(1000)
    sender = make_sender(webhook, signer, buffer, batch_max_events=100, batch_max_wait=30.0)
    for i in range(200):
        buffer.put(event(f"p{i}"))
    started = time.monotonic()
    sender.start()
    try:
        wait_until(lambda: len(webhook.accepted) == 200)
        assert time.monotonic() - started < 5.0  # far below the 30 s wait: full batches go at once
        assert [len(b) for b in webhook.batches] == [100, 100]
    finally:
        sender.stop()
        sender.join(5)


def test_idle_batch_goes_after_the_wait(signer: HMACSigner) -> None:
    webhook = FakeWebhook()
    buffer = Buffer(1000)
    sender = make_sender(webhook, signer, buffer, batch_max_events=100, batch_max_wait=0.3)
    sender.start()
    try:
        started = time.monotonic()
        buffer.put(event("a"))
        buffer.put(event("b"))
        wait_until(lambda: len(webhook.accepted) == 2)
        elapsed = time.monotonic() - started
        assert 0.25 <= elapsed < 3.0
        assert webhook.batches == [["a", "b"]]
    finally:
        sender.stop()
        sender.join(5)


def test_batches_by_size(signer: HMACSigner) -> None:
    webhook = FakeWebhook()
    buffer = Buffer(1000)
    sender = make_sender(webhook, signer, buffer, batch_max_bytes=8_000, batch_max_wait=0.2)
    for i in range(40):
        buffer.put(event(f"p{i}", spec_bytes=900))  # ~1 KB each
    sender.start()
    try:
        wait_until(lambda: len(webhook.accepted) == 40)
        assert all(len(body) <= 8_000 for _, body in webhook.requests)
        assert all(len(b) >= 6 for b in webhook.batches[:-1])  # full batches, not one event at a time
        assert sorted(webhook.accepted) == sorted(f"p{i}" for i in range(40))
    finally:
        sender.stop()
        sender.join(5)


def test_400_bisects_and_drops_only_the_bad_event(signer: HMACSigner) -> None:
    webhook = FakeWebhook(lambda uids, body: 400 if "bad" in uids else 202)
    sender = make_sender(webhook, signer)
    items = [event(f"p{i}") for i in range(7)] + [event("bad")] + [event(f"q{i}") for i in range(8)]
    assert sender.deliver(items)
    assert sorted(webhook.accepted) == sorted([f"p{i}" for i in range(7)] + [f"q{i}" for i in range(8)])
    assert sender.metrics.value("nodeflow_agent_events_dropped_total", reason="rejected") == 1
    assert len(webhook.requests) <= 1 + 2 * 4  # bisection, not one request per event
    assert ["bad"] in webhook.batches


def test_413_splits_and_truncates_a_single_oversized_spec(signer: HMACSigner) -> None:
    limit = 6_000
    webhook = FakeWebhook(lambda uids, body: 413 if len(body) > limit else 202)
    sender = make_sender(webhook, signer)
    items = [event(f"p{i}", spec_bytes=1_000) for i in range(12)] + [event("huge", spec_bytes=20_000)]
    assert sender.deliver(items)
    assert sorted(webhook.accepted) == sorted([f"p{i}" for i in range(12)] + ["huge"])
    last = {e["object"]["uid"]: e for _, b in webhook.requests for e in json.loads(b)["events"]}
    assert last["huge"]["object"]["spec"] == {"truncated": True}
    assert last["p0"]["object"]["spec"] != {"truncated": True}
    assert sender.metrics.total("nodeflow_agent_events_truncated_total") == 1


def test_event_larger_than_a_request_is_truncated_before_sending(signer: HMACSigner) -> None:
    webhook = FakeWebhook()
    sender = make_sender(webhook, signer, batch_max_bytes=10_000)
    assert sender.deliver([event("huge", spec_bytes=50_000), event("small")])
    [(_, body)] = webhook.requests
    events = {e["object"]["uid"]: e for e in json.loads(body)["events"]}
    assert events["huge"]["object"]["spec"] == {"truncated": True}
    assert len(body) <= 10_000


@pytest.mark.parametrize("status", [401, 403, 429, 500, 502, 503, 504, 404])
def test_retryable_statuses_are_retried_and_re_signed(signer: HMACSigner, status: int) -> None:
    answers = [status, status, 202]
    webhook = FakeWebhook(lambda uids, body: answers.pop(0))
    sender = make_sender(webhook, signer)
    assert sender.deliver([event("a")])
    assert webhook.accepted == ["a"]
    assert len(webhook.requests) == 3
    nonces = {h["X-Nodeflow-Nonce"] for h, _ in webhook.requests}
    assert len(nonces) == 3  # a retry is a new request: new nonce, new signature
    assert sender.metrics.total("nodeflow_agent_send_failures_total") == 2
    assert sender.failing_since is None


def test_network_errors_are_retried(signer: HMACSigner) -> None:
    calls = {"n": 0}
    webhook = FakeWebhook()

    class Flaky:
        def post(self, headers: dict[str, str], body: bytes) -> Response:
            calls["n"] += 1
            if calls["n"] <= 2:
                raise ConnectionRefusedError("connection refused")
            return webhook.post(headers, body)

    sender = make_sender(Flaky(), signer)
    assert sender.deliver([event("a")])
    assert webhook.accepted == ["a"]
    assert sender.metrics.value("nodeflow_agent_requests_total", code="0") == 2


def test_a_stale_keepalive_connection_is_retried_at_once(signer: HMACSigner) -> None:
    webhook = FakeWebhook()
    state = {"stale": True}

    class Stale:
        def post(self, headers: dict[str, str], body: bytes) -> Response:
            if state["stale"]:
                state["stale"] = False
                raise StaleConnection("peer closed the idle connection")
            return webhook.post(headers, body)

    sender = make_sender(Stale(), signer)
    assert sender.deliver([event("a")])
    assert sender.metrics.total("nodeflow_agent_send_failures_total") == 0


@pytest.mark.parametrize("status", [405, 415])
def test_agent_bugs_are_dropped(signer: HMACSigner, status: int) -> None:
    webhook = FakeWebhook(lambda uids, body: status)
    sender = make_sender(webhook, signer)
    assert sender.deliver([event("a"), event("b")])
    assert len(webhook.requests) == 1
    assert sender.metrics.value("nodeflow_agent_events_dropped_total", reason="rejected") == 2


def test_failure_streak_makes_the_sender_unhealthy(signer: HMACSigner) -> None:
    webhook = FakeWebhook(lambda uids, body: 503)
    now = {"t": 1000.0}
    buffer = Buffer(100)
    sender = make_sender(webhook, signer, buffer, batch_max_wait=0.0)
    sender._clock = lambda: now["t"]  # type: ignore[method-assign]
    assert sender.healthy(60)
    buffer.put(event("a"))
    sender.start()
    try:
        wait_until(lambda: len(webhook.requests) >= 2)
        assert sender.healthy(60)
        now["t"] += 61
        assert not sender.healthy(60)
        webhook.policy = lambda uids, body: 202
        wait_until(lambda: webhook.accepted == ["a"])
        assert sender.healthy(60)
    finally:
        sender.stop()
        sender.join(5)


def test_flush_delivers_within_the_deadline(signer: HMACSigner) -> None:
    webhook = FakeWebhook()
    buffer = Buffer(1000)
    sender = make_sender(webhook, signer, buffer, batch_max_wait=30.0)
    sender.start()
    for i in range(30):
        buffer.put(event(f"p{i}"))
    started = time.monotonic()
    assert sender.flush(5.0) is True
    assert time.monotonic() - started < 3.0  # flushing does not wait for the batch window
    assert len(webhook.accepted) == 30
    assert not sender.is_alive()


def test_flush_gives_up_at_the_deadline_when_the_webhook_is_down(signer: HMACSigner) -> None:
    webhook = FakeWebhook(lambda uids, body: 503)
    buffer = Buffer(1000)
    sender = make_sender(webhook, signer, buffer, backoff_base=5.0, backoff_max=5.0, batch_max_wait=0.0)
    for i in range(3):
        buffer.put(event(f"p{i}"))
    sender.start()
    wait_until(lambda: len(webhook.requests) >= 1)
    started = time.monotonic()
    assert sender.flush(0.5) is False
    assert time.monotonic() - started < 3.0
    assert sender.metrics.value("nodeflow_agent_events_dropped_total", reason="shutdown") == 3


def test_overflow_triggers_one_full_resync_once_delivery_works(signer: HMACSigner) -> None:
    resyncs: list[float] = []
    webhook = FakeWebhook(lambda uids, body: 503)
    buffer = Buffer(10)
    sender = make_sender(webhook, signer, buffer, batch_max_events=5, on_full_resync=lambda: resyncs.append(1))
    for i in range(25):
        buffer.put(event(f"p{i}"))
    assert buffer.dropped == 15
    sender.start()
    try:
        wait_until(lambda: len(webhook.requests) >= 3)
        assert resyncs == []  # not while the webhook is failing
        webhook.policy = lambda uids, body: 202
        wait_until(lambda: len(webhook.accepted) == 10)
        wait_until(lambda: resyncs == [1])
        assert sender.metrics.total("nodeflow_agent_full_resyncs_total") == 1
    finally:
        sender.stop()
        sender.join(5)


def test_backoff_is_full_jitter_within_the_cap() -> None:
    rng = random.Random(1)
    for attempt in range(12):
        bound = min(30.0, 0.5 * 2**attempt)
        samples = [backoff_delay(attempt, 0.5, 30.0, rng) for _ in range(300)]
        assert all(0.0 <= s <= bound for s in samples)
        assert max(samples) > bound * 0.8  # spread over the whole range (full jitter)
        assert min(samples) < bound * 0.2
    assert backoff_delay(10_000, 0.5, 30.0, rng) <= 30.0
