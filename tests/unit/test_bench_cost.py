"""benchmarks.cost (what running nodeflow costs, docs/cost.md) and its arithmetic, benchmarks.cost_model.

The arithmetic is checked on made-up counts; the benchmark itself runs once at its smallest (``--quick``: the real
control plane, moto, the agent; about 1.5 minutes) and its counts are checked against what one node's life must
make nodeflow do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import cost, cost_model
from benchmarks.all import last_json
from benchmarks.cost_model import Churn, StackFacts

ROOT = Path(__file__).resolve().parents[2]

FACTS = StackFacts(
    memory_mb={"disruption": 2048, "provisioner": 2048, "gc": 512, "interruption": 512, "webhook": 512, "launch": 1024},
    schedules_per_hour={"disruption": 60.0, "gc": 30.0, "interruption": 60.0},
    queue_mappings=3,
    alarms=0,
    dashboards=0,
    secrets=0,
    validation_seconds=15.0,
    in_vpc=False,
)


def _measured(**override: Any) -> dict[str, Any]:
    """Counts shaped as benchmarks.cost.measure returns them."""
    one = lambda fn, s: {"invocations": {fn: 1}, "billedSeconds": {fn: s}}  # noqa: E731
    out: dict[str, Any] = {
        "launch": {
            "invocations": {"provisioner": 1, "launch": 1},
            "billedSeconds": {"provisioner": 0.2, "launch": 0.3},
        },
        "lifecycle": {
            "invocations": {"provisioner": 1, "launch": 1, "webhook": 4, "disruption": 2},
            "billedSeconds": {"provisioner": 0.2, "launch": 0.3, "webhook": 0.4, "disruption": 0.4},
            "batches": {"disruption": 2},
            "commands": 1,
            "transitions": 12,
            "writeUnits": 40,
            "events": 10,
            "messages": {"disruption": 4},
            "logBytes": {"launch": 1000},
        },
        "pod": {"invocations": {"webhook": 2}, "billedSeconds": {"webhook": 0.2}, "events": 2},
        "resync": {},
        "scheduled": {
            "disruption": one("disruption", 0.2),
            "gc": one("gc", 0.1),
            "interruption": one("interruption", 0.05),
        },
        "burst": {"invocations": {"provisioner": 1}, "billedSeconds": {"provisioner": 0.5}},
        "burstNodes": 10,
        "clusterNodes": {"small": 1},
        "metrics": ["a", "b"],
        "workflowFunctions": ["launch"],
    }
    out.update(override)
    return out


def test_gc_and_interruption_grow_by_the_disruption_rounds_growth_not_by_extrapolation() -> None:
    """The scheduled gc run at 1,000 nodes: its one-node duration plus what the disruption round gains from one node
    to 1,000 (the WIP extrapolated a 2-point slope measured at 1 and 3 nodes on a loaded machine: 772 s a run)."""
    scale = {"10": 0.03, "100": 0.2, "1000": 2.0}
    noisy = {  # gc measured again at 3 nodes while the machine was busy: no slope to draw from it
        "scheduledLarge": {"gc": {"invocations": {"gc": 1}, "billedSeconds": {"gc": 2.1}}},
        "clusterNodes": {"small": 1, "large": 3},
    }
    row = cost_model.monthly(1000, _measured(**noisy), FACTS, Churn(0.0, 0.0), scale)
    growth = 2.0 - 0.003  # at 1,000 nodes minus at 1 node (linear below the smallest size measured)
    assert row["lambdaByFunction"]["gc"]["secondsPerHour"] == pytest.approx(30 * (0.1 + growth))
    assert row["lambdaByFunction"]["interruption"]["secondsPerHour"] == pytest.approx(60 * (0.05 + growth))
    assert row["usage"]["disruptionRoundSeconds"] == pytest.approx(0.2 + growth)


def test_an_idle_cluster_pays_its_schedules_and_nothing_of_a_lifecycle() -> None:
    row = cost_model.monthly(100, _measured(), FACTS, Churn(0.0, 0.0))
    invoked = {fn for fn, f in row["lambdaByFunction"].items() if f["invocationsPerHour"] > 0}
    assert invoked == {"disruption", "gc", "interruption"}
    assert row["usage"]["lambdaRequests"] == pytest.approx(150 * cost_model.HOURS_PER_MONTH, rel=1e-3)
    assert row["usage"]["writeUnits"] == row["usage"]["stateTransitions"] == 0
    busy = cost_model.monthly(100, _measured(), FACTS, Churn(0.1, 20.0))
    lifecycles = 100 * 0.1 * cost_model.DAYS_PER_MONTH
    assert busy["usage"]["stateTransitions"] == pytest.approx(12 * lifecycles)
    assert busy["usage"]["writeUnits"] == pytest.approx(40 * lifecycles)
    assert busy["total"] > row["total"]


def test_an_agent_resync_round_is_charged_every_five_minutes() -> None:
    resync = {"invocations": {"webhook": 1}, "billedSeconds": {"webhook": 0.1}, "events": 1}
    row = cost_model.monthly(10, _measured(resync=resync), FACTS, Churn(0.0, 0.0))
    assert row["lambdaByFunction"]["webhook"]["invocationsPerHour"] == pytest.approx(12)
    assert row["usage"]["events"] == pytest.approx(12 * cost_model.HOURS_PER_MONTH)


def test_disruption_rounds_absorb_what_arrives_while_busy() -> None:
    assert cost_model.disruption_rounds_per_second(0.5, 0.0) == 0.5
    assert cost_model.disruption_rounds_per_second(1000.0, 2.0) == pytest.approx(0.5, rel=1e-3)
    assert cost_model.disruption_rounds_per_second(0.0, 2.0) == 0.0


def test_unit_figures_are_the_billed_quantities_of_one_tally() -> None:
    got = cost_model.unit_figures(_measured()["lifecycle"], FACTS)
    assert got["lambdaRequests"] == 8
    assert got["lambdaGbSeconds"] == pytest.approx(0.2 * 2 + 0.3 * 1 + 0.4 * 0.5 + 0.4 * 2)
    assert got["sqsRequests"] == 4 + 2 * 2  # a SendMessage per message; Receive + DeleteBatch per batch
    assert got["logBytes"] == 1000 + 8 * cost_model.PLATFORM_LOG_BYTES


def test_billed_units_of_dynamodb_eventbridge_and_sqs_calls() -> None:
    item = {"pk": {"S": "x" * 1500}}
    assert cost_model.billed_units("dynamodb", "PutItem", {"Item": item}, None) == {"writeUnits": 2.0}
    assert cost_model.billed_units("dynamodb", "GetItem", {}, {"Item": item}) == {"readUnits": 0.5}
    entries = [
        {"Source": "s", "DetailType": "d", "Detail": "{}"},
        {"Source": "s", "DetailType": "d", "Detail": "x" * 70000},
    ]
    assert cost_model.billed_units("events", "PutEvents", {"Entries": entries}, None) == {"events": 3.0}
    assert cost_model.billed_units("sqs", "ReceiveMessage", {}, None) == {"sqsRequests": 1.0}
    assert cost_model.billed_units("ec2", "RunInstances", {}, None) == {}


def test_the_figures_are_written_between_the_markers_and_only_there(tmp_path: Path) -> None:
    doc = tmp_path / "cost.md"
    doc.write_text(f"# head\n{cost.BEGIN}\nold\n{cost.END}\ntail\n")
    cost.write_markdown(doc, "| new |", "python -m benchmarks.cost")
    text = doc.read_text()
    assert text.startswith("# head\n")
    assert text.endswith(f"{cost.END}\ntail\n")
    assert "old" not in text
    assert "| new |" in text
    assert "Made by `python -m benchmarks.cost`" in text
    doc.write_text("# no markers\n")
    with pytest.raises(ValueError, match="markers"):
        cost.write_markdown(doc, "x", "c")


def test_docs_cost_md_has_the_markers() -> None:
    text = (ROOT / "docs" / "cost.md").read_text()
    assert text.count(cost.BEGIN) == text.count(cost.END) == 1


def test_quick_run_counts_one_node_life_through_both_workflows() -> None:
    """``python -m benchmarks.cost --quick`` at its smallest: the run completes, and one node's lifecycle went through
    the launch workflow and the terminate workflow once each, their functions invoked, no function erred."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.cost", "--quick", "--no-scale", "--sizes", "10", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = last_json(done.stdout)
    life = out["measured"]["lifecycle"]
    assert life["executions"] == {"launch": 1, "terminate": 1}
    # (Initialize too, unless Register found the node ready and initialized it itself: launch.asl.json)
    for fn in ("provisioner", "launch", "register", "taint", "drain", "terminate", "finalize"):
        assert life["invocations"].get(fn, 0) >= 1, (fn, life["invocations"])
    assert 0 < life["commands"] <= 1  # an Empty decision (one may cover every node launched)
    assert life["invocations"]["interruption"] >= 1  # EC2's state-change events reached the interruption queue
    assert life["transitions"] > 0
    assert life["writeUnits"] > 0
    assert life["events"] > 0
    assert out["measured"]["burst"]["invocations"]["provisioner"] >= 1  # its 2 nodes launched
    assert out["measured"]["resync"].get("invocations", {}) == {}  # a resync with nothing pending posts nothing
    assert out["measured"]["errors"] == {}
    (row,) = out["table"]
    assert row["nodes"] == 10
    assert row["nodeflow"] > row["total"] > 0  # the agent pod on top of the AWS services
    assert "| nodes | nodes replaced / day |" in done.stdout
    json.dumps(out)  # all of it serializable


def test_the_command_written_into_the_doc_leaves_out_where_the_figures_go() -> None:
    argv = ["--sizes", "10,100", "--markdown", "docs/cost.md", "--json", "--markdown=x.md"]
    assert cost._command(argv) == ".venv/bin/python -m benchmarks.cost --sizes 10,100"


def test_bench_all_lists_nodeflow_with_its_agent_pod_and_karpenter() -> None:
    from benchmarks import all as bench_all

    data = {"table": [{"nodes": 10, "total": 2.0, "nodeflow": 3.5}], "karpenter": {"ec2Monthly": 59.5}}
    assert bench_all._cost(data) == [
        {"case": "10 nodes", "metric": "nodeflow USD a month", "value": 3.5},
        {"case": "any size", "metric": "Karpenter USD a month", "value": 59.5},
    ]
    assert "cost" in bench_all.NAMES
