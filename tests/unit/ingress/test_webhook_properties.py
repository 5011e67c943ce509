"""Properties of the webhook for any body, correctly signed (HMAC, or the IAM caller the Function URL
passes in ``requestContext``), with a store and a bus that work:

- the answer is never a 5xx (and never the catch-all ``unreadable``, which would be a bug);
- a refusal claims no event id and publishes nothing;
- what is accepted is on the bus as EventBridge takes it (valid JSON, int64 numbers, under the size
  limit), with no time later than the receive time.

Bodies: arbitrary JSON values, valid requests with one subtree replaced by an arbitrary value,
valid requests with bytes mutated, arbitrary bytes, and deep nesting.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeflow.ingress.protocol import KINDS, MAX_BODY_BYTES
from nodeflow.ingress.webhook import handle
from tests.unit.ingress.fakes import NOW, FakeStore, StrictBus, deps, eventbridge_problem, request

RECEIVED = datetime.fromtimestamp(NOW, UTC)
SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- arbitrary JSON, including what Python's json writes but JSON does not allow -------------------

_chars = st.one_of(
    st.characters(),  # any code point but surrogates
    st.characters(min_codepoint=0, max_codepoint=0x20),  # control characters
    st.characters(min_codepoint=0x7F, max_codepoint=0x9F),  # DEL, C1
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),  # lone surrogates
    st.sampled_from("0123456789\u00b2\u0661\uff11-:TZ+."),  # digits of every kind, time punctuation
)
_text = st.text(_chars, max_size=40)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=10**30).map(lambda n: n ** (n % 7 + 1)),  # very long integers
    st.floats(allow_nan=True, allow_infinity=True),
    _text,
)
_json = st.recursive(
    _scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(_text, children, max_size=4)),
    max_leaves=25,
)

# --- what the agent sends: text without control characters (but tab and newlines), int64, finite floats
_clean_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("\t\n\r"), max_size=30)
_clean_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _clean_text,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(_clean_text, children, max_size=4)),
    max_leaves=25,
)


def _times() -> st.SearchStrategy[str]:
    offsets = st.sampled_from(["Z", "z", "+00:00", "-23:59", "+23:59", "+05:30", ""])
    moments = st.one_of(
        st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
        st.integers(-3600, 3600).map(lambda s: RECEIVED.replace(tzinfo=None) + timedelta(seconds=s)),
    )
    return st.builds(lambda m, o: m.isoformat() + o, moments, offsets)


_names = st.from_regex(r"\A[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?\Z")


@st.composite
def _objects(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    obj: dict[str, Any] = {"name": draw(_names), "uid": draw(st.from_regex(r"\A[!-~]{1,40}\Z"))}
    if kind.startswith("Pod"):
        obj["namespace"] = draw(_names)
    if kind == "PodUnschedulable":
        obj["spec"] = draw(st.dictionaries(_clean_text, _clean_json, max_size=3))
        obj["labels"] = draw(st.dictionaries(_clean_text, _clean_text, max_size=3))
        obj["message"] = draw(_clean_text)
        obj["priority"] = draw(st.none() | st.integers(-(2**31), 2**31 - 1))
    elif kind.startswith("Node") and not kind.startswith("NodePool"):
        obj["providerID"] = draw(st.none() | st.just("aws:///us-east-1a/i-0123456789abcdef0"))
        obj["nodePool"] = draw(st.none() | _names)
    elif kind.endswith(("Changed", "Deleted")):
        obj["generation"] = draw(st.integers(0, 2**63 - 1))
    if kind in ("PodBound", "PodDeleted"):
        obj["nodeName"] = draw(_names)
    return obj


@st.composite
def _requests(draw: st.DrawFn) -> dict[str, Any]:
    events = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(KINDS))
        events.append(
            {
                "id": draw(st.from_regex(r"\A[A-Za-z0-9_-]{16,24}\Z")),
                "kind": kind,
                "time": draw(_times()),
                "reason": draw(st.sampled_from(["watch", "relist", "resync"])),
                "object": draw(_objects(kind)),
            }
        )
    body: dict[str, Any] = {"cluster": "demo", "events": events}
    if draw(st.booleans()):
        body["agent"] = "agent-1"
    if draw(st.booleans()):
        body["sentAt"] = draw(_times())
    return body


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


@st.composite
def _replaced(draw: st.DrawFn) -> Any:
    """A valid request with one subtree (or the whole body) replaced by an arbitrary JSON value."""
    body = draw(_requests())
    path = draw(st.sampled_from(_paths(body)))
    value = draw(_json)
    if not path:
        return value
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


def _encode(value: Any, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    """A valid request's bytes with a few bytes inserted, deleted, replaced or a slice repeated."""
    data = bytearray(_encode(draw(_requests()), draw(st.booleans())))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "repeat"]))
        chunk = draw(
            st.binary(min_size=1, max_size=4) | st.sampled_from([b"\\u0000", b"\\ud800", b"NaN", b"1e999", b"["])
        )
        if op == "insert":
            data[at:at] = chunk
        elif op == "delete":
            del data[at : at + len(chunk)]
        elif op == "replace":
            data[at : at + len(chunk)] = chunk
        else:
            data[at:at] = data[at : at + 20] * draw(st.integers(1, 50))
    return bytes(data)


