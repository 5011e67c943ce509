"""Karpenter's pod eviction metrics from the terminate workflow's Drain step, run for real (the real terminate
workflow in moto, handlers in-process, the real control plane), read back as CloudWatch EMF records:
``karpenter_pods_eviction_requests_total{code}`` per eviction response (200 accepted, 429 refused by a
PodDisruptionBudget), checked against the eviction requests the API server received, and
``karpenter_pods_drained_total{reason}`` per pod evicted: the voluntary disruption reason the termination was
started for, else Karpenter v1.14.1's ``Forceful Termination``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from sandbox.nodeflow import LocalNodeflow
from tests.functional.termination.conftest import eventually, launch, replacement
from tests.functional.termination.test_terminate_workflow import claim_of, evictions, finished, visits
from tests.functional.test_karpenter_event_metrics import every


def _budget(app: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
    }


def _sums(samples: list[dict[str, Any]], label: str) -> dict[str, float]:
    out: Counter[str] = Counter()
    for s in samples:
        out[s[label]] += s["_value"]
    return dict(out)


def test_eviction_requests_are_counted_by_response_code_and_drained_pods_by_reason(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    node = launch(local, "db", 1)
    (db,) = node.pods
    local.apply([_budget("db")])
    capfd.readouterr()
    arn = local.terminate(node.claim, reason="Drifted")
    eventually(lambda: visits(local, arn, "Drain") >= 3, what="the drain to poll while blocked")
    replacement(local, "db")  # the workload scales up; once its new pod runs elsewhere the budget allows one
    eventually(lambda: claim_of(local, node.claim) is None, timeout=60, what="the termination to finish")
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_terminations())
    emitted = every(capfd)

    requests = emitted["karpenter_pods_eviction_requests_total"]
    asked = evictions(local).count(db)
    assert asked >= 3  # refused at least twice, then let through
    assert _sums(requests, "code") == {"200": 1.0, "429": float(asked - 1)}
    assert {s["_unit"] for s in requests} == {"Count"}
    assert requests[0]["_dimensions"] == ["cluster", "code", "service"]
    drained = emitted["karpenter_pods_drained_total"]
    assert [(s["reason"], s["_value"], s["_unit"]) for s in drained] == [("Drifted", 1.0, "Count")]
    assert drained[0]["_dimensions"] == ["cluster", "reason", "service"]


def test_pods_of_a_node_terminated_for_another_reason_are_drained_for_forceful_termination(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    node = launch(local, "web", 2)
    capfd.readouterr()
    assert finished(local, local.terminate(node.claim, reason="Expired"))["status"] == "SUCCEEDED"
    emitted = every(capfd)
    assert _sums(emitted["karpenter_pods_eviction_requests_total"], "code") == {"200": 2.0}
    assert _sums(emitted["karpenter_pods_drained_total"], "reason") == {"Forceful Termination": 2.0}
