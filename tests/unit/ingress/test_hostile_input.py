"""The webhook against hostile and malformed input, correctly signed: every answer is a 4xx naming
the field (never a 5xx, never an exception), nothing is claimed or published on a refusal, and
what is published is safe for every consumer (no future time, valid JSON, numbers in range)."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.aws.bus import MAX_REQUEST_BYTES
from nodeflow.ingress import webhook
from nodeflow.ingress.protocol import MAX_BODY_BYTES
from nodeflow.ingress.webhook import Response, handle
from tests.unit.ingress.fakes import NOW, FakeStore, StrictBus, deps, event, request

RECEIVED = datetime.fromtimestamp(NOW, UTC)


def _send(body: bytes | dict[str, Any], mode: str = "hmac", **kw: Any) -> tuple[Response, FakeStore, StrictBus]:
    store, bus = FakeStore(), StrictBus()
    out = handle(deps(store, bus, mode), request(body, mode=mode, **kw))
    assert out.status < 500, out.body
    if out.status != 202:
        assert bus.events.accepted == []
        assert bus.events.refused == []
        assert store.events == {}
    return out, store, bus


def _refused(body: bytes | dict[str, Any], status: int = 400, **kw: Any) -> dict[str, str]:
    """Send ``body``; it must be refused with ``status``; returns the errors by loc."""
    out, _, _ = _send(body, **kw)
    assert out.status == status, out.body
    assert out.body["message"]
    return {e["loc"]: e["msg"] for e in out.body.get("errors", [])}


def _with(**changes: Any) -> dict[str, Any]:
    """A one-event PodUnschedulable request with ``changes`` applied to the event (``object`` merged)."""
    e = event("1", "PodUnschedulable")
    obj = changes.pop("object", {})
    e.update(changes)
    e["object"].update(obj)
    return {"cluster": "demo", "agent": "agent-1", "events": [e]}


def _detail(bus: StrictBus) -> dict[str, Any]:
    (entry,) = bus.events.accepted
    detail: dict[str, Any] = json.loads(entry["Detail"])
    return detail


# --- behaviour 1: event times ----------------------------------------------------------------


@pytest.mark.parametrize(
    "time",
    [
        "9999-12-31T23:59:59Z",
        "9999-12-31T23:59:59-23:59",  # later than datetime.max once in UTC
        "2100-01-01T00:00:00+05:00",
        (RECEIVED + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        (RECEIVED + timedelta(microseconds=1)).isoformat(),
    ],
)
def test_a_future_event_time_is_forwarded_as_the_receive_time(time: str) -> None:
    out, _, bus = _send({"cluster": "demo", "events": [event("1", "PodBound", nodeName="n1") | {"time": time}]})
    assert out.status == 202, out.body
    (entry,) = bus.events.accepted
    assert json.loads(entry["Detail"])["observedAt"] == "2026-09-21T14:13:20Z"
    assert entry["Time"] == RECEIVED


def test_a_past_event_time_is_kept_and_written_in_utc() -> None:
    out, _, bus = _send(_with(time="2026-09-21T15:00:00.250+02:00"))
    assert out.status == 202, out.body
    assert _detail(bus)["observedAt"] == "2026-09-21T13:00:00.250000Z"
    assert bus.events.accepted[0]["Time"] == datetime(2026, 9, 21, 13, 0, 0, 250000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("time", "msg"),
    [
        ("2026-09-21T14:00:00", "timezone"),  # naive
        ("2026-09-21 14:00:00", "timezone"),
        ("1999-12-31T23:59:59Z", "before 2000-01-01"),
        ("0001-01-01T00:00:00+23:59", "before 2000-01-01"),  # earlier than datetime.min once in UTC
        ("1970-01-01T00:00:00Z", "before 2000-01-01"),
        (1_790_000_000, "RFC 3339"),  # a number is not a time here
        (None, "RFC 3339"),
        (["2026-09-21T14:00:00Z"], "RFC 3339"),
        ("".join(chr(0x0660 + int(d)) for d in "2026") + "-09-21T14:00:00Z", "RFC 3339"),  # Arabic-Indic digits
        ("".join(chr(0xFF10 + int(d)) for d in "2026") + "-09-21T14:00:00Z", "RFC 3339"),  # full-width digits
        ("2026-09-21T14:00:00\u00b2Z", "RFC 3339"),
        ("2026-02-30T14:00:00Z", "not a valid"),
        ("2026-09-21T23:59:60Z", "not a valid"),
        ("2026-09-21T14:00:00+24:00", "not a valid"),
        ("2026-09-21T14:00:00Z\n", "RFC 3339"),
        ("yesterday", "RFC 3339"),
    ],
)
def test_an_unusable_event_time_is_400_naming_the_field(time: object, msg: str) -> None:
    errors = _refused(_with(time=time))
    assert msg in errors["events[0].time"]


@pytest.mark.parametrize(
    ("sent_at", "msg"),
    [("2026-09-21T14:00:00", "timezone"), ("1999-01-01T00:00:00Z", "before 2000-01-01"), (12, "RFC 3339")],
)
def test_an_unusable_sent_at_is_400_naming_the_field(sent_at: object, msg: str) -> None:
    errors = _refused(_with() | {"sentAt": sent_at})
    assert msg in errors["sentAt"]


def test_a_future_sent_at_is_accepted_it_is_not_forwarded() -> None:
    out, _, bus = _send(_with() | {"sentAt": "9999-01-01T00:00:00Z"})
    assert out.status == 202
    assert "9999" not in bus.events.accepted[0]["Detail"]


# --- behaviour 5: JSON that parses to something no consumer can take -----------------------------


def test_json_nested_deeper_than_the_parser_allows_is_400() -> None:
    deep = b'{"cluster":"demo","events":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    errors = _refused(deep)
    assert "nested" in errors["(body)"]


@pytest.mark.parametrize("depth", [40, 900])
def test_json_nested_deeper_than_the_limit_is_400_naming_where(depth: int) -> None:
    body = json.dumps(_with(object={"spec": {"affinity": {"x": "PLACEHOLDER"}}}))
    body = body.replace('"PLACEHOLDER"', "[" * depth + "]" * depth)
    errors = _refused(body.encode())
    (loc,) = errors
    assert loc.startswith("events[0].object.spec.affinity.x[0]")
    assert "nested deeper than 32" in errors[loc]


@pytest.mark.parametrize(
    "literal",
    [
        "NaN",
        "Infinity",
        "-Infinity",
        "1e999",
        "-1e999",
        "1e99999999999",
        "-1E+400",
        "9223372036854775808",
        "-" + "9" * 30,
        "1" * 4000,
        "1" * 5000,
        "1" * 100000,
    ],
)
def test_numbers_outside_what_json_and_eventbridge_take_are_400_naming_the_field(literal: str) -> None:
    body = json.dumps(_with(object={"spec": {"containers": [{"name": "app", "weight": "PLACEHOLDER"}]}}))
    errors = _refused(body.replace('"PLACEHOLDER"', literal).encode())
    assert "events[0].object.spec.containers[0].weight" in errors, errors


def test_numbers_at_the_edges_of_int64_and_float_are_forwarded() -> None:
    spec = {"a": 2**63 - 1, "b": -(2**63), "c": 1.7976931348623157e308, "d": 5e-324, "e": -0.0}
    out, _, bus = _send(_with(object={"spec": spec}))
    assert out.status == 202, out.body
    assert _detail(bus)["object"]["spec"] == spec


# --- strings: control characters, lone surrogates, overlong values ------------------------------

_BAD_CHARS = ["\x00", "\x1b", "\x7f", "\x85", "\ud800", "\udfff"]


@pytest.mark.parametrize("bad", _BAD_CHARS)
@pytest.mark.parametrize(
    ("where", "loc"),
    [
        ("cluster", "cluster"),
        ("agent", "agent"),
        ("name", "events[0].object.name"),
        ("namespace", "events[0].object.namespace"),
        ("uid", "events[0].object.uid"),
        ("resourceVersion", "events[0].object.resourceVersion"),
        ("message", "events[0].object.message"),
        ("ownerName", "events[0].object.ownerName"),
        ("labelValue", "events[0].object.labels.app"),
        ("labelKey", "events[0].object.labels"),
        ("spec", "events[0].object.spec.containers[0].name"),
        ("unknownField", "events[0].object.somethingNew"),
    ],
)
def test_control_characters_and_lone_surrogates_are_400_naming_the_field(bad: str, where: str, loc: str) -> None:
    body = _with(object={"labels": {"app": "web"}, "spec": {"containers": [{"name": "app"}]}})
    obj = body["events"][0]["object"]
    if where in ("cluster", "agent"):
        body[where] = f"demo{bad}"
    elif where == "labelValue":
        obj["labels"]["app"] = f"web{bad}"
    elif where == "labelKey":
        obj["labels"][f"app{bad}"] = "web"
    elif where == "spec":
        obj["spec"]["containers"][0]["name"] = f"app{bad}"
    elif where == "unknownField":
        obj["somethingNew"] = {"deeper": [f"x{bad}"]}
        loc = "events[0].object.somethingNew.deeper[0]"
    else:
        obj[where] = f"web-1{bad}"
    errors = _refused(json.dumps(body).encode())
    assert any(k.startswith(loc) for k in errors), errors


@pytest.mark.parametrize("field", ["nodeName", "providerID", "nodePool"])
def test_control_characters_in_node_fields_are_400(field: str) -> None:
    e = event("1", "NodeClaimDeleting", **{field: "ip-10-0-0-1\x00"})
    assert f"events[0].object.{field}" in _refused({"cluster": "demo", "events": [e]})


def test_tabs_newlines_and_unicode_in_free_text_are_forwarded_as_sent() -> None:
    message = "0/3 nodes are available:\n\t1 Insufficient cpu,\r\n caf\u00e9 \u4e2d \U0001f600 \u2028"
    labels = {"app.kubernetes.io/name": "web", "team": ""}
    out, _, bus = _send(_with(object={"message": message, "labels": labels}))
    assert out.status == 202, out.body
    assert _detail(bus)["object"]["message"] == message
    assert _detail(bus)["object"]["labels"] == labels


@pytest.mark.parametrize(
    ("where", "value", "loc"),
    [
        ("cluster", "d" * 101, "cluster"),
        ("agent", "a" * 254, "agent"),
        ("name", "a" * 254, "events[0].object.name"),
        ("namespace", "a" * 64, "events[0].object.namespace"),
        ("uid", "u" * 129, "events[0].object.uid"),
        ("resourceVersion", "1" * 65, "events[0].object.resourceVersion"),
        ("id", "a" * 65, "events[0].id"),
        ("cluster", "", "cluster"),
        ("uid", "", "events[0].object.uid"),
        ("uid", "has space", "events[0].object.uid"),
    ],
)
def test_overlong_or_malformed_identifiers_are_400(where: str, value: str, loc: str) -> None:
    body = _with()
    if where in ("cluster", "agent"):
        body[where] = value
    elif where == "id":
        body["events"][0]["id"] = value
    else:
        body["events"][0]["object"][where] = value
    assert loc in _refused(body)


def test_an_event_too_large_for_the_bus_once_encoded_is_413_naming_it() -> None:
    # 85,000 CJK characters are 255 KB in the body (UTF-8) but twice that in the bus entry (\\uXXXX)
    body = _with(object={"message": "\u4e2d" * 85_000})
    raw = json.dumps(body, ensure_ascii=False).encode()
    assert len(raw) <= MAX_BODY_BYTES
    out, _store, _bus = _send(raw)
    assert out.status == 413, out.body
    assert "events[0]" in out.body["message"]
    assert str(MAX_REQUEST_BYTES) in out.body["message"] or "bus" in out.body["message"]
    # the agent truncates the spec and retries; a smaller event goes through
    ok, _, _ = _send(_with(object={"message": "\u4e2d" * 1000}), nonce="b" * 32)
    assert ok.status == 202


# --- kind-specific fields consumers read or may do arithmetic on -------------------------------


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("NodePoolChanged", "generation", -1),
        ("NodePoolChanged", "generation", 2**63),
        ("NodePoolChanged", "generation", True),
        ("NodePoolChanged", "generation", 1.5),
        ("NodePoolChanged", "generation", "2"),
        ("EC2NodeClassDeleted", "generation", [2]),
        ("PodUnschedulable", "priority", 2**31),
        ("PodUnschedulable", "priority", "high"),
        ("NodeReady", "ready", "Maybe"),
        ("NodeReady", "unschedulable", "yes"),
        ("PodUnschedulable", "labels", ["app", "web"]),
        ("PodUnschedulable", "labels", {"app": 1}),
        ("NodeClaimChanged", "conditions", [{"type": "Ready", "status": "True"}]),
        ("NodeClaimChanged", "conditions", {"Ready": True}),
        ("PodUnschedulable", "spec", ["containers"]),
        ("PodBound", "nodeName", "Not_A_Node"),
        ("PodBound", "nodeName", 7),
        ("NodeDeleted", "nodePool", {"name": "default"}),
        ("NodeDeleted", "providerID", ["aws:///us-east-1a/i-0abc"]),
        ("PodUnschedulable", "message", {"text": "x"}),
        ("PodUnschedulable", "ownerKind", 3),
    ],
)
def test_typed_object_fields_are_400_naming_the_field(kind: str, field: str, value: object) -> None:
    e = event("1", kind)
    e["object"][field] = value
    errors = _refused({"cluster": "demo", "events": [e]})
    assert any(loc.startswith(f"events[0].object.{field}") for loc in errors), errors


def test_typed_object_fields_as_the_agent_sends_them_are_forwarded() -> None:
    events = [
        event("1", "NodePoolChanged", generation=2**63 - 1),
        event("2", "NodeReady", providerID="aws:///us-east-1a/i-0abc", nodePool="default", ready="True"),
        event("3", "NodeReady", unschedulable=False, providerID=None, nodePool=None, ready="Unknown"),
        event("4", "PodUnschedulable", priority=-(2**31), ownerKind=None, labels={}, message=""),
        event("5", "NodeClaimChanged", conditions={"Ready": "True", "Launched": "Unknown"}, nodeName=None),
    ]
    out, _, bus = _send({"cluster": "demo", "events": events})
    assert out.status == 202, out.body
    objects = [json.loads(e["Detail"])["object"] for e in bus.events.accepted]
    assert objects[0]["generation"] == 2**63 - 1
    assert objects[1]["providerID"] == "aws:///us-east-1a/i-0abc"
    assert objects[2] == {"name": "n1", "uid": "u1", "unschedulable": False, "ready": "Unknown"}
    assert objects[3]["priority"] == -(2**31)
    assert objects[4]["conditions"] == {"Ready": "True", "Launched": "Unknown"}


# --- bodies that are not an agent request at all --------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"null",
        b"[]",
        b'"demo"',
        b"1",
        b"\xef\xbb\xbf" + json.dumps(_with()).encode(),  # a UTF-8 byte-order mark
        json.dumps(_with()).encode("utf-16"),
        json.dumps(_with(object={"message": "caf\u00e9"}), ensure_ascii=False).encode("latin-1"),
        b'{"cluster":"demo","events":[' + b"\xff" * 10 + b"]}",
        b'{"cluster":"demo","events":"' + b"\\ud800" + b'"}',
        b'{"cluster":"demo","events":[{"id":"' + b"\\" + b'"}]}',
        b'{"cluster":"demo",}',
    ],
)
def test_bodies_that_are_not_a_json_object_in_utf8_are_400(raw: bytes) -> None:
    assert _refused(raw)


@pytest.mark.parametrize(
    "body",
    [
        {"cluster": "demo", "events": {"0": event("1")}},
        {"cluster": "demo", "events": [["not", "an", "event"]]},
        {"cluster": "demo", "events": [event("1") | {"object": ["n1", "u1"]}]},
        {"cluster": "demo", "events": [event("1") | {"object": None}]},
        {"cluster": ["demo"], "events": [event("1")]},
        {"cluster": {"name": "demo"}, "events": [event("1")]},
        {"cluster": "demo", "events": [event("1")], "extra": 1},
        {"cluster": "demo", "events": [event("1") | {"kind": None}]},
        {"cluster": "demo", "events": [event("1") | {"reason": ["watch"]}]},
    ],
)
def test_a_list_or_null_where_an_object_is_expected_is_400(body: dict[str, Any]) -> None:
    assert _refused(body)


def test_duplicate_keys_forward_exactly_what_was_validated() -> None:
    """RFC 8259 leaves duplicate names to the parser: the last one wins, and that value is both the
    one validated and the one forwarded (consumers never see the raw body)."""
    e = json.dumps(event("1", "PodBound", nodeName="n1"))
    e = e.replace('"name": "n1"', '"name": "NOT A NAME", "name": "n1"', 1)
    raw = ('{"cluster": "other", "cluster": "demo", "events": [' + e + "]}").encode()
    out, _, bus = _send(raw)
    assert out.status == 202, out.body
    assert _detail(bus)["cluster"] == "demo"
    assert _detail(bus)["object"]["name"] == "n1"
    bad = raw.replace(b'"name": "n1"', b'"name": "n1", "name": "NOT A NAME"')
    assert "events[0].object.name" in _refused(bad, nonce="b" * 32)


@pytest.mark.parametrize(
    "lambda_event",
    [
        {"requestContext": {"http": {"method": "POST"}}, "headers": [["content-type", "application/json"]]},
        {"requestContext": {"http": {"method": "POST"}}, "headers": "content-type: application/json"},
        {"requestContext": {"http": {"method": "POST"}}, "headers": None, "body": 12},
        {"requestContext": "POST", "headers": {}},
        {"requestContext": {"http": "POST"}, "headers": {}},
        {"requestContext": {"http": {"method": ["POST"]}}, "headers": {}},
        {"requestContext": {"http": {"method": "POST"}}, "headers": {}, "body": 10**12},
        {"requestContext": {"http": {"method": "POST"}}, "headers": {}, "body": ["{}"]},
        {"requestContext": {"http": {"method": "POST"}}, "headers": {"x-nodeflow-nonce": None}},
        {"requestContext": {"http": {"method": "POST"}}, "headers": {}, "body": "\ud800"},
        {"requestContext": {"http": {"method": "POST"}}, "headers": {}, "body": "e30=", "isBase64Encoded": "yes"},
    ],
)
def test_odd_lambda_events_are_4xx(lambda_event: dict[str, Any]) -> None:
    store, bus = FakeStore(), StrictBus()
    out = handle(deps(store, bus), lambda_event)
    assert 400 <= out.status < 500, out.body
    assert bus.events.accepted == []
    assert store.events == {}


def test_a_signed_body_with_lone_surrogates_in_the_lambda_event_is_400() -> None:
    """A Function URL event body is a str: one with a lone surrogate (never valid UTF-8) is read as
    bytes that fail UTF-8 decoding, after the signature over those bytes verified."""
    raw = b'{"cluster":"demo","events":[]}' + "\ud800".encode("utf-8", "surrogatepass")
    req = request(raw)
    req["body"], req["isBase64Encoded"] = raw.decode("utf-8", "surrogatepass"), False
    store, bus = FakeStore(), StrictBus()
    out = handle(deps(store, bus), req)
    assert out.status == 400, out.body


def test_base64_bodies_are_decoded_and_checked_like_any_other() -> None:
    req = request(_with(time="9999-01-01T00:00:00Z"))
    req["body"], req["isBase64Encoded"] = base64.b64encode(req["body"].encode()).decode(), True
    store, bus = FakeStore(), StrictBus()
    assert handle(deps(store, bus), req).status == 202
    assert json.loads(bus.events.accepted[0]["Detail"])["observedAt"] == "2026-09-21T14:13:20Z"
    bad = request(json.dumps(_with(object={"spec": {"x": "PLACEHOLDER"}})).replace('"PLACEHOLDER"', "NaN").encode())
    bad["body"], bad["isBase64Encoded"] = base64.b64encode(bad["body"].encode()).decode(), True
    assert handle(deps(FakeStore(), bus), bad).status == 400


# --- nothing reads the content of a request that is not authenticated --------------------------

_HOSTILE = b'{"cluster":"demo\\u0000","events":' + b"[" * 50_000 + b"]" * 50_000 + b', "n": NaN}'


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("unsigned", 401),
        ("wrong-signature", 403),
        ("malformed-signature", 403),
        ("stale", 403),
        ("timestamp-superscript", 401),
        ("timestamp-arabic", 401),
        ("replayed", 403),
        ("iam-no-caller", 401),
        ("iam-wrong-caller", 403),
        ("content-type", 415),
    ],
)
def test_unauthenticated_hostile_requests_are_refused_before_the_body_is_read(
    case: str, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*_: object, **__: object) -> None:
        raise AssertionError("the body of an unauthenticated request was parsed")

    monkeypatch.setattr(webhook, "parse_request", explode)
    monkeypatch.setattr("json.loads", explode)
    mode = "iam" if case.startswith("iam") else "hmac"
    req = request(_HOSTILE, mode=mode)
    h = req["headers"]
    store = FakeStore()
    d = deps(store, StrictBus(), mode)
    if case == "unsigned":
        del h["X-Nodeflow-Signature"]
    elif case == "wrong-signature":
        h["X-Nodeflow-Signature"] = "v1=" + "0" * 64
    elif case == "malformed-signature":
        h["X-Nodeflow-Signature"] = "v1=\u00e9\x00"
    elif case == "stale":
        req = request(_HOSTILE, ts=int(NOW) - 3600)
    elif case == "timestamp-superscript":
        req = request(_HOSTILE, **{"X-Nodeflow-Timestamp": "\u00b2"})
    elif case == "timestamp-arabic":
        req = request(_HOSTILE, **{"X-Nodeflow-Timestamp": "".join(chr(0x0660 + int(c)) for c in str(int(NOW)))})
    elif case == "replayed":
        store.nonces.add("a" * 32)
    elif case == "iam-no-caller":
        del req["requestContext"]["authorizer"]
    elif case == "iam-wrong-caller":
        req["requestContext"]["authorizer"]["iam"]["userArn"] = "arn:aws:sts::999999999999:assumed-role/x/y"
        d = replace(d, config=replace(d.config, principals=("arn:aws:iam::123456789012:role/nodeflow-agent",)))
    elif case == "content-type":
        h["Content-Type"] = "text/plain"
    out = handle(d, req)
    assert out.status == status, out.body
    assert store.events == {}


def test_an_unexpected_error_reading_an_authenticated_body_is_400_not_500(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in reading content must not make the agent retry one poisoned batch forever (a 5xx): the
    webhook answers 400, so the agent isolates and drops that event, and logs the error."""

    def broken(_: bytes) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(webhook, "parse_request", broken)
    logged: list[tuple[str, Any]] = []
    store, bus = FakeStore(), StrictBus()
    d = replace(deps(store, bus), log=lambda msg, extra: logged.append((msg, extra)))
    out = handle(d, request(_with()))
    assert (out.status, out.outcome) == (400, "unreadable")
    assert "RuntimeError" in str(logged)
    assert bus.events.accepted == []
    assert store.events == {}
