"""The handlers' Powertools metrics carry the cluster as a dimension (clusters sharing an account do not
mix), and the dashboard and alarms read them with the same dimensions."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
from nodeflow.handlers.common import metrics
metrics.add_metric(name="NodeClaimsCreated", unit="Count", value=2)
metrics.flush_metrics()
"""


def _emf(env: dict[str, str]) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    (line,) = [json.loads(x) for x in out.splitlines() if '"_aws"' in x]
    return line


def test_metrics_carry_the_cluster_dimension() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CLUSTER_NAME"}
    emf = _emf({**env, "CLUSTER_NAME": "prod-eu"})
    (directive,) = emf["_aws"]["CloudWatchMetrics"]  # type: ignore[index]
    assert directive["Namespace"] == "nodeflow"
    assert sorted(directive["Dimensions"][0]) == ["cluster", "service"]
    assert emf["cluster"] == "prod-eu"
    assert emf["service"] == "nodeflow"
    assert emf["NodeClaimsCreated"] == [2.0]


def test_without_a_cluster_name_only_the_service_dimension() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CLUSTER_NAME"}
    emf = _emf(env)
    (directive,) = emf["_aws"]["CloudWatchMetrics"]  # type: ignore[index]
    assert directive["Dimensions"][0] == ["service"]


def _emf_all(script: str, env: dict[str, str]) -> list[dict[str, object]]:
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return [json.loads(x) for x in out.splitlines() if '"_aws"' in x]


def test_karpenter_decision_metrics_carry_karpenter_labels_as_dimensions() -> None:
    script = """
from nodeflow.handlers.karpenter_metrics import record_disruption_decision, record_scheduling_duration
record_disruption_decision({"decision": "replace", "reason": "Underutilized", "method": "single-node consolidation"})
record_disruption_decision({"decision": "delete", "reason": "Drifted", "method": "drift"})
record_scheduling_duration(0.25, "provisioner")
"""
    env = {k: v for k, v in os.environ.items() if k != "CLUSTER_NAME"}
    replace, drift, duration = _emf_all(script, {**env, "CLUSTER_NAME": "prod-eu"})
    (directive,) = replace["_aws"]["CloudWatchMetrics"]  # type: ignore[index]
    assert directive["Namespace"] == "nodeflow"
    assert directive["Metrics"] == [{"Name": "karpenter_voluntary_disruption_decisions_total", "Unit": "Count"}]
    assert sorted(directive["Dimensions"][0]) == ["cluster", "consolidation_type", "decision", "reason", "service"]
    assert (replace["decision"], replace["reason"], replace["consolidation_type"]) == (
        "replace",
        "underutilized",
        "single",
    )
    assert replace["cluster"] == "prod-eu"
    assert replace["karpenter_voluntary_disruption_decisions_total"] == [1.0]
    # drift has no consolidation type: Karpenter's label is empty, and CloudWatch takes no empty dimension
    (directive,) = drift["_aws"]["CloudWatchMetrics"]  # type: ignore[index]
    assert sorted(directive["Dimensions"][0]) == ["cluster", "decision", "reason", "service"]
    assert (drift["decision"], drift["reason"]) == ("delete", "drifted")
    (directive,) = duration["_aws"]["CloudWatchMetrics"]  # type: ignore[index]
    assert directive["Metrics"] == [{"Name": "karpenter_scheduler_scheduling_duration_seconds", "Unit": "Seconds"}]
    assert duration["controller"] == "provisioner"
    assert duration["karpenter_scheduler_scheduling_duration_seconds"] == [0.25]


def test_karpenter_metric_with_a_wrong_label_names_it() -> None:
    from nodeflow.handlers.karpenter_metrics import emit

    with pytest.raises(ValueError, match=r"missing: \['consolidation_type'\], unexpected: \['nodepool'\]"):
        emit("karpenter_voluntary_disruption_decisions_total", 1, decision="delete", reason="empty", nodepool="a")
    with pytest.raises(ValueError, match="unknown Karpenter metric 'karpenter_nope'"):
        emit("karpenter_nope", 1)


def test_nodeclaims_created_are_counted_per_nodepool() -> None:
    script = """
from nodeflow.handlers.karpenter_metrics import record_nodeclaims_created
record_nodeclaims_created(["spot", "default", "spot"])
record_nodeclaims_created([])
"""
    env = {k: v for k, v in os.environ.items() if k != "CLUSTER_NAME"}
    default, spot = _emf_all(script, env)
    (directive,) = spot["_aws"]["CloudWatchMetrics"]  # type: ignore[index]
    assert sorted(directive["Dimensions"][0]) == ["min_values_relaxed", "nodepool", "reason", "service"]
    assert (spot["nodepool"], spot["reason"], spot["min_values_relaxed"]) == ("spot", "provisioned", "false")
    assert spot["karpenter_nodeclaims_created_total"] == [2.0]
    assert default["nodepool"] == "default"
    assert default["karpenter_nodeclaims_created_total"] == [1.0]


