"""Decision metrics under Karpenter's metric and label names, as CloudWatch metrics (Powertools EMF).

Each sample is its own EMF record (``single_metric``) in the ``nodeflow`` namespace, its labels as dimensions next
to ``service`` and ``cluster`` (``CLUSTER_NAME``), so one metric's label values do not leak into another's.
CloudWatch refuses an empty dimension value: an empty label (e.g. ``consolidation_type`` of a drift decision) is
left out of the dimensions instead.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit, single_metric

__all__ = [
    "KARPENTER_METRICS",
    "NAMESPACE",
    "emit",
    "record_disruption_decision",
    "record_nodeclaims_created",
    "record_scheduling_duration",
]

NAMESPACE = "nodeflow"

#: name -> (unit, label names), as Karpenter names them
KARPENTER_METRICS: dict[str, tuple[MetricUnit, tuple[str, ...]]] = {
    "karpenter_nodeclaims_created_total": (MetricUnit.Count, ("reason", "nodepool", "min_values_relaxed")),
    "karpenter_voluntary_disruption_decisions_total": (
        MetricUnit.Count,
        ("decision", "reason", "consolidation_type"),
    ),
    "karpenter_scheduler_scheduling_duration_seconds": (MetricUnit.Seconds, ("controller",)),
}

#: nodeflow's disruption method -> Karpenter's consolidation_type label
_CONSOLIDATION_TYPE = {
    "emptiness": "empty",
    "single-node consolidation": "single",
    "multi-node consolidation": "multi",
}


def emit(name: str, value: float, **labels: str) -> None:
    """One sample of a Karpenter metric; ValueError names an unknown metric or a missing / unexpected label."""
    if name not in KARPENTER_METRICS:
        raise ValueError(f"unknown Karpenter metric {name!r} (known: {', '.join(sorted(KARPENTER_METRICS))})")
    unit, names = KARPENTER_METRICS[name]
    if set(labels) != set(names):
        missing, extra = sorted(set(names) - set(labels)), sorted(set(labels) - set(names))
        raise ValueError(f"{name}: labels must be {', '.join(names)} (missing: {missing}, unexpected: {extra})")
    dimensions = {"service": NAMESPACE}
    if cluster := os.environ.get("CLUSTER_NAME", "").strip():
        dimensions["cluster"] = cluster
    dimensions.update({k: v for k, v in labels.items() if v})
    with single_metric(name=name, unit=unit, value=value, namespace=NAMESPACE, default_dimensions=dimensions):
        pass


def record_disruption_decision(command: Mapping[str, Any]) -> None:
    """A voluntary disruption command that was executed (its ``to_json()`` form)."""
    emit(
        "karpenter_voluntary_disruption_decisions_total",
        1,
        decision=str(command["decision"]),
        reason=str(command["reason"]).lower(),
        consolidation_type=_CONSOLIDATION_TYPE.get(str(command.get("method") or ""), ""),
    )


def record_scheduling_duration(seconds: float, controller: str) -> None:
    """How long a scheduling simulation took (``controller``: ``provisioner`` or ``disruption``)."""
    emit("karpenter_scheduler_scheduling_duration_seconds", seconds, controller=controller)


def record_nodeclaims_created(nodepools: Iterable[str]) -> None:
    """NodeClaims the provisioner created, one NodePool name each (nodeflow never relaxes minValues on a
    NodeClaim it writes, so ``min_values_relaxed`` is ``false``)."""
    for pool, count in sorted(Counter(nodepools).items()):
        emit(
            "karpenter_nodeclaims_created_total", count, reason="provisioned", nodepool=pool, min_values_relaxed="false"
        )
