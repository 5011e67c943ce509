"""NodePool disruption budgets: how many more nodes of a pool may be disrupted now, for a reason.

- ``nodes`` is a count or a percentage of the pool's nodes, rounded up.
- A budget with ``schedule`` (cron, UTC, 5 fields or @yearly/@annually/@monthly/@weekly/@daily/
  @midnight/@hourly: ``nodeflow.api.cron``) is active from each time the schedule fires for ``duration`` (a fire
  up to 366 days back counts: ``cron.MAX_LOOKBACK``); without a schedule it is always active. ``reasons`` limits it to
  those disruption reasons (all when unset).
- The most restrictive active budget wins; with no budget at all the default is 10%.
- Nodes already being disrupted (deleting, or tainted karpenter.sh/disrupted) count against it.
- A budget that cannot be parsed allows nothing (fail safe).

``RoundBudgets`` applies them in one disruption round: what each NodePool has left per reason, and which of some
candidates the budgets let through together.

Must not touch: which nodes are disrupted or why (the methods, ``round``); the clock (``now`` is an input).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from nodeflow.api.cron import latest_fire, parse_cron
from nodeflow.api.duration import MAX_SECONDS
from nodeflow.api.karpenter_core import Budget
from nodeflow.disruption.candidates import Candidate, budget_standing
from nodeflow.disruption.model import Blocked, BlockKind, Reason, Snapshot

__all__ = [
    "BudgetError",
    "RoundBudgets",
    "allowed",
    "budget_allows",
    "schedule_active",
]

_NODES = re.compile(r"^(\d+)(%?)$")
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


class BudgetError(ValueError):
    """A budget that cannot be parsed."""


def _duration(text: str) -> timedelta:
    match = _DURATION.match(text)
    if not text or match is None:
        raise BudgetError(f"invalid duration {text!r}")
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    if hours * 3600 + minutes * 60 + seconds > MAX_SECONDS:  # as the model: Karpenter cannot read a longer one
        raise BudgetError(f"duration {text!r} is out of range (at most 2562047h, as in Go)")
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


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
