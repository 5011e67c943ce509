"""`make demo` as a user runs it: the provisioning path end to end in a fresh process."""

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
    assert out.count(": SUCCEEDED in ") == len(launched)
    assert "Launch " in out
    assert "Initialized " in out
    assert re.search(r"demo finished in [\d.]+ s: OK", out)
