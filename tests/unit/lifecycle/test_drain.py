"""The drain decisions (nodeflow.lifecycle.drain_plan): skips, group order, do-not-disrupt with and without a
terminationGracePeriod, deletion timing, the wait the workflow takes, the VolumeAttachment filter."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeflow.lifecycle import drain_plan as d
from nodeflow.lifecycle.drain_plan import DrainPod, Group, Skip

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def pod(name: str, **kw: Any) -> DrainPod:
    kw.setdefault("phase", "Running")
    return DrainPod(namespace=kw.pop("namespace", "default"), name=name, uid=f"uid-{name}", **kw)


def keys(pods: Any) -> list[str]:
    return [p.name for p in pods]


# --- skips ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "why"),
    [
        (pod("done", phase="Succeeded"), Skip.TERMINAL),
        (pod("failed", phase="Failed"), Skip.TERMINAL),
        (pod("static", owner_kinds=("Node",)), Skip.MIRROR),
        (pod("static2", mirror_annotation=True), Skip.MIRROR),
        (pod("tolerant", tolerates_disrupted=True), Skip.TOLERATES_DISRUPTED),
        (pod("stuck", deletion_timestamp=NOW - timedelta(seconds=61)), Skip.STUCK_TERMINATING),
    ],
)
def test_skipped_pods_are_neither_evicted_nor_waited_for(p: DrainPod, why: Skip) -> None:
    plan = d.plan_drain([p], NOW)
    assert plan.skipped == ((p, why),)
    assert plan.evict == plan.delete == plan.waiting == ()
    assert plan.done
    assert d.choose_wait(plan) == 0


def test_a_pod_terminating_for_less_than_a_minute_is_waited_for_not_evicted_again() -> None:
    p = pod("leaving", deletion_timestamp=NOW - timedelta(seconds=59))
    plan = d.plan_drain([p, pod("web")], NOW)
    assert keys(plan.waiting) == ["leaving", "web"]
    assert keys(plan.evict) == ["web"]
    assert plan.terminating == (p,)
    assert not plan.done


# --- tolerations and manifests ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tolerations", "tolerated"),
    [
        ([], False),
        ([{"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"}], True),
        ([{"key": "karpenter.sh/disrupted", "operator": "Exists"}], True),
        ([{"operator": "Exists"}], True),  # tolerates everything (many DaemonSets)
        ([{"key": "karpenter.sh/disrupted", "operator": "Equal", "value": "", "effect": "NoSchedule"}], True),
        ([{"key": "karpenter.sh/disrupted", "value": "x", "effect": "NoSchedule"}], False),
        ([{"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}], False),
        ([{"operator": "Exists", "effect": "NoExecute"}], False),
    ],
)
def test_tolerating_the_disrupted_taint(tolerations: list[dict[str, str]], tolerated: bool) -> None:
    assert d.tolerates(tolerations, "karpenter.sh/disrupted", "NoSchedule") is tolerated


def test_pod_from_manifest() -> None:
    p = d.pod_from_manifest(
        {
            "metadata": {
                "name": "db-0",
                "namespace": "data",
                "uid": "u1",
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "ownerReferences": [{"kind": "DaemonSet", "name": "ds", "uid": "x", "apiVersion": "apps/v1"}],
                "deletionTimestamp": "2026-01-02T03:04:00Z",
            },
            "spec": {
                "priorityClassName": "system-node-critical",
                "terminationGracePeriodSeconds": 45,
                "tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists"}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                ],
            },
            "status": {"phase": "Running"},
        }
    )
    assert (p.key, p.uid, p.phase, p.grace) == ("data/db-0", "u1", "Running", 45)
    assert p.do_not_disrupt
    assert p.is_daemon
    assert p.is_critical
    assert p.tolerates_disrupted
    assert p.group is Group.CRITICAL_DAEMONSET
    assert p.deletion_timestamp == datetime(2026, 1, 2, 3, 4, 0, tzinfo=UTC)
    assert p.claims == ("data-db-0", "db-0-scratch")
    mirror = d.pod_from_manifest(
        {"metadata": {"name": "kube-proxy", "annotations": {"kubernetes.io/config.mirror": "h"}}}
    )
    assert mirror.is_mirror
    assert mirror.namespace == "default"
    assert mirror.grace == d.DEFAULT_GRACE_SECONDS
    assert not d.pod_from_manifest(
        {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "false"}}}
    ).do_not_disrupt


# --- group order -----------------------------------------------------------------------------------


def test_groups_drain_one_at_a_time_in_order() -> None:
    ordinary = pod("a-web")
    daemon = pod("b-logs", owner_kinds=("DaemonSet",))
    critical = pod("c-dns", priority_class_name="system-cluster-critical")
    critical_daemon = pod("d-cni", owner_kinds=("DaemonSet",), priority_class_name="system-node-critical")
    left = [critical_daemon, critical, daemon, ordinary]
    seen = []
    while left:
        plan = d.plan_drain(left, NOW)
        assert len(plan.waiting) == len(left)
        seen.append((plan.group, keys(plan.evict)))
        left = [p for p in left if p not in plan.evict]
    assert seen == [
        (Group.ORDINARY, ["a-web"]),
        (Group.DAEMONSET, ["b-logs"]),
        (Group.CRITICAL, ["c-dns"]),
        (Group.CRITICAL_DAEMONSET, ["d-cni"]),
    ]
    assert d.plan_drain([], NOW).done


def test_the_next_group_waits_for_terminating_pods_of_the_previous_one() -> None:
    leaving = pod("web", deletion_timestamp=NOW - timedelta(seconds=5))
    plan = d.plan_drain([leaving, pod("logs", owner_kinds=("DaemonSet",))], NOW)
    assert plan.group is Group.ORDINARY
    assert plan.evict == ()
    assert not plan.done


# --- do-not-disrupt and the terminationGracePeriod deadline -------------------------------------------


def test_do_not_disrupt_without_a_deadline_blocks_the_drain() -> None:
    keep = pod("batch", do_not_disrupt=True)
    plan = d.plan_drain([keep, pod("web")], NOW)
    assert keys(plan.evict) == ["web"]
    assert plan.blocked == (keep,)
    assert plan.delete == ()
    # later, alone, still blocking; the workflow looks again after the blocked wait
    alone = d.plan_drain([keep], NOW + timedelta(days=300))
    assert not alone.done
    assert alone.blocked == (keep,)
    assert d.choose_wait(alone) == d.BLOCKED_WAIT_SECONDS


def test_a_drain_held_only_by_do_not_disrupt_backs_off() -> None:
    keep = pod("batch", do_not_disrupt=True)
    alone = d.plan_drain([keep], NOW)
    assert d.held_only(alone)
    waits = [d.choose_wait(alone, held_passes=n) for n in range(8)]
    assert waits == [10, 20, 40, 80, 160, 300, 300, 300]
    # anything in flight: no backoff (an eviction let through, a pod leaving, a deletion for the deadline)
    with_web = d.plan_drain([keep, pod("web")], NOW)
    assert not d.held_only(with_web)  # web was evicted
    assert d.choose_wait(with_web, held_passes=5) == d.BLOCKED_WAIT_SECONDS
    leaving = pod("old", deletion_timestamp=NOW + timedelta(seconds=20))
    assert not d.held_only(d.plan_drain([keep, leaving], NOW))
    due = d.plan_drain([keep, pod("web", grace_seconds=30)], NOW, NOW + timedelta(seconds=20))
    assert due.delete
    assert not d.held_only(due)


def test_a_drain_held_by_pod_disruption_budgets_backs_off_and_resets_on_progress() -> None:
    web, api = pod("web"), pod("api")
    plan = d.plan_drain([web, api], NOW)
    every = {"default/web", "default/api"}
    assert d.held_only(plan, refused=every)
    assert [d.choose_wait(plan, refused=every, held_passes=n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]
    # PDB refusals and do-not-disrupt pods together: held as well
    mixed = d.plan_drain([web, pod("batch", do_not_disrupt=True)], NOW)
    assert d.held_only(mixed, refused={"default/web"})
    assert d.choose_wait(mixed, refused={"default/web"}, held_passes=3) == 80
    # progress (one eviction let through): not held, the Karpenter-like short wait; the caller resets its count
    assert not d.held_only(plan, refused={"default/web"})
    assert d.choose_wait(plan, refused={"default/web"}, held_passes=6) == d.BLOCKED_WAIT_SECONDS
    # nothing refused, nothing blocked: not held
    assert not d.held_only(plan)


@pytest.mark.parametrize("held_passes", [0, 1, 4, 5, 6, 1000, 1001, 5000, 10**6, 10**30])
def test_the_backoff_takes_any_count(held_passes: int) -> None:
    expected = min(d.HELD_MAX_WAIT_SECONDS, d.BLOCKED_WAIT_SECONDS * 2 ** min(held_passes, 5))
    assert d.backoff_wait(held_passes) == expected
    keep = d.plan_drain([pod("batch", do_not_disrupt=True)], NOW)
    assert d.choose_wait(keep, held_passes=held_passes) == expected


def test_a_held_drain_never_waits_past_a_deletion_time_or_the_deadline() -> None:
    keep = pod("batch", do_not_disrupt=True, grace_seconds=60)
    deadline = NOW + timedelta(hours=1)
    plan = d.plan_drain([keep], NOW, deadline)
    assert d.held_only(plan)  # a deadline far away: backs off too
    assert d.choose_wait(plan, held_passes=5) == d.HELD_MAX_WAIT_SECONDS
    # 100 s before batch is due (deadline - its 60 s grace): the wait ends then
    near = d.plan_drain([keep], deadline - timedelta(seconds=160), deadline)
    assert d.choose_wait(near, held_passes=5) == 100
    # a PDB-held pod with a short grace: the wait ends at its deletion time
    web = pod("web", grace_seconds=10)
    soon = d.plan_drain([web], deadline - timedelta(seconds=45), deadline)
    assert d.held_only(soon, refused={"default/web"})
    assert d.choose_wait(soon, refused={"default/web"}, held_passes=4) == 35
    later = d.plan_drain([web], deadline - timedelta(seconds=9.5), deadline)
    assert later.delete
    assert not d.held_only(later, refused={"default/web"})


@settings(max_examples=300, deadline=None)
@given(
    pods=st.lists(
        st.builds(
            DrainPod,
            namespace=st.just("default"),
            name=st.text(alphabet="abcdef", min_size=1, max_size=3),
            do_not_disrupt=st.booleans(),
            grace_seconds=st.one_of(st.none(), st.integers(0, 600)),
            deletion_timestamp=st.one_of(st.none(), st.integers(0, 50).map(lambda s: NOW - timedelta(seconds=s))),
        ),
        max_size=6,
        unique_by=lambda p: p.name,
    ),
    refuse=st.booleans(),
    held_passes=st.integers(0, 10**9),
    deadline_in=st.one_of(st.none(), st.integers(-10, 100_000)),
)
def test_the_wait_is_bounded_for_any_held_count(
    pods: list[DrainPod], refuse: bool, held_passes: int, deadline_in: int | None
) -> None:
    deadline = None if deadline_in is None else NOW + timedelta(seconds=deadline_in)
    plan = d.plan_drain(pods, NOW, deadline)
    refused = {p.key for p in plan.evict} if refuse else set()
    wait = d.choose_wait(plan, refused=refused, held_passes=held_passes)
    if plan.done:
        assert wait == 0
        return
    assert d.MIN_WAIT_SECONDS <= wait <= d.HELD_MAX_WAIT_SECONDS
    if not d.held_only(plan, refused=refused):
        assert wait <= d.MAX_WAIT_SECONDS
    if deadline is not None:  # never oversleeps a deletion time (beyond the minimum wait)
        deleted = {x.pod.key for x in plan.delete}  # deleted now: in flight, waited for by their grace
        waiting = [p for p in plan.waiting if not p.is_terminating and p.key not in deleted]
        due = min([deadline] + [deadline - timedelta(seconds=p.grace) for p in waiting])
        assert wait <= max(d.MIN_WAIT_SECONDS, math.ceil((due - NOW).total_seconds()))


def test_with_a_deadline_pods_are_deleted_at_deadline_minus_their_grace() -> None:
    deadline = NOW + timedelta(seconds=100)
    keep = pod("batch", do_not_disrupt=True, grace_seconds=60)
    web = pod("web", grace_seconds=30)
    early = d.plan_drain([keep, web], deadline - timedelta(seconds=75), deadline)
    assert early.delete == ()
    assert keys(early.evict) == ["web"]
    assert early.blocked == (keep,)
    # batch is due in 15 s: a PDB-blocked web is looked at again after the blocked wait first
    assert d.choose_wait(early, refused={"default/web"}) == d.BLOCKED_WAIT_SECONDS
    # 5 s before batch is due, the wait ends at its deletion time
    soon = d.plan_drain([keep, web], deadline - timedelta(seconds=65), deadline)
    assert d.choose_wait(soon, refused={"default/web"}) == 5

    at = d.plan_drain([keep, web], deadline - timedelta(seconds=60), deadline)
    assert at.delete == (d.Deletion(keep, 60),)
    assert keys(at.evict) == ["web"]
    assert at.blocked == ()

    later = d.plan_drain([keep, web], deadline - timedelta(seconds=20.5), deadline)
    assert {x.pod.name: x.grace_seconds for x in later.delete} == {"batch": 20, "web": 20}
    assert later.evict == ()
    assert not later.done


def test_past_the_deadline_everything_left_is_deleted_and_the_drain_is_done() -> None:
    deadline = NOW
    leaving = pod("leaving", deletion_timestamp=NOW - timedelta(seconds=10))
    plan = d.plan_drain(
        [pod("batch", do_not_disrupt=True), pod("web"), pod("logs", owner_kinds=("DaemonSet",)), leaving],
        NOW,
        deadline,
    )
    assert plan.deadline_passed
    assert plan.done
    assert sorted((x.pod.name, x.grace_seconds) for x in plan.delete) == [("batch", 0), ("logs", 0), ("web", 0)]
    assert plan.evict == ()
    assert d.choose_wait(plan) == 0


def test_drain_deadline() -> None:
    assert d.drain_deadline(NOW, 90.0) == NOW + timedelta(seconds=90)
    assert d.drain_deadline(None, 90.0) is None
    assert d.drain_deadline(NOW, None) is None


@settings(max_examples=300, deadline=None)
@given(
    grace=st.integers(min_value=0, max_value=7200),
    tgp=st.integers(min_value=0, max_value=7200),
    elapsed=st.floats(min_value=0, max_value=10_000, allow_nan=False),
    do_not_disrupt=st.booleans(),
)
def test_deletion_time_is_deadline_minus_the_pods_grace(
    grace: int, tgp: int, elapsed: float, do_not_disrupt: bool
) -> None:
    deleted_at = NOW
    deadline = d.drain_deadline(deleted_at, float(tgp))
    assert deadline is not None
    now = deleted_at + timedelta(seconds=elapsed)
    p = pod("p", grace_seconds=grace, do_not_disrupt=do_not_disrupt)
    plan = d.plan_drain([p], now, deadline)
    due = now >= deadline - timedelta(seconds=grace)
    assert bool(plan.delete) is due
    if due:
        (deletion,) = plan.delete
        assert 0 <= deletion.grace_seconds <= grace
        assert deletion.grace_seconds <= max(0.0, (deadline - now).total_seconds())
    else:
        # not due: evicted (or held by do-not-disrupt), and the wait never oversleeps its deletion time
        assert keys(plan.evict) == ([] if do_not_disrupt else ["p"])
        wait = d.choose_wait(plan)
        assert d.MIN_WAIT_SECONDS <= wait <= d.MAX_WAIT_SECONDS
        until_due = (deadline - timedelta(seconds=grace) - now).total_seconds()
        assert wait <= max(d.MIN_WAIT_SECONDS, until_due + 1)


# --- invariants over arbitrary pods ----------------------------------------------------------------------

pods_strategy = st.lists(
    st.builds(
        DrainPod,
        namespace=st.sampled_from(["default", "kube-system"]),
        name=st.text(alphabet="abcdefgh", min_size=1, max_size=4),
        uid=st.none(),
        phase=st.sampled_from([None, "Pending", "Running", "Succeeded", "Failed"]),
        owner_kinds=st.sampled_from([(), ("ReplicaSet",), ("DaemonSet",), ("Node",)]),
        mirror_annotation=st.booleans(),
        do_not_disrupt=st.booleans(),
        priority_class_name=st.sampled_from([None, "high", "system-cluster-critical", "system-node-critical"]),
        tolerates_disrupted=st.booleans(),
        deletion_timestamp=st.one_of(st.none(), st.integers(0, 120).map(lambda s: NOW - timedelta(seconds=s))),
        grace_seconds=st.one_of(st.none(), st.integers(0, 600)),
    ),
    max_size=12,
    unique_by=lambda p: (p.namespace, p.name),
)


@settings(max_examples=300, deadline=None)
@given(pods=pods_strategy, tgp=st.one_of(st.none(), st.integers(0, 900)), elapsed=st.integers(0, 1200))
def test_plan_invariants(pods: list[DrainPod], tgp: int | None, elapsed: int) -> None:
    deadline = d.drain_deadline(NOW - timedelta(seconds=elapsed), None if tgp is None else float(tgp))
    plan = d.plan_drain(pods, NOW, deadline)
    skipped = {p.key for p, _ in plan.skipped}
    waiting = {p.key for p in plan.waiting}
    assert skipped | waiting == {p.key for p in pods}
    assert not skipped & waiting
    acted = [p.key for p in plan.evict] + [x.pod.key for x in plan.delete]
    assert len(acted) == len(set(acted))  # nothing is both evicted and deleted
    assert set(acted) <= waiting  # skipped pods are never touched
    for p in plan.evict:
        assert p.group == plan.group
        assert not p.do_not_disrupt
        assert not p.is_terminating
    for x in plan.delete:
        assert not x.pod.is_terminating
        assert x.grace_seconds >= 0
    assert all(p.do_not_disrupt and p.group == plan.group for p in plan.blocked)
    assert plan.group == min((p.group for p in plan.waiting), default=None)
    assert plan.done == (not plan.waiting or (deadline is not None and deadline <= NOW))
    wait = d.choose_wait(plan)
    assert wait == 0 if plan.done else d.MIN_WAIT_SECONDS <= wait <= d.MAX_WAIT_SECONDS


# --- the wait ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "refused", "expected"),
    [
        ([pod("web", grace_seconds=5)], (), 5),  # until the evicted pod's grace period ends
        ([pod("web", grace_seconds=5), pod("api", grace_seconds=12)], (), 12),  # the longest of them
        ([pod("web", grace_seconds=600)], (), d.MAX_WAIT_SECONDS),
        ([pod("web", grace_seconds=0)], (), d.MIN_WAIT_SECONDS),
        ([pod("web")], ("default/web",), d.BLOCKED_WAIT_SECONDS),  # a PDB said no: look again soon
        ([pod("web", grace_seconds=30), pod("db")], ("default/db",), d.BLOCKED_WAIT_SECONDS),
        ([pod("web", deletion_timestamp=NOW + timedelta(seconds=7))], (), 7),  # terminating: until its deadline
        ([pod("web", deletion_timestamp=NOW - timedelta(seconds=7))], (), d.MIN_WAIT_SECONDS),
    ],
)
def test_choose_wait(pods: list[DrainPod], refused: tuple[str, ...], expected: int) -> None:
    assert d.choose_wait(d.plan_drain(pods, NOW), refused=refused) == expected


def test_the_wait_never_passes_the_deadline() -> None:
    deadline = NOW + timedelta(seconds=8)
    plan = d.plan_drain([pod("web", grace_seconds=2)], NOW, deadline)
    assert keys(plan.evict) == ["web"]
    assert d.choose_wait(plan, refused={"default/web"}) == 6  # web's deletion time: deadline - 2 s
    assert d.choose_volume_wait(NOW, None) == d.VOLUME_WAIT_SECONDS
    assert d.choose_volume_wait(NOW, NOW + timedelta(seconds=3)) == 3
    assert d.choose_volume_wait(NOW, NOW + timedelta(seconds=0.5)) == d.MIN_WAIT_SECONDS


# --- volume attachments --------------------------------------------------------------------------------------


def test_blocking_attachments() -> None:
    attachments = [
        d.Attachment("csi-1", "node-a", "pv-1"),
        d.Attachment("csi-2", "node-a", "pv-2"),  # used by a pod that stays (ignored)
        d.Attachment("csi-3", "node-b", "pv-3"),  # another node
        d.Attachment("csi-4", "node-a", None),  # an inline volume: not tracked
    ]
    assert [a.name for a in d.blocking_attachments(attachments, "node-a", {"pv-2"})] == ["csi-1"]
    assert d.blocking_attachments(attachments, "node-c") == ()
    parsed = d.attachment_from_manifest(
        {"metadata": {"name": "csi-9"}, "spec": {"nodeName": "node-a", "source": {"persistentVolumeName": "pv-9"}}}
    )
    assert parsed == d.Attachment("csi-9", "node-a", "pv-9")


def test_undrainable_pods_are_the_skipped_ones_that_stay() -> None:
    plan = d.plan_drain(
        [
            pod("static", owner_kinds=("Node",)),
            pod("tolerant", tolerates_disrupted=True),
            pod("job", phase="Succeeded"),
            pod("web"),
        ],
        NOW,
    )
    assert keys(plan.undrainable) == ["static", "tolerant"]


def test_parse_time() -> None:
    assert d.parse_time("2026-01-02T03:04:05Z") == NOW
    assert d.parse_time("not a time") is None
    assert d.parse_time(None) is None


def test_absurd_grace_periods_never_overflow_the_drain() -> None:
    """terminationGracePeriodSeconds is an int64 anyone may set: a huge one must not make every drain pass raise
    (OverflowError) and fail the node's workflow: such a pod is deleted at once with what is left until the
    deadline as its grace period, as any pod whose grace period is longer than the time left."""
    huge = pod("huge", grace_seconds=2**62)
    deadline = d.drain_deadline(NOW, 2**62)
    assert deadline is not None
    assert deadline.year == 9999
    plan = d.plan_drain([huge, pod("web")], NOW, NOW + timedelta(minutes=5))
    assert [(x.pod.name, x.grace_seconds) for x in plan.delete] == [("huge", 300)]
    assert d.choose_wait(plan) > 0
