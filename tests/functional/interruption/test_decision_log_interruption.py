"""The interruption Lambda writes the decision log: a spot interruption notice, through the bus, the queue and the
function behind its event-source mapping, leaves a record of the NodeClaim it terminated and why."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from nodeflow.aws.decisions import read_decisions
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution
from tests.fixtures.aws_events import SPOT, variant
from tests.functional.interruption.test_end_to_end import _described, _execution, _instance, _launch, _wait


@pytest.fixture
def local(make_local: Callable[..., LocalNodeflow]) -> LocalNodeflow:
    local = make_local()
    local.start_interruption_source()
    return local


def test_a_spot_interruption_is_recorded(local: LocalNodeflow) -> None:
    started = datetime.now(UTC)
    claim = _launch(local, "web")
    name = claim["metadata"]["name"]
    local.send_aws_event(variant(SPOT, instance_id=_instance(claim), detail={"instance-action": "terminate"}))
    arn = _execution(local, name)
    _wait(lambda: _described(local, arn), what="the terminate execution")
    assert wait_for_execution(local.clients.sfn, arn, timeout=60)["status"] == "SUCCEEDED"

    ddb, table = local.clients.dynamodb, local.world.decision_table_name
    now = datetime.now(UTC) + timedelta(minutes=1)
    (record,) = [r for r in read_decisions(ddb, table, since=started, now=now) if r.kind == "interruption"]
    labels = claim["metadata"]["labels"]
    assert record.detail["nodeClaim"] == name
    assert record.detail["reason"] == "SpotInterrupted"
    assert record.detail["instanceType"] == labels["node.kubernetes.io/instance-type"]
    assert record.detail["capacityType"] == "spot"
    assert record.node_pools == ("default",)
    assert record.summary.startswith(f"terminate NodeClaim {name} (")
    assert record in read_decisions(ddb, table, since=started, now=now, nodepool="default")
