"""Karpenter's event-driven metrics, emitted by the Lambda where the event happens, run for real: the launch,
terminate and interruption paths (moto with the real workflows, handlers in-process, the real control plane),
the CloudWatch EMF records read from the process output. Names, label names and label values are Karpenter
v1.14.1's (core and AWS provider); each label is a dimension next to ``service`` and ``cluster`` (the sandbox's cluster is ``demo``)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.api import labels as wk
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution
from tests.fixtures.aws_events import REBALANCE, SPOT, variant
from tests.functional.emf import metric_records
from tests.functional.interruption.conftest import Sandbox, sandbox
from tests.functional.lifecycle.conftest import local, make_local
from tests.realk8s.launched import launch_node, pending_workload

__all__ = ["kube_server", "local", "make_local", "sandbox"]


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


def every(capfd: pytest.CaptureFixture[str]) -> dict[str, list[dict[str, Any]]]:
    """The EMF records written since the last call, by metric name: each one's dimensions (name -> value), the
    dimension names in ``_dimensions``, the unit in ``_unit`` and the value in ``_value``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for record in metric_records(capfd.readouterr().out):
        (directive,) = record["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "nodeflow"
        (metric,) = directive["Metrics"]
        (dimensions,) = directive["Dimensions"]
        (value,) = record[metric["Name"]]
        sample = {d: record[d] for d in dimensions}
        out.setdefault(metric["Name"], []).append(
            {**sample, "_dimensions": sorted(dimensions), "_unit": metric["Unit"], "_value": value}
        )
    return out


def samples(capfd: pytest.CaptureFixture[str], name: str) -> list[dict[str, Any]]:
    """The records of metric ``name`` written since the last call (see ``every``)."""
    return every(capfd).get(name, [])


def test_a_node_launched_then_terminated_is_counted_once_each_way(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    capfd.readouterr()
    node = launch_node(local, "web")
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", node.claim)
    labels = claim["metadata"]["labels"]
    pool, zone, capacity = labels[wk.LABEL_NODEPOOL], labels[wk.LABEL_ZONE], labels[wk.LABEL_CAPACITY_TYPE]
    assert all((pool, zone, capacity))

    # registration: karpenter_nodes_created_total{nodepool, zone}, once although Register is polled
    created = samples(capfd, "karpenter_nodes_created_total")
    assert [(s["nodepool"], s["zone"], s["_value"], s["_unit"]) for s in created] == [(pool, zone, 1.0, "Count")]
    assert created[0]["_dimensions"] == ["cluster", "nodepool", "service", "zone"]

    arn = local.terminate(node.claim, reason="Expired")
    assert wait_for_execution(local.clients.sfn, arn, timeout=60)["status"] == "SUCCEEDED"
    emitted = every(capfd)
    # drained once (the Drain step runs once per pod group; the Drained condition turns True once)
    assert [(s["nodepool"], s["_value"]) for s in emitted["karpenter_nodes_drained_total"]] == [(pool, 1.0)]
    assert [(s["nodepool"], s["zone"], s["_value"]) for s in emitted["karpenter_nodes_terminated_total"]] == [
        (pool, zone, 1.0)
    ]
    (claims,) = emitted["karpenter_nodeclaims_terminated_total"]
    assert (claims["nodepool"], claims["capacity_type"], claims["zone"], claims["_value"]) == (
        pool,
        capacity,
        zone,
        1.0,
    )
    assert claims["_dimensions"] == ["capacity_type", "cluster", "nodepool", "service", "zone"]
    for name in (
        "karpenter_nodes_termination_duration_seconds",
        "karpenter_nodeclaims_termination_duration_seconds",
        "karpenter_nodeclaims_instance_termination_duration_seconds",
        "karpenter_nodes_lifetime_duration_seconds",
    ):
        (sample,) = emitted[name]
        assert sample["_dimensions"] == ["cluster", "nodepool", "service"], name
        assert sample["nodepool"] == pool
        assert sample["_unit"] == "Seconds"
        assert 0.0 <= sample["_value"] < 600, (name, sample)
    # the Node was created before it was deleted: its lifetime covers its termination
    lifetime = emitted["karpenter_nodes_lifetime_duration_seconds"][0]["_value"]
    assert lifetime >= emitted["karpenter_nodes_termination_duration_seconds"][0]["_value"]
    assert lifetime > 0
    # the instance's termination (from the Terminate step's InstanceTerminating) is part of the NodeClaim's
    instance = emitted["karpenter_nodeclaims_instance_termination_duration_seconds"][0]["_value"]
    assert instance <= emitted["karpenter_nodeclaims_termination_duration_seconds"][0]["_value"]

    # a second start of the workflow finds nothing left to finalize: nothing is counted twice
    local.terminate(node.claim, reason="Expired")
    local.invoke("finalize", {"nodeClaim": node.claim, "reason": "Expired"})
    emitted = every(capfd)
    assert "karpenter_nodes_terminated_total" not in emitted
    assert "karpenter_nodeclaims_terminated_total" not in emitted
    assert "karpenter_nodes_drained_total" not in emitted


def test_interruption_messages_are_counted_as_karpenter_counts(
    sandbox: Sandbox, capfd: pytest.CaptureFixture[str]
) -> None:
    claim = sandbox.launch()
    assert claim.capacity_type == "spot"
    capfd.readouterr()
    sandbox.local.send_aws_event(variant(SPOT, instance_id=claim.instance_id, detail={"instance-action": "terminate"}))
    sandbox.local.send_aws_event(variant(REBALANCE, instance_id=claim.instance_id))
    sandbox.send_raw("not json")  # unreadable: deleted from the queue, never received
    assert sandbox.queued() == 3
    out = sandbox.local.drain_interruption_queue()
    assert out["batchItemFailures"] == []
    emitted = every(capfd)

    received = emitted["karpenter_interruption_received_messages_total"]
    assert sorted((s["message_type"], s["_value"]) for s in received) == [
        ("rebalance_recommendation", 1.0),
        ("spot_interrupted", 1.0),
    ]
    assert all(s["_dimensions"] == ["cluster", "message_type", "service"] for s in received)
    (deleted,) = emitted["karpenter_interruption_deleted_messages_total"]
    assert (deleted["_value"], deleted["_dimensions"]) == (3.0, ["cluster", "service"])
    # both AWS messages were handled; each one's time on the queue is observed (the events carry their time)
    durations = emitted["karpenter_interruption_message_queue_duration_seconds"]
    assert len(durations) == 2
    assert all(
        s["_dimensions"] == ["cluster", "service"] and s["_unit"] == "Seconds" and s["_value"] >= 0 for s in durations
    )
    # the spot warning deleted the NodeClaim (started its termination); the rebalance notice did not
    (disrupted,) = emitted["karpenter_nodeclaims_disrupted_total"]
    assert (disrupted["reason"], disrupted["nodepool"], disrupted["capacity_type"], disrupted["_value"]) == (
        "spot_interrupted",
        "default",
        "spot",
        1.0,
    )
    assert disrupted["_dimensions"] == ["capacity_type", "cluster", "nodepool", "reason", "service"]

    # the same warning again (EventBridge delivers at least once): received and deleted, no second disruption
    sandbox.local.send_aws_event(variant(SPOT, instance_id=claim.instance_id, detail={"instance-action": "terminate"}))
    assert sandbox.local.drain_interruption_queue()["batchItemFailures"] == []
    emitted = every(capfd)
    assert [s["message_type"] for s in emitted["karpenter_interruption_received_messages_total"]] == [
        "spot_interrupted"
    ]
    assert "karpenter_nodeclaims_disrupted_total" not in emitted


def test_a_launch_without_capacity_counts_a_cloud_provider_error_and_a_disrupted_nodeclaim(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    def none_left(asked: list[tuple[str, str]]) -> None:
        local.faults.exhaust((t, z) for t, _ in asked for z in local.world.subnets)

    local.faults.before = none_left
    pending_workload(local, "web", 1, "1", "1Gi")
    (created,) = local.provision()["result"]["nodeClaimsCreated"]
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", created)
    pool = claim["metadata"]["labels"][wk.LABEL_NODEPOOL]
    capfd.readouterr()
    done = local.wait_for_executions()
    assert [d["status"] for d in done if d["name"] == created] == ["FAILED"]
    emitted = every(capfd)

    errors = emitted["karpenter_cloudprovider_errors_total"]
    assert errors
    assert {(s["controller"], s["method"], s["provider"], s["error"]) for s in errors} == {
        ("nodeclaim.lifecycle", "Create", "aws", "InsufficientCapacityError")
    }
    assert errors[0]["_dimensions"] == ["cluster", "controller", "error", "method", "provider", "service"]
    (disrupted,) = emitted["karpenter_nodeclaims_disrupted_total"]
    assert (disrupted["reason"], disrupted["nodepool"], disrupted["_value"]) == ("insufficient_capacity", pool, 1.0)


def test_an_expired_node_is_counted_as_disrupted_by_the_disruption_lambda(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime, timedelta

    from nodeflow.handlers import runtime

    node = launch_node(local, "web")
    labels = local.kube_server.get("karpenter.sh/v1", "NodeClaim", node.claim)["metadata"]["labels"]
    capfd.readouterr()
    runtime.runtime().clock = lambda: datetime.now(UTC) + timedelta(hours=721)  # expireAfter: 720h
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["expired"] == [node.claim]
    emitted = every(capfd)
    # each NodePool's budget per reason (Karpenter's case): no budgets is 10 %, rounded up, of its nodes
    allowed = emitted["karpenter_nodepools_allowed_disruptions"]
    assert sorted((s["nodepool"], s["reason"], s["_value"]) for s in allowed) == [
        ("default", "Drifted", 1.0),
        ("default", "Empty", 1.0),
        ("default", "Underutilized", 1.0),
        ("gpu", "Drifted", 0.0),
        ("gpu", "Empty", 0.0),
        ("gpu", "Underutilized", 0.0),
    ]
    assert allowed[0]["_dimensions"] == ["cluster", "nodepool", "reason", "service"]
    (disrupted,) = emitted["karpenter_nodeclaims_disrupted_total"]
    assert (disrupted["reason"], disrupted["nodepool"], disrupted["capacity_type"], disrupted["_value"]) == (
        "expired",
        labels[wk.LABEL_NODEPOOL],
        labels[wk.LABEL_CAPACITY_TYPE],
        1.0,
    )
    # the next round finds its termination running: not disrupted again
    local.invoke("disruption", {"source": "aws.scheduler"})
    emitted = every(capfd)
    assert "karpenter_nodeclaims_disrupted_total" not in emitted
    assert len(emitted["karpenter_nodepools_allowed_disruptions"]) == 6  # a gauge: every round


def test_candidates_a_replace_workflow_terminates_are_counted_as_disrupted_by_its_reason(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    node = launch_node(local, "web")
    labels = local.kube_server.get("karpenter.sh/v1", "NodeClaim", node.claim)["metadata"]["labels"]
    capfd.readouterr()
    state = {
        "reason": "Underutilized",
        "candidates": [{"node": node.node, "nodeClaim": node.claim}],
        "replacements": ["default-replacement"],
        "deadline": "2099-01-01T00:00:00+00:00",
    }
    result = local.invoke("replace", {"action": "terminate", "replace": state})
    assert result == {"started": [node.claim]}  # the workflow's state carries no metric labels
    (disrupted,) = every(capfd)["karpenter_nodeclaims_disrupted_total"]
    assert (disrupted["reason"], disrupted["nodepool"], disrupted["capacity_type"], disrupted["_value"]) == (
        "underutilized",
        labels[wk.LABEL_NODEPOOL],
        labels[wk.LABEL_CAPACITY_TYPE],
        1.0,
    )
    # the step retried (Step Functions delivers at least once): its termination is running, nothing counted
    assert local.invoke("replace", {"action": "terminate", "replace": state}) == {"started": []}
    assert "karpenter_nodeclaims_disrupted_total" not in every(capfd)
    wait_for_execution(local.clients.sfn, local.terminate(node.claim), timeout=60)
