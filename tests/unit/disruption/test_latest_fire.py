"""latest_fire (budget schedules and NodeflowPolicy pause windows) walks back over the days and times a cron can
fire at; it must answer exactly what a minute-by-minute scan answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from nodeflow.disruption.budgets import Cron, cron_matches, latest_fire, parse_cron, schedule_active
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


def test_a_long_window_is_judged_without_a_scan_of_its_minutes() -> None:
    """A 99,999 h window (11 years) of a leap-day schedule: the minute scan took seconds per NodePool."""
    window = Window("p", "w", "0 0 29 2 *", timedelta(hours=99999), "99999h", True, False, None)
    assert window.open_until(datetime(2026, 11, 28, 12, tzinfo=UTC)) == datetime(2024, 2, 29, tzinfo=UTC) + timedelta(
        hours=99999
    )
    closed = Window("p", "w", "0 0 1 1 *", timedelta(hours=8759), "8759h", True, False, None)
    assert closed.open_until(datetime(2026, 12, 31, 23, 30, tzinfo=UTC)) is None
    assert schedule_active("@yearly", "9000h", datetime(2026, 12, 31, 23, 30, tzinfo=UTC))
