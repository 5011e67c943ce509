"""The parity table is generated from the tests, and every upstream spec is accounted for."""

from __future__ import annotations

from tests.parity.table import README, collect, render


def test_every_marker_names_a_real_upstream_spec() -> None:
    *_, problems = collect()
    assert problems == []


def test_every_upstream_spec_is_mirrored_or_says_why_not() -> None:
    _, missing = render()
    assert missing == [], f"{len(missing)} upstream specs have no test and no reason, e.g. {missing[:5]}"


def test_the_readme_table_is_current() -> None:
    text, _ = render()
    assert README.read_text() == text, "run: .venv/bin/python -m tests.parity.table"
