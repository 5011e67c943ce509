"""The decision log in the stack: its own table (pk/sk, TTL on ``ttl``), written only by the provisioner, the
disruption and the interruption Lambda (BatchWriteItem on that table and nothing else), its name in their environment and in the
stack's outputs (``python -m nodeflow decisions --stack`` reads it there), the TTL days from context."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import ConfigError, NodeflowConfig
from infra.functions import FUNCTIONS
from tests.infra.conftest import Synthesized
from tests.infra.helpers import actions_of, as_list, function_named, ref_of, role_statements

WRITERS = {"provisioner", "disruption", "interruption"}


def _decisions_table(synthesized: Synthesized, which: str) -> tuple[str, dict[str, Any]]:
    cluster = synthesized.stacks[which].config.cluster_name
    (found,) = [
        (lid, t)
        for lid, t in synthesized.resources(which, "AWS::DynamoDB::Table").items()
        if t["Properties"]["TableName"] == f"nodeflow-{cluster}-decisions"
    ]
    return found


@pytest.mark.parametrize("which", ["default", "full"])
def test_the_decision_table_keys_and_ttl(synthesized: Synthesized, which: str) -> None:
    _, table = _decisions_table(synthesized, which)
    p = table["Properties"]
    assert p["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
    assert p["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    assert p["BillingMode"] == "PAY_PER_REQUEST"
    assert p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert p["SSESpecification"]["SSEEnabled"] is True


def test_only_the_provisioner_disruption_and_interruption_write_it_and_only_it(synthesized: Synthesized) -> None:
    res = synthesized.resources("default")
    table_id, _ = _decisions_table(synthesized, "default")
    for spec in FUNCTIONS:
        _, fn = function_named(res, f"nodeflow-demo-{spec.suffix}")
        env = fn["Properties"]["Environment"]["Variables"]
        on_table = [
            st
            for st in role_statements(res, ref_of(fn["Properties"]["Role"]) or "")
            if any(ref_of(r) == table_id for r in as_list(st["Resource"]))
        ]
        if spec.suffix in WRITERS:
            assert ref_of(env["DECISION_TABLE_NAME"]) == table_id
            assert env["DECISION_LOG_TTL_DAYS"] == "90"
            (st,) = on_table
            assert actions_of(st) == ["dynamodb:BatchWriteItem"]
            assert [ref_of(r) for r in as_list(st["Resource"])] == [table_id]  # the table, not its indexes
        else:
            assert "DECISION_TABLE_NAME" not in env, spec.suffix
            assert on_table == [], spec.suffix


def test_the_stack_outputs_the_table_name_and_its_retention(synthesized: Synthesized) -> None:
    table_id, _ = _decisions_table(synthesized, "default")
    outputs = synthesized.template("default")["Outputs"]
    assert ref_of(outputs["DecisionTableName"]["Value"]) == table_id
    # what ``decisions --since`` clamps to: the TTL days the functions stamp on every item
    assert outputs["DecisionLogTtlDays"]["Value"] == str(synthesized.stacks["default"].config.decision_log_ttl_days)


def test_decision_log_ttl_days_from_context() -> None:
    assert NodeflowConfig.from_mapping({"clusterName": "a"}).decision_log_ttl_days == 90
    assert NodeflowConfig.from_mapping({"clusterName": "a", "decisionLogTtlDays": "400"}).decision_log_ttl_days == 400
    for bad in ("0", "3651", "ninety", -1):
        with pytest.raises(ConfigError, match="decisionLogTtlDays"):
            NodeflowConfig.from_mapping({"clusterName": "a", "decisionLogTtlDays": bad})


@pytest.mark.parametrize(
    ("metric", "says"),
    [
        ("DecisionLogWriteErrors", "decision log items could not be written"),
        ("DecisionLogWriteTimeouts", "decision log items were not written before the function's deadline"),
    ],
)
def test_write_errors_and_timeouts_alarm(synthesized: Synthesized, metric: str, says: str) -> None:
    """The handlers' metrics (``nodeflow.handlers.common.record_decision_log``): items refused, and items the
    deadline left unwritten; one item in 15 minutes alarms."""
    alarms = [a["Properties"] for a in synthesized.resources("default", "AWS::CloudWatch::Alarm").values()]
    (alarm,) = [a for a in alarms if a.get("MetricName") == metric]
    assert alarm["Namespace"] == "nodeflow"
    assert sorted(d["Name"] for d in alarm["Dimensions"]) == ["cluster", "service"]
    assert alarm["Statistic"] == "Sum"
    assert alarm["Period"] == 900
    assert alarm["Threshold"] == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"
    assert says in alarm["AlarmDescription"]
