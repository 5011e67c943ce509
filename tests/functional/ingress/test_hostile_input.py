"""The webhook at its Function URL against untrusted content: a future event time reaches the queues as
the receive time (and the disruption Lambda reads it as such), and hostile bodies, correctly signed or
not, are 4xx with nothing enqueued (never a 5xx from the Function URL)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeflow.lifecycle.disruption_round import pod_events
from sandbox.nodeflow import LocalNodeflow
from tests.functional.ingress.conftest import event, post, send, signed_request


def _bodies(local: LocalNodeflow, queue: str) -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in local.queue_messages(queue)]


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.fixture
def iam(make_local: Callable[..., LocalNodeflow]) -> LocalNodeflow:
    local = make_local()
    local.start_webhook()
    return local


def test_a_future_event_time_reaches_the_queues_as_the_receive_time(iam: LocalNodeflow) -> None:
    url = iam.function_url.url  # type: ignore[union-attr]
    bound = event("PodBound", name="web-1", nodeName="ip-10-0-0-1.ec2.internal")
    bound["time"] = "9999-12-31T23:59:59Z"
    pending = event("PodUnschedulable", name="web-2")
    pending["time"] = "9999-12-31T23:59:59-23:59"  # past datetime.max once in UTC
    before = datetime.now(UTC).replace(microsecond=0)
    reply = post(url, {"cluster": "demo", "events": [bound, pending]})
    after = datetime.now(UTC)
    assert reply.status == 202, reply.body

    (disruption,) = _bodies(iam, "disruption")
    (provisioning,) = _bodies(iam, "provisioning")
    for message in (disruption, provisioning):
        assert before <= _time(message["detail"]["observedAt"]) <= after
        assert before <= _time(message["time"]) <= after  # the EventBridge envelope's time
    # what the disruption Lambda makes of it: a consolidateAfter timer at the receive time, not in 9999
    timers = pod_events([{"body": m["Body"]} for m in iam.queue_messages("disruption")])
    assert before <= timers["ip-10-0-0-1.ec2.internal"] <= after


def _hostile(name: str) -> bytes:
    base = event("PodUnschedulable", name="web-1")
    raw = json.dumps({"cluster": "demo", "events": [base]})
    if name == "nan":
        return raw.replace('"cpu": "1"', '"cpu": NaN').encode()
    if name == "infinity":
        return raw.replace('"cpu": "1"', '"cpu": 1e999').encode()
    if name == "huge-int":
        return raw.replace('"cpu": "1"', '"cpu": ' + "9" * 5000).encode()
    if name == "nul":
        return raw.replace('"web-1"', '"web-1\\u0000"').encode()
    if name == "deep":
        return raw.replace('"cpu": "1"', '"cpu": ' + "[" * 100_000 + "]" * 100_000).encode()
    if name == "not-utf8":
        return raw.replace("web-1", "w\u00e9b-1").encode("latin-1")
    if name == "not-an-object":
        return b'["demo"]'
    raise AssertionError(name)


@pytest.mark.parametrize(
    ("name", "loc"),
    [
        ("nan", "events[0].object.spec.containers[0].resources.requests.cpu"),
        ("infinity", "events[0].object.spec.containers[0].resources.requests.cpu"),
        ("huge-int", "events[0].object.spec.containers[0].resources.requests.cpu"),
        ("nul", "events[0].object.name"),
        ("deep", "(body)"),
        ("not-utf8", "(body)"),
        ("not-an-object", "(body)"),
    ],
)
def test_a_hostile_signed_body_is_400_naming_the_field_and_nothing_is_enqueued(
    iam: LocalNodeflow, name: str, loc: str
) -> None:
    url = iam.function_url.url  # type: ignore[union-attr]
    reply = post(url, _hostile(name))
    assert reply.status == 400, reply.body
    assert loc in {e["loc"] for e in reply.body["errors"]}, reply.body
    assert _bodies(iam, "provisioning") == []
    assert _bodies(iam, "disruption") == []


def test_hostile_unauthenticated_requests_are_refused_in_hmac_mode(make_local: Callable[..., LocalNodeflow]) -> None:
    local = make_local(webhook_auth="hmac")
    local.start_webhook()
    url = local.function_url.url  # type: ignore[union-attr]
    secret = local.world.hmac_secret
    body = _hostile("deep")
    _, headers, data = signed_request(url, body, mode="hmac", secret=secret)
    for timestamp in ("\u00b2", "".join(chr(0xFF10 + int(d)) for d in headers["x-nodeflow-timestamp"])):
        odd = dict(headers) | {"x-nodeflow-timestamp": timestamp}
        reply = send(url, {k: v.encode().decode("latin-1") for k, v in odd.items()}, data)
        assert reply.status == 401, reply.body
    wrong = send(url, dict(headers) | {"x-nodeflow-signature": "v1=" + "f" * 64}, data)
    assert wrong.status == 403
    assert send(url, headers, data).status == 400  # correctly signed: read, and refused as content
    assert _bodies(local, "provisioning") == []


def test_a_bug_reading_content_is_a_400_logged_as_an_error(
    iam: LocalNodeflow, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from nodeflow.ingress import webhook

    def broken(_: bytes) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(webhook, "parse_request", broken)
    reply = post(iam.function_url.url, {"cluster": "demo", "events": [event()]})  # type: ignore[union-attr]
    assert reply.status == 400, reply.body
    assert "RuntimeError" in reply.body["message"]
    assert any(r.levelname == "ERROR" and "could not read" in r.getMessage() for r in caplog.records)
    assert _bodies(iam, "provisioning") == []