@st.composite
def _deep(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(1, 3000))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    inner = opener * depth + b"1" + closer * depth
    where = draw(st.sampled_from(["body", "spec"]))
    if where == "body":
        return inner
    body = _encode(draw(_requests()), True)
    return body.replace(b'"events": [', b'"deep": ' + inner + b', "events": [', 1)


_bodies = st.one_of(
    st.builds(_encode, _json, st.booleans()),
    st.builds(_encode, _replaced(), st.booleans()),
    st.builds(_encode, _requests(), st.booleans()),
    _mutated(),
    _deep(),
    st.binary(max_size=200),
)


def _check(body: bytes, mode: str, b64: bool) -> None:
    store, bus = FakeStore(), StrictBus()
    req = request(body, mode=mode)
    if b64 and not req["isBase64Encoded"]:
        req["body"], req["isBase64Encoded"] = base64.b64encode(body).decode(), True
    out = handle(deps(store, bus, mode), req)
    assert out.status < 500, out.body
    assert out.outcome != "unreadable", out.body
    assert bus.events.refused == [], bus.events.refused[:1]
    if out.status != 202:
        assert 400 <= out.status < 500
        assert out.body["message"]
        assert bus.events.accepted == []
        assert store.events == {}
        if len(body) <= MAX_BODY_BYTES and out.status == 400 and "errors" in out.body:
            assert all(e["loc"] and e["msg"] for e in out.body["errors"])
        return
    assert len(bus.events.accepted) == out.body["accepted"]
    for entry in bus.events.accepted:
        assert eventbridge_problem(entry) is None
        assert entry["Time"] <= RECEIVED
        detail = json.loads(entry["Detail"])
        observed = datetime.fromisoformat(detail["observedAt"].replace("Z", "+00:00"))
        assert observed <= RECEIVED
        assert observed.tzinfo is not None


@SETTINGS
@given(_bodies, st.sampled_from(["hmac", "iam"]), st.booleans())
def test_any_signed_body_gets_a_4xx_or_is_safely_on_the_bus(body: bytes, mode: str, b64: bool) -> None:
    _check(body, mode, b64)


@SETTINGS
@given(_requests(), st.sampled_from(["hmac", "iam"]))
def test_valid_requests_are_accepted_with_no_future_time(body: dict[str, Any], mode: str) -> None:
    """Well-formed requests (times anywhere from year 1 to 9999, any offset) are accepted unless a time
    is before 2000 or has no timezone, and what is accepted never carries a future time."""
    store, bus = FakeStore(), StrictBus()
    out = handle(deps(store, bus, mode), request(body, mode=mode))
    times = [e["time"] for e in body["events"]] + ([body["sentAt"]] if "sentAt" in body else [])
    readable = [t for t in times if t[-1] in "Zz" or t[-6] in "+-"]
    if len(readable) < len(times) or any(
        datetime.fromisoformat(t.upper()) < datetime(2000, 1, 1, tzinfo=UTC) for t in readable
    ):
        assert out.status == 400, out.body
        assert all("time" in e["loc"] or e["loc"] == "sentAt" for e in out.body["errors"]), out.body
        return
    assert out.status == 202, out.body
    _check(json.dumps(body).encode(), mode, False)
