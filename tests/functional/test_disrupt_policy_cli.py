"""`python -m nodeflow disrupt --dry-run -f ...` with a NodeflowPolicy pause window (text and JSON): during the
window the drifted node is reported blocked with the window (nodePools [general] or ["*"], every NodePool), after it
the node is replaced; a window or a NodePool duration nodeflow cannot evaluate is an `error:` naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("pools", ["[general]", '["*"]'])
def test_a_pause_window_blocks_the_drift_until_it_closes(tmp_path: Path, pools: str) -> None:
    policy = tmp_path / "freeze.yaml"
    policy.write_text(FREEZE.replace("[general]", pools))
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


@pytest.mark.parametrize(
    ("file", "old", "new", "field"),
    [
        ("policy", "duration: 3h", "duration: 20000000h", "spec.pauses[0].duration"),
        ("policy", "duration: 3h", "duration: 99999999999h", "spec.pauses[0].duration"),
        ("nodepool", "consolidateAfter: 30s", "consolidateAfter: 99999999999h", "spec.disruption.consolidateAfter"),
    ],
)
def test_a_duration_nodeflow_cannot_evaluate_is_an_error_naming_the_field(
    tmp_path: Path, file: str, old: str, new: str, field: str
) -> None:
    texts = {"policy": FREEZE, "nodepool": (EXAMPLES / "nodepool.yaml").read_text()}
    assert old in texts[file]
    texts[file] = texts[file].replace(old, new)
    paths = []
    for name, text in texts.items():
        paths += ["-f", str(tmp_path / f"{name}.yaml")]
        (tmp_path / f"{name}.yaml").write_text(text)
    result = disrupt("--dry-run", *paths, "-f", str(EXAMPLES / "drifted.yaml"), "--now", DURING)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ")
    assert f"{field}: " in result.stderr
