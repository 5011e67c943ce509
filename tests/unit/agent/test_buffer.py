"""buffer: coalescing per object, bounded with drop-oldest + owed full resync, batch takes."""

from __future__ import annotations

import threading
import time

import pytest

from nodeflow_agent.buffer import Buffer, Item


def item(uid: str, event_id: str = "", size: int = 10) -> Item:
    return Item(("Pod", uid), event_id or f"id-{uid}", b"x" * size)


def test_newer_event_for_the_same_object_replaces_the_unsent_one() -> None:
    buf = Buffer(10)
    buf.put(item("a", "a1"))
    buf.put(item("b", "b1"))
    buf.put(item("a", "a2", size=20))
    assert len(buf) == 2
    assert buf.coalesced == 1
    assert buf.size_bytes == 30
    assert [i.event_id for i in buf.take(10, 10_000)] == ["b1", "a2"]  # the replacement moves to the back
    assert buf.size_bytes == 0


def test_same_uid_in_another_family_is_another_object() -> None:
    buf = Buffer(10)
    buf.put(Item(("Pod", "u"), "p", b"1"))
    buf.put(Item(("Node", "u"), "n", b"1"))
    assert len(buf) == 2
    assert buf.coalesced == 0


def test_overflow_drops_the_oldest_and_owes_one_full_resync() -> None:
    buf = Buffer(3)
    for uid in "abcde":
        buf.put(item(uid))
    assert len(buf) == 3
    assert buf.dropped == 2
    assert buf.overflow_pending
    assert [i.event_id for i in buf.take(10, 10_000)] == ["id-c", "id-d", "id-e"]
    assert buf.claim_overflow() is True
    assert buf.claim_overflow() is False
    assert not buf.overflow_pending


def test_coalescing_into_a_full_buffer_drops_nothing() -> None:
    buf = Buffer(2)
    buf.put(item("a"))
    buf.put(item("b"))
    buf.put(item("a", "a2"))
    assert (len(buf), buf.dropped, buf.overflow_pending) == (2, 0, False)


def test_take_respects_count_and_bytes_but_always_takes_one() -> None:
    buf = Buffer(100)
    for i in range(10):
        buf.put(item(str(i), size=100))
    assert len(buf.take(3, 10_000)) == 3
    batch = buf.take(100, 350)  # each item counts 101 bytes (separator)
    assert len(batch) == 3
    assert len(buf.take(100, 5)) == 1  # an item larger than the limit still leaves (the sender truncates it)
    assert len(buf) == 3


def test_wait_batch_returns_when_full_or_after_the_wait() -> None:
    buf = Buffer(100)
    for i in range(5):
        buf.put(item(str(i)))
    started = time.monotonic()
    assert buf.wait_batch(5, 10_000, 30.0, lambda: False)  # full: no waiting
    assert time.monotonic() - started < 1.0
    buf.take(100, 10_000)
    buf.put(item("late"))
    started = time.monotonic()
    assert buf.wait_batch(5, 10_000, 0.2, lambda: False)
    assert 0.15 <= time.monotonic() - started < 2.0


def test_wait_batch_wakes_on_put_and_on_stop() -> None:
    buf = Buffer(100)
    threading.Timer(0.05, lambda: [buf.put(item(str(i))) for i in range(3)]).start()
    started = time.monotonic()
    assert buf.wait_batch(3, 10_000, 30.0, lambda: False)
    assert time.monotonic() - started < 2.0
    empty = Buffer(10)
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    assert empty.wait_batch(3, 10_000, 30.0, stop.is_set, poll=0.02) is False


def test_max_events_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_events"):
        Buffer(0)


def test_list_events_wait_for_room_instead_of_dropping() -> None:
    buf = Buffer(2)
    buf.put(item("a"))
    buf.put(item("b"))
    done = threading.Event()

    def put_from_list() -> None:
        buf.put(item("c"), wait=lambda: True, poll=0.01)
        done.set()

    threading.Thread(target=put_from_list, daemon=True).start()
    assert not done.wait(0.1)  # blocked: the buffer is full
    buf.put(item("a", "a2"), wait=lambda: True)  # replacing an event needs no room
    assert buf.take(1, 10_000)[0].event_id == "id-b"
    assert done.wait(2.0)
    assert [i.event_id for i in buf.take(10, 10_000)] == ["a2", "id-c"]
    assert (buf.dropped, buf.overflow_pending) == (0, False)


def test_a_waiting_put_gives_up_waiting_when_told_to() -> None:
    buf = Buffer(1)
    buf.put(item("a"))
    stopping = threading.Event()
    threading.Timer(0.05, stopping.set).start()
    buf.put(item("b"), wait=lambda: not stopping.is_set(), poll=0.01)  # shutting down: falls back to dropping
    assert buf.dropped == 1
