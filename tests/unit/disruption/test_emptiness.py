from __future__ import annotations

from datetime import timedelta

from nodeflow.disruption.model import Reason, Snapshot
from nodeflow.disruption.round import decide

from .builders import CATALOG, NOW, node, pod, pool, snapshot


def test_node_with_only_daemonset_and_mirror_pods_is_deleted() -> None:
    s = snapshot(
        [node("idle"), node("busy", "m5.large")],
        [
            pod("ds", "idle", "100m", "64Mi", owner="DaemonSet"),
            pod("mirror", "idle", "100m", "64Mi", annotations={"kubernetes.io/config.mirror": "x"}),
            pod("app", "busy", "1500m", "6Gi"),
        ],
        pools=[pool(budgets=[{"nodes": "100%"}])],
    )
    result = decide(s, CATALOG, NOW)
    assert result.command is not None
    assert result.command.reason is Reason.EMPTY
    assert result.command.candidates == ("idle",)
    assert result.command.replacements == ()
    assert result.command.saved == result.command.price_before > 0


def test_all_empty_nodes_go_together_within_budget() -> None:
    s = snapshot([node(f"n{i}") for i in range(4)], [], pools=[pool(budgets=[{"nodes": "2"}])])
    result = decide(s, CATALOG, NOW)
    assert result.command is not None
    assert result.command.candidates == ("n0", "n1")
    assert {b.node for b in result.blocked} == {"n2", "n3"}


def test_consolidate_after_counts_from_the_last_pod_event() -> None:
    s = snapshot([node("idle")], [], pools=[pool(after="10m", budgets=[{"nodes": "1"}])])
    recent = Snapshot(s.state, last_pod_events={"idle": NOW - timedelta(minutes=5)})
    assert decide(recent, CATALOG, NOW).command is None
    old = Snapshot(s.state, last_pod_events={"idle": NOW - timedelta(minutes=10)})
    command = decide(old, CATALOG, NOW).command
    assert command is not None
    assert command.reason is Reason.EMPTY


def test_last_pod_event_defaults_to_the_newest_pod() -> None:
    s = snapshot(
        [node("idle")],
        [pod("ds", "idle", "100m", "64Mi", owner="DaemonSet", created="2026-11-21T11:58:00Z")],
        pools=[pool(after="5m", budgets=[{"nodes": "1"}])],
    )
    assert decide(s, CATALOG, NOW).command is None
    assert decide(s, CATALOG, NOW + timedelta(minutes=3)).command is not None


def test_consolidate_after_never_disables_emptiness() -> None:
    s = snapshot([node("idle")], [], pools=[pool(after="Never", budgets=[{"nodes": "1"}])])
    assert decide(s, CATALOG, NOW).command is None


def test_when_empty_policy_deletes_empty_nodes_only() -> None:
    s = snapshot(
        [node("a"), node("b")],
        [pod("p", "a"), pod("q", "b")],
        pools=[pool(policy="WhenEmpty", budgets=[{"nodes": "100%"}])],
    )
    assert decide(s, CATALOG, NOW).command is None
    s2 = snapshot(
        [node("a"), node("b")], [pod("p", "a")], pools=[pool(policy="WhenEmpty", budgets=[{"nodes": "100%"}])]
    )
    command = decide(s2, CATALOG, NOW).command
    assert command is not None
    assert command.reason is Reason.EMPTY
    assert command.candidates == ("b",)


def test_a_last_pod_event_in_the_future_is_not_trusted() -> None:
    """A future lastPodEventTime (an event time from a bad clock, or year 9999) would hold the node for ever
    and used to overflow the timer arithmetic: it is ignored in favour of the next source (the node's age)."""
    from datetime import UTC, datetime

    s = snapshot([node("idle")], [], pools=[pool(after="10m", budgets=[{"nodes": "1"}])])
    for future in (datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), NOW + timedelta(days=3)):
        bad = Snapshot(s.state, last_pod_events={"idle": future})
        command = decide(bad, CATALOG, NOW).command
        assert command is not None, future
        assert command.reason is Reason.EMPTY
