"""Cron schedules as Karpenter's budgets and NodeflowPolicy pause windows write them: 5 fields (minute, hour,
day of month, month, day of week; names allowed for months and weekdays; 7 is Sunday) or an @macro, in UTC.
Pure: the time is an input.

``parse_cron`` reads one (``CronError`` names what is wrong); ``cron_matches`` says whether it fires at a minute
(Vixie cron: a restricted day-of-month and day-of-week are ORed); ``latest_fire`` finds its latest fire within a
window, at most ``MAX_LOOKBACK`` (366 days) back. Budgets (``nodeflow.disruption.budgets``) and pause windows
(``nodeflow.governance.policy``) both read their schedules here.

Must not touch: what a schedule gates (budgets: ``nodeflow.disruption.budgets``; pauses:
``nodeflow.governance.policy``); the clock.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["MAX_LOOKBACK", "Cron", "CronError", "cron_matches", "latest_fire", "parse_cron"]

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES)}
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
_FIELDS: tuple[tuple[int, int, dict[str, int]], ...] = (
    (0, 59, {}),
    (0, 23, {}),
    (1, 31, {}),
    (1, 12, _MONTHS),
    (0, 7, _DAYS),
)
# How far back a schedule's latest fire is looked for: a budget's or a pause window's opening at most this long ago
# counts (a pause window's duration is at most as long; a budget's longer duration counts as this long).
MAX_LOOKBACK = timedelta(days=366)
_LAST_MINUTE = timedelta(hours=23, minutes=59)
_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)


class CronError(ValueError):
    """A schedule that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day-of-month is *
    any_weekday: bool  # day-of-week is *


def _field(text: str, low: int, high: int, names: dict[str, int]) -> tuple[frozenset[int], bool]:
    values: set[int] = set()
    star = False
    for part in text.split(","):
        rng, slash, step_text = part.partition("/")
        if slash and (not step_text.isdigit() or int(step_text) == 0):
            raise CronError(f"invalid step {step_text!r}")
        step = int(step_text) if slash else 1
        if rng in ("*", "?"):
            start, end = low, high
            star = star or not slash
        else:
            first, dash, last = rng.partition("-")
            start, end = _number(first, names), _number(last, names) if dash else _number(first, names)
            if slash and not dash:
                end = high
            if not (low <= start <= high and low <= end <= high) or start > end:
                raise CronError(f"{rng!r} is out of range {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values), star


def _number(token: str, names: dict[str, int]) -> int:
    if token.isdigit():
        return int(token)
    if token.upper() in names:
        return names[token.upper()]
    raise CronError(f"{token!r} is not a number or name")


def parse_cron(schedule: str) -> Cron:
    """A standard cron expression (UTC), or raise ``CronError``."""
    text = _MACROS.get(schedule.strip().lower(), schedule)
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"schedule {schedule!r} must have 5 fields or be an @macro")
    parsed = [_field(p, low, high, names) for p, (low, high, names) in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in parsed[4][0])
    return Cron(parsed[0][0], parsed[1][0], parsed[2][0], parsed[3][0], weekdays, parsed[2][1], parsed[4][1])


def cron_matches(cron: Cron, at: datetime) -> bool:
    """True when ``cron`` fires at the minute ``at`` (Vixie cron: restricted day-of-month and
    day-of-week are ORed)."""
    if at.minute not in cron.minutes or at.hour not in cron.hours or at.month not in cron.months:
        return False
    return _day_matches(cron, at)


def latest_fire(cron: Cron, now: datetime, window: timedelta, cap: timedelta | None = None) -> datetime | None:
    """The latest minute at or before ``now`` at which ``cron`` fires and that is less than ``window`` before
    ``now`` and less than ``cap`` (at most, and by default, MAX_LOOKBACK: 366 days) before ``now``'s minute; None
    when there is none.

    Walks back month by month over the months the cron can fire in, within a month over the days it can fire on
    (the days its day-of-month lists, or back to the nearest day of a matching weekday) and within a day over its
    hours and minutes: at most a few hundred steps whatever the window, and one step a month for a cron that never
    fires (``0 0 30 2 *``)."""
    minute = now.replace(second=0, microsecond=0)
    span = MAX_LOOKBACK if cap is None else min(cap, MAX_LOOKBACK)
    # A fire must be after ``earliest``; a window longer than the span (and the seconds of ``now``) reaches no
    # further back than the span does (and ``now - window`` could fall off the calendar).
    earliest = max(minute - span, now - min(window, span + _MINUTE))
    month = minute.replace(day=1, hour=0, minute=0)
    last = minute.day
    while True:
        if month.month in cron.months:
            for day in _days(cron, month, last):
                if day + _LAST_MINUTE <= earliest:  # this day and those before it end before ``earliest``
                    return None
                at = _latest_time(cron, day, minute)
                if at is not None:
                    return at if at > earliest else None
        if month <= earliest:
            return None
        month = (month - _DAY).replace(day=1)
        last = calendar.monthrange(month.year, month.month)[1]


def _days(cron: Cron, month: datetime, last: int) -> Iterator[datetime]:
    """The days of ``month`` up to day ``last`` that ``cron`` fires on, latest first. A restricted day-of-month
    with any weekday: only the days it lists; otherwise day by day (a match is at most a week away, as a weekday
    matches every week)."""
    if cron.any_weekday and not cron.any_day:
        for d in sorted((d for d in cron.days if d <= last), reverse=True):
            yield month.replace(day=d)
        return
    for d in range(last, 0, -1):
        day = month.replace(day=d)
        if _day_matches(cron, day):
            yield day


def _latest_time(cron: Cron, day: datetime, minute: datetime) -> datetime | None:
    """The latest time of ``day`` at which ``cron`` fires that is not after ``minute``, or None."""
    today = day.date() == minute.date()
    for hour in sorted(cron.hours, reverse=True):
        if today and hour > minute.hour:
            continue
        last = minute.minute if today and hour == minute.hour else 59
        at = max((m for m in cron.minutes if m <= last), default=None)
        if at is not None:
            return day.replace(hour=hour, minute=at)
    return None


def _day_matches(cron: Cron, day: datetime) -> bool:
    """``cron_matches``'s day rule (Vixie cron: restricted day-of-month and day-of-week are ORed)."""
    in_month = day.day in cron.days
    weekday = (day.isoweekday() % 7) in cron.weekdays
    if cron.any_day or cron.any_weekday:
        return in_month and weekday
    return in_month or weekday
