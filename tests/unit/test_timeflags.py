"""The commands' time flags (nodeflow.timeflags): RFC 3339 times within 1000..8999, positive durations, ``--since``
not in the future; every refusal names the flag and the value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodeflow.timeflags import EARLIEST, LATEST, TimeFlagError, parse_duration, parse_since, parse_time

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T12:00:00Z", datetime(2026, 11, 21, 12, tzinfo=UTC)),
        ("2026-11-21T12:00:00", datetime(2026, 11, 21, 12, tzinfo=UTC)),  # no offset: UTC
        ("2026-11-21T14:00:00+02:00", datetime(2026, 11, 21, 12, tzinfo=UTC)),
        ("2026-11-21", datetime(2026, 11, 21, tzinfo=UTC)),
        ("1000-01-01T00:00:00Z", EARLIEST),
        ("1970-01-01T00:00:00Z", datetime(1970, 1, 1, tzinfo=UTC)),
        ("8999-12-31T23:59:59Z", datetime(8999, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ],
)
def test_times(text: str, expected: datetime) -> None:
    assert parse_time("--now", text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("friday", "is not an RFC 3339 time (e.g. 2026-11-21T12:00:00Z)"),
        ("2026-13-01T00:00:00Z", "is not an RFC 3339 time"),
        ("9999-12-31T23:59:59Z", "is out of range (from 1000-01-01 to 8999-12-31)"),
        ("0001-01-01T00:00:00Z", "is out of range"),
        ("0001-01-01T00:00:00+01:00", "is out of range"),  # datetime cannot even convert it to UTC
        ("0999-12-31T23:59:59Z", "is out of range"),
    ],
)
def test_bad_times_name_the_flag_and_the_value(text: str, why: str) -> None:
    with pytest.raises(TimeFlagError) as caught:
        parse_time("--now", text)
    assert str(caught.value).startswith(f"--now: {text!r} {why}")


def test_durations() -> None:
    assert parse_duration("--since", "90m") == timedelta(minutes=90)
    assert parse_duration("--since", "1h30m") == timedelta(hours=1, minutes=30)
    assert parse_duration("--since", "2w1d") == timedelta(days=15)
    assert parse_duration("--since", f"{(LATEST - EARLIEST).days}d") == LATEST - EARLIEST


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0h", "is not a duration like 30m, 1h, 2d (it must be positive)"),
        ("-1h", "is negative"),
        ("1x", "is not a duration like 30m, 1h, 2d (or an RFC 3339 time)"),
        ("", "is not a duration"),
        ("1h 30m", "is not a duration"),
        ("99999999d", "is too long (it reaches back before 1000-01-01)"),
        ("9" * 5000 + "s", "is too long"),  # int() alone: ValueError past 4,300 digits
    ],
)
def test_bad_durations(text: str, why: str) -> None:
    with pytest.raises(TimeFlagError, match=r"^--since: ") as caught:
        parse_duration("--since", text)
    assert why in str(caught.value)


def test_since_is_a_duration_before_now_or_a_time_not_after_it() -> None:
    assert parse_since("--since", "1h", NOW) == NOW - timedelta(hours=1)
    assert parse_since("--since", "3650d", NOW) == NOW - timedelta(days=3650)  # the caller clamps to its retention
    assert parse_since("--since", "2026-03-01T11:00:00Z", NOW) == NOW - timedelta(hours=1)
    assert parse_since("--since", "2026-03-01T12:00:00Z", NOW) == NOW
    with pytest.raises(
        TimeFlagError, match=r"^--since: '2026-03-01T12:00:01Z' is in the future \(after 2026-03-01T12:00:00Z\)$"
    ):
        parse_since("--since", "2026-03-01T12:00:01Z", NOW)
    with pytest.raises(TimeFlagError, match=r"^--since: '400000d' is too long"):  # 1,095 years back: before 1000
        parse_since("--since", "400000d", NOW)
    with pytest.raises(TimeFlagError, match=r"^--since: '0001-01-01T00:00:00Z' is out of range"):
        parse_since("--since", "0001-01-01T00:00:00Z", NOW)
