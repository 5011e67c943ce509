"""NodePool disruption budgets: how many more nodes of a pool may be disrupted now, for a reason.

- ``nodes`` is a count or a percentage of the pool's nodes, rounded up.
- A budget with ``schedule`` (cron, UTC, 5 fields or @yearly/@annually/@monthly/@weekly/@daily/
  @midnight/@hourly) is active from each time the schedule fires for ``duration`` (a fire up to 366 days
  back counts: ``MAX_LOOKBACK``); without a schedule it is always active. ``reasons`` limits it to those
  disruption reasons (all when unset).
- The most restrictive active budget wins; with no budget at all the default is 10%.
- Nodes already being disrupted (deleting, or tainted karpenter.sh/disrupted) count against it.
- A budget that cannot be parsed allows nothing (fail safe).

``RoundBudgets`` applies them in one disruption round: what each NodePool has left per reason, and which of some
candidates the budgets let through together.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from nodeflow.api.duration import MAX_SECONDS
from nodeflow.api.karpenter_core import Budget
from nodeflow.disruption.candidates import Candidate, budget_standing
from nodeflow.disruption.model import Blocked, BlockKind, Reason, Snapshot

__all__ = [
    "MAX_LOOKBACK",
    "BudgetError",
    "RoundBudgets",
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
# How far back a schedule's latest fire is looked for: a budget's or a pause window's opening at most this long ago
# counts (a pause window's duration is at most as long; a budget's longer duration counts as this long).
MAX_LOOKBACK = timedelta(days=366)
_LAST_MINUTE = timedelta(hours=23, minutes=59)
_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)


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
    if hours * 3600 + minutes * 60 + seconds > MAX_SECONDS:  # as the model: Karpenter cannot read a longer one
        raise BudgetError(f"duration {text!r} is out of range (at most 2562047h, as in Go)")
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


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


def schedule_active(schedule: str, duration: str, now: datetime) -> bool:
    """True when ``schedule`` fired at most ``duration`` ago (a fire at exactly now counts)."""
    cron = parse_cron(schedule)
    window = _duration(duration)
    if now.tzinfo is not None:
        now = now.astimezone(UTC)  # schedules are UTC whatever the offset ``now`` was given in
    return latest_fire(cron, now, window) is not None


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


class RoundBudgets:
    """Remaining disruptions per (NodePool, reason) for one round: the nodes counted and those already being
    disrupted are the candidates' (``budget_standing``), the budgets the NodePools' (``allowed``)."""

    def __init__(self, snapshot: Snapshot, candidates: Sequence[Candidate], now: datetime) -> None:
        self.now = now
        self.pools = {p.name: p for p in snapshot.state.node_pools}
        self.total: dict[str, int] = {}
        self.disrupting: dict[str, int] = {}
        for c in candidates:
            counted, disrupting = budget_standing(c)
            if counted:
                self.total[c.pool_name] = self.total.get(c.pool_name, 0) + 1
            if counted and disrupting:
                self.disrupting[c.pool_name] = self.disrupting.get(c.pool_name, 0) + 1
        self.cache: dict[tuple[str, Reason], int] = {}

    def left(self, pool: str, reason: Reason) -> int:
        """How many more nodes of NodePool ``pool`` may be disrupted for ``reason`` this round."""
        key = (pool, reason)
        if key not in self.cache:
            budgets = self.pools[pool].spec.disruption.budgets
            self.cache[key] = allowed(
                budgets, reason.value, self.total.get(pool, 0), self.disrupting.get(pool, 0), self.now
            )
        return self.cache[key]

    def within(self, candidates: Sequence[Candidate], reason: Reason, blocked: list[Blocked]) -> list[Candidate]:
        """The candidates the budgets allow together (in order); the others are reported in ``blocked``."""
        taken: dict[str, int] = {}
        out: list[Candidate] = []
        for c in candidates:
            if taken.get(c.pool_name, 0) < self.left(c.pool_name, reason):
                taken[c.pool_name] = taken.get(c.pool_name, 0) + 1
                out.append(c)
            else:
                message = f"disruption budget of NodePool {c.pool_name} allows no more {reason.value} disruptions now"
                blocked.append(Blocked(c.name, BlockKind.BLOCKED, message))
        return out
