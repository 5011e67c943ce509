"""Typed Kubernetes API errors, mapped from the client's exceptions in ONE place, and safe retries.

Exception class names are part of the contract with the state machines' Retry/Catch:

- ``NotFound`` (404), ``Conflict`` (409; ``AlreadyExists`` is the create flavour),
  ``Gone`` (410, expired list/watch resourceVersion), ``Invalid`` (400/422),
  ``Forbidden`` (401/403),
- ``TooManyRequests`` (429): throttled, or an eviction a PodDisruptionBudget blocks for
  now ("not yet", not a failure),
- ``Unavailable``: 5xx, or no answer at all (connection refused/reset, timeouts, TLS).

``retry_read`` retries safe reads on ``Unavailable``/``TooManyRequests``;
``retry_conflict`` re-runs a read-modify-write (which must refetch) on ``Conflict``.
Both are bounded, back off exponentially with jitter, and take an injectable ``sleep``.

Must not touch: what a step does about an error (the steps and the state machines' Retry/Catch decide).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "AlreadyExists",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "NotFound",
    "TooManyRequests",
    "Unavailable",
    "from_exception",
    "from_response",
    "retry",
    "retry_conflict",
    "retry_read",
]

T = TypeVar("T")


class KubeError(Exception):
    """An error answered by (or on the way to) the Kubernetes API server."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.details: Mapping[str, Any] = details or {}
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status}, {self.reason})" if self.status else self.message


class NotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class Conflict(KubeError):
    """409: stale resourceVersion on write, or the object already exists."""


class AlreadyExists(Conflict):
    """409 AlreadyExists: a create found an object of that name."""


class Gone(KubeError):
    """410: the resourceVersion or continue token is too old."""


class Invalid(KubeError):
    """400/422: the request or the object was rejected as invalid."""


class Forbidden(KubeError):
    """401/403: not authenticated or not authorized."""


class TooManyRequests(KubeError):
    """429: throttled, or an eviction blocked by a PodDisruptionBudget (retry later)."""


class Unavailable(KubeError):
    """5xx, or the API server could not be reached (connection, timeout, TLS)."""


_BY_STATUS: dict[int, type[KubeError]] = {
    400: Invalid,
    401: Forbidden,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def _retry_after(headers: Mapping[str, Any] | None, details: Mapping[str, Any]) -> float | None:
    value = None
    if headers is not None:
        try:
            value = headers.get("Retry-After") or headers.get("retry-after")
        except AttributeError:  # pragma: no cover - odd header containers
            value = None
    if value is None:
        value = details.get("retryAfterSeconds")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def from_response(status: int, body: bytes | str | None, headers: Mapping[str, Any] | None = None) -> KubeError:
    """The typed error for a non-2xx answer (``body`` is a ``Status`` object, or anything)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    doc: Any = None
    if text:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        message = str(doc.get("message") or text)
        reason = str(doc.get("reason") or "")
        raw_details = doc.get("details")
        details: Mapping[str, Any] = raw_details if isinstance(raw_details, dict) else {}
    else:
        message = text.strip() or f"HTTP {status}"
        reason, details = "", {}
    if status == 409 and reason == "AlreadyExists":
        cls: type[KubeError] = AlreadyExists
    elif status >= 500 or status == 0:
        cls = Unavailable
    else:
        cls = _BY_STATUS.get(status, KubeError)
    return cls(message, status=status, reason=reason, details=details, retry_after=_retry_after(headers, details))


def from_exception(exc: BaseException) -> KubeError:
    """Map a ``kubernetes.client.ApiException`` or a urllib3/socket error to a typed error."""
    if isinstance(exc, KubeError):
        return exc
    status = getattr(exc, "status", None)
    if isinstance(status, int) and hasattr(exc, "body"):  # kubernetes.client.ApiException
        if status == 0:  # the client's wrapper for TLS errors and unpreparable requests
            return Unavailable(str(getattr(exc, "reason", "") or exc))
        return from_response(status, getattr(exc, "body", None), getattr(exc, "headers", None))
    # urllib3.exceptions.HTTPError (MaxRetryError, ProtocolError, timeouts, SSL) and OSError.
    return Unavailable(f"{type(exc).__name__}: {exc}")


def _is_transport_error(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith("urllib3") or isinstance(exc, OSError | ConnectionError | TimeoutError)


def retry(
    fn: Callable[[], T],
    *,
    on: tuple[type[KubeError], ...],
    attempts: int = 5,
    base_delay: float = 0.05,
    max_delay: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[], float] = random.random,
) -> T:
    """Call ``fn`` until it does not raise one of ``on``; at most ``attempts`` calls.

    Waits ``min(max_delay, base_delay * 2**n)`` scaled by 0.5-1.0 jitter between calls, or
    the server's Retry-After when it gave one (capped at ``max_delay``). The last error is
    re-raised unchanged.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    for attempt in range(attempts):
        try:
            return fn()
        except on as exc:
            if attempt == attempts - 1:
                raise
            delay = min(max_delay, base_delay * (2**attempt)) * (0.5 + jitter() / 2)
            if exc.retry_after is not None:
                delay = min(max_delay, max(delay, exc.retry_after))
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def retry_read(
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    sleep: Callable[[float], None] = time.sleep,
    base_delay: float = 0.05,
    max_delay: float = 2.0,
) -> T:
    """Retry a safe read (GET/LIST) on ``Unavailable`` and ``TooManyRequests``."""
    return retry(
        fn,
        on=(Unavailable, TooManyRequests),
        attempts=attempts,
        sleep=sleep,
        base_delay=base_delay,
        max_delay=max_delay,
    )


def retry_conflict(
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    sleep: Callable[[float], None] = time.sleep,
    base_delay: float = 0.01,
    max_delay: float = 0.5,
) -> T:
    """Re-run a read-modify-write on ``Conflict`` (``fn`` must refetch the object each call).

    ``AlreadyExists`` is not retried: a create that found its object will find it again.
    """

    def once() -> T:
        try:
            return fn()
        except AlreadyExists as exc:
            raise _Final(exc) from exc

    try:
        return retry(once, on=(Conflict,), attempts=attempts, sleep=sleep, base_delay=base_delay, max_delay=max_delay)
    except _Final as wrapped:
        raise wrapped.error from None


class _Final(Exception):
    def __init__(self, error: KubeError) -> None:
        super().__init__(str(error))
        self.error = error
