"""EC2 status checks (DescribeInstanceStatus) as Karpenter's instance status controller reads and acts on them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.interruption.messages import STATUS_CHECK_FILTERS, status_check_failures
from nodeflow.lifecycle.interruption_handling import handle_status_checks, termination_reason
from nodeflow.lifecycle.termination import FORCEFUL_REASONS
from tests.unit.interruption.test_logic import IID, NOW, OTHER, FakeKube, World, claim


def status(
    iid: str = IID,
    *,
    instance: Sequence[tuple[str, str, float | None]] = (),
    system: Sequence[tuple[str, str, float | None]] = (),
    ebs: Sequence[tuple[str, str, float | None]] = (),
    events: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A DescribeInstanceStatus entry as boto3 returns it; details as (name, status, seconds impaired)."""

    def block(details: Sequence[tuple[str, str, float | None]]) -> dict[str, Any]:
        out = []
        for name, st, secs in details:
            d: dict[str, Any] = {"Name": name, "Status": st}
            if secs is not None:
                d["ImpairedSince"] = NOW - timedelta(seconds=secs)
            out.append(d)
        worst = "impaired" if any(st == "failed" for _, st, _ in details) else "ok"
        return {"Status": worst, "Details": out}

    return {
        "InstanceId": iid,
        "AvailabilityZone": "us-east-1b",
        "InstanceState": {"Code": 16, "Name": "running"},
        "InstanceStatus": block(instance),
        "SystemStatus": block(system),
        "AttachedEbsStatus": block(ebs),
        "Events": [{"Code": c, "Description": f"The instance is scheduled for {c}"} for c in events],
    }


def test_filters_are_karpenters() -> None:
    names = [tuple((f["Name"], tuple(f["Values"])) for f in fs) for fs in STATUS_CHECK_FILTERS]
    assert names == [
        (("instance-status.status", ("impaired",)),),
        (("system-status.status", ("impaired",)),),
        (
            (
                "event.code",
                ("instance-reboot", "system-reboot", "system-maintenance", "instance-retirement", "instance-stop"),
            ),
        ),
    ]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (status(instance=[("reachability", "failed", 120)]), [("InstanceStatus", ("reachability",))]),
        (status(instance=[("reachability", "failed", 119)]), []),  # not impaired for 2 minutes yet
        (status(system=[("reachability", "failed", 600)]), [("SystemStatus", ("reachability",))]),
        (status(instance=[("reachability", "initializing", 600)]), []),  # only "failed" counts
        (status(instance=[("reachability", "insufficient-data", 600)]), []),
        (status(ebs=[("reachability", "failed", 600)]), []),  # attached EBS: ignored, as Karpenter
        (status(events=("system-maintenance",)), [("EventStatus", ("system-maintenance",))]),  # at once
        (status(instance=[("reachability", "failed", None)]), [("InstanceStatus", ("reachability",))]),
        (
            status(instance=[("reachability", "failed", 300)], system=[("reachability", "failed", 200)]),
            [("InstanceStatus", ("reachability",)), ("SystemStatus", ("reachability",))],
        ),
    ],
)
def test_which_failures_count(entry: dict[str, Any], expected: list[tuple[str, tuple[str, ...]]]) -> None:
    got = status_check_failures([entry], NOW)
    assert [(f.category, f.checks) for f in got] == expected
    assert all(f.instance_id == IID and f.kind == f.category for f in got)


def test_since_is_the_earliest_impairment_and_duplicates_count_once() -> None:
    entry = status(instance=[("reachability", "failed", 300)], system=[("reachability", "failed", 900)])
    failures = status_check_failures([entry, entry, {"InstanceId": "vol-1"}], NOW)
    assert [f.since for f in failures] == [NOW - timedelta(seconds=900)] * 2
    assert len({f.envelope.id for f in failures}) == 2


def test_a_string_impaired_since_is_read() -> None:
    entry = status(instance=[("reachability", "failed", None)])
    entry["InstanceStatus"]["Details"][0]["ImpairedSince"] = "2026-11-21T09:50:00Z"
    (f,) = status_check_failures([entry], NOW)
    assert f.since == datetime(2026, 11, 21, 9, 50, tzinfo=UTC)


def test_instance_and_system_failures_are_forceful_events_drain() -> None:
    failures = status_check_failures(
        [status(instance=[("reachability", "failed", 300)], system=[("reachability", "failed", 300)])], NOW
    )
    failures += status_check_failures([status(OTHER, events=("instance-retirement",))], NOW)
    reasons = [termination_reason(f) for f in failures]
    assert reasons == ["InstanceStatusFailed", "SystemStatusFailed", "InstanceUnhealthy"]
    assert {"InstanceStatusFailed", "SystemStatusFailed"} <= FORCEFUL_REASONS
    assert "InstanceUnhealthy" not in FORCEFUL_REASONS


def test_owned_instances_are_terminated_with_an_event() -> None:
    w = World(FakeKube([claim()]))
    failures = status_check_failures(
        [status(instance=[("reachability", "failed", 300)]), status(OTHER, events=("system-reboot",))], NOW
    )
    result = handle_status_checks(w.deps(), failures)
    assert result.failed == []
    assert w.started == [("default-abcde", "InstanceStatusFailed")]
    owned, other = result.outcomes
    assert (owned.kind, owned.started, owned.disrupted[0]["karpenter.sh/capacity-type"]) == (
        "InstanceStatus",
        ["default-abcde"],
        "spot",
    )
    assert other.ignored == [f"{OTHER}: no NodeClaim of this cluster has it"]
    assert w.marked == []  # a broken instance is no sign that its offering is unavailable
    kinds = {(e[0], e[3]) for e in w.recorder.events}
    assert kinds == {("NodeClaim", "InstanceUnhealthy"), ("Node", "InstanceUnhealthy")}
    assert "EC2 InstanceStatus check reachability failed for instance" in w.recorder.events[0][4]
    # polled again a minute later: the workflow is running, nothing new starts
    again = handle_status_checks(w.deps(), failures)
    assert again.outcomes[0].started == []
