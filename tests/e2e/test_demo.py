"""The demo scenario as a user runs it: `python -m nodeflow plan -f examples/demo` in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "functions")}
    return subprocess.run(
        [sys.executable, "-m", "nodeflow", "plan", "-f", str(ROOT / "examples" / "demo"), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


def test_demo_plan_table() -> None:
    proc = _run()
    assert proc.returncode == 0, proc.stderr
    assert "TOTAL: " in proc.stdout
    assert "gpu: did not tolerate taint nvidia.com/gpu=true:NoSchedule" in proc.stdout


def test_demo_plan_json() -> None:
    proc = _run("-o", "json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    pools = {nc["nodePool"] for nc in plan["nodeClaims"]}
    assert pools == {"default", "gpu"}
    placed = sum(len(nc["pods"]) for nc in plan["nodeClaims"]) + sum(len(n["pods"]) for n in plan["existingNodes"])
    # 12 web + 4 api + 3 report + 1 trainer are placed; the notebook has no toleration.
    assert placed == 20
    assert [u["pods"] for u in plan["unschedulable"]] == [["ml/notebook"]]
