"""Parity with Karpenter's NodePool disruption budgets: seen as how many empty nodes one round deletes
(reason Empty), and whether a drifted node is replaced (reason Drifted).

The most restrictive ACTIVE budget for the reason wins (a budget without reasons applies to all); an
inactive budget allows anything; a schedule is a cron in UTC, active for ``duration`` after each hit;
a count is taken as is and a percentage of the NodePool's nodes is rounded up.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.parity._candidates import base, disrupted
from tests.parity.harness import Obj, disrupt, managed_node, pod, run, ts
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/apis/v1/nodepool_budgets_test.go"

MID_2000 = datetime(2000, 6, 15, 12, 30, 30, tzinfo=UTC)  # mid-June: not a yearly or weekly hit
ALL_REASONS = ["Empty", "Drifted", "Underutilized"]


def _budget(nodes: str, schedule: str | None = None, duration: str | None = None, reasons: Any = None) -> Obj:
    b: Obj = {"nodes": nodes}
    if schedule is not None:
        b["schedule"] = schedule
    if duration is not None:
        b["duration"] = duration
    if reasons is not None:
        b["reasons"] = reasons
    return b


def _objects(budgets: list[Obj], now: datetime, empty: int = 12, drifted: bool = False) -> list[Any]:
    created = ts(now - timedelta(hours=2))
    pool = base(disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": budgets})
    objs: list[Any] = [pool] + [managed_node(f"e{i:02}", created=created) for i in range(empty)]
    if drifted:
        objs.append(managed_node("old", created=created, claim_image_id="ami-0old"))
        objs.append(pod("app", node="old", cpu="100m"))
    return objs


def _empty_deleted(budgets: list[Obj], now: datetime = MID_2000, empty: int = 12) -> int:
    out = disrupt(_objects(budgets, now, empty), now=now)
    assert out["command"] is None or out["command"]["reason"] == "Empty"
    return len(disrupted(out))


def _drift_allowed(budgets: list[Obj], now: datetime = MID_2000) -> bool:
    out = disrupt(_objects(budgets, now, empty=0, drifted=True), now=now)
    return out["command"] is not None and out["command"]["reason"] == "Drifted"


def _upstream_like() -> list[Obj]:
    """Budgets like upstream's fixture (our numbers): every-minute budgets for all reasons and for some, and
    a weekly one allowing nothing for every reason (inactive mid-June 2000, a Thursday)."""
    return [
        _budget("10", "* * * * *", "1h"),
        _budget("100", "* * * * *", "1h"),
        _budget("100%", "* * * * *", "1h"),
        _budget("8", "* * * * *", "1h", ["Drifted", "Underutilized"]),
        _budget("5", "* * * * *", "1h", ["Drifted"]),
        _budget("0", "@weekly", "1h", ALL_REASONS),
    ]


@mirrors(
    "Budgets / GetAllowedDisruptionsByReason / should return 0 for all reasons if a budget is active for all reasons"
)
def test_active_zero_budget_for_every_reason_stops_everything() -> None:
    budgets = _upstream_like()
    budgets[5] = _budget("0", "* * * * *", "1h", ALL_REASONS)
    assert _empty_deleted(budgets) == 0
    assert not _drift_allowed(budgets)


@mirrors(
    "Budgets / GetAllowedDisruptionsByReason / should return MaxInt32 for all reasons when there are no active budgets"
)
def test_no_active_budget_leaves_disruption_unbounded() -> None:
    budgets = [{**b, "schedule": "@yearly", "duration": "1h"} for b in _upstream_like()]
    assert _empty_deleted(budgets) == 12
    assert _drift_allowed(budgets)


@mirrors("Budgets / GetAllowedDisruptionsByReason / should ignore reason-defined budgets when inactive")
def test_inactive_reason_budgets_are_ignored() -> None:
    budgets = _upstream_like()
    budgets[3]["schedule"] = "@yearly"
    budgets[4]["schedule"] = "@yearly"
    assert _empty_deleted(budgets) == 10
    budgets[0]["nodes"] = "0"  # the all-reasons budget now decides for drift too
    assert not _drift_allowed(budgets)


@mirrors("Budgets / GetAllowedDisruptionsByReason / should return the budget for all disruption reasons when undefined")
def test_budget_without_reasons_applies_to_every_reason() -> None:
    assert _empty_deleted([_budget("3", "* * * * *", "1h")]) == 3
    assert not _drift_allowed([_budget("0", "* * * * *", "1h")])


@mirrors("Budgets / GetAllowedDisruptionsByReason / should get the minimum budget for each reason")
def test_each_reason_gets_its_most_restrictive_budget() -> None:
    budgets = [*_upstream_like(), _budget("4", "* * * * *", "1h", ["Empty"])]
    assert _empty_deleted(budgets) == 4
    budgets.append(_budget("0", "* * * * *", "1h", ["Drifted"]))
    assert _empty_deleted(budgets) == 4  # a Drifted budget does not limit Empty
    assert not _drift_allowed(budgets)


_VALIDATED = (
    "nodeflow validates budgets when it reads the NodePool (as the CRD's schema does) and refuses the manifest "
    "with an error naming the field, instead of reading an invalid budget as allowing nothing"
)


@mirrors("Budgets / AllowedDisruptions / should return zero values if a schedule is invalid", differs=_VALIDATED)
def test_invalid_schedule_is_refused_naming_the_field() -> None:
    code, _, err = run("disrupt", _objects([_budget("5", "@wrongly", "1h")], MID_2000), "--dry-run", "-o", "json")
    assert code != 0
    assert "spec.disruption.budgets[0].schedule" in err


@mirrors("Budgets / AllowedDisruptions / should return zero values if a nodes value is invalid", differs=_VALIDATED)
def test_invalid_nodes_value_is_refused_naming_the_field() -> None:
    code, _, err = run("disrupt", _objects([_budget("1000a%")], MID_2000), "--dry-run", "-o", "json")
    assert code != 0
    assert "spec.disruption.budgets[0].nodes" in err


@mirrors("Budgets / IsActive / should return an error indicating why the cron fails to parse")
def test_cron_range_error_says_why() -> None:
    code, _, err = run("disrupt", _objects([_budget("5", "0 0 * * tue-mon", "6h")], MID_2000), "--dry-run")
    assert code != 0
    assert "tue-mon" in err
    assert "beginning of range" in err


@mirrors("Budgets / AllowedDisruptions / should return MaxInt32 when a budget is inactive")
def test_inactive_budget_allows_everything() -> None:
    assert _empty_deleted([_budget("0", "@yearly", "1h")]) == 12


@mirrors("Budgets / AllowedDisruptions / should return the int value when a budget is active")
def test_active_count_budget() -> None:
    assert _empty_deleted([_budget("7", "* * * * *", "1h")]) == 7


@mirrors("Budgets / AllowedDisruptions / should return the string value when a budget is active")
def test_active_percentage_budget_rounds_up() -> None:
    assert _empty_deleted([_budget("100%", "* * * * *", "1h")]) == 12
    assert _empty_deleted([_budget("20%", "* * * * *", "1h")]) == 3  # 2.4 rounds up


@mirrors("Budgets / IsActive / should always consider a schedule and time in UTC")
def test_schedule_is_judged_in_utc_whatever_the_offset_of_now() -> None:
    """00:10 at +01:00 is 23:10 UTC: a daily midnight (UTC) budget of 30 minutes is not active then."""
    now = "2000-06-01T00:10:00+01:00"
    objs = _objects([_budget("0", "@daily", "30m")], datetime(2000, 5, 31, 23, 10, tzinfo=UTC), empty=2)
    code, out, err = run("disrupt", objs, "--dry-run", "--now", now, "-o", "json")
    assert code == 0, err
    assert '"e00"' in out.split('"expirations"')[0]  # deleted: the budget is inactive


@mirrors("Budgets / IsActive / should return that a schedule is active when schedule and duration are nil")
def test_budget_without_schedule_is_always_active() -> None:
    assert _empty_deleted([_budget("0")]) == 0


@mirrors("Budgets / IsActive / should return that a schedule is active")
def test_every_minute_schedule_is_active() -> None:
    assert _empty_deleted([_budget("0", "* * * * *", "1h")]) == 0


@mirrors("Budgets / IsActive / should return that a schedule is inactive")
def test_yearly_schedule_is_inactive_in_june() -> None:
    assert _empty_deleted([_budget("0", "@yearly", "1h")]) == 12


@mirrors(
    "Budgets / IsActive / should return that a schedule is active when the schedule hit is in the middle of the duration"
)
def test_active_within_the_duration_after_a_hit() -> None:
    assert _empty_deleted([_budget("0", "@yearly", "24h")], now=datetime(1000, 1, 1, 12, tzinfo=UTC)) == 0


@mirrors("Budgets / IsActive / should return that a schedule is active when the duration is longer than the recurrence")
def test_duration_longer_than_the_recurrence_stays_active() -> None:
    assert _empty_deleted([_budget("0", "@daily", "48h")], now=datetime(2024, 1, 7, tzinfo=UTC)) == 0


@mirrors("Budgets / IsActive / should return that a schedule is inactive when the schedule hit is after the duration")
def test_inactive_once_the_duration_after_the_last_hit_is_over() -> None:
    """Sunday 2024-01-07 00:00: the last Sunday-06:30 hit was a week ago, its 6 hours long over."""
    assert _empty_deleted([_budget("0", "30 6 * * SUN", "6h")], now=datetime(2024, 1, 7, tzinfo=UTC)) == 12
