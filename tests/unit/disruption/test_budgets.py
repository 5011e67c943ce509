from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nodeflow.api.cron import CronError, cron_matches, parse_cron
from nodeflow.api.karpenter_core import Budget
from nodeflow.disruption.budgets import allowed, schedule_active
from nodeflow.disruption.round import decide

from .builders import CATALOG, NOW, node, pool, snapshot

NOON = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)  # a Saturday


def b(**kw: object) -> Budget:
    return Budget.model_validate(kw)


def test_count_and_percentage_rounded_up() -> None:
    assert allowed([b(nodes="3")], "Empty", 10, 0, NOON) == 3
    assert allowed([b(nodes="25%")], "Empty", 10, 0, NOON) == 3  # 2.5 rounds up
    assert allowed([b(nodes="0%")], "Empty", 10, 0, NOON) == 0


def test_default_is_ten_percent() -> None:
    assert allowed([], "Drifted", 25, 0, NOON) == 3


def test_most_restrictive_active_budget_wins_and_reasons_filter() -> None:
    budgets = [b(nodes="50%"), b(nodes="1", reasons=["Drifted"])]
    assert allowed(budgets, "Drifted", 10, 0, NOON) == 1
    assert allowed(budgets, "Empty", 10, 0, NOON) == 5


def test_nodes_being_disrupted_count_against_the_budget() -> None:
    assert allowed([b(nodes="3")], "Empty", 10, 2, NOON) == 1
    assert allowed([b(nodes="3")], "Empty", 10, 5, NOON) == 0


def test_cron_window() -> None:
    block_business_hours = b(nodes="0", schedule="0 9 * * mon-fri", duration="8h")
    friday_10 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
    friday_17 = datetime(2026, 11, 20, 17, 0, tzinfo=UTC)
    assert allowed([block_business_hours, b(nodes="5")], "Empty", 10, 0, friday_10) == 0
    assert allowed([block_business_hours, b(nodes="5")], "Empty", 10, 0, friday_17) == 5
    assert allowed([block_business_hours, b(nodes="5")], "Empty", 10, 0, NOON) == 5  # Saturday


def test_cron_macros_and_fields() -> None:
    assert schedule_active("@daily", "1h", datetime(2026, 11, 21, 0, 30, tzinfo=UTC))
    assert not schedule_active("@daily", "1h", datetime(2026, 11, 21, 1, 0, tzinfo=UTC))
    assert schedule_active("@hourly", "10m", datetime(2026, 11, 21, 5, 9, 59, tzinfo=UTC))
    assert cron_matches(parse_cron("*/15 * * * *"), datetime(2026, 1, 1, 3, 45, tzinfo=UTC))
    assert not cron_matches(parse_cron("*/15 * * * *"), datetime(2026, 1, 1, 3, 46, tzinfo=UTC))
    # day-of-month and day-of-week both restricted: either matches (Vixie cron)
    cron = parse_cron("0 0 1 * sun")
    assert cron_matches(cron, datetime(2026, 11, 22, 0, 0, tzinfo=UTC))  # a Sunday
    assert cron_matches(cron, datetime(2026, 12, 1, 0, 0, tzinfo=UTC))  # the 1st
    assert cron_matches(parse_cron("0 0 * jan-mar 7"), datetime(2026, 1, 4, 0, 0, tzinfo=UTC))  # 7 is Sunday


@pytest.mark.parametrize("schedule", ["* * *", "61 * * * *", "* * * * mon-", "@sometimes", "*/0 * * * *"])
def test_bad_cron(schedule: str) -> None:
    with pytest.raises(CronError):
        parse_cron(schedule)


def test_unparsable_budget_allows_nothing() -> None:
    bad_nodes = Budget.model_construct(nodes="ten", reasons=None, schedule=None, duration=None)
    bad_cron = Budget.model_construct(nodes="5", reasons=None, schedule="every day", duration="1h")
    no_duration = Budget.model_construct(nodes="5", reasons=None, schedule="@daily", duration=None)
    for budget in (bad_nodes, bad_cron, no_duration):
        assert allowed([b(nodes="100%"), budget], "Empty", 10, 0, NOON) == 0


@pytest.mark.parametrize("duration", ["20000000h", "99999999999h", "2562047h"])
def test_a_huge_budget_duration_never_fails_the_round(duration: str) -> None:
    """The model refuses a duration past Go's range (the NodePool is invalid); one read anyway (an object built
    without validation) allows nothing, as any budget that cannot be parsed; one in range is judged over the last
    366 days. Never an OverflowError ("date value out of range") for the whole round."""
    daily = Budget.model_construct(nodes="0", reasons=None, schedule="@daily", duration=duration)
    never = Budget.model_construct(nodes="0", reasons=None, schedule="0 0 30 2 *", duration=duration)
    assert allowed([b(nodes="100%"), daily], "Empty", 10, 0, NOON) == 0
    expected = 10 if duration == "2562047h" else 0  # in Go's range: a schedule that never fires is never active
    assert allowed([b(nodes="100%"), never], "Empty", 10, 0, NOON) == expected


def test_a_nodeclaim_expiring_past_go_range_does_not_fail_the_round() -> None:
    """A NodeClaim's expireAfter past Go's range (the disruption round raised DurationError for every NodePool)
    counts as the longest Go holds: not expired, the round goes on."""
    nodes = [node("forever", expire_after="99999999999h", created="2020-01-01T00:00:00Z"), node("idle")]
    result = decide(snapshot(nodes, [], pools=[pool(budgets=[{"nodes": "100%"}])]), CATALOG, NOW)
    assert result.expirations == ()
    assert result.command is not None
    assert set(result.command.candidates) == {"forever", "idle"}


def test_round_respects_a_zero_budget() -> None:
    s = snapshot([node("idle")], [], pools=[pool(budgets=[{"nodes": "0"}])])
    result = decide(s, CATALOG, NOW)
    assert result.command is None
    assert "budget" in result.blocked[0].message


def test_deleting_nodes_use_up_the_budget() -> None:
    s = snapshot([node("idle"), node("going", deleting=True)], [], pools=[pool(budgets=[{"nodes": "1"}])])
    assert decide(s, CATALOG, NOW).command is None
