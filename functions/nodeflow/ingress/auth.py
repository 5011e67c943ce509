"""Who may post events, and whether this request was seen before. Pure: the caller supplies the
clock, the secrets and the nonce store.

Two modes (``WEBHOOK_AUTH``):

- ``iam``: the Lambda Function URL (auth type AWS_IAM) has verified the SigV4 signature before the
  function runs and names the caller in ``requestContext.authorizer.iam``. We require that caller
  (and, when configured, that it is one of the agent's roles) and the signed timestamp and nonce
  headers.
- ``hmac``: ``X-Nodeflow-Signature: v1=<hex HMAC-SHA256>`` over ``v1\\n<timestamp>\\n<nonce>\\n<hex
  SHA-256 of the body>`` with one of the shared secrets.

Both modes refuse a timestamp more than ``TIMESTAMP_SKEW_SECONDS`` from now (401 when missing or
unreadable, 403 when out of range) and a nonce already seen (403, checked by the caller through
``NonceStore`` once everything else holds).

Must not touch: what the events say (``models``) or where they go (``routing``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodeflow.ingress.protocol import HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP, TIMESTAMP_SKEW_SECONDS

__all__ = [
    "AuthError",
    "Forbidden",
    "Unauthorized",
    "Verified",
    "hmac_signature",
    "normalize_principal",
    "verify",
]

# fullmatch, ASCII only: ``str.isdigit`` and ``\d`` accept digits (``"²"``, ``"\u0661"``) that ``int()`` rejects
# or reads differently, and ``$`` matches before a trailing newline.
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_NONCE = re.compile(r"[0-9a-f]{32}")
_SIGNATURE = re.compile(r"v1=[0-9a-f]{64}")
_ASSUMED_ROLE = re.compile(r"^arn:(?P<part>[^:]+):sts::(?P<account>[0-9]{12}):assumed-role/(?P<role>[^/]+)/.+$")
_ROLE = re.compile(r"^arn:(?P<part>[^:]+):iam::(?P<account>[0-9]{12}):role/(?:.*/)?(?P<role>[^/]+)$")


class AuthError(Exception):
    status = 401

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthorized(AuthError):
    """No usable credentials on the request (401)."""

    status = 401


class Forbidden(AuthError):
    """Credentials present but not acceptable: bad signature, wrong caller, stale or replayed (403)."""

    status = 403


@dataclass(frozen=True, slots=True)
class Verified:
    nonce: str
    timestamp: int
    principal: str  # the IAM caller, or "hmac"


def hmac_signature(secret: str, timestamp: str, nonce: str, body: bytes) -> str:
    message = f"v1\n{timestamp}\n{nonce}\n{hashlib.sha256(body).hexdigest()}".encode()
    return "v1=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def normalize_principal(arn: str) -> str:
    """``arn:aws:sts::1:assumed-role/R/session`` and ``arn:aws:iam::1:role/path/R`` -> ``aws:1:R``."""
    for pattern in (_ASSUMED_ROLE, _ROLE):
        m = pattern.match(arn)
        if m:
            return f"{m['part']}:{m['account']}:{m['role']}"
    return arn


def _freshness(headers: Mapping[str, str], now: float) -> tuple[str, int]:
    raw_ts = headers.get(HEADER_TIMESTAMP, "")
    nonce = headers.get(HEADER_NONCE, "")
    if not raw_ts or not nonce:
        raise Unauthorized(f"missing {HEADER_TIMESTAMP} or {HEADER_NONCE} header")
    if not _TIMESTAMP.fullmatch(raw_ts):
        raise Unauthorized(f"{HEADER_TIMESTAMP}: expected Unix seconds in ASCII digits, got {raw_ts[:20]!r}")
    if not _NONCE.fullmatch(nonce):
        raise Unauthorized(f"{HEADER_NONCE}: expected 32 lowercase hex characters")
    ts = int(raw_ts)
    if abs(now - ts) > TIMESTAMP_SKEW_SECONDS:
        raise Forbidden(f"request timestamp {ts} is more than {TIMESTAMP_SKEW_SECONDS}s from the webhook's clock")
    return nonce, ts


def _caller(request_context: object) -> str:
    """``requestContext.authorizer.iam.userArn``, or "" when any part is missing or not what AWS sends."""
    authorizer = request_context.get("authorizer") if isinstance(request_context, Mapping) else None
    iam = authorizer.get("iam") if isinstance(authorizer, Mapping) else None
    arn = iam.get("userArn") if isinstance(iam, Mapping) else None
    return arn if isinstance(arn, str) else ""


def verify(
    mode: str,
    headers: Mapping[str, str],
    body: bytes,
    request_context: Mapping[str, Any] | None,
    *,
    now: float,
    secrets: Sequence[str] = (),
    principals: Sequence[str] = (),
) -> Verified:
    """Check a request's credentials and freshness (not yet its nonce); raises ``AuthError``.

    ``headers`` must have lower-case names; ``principals`` (IAM mode) are role ARNs allowed to post
    (empty: any caller the Function URL's resource policy let through).
    """
    if mode == "hmac":
        signature = headers.get(HEADER_SIGNATURE, "")
        if not signature:
            raise Unauthorized(f"missing {HEADER_SIGNATURE} header")
        nonce, ts = _freshness(headers, now)
        if not _SIGNATURE.fullmatch(signature) or not secrets:  # (compare_digest refuses non-ASCII str)
            raise Forbidden("signature does not verify")
        raw_ts = headers[HEADER_TIMESTAMP]
        if not any(hmac.compare_digest(hmac_signature(s, raw_ts, nonce, body), signature) for s in secrets):
            raise Forbidden("signature does not verify")
        return Verified(nonce=nonce, timestamp=ts, principal="hmac")
    if mode == "iam":
        caller = _caller(request_context)
        if not caller:
            raise Unauthorized("request is not IAM-signed (no caller in requestContext.authorizer.iam)")
        nonce, ts = _freshness(headers, now)
        if principals and normalize_principal(caller) not in {normalize_principal(p) for p in principals}:
            raise Forbidden(f"caller {caller} is not an allowed agent principal")
        return Verified(nonce=nonce, timestamp=ts, principal=caller)
    raise ValueError(f"WEBHOOK_AUTH: expected 'iam' or 'hmac', got {mode!r}")
