"""The webhook at its Function URL: what it accepts (202, on the bus, routed to the right queue) and
what it refuses (nothing reaches the bus)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from nodeflow.handlers import runtime
from nodeflow.ingress.protocol import MAX_BODY_BYTES
from sandbox.nodeflow import LocalNodeflow
from tests.functional.ingress.conftest import event, post, send, signed_request


def _bodies(local: LocalNodeflow, queue: str) -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in local.queue_messages(queue)]


def _event_ids(local: LocalNodeflow) -> list[str]:
    out = local.clients.dynamodb.query(
        TableName=local.world.table_name,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "event-id"}},
    )
    return [i["sk"]["S"] for i in out["Items"]]


@pytest.fixture
def iam(make_local: Callable[..., LocalNodeflow]) -> LocalNodeflow:
    local = make_local()
    local.start_webhook()
    return local


@pytest.fixture
def hmac(make_local: Callable[..., LocalNodeflow]) -> LocalNodeflow:
    local = make_local(webhook_auth="hmac")
    local.start_webhook()
    return local


def test_accepted_events_are_routed_by_kind(iam: LocalNodeflow) -> None:
    url = iam.function_url.url  # type: ignore[union-attr]
    events = [
        event("PodUnschedulable", name="web-1"),
        event("NodeReady", name="ip-10-0-0-1.ec2.internal", providerID="aws:///us-east-1a/i-0abc", ready="True"),
        event("NodePoolChanged", name="default", generation=2),
        event("PodBound", name="web-2", nodeName="ip-10-0-0-1.ec2.internal"),
    ]
    reply = post(url, {"cluster": "demo", "agent": "test", "events": events})
    assert reply.status == 202, reply.body
    assert reply.body == {"accepted": 4, "duplicates": 0}

    provisioning = _bodies(iam, "provisioning")
    assert sorted(b["detail-type"] for b in provisioning) == ["NodePool Changed", "Pod Unschedulable"]
    pod = next(b for b in provisioning if b["detail-type"] == "Pod Unschedulable")
    assert pod["source"] == "nodeflow.agent"
    assert pod["detail"]["cluster"] == "demo"
    assert pod["detail"]["eventId"] == events[0]["id"]
    assert pod["detail"]["object"]["namespace"] == "default"
    assert pod["detail"]["object"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1"}
    disruption = _bodies(iam, "disruption")
    assert sorted(b["detail-type"] for b in disruption) == ["Node Ready", "NodePool Changed", "Pod Bound"]
    assert sorted(_event_ids(iam)) == sorted(e["id"] for e in events)


def test_same_event_three_times_is_forwarded_once(iam: LocalNodeflow) -> None:
    url = iam.function_url.url  # type: ignore[union-attr]
    e = event("PodUnschedulable", name="web-1")
    replies = [post(url, {"cluster": "demo", "events": [e]}) for _ in range(3)]
    assert [r.status for r in replies] == [202, 202, 202]
    assert [r.body for r in replies] == [
        {"accepted": 1, "duplicates": 0},
        {"accepted": 0, "duplicates": 1},
        {"accepted": 0, "duplicates": 1},
    ]
    # within one request, too
    again = post(url, {"cluster": "demo", "events": [e, e, event("PodUnschedulable", name="web-2")]})
    assert again.body == {"accepted": 1, "duplicates": 2}
    assert len(_bodies(iam, "provisioning")) == 2


def _assert_nothing_enqueued(local: LocalNodeflow) -> None:
    assert _bodies(local, "provisioning") == []
    assert _bodies(local, "disruption") == []
    assert _event_ids(local) == []


def test_malformed_requests_get_400_naming_the_field(iam: LocalNodeflow) -> None:
    url = iam.function_url.url  # type: ignore[union-attr]
    not_json = post(url, b"{not json")
    assert not_json.status == 400
    assert "not valid JSON" in not_json.body["message"]

    bad = event("PodUnschedulable")
    bad["kind"] = "PodExploded"
    missing_ns = event("PodBound", name="web-2")
    del missing_ns["object"]["namespace"]
    reply = post(url, {"cluster": "demo", "events": [event("NodeReady", name="n1"), bad, missing_ns]})
    assert reply.status == 400
    locs = {e["loc"]: e["msg"] for e in reply.body["errors"]}
    assert "events[1].kind" in locs
    assert locs["events[2].object.namespace"] == "required for PodBound"

    assert post(url, {"cluster": "demo", "events": []}).body["errors"][0]["loc"] == "events"
    assert post(url, {"cluster": "demo", "events": [event()]}, content_type="text/plain").status == 415
    _assert_nothing_enqueued(iam)


def test_oversized_request_gets_413(iam: LocalNodeflow) -> None:
    url = iam.function_url.url  # type: ignore[union-attr]
    big = event("PodUnschedulable")
    big["object"]["spec"]["padding"] = "x" * MAX_BODY_BYTES
    reply = post(url, {"cluster": "demo", "events": [big]})
    assert reply.status == 413
    assert str(MAX_BODY_BYTES) in reply.body["message"]
    _assert_nothing_enqueued(iam)


def test_unsigned_badly_signed_and_foreign_requests_are_refused(iam: LocalNodeflow) -> None:
    url = iam.function_url.url  # type: ignore[union-attr]
    body = {"cluster": "demo", "events": [event()]}
    assert post(url, body, mode="none").status == 403  # the Function URL refuses unsigned requests
    assert post(url, body, secret_key="not-the-secret").status == 403
    _, headers, data = signed_request(url, json.dumps(body).encode())
    assert send(url, headers, data.replace(b"web-1", b"web-9")).status == 403  # body changed after signing
    # another account's role, correctly signed: the Function URL lets it through, the webhook does not
    iam.function_url.credentials["AKIAOTHERROLE0000001"] = type(  # type: ignore[union-attr]
        iam.function_url.credentials["AKIASANDBOXAGENT0001"]  # type: ignore[union-attr]
    )("other-secret", "arn:aws:sts::999999999999:assumed-role/intruder/x", "999999999999")
    foreign = post(url, body, access_key="AKIAOTHERROLE0000001", secret_key="other-secret")
    assert foreign.status == 403
    assert "not an allowed agent principal" in foreign.body["message"]
    wrong_cluster = post(url, {"cluster": "other", "events": [event()]})
    assert wrong_cluster.status == 403
    _assert_nothing_enqueued(iam)


def test_replayed_and_stale_requests_are_refused(iam: LocalNodeflow) -> None:
    url = iam.function_url.url  # type: ignore[union-attr]
    body = json.dumps({"cluster": "demo", "events": [event()]}).encode()
    _, headers, data = signed_request(url, body)
    assert send(url, headers, data).status == 202
    replay = send(url, headers, data)  # byte for byte the same request, still correctly signed
    assert replay.status == 403
    assert "replayed" in replay.body["message"]
    stale = post(url, {"cluster": "demo", "events": [event()]}, timestamp=int(__import__("time").time()) - 3600)
    assert stale.status == 403
    assert len(_bodies(iam, "provisioning")) == 1


def test_hmac_mode(hmac: LocalNodeflow) -> None:
    url = hmac.function_url.url  # type: ignore[union-attr]
    secret = hmac.world.hmac_secret
    body = {"cluster": "demo", "events": [event()]}
    unsigned = post(url, body, mode="none")
    assert unsigned.status == 401
    assert "x-nodeflow-signature" in unsigned.body["message"]
    assert post(url, body, mode="hmac", secret="wrong").status == 403
    _, headers, data = signed_request(url, json.dumps(body).encode(), mode="hmac", secret=secret)
    assert send(url, headers, data).status == 202
    assert send(url, headers, data).status == 403  # replay
    # a rotated secret: old and new both verify while the secret lists both
    hmac.clients.secretsmanager.put_secret_value(
        SecretId=hmac.world.hmac_secret_arn, SecretString=f"new-secret\n{secret}"
    )
    from nodeflow.handlers import webhook

    webhook._secrets_cache.clear()
    assert (
        post(url, {"cluster": "demo", "events": [event(name="web-2")]}, mode="hmac", secret="new-secret").status == 202
    )
    assert post(url, {"cluster": "demo", "events": [event(name="web-3")]}, mode="hmac", secret=secret).status == 202
    assert len(_bodies(hmac, "provisioning")) == 3


def test_bus_failure_answers_503_and_the_retry_gets_through(
    iam: LocalNodeflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = iam.function_url.url  # type: ignore[union-attr]
    body = {"cluster": "demo", "events": [event(name="web-1"), event(name="web-2")]}
    monkeypatch.setenv("EVENT_BUS_NAME", "missing-bus")
    runtime.reset()
    failed = post(url, body)
    assert failed.status == 503
    assert _event_ids(iam) == []  # claims released: the retry must not look like a duplicate
    monkeypatch.setenv("EVENT_BUS_NAME", iam.world.bus_name)
    runtime.reset()
    retry = post(url, body)
    assert retry.status == 202
    assert retry.body == {"accepted": 2, "duplicates": 0}
    assert len(_bodies(iam, "provisioning")) == 2
    assert os.environ["EVENT_BUS_NAME"] == iam.world.bus_name


def test_only_post_is_allowed(iam: LocalNodeflow) -> None:
    reply = iam.invoke("webhook", {"requestContext": {"http": {"method": "GET"}}, "headers": {}})
    assert reply["statusCode"] == 405
