"""CloudFormation custom resource requests and responses (nodeflow.aws.custom_resource): what is checked, and a
response that stays under CloudFormation's 4,096 bytes whatever the reason's length."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeflow.aws.custom_resource import MAX_RESPONSE_BYTES, flag, parse, respond, whole

EVENT: dict[str, Any] = {
    "RequestType": "Create",
    "ResourceType": "Custom::NodeflowInstall",
    "LogicalResourceId": "InCluster",
    "StackId": "arn:aws:cloudformation:eu-west-1:123456789012:stack/Nodeflow-shop/1",
    "RequestId": "r-1",
    "ResponseURL": "https://bucket.s3.amazonaws.com/presigned",
    "ResourceProperties": {"ServiceToken": "arn:x", "PodIdentity": "true", "AgentReadySeconds": "300"},
}


def test_a_request_is_parsed_and_a_missing_field_named() -> None:
    request = parse(EVENT)
    assert (request.request_type, request.physical_id, request.old_properties) == ("Create", None, {})
    assert flag(request.properties, "PodIdentity") is True
    assert whole(request.properties, "AgentReadySeconds", 0) == 300
    assert whole(request.properties, "Missing", 7) == 7
    with pytest.raises(ValueError, match=r"^custom resource request: ResponseURL is missing$"):
        parse({k: v for k, v in EVENT.items() if k != "ResponseURL"})
    with pytest.raises(ValueError, match="RequestType 'Replace' is not one of"):
        parse({**EVENT, "RequestType": "Replace"})
    with pytest.raises(ValueError, match=r"^property PodIdentity: expected true or false, got 'yes'$"):
        flag({"PodIdentity": "yes"}, "PodIdentity")
    with pytest.raises(ValueError, match=r"^property AgentReadySeconds: expected a whole number, got '-1'$"):
        whole({"AgentReadySeconds": "-1"}, "AgentReadySeconds", 0)


@pytest.mark.parametrize("reason", ["short", "x" * 10_000, 'quote" and \\ and é ' * 800, "line\n" * 3000])
def test_the_response_fits_cloudformations_limit_and_keeps_the_reasons_start(reason: str) -> None:
    sent: list[tuple[str, bytes]] = []
    body = respond(
        parse(EVENT), success=False, reason=reason, physical_id="p", put=lambda url, b: sent.append((url, b))
    )
    assert sent == [(EVENT["ResponseURL"], body)]
    assert len(body) <= MAX_RESPONSE_BYTES
    doc = json.loads(body)
    assert (doc["Status"], doc["PhysicalResourceId"], doc["RequestId"]) == ("FAILED", "p", "r-1")
    if reason == "short":
        assert doc["Reason"] == "short"
    else:
        assert doc["Reason"].endswith(" ... (cut; the function's log has it all)")
        assert reason.startswith(doc["Reason"].removesuffix(" ... (cut; the function's log has it all)")[:100])


def test_a_failed_put_is_tried_three_times() -> None:
    calls: list[str] = []

    def put(url: str, body: bytes) -> None:
        calls.append(url)
        if len(calls) < 3:
            raise OSError("connection reset")

    respond(parse(EVENT), success=True, reason="ok", physical_id="p", put=put, sleep=lambda s: None)
    assert len(calls) == 3
    with pytest.raises(OSError, match="reset"):
        respond(parse(EVENT), success=True, reason="ok", physical_id="p", put=put_failing, sleep=lambda s: None)


def put_failing(url: str, body: bytes) -> None:
    raise OSError("connection reset")
