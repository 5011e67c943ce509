"""The interruption path for real: AWS's sample events put on the moto default bus, Karpenter's rules
(``AWS_ROUTES``) taking what matches to the interruption queue, the interruption function invoked with
the queue's messages (partial batch responses), NodeClaims the provisioner launched, the terminate
workflow (a stand-in) started through Step Functions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeflow.kube.client import NODE_CLAIMS, NODES, KubeClient
from sandbox.controlplane.proxy import Fault
from tests.fixtures.aws_events import HEALTH, REBALANCE, SPOT, STATE_CHANGE, load, variant
from tests.functional.ingress.conftest import event as agent_event
from tests.functional.ingress.conftest import post
from tests.functional.interruption.conftest import Launched, Sandbox

SCHEDULED = {"eventTypeCategory": "scheduledChange", "eventTypeCode": "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED"}


def _drain(box: Sandbox) -> dict[str, Any]:
    return box.local.drain_interruption_queue()


def _warnings(box: Sandbox, reason: str, claim: Launched) -> dict[str, dict[str, Any]]:
    """The ``reason`` Events, by involved kind, checked to be Warnings about ``claim`` and its Node."""
    out = {}
    for e in box.events(reason):
        ref = e["involvedObject"]
        assert e["type"] == "Warning"
        assert ref["name"] == (claim.name if ref["kind"] == "NodeClaim" else claim.node_name)
        assert claim.instance_id in e["message"]
        out[ref["kind"]] = e
    return out


# --- the samples as published: nothing of ours --------------------------------------------------


def test_published_samples_route_as_karpenters_rules_say_and_touch_nothing_of_ours(sandbox: Sandbox) -> None:
    for name in (SPOT, REBALANCE, STATE_CHANGE, HEALTH):
        sandbox.local.send_aws_event(load(name))
    # the spot warning and the rebalance recommendation match their rules; a "pending" state change and a
    # Health "issue" do not
    assert sandbox.queued() == 2
    out = _drain(sandbox)
    assert out["batchItemFailures"] == []
    kinds = [m["kind"] for m in out["result"]["messages"]]
    assert sorted(kinds) == ["RebalanceRecommendation", "SpotInterruption"]
    for m in out["result"]["messages"]:
        assert m["ignored"] == ["i-1234567890abcdef0: no NodeClaim of this cluster has it"]
    assert sandbox.queued(timeout=0) == 0  # handled: deleted
    assert sandbox.terminations() == []
    assert sandbox.unavailable() == frozenset()


# --- each kind, for a NodeClaim the provisioner launched ----------------------------------------


def test_spot_interruption(sandbox: Sandbox) -> None:
    claim = sandbox.launch()
    assert claim.capacity_type == "spot"
    sandbox.local.send_aws_event(variant(SPOT, instance_id=claim.instance_id, detail={"instance-action": "terminate"}))
    assert sandbox.queued() == 1
    out = _drain(sandbox)
    assert out["batchItemFailures"] == []
    (handled,) = out["result"]["messages"]
    assert handled["terminationsStarted"] == [claim.name]
    assert [(t["name"], t["input"]) for t in sandbox.terminations()] == [
        (claim.name, {"nodeClaim": claim.name, "reason": "SpotInterrupted"})
    ]
    assert (claim.instance_type, claim.zone, "spot") in sandbox.unavailable()
    events = _warnings(sandbox, "SpotInterrupted", claim)
    assert set(events) == {"NodeClaim", "Node"}
    assert events["NodeClaim"]["message"].endswith("instance-action terminate")
    assert events["NodeClaim"]["involvedObject"]["uid"] == claim.uid
    assert sandbox.queued(timeout=0) == 0


def test_rebalance_recommendation_is_an_event_only(sandbox: Sandbox) -> None:
    claim = sandbox.launch()
    sandbox.local.send_aws_event(variant(REBALANCE, instance_id=claim.instance_id))
    out = _drain(sandbox)
    assert out["batchItemFailures"] == []
    assert set(_warnings(sandbox, "RebalanceRecommendation", claim)) == {"NodeClaim", "Node"}
    assert sandbox.terminations() == []
    assert sandbox.unavailable() == frozenset()
    assert sandbox.queued(timeout=0) == 0


@pytest.mark.parametrize(("state", "reason"), [("stopping", "InstanceStopping"), ("terminated", "InstanceTerminating")])
def test_state_change(sandbox: Sandbox, state: str, reason: str) -> None:
    claim = sandbox.launch()
    sandbox.local.send_aws_event(variant(STATE_CHANGE, instance_id=claim.instance_id, detail={"state": state}))
    assert _drain(sandbox)["batchItemFailures"] == []
    assert [t["input"] for t in sandbox.terminations()] == [{"nodeClaim": claim.name, "reason": reason}]
    assert f"is {state}" in _warnings(sandbox, reason, claim)["Node"]["message"]
    assert sandbox.unavailable() == frozenset()


def test_scheduled_change(sandbox: Sandbox) -> None:
    claim = sandbox.launch()
    sandbox.local.send_aws_event(variant(HEALTH, instance_id=claim.instance_id, detail=SCHEDULED))
    assert sandbox.queued() == 1  # the scheduled-change rule matches (the sample's "issue" did not)
    assert _drain(sandbox)["batchItemFailures"] == []
    assert [t["input"] for t in sandbox.terminations()] == [{"nodeClaim": claim.name, "reason": "InstanceUnhealthy"}]
    message = _warnings(sandbox, "InstanceUnhealthy", claim)["NodeClaim"]["message"]
    assert "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED" in message


# --- delivery: duplicates, bad messages, failures ------------------------------------------------


def test_the_same_interruption_twice_starts_one_execution(sandbox: Sandbox) -> None:
    claim = sandbox.launch()
    warning = variant(SPOT, instance_id=claim.instance_id, detail={"instance-action": "terminate"})
    sandbox.local.send_aws_event(warning)
    sandbox.local.send_aws_event(warning)  # EventBridge delivers at least once
    first = _drain(sandbox)
    sandbox.local.send_aws_event(warning)  # and again, later
    second = _drain(sandbox)
    assert first["batchItemFailures"] == second["batchItemFailures"] == []
    started = [m.get("terminationsStarted", []) for m in first["result"]["messages"] + second["result"]["messages"]]
    assert sorted(started) == [[], [], [claim.name]]
    assert [t["name"] for t in sandbox.terminations()] == [claim.name]
    events = _warnings(sandbox, "SpotInterrupted", claim)
    assert len(sandbox.events("SpotInterrupted")) == 2  # one Event per object, counted
    assert events["NodeClaim"]["count"] == 3
    assert sandbox.queued(timeout=0) == 0


def test_malformed_and_unknown_messages_are_dropped_without_failing_the_batch(sandbox: Sandbox) -> None:
    claim = sandbox.launch()
    # through the bus: the rule matches on source and detail-type, the detail is unusable
    sandbox.local.send_aws_event(
        {
            "source": "aws.ec2",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "detail": {"instance-action": "x"},
        }
    )
    sandbox.send_raw("{not json")
    sandbox.send_raw(json.dumps({"source": "aws.s3", "detail-type": "Object Created", "detail": {}}))
    sandbox.local.send_aws_event(variant(SPOT, instance_id=claim.instance_id, detail={"instance-action": "stop"}))
    assert sandbox.queued() == 4
    out = _drain(sandbox)
    assert len(out["records"]) == 4
    assert out["batchItemFailures"] == []
    assert [m["kind"] for m in out["result"]["messages"]] == ["SpotInterruption"]
    assert [t["input"]["reason"] for t in sandbox.terminations()] == ["SpotInterrupted"]
    assert sandbox.queued(timeout=0) == 0
    assert sandbox.dead_letters() == 0


def test_a_kubernetes_failure_returns_the_message_for_redelivery(sandbox: Sandbox) -> None:
    claim = sandbox.launch()
    failing = {"on": True}

    def unavailable(method: str, path: str, query: dict[str, str]) -> None:
        if failing["on"] and method == "GET" and path == "/apis/karpenter.sh/v1/nodeclaims":
            raise Fault(503, "ServiceUnavailable", "etcdserver: leader changed")

    sandbox.kube_server.before_request = unavailable
    sandbox.send_raw("garbage")  # dropped, whatever else fails
    sandbox.local.send_aws_event(variant(SPOT, instance_id=claim.instance_id, detail={"instance-action": "terminate"}))
    out = _drain(sandbox)
    spot_record = next(r for r in out["records"] if r["body"] != "garbage")
    assert out["batchItemFailures"] == [{"itemIdentifier": spot_record["messageId"]}]
    (failed,) = out["result"]["messages"]
    assert (
        failed["error"] == "listing NodeClaims: Unavailable: etcdserver: leader changed (HTTP 503, ServiceUnavailable)"
    )
    assert sandbox.terminations() == []
    assert sandbox.queued(timeout=0) == 1  # the spot warning stays; the garbage is gone

    failing["on"] = False  # the API server is back: the redelivered message is handled
    again = _drain(sandbox)
    assert [r["messageId"] for r in again["records"]] == [spot_record["messageId"]]
    assert again["batchItemFailures"] == []
    assert [t["input"] for t in sandbox.terminations()] == [{"nodeClaim": claim.name, "reason": "SpotInterrupted"}]
    assert sandbox.queued(timeout=0) == 0


def test_a_message_that_keeps_failing_ends_in_the_dead_letter_queue(sandbox: Sandbox) -> None:
    def unavailable(method: str, path: str, query: dict[str, str]) -> None:
        if path == "/apis/karpenter.sh/v1/nodeclaims":
            raise Fault(503, "ServiceUnavailable", "down")

    sandbox.kube_server.before_request = unavailable
    sandbox.local.send_aws_event(load(SPOT))
    for _ in range(5):  # maxReceiveCount
        assert len(_drain(sandbox)["batchItemFailures"]) == 1
    assert _drain(sandbox)["records"] == []  # the sixth receive moves it to the DLQ instead
    assert sandbox.dead_letters() == 1


# --- deletions (kubectl delete), through the agent's webhook ------------------------------------


def _kubectl_delete(box: Sandbox, resource: Any, name: str) -> None:
    KubeClient(box.kube_server.api_client()).delete(resource, name)


def _agent_sends(box: Sandbox, kind: str, name: str, **obj: Any) -> None:
    url = box.local.function_url.url if box.local.function_url else box.local.start_webhook().url
    reply = post(url, {"cluster": "demo", "events": [agent_event(kind, name=name, **obj)]})
    assert reply.status == 202, reply


def test_kubectl_delete_node_claim_starts_termination(sandbox: Sandbox) -> None:
    claim = sandbox.launch()
    _kubectl_delete(sandbox, NODE_CLAIMS, claim.name)
    stored = sandbox.kube_server.get("karpenter.sh/v1", "NodeClaim", claim.name)
    assert stored["metadata"]["deletionTimestamp"]  # held by karpenter.sh/termination
    _agent_sends(
        sandbox,
        "NodeClaimDeleting",
        claim.name,
        nodePool="default",
        providerID=f"aws:///{claim.zone}/{claim.instance_id}",
        nodeName=claim.node_name,
    )
    assert sandbox.queued() == 1  # the "deletions" route
    out = _drain(sandbox)
    assert out["batchItemFailures"] == []
    assert [m["kind"] for m in out["result"]["messages"]] == ["Deletion"]
    assert [t["input"] for t in sandbox.terminations()] == [{"nodeClaim": claim.name, "reason": "Deleted"}]


def test_kubectl_delete_node_starts_termination_of_its_node_claim(sandbox: Sandbox) -> None:
    claim = sandbox.launch()
    _kubectl_delete(sandbox, NODES, claim.node_name)
    _agent_sends(sandbox, "NodeDeleting", claim.node_name, nodePool="default")  # no providerID: looked up
    assert _drain(sandbox)["batchItemFailures"] == []
    assert [t["input"] for t in sandbox.terminations()] == [{"nodeClaim": claim.name, "reason": "Deleted"}]


def test_a_node_claim_without_deletion_timestamp_is_left_alone(sandbox: Sandbox) -> None:
    claim = sandbox.launch()
    _agent_sends(sandbox, "NodeClaimDeleting", claim.name, nodePool="default")  # stale or forged
    out = _drain(sandbox)
    assert out["batchItemFailures"] == []
    assert out["result"]["messages"][0]["ignored"] == [f"NodeClaim {claim.name}: not being deleted"]
    assert sandbox.terminations() == []
    assert sandbox.queued(timeout=0) == 0
