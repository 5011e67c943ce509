"""`python -m nodeflow disrupt --dry-run -f ...` with a NodeflowPolicy pause window (text and JSON): during the
window the drifted node is reported blocked with the window, after it the node is replaced."""

from __future__ import annotations

import json
from pathlib import Path

from tests.functional.test_disrupt_cli import EXAMPLES, disrupt

FREEZE = """\
apiVersion: nodeflow.io/v1alpha1
kind: NodeflowPolicy
metadata: {name: freeze}
spec:
  pauses:
  - name: saturday-maintenance
    schedule: "0 11 * * 6"
    duration: 3h
    disruption: true
    nodePools: [general]
"""
DURING = "2026-11-21T12:00:00Z"  # a Saturday: the window is open 11:00-14:00
AFTER = "2026-11-21T14:00:00Z"
MESSAGE = (
    "disruption paused for NodePool general by policy freeze: window saturday-maintenance (0 11 * * 6 for 3h) "
    "until 2026-11-21T14:00:00Z"
)


def test_a_pause_window_blocks_the_drift_until_it_closes(tmp_path: Path) -> None:
    policy = tmp_path / "freeze.yaml"
    policy.write_text(FREEZE)
    files = ("-f", str(EXAMPLES / "nodepool.yaml"), "-f", str(EXAMPLES / "drifted.yaml"), "-f", str(policy))
    text = disrupt("--dry-run", *files, "--now", DURING)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == ["nothing to disrupt now", f"DisruptionBlocked old-ami-1: {MESSAGE}"]
    as_json = disrupt("--dry-run", *files, "--now", DURING, "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    result = json.loads(as_json.stdout)
    assert result["command"] is None
    assert result["blocked"] == [{"node": "old-ami-1", "event": "DisruptionBlocked", "message": MESSAGE}]
    after = disrupt("--dry-run", *files, "--now", AFTER)
    assert after.returncode == 0, after.stderr
    assert after.stdout.startswith("REPLACE old-ami-1 (Drifted, drift)")
