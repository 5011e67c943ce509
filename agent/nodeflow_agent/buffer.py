"""The bounded event buffer between the watchers and the sender.

Policy (also in agent/README.md):

- Coalescing: an unsent event about the same object (family + uid) is replaced by the newer one, which moves
  to the back of the queue. The buffer therefore never holds more than one event per object.
- Overflow: when a new event does not fit (``max_events``), the oldest event is dropped and counted, and a
  full resync is owed (``claim_overflow``): once delivery works again the watchers forget what they
  announced and re-send the current state of every object.
- Events found by a LIST (start, 410, resyncs) wait for room instead (``put(..., wait=...)``): a LIST can be
  repeated, so it is slowed down rather than dropped, and a full resync cannot overflow the buffer itself.
- Events are stored encoded (JSON bytes), the compact form, and leave the buffer in arrival order.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["Buffer", "Item"]

Key = tuple[str, str]


class Item:
    __slots__ = ("data", "event_id", "key")

    def __init__(self, key: Key, event_id: str, data: bytes) -> None:
        self.key = key
        self.event_id = event_id
        self.data = data

    def __repr__(self) -> str:
        return f"Item({self.key!r}, {self.event_id!r}, {len(self.data)} bytes)"


class Buffer:
    def __init__(self, max_events: int, clock: Callable[[], float] = time.monotonic) -> None:
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        self.max_events = max_events
        self._clock = clock
        self._items: OrderedDict[Key, Item] = OrderedDict()
        self._bytes = 0
        self._cond = threading.Condition()
        self._overflow = False
        self.added = 0
        self.coalesced = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def put(self, item: Item, wait: Callable[[], bool] | None = None, poll: float = 0.5) -> None:
        """Add an event. Without ``wait`` a full buffer drops its oldest event; with it, the call blocks until
        there is room (or the event replaces one for the same object), or until ``wait()`` returns False."""
        with self._cond:
            if wait is not None:
                while len(self._items) >= self.max_events and item.key not in self._items and wait():
                    self._cond.wait(poll)
            self.added += 1
            old = self._items.pop(item.key, None)
            if old is not None:
                self._bytes -= len(old.data)
                self.coalesced += 1
            while len(self._items) >= self.max_events:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= len(dropped.data)
                self.dropped += 1
                self._overflow = True
            self._items[item.key] = item
            self._bytes += len(item.data)
            self._cond.notify_all()

    def claim_overflow(self) -> bool:
        """True once after events were dropped for lack of room (the caller then schedules a full resync)."""
        with self._cond:
            owed, self._overflow = self._overflow, False
            return owed

    @property
    def overflow_pending(self) -> bool:
        return self._overflow

    def take(self, max_events: int, max_bytes: int) -> list[Item]:
        """Pop the oldest events: at most ``max_events``, their sizes (+1 separator each) within ``max_bytes``,
        but always at least one when the buffer is not empty."""
        out: list[Item] = []
        total = 0
        with self._cond:
            while self._items and len(out) < max_events:
                key = next(iter(self._items))
                size = len(self._items[key].data) + 1
                if out and total + size > max_bytes:
                    break
                item = self._items.pop(key)
                self._bytes -= len(item.data)
                total += size
                out.append(item)
            if out:
                self._cond.notify_all()  # room for LIST events waiting in put()
        return out

    def wait_batch(
        self, max_events: int, max_bytes: int, max_wait: float, stop: Callable[[], bool], poll: float = 0.5
    ) -> bool:
        """Block until a batch is due: ``max_events`` or ``max_bytes`` buffered, or ``max_wait`` seconds since the
        wait noticed the first event, or ``stop()``. True when there is something to take."""
        with self._cond:
            while not self._items:
                if stop():
                    return False
                self._cond.wait(poll)
            due = self._clock() + max_wait
            while len(self._items) < max_events and self._bytes < max_bytes and not stop():
                remaining = due - self._clock()
                if remaining <= 0:
                    break
                self._cond.wait(min(remaining, poll))
            return bool(self._items)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
