"""watch: list -> watch, 410 relist + reconcile, re-watch from the last resourceVersion, missing CRDs, resyncs.

The Kubernetes side is a scripted fake client (the real client is exercised by the functional tests).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nodeflow_agent.kube import Gone, KubeError, NotFound, Page
from nodeflow_agent.metrics import Metrics
from nodeflow_agent.translate import RESOURCES, Event
from nodeflow_agent.watch import Watcher

PODS = RESOURCES[0]
UNSCHEDULABLE = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]


def pod(name: str, rv: int, *, node: str = "", unschedulable: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {}}]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": str(rv)},
        "spec": spec,
        "status": {"phase": "Pending", "conditions": UNSCHEDULABLE if unschedulable and not node else []},
    }


class FakeKube:
    """Scripted LIST and WATCH answers; an exhausted watch script blocks until aborted."""

    def __init__(self) -> None:
        self.lists: list[list[Page] | Exception] = []
        self.watches: list[list[dict[str, Any]] | Exception] = []
        self.list_calls = 0
        self.watch_calls: list[str] = []
        self._abort = threading.Event()

    def list_pages(self, path: str, page_size: int = 500) -> Iterator[Page]:
        self.list_calls += 1
        script = self.lists.pop(0)
        if isinstance(script, Exception):
            raise script
        yield from script

    def watch(self, path: str, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self._abort.wait(10)
            self._abort.clear()
            raise ConnectionAbortedError("aborted")
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        yield from script

    def abort(self) -> None:
        self._abort.set()

    def clear_abort(self) -> None:
        pass


class Sink:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.from_list: list[bool] = []

    def __call__(self, events: list[Event], from_list: bool) -> None:
        self.events.extend(events)
        self.from_list.extend([from_list] * len(events))

    def clear(self) -> None:
        self.events.clear()
        self.from_list.clear()

    def kinds(self) -> list[tuple[str, str, str]]:
        return [(e.kind, e.object["name"], e.reason) for e in self.events]


def make(kube: FakeKube, sink: Sink, **kwargs: Any) -> Watcher:
    options: dict[str, Any] = {"backoff_base": 0.001, "backoff_max": 0.01, "rng": random.Random(3), **kwargs}
    return Watcher(PODS, kube, sink, Metrics(), **options)  # type: ignore[arg-type]


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.002)


def test_initial_list_announces_unschedulable_pods_and_sets_the_resource_version() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([pod("a", 5), pod("b", 6, node="n1")], "10"), Page([pod("c", 7)], "10")]]
    w = make(kube, sink)
    w.relist("start")
    assert sink.kinds() == [("PodUnschedulable", "a", "relist"), ("PodUnschedulable", "c", "relist")]
    assert w.resource_version == "10"
    assert sink.from_list == [True, True]  # LIST events may wait for room in the buffer
    assert w.synced.is_set()
    assert set(w.known) == {"uid-a", "uid-b", "uid-c"}


def test_watch_applies_events_and_follows_bookmarks() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([pod("a", 5), pod("b", 6, node="n1")], "10")]]
    kube.watches = [
        [
            {"type": "ADDED", "object": pod("c", 11)},
            {"type": "MODIFIED", "object": pod("a", 12, node="n2")},
            {"type": "DELETED", "object": pod("b", 13, node="n1")},
            {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "20"}}},
        ]
    ]
    w = make(kube, sink)
    w.relist("start")
    sink.clear()
    w.watch_once(60)
    assert kube.watch_calls == ["10"]
    assert sink.kinds() == [
        ("PodUnschedulable", "c", "watch"),
        ("PodBound", "a", "watch"),
        ("PodDeleted", "b", "watch"),
    ]
    assert w.resource_version == "20"
    assert "uid-b" not in w.known
    assert sink.from_list == [False, False, False]  # watch events never wait for room in the buffer


def test_relist_after_gone_reconciles_missed_transitions_and_deletions() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [
        [Page([pod("a", 5), pod("b", 6, node="n1"), pod("c", 7)], "10")],
        # while the watch was gone: a got bound, b (bound) and c (unschedulable) were deleted, d appeared
        [Page([pod("a", 30, node="n1"), pod("d", 31)], "40")],
    ]
    w = make(kube, sink)
    w.relist("start")
    sink.clear()
    w.relist("gone")
    assert sorted(sink.kinds()) == [
        ("PodBound", "a", "relist"),
        ("PodDeleted", "b", "relist"),
        ("PodUnschedulable", "d", "relist"),
    ]
    deleted = next(e for e in sink.events if e.kind == "PodDeleted")
    assert deleted.object == {"namespace": "default", "name": "b", "uid": "uid-b", "nodeName": "n1"}
    assert w.resource_version == "40"
    assert set(w.known) == {"uid-a", "uid-d"}


def test_resync_resends_unschedulable_pods_with_a_round() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([pod("a", 5), pod("b", 6, node="n1")], "10")]] * 3
    clock = {"t": 1_700_000_000.0}
    w = make(kube, sink, wall=lambda: clock["t"])
    w.relist("start")
    first = sink.events[0].id
    sink.clear()
    w.relist("resync")
    assert sink.kinds() == [("PodUnschedulable", "a", "resync")]
    resync_id = sink.events[0].id
    assert resync_id != first
    clock["t"] += 300
    sink.clear()
    w.relist("resync")
    assert sink.events[0].id not in (first, resync_id)


def test_full_resync_resends_everything_current() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([pod("a", 5), pod("b", 6)], "10")], [Page([pod("a", 5)], "12")]]
    w = make(kube, sink)
    w.relist("start")
    sink.clear()
    w.relist("full")
    # a is re-sent although nothing changed; b vanished but was never bound: nothing to report
    assert sink.kinds() == [("PodUnschedulable", "a", "relist")]


def test_run_relists_on_410_and_rewatches_from_the_last_version_on_errors() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([pod("a", 5)], "10")], [Page([pod("a", 12, node="n1"), pod("b", 25)], "30")]]
    kube.watches = [
        [{"type": "MODIFIED", "object": pod("a", 12, node="n1")}],  # then the server ends the watch
        [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}],
        ConnectionResetError("connection reset"),
        [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}],
    ]
    w = make(kube, sink)
    w.start()
    try:
        wait_until(lambda: len(kube.watch_calls) == 5)
        # list@10, watch@10, watch@12 (last event), watch@15 (bookmark) fails, watch@15 again -> 410, relist, watch@30
        assert kube.watch_calls == ["10", "12", "15", "15", "30"]
        assert kube.list_calls == 2
        assert sink.kinds() == [
            ("PodUnschedulable", "a", "relist"),
            ("PodBound", "a", "watch"),
            ("PodUnschedulable", "b", "relist"),
        ]
        assert w.metrics.value("nodeflow_agent_relists_total", resource="pods", cause="gone") == 1
    finally:
        w.stop()
        w.join(5)
    assert not w.is_alive()


def test_http_410_on_the_watch_also_relists() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([], "10")], [Page([], "20")]]
    kube.watches = [Gone(410, "Expired", "too old")]
    w = make(kube, sink)
    w.start()
    try:
        wait_until(lambda: len(kube.watch_calls) == 2)
        assert kube.watch_calls == ["10", "20"]
    finally:
        w.stop()
        w.join(5)


def test_missing_crd_is_retried_and_keeps_the_watcher_unsynced() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [NotFound(404, "NotFound", "the server could not find the requested resource")] * 3 + [
        [Page([pod("a", 5)], "10")]
    ]
    w = make(kube, sink)
    assert not w.synced.is_set()
    w.start()
    try:
        wait_until(w.synced.is_set)
        assert kube.list_calls == 4
        assert w.metrics.value("nodeflow_agent_watch_errors_total", resource="pods", error="notfound") == 3
    finally:
        w.stop()
        w.join(5)


def test_other_api_errors_back_off_and_retry() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [KubeError(500, "InternalError", "etcd"), [Page([], "10")]]
    kube.watches = [KubeError(429, "TooManyRequests", "slow down")]
    w = make(kube, sink)
    w.start()
    try:
        wait_until(lambda: len(kube.watch_calls) == 2)
        assert kube.watch_calls == ["10", "10"]
    finally:
        w.stop()
        w.join(5)


def test_full_resync_request_interrupts_the_watch() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([pod("a", 5)], "10")], [Page([pod("a", 5)], "11")]]
    w = make(kube, sink)
    w.start()
    try:
        wait_until(lambda: len(kube.watch_calls) == 1)  # blocked in the watch
        w.request_full_resync()
        wait_until(lambda: len(kube.watch_calls) == 2)
        assert kube.list_calls == 2
        assert sink.kinds() == [("PodUnschedulable", "a", "relist"), ("PodUnschedulable", "a", "relist")]
        assert w.metrics.value("nodeflow_agent_relists_total", resource="pods", cause="full") == 1
    finally:
        w.stop()
        w.join(5)


@pytest.mark.parametrize("resync_seconds", [0.2])
def test_periodic_resync(resync_seconds: float) -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([pod("a", 5)], "10")]] * 50

    class TimedKube(FakeKube):
        def watch(self, path: str, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
            self.watch_calls.append(resource_version)
            time.sleep(0.05)  # the server ends the watch after timeoutSeconds (shortened here)
            return iter(())

    timed = TimedKube()
    timed.lists = kube.lists
    w = make(timed, sink, resync_seconds=resync_seconds)  # type: ignore[arg-type]
    w.start()
    try:
        wait_until(lambda: sum(1 for e in sink.events if e.reason == "resync") >= 2)
    finally:
        w.stop()
        w.join(5)
    assert w.metrics.value("nodeflow_agent_relists_total", resource="pods", cause="resync") >= 2


def test_repeated_410s_back_off_instead_of_relisting_in_a_loop() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([], str(i))] for i in range(1000)]
    kube.watches = [Gone(410, "Expired", "too old")] * 1000
    w = make(kube, sink, backoff_base=0.05, backoff_max=0.1)
    w.start()
    time.sleep(0.5)
    w.stop()
    w.join(5)
    assert 2 <= kube.list_calls <= 20  # with no backoff this would be hundreds


def test_a_410_after_progress_relists_at_once() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([], "10")], [Page([], "20")], [Page([], "30")]]
    kube.watches = [
        [{"type": "ADDED", "object": pod("a", 11)}, {"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}],
        [{"type": "ADDED", "object": pod("b", 21)}, {"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}],
    ]
    w = make(kube, sink, backoff_base=5.0, backoff_max=5.0)  # a backoff would make this test time out
    w.start()
    try:
        wait_until(lambda: kube.list_calls == 3, timeout=3.0)
    finally:
        w.stop()
        w.join(5)


def test_an_unexpected_error_is_logged_and_the_watcher_keeps_going() -> None:
    kube, sink = FakeKube(), Sink()
    kube.lists = [[Page([pod("a", 5)], "10")], [Page([pod("a", 5)], "20")]]
    calls = {"n": 0}

    def flaky_sink(events: list[Event], from_list: bool) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("a bug")
        sink(events, from_list)

    w = Watcher(PODS, kube, flaky_sink, Metrics(), backoff_base=0.001, backoff_max=0.01)  # type: ignore[arg-type]
    w.start()
    try:
        wait_until(w.synced.is_set)
        assert w.is_alive()
        assert sink.kinds() == [("PodUnschedulable", "a", "relist")]
        assert w.metrics.value("nodeflow_agent_watch_errors_total", resource="pods", error="bug") == 1
    finally:
        w.stop()
        w.join(5)
