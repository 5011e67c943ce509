"""CloudFormation custom resources backed by a Lambda: the request the function receives, and the response it must
PUT to the request's presigned S3 URL (CloudFormation waits for that response, up to an hour, not for the function's
return value).

``parse`` checks the request and names a missing field; ``respond`` sends SUCCESS or FAILED. CloudFormation shows a
FAILED response's ``Reason`` in the stack events (and ``cdk deploy`` prints it); the whole response must stay under
4,096 bytes, so a long reason is cut to fit, keeping its start. CloudFormation sends every property as a string
(``true``, ``300``): ``flag`` and ``whole`` read them back.

Must not touch: what the resource installs (``nodeflow.installer``).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_RESPONSE_BYTES", "Request", "flag", "parse", "respond", "whole"]

MAX_RESPONSE_BYTES = 4096
_REQUEST_TYPES = ("Create", "Update", "Delete")
_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Request:
    request_type: str  # Create | Update | Delete
    resource_type: str  # Custom::...
    logical_id: str
    stack_id: str
    request_id: str
    response_url: str
    physical_id: str | None  # absent on Create
    properties: Mapping[str, Any] = field(default_factory=dict)
    old_properties: Mapping[str, Any] = field(default_factory=dict)  # Update only


def parse(event: Mapping[str, Any]) -> Request:
    """The request in ``event`` (ValueError naming the first field missing or wrong)."""

    def text(key: str) -> str:
        value = event.get(key)
        if not isinstance(value, str) or not value:
            raise ValueError(f"custom resource request: {key} is missing")
        return value

    request_type = text("RequestType")
    if request_type not in _REQUEST_TYPES:
        raise ValueError(f"custom resource request: RequestType {request_type!r} is not one of {_REQUEST_TYPES}")
    properties = event.get("ResourceProperties") or {}
    old = event.get("OldResourceProperties") or {}
    if not isinstance(properties, Mapping) or not isinstance(old, Mapping):
        raise ValueError("custom resource request: ResourceProperties is not an object")
    physical = event.get("PhysicalResourceId")
    return Request(
        request_type=request_type,
        resource_type=text("ResourceType"),
        logical_id=text("LogicalResourceId"),
        stack_id=text("StackId"),
        request_id=text("RequestId"),
        response_url=text("ResponseURL"),
        physical_id=physical if isinstance(physical, str) and physical else None,
        properties=properties,
        old_properties=old,
    )


def flag(properties: Mapping[str, Any], key: str, default: bool = False) -> bool:
    raw = properties.get(key)
    if raw is None or raw == "":
        return default
    if isinstance(raw, bool):
        return raw
    if str(raw).lower() in ("true", "false"):
        return str(raw).lower() == "true"
    raise ValueError(f"property {key}: expected true or false, got {raw!r}")


def whole(properties: Mapping[str, Any], key: str, default: int) -> int:
    raw = properties.get(key)
    if raw is None or raw == "":
        return default
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw.strip())
    raise ValueError(f"property {key}: expected a whole number, got {raw!r}")


def _body(request: Request, status: str, reason: str, physical_id: str, data: Mapping[str, str]) -> bytes:
    def encoded(why: str) -> bytes:
        return json.dumps(
            {
                "Status": status,
                "Reason": why,
                "PhysicalResourceId": physical_id,
                "StackId": request.stack_id,
                "RequestId": request.request_id,
                "LogicalResourceId": request.logical_id,
                "Data": dict(data),
            }
        ).encode()

    body, kept = encoded(reason), len(reason)
    while len(body) > MAX_RESPONSE_BYTES and kept > 0:
        kept = max(0, kept - (len(body) - MAX_RESPONSE_BYTES) - 64)
        body = encoded(reason[:kept] + " ... (cut; the function's log has it all)")
    return body


def _put(url: str, body: bytes) -> None:
    # The presigned URL was signed without a content type: send none (urllib would add one for a body).
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": ""})
    with urllib.request.urlopen(request, timeout=20) as answer:
        answer.read()


def respond(
    request: Request,
    *,
    success: bool,
    reason: str,
    physical_id: str,
    data: Mapping[str, str] | None = None,
    put: Callable[[str, bytes], None] = _put,
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """Send the response (three attempts on network errors); returns the body sent."""
    body = _body(request, "SUCCESS" if success else "FAILED", reason, physical_id, data or {})
    for attempt in range(_ATTEMPTS):
        try:
            put(request.response_url, body)
            return body
        except OSError:
            if attempt == _ATTEMPTS - 1:
                raise
            sleep(2.0 * (attempt + 1))
    return body
