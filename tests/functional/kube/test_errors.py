"""Error mapping (one place) and the bounded retry helpers."""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from nodeflow.kube import errors as ke


def _api_exception(
    status: int, reason: str, message: str = "boom", headers: dict[str, str] | None = None
) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "reason": reason, "message": message, "code": status})
    exc.headers = headers  # type: ignore[assignment]
    return exc


@pytest.mark.parametrize(
    ("status", "reason", "cls"),
    [
        (404, "NotFound", ke.NotFound),
        (409, "Conflict", ke.Conflict),
        (409, "AlreadyExists", ke.AlreadyExists),
        (410, "Expired", ke.Gone),
        (422, "Invalid", ke.Invalid),
        (400, "BadRequest", ke.Invalid),
        (403, "Forbidden", ke.Forbidden),
        (429, "TooManyRequests", ke.TooManyRequests),
        (500, "InternalError", ke.Unavailable),
        (503, "ServiceUnavailable", ke.Unavailable),
    ],
)
def test_api_exception_maps_to_typed_error(status: int, reason: str, cls: type[ke.KubeError]) -> None:
    err = ke.from_exception(_api_exception(status, reason, "the message"))
    assert type(err) is cls
    assert err.status == status
    assert err.reason == reason
    assert err.message == "the message"


def test_already_exists_is_a_conflict_and_retry_after_is_read() -> None:
    assert issubclass(ke.AlreadyExists, ke.Conflict)
    err = ke.from_exception(_api_exception(429, "TooManyRequests", headers={"Retry-After": "3"}))
    assert err.retry_after == 3.0


def test_transport_errors_are_unavailable() -> None:
    err = ke.from_exception(urllib3.exceptions.MaxRetryError(None, "/api", reason=ConnectionRefusedError("refused")))  # type: ignore[arg-type]
    assert isinstance(err, ke.Unavailable)
    assert isinstance(ke.from_exception(ConnectionResetError("reset")), ke.Unavailable)
    assert isinstance(ke.from_exception(ApiException(status=0, reason="SSLError")), ke.Unavailable)


def test_non_status_bodies_keep_their_text() -> None:
    err = ke.from_response(502, b"<html>bad gateway</html>")
    assert isinstance(err, ke.Unavailable)
    assert "bad gateway" in err.message


def test_retry_read_is_bounded_and_backs_off() -> None:
    sleeps: list[float] = []
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        raise ke.Unavailable("down", status=503)

    with pytest.raises(ke.Unavailable):
        ke.retry_read(flaky, attempts=4, sleep=sleeps.append)
    assert calls == 4
    assert len(sleeps) == 3
    assert sleeps[0] <= sleeps[1] <= sleeps[2] * 2  # grows (with jitter)


def test_retry_read_succeeds_after_transient_errors_and_does_not_retry_not_found() -> None:
    answers: list[object] = [ke.Unavailable("x"), ke.TooManyRequests("slow down", retry_after=0.2), "ok"]

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    sleeps: list[float] = []
    assert ke.retry_read(call, sleep=sleeps.append) == "ok"
    assert sleeps[1] >= 0.2  # Retry-After honoured

    def missing() -> None:
        raise ke.NotFound("gone", status=404)

    with pytest.raises(ke.NotFound):
        ke.retry_read(missing, sleep=sleeps.append)


def test_retry_conflict_reruns_but_never_on_already_exists() -> None:
    calls = 0

    def rmw() -> int:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ke.Conflict("stale", status=409)
        return calls

    assert ke.retry_conflict(rmw, sleep=lambda _: None) == 3

    creates = 0

    def create() -> None:
        nonlocal creates
        creates += 1
        raise ke.AlreadyExists("exists", status=409, reason="AlreadyExists")

    with pytest.raises(ke.AlreadyExists):
        ke.retry_conflict(create, sleep=lambda _: None)
    assert creates == 1
