"""`make demo` as a user runs it: the provisioning path, a spot interruption and consolidation (emptiness, and a
replace whose pod the simulated scheduler moves) end to end, in a fresh process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_provisions_every_pending_pod() -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'functions'}{os.pathsep}{ROOT}"}
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "KUBECONFIG"):
        env.pop(key, None)
    proc = subprocess.run(
        [sys.executable, "-m", "sandbox.demo"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "16 pods Pending" in out
    launched = re.findall(
        r"^  default-\w{5} +ip-\S+ +(\S+) +(us-east-1\w) +(spot|on-demand) +(\d+) +([\d.]+)$", out, re.M
    )
    assert launched, out
    assert sum(int(row[3]) for row in launched) == 16  # every pending pod has a node
    launch_traces = re.findall(r"^execution nodeflow-demo-launch:\S+: SUCCEEDED in ", out, re.M)
    assert len(launch_traces) == len(launched)
    # the spot interruption, end to end
    assert re.search(r"^execution nodeflow-demo-terminate:default-\w{5}: SUCCEEDED in ", out, re.M), out
    for state in ("Taint", "Drain", "Terminate", "RemoveFinalizer"):
        assert re.search(rf"^ *\d+ +{state} +Task ", out, re.M), state
    assert re.search(r"terminate SUCCEEDED: node drained, instance i-\w+ (terminated|shutting-down)", out)
    assert "offering marked unavailable: yes" in out
    assert re.search(r"\d+ evicted pods came back Pending -> agent -> provisioner -> default-\w{5} ", out)
    # consolidation after scaling shop/web to zero: empty nodes go, one per round (10% budget)
    assert "Deployment shop/web scaled to 0" in out
    assert re.search(r"round 1: emptiness \(Empty\): ip-\S+ -> delete, saves \$[\d.]+/hour", out), out
    saved = re.search(r"(\d+) empty nodes removed: \d+ nodes, \$[\d.]+/hour \(saved \$([\d.]+)/hour\)", out)
    assert saved, out
    assert int(saved.group(1)) >= 1
    assert float(saved.group(2)) > 0
    # consolidation that moves pods: an underused on-demand node replaced, its pod moved by the simulated scheduler
    assert re.search(r"single-node consolidation \(Underutilized\): ip-\S+ -> replace, saves \$[\d.]+/hour", out), out
    assert re.search(r"^execution nodeflow-demo-replace:\S+: SUCCEEDED in ", out, re.M), out
    assert re.search(r"^ *\d+ +TerminateCandidates +Task ", out, re.M), out
    moved = re.search(
        r"replace SUCCEEDED: (ip-\S+) tainted karpenter.sh/disrupted, replacement default-\w{5} -> (ip-\S+) "
        r"\(\S+, on-demand\) initialized, (ip-\S+) drained and terminated\n"
        r"  1 evicted pod recreated by its ReplicaSet, bound by the scheduler to (ip-\S+), Running [\d.]+ s after the round; "
        r"\$[\d.]+/hour \(saved \$([\d.]+)/hour\)",
        out,
    )
    assert moved, out
    assert moved.group(1) == moved.group(3) != moved.group(2) == moved.group(4)
    assert float(moved.group(5)) > 0
    assert "Launch " in out
    assert "Initialized " in out
    # the decision log: written by the provisioner and the disruption Lambda, where to read it is printed
    logged = re.search(r"^decision log: (\d+) records in table nodeflow-demo-decisions \((.*)\)", out, re.M)
    assert logged, out
    assert int(logged.group(1)) > 0
    for kind in ("provisioning", "nodeclaim", "disruption"):
        assert re.search(rf"\b\d+ {kind}\b", logged.group(2)), logged.group(0)
    assert "read them with: python -m nodeflow decisions --stack Nodeflow-demo --since 1h" in out
    assert re.search(r"demo finished in [\d.]+ s: OK", out)