def _records(out: str) -> list[dict[str, object]]:
    return [json.loads(x) for x in out.splitlines() if '"_aws"' in x]


def test_interruption_message_types_are_karpenters(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    from nodeflow.handlers.karpenter_metrics import message_type, record_interruption_batch
    from nodeflow.interruption.messages import Deletion, Envelope, Rejected, StateChange, parse_message
    from nodeflow.lifecycle.interruption_handling import Outcome

    monkeypatch.delenv("CLUSTER_NAME", raising=False)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    env = Envelope("e1", "aws.ec2", "EC2 Instance State-change Notification", time=now - timedelta(seconds=4))
    stopping, terminated = (
        StateChange(env, "i-0123456789abcdef0", "stopping"),
        StateChange(env, "i-0123456789abcdef0", "terminated"),
    )
    assert (message_type(stopping), message_type(terminated)) == ("instance_stopped", "instance_terminated")
    assert message_type(Rejected("unknown", "not a kind this queue acts on")) == "no_op"
    assert message_type(Rejected("ignored", "state pending")) == "no_op"
    assert message_type(parse_message("{not json")) is None
    deletion = Deletion(env, "NodeClaim", "default-abc")
    assert message_type(deletion) is None

    seen = [
        ("a", stopping),
        ("b", terminated),
        ("c", deletion),
        ("d", Rejected("unknown", "x")),
        ("e", Rejected("malformed", "y")),
    ]
    failed = Outcome("b", "StateChange", error="Throttled")
    disrupted = Outcome(
        "a", "StateChange", disrupted=[{"karpenter.sh/nodepool": "np", "karpenter.sh/capacity-type": "spot"}]
    )
    record_interruption_batch(seen, [disrupted, failed, Outcome("c", "Deletion")], now)
    by_name: dict[str, list[dict[str, object]]] = {}
    for r in _records(capsys.readouterr().out):
        (metric,) = r["_aws"]["CloudWatchMetrics"][0]["Metrics"]  # type: ignore[index]
        by_name.setdefault(metric["Name"], []).append(r)
    assert by_name["karpenter_nodeclaims_disrupted_total"][0]["reason"] == "instance_stopped"
    assert by_name["karpenter_nodeclaims_disrupted_total"][0]["nodepool"] == "np"
    received = {
        (r["message_type"], r["karpenter_interruption_received_messages_total"][0])
        for r in by_name["karpenter_interruption_received_messages_total"]
    }  # type: ignore[index]
    assert received == {("instance_stopped", 1.0), ("instance_terminated", 1.0), ("no_op", 1.0)}
    # the failed one stays on the queue; the agent's deletion is not counted; the unreadable one is deleted
    (deleted,) = by_name["karpenter_interruption_deleted_messages_total"]
    assert deleted["karpenter_interruption_deleted_messages_total"] == [3.0]
    (duration,) = by_name["karpenter_interruption_message_queue_duration_seconds"]
    assert duration["karpenter_interruption_message_queue_duration_seconds"] == [4.0]


def test_launch_failures_and_disruption_reasons_take_karpenters_values(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodeflow.aws.errors import InsufficientCapacity, Throttled
    from nodeflow.handlers.karpenter_metrics import (
        record_cloudprovider_error,
        record_disruptions,
        record_launch_failure,
    )

    monkeypatch.delenv("CLUSTER_NAME", raising=False)
    labels = {"karpenter.sh/nodepool": "np", "karpenter.sh/capacity-type": "on-demand"}
    record_launch_failure({"Error": "States.Timeout", "Cause": ""}, labels)
    record_launch_failure({"Error": "RegistrationTimeout"}, labels)
    record_launch_failure({"Error": "LaunchFailed"}, labels)  # Karpenter retries those: not a disruption
    record_launch_failure({"Error": "NoCapacity"}, None)  # the NodeClaim was gone already
    record_disruptions([("Underutilized", labels), ("Drifted", labels), ("Underutilized", labels)])
    record_cloudprovider_error("Create", InsufficientCapacity("none left"))
    record_cloudprovider_error("Create", Throttled("slow down"))
    out = _records(capsys.readouterr().out)
    disrupted = [
        (r["reason"], r["karpenter_nodeclaims_disrupted_total"])
        for r in out
        if "karpenter_nodeclaims_disrupted_total" in r
    ]
    assert disrupted == [
        ("launch_timeout", [1.0]),
        ("registration_timeout", [1.0]),
        ("drifted", [1.0]),
        ("underutilized", [2.0]),
    ]
    errors = [r for r in out if "karpenter_cloudprovider_errors_total" in r]
    assert errors[0]["error"] == "InsufficientCapacityError"
    # an error Karpenter does not classify has an empty label: no dimension
    assert "error" not in errors[1]
    assert errors[1]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service", "controller", "method", "provider"]]  # type: ignore[index]
