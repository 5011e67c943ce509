"""The parity table is generated from the tests, and every upstream spec is accounted for."""

from __future__ import annotations

from tests.parity.table import README, collect, render


def test_every_marker_names_a_real_upstream_spec() -> None:
    *_, problems = collect()
    assert problems == []


def test_the_readme_table_is_current() -> None:
    text, _ = render()
    assert README.read_text() == text, "run: .venv/bin/python -m tests.parity.table"
