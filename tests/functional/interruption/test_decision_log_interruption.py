"""Interruption handling writes the decision log: a spot interruption notice (AWS's sample event) for a NodeClaim in
the real API server leaves a record, in the decision table in moto, of the NodeClaim it terminated and why. (The
notice's way through the bus, the queue and the function is tests/functional/interruption/test_end_to_end.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from tests.fixtures.aws_events import SPOT, variant

if TYPE_CHECKING:
    from sandbox.controlplane.facade import RealKubeAPI

REGION = "us-east-1"
TABLE = "nodeflow-shop-decisions"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LABELS = {
    "karpenter.sh/nodepool": "default",
    "node.kubernetes.io/instance-type": "m5.large",
    "topology.kubernetes.io/zone": "us-east-1a",
    "karpenter.sh/capacity-type": "spot",
}


@pytest.fixture
def world(aws_env: None, kube_server: RealKubeAPI) -> Iterator[dict[str, Any]]:
    import boto3
    from moto import mock_aws

    from sandbox.aws import create_decision_table

    kube_server.reset()
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abcde", "labels": LABELS},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
        },
    }
    kube_server.create({**claim, "status": {"providerID": PROVIDER}})  # as the launch step leaves it
    with mock_aws():
        create_decision_table(lambda service: boto3.client(service, region_name=REGION), TABLE)
        yield {"kube": kube_server, "ddb": boto3.client("dynamodb", region_name=REGION)}


PROVIDER = "aws:///us-east-1a/i-0123456789abcdef0"


def test_a_spot_interruption_is_recorded(world: dict[str, Any]) -> None:
    from nodeflow.aws.decision_log import DecisionLog, read_decisions
    from nodeflow.interruption.messages import parse_message
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle.interruption_handling import InterruptionDeps, handle_batch

    kube = KubeClient(world["kube"].api_client())
    started: list[tuple[str, str]] = []

    def start_termination(claim: str, reason: str) -> bool:
        started.append((claim, reason))
        return True

    deps = InterruptionDeps(
        kube=kube,
        recorder=EventRecorder(kube),
        mark_unavailable=lambda _offerings, _now, _reason: 1,
        start_termination=start_termination,
        now=lambda: NOW,
        decisions=DecisionLog(world["ddb"], TABLE),
    )
    body = json.dumps(variant(SPOT, instance_id="i-0123456789abcdef0", detail={"instance-action": "terminate"}))
    message = parse_message(body)
    result = handle_batch(deps, [("m1", message)])  # type: ignore[list-item]
    assert started == [("default-abcde", "SpotInterrupted")], result.to_json()

    (record,) = read_decisions(world["ddb"], TABLE, since=NOW - timedelta(minutes=1), now=NOW)
    assert record.kind == "interruption"
    assert record.detail == {
        "nodeClaim": "default-abcde",
        "reason": "SpotInterrupted",
        "message": record.detail["message"],
        "instanceType": "m5.large",
        "zone": "us-east-1a",
        "capacityType": "spot",
    }
    assert "Spot" in record.detail["message"]
    assert record.node_pools == ("default",)
    assert record.summary.startswith("terminate NodeClaim default-abcde (m5.large, us-east-1a, spot): SpotInterrupted")
    by_pool = read_decisions(world["ddb"], TABLE, since=NOW - timedelta(minutes=1), now=NOW, nodepool="default")
    assert by_pool == [record]


def test_a_kubectl_delete_nodeclaim_is_recorded_as_a_deletion_not_an_interruption(world: dict[str, Any]) -> None:
    """A user's ``kubectl delete nodeclaim`` (the agent forwards NodeClaim Deleting): the termination starts with
    reason Deleted, and the decision log files it as kind ``deletion`` naming what was deleted."""
    from nodeflow.aws.decision_log import DecisionLog, read_decisions
    from nodeflow.interruption.messages import Deletion, Envelope
    from nodeflow.kube.client import NODE_CLAIMS, KubeClient
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle.interruption_handling import InterruptionDeps, handle_batch

    kube = KubeClient(world["kube"].api_client())
    kube.patch(NODE_CLAIMS, "default-abcde", {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    kube.delete(NODE_CLAIMS, "default-abcde")  # kubectl delete nodeclaim default-abcde: held by the finalizer
    started: list[tuple[str, str]] = []
    deps = InterruptionDeps(
        kube=kube,
        recorder=EventRecorder(kube),
        mark_unavailable=lambda _offerings, _now, _reason: 1,
        start_termination=lambda claim, reason: started.append((claim, reason)) is None,
        now=lambda: NOW,
        decisions=DecisionLog(world["ddb"], TABLE),
    )
    message = Deletion(Envelope("e1", "nodeflow.agent", "NodeClaim Deleting"), "NodeClaim", "default-abcde")
    handle_batch(deps, [("m1", message)])
    assert started == [("default-abcde", "Deleted")]

    (record,) = read_decisions(world["ddb"], TABLE, since=NOW - timedelta(minutes=1), now=NOW)
    assert record.kind == "deletion"
    assert record.summary == (
        "terminate NodeClaim default-abcde (m5.large, us-east-1a, spot): NodeClaim default-abcde deleted through the "
        "Kubernetes API"
    )
    assert record.detail["deleted"] == "NodeClaim default-abcde"
    assert record.node_pools == ("default",)
