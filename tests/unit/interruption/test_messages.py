"""Parsing interruption-queue bodies: every AWS sample event, the agent's deletions, and bad bodies
answered with the reason named."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeflow.ingress.routing import AWS_ROUTES, ROUTES
from nodeflow.interruption.messages import (
    Deletion,
    Envelope,
    RebalanceRecommendation,
    Rejected,
    ScheduledChange,
    SpotInterruption,
    StateChange,
    instance_id_from_provider_id,
    is_instance_id,
    parse_message,
)
from tests.fixtures.aws_events import HEALTH, REBALANCE, SAMPLES, SPOT, STATE_CHANGE, load, variant

IID = "i-0a1b2c3d4e5f60718"


def _parse(event: Any) -> Any:
    return parse_message(json.dumps(event))


# --- the AWS samples, as published --------------------------------------------------------------


def test_spot_interruption_sample() -> None:
    msg = _parse(load(SPOT))
    assert isinstance(msg, SpotInterruption)
    assert msg.kind == "SpotInterruption"
    assert msg.instance_id == "i-1234567890abcdef0"
    assert msg.instance_ids == ("i-1234567890abcdef0",)
    assert msg.action == "action"  # the documentation's placeholder, kept as sent
    assert msg.envelope == Envelope(
        id="12345678-1234-1234-1234-123456789012",
        source="aws.ec2",
        detail_type="EC2 Spot Instance Interruption Warning",
        account="123456789012",
        region="us-east-2",
        time=None,  # "yyyy-mm-ddThh:mm:ssZ" is not a timestamp
        resources=("arn:aws:ec2:us-east-2a:instance/i-1234567890abcdef0",),
    )


@pytest.mark.parametrize("action", ["terminate", "stop", "hibernate"])
def test_spot_interruption_documented_actions(action: str) -> None:
    msg = _parse(variant(SPOT, instance_id=IID, detail={"instance-action": action}))
    assert isinstance(msg, SpotInterruption)
    assert (msg.instance_id, msg.action) == (IID, action)
    assert msg.envelope.resources == (f"arn:aws:ec2:us-east-2a:instance/{IID}",)


def test_rebalance_recommendation_sample() -> None:
    msg = _parse(load(REBALANCE))
    assert isinstance(msg, RebalanceRecommendation)
    assert msg.kind == "RebalanceRecommendation"
    assert msg.instance_ids == ("i-1234567890abcdef0",)
    assert msg.envelope.region == "us-east-2"


def test_state_change_sample_pending_is_ignored() -> None:
    msg = _parse(load(STATE_CHANGE))
    assert isinstance(msg, Rejected)
    assert msg.status == "ignored"
    assert "'pending'" in msg.reason
    assert msg.envelope_id == "7bf73129-1428-4cd3-a780-95db273d1602"


@pytest.mark.parametrize(
    ("state", "stopping"), [("stopping", True), ("stopped", True), ("shutting-down", False), ("terminated", False)]
)
def test_state_change_acted_on_states(state: str, stopping: bool) -> None:
    msg = _parse(variant(STATE_CHANGE, detail={"state": state}))
    assert isinstance(msg, StateChange)
    assert (msg.instance_id, msg.state, msg.stopping) == ("i-abcd1111", state, stopping)
    # the sample has no "version"; its time is a real timestamp
    assert msg.envelope.time == datetime(2021, 11, 11, 21, 29, 54, tzinfo=UTC)


def test_state_change_running_is_ignored() -> None:
    msg = _parse(variant(STATE_CHANGE, detail={"state": "running"}))
    assert isinstance(msg, Rejected)
    assert msg.status == "ignored"


def test_health_sample_issue_is_ignored() -> None:
    msg = _parse(load(HEALTH))
    assert isinstance(msg, Rejected)
    assert msg.status == "ignored"
    assert "'issue'" in msg.reason
    assert "scheduledChange" in msg.reason


def test_health_scheduled_change() -> None:
    event = variant(
        HEALTH,
        detail={
            "eventTypeCategory": "scheduledChange",
            "eventTypeCode": "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED",
        },
    )
    msg = _parse(event)
    assert isinstance(msg, ScheduledChange)
    assert msg.kind == "ScheduledChange"
    assert msg.instance_ids == ("i-abcd1111",)
    assert msg.event_type_code == "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED"
    assert msg.start_time == "Sat, 05 Jun 2016 15:10:09 GMT"
    assert msg.description == "A description of the event will be provided here"


def test_health_scheduled_change_keeps_instances_only_once() -> None:
    event = variant(HEALTH, detail={"eventTypeCategory": "scheduledChange"})
    entities = event["detail"]["affectedEntities"]
    entities += [{"entityValue": "vol-0123456789abcdef0"}, {"entityValue": IID}, {"entityValue": "i-abcd1111"}]
    msg = _parse(event)
    assert isinstance(msg, ScheduledChange)
    assert msg.instance_ids == ("i-abcd1111", IID)


def test_health_scheduled_change_without_an_instance_is_ignored() -> None:
    event = variant(HEALTH, detail={"eventTypeCategory": "scheduledChange"})
    event["detail"]["affectedEntities"] = [{"entityValue": "vol-0123456789abcdef0"}]
    msg = _parse(event)
    assert isinstance(msg, Rejected)
    assert msg.status == "ignored"
    assert "affectedEntities" in msg.reason


def test_health_event_for_another_service_is_ignored() -> None:
    event = variant(HEALTH, detail={"eventTypeCategory": "scheduledChange", "service": "RDS"})
    msg = _parse(event)
    assert isinstance(msg, Rejected)
    assert msg.status == "ignored"
    assert "'RDS'" in msg.reason


def test_every_sample_parses_to_a_message_or_an_ignore() -> None:
    for name in SAMPLES:
        msg = _parse(load(name))
        assert not (isinstance(msg, Rejected) and msg.status != "ignored"), (name, msg)


def test_variant_never_adds_a_field() -> None:
    with pytest.raises(KeyError, match="never add"):
        variant(REBALANCE, detail={"instance-action": "terminate"})


# --- the agent's deletions ---------------------------------------------------------------------


def _agent(detail_type: str, kind: str, **obj: Any) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": detail_type,
        "source": "nodeflow.agent",
        "account": "123456789012",
        "time": "2026-11-21T10:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {
            "cluster": "demo",
            "eventId": "3f0c9a1b2c3d4e5f60718293a4b5c6d7",
            "kind": kind,
            "reason": "watch",
            "observedAt": "2026-11-21T09:59:59Z",
            "agent": "nodeflow-agent-7d9c-abcde",
            "object": obj,
        },
    }


def test_node_claim_deleting() -> None:
    msg = _parse(
        _agent(
            "NodeClaim Deleting",
            "NodeClaimDeleting",
            name="default-abcde",
            uid="u-1",
            nodePool="default",
            providerID=f"aws:///us-east-1a/{IID}",
            nodeName="ip-10-0-1-2.ec2.internal",
        )
    )
    assert isinstance(msg, Deletion)
    assert msg.kind == "Deletion"
    assert (msg.object_kind, msg.name, msg.uid) == ("NodeClaim", "default-abcde", "u-1")
    assert msg.provider_id == f"aws:///us-east-1a/{IID}"
    assert msg.node_name == "ip-10-0-1-2.ec2.internal"
    assert (msg.cluster, msg.event_id) == ("demo", "3f0c9a1b2c3d4e5f60718293a4b5c6d7")
    assert msg.envelope.time == datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def test_node_deleting() -> None:
    msg = _parse(_agent("Node Deleting", "NodeDeleting", name="ip-10-0-1-2.ec2.internal", uid="u-2"))
    assert isinstance(msg, Deletion)
    assert (msg.object_kind, msg.name, msg.provider_id, msg.node_name) == (
        "Node",
        "ip-10-0-1-2.ec2.internal",
        None,
        None,
    )


def test_other_agent_events_are_unknown_here() -> None:
    msg = _parse(_agent("Pod Unschedulable", "PodUnschedulable", name="web-1", uid="u"))
    assert isinstance(msg, Rejected)
    assert msg.status == "unknown"
    assert "'Pod Unschedulable'" in msg.reason


def test_every_routed_detail_type_is_understood() -> None:
    """What the rules send to the interruption queue, the parser knows (a new rule needs a parser)."""
    pairs = [(s, dt) for r in AWS_ROUTES for s in r.pattern["source"] for dt in r.pattern["detail-type"]]
    pairs += [("nodeflow.agent", dt) for r in ROUTES if r.queue == "interruption" for dt in r.detail_types]
    assert len(pairs) == 6
    for source, detail_type in pairs:
        msg = _parse({"source": source, "detail-type": detail_type, "detail": {}})
        assert isinstance(msg, Rejected)
        # understood, then found wanting (a Health event without service and category: not one acted on)
        assert msg.status == ("ignored" if source == "aws.health" else "malformed"), (source, detail_type, msg)


# --- bad bodies --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (None, "malformed", "empty message body"),
        ("", "malformed", "empty message body"),
        ("{not json", "malformed", "not JSON"),
        ("[1, 2]", "malformed", "got an array"),
        ('"text"', "malformed", "got a string"),
        ("{}", "malformed", "envelope.source: expected a non-empty string, missing"),
        ('{"source": "aws.ec2"}', "malformed", "envelope.detail-type: expected a non-empty string, missing"),
        (
            '{"source": 7, "detail-type": "x"}',
            "malformed",
            "envelope.source: expected a non-empty string, got a number",
        ),
        ('{"source": "aws.s3", "detail-type": "Object Created", "detail": {}}', "unknown", "'aws.s3'"),
        (
            '{"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning"}',
            "malformed",
            "detail: expected an object, got null",
        ),
        (
            '{"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning", "detail": {}}',
            "malformed",
            "detail.instance-id: expected a non-empty string, missing",
        ),
        (
            '{"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning",'
            ' "detail": {"instance-id": "i-1234567890abcdef0"}}',
            "malformed",
            "detail.instance-action: expected a non-empty string, missing",
        ),
        (
            '{"source": "aws.ec2", "detail-type": "EC2 Instance Rebalance Recommendation",'
            ' "detail": {"instance-id": "vol-1234567890abcdef0"}}',
            "malformed",
            "detail.instance-id: expected an EC2 instance id",
        ),
        (
            '{"source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification",'
            ' "detail": {"instance-id": "i-abcd1111", "state": ""}}',
            "malformed",
            "detail.state: expected a non-empty string, empty",
        ),
        (
            '{"source": "aws.health", "detail-type": "AWS Health Event", "detail": {"service": "EC2"}}',
            "ignored",  # as Karpenter: no category is not the scheduledChange category
            "category ''",
        ),
        (
            '{"source": "aws.health", "detail-type": "AWS Health Event", "detail": {"service": 2}}',
            "malformed",
            "detail.service: expected a string, got a number",
        ),
        (
            '{"source": "aws.health", "detail-type": "AWS Health Event",'
            ' "detail": {"service": "EC2", "eventTypeCategory": "scheduledChange"}}',
            "ignored",  # no affected entities: no instance to act on
            "without an EC2 instance",
        ),
        (
            '{"source": "aws.health", "detail-type": "AWS Health Event",'
            ' "detail": {"service": "EC2", "eventTypeCategory": "scheduledChange", "affectedEntities": {}}}',
            "malformed",
            "detail.affectedEntities: expected an array, got an object",
        ),
        (
            '{"version": "1", "source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning",'
            ' "detail": {"instance-id": "i-1234567890abcdef0", "instance-action": "terminate"}}',
            "unknown",
            "envelope version '1'",
        ),
        (
            '{"source": "aws.health", "detail-type": "AWS Health Event",'
            ' "detail": {"service": "EC2", "eventTypeCategory": "scheduledChange", "affectedEntities": ["i-abcd1111"]}}',
            "malformed",
            "detail.affectedEntities[0]: expected an object, got a string",
        ),
        (
            '{"source": "nodeflow.agent", "detail-type": "NodeClaim Deleting", "detail": {"cluster": "demo"}}',
            "malformed",
            "detail.object: expected an object, got null",
        ),
        (
            '{"source": "nodeflow.agent", "detail-type": "Node Deleting", "detail": {"object": {"uid": "u"}}}',
            "malformed",
            "detail.object.name: expected a non-empty string, missing",
        ),
        (
            '{"source": "nodeflow.agent", "detail-type": "Node Deleting", "detail": {"object": {"name": "Bad_Name"}}}',
            "malformed",
            "not a Kubernetes object name",
        ),
    ],
)
def test_bad_bodies_name_what_is_wrong(body: str | None, status: str, reason: str) -> None:
    msg = parse_message(body)
    assert isinstance(msg, Rejected)
    assert msg.status == status
    assert reason in msg.reason, msg.reason
    assert str(msg).startswith(f"{status}: ")


def test_malformed_keeps_the_envelope_identity() -> None:
    event = load(SPOT)
    del event["detail"]["instance-id"]
    msg = _parse(event)
    assert isinstance(msg, Rejected)
    assert (msg.envelope_id, msg.source, msg.detail_type) == (
        "12345678-1234-1234-1234-123456789012",
        "aws.ec2",
        "EC2 Spot Instance Interruption Warning",
    )


def test_bytes_body() -> None:
    assert isinstance(parse_message(json.dumps(load(REBALANCE)).encode()), RebalanceRecommendation)


# --- helpers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider_id", "instance_id"),
    [
        (f"aws:///us-east-1a/{IID}", IID),
        ("aws:///us-east-1a/i-abcd1111", "i-abcd1111"),
        (f"aws:///us-east-1a/{IID}/", IID),
        ("aws:///us-east-1a/", None),
        (f"gce://project/zone/{IID}", None),
        ("", None),
        (None, None),
    ],
)
def test_instance_id_from_provider_id(provider_id: str | None, instance_id: str | None) -> None:
    assert instance_id_from_provider_id(provider_id) == instance_id


def test_is_instance_id() -> None:
    assert is_instance_id(IID)
    assert is_instance_id("i-abcd1111")
    assert not is_instance_id("i-abc")
    assert not is_instance_id("I-ABCD1111")
    assert not is_instance_id(12345678)
