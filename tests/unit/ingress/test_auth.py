"""Request authentication, pure: HMAC vectors, freshness, IAM callers."""

from __future__ import annotations

import hashlib
import hmac as std_hmac

import pytest

from nodeflow.ingress.auth import Forbidden, Unauthorized, hmac_signature, normalize_principal, verify

NOW = 1_790_000_000
NONCE = "0123456789abcdef0123456789abcdef"
BODY = b'{"cluster":"demo","events":[]}'


def _headers(ts: int = NOW, nonce: str = NONCE, **extra: str) -> dict[str, str]:
    return {"x-nodeflow-timestamp": str(ts), "x-nodeflow-nonce": nonce, **extra}


def test_hmac_signature_is_the_documented_construction() -> None:
    digest = hashlib.sha256(BODY).hexdigest()
    expected = std_hmac.new(b"s3cret", f"v1\n{NOW}\n{NONCE}\n{digest}".encode(), hashlib.sha256).hexdigest()
    assert hmac_signature("s3cret", str(NOW), NONCE, BODY) == f"v1={expected}"


def test_hmac_accepts_any_configured_secret() -> None:
    sig = hmac_signature("old", str(NOW), NONCE, BODY)
    v = verify("hmac", _headers(**{"x-nodeflow-signature": sig}), BODY, None, now=NOW + 10, secrets=["new", "old"])
    assert (v.nonce, v.timestamp, v.principal) == (NONCE, NOW, "hmac")


@pytest.mark.parametrize(
    ("headers", "body", "error", "text"),
    [
        (_headers(), BODY, Unauthorized, "x-nodeflow-signature"),
        ({"x-nodeflow-signature": "v1=00"}, BODY, Unauthorized, "x-nodeflow-timestamp"),
        (
            _headers(ts=0, **{"x-nodeflow-signature": "v1=00"}) | {"x-nodeflow-timestamp": "yesterday"},
            BODY,
            Unauthorized,
            "Unix seconds",
        ),
        (_headers(nonce="short", **{"x-nodeflow-signature": "v1=00"}), BODY, Unauthorized, "32 lowercase hex"),
        (_headers(**{"x-nodeflow-signature": "v1=00"}), BODY, Forbidden, "does not verify"),
        (
            _headers(**{"x-nodeflow-signature": hmac_signature("s3cret", str(NOW), NONCE, BODY)}),
            BODY + b" ",
            Forbidden,
            "does not verify",
        ),
        (
            _headers(ts=NOW - 301, **{"x-nodeflow-signature": hmac_signature("s3cret", str(NOW - 301), NONCE, BODY)}),
            BODY,
            Forbidden,
            "300s",
        ),
        (
            _headers(ts=NOW + 301, **{"x-nodeflow-signature": hmac_signature("s3cret", str(NOW + 301), NONCE, BODY)}),
            BODY,
            Forbidden,
            "300s",
        ),
    ],
)
def test_hmac_refusals(headers: dict[str, str], body: bytes, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        verify("hmac", headers, body, None, now=NOW, secrets=["s3cret"])


def test_hmac_without_secrets_refuses_everything() -> None:
    sig = hmac_signature("", str(NOW), NONCE, BODY)
    with pytest.raises(Forbidden):
        verify("hmac", _headers(**{"x-nodeflow-signature": sig}), BODY, None, now=NOW, secrets=[])


def _iam(arn: str) -> dict[str, object]:
    return {"authorizer": {"iam": {"userArn": arn, "accountId": "123456789012"}}}


def test_iam_caller_must_be_present_and_allowed() -> None:
    caller = "arn:aws:sts::123456789012:assumed-role/nodeflow-agent/botocore-session-1"
    role = "arn:aws:iam::123456789012:role/path/nodeflow-agent"
    assert verify("iam", _headers(), BODY, _iam(caller), now=NOW, principals=[role]).principal == caller
    assert verify("iam", _headers(), BODY, _iam(caller), now=NOW).principal == caller  # no allow-list
    with pytest.raises(Unauthorized, match="not IAM-signed"):
        verify("iam", _headers(), BODY, {}, now=NOW)
    with pytest.raises(Forbidden, match="not an allowed agent principal"):
        verify(
            "iam", _headers(), BODY, _iam(caller.replace("123456789012", "999999999999")), now=NOW, principals=[role]
        )
    with pytest.raises(Unauthorized, match="x-nodeflow-nonce"):
        verify("iam", {"x-nodeflow-timestamp": str(NOW)}, BODY, _iam(caller), now=NOW)
    with pytest.raises(Forbidden, match="300s"):
        verify("iam", _headers(ts=NOW - 1000), BODY, _iam(caller), now=NOW)


def test_principals_normalize_roles_and_sessions() -> None:
    assert normalize_principal("arn:aws:iam::123456789012:role/a/b/agent") == "aws:123456789012:agent"
    assert normalize_principal("arn:aws:sts::123456789012:assumed-role/agent/s") == "aws:123456789012:agent"
    assert normalize_principal("arn:aws:iam::123456789012:user/bob") == "arn:aws:iam::123456789012:user/bob"


def test_unknown_mode_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="WEBHOOK_AUTH"):
        verify("none", _headers(), BODY, None, now=NOW)


