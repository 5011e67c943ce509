"""Every command's ``--now`` is parsed alike (nodeflow.timeflags): a time Python's datetime cannot do the commands'
arithmetic on (year 9999, year 1, an offset below year 1) is an ``error:`` naming the flag and the value, exit 2,
where it was an OverflowError traceback; the edges of the range still plan."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from nodeflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = str(ROOT / "examples" / "governance")
COMMANDS = [
    ["plan", "-f", EXAMPLES],
    ["explain", "ml-exp/notebook", "-f", EXAMPLES],
    ["disrupt", "--dry-run", "-f", EXAMPLES],
    ["governance", "-f", EXAMPLES],
]


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("now", ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00"])
def test_a_now_out_of_range_is_refused(command: list[str], now: str) -> None:
    code, out, err = _run(*command, "--now", now)
    assert (code, out) == (2, "")
    assert err == f"error: --now: {now!r} is out of range (from 1000-01-01 to 8999-12-31)\n"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("now", ["1000-01-01T00:00:00Z", "8999-12-31T23:59:59Z"])
def test_the_edges_of_the_range_work(command: list[str], now: str) -> None:
    code, out, err = _run(*command, "--now", now)
    assert code == 0, err
    assert out
