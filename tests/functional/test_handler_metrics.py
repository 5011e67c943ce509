"""The handlers' Powertools metrics carry the cluster as a dimension (clusters sharing an account do not
mix), and the dashboard and alarms read them with the same dimensions."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
