"""NodePool disruption budgets: how many more nodes of a pool may be disrupted now, for a reason.

- ``nodes`` is a count or a percentage of the pool's nodes, rounded up.
- A budget with ``schedule`` (cron, UTC, 5 fields or @yearly/@annually/@monthly/@weekly/@daily/
  @midnight/@hourly) is active from each time the schedule fires for ``duration``; without a schedule
  it is always active. ``reasons`` limits it to those disruption reasons (all when unset).
- The most restrictive active budget wins; with no budget at all the default is 10%.
- Nodes already being disrupted (deleting, or tainted karpenter.sh/disrupted) count against it.
- A budget that cannot be parsed allows nothing (fail safe).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from nodeflow.api.karpenter_core import Budget

__all__ = [
    "BudgetError",
    "allowed",
    "budget_allows",
    "cron_matches",
    "latest_fire",
    "parse_cron",
    "schedule_active",
]

_NODES = re.compile(r"^(\d+)(%?)$")
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
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
_MAX_LOOKBACK_MINUTES = 366 * 24 * 60
_LAST_MINUTE = timedelta(hours=23, minutes=59)


class BudgetError(ValueError):
    """A budget that cannot be parsed."""


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
            raise BudgetError(f"invalid step {step_text!r}")
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
                raise BudgetError(f"{rng!r} is out of range {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values), star


def _number(token: str, names: dict[str, int]) -> int:
    if token.isdigit():
        return int(token)
    if token.upper() in names:
        return names[token.upper()]
    raise BudgetError(f"{token!r} is not a number or name")


def parse_cron(schedule: str) -> Cron:
    """A standard cron expression (UTC), or raise ``BudgetError``."""
    text = _MACROS.get(schedule.strip().lower(), schedule)
    parts = text.split()
    if len(parts) != 5:
        raise BudgetError(f"schedule {schedule!r} must have 5 fields or be an @macro")
    parsed = [_field(p, low, high, names) for p, (low, high, names) in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in parsed[4][0])
    return Cron(parsed[0][0], parsed[1][0], parsed[2][0], parsed[3][0], weekdays, parsed[2][1], parsed[4][1])


def cron_matches(cron: Cron, at: datetime) -> bool:
    """True when ``cron`` fires at the minute ``at`` (Vixie cron: restricted day-of-month and
    day-of-week are ORed)."""
    if at.minute not in cron.minutes or at.hour not in cron.hours or at.month not in cron.months:
        return False
    return _day_matches(cron, at)


def _duration(text: str) -> timedelta:
    match = _DURATION.match(text)
    if not text or match is None:
        raise BudgetError(f"invalid duration {text!r}")
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


def latest_fire(cron: Cron, now: datetime, window: timedelta, cap: timedelta | None = None) -> datetime | None:
    """The latest minute at or before ``now`` at which ``cron`` fires and that is less than ``window`` before
    ``now`` (and, with ``cap``, less than ``cap`` before ``now``'s minute); None when there is none.

    Walks back day by day over the days the cron can fire on, and within a day only over its hours and minutes:
    a window of months costs a few thousand steps, not one per minute."""
    minute = now.replace(second=0, microsecond=0)
    earliest = now - window  # a fire must be after it
    if cap is not None:
        earliest = max(earliest, minute - cap)
    hours = sorted(cron.hours, reverse=True)
    minutes = sorted(cron.minutes, reverse=True)
    midnight = minute.replace(hour=0, minute=0)
    day = midnight
    while day + _LAST_MINUTE > earliest:  # the day has a minute after ``earliest``
        if day.month in cron.months and _day_matches(cron, day):
            for hour in hours:
                if day == midnight and hour > minute.hour:
                    continue
                for m in minutes:
                    at = day.replace(hour=hour, minute=m)
                    if at > minute:
                        continue
                    return at if at > earliest else None
        day -= timedelta(days=1)
    return None


def _day_matches(cron: Cron, day: datetime) -> bool:
    """``cron_matches``'s day rule (Vixie cron: restricted day-of-month and day-of-week are ORed)."""
    in_month = day.day in cron.days
    weekday = (day.isoweekday() % 7) in cron.weekdays
    if cron.any_day or cron.any_weekday:
        return in_month and weekday
    return in_month or weekday


def schedule_active(schedule: str, duration: str, now: datetime) -> bool:
    """True when ``schedule`` fired at most ``duration`` ago (a fire at exactly now counts)."""
    cron = parse_cron(schedule)
    window = _duration(duration)
    if now.tzinfo is not None:
        now = now.astimezone(UTC)  # schedules are UTC whatever the offset ``now`` was given in
    return latest_fire(cron, now, window, timedelta(minutes=_MAX_LOOKBACK_MINUTES)) is not None


def budget_allows(budget: Budget, num_nodes: int, now: datetime) -> int | None:
    """How many of ``num_nodes`` ``budget`` allows disrupted at once now; None when not active.
    Raises ``BudgetError`` when the budget cannot be parsed."""
    if (budget.schedule is None) != (budget.duration is None):
        raise BudgetError("schedule and duration must be set together")
    active = budget.schedule is None or schedule_active(budget.schedule, budget.duration or "", now)
    if not active:
        return None
    match = _NODES.match(str(budget.nodes))
    if match is None:
        raise BudgetError(f"nodes {budget.nodes!r} is not a count or a percentage")
    number = int(match.group(1))
    if match.group(2):
        if number > 100:
            raise BudgetError(f"nodes {budget.nodes!r} is over 100%")
        return math.ceil(number * num_nodes / 100)
    return number


def allowed(budgets: Sequence[Budget], reason: str, num_nodes: int, disrupting: int, now: datetime) -> int:
    """How many MORE nodes of a pool with ``num_nodes`` nodes (``disrupting`` of them already being
    disrupted) may be disrupted for ``reason`` now: the most restrictive active budget wins."""
    limit = math.ceil(10 * num_nodes / 100) if not budgets else num_nodes
    for budget in budgets:
        if budget.reasons is not None and reason not in budget.reasons:
            continue
        try:
            value = budget_allows(budget, num_nodes, now)
        except (BudgetError, ValueError):
            return 0
        if value is not None:
            limit = min(limit, value)
    return max(0, limit - disrupting)