# --- hostile headers: never an exception other than AuthError --------------------------------


@pytest.mark.parametrize(
    "raw_ts",
    [
        "²",  # str.isdigit() accepts it, int() does not
        "".join(chr(0x0660 + int(d)) for d in str(NOW)),  # Arabic-Indic digits: int() reads them as NOW
        "".join(chr(0xFF10 + int(d)) for d in str(NOW)),  # full-width digits
        "9" * 5000,  # more digits than int() converts
        "+1790000000",
        "1790000000\n",
        " 1790000000",
        "1.79e9",
        "",
    ],
)
@pytest.mark.parametrize("mode", ["hmac", "iam"])
def test_a_timestamp_header_of_anything_but_ascii_digits_is_401(raw_ts: str, mode: str) -> None:
    headers = _headers() | {"x-nodeflow-timestamp": raw_ts}
    headers["x-nodeflow-signature"] = hmac_signature("s3cret", raw_ts, NONCE, BODY)  # correctly signed
    context = _iam("arn:aws:sts::123456789012:assumed-role/agent/s")
    with pytest.raises(Unauthorized, match="x-nodeflow-timestamp"):
        verify(mode, headers, BODY, context, now=NOW, secrets=["s3cret"])


def test_a_nonce_with_a_trailing_newline_is_401() -> None:
    nonce = NONCE + "\n"
    headers = _headers(nonce=nonce, **{"x-nodeflow-signature": hmac_signature("s3cret", str(NOW), nonce, BODY)})
    with pytest.raises(Unauthorized, match="32 lowercase hex"):
        verify("hmac", headers, BODY, None, now=NOW, secrets=["s3cret"])


@pytest.mark.parametrize(
    "signature", ["v1=é", "v1=" + "é" * 64, "v1=" + "A" * 64, "v1=\x00", "v2=00", "v1=" + "0" * 65]
)
def test_a_malformed_signature_is_403_not_an_exception(signature: str) -> None:
    with pytest.raises(Forbidden, match="does not verify"):
        verify("hmac", _headers(**{"x-nodeflow-signature": signature}), BODY, None, now=NOW, secrets=["s3cret"])


@pytest.mark.parametrize(
    "context",
    [
        "a string",
        {"authorizer": "a string"},
        {"authorizer": {"iam": ["a", "list"]}},
        {"authorizer": {"iam": {"userArn": 12}}},
        {"authorizer": {"iam": {"userArn": ""}}},
    ],
)
def test_an_odd_request_context_is_unauthorized(context: object) -> None:
    with pytest.raises(Unauthorized, match="not IAM-signed"):
        verify("iam", _headers(), BODY, context, now=NOW)  # type: ignore[arg-type]
