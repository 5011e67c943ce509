"""benchmarks.all: runs benchmark modules as subprocesses and prints one table with the issue 18 targets.

Not timed: the figures are whatever this machine gives; the test checks the table and the target bookkeeping."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import all as bench_all

ROOT = Path(__file__).resolve().parents[2]


def quick_run(name: str, logs: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``benchmarks.all --quick --only NAME`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.all", "--quick", "--only", name, "--logs", str(logs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_quick_only_imports_runs_it_and_prints_one_table(tmp_path: Path) -> None:
    done = quick_run("imports", tmp_path, 120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    header = [i for i, line in enumerate(lines) if line.startswith("| benchmark ")]
    assert len(header) == 1, done.stdout
    cells = [c.strip() for c in lines[header[0]].strip("|").split("|")]
    assert cells == ["benchmark", "case", "metric", "value", "target", "met?"]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in lines[header[0] + 2 :]]
    assert body, done.stdout
    (row,) = body
    assert row[:3] == ["imports", "taint (with .pyc)", "import"]
    assert 0 < float(row[3]) < 60
    assert row[4:] == ["<= 0.5 s", "yes" if float(row[3]) <= 0.5 else "NO"]
    assert "--json" in (tmp_path / "imports.log").read_text().splitlines()[0]


def test_an_unknown_benchmark_is_named() -> None:
    with pytest.raises(SystemExit):
        bench_all.main(["--only", "imports,nosuch"])


def test_targets_apply_by_benchmark_metric_and_case() -> None:
    plan = bench_all.targeted("plan_scale", {"case": "20000 pods as Pods", "metric": "total/solve", "value": 2.5})
    assert (plan["target"], plan["met"]) == ("<= 2x", "NO")
    other = bench_all.targeted("plan_scale", {"case": "20000 pods as Pods", "metric": "solve", "value": 0.6})
    assert (other["target"], other["met"]) == ("", "")
    batch = bench_all.targeted(
        "solver_parity", {"case": "batch, 300 pods", "metric": "plan / best bound", "value": 1.04}
    )
    web = bench_all.targeted("solver_parity", {"case": "web, 2000 pods", "metric": "plan / best bound", "value": 1.09})
    assert (batch["met"], web["target"]) == ("yes", "")
    own = bench_all.targeted("snapshot", {"case": "c", "metric": "LIST calls", "value": 16, "target": 15})
    assert (own["target"], own["met"]) == ("<= 15", "NO")


def test_the_last_json_value_is_read_after_a_table() -> None:
    assert bench_all.last_json('table\n| a |\n[{"metric": "m", "value": 1}]\n') == [{"metric": "m", "value": 1}]
    assert bench_all.last_json('x\n{\n  "cost": [\n    1\n  ]\n}\n') == {"cost": [1]}
    with pytest.raises(ValueError, match="no JSON"):
        bench_all.last_json("just a table\n")


def test_every_benchmark_module_takes_json() -> None:
    for bench in bench_all.BENCHMARKS:
        source = (ROOT / "benchmarks" / f"{bench.module or bench.name}.py").read_text()
        assert '"--json"' in source, bench.name


def test_governance_benchmark_roomy_policies_plan_as_none() -> None:
    """benchmarks.governance at its smoke size: policies that bind nothing give the plan without policies, binding
    ones stop NodeClaims (less $/hour), and the decision log's records are counted."""
    from benchmarks import governance

    row = governance.measure(1000, 1)
    none, roomy, binding = row["none"], row["roomy"], row["binding"]
    assert (roomy["nodeClaims"], roomy["pricePerHour"]) == (none["nodeClaims"], none["pricePerHour"])
    assert binding["pricePerHour"] < none["pricePerHour"]
    assert row["decisionLog"]["items"] > row["decisionLog"]["records"] > binding["nodeClaims"]
    rows = bench_all._governance({"1000": row})
    assert {r["metric"] for r in rows} == {"input + solve", "roomy / none", "decision records build"}


def test_pause_windows_benchmark_measures_and_reports_a_refused_duration() -> None:
    """benchmarks.pause_windows at a smoke size (the figures are the machine's; the README quotes a full run)."""
    from benchmarks import pause_windows

    row = pause_windows.measure(windows=5, pools=3, duration="8784h", repeat=1)
    assert set(row) == {"pauses", "provisioner", "provisioner without the policy"}
    assert all(v > 0 for v in row.values())
    assert "longer than 8784h" in pause_windows.measure(windows=1, pools=1, duration="99999h", repeat=1)["refused"]


def test_decision_log_benchmark_runs_the_provisioner_with_the_log_off_and_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks.decision_log at a smoke size: both runs plan the same NodeClaims, the log's run writes every item
    of its records in BatchWriteItem calls of at most 25, and the AWS model counts the same calls."""
    from benchmarks import decision_log

    for name, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_DEFAULT_REGION", decision_log.REGION)
    out = decision_log.measure(200, 1, None, 10.0)
    on = out["on"]
    assert out["nodeClaims"] > 0
    assert on["written"] == on["items"] > on["records"] > out["nodeClaims"]
    assert on["failed"] == 0
    assert on["requests"] == out["model"]["batchWriteCalls"] == -(-on["items"] // 25)
    assert on["writeUnits"] >= on["items"]


def test_the_consolidation_benchmark_runs_the_disruption_module_and_reports_its_ratio_and_evictions(
    tmp_path: Path,
) -> None:
    """issue 31's consolidation targets: benchmarks.disruption's applied rounds, under their own name."""
    done = quick_run("consolidation", tmp_path, 300)
    log = (tmp_path / "consolidation.log").read_text()
    assert "-m benchmarks.disruption " in log.splitlines()[0], log[:300]
    rows = {
        cells[2]: cells
        for line in done.stdout.splitlines()
        if line.startswith("| consolidation ")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert set(rows) == {"after / from scratch", "pods evicted per $/h saved", "decide CPU a round"}, done.stdout
    assert rows["after / from scratch"][4] == "<= 1.1x"
    assert rows["pods evicted per $/h saved"][4] == "<= 26.5"
    assert float(rows["after / from scratch"][3]) >= 0.5
