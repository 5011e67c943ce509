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
