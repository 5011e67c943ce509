"""Interruptions with the real terminate workflow: each AWS sample event kind, put on the moto default
bus, goes through Karpenter's rule to the interruption queue and the interruption function behind its
event-source mapping, and ends with the node drained, the instance terminated and the NodeClaim and
Node gone; the evicted pods' replacements are provisioned by the normal path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nodeflow.interruption.messages import instance_id_from_provider_id
from sandbox.controlplane.facade import wait_for
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution
from tests.fixtures.aws_events import HEALTH, REBALANCE, SPOT, STATE_CHANGE, variant
from tests.realk8s.launched import launch_workload


def _wait(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    return wait_for(what, predicate, timeout)


def _launch(local: LocalNodeflow, app: str, pods: int = 3) -> dict[str, Any]:
    """A ReplicaSet's ``pods`` on one NodeClaim's node, running."""
    (claim,) = launch_workload(local, app, pods, "500m", "512Mi")
    return claim


def _instance(claim: dict[str, Any]) -> str:
    iid = instance_id_from_provider_id(claim["status"]["providerID"])
    assert iid is not None
    return iid


def _state(local: LocalNodeflow, instance_id: str) -> str:
    out = local.clients.ec2.describe_instances(InstanceIds=[instance_id])
    return str(out["Reservations"][0]["Instances"][0]["State"]["Name"])


def _execution(local: LocalNodeflow, name: str) -> str:
    return f"{local.terminate_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def _described(local: LocalNodeflow, arn: str) -> dict[str, Any] | None:
    try:
        return local.clients.sfn.describe_execution(executionArn=arn)  # type: ignore[no-any-return]
    except local.clients.sfn.exceptions.ExecutionDoesNotExist:
        return None


@pytest.fixture
def local(make_local: Callable[..., LocalNodeflow]) -> LocalNodeflow:
    local = make_local()
    local.start_interruption_source()
    return local


@pytest.mark.parametrize(
    ("sample", "detail", "reason"),
    [
        (SPOT, {"instance-action": "terminate"}, "SpotInterrupted"),
        (STATE_CHANGE, {"state": "stopping"}, "InstanceStopping"),
        (
            HEALTH,
            {"eventTypeCategory": "scheduledChange", "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"},
            "InstanceUnhealthy",
        ),
    ],
    ids=["spot-interruption", "state-change-stopping", "health-scheduled-change"],
)
def test_interruption_drains_and_terminates_the_node(
    local: LocalNodeflow, sample: str, detail: dict[str, str], reason: str
) -> None:
    claim = _launch(local, "web")
    name, node, iid = claim["metadata"]["name"], claim["status"]["nodeName"], _instance(claim)
    local.send_aws_event(variant(sample, instance_id=iid, detail=detail))
    arn = _execution(local, name)
    _wait(lambda: _described(local, arn), what="the terminate execution")
    done = wait_for_execution(local.clients.sfn, arn, timeout=60)
    assert done["status"] == "SUCCEEDED", local.trace(arn).render()
    assert f'"reason": "{reason}"' in done["input"].replace('":"', '": "')
    assert _state(local, iid) in ("shutting-down", "terminated")
    assert local.kube_server.objects("karpenter.sh/v1", "NodeClaim") == []
    assert local.kube_server.objects("v1", "Node") == []
    # drained: every pod that was on the node was evicted through the Eviction API (the ReplicaSet replaced them)
    assert [p for p in local.kube_server.objects("v1", "Pod", "default") if p["spec"].get("nodeName") == node] == []
    evictions = [e for e in local.kube_server.exchanges if e.method == "POST" and e.path.endswith("/eviction")]
    assert len({e.path for e in evictions if e.status == 201}) == 3, [e.describe() for e in evictions]
    states = [s.name for s in local.trace(arn).states]
    assert states[:2] == ["Taint", "Drain"]
    assert states[-2:] == ["RemoveFinalizer", "Terminated"]
    reasons = {e.get("reason") for e in local.kube_server.objects("v1", "Event", "default")}
    assert reason in reasons


def test_rebalance_recommendation_leaves_the_node_running(local: LocalNodeflow) -> None:
    claim = _launch(local, "web")
    iid = _instance(claim)
    local.send_aws_event(variant(REBALANCE, instance_id=iid))
    _wait(
        lambda: (
            "RebalanceRecommendation" in {e.get("reason") for e in local.kube_server.objects("v1", "Event", "default")}
        ),
        what="the RebalanceRecommendation event",
    )
    assert local.terminate_executions() == []
    assert _state(local, iid) == "running"
    assert len(local.kube_server.objects("karpenter.sh/v1", "NodeClaim")) == 1


def test_the_same_interruption_twice_terminates_once(local: LocalNodeflow) -> None:
    claim = _launch(local, "web")
    iid = _instance(claim)
    event = variant(SPOT, instance_id=iid, detail={"instance-action": "terminate"})
    local.send_aws_event(event)
    local.send_aws_event(event)
    arn = _execution(local, claim["metadata"]["name"])
    _wait(lambda: _described(local, arn), what="the terminate execution")
    assert wait_for_execution(local.clients.sfn, arn, timeout=60)["status"] == "SUCCEEDED"
    source = local.interruption_source
    assert source is not None
    source.wait_for(lambda bs: sum(len(b.records) for b in bs) >= 2)
    assert [e["name"] for e in local.terminate_executions()] == [claim["metadata"]["name"]]


def test_an_instance_already_gone(local: LocalNodeflow) -> None:
    claim = _launch(local, "web")
    iid = _instance(claim)
    local.clients.ec2.terminate_instances(InstanceIds=[iid])  # gone behind nodeflow's back
    local.send_aws_event(variant(STATE_CHANGE, instance_id=iid, detail={"state": "terminated"}))
    arn = _execution(local, claim["metadata"]["name"])
    _wait(lambda: _described(local, arn), what="the terminate execution")
    done = wait_for_execution(local.clients.sfn, arn, timeout=60)
    assert done["status"] == "SUCCEEDED", local.trace(arn).render()
    assert local.kube_server.objects("karpenter.sh/v1", "NodeClaim") == []
    assert local.kube_server.objects("v1", "Node") == []
