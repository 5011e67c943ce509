"""latest_fire (budget schedules and NodeflowPolicy pause windows) walks back over the days and times a cron can
fire at; it must answer exactly what a minute-by-minute scan answers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeflow.api import cron as cron_mod
from nodeflow.api.cron import Cron, cron_matches, latest_fire, parse_cron
from nodeflow.api.nodeflow_policy import MAX_PAUSE
from nodeflow.disruption.budgets import schedule_active
from nodeflow.governance.policy import Window


def scan(cron: Cron, now: datetime, window: timedelta, cap: timedelta | None = None) -> datetime | None:
    """The reference: every minute back from ``now``'s."""
    minute = now.replace(second=0, microsecond=0)
    back = 0
    while True:
        at = minute - timedelta(minutes=back)
        if now - at >= window or (cap is not None and minute - at >= cap):
            return None
        if cron_matches(cron, at):
            return at
        back += 1


SCHEDULES = [
    "0 18 * * 5",
    "*/15 * * * *",
    "30 9-17 * * mon-fri",
    "0 0 1 * *",
    "0 0 29 2 *",
    "5 4 13 * 5",  # day-of-month OR day-of-week
    "0 0 * jan-mar 7",
    "@hourly",
    "@daily",
    "@weekly",
    "59 23 31 12 *",
    "* * * * *",
    "0,30 2 */3 * *",
    "*/20 */5 31 * *",  # only in months with 31 days
    "0 12 */10 2 *",
    "15 6 1,15 * mon",  # day-of-month OR day-of-week
    "0 0 30 2 *",  # never fires
]


@settings(max_examples=400, deadline=None)
@given(
    schedule=st.sampled_from(SCHEDULES),
    now=st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31)),
    minutes=st.integers(min_value=0, max_value=60 * 24 * 70),
)
def test_latest_fire_is_what_a_minute_by_minute_scan_finds(schedule: str, now: datetime, minutes: int) -> None:
    cron = parse_cron(schedule)
    now = now.replace(tzinfo=UTC)
    window = timedelta(minutes=minutes)
    assert latest_fire(cron, now, window) == scan(cron, now, window)
    cap = timedelta(days=3)
    assert latest_fire(cron, now, window, cap) == scan(cron, now, window, cap)


def test_edges() -> None:
    cron = parse_cron("0 18 * * 5")
    friday = datetime(2026, 11, 27, 18, 0, tzinfo=UTC)
    assert latest_fire(cron, friday, timedelta(hours=1)) == friday  # a fire at exactly now counts
    assert latest_fire(cron, friday - timedelta(seconds=1), timedelta(hours=1)) is None
    assert latest_fire(cron, friday + timedelta(minutes=59, seconds=59), timedelta(hours=1)) == friday
    assert latest_fire(cron, friday + timedelta(hours=1), timedelta(hours=1)) is None  # closed at its end
    assert latest_fire(cron, friday, timedelta(0)) is None
    naive = datetime(2026, 11, 27, 19, 0)
    assert latest_fire(cron, naive, timedelta(hours=2)) == datetime(2026, 11, 27, 18, 0)


def test_the_longest_window_of_a_leap_day_schedule_closes_after_366_days() -> None:
    """8784h, the longest window (MAX_PAUSE), of a schedule firing every four years; a Window built with a longer
    duration than the model admits counts as the longest (the look-back stays bounded)."""
    window = Window("p", "w", "0 0 29 2 *", timedelta(hours=8784), "8784h", True, False)
    assert window.open_until(datetime(2025, 2, 28, 12, tzinfo=UTC)) == datetime(2025, 3, 1, tzinfo=UTC)
    assert window.open_until(datetime(2025, 3, 1, tzinfo=UTC)) is None
    longer = Window("p", "w", "0 0 29 2 *", timedelta(hours=99999), "99999h", True, False)
    assert longer.open_until(datetime(2025, 2, 28, 12, tzinfo=UTC)) == datetime(2025, 3, 1, tzinfo=UTC)
    assert longer.open_until(datetime(2026, 11, 28, 12, tzinfo=UTC)) is None
    huge = Window("p", "w", "0 0 * * *", timedelta(hours=20000000), "20000000h", True, False)
    assert huge.open_until(datetime(2026, 11, 28, 12, tzinfo=UTC)) == datetime(2026, 11, 28, tzinfo=UTC) + MAX_PAUSE
    closed = Window("p", "w", "0 0 1 1 *", timedelta(hours=8759), "8759h", True, False)
    assert closed.open_until(datetime(2026, 12, 31, 23, 30, tzinfo=UTC)) is None
    assert schedule_active("@yearly", "9000h", datetime(2026, 12, 31, 23, 30, tzinfo=UTC))
    # a budget's duration may be longer (up to Go's 2562047h): a fire up to 366 days back counts, nothing overflows
    assert schedule_active("@daily", "2562047h", datetime(2026, 12, 31, 23, 30, tzinfo=UTC))
    assert not schedule_active("0 0 30 2 *", "2562047h", datetime(2026, 12, 31, 23, 30, tzinfo=UTC))


NEVER = ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 *", "0 0 30,31 2 *"]


@pytest.mark.parametrize("schedule", NEVER)
def test_a_schedule_that_never_fires_costs_a_step_a_month_whatever_the_window(
    schedule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk back visits only the days the cron lists in the months it lists: none here, whatever the window
    (a day-by-day walk visited every day of a 366-day window, and more of a longer one)."""
    visited: list[datetime] = []
    days = cron_mod._days

    def counting(cron: Cron, month: datetime, last: int) -> Iterator[datetime]:
        for day in days(cron, month, last):
            visited.append(day)
            yield day

    monkeypatch.setattr(cron_mod, "_days", counting)
    cron = parse_cron(schedule)
    for now in (datetime(2026, 11, 28, 12, tzinfo=UTC), datetime(2028, 3, 1, tzinfo=UTC)):
        for window in (timedelta(hours=8784), timedelta(hours=20000000)):
            assert latest_fire(cron, now, window) is None
    assert visited == []
