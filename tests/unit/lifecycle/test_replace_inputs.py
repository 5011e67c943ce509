"""The replace workflow's step input: a malformed state names the field (the step fails into Rollback /
ReplaceFailed; nothing is half-done)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.handlers.common import InvalidInput, parse
from nodeflow.handlers.replace import ReplaceStep

GOOD: dict[str, Any] = {
    "action": "check",
    "replace": {
        "reason": "Underutilized",
        "candidates": [{"node": "ip-10-0-0-1.ec2.internal", "nodeClaim": "default-abcde"}],
        "replacements": ["default-fghij"],
        "deadline": "2026-11-21T12:00:00+00:00",
    },
}


def test_the_workflow_state_parses() -> None:
    step = parse(ReplaceStep, GOOD)
    assert step.action == "check"
    assert step.replace.candidates[0].node_claim == "default-abcde"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"action": "explode"}, "action"),
        ({"replace": {**GOOD["replace"], "candidates": []}}, "candidates"),
        ({"replace": {**GOOD["replace"], "replacements": []}}, "replacements"),
        ({"replace": {k: v for k, v in GOOD["replace"].items() if k != "deadline"}}, "deadline"),
    ],
)
def test_bad_step_input_names_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        parse(ReplaceStep, {**GOOD, **change})
