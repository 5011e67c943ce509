"""Execution names (nodeflow.aws.sfn): runs and chains of continued executions, always valid for Step Functions
(1-80 characters of [A-Za-z0-9._-]), deterministic, and distinct for distinct runs and generations."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeflow.aws.sfn import EXECUTION_NAME_PATTERN, MAX_EXECUTION_NAME, chain_name, execution_name, run_name

VALID = re.compile(EXECUTION_NAME_PATTERN)


def test_names_that_fit_are_kept() -> None:
    assert run_name("default-abcde") == "default-abcde"
    assert run_name("default-abcde", 2) == "default-abcde-2"
    assert chain_name("default-abcde") == "default-abcde"
    assert chain_name("default-abcde", 2) == "default-abcde_c2"
    assert chain_name(run_name("default-abcde", 3), 17) == "default-abcde-3_c17"
    assert execution_name("a.b-c_d") == "a.b-c_d"


def test_long_names_are_shortened_with_a_digest() -> None:
    claim = "p" * 60 + "-abcde"  # a NodePool name of 60 characters
    first = run_name(claim)
    assert (len(claim), len(first)) == (66, 66)  # fits: unchanged
    chained = [chain_name(first, g) for g in range(1, 6)]
    assert all(VALID.match(n) for n in chained)
    assert chained[1] == claim + "_c2"  # 69 characters: fits
    huge = "a" * 253
    names = [chain_name(run_name(huge, r), g) for r in (1, 2, 3) for g in (1, 2, 3, 10**6)]
    assert all(VALID.match(n) and len(n) == MAX_EXECUTION_NAME for n in names)
    assert len(set(names)) == len(names)
    assert names == [chain_name(run_name(huge, r), g) for r in (1, 2, 3) for g in (1, 2, 3, 10**6)]


@pytest.mark.parametrize("bad", ["a b", "a:b", "a/b", "ä", "x" * 81, ""])
def test_invalid_characters_are_replaced(bad: str) -> None:
    name = execution_name(bad)
    assert VALID.match(name), name
    assert name != bad


KUBE_NAME = st.text(alphabet="ab9-.", min_size=1, max_size=253)  # NodeClaim names never contain "_"


@settings(max_examples=500, deadline=None)
@given(
    a=KUBE_NAME,
    b=KUBE_NAME,
    ra=st.integers(1, 5),
    rb=st.integers(1, 5),
    ga=st.integers(1, 10**9),
    gb=st.integers(1, 10**9),
)
def test_every_name_is_valid_and_distinct_runs_and_generations_stay_distinct(
    a: str, b: str, ra: int, rb: int, ga: int, gb: int
) -> None:
    na, nb = chain_name(run_name(a, ra), ga), chain_name(run_name(b, rb), gb)
    assert VALID.match(na)
    assert VALID.match(nb)
    if (run_name(a, ra), ga) != (run_name(b, rb), gb):
        assert na != nb


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300), generation=st.integers(1, 10**9))
def test_any_text_gives_a_valid_name(text: str, generation: int) -> None:
    assert VALID.match(chain_name(execution_name(text), generation))
