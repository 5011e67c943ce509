"""Interruption handling against fakes: which NodeClaim, which event, which offering, which reason."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeflow.aws.errors import AwsUnavailable, Offering
from nodeflow.interruption.messages import Message, parse_message
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import NODE_CLAIMS, NODES, Resource
from nodeflow.kube.events import ObjectRef
from nodeflow.lifecycle.interruption_handling import InterruptionDeps, handle_batch, notice, termination_reason
from tests.fixtures.aws_events import HEALTH, REBALANCE, SPOT, STATE_CHANGE, load, variant

NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
IID = "i-0a1b2c3d4e5f60718"
OTHER = "i-0ffffffffffffffff"
FINALIZER = "karpenter.sh/termination"


def claim(
    name: str = "default-abcde",
    iid: str | None = IID,
    node: str | None = "ip-10-0-1-2.ec2.internal",
    *,
    deleting: bool = False,
    finalizers: tuple[str, ...] = (FINALIZER,),
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "labels": labels
        if labels is not None
        else {
            "node.kubernetes.io/instance-type": "m7i.large",
            "topology.kubernetes.io/zone": "us-east-1b",
            "karpenter.sh/capacity-type": "spot",
        },
        "finalizers": list(finalizers),
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-21T09:59:00Z"
    status: dict[str, Any] = {}
    if iid:
        status["providerID"] = f"aws:///us-east-1b/{iid}"
    if node:
        status["nodeName"] = node
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta, "status": status}


def node(name: str, iid: str | None, *, deleting: bool = True, finalizers: tuple[str, ...] = (FINALIZER,)) -> Any:
    meta: dict[str, Any] = {"name": name, "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-21T09:59:00Z"
    return {"metadata": meta, "spec": {"providerID": f"aws:///us-east-1b/{iid}"} if iid else {}}


@dataclass
class FakeKube:
    claims: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_list: int = 0  # LISTs that answer 503
    calls: list[str] = field(default_factory=list)

    def list_items(self, resource: Resource, **_: Any) -> list[dict[str, Any]]:
        assert resource == NODE_CLAIMS
        self.calls.append("list")
        if self.fail_list:
            self.fail_list -= 1
            raise kerr.Unavailable("etcdserver: request timed out", status=503)
        return self.claims

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        assert resource == NODES
        self.calls.append(f"get {name}")
        if name not in self.nodes:
            raise kerr.NotFound(f"nodes {name!r} not found", status=404)
        return self.nodes[name]


@dataclass
class FakeRecorder:
    events: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    fail: bool = False

    def record(self, ref: ObjectRef, event_type: str, reason: str, message: str) -> dict[str, Any]:
        if self.fail:
            raise kerr.Unavailable("events unavailable", status=503)
        self.events.append((ref.kind, ref.name, event_type, reason, message))
        return {}


@dataclass
class World:
    kube: FakeKube = field(default_factory=FakeKube)
    recorder: FakeRecorder = field(default_factory=FakeRecorder)
    marked: list[tuple[Offering, str]] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    started: list[tuple[str, str]] = field(default_factory=list)
    start_error: Exception | None = None

    def deps(self) -> InterruptionDeps:
        def mark(offerings: Any, now: datetime, reason: str = "") -> int:
            assert now == NOW
            full = [o for o in offerings if o.instance_type and o.zone and o.capacity_type]
            self.marked += [(o, reason) for o in full]
            return len(full)

        def start(name: str, reason: str) -> bool:
            if self.start_error is not None:
                raise self.start_error
            if name in self.running:
                return False
            self.running.add(name)
            self.started.append((name, reason))
            return True

        return InterruptionDeps(
            kube=self.kube,  # type: ignore[arg-type]
            recorder=self.recorder,  # type: ignore[arg-type]
            mark_unavailable=mark,
            start_termination=start,
            now=lambda: NOW,
            sleep=lambda _s: None,
        )


def msg(event: dict[str, Any]) -> Message:
    parsed = parse_message(json.dumps(event))
    assert not hasattr(parsed, "status"), parsed
    return parsed  # type: ignore[return-value]


def spot(iid: str = IID, action: str = "terminate") -> Message:
    return msg(variant(SPOT, instance_id=iid, detail={"instance-action": action}))


def deleting(kind: str, name: str, **obj: Any) -> Message:
    detail_type = {"NodeClaim": "NodeClaim Deleting", "Node": "Node Deleting"}[kind]
    return msg(
        {
            "id": "e-1",
            "source": "nodeflow.agent",
            "detail-type": detail_type,
            "detail": {"cluster": "demo", "object": {"name": name, "uid": "u", **obj}},
        }
    )


def test_spot_interruption_marks_records_and_terminates() -> None:
    w = World(FakeKube([claim()]))
    result = handle_batch(w.deps(), [("m-1", spot())])
    assert result.failed == []
    (o,) = result.outcomes
    assert (o.kind, o.node_claims, o.started, o.offerings_marked, o.events) == (
        "SpotInterruption",
        ["default-abcde"],
        ["default-abcde"],
        1,
        2,
    )
    assert w.marked == [(Offering("m7i.large", "us-east-1b", "spot"), "SpotInterruption")]
    assert w.started == [("default-abcde", "SpotInterrupted")]
    text = f"Spot interruption warning for instance {IID}: instance-action terminate"
    assert w.recorder.events == [
        ("NodeClaim", "default-abcde", "Warning", "SpotInterrupted", text),
        ("Node", "ip-10-0-1-2.ec2.internal", "Warning", "SpotInterrupted", text),
    ]
    assert w.kube.calls == ["list"]


def test_one_list_per_batch() -> None:
    w = World(FakeKube([claim(), claim("default-fghij", OTHER, "ip-10-0-9-9.ec2.internal")]))
    result = handle_batch(w.deps(), [("m-1", spot()), ("m-2", spot(OTHER)), ("m-3", msg(variant(REBALANCE)))])
    assert result.failed == []
    assert w.kube.calls == ["list"]
    assert [s[0] for s in w.started] == ["default-abcde", "default-fghij"]


def test_spot_interruption_without_labels_marks_nothing() -> None:
    w = World(FakeKube([claim(labels={})]))
    (o,) = handle_batch(w.deps(), [("m-1", spot())]).outcomes
    assert (o.offerings_marked, o.started) == (0, ["default-abcde"])
    assert w.marked == []


def test_rebalance_is_an_event_only() -> None:
    w = World(FakeKube([claim()]))
    (o,) = handle_batch(w.deps(), [("m-1", msg(variant(REBALANCE, instance_id=IID)))]).outcomes
    assert (o.started, o.offerings_marked, o.events, o.error) == ([], 0, 2, None)
    assert w.started == []
    assert {e[3] for e in w.recorder.events} == {"RebalanceRecommendation"}


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("stopping", "InstanceStopping"),
        ("stopped", "InstanceStopping"),
        ("shutting-down", "InstanceTerminating"),
        ("terminated", "InstanceTerminating"),
    ],
)
def test_state_change(state: str, reason: str) -> None:
    w = World(FakeKube([claim()]))
    handle_batch(w.deps(), [("m-1", msg(variant(STATE_CHANGE, instance_id=IID, detail={"state": state})))])
    assert w.started == [("default-abcde", reason)]
    assert w.recorder.events[0][3:] == (reason, f"Instance {IID} is {state} (EC2 instance state-change notification)")
    assert w.marked == []


def test_scheduled_change_terminates_every_owned_instance() -> None:
    w = World(FakeKube([claim(), claim("default-fghij", OTHER, None)]))
    event = variant(
        HEALTH,
        instance_id=IID,
        detail={
            "eventTypeCategory": "scheduledChange",
            "eventTypeCode": "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED",
        },
    )
    event["detail"]["affectedEntities"] += [{"entityValue": OTHER}, {"entityValue": "i-0123456789abcdef0"}]
    (o,) = handle_batch(w.deps(), [("m-1", msg(event))]).outcomes
    assert w.started == [("default-abcde", "InstanceUnhealthy"), ("default-fghij", "InstanceUnhealthy")]
    assert o.ignored == ["i-0123456789abcdef0: no NodeClaim of this cluster has it"]
    assert o.events == 3  # both NodeClaims, and the Node of the first (the second has none yet)
    assert w.recorder.events[0][4] == (
        f"AWS Health scheduled AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED for instance {IID} starting "
        "Sat, 05 Jun 2016 15:10:09 GMT: A description of the event will be provided here"
    )


def test_unowned_instance_is_ignored() -> None:
    w = World(FakeKube([claim()]))
    (o,) = handle_batch(w.deps(), [("m-1", msg(load(SPOT)))]).outcomes
    assert (o.error, o.node_claims, o.ignored) == (
        None,
        [],
        ["i-1234567890abcdef0: no NodeClaim of this cluster has it"],
    )
    assert (w.started, w.marked, w.recorder.events) == ([], [], [])


def test_claim_without_provider_id_is_not_matched() -> None:
    w = World(FakeKube([claim(iid=None)]))
    (o,) = handle_batch(w.deps(), [("m-1", spot())]).outcomes
    assert o.node_claims == []


def test_list_failure_fails_every_message_after_retries() -> None:
    w = World(FakeKube([claim()], fail_list=5))
    result = handle_batch(w.deps(), [("m-1", spot()), ("m-2", msg(load(REBALANCE)))])
    assert result.failed == ["m-1", "m-2"]
    assert "listing NodeClaims: Unavailable" in (result.outcomes[0].error or "")
    assert w.kube.calls == ["list"] * 3


def test_list_is_retried() -> None:
    w = World(FakeKube([claim()], fail_list=2))
    assert handle_batch(w.deps(), [("m-1", spot())]).failed == []


def test_a_failed_start_fails_only_its_message() -> None:
    w = World(FakeKube([claim()]))
    w.start_error = AwsUnavailable("Step Functions is unavailable", code="ServiceUnavailable")
    result = handle_batch(w.deps(), [("m-1", spot()), ("m-2", msg(load(REBALANCE)))])
    assert result.failed == ["m-1"]
    assert result.outcomes[0].error == "AwsUnavailable: ServiceUnavailable: Step Functions is unavailable"


def test_event_failures_do_not_fail_the_message() -> None:
    w = World(FakeKube([claim()]))
    w.recorder.fail = True
    (o,) = handle_batch(w.deps(), [("m-1", spot())]).outcomes
    assert (o.error, o.started, o.events, o.event_errors) == (None, ["default-abcde"], 0, 2)


def test_same_interruption_twice_starts_once() -> None:
    w = World(FakeKube([claim()]))
    result = handle_batch(w.deps(), [("m-1", spot()), ("m-2", spot())])
    assert [o.started for o in result.outcomes] == [["default-abcde"], []]
    assert w.started == [("default-abcde", "SpotInterrupted")]
    assert len(set(w.recorder.events)) == 2  # the same two events again: recorded as repeats


# --- deletions ---------------------------------------------------------------------------------


def test_node_claim_deleted_with_finalizer_terminates() -> None:
    w = World(FakeKube([claim(deleting=True)]))
    (o,) = handle_batch(w.deps(), [("m-1", deleting("NodeClaim", "default-abcde"))]).outcomes
    assert (o.kind, o.started, o.events) == ("Deletion", ["default-abcde"], 0)
    assert w.started == [("default-abcde", "Deleted")]


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ([claim()], "default-abcde: not being deleted"),
        ([claim(deleting=True, finalizers=())], "default-abcde: no karpenter.sh/termination finalizer"),
        ([], "default-abcde: gone"),
    ],
)
def test_node_claim_deletion_needs_timestamp_and_finalizer(claims: list[dict[str, Any]], why: str) -> None:
    w = World(FakeKube(claims))
    (o,) = handle_batch(w.deps(), [("m-1", deleting("NodeClaim", "default-abcde"))]).outcomes
    assert (o.error, o.started, o.ignored) == (None, [], [f"NodeClaim {why}"])


def test_node_deleted_terminates_its_node_claim_by_provider_id() -> None:
    w = World(FakeKube([claim(node=None)], {"n-1": node("n-1", IID)}))
    (o,) = handle_batch(w.deps(), [("m-1", deleting("Node", "n-1"))]).outcomes
    assert o.started == ["default-abcde"]
    assert w.started == [("default-abcde", "Deleted")]
    assert w.kube.calls == ["list", "get n-1"]


def test_node_deleted_without_provider_id_matches_by_node_name() -> None:
    w = World(FakeKube([claim(iid=None, node="n-1")], {"n-1": node("n-1", None)}))
    (o,) = handle_batch(w.deps(), [("m-1", deleting("Node", "n-1"))]).outcomes
    assert o.started == ["default-abcde"]


@pytest.mark.parametrize(
    ("nodes", "why"),
    [
        ({}, "n-1: gone"),
        ({"n-1": node("n-1", IID, deleting=False)}, "n-1: not being deleted"),
        ({"n-1": node("n-1", IID, finalizers=())}, "n-1: no karpenter.sh/termination finalizer"),
        ({"n-1": node("n-1", OTHER)}, "n-1: no NodeClaim of this cluster has it"),
    ],
)
def test_node_deletion_needs_timestamp_finalizer_and_owner(nodes: dict[str, Any], why: str) -> None:
    w = World(FakeKube([claim(node="other")], nodes))
    (o,) = handle_batch(w.deps(), [("m-1", deleting("Node", "n-1"))]).outcomes
    assert (o.error, o.started, o.ignored) == (None, [], [f"Node {why}"])


# --- pure helpers ------------------------------------------------------------------------------


def test_termination_reasons() -> None:
    assert termination_reason(spot()) == "SpotInterrupted"
    assert termination_reason(msg(load(REBALANCE))) is None
    assert termination_reason(deleting("Node", "n-1")) == "Deleted"


def test_notice_is_deterministic() -> None:
    a, b = spot(), msg({**variant(SPOT, instance_id=IID, detail={"instance-action": "terminate"}), "id": "other"})
    assert notice(a, IID) == notice(b, IID)  # type: ignore[arg-type]


def test_empty_batch_lists_nothing() -> None:
    w = World()
    assert handle_batch(w.deps(), []).outcomes == []
    assert w.kube.calls == []
