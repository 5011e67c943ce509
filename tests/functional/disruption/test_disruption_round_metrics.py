"""Karpenter's voluntary-disruption metrics from the disruption Lambda, run for real (moto with the real workflows,
the handler in-process, the real control plane), read back as CloudWatch EMF records: per method tried, its
evaluation time (``karpenter_voluntary_disruption_decision_evaluation_duration_seconds{reason,
consolidation_type}``) and eligible nodes (``karpenter_voluntary_disruption_eligible_nodes{reason}``); per NodePool,
the nodes using up its budget (``karpenter_nodepools_nodes_consuming_budgets{nodepool,reason}``) and the decisions
carried out on its nodes (``karpenter_voluntary_disruption_decisions_by_nodepool_total``). Names, labels and label
values are Karpenter v1.14.1's; an empty label (drift's consolidation_type) is no dimension."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kubernetes
import pytest

from nodeflow.api.labels import LABEL_INSTANCE_TYPE
from nodeflow.catalog.offline import load_offline
from nodeflow.handlers import disruption as disruption_handler
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution
from tests.functional.disruption.test_disruption_lambda import (
    AWAY_FROM_WEB,
    IDLE_WORKFLOW,
    ON_DEMAND,
    TOGETHER,
    _budget_of_one,
    _later,
    _launch,
    _scale_down,
    _settle,
    _web_apart,
)
from tests.functional.test_karpenter_event_metrics import every

EVALUATION = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds"
ELIGIBLE = "karpenter_voluntary_disruption_eligible_nodes"
CONSUMING = "karpenter_nodepools_nodes_consuming_budgets"
BY_NODEPOOL = "karpenter_voluntary_disruption_decisions_by_nodepool_total"
FAILED_VALIDATIONS = "karpenter_voluntary_disruption_failed_validations_total"
QUEUE_FAILURES = "karpenter_voluntary_disruption_queue_failures_total"
COST = "karpenter_nodepools_cost_total"


def test_each_method_tried_reports_its_evaluation_time_and_eligible_nodes(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    _launch(local, "web", 2)
    empty = _launch(local, "batch", 2, affinity=AWAY_FROM_WEB)
    _scale_down(local, "batch")
    capfd.readouterr()

    # consolidateAfter (1m) has not passed: every method is tried, none finds a node
    first = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert first["command"] is None, first
    emitted = every(capfd)
    tried = emitted[EVALUATION]
    assert [(s.get("reason"), s.get("consolidation_type"), s["_unit"]) for s in tried] == [
        ("empty", "empty", "Seconds"),
        ("drifted", None, "Seconds"),  # drift has no consolidation type: no dimension
        ("underutilized", "multi", "Seconds"),
        ("underutilized", "single", "Seconds"),
    ]
    assert all(s["_value"] > 0 for s in tried), tried  # timed by the Lambda's clock
    assert tried[0]["_dimensions"] == ["cluster", "consolidation_type", "reason", "service"]
    assert tried[1]["_dimensions"] == ["cluster", "reason", "service"]
    eligible = emitted[ELIGIBLE]
    assert sorted((s["reason"], s["_value"], s["_unit"]) for s in eligible) == [
        ("drifted", 0.0, "Count"),
        ("empty", 0.0, "Count"),
        ("underutilized", 0.0, "Count"),
    ]
    assert eligible[0]["_dimensions"] == ["cluster", "reason", "service"]
    assert BY_NODEPOOL not in emitted
    # the cost gauge: each NodePool's NodeClaims priced from the catalog the Lambda uses (CATALOG_SOURCE=offline)
    catalog = load_offline()
    expected: dict[str, float] = {}
    for claim in local.kube_server.objects("karpenter.sh/v1", "NodeClaim"):
        labels = claim["metadata"]["labels"]
        pool, it = labels["karpenter.sh/nodepool"], labels[LABEL_INSTANCE_TYPE]
        if labels["karpenter.sh/capacity-type"] == "spot":
            price = catalog.spot_prices[(it, labels["topology.kubernetes.io/zone"])]
        else:
            price = catalog.on_demand_prices[it]
        expected[pool] = expected.get(pool, 0.0) + price
    costs = {s["nodepool"]: s["_value"] for s in emitted[COST]}
    assert set(costs) == {p["metadata"]["name"] for p in local.kube_server.objects("karpenter.sh/v1", "NodePool")}
    assert {pool: costs[pool] for pool in expected} == pytest.approx(expected)
    assert min(expected.values()) > 0
    assert emitted[COST][0]["_dimensions"] == ["cluster", "nodepool", "service"]

    # later: emptiness finds the batch node and the round stops there (the other methods are not tried)
    _later(5)
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["executed"] == [empty["metadata"]["name"]], result
    emitted = every(capfd)
    assert [(s["reason"], s["consolidation_type"]) for s in emitted[EVALUATION]] == [("empty", "empty")]
    assert [(s["reason"], s["_value"]) for s in emitted[ELIGIBLE]] == [("empty", 1.0)]
    (by_pool,) = emitted[BY_NODEPOOL]
    pool = empty["metadata"]["labels"]["karpenter.sh/nodepool"]
    assert (by_pool["nodepool"], by_pool["decision"], by_pool["reason"], by_pool["consolidation_type"]) == (
        pool,
        "delete",
        "empty",
        "empty",
    )
    assert by_pool["_value"] == 1.0
    assert by_pool["_unit"] == "Count"
    assert by_pool["_dimensions"] == ["cluster", "consolidation_type", "decision", "nodepool", "reason", "service"]
    (total,) = emitted["karpenter_voluntary_disruption_decisions_total"]
    assert (total["decision"], total["reason"], total["consolidation_type"]) == ("delete", "empty", "empty")
    assert FAILED_VALIDATIONS not in emitted  # the validation round confirmed the command
    assert QUEUE_FAILURES not in emitted
    _settle(local)


def test_a_node_being_disrupted_consumes_its_nodepools_budget(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    _web_apart(local)
    _budget_of_one(local)
    _scale_down(local, "web")
    _later(5)
    local.clients.sfn.update_state_machine(stateMachineArn=local.terminate_arn, definition=IDLE_WORKFLOW)
    capfd.readouterr()
    first = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert first["command"]["reason"] == "Empty", first
    emitted = every(capfd)
    consuming = emitted[CONSUMING]
    assert sorted((s["nodepool"], s["reason"], s["_value"], s["_unit"]) for s in consuming) == [
        ("default", "Drifted", 0.0, "Count"),
        ("default", "Empty", 0.0, "Count"),
        ("default", "Underutilized", 0.0, "Count"),
        ("gpu", "Drifted", 0.0, "Count"),
        ("gpu", "Empty", 0.0, "Count"),
        ("gpu", "Underutilized", 0.0, "Count"),
    ]
    assert consuming[0]["_dimensions"] == ["cluster", "nodepool", "reason", "service"]
    # both nodes were empty: eligible, though the budget of one let one go
    assert [(s["reason"], s["_value"]) for s in emitted[ELIGIBLE]] == [("empty", 2.0)]

    # the next round: the node whose termination started (tainted, its workflow idle) uses up the budget
    second = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert second["command"] is None, second
    emitted = every(capfd)
    assert sorted((s["nodepool"], s["reason"], s["_value"]) for s in emitted[CONSUMING]) == [
        ("default", "Drifted", 1.0),
        ("default", "Empty", 1.0),
        ("default", "Underutilized", 1.0),
        ("gpu", "Drifted", 0.0),
        ("gpu", "Empty", 0.0),
        ("gpu", "Underutilized", 0.0),
    ]
    assert [(s["reason"], s["_value"]) for s in emitted[ELIGIBLE]] == [
        ("empty", 1.0),  # the other node: eligible, blocked by the budget
        ("drifted", 0.0),
        ("underutilized", 0.0),
    ]
    _settle(local)


def test_a_command_the_validation_round_does_not_confirm_counts_a_failed_validation(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _launch(local, "web", 2)
    empty = _launch(local, "batch", 2, affinity=AWAY_FROM_WEB)
    _scale_down(local, "batch")
    _later(5)
    node = empty["status"]["nodeName"]
    core = kubernetes.client.CoreV1Api(local.kube_server.api_client())

    def meanwhile(seconds: float) -> None:  # during the validation wait, the empty node is protected
        body = {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}
        core.patch_node(node, body, _preload_content=False)  # (kept as it was read)

    monkeypatch.setattr(disruption_handler, "time", SimpleNamespace(sleep=meanwhile))
    capfd.readouterr()
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["command"]["reason"] == "Empty", result
    assert result["executed"] == [], result
    assert result["skipped"], result
    emitted = every(capfd)
    (failed,) = emitted[FAILED_VALIDATIONS]
    assert (failed["consolidation_type"], failed["_value"], failed["_unit"]) == ("empty", 1.0, "Count")
    assert failed["_dimensions"] == ["cluster", "consolidation_type", "service"]
    assert "karpenter_voluntary_disruption_decisions_total" not in emitted
    _settle(local)


def test_a_replace_command_whose_replacement_fails_counts_a_queue_failure(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    old = _launch(local, "web", 4, cpu="1", affinity=TOGETHER, nodeSelector=ON_DEMAND)
    _scale_down(local, "web", 1)  # one pod left: single-node consolidation replaces it
    _later(5)
    original = local.dispatch.handlers[local.function_name("launch")]

    def everything_exhausted(event: Any, context: Any) -> Any:  # no capacity: the replacement's launch fails
        claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", event["nodeClaim"])
        types = next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == LABEL_INSTANCE_TYPE)
        local.faults.exhaust((t, z) for t in types for z in local.world.subnets)
        return original(event, context)

    local.dispatch.register(local.function_name("launch"), everything_exhausted)
    capfd.readouterr()
    replacing = local.invoke("disruption", {"source": "aws.scheduler"})["result"]["replacing"]
    assert replacing is not None
    arn = f"{local.replace_arn.replace(':stateMachine:', ':execution:', 1)}:{replacing['name']}"
    assert wait_for_execution(local.clients.sfn, arn, timeout=90)["status"] == "FAILED"
    (failed,) = every(capfd)[QUEUE_FAILURES]
    labels = (failed["decision"], failed["reason"], failed["consolidation_type"])
    assert labels == ("replace", "underutilized", "replace")  # Karpenter labels consolidation_type with the decision
    assert (failed["_value"], failed["_unit"]) == (1.0, "Count")
    assert failed["_dimensions"] == ["cluster", "consolidation_type", "decision", "reason", "service"]
    assert old["metadata"]["name"] in {
        c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")
    }
    _settle(local)
