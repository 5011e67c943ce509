"""`python -m nodeflow disrupt --dry-run` with consolidationPolicy Balanced (examples/disruption/balanced.yaml):
the moves Balanced rejects and why, the score of a move it takes, text and JSON."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from nodeflow import cli
from tests.functional.test_disrupt_cli import EXAMPLES, NOW, disrupt

BALANCED = (EXAMPLES / "balanced.yaml").read_text()
REJECTED = {
    "balanced-full": "Balanced consolidation rejected the replace (saving $0.0200/h): NodePool balanced: "
    "score 0.29 < threshold 0.50 (k: 2, savings 5.2%, disruption 18.2%)",
    "balanced-busy": "Balanced consolidation rejected the replace (saving $0.1060/h): NodePool balanced: "
    "score 0.34 < threshold 0.50 (k: 2, savings 27.6%, disruption 81.8%)",
}


def _run(tmp_path: Path, text: str, *extra: str) -> str:
    """The CLI in-process (``cli.main``, as ``python -m nodeflow`` runs it; the first test runs the subprocess)."""
    case = tmp_path / "case.yaml"
    case.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    argv = ["disrupt", "--dry-run", "-f", str(EXAMPLES / "nodepool.yaml"), "-f", str(case), "--now", NOW, *extra]
    assert cli.main(argv, out, err) == 0, err.getvalue()
    return out.getvalue()


def _json(tmp_path: Path, text: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(_run(tmp_path, text, "-o", "json"))
    return out


def test_balanced_rejections_say_why(tmp_path: Path) -> None:
    proc = disrupt(
        "--dry-run", "-f", str(EXAMPLES / "nodepool.yaml"), "-f", str(EXAMPLES / "balanced.yaml"), "--now", NOW
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "nothing to disrupt now" in text
    for node, message in REJECTED.items():
        assert f"Unconsolidatable {node}: {message}" in text
    result = _json(tmp_path, BALANCED)
    assert result["command"] is None
    assert {b["node"]: b["message"] for b in result["blocked"]} == REJECTED


def test_under_when_empty_or_underutilized_the_node_saving_most_per_eviction_is_replaced(tmp_path: Path) -> None:
    result = _json(
        tmp_path, BALANCED.replace("consolidationPolicy: Balanced", "consolidationPolicy: WhenEmptyOrUnderutilized")
    )
    command = result["command"]
    # Karpenter's multi-node consolidation would pack both nodes' nine pods on one m5a.2xlarge ($0.344 < 2 x $0.192:
    # 10.4% saved for every pod of the NodePool, score 0.10); nodeflow's replace bar (1/4.5) refuses that, and
    # single-node consolidation replaces balanced-full alone: one pod moved for $0.02/h (score 0.29, which Balanced's
    # 1/2 still rejects above)
    assert command["decision"] == "replace"
    assert command["method"] == "single-node consolidation"
    assert command["candidates"] == ["balanced-full"]
    assert [m["pod"] for m in command["moves"]] == ["default/balanced-cache-0"]
    assert command["savedPerHour"] == 0.02
    assert "balanced" not in command  # only Balanced moves carry scores
    assert result["blocked"] == []


def test_without_the_replace_bar_both_nodes_are_packed_on_one_as_karpenter_does(tmp_path: Path) -> None:
    text = BALANCED.replace("consolidationPolicy: Balanced", "consolidationPolicy: WhenEmptyOrUnderutilized")
    result: dict[str, Any] = json.loads(_run(tmp_path, text, "-o", "json", "--replace-bar-k", "0"))
    command = result["command"]
    # both nodes together on one cheaper node (m5a.2xlarge, $0.344 < 2 x $0.192), as Karpenter's multi-node
    # consolidation packs their pods (the cost-sized simulation alone wanted two new nodes)
    assert command["candidates"] == ["balanced-full", "balanced-busy"]
    assert command["method"] == "multi-node consolidation"
    assert len(command["replacements"]) == 1


def test_a_replace_bar_that_is_no_number_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = tmp_path / "case.yaml"
    case.write_text(BALANCED)
    out, err = io.StringIO(), io.StringIO()
    argv = ["disrupt", "--dry-run", "-f", str(case), "--now", NOW, "--replace-bar-k", "-1"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv, out, err)
    assert exit_.value.code == 2
    assert out.getvalue() == ""
    assert (
        "argument --replace-bar-k: must be a finite number, 0 or more, got '-1'"
        in capsys.readouterr().err + err.getvalue()
    )


def test_a_move_balanced_takes_shows_its_score(tmp_path: Path) -> None:
    small = BALANCED.replace("cpu: 3500m, memory: 12Gi", "cpu: 500m, memory: 1Gi")  # the big pod shrank
    assert small != BALANCED
    command = _json(tmp_path, small)["command"]
    (score,) = command["balanced"]
    assert score["nodepool"] == "balanced"
    assert score["approved"] is True
    assert score["k"] == 2
    assert score["threshold"] == 0.5
    assert score["score"] >= 0.5
    assert score["savedPerHour"] == command["savedPerHour"]
    assert score["savingsFraction"] == round(command["savedPerHour"] / score["nodePoolPricePerHour"], 6)
    text = _run(tmp_path, small)
    assert f"  Balanced NodePool balanced: score {score['score']:.2f} >= threshold 0.50 (k: 2, savings " in text
