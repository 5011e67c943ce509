"""The disruption Lambda writes the decision log (the sandbox passes DECISION_TABLE_NAME as the stack does): one round
records its command (reason, method, candidates, $/hour saved, what became of it) and each blocked candidate (node,
event, message), read back by NodePool and by time; the handler publishes what it wrote as metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodeflow.aws.decision_log import read_decisions
from sandbox.nodeflow import LocalNodeflow
from tests.functional.disruption.test_disruption_lambda import (
    AWAY_FROM_WEB,
    _annotate,
    _later,
    _launch,
    _scale_down,
    _settle,
)


def test_a_round_records_its_command_and_blocked_candidates(local: LocalNodeflow, published: dict[str, float]) -> None:
    started = datetime.now(UTC)
    keep = _launch(local, "web", 2)
    empty = _launch(local, "batch", 2, affinity=AWAY_FROM_WEB)
    kube = local.kube_server
    web = sorted(
        p["metadata"]["name"] for p in kube.objects("v1", "Pod", "default") if p["metadata"]["name"][:3] == "web"
    )
    _annotate(local, web[0], "true")
    _scale_down(local, "batch")
    _later(5)

    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["executed"] == [empty["metadata"]["name"]], result

    ddb, table = local.clients.dynamodb, local.world.decision_table_name
    records = read_decisions(ddb, table, since=started, now=datetime.now(UTC) + timedelta(minutes=5))
    (command,) = [r for r in records if r.kind == "disruption"]
    assert command.detail["reason"] == "Empty"
    assert command.detail["candidates"] == [empty["status"]["nodeName"]]
    assert command.detail["executed"] == [empty["metadata"]["name"]]
    assert command.detail["outcome"] == "executed"
    assert command.detail["savedPerHour"] > 0
    assert command.node_pools == ("default",)
    assert command.at > datetime.now(UTC) + timedelta(minutes=4)  # stamped by the handlers' clock (5 min ahead)
    blocked = [r for r in records if r.kind == "blocked" and r.detail["node"] == keep["status"]["nodeName"]]
    assert blocked, [r.summary for r in records]
    assert blocked[0].detail["event"] == "DisruptionBlocked"
    assert "do-not-disrupt" in blocked[0].detail["message"]
    assert blocked[0].node_pools == ("default",)
    # the provisioner's records of the two launches are there too, and all of it by NodePool
    assert sum(r.kind == "provisioning" for r in records) == 2
    by_pool = read_decisions(ddb, table, since=started, now=datetime.now(UTC), nodepool="default")
    assert {r.sk for r in by_pool} == {r.sk for r in records}

    # each record of the round and one NodePool pointer naming them all (the command moves no pods), none failed
    round_records = [r for r in records if r.run == command.run]
    assert published["DecisionLogItemsWritten"] == len(round_records) + 1
    assert published["DecisionLogWriteErrors"] == 0

    # the next round (same hour, same blocker): the blocked record is rewritten in place, by this container not at all
    again = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert any(b["node"] == keep["status"]["nodeName"] for b in again["blocked"]), again
    later = read_decisions(ddb, table, since=started, now=datetime.now(UTC) + timedelta(minutes=5))
    assert [r.sk for r in later if r.kind == "blocked" and r.detail["node"] == keep["status"]["nodeName"]] == [
        blocked[0].sk
    ]
    _settle(local)
