"""One watcher thread per resource: LIST, then WATCH from the list's resourceVersion; events go to a sink.

- 410 Gone (HTTP 410 or an ERROR event with code 410): relist and reconcile with what is known, emitting the
  transitions missed meanwhile, deletions included.
- Connection errors and other API errors: back off (full jitter) and re-watch from the last resourceVersion seen
  (BOOKMARK events keep it current).
- 404 on the LIST (a CRD not installed yet): retried with backoff; the watcher stays not ready.
- Every ``resync_seconds``: relist + reconcile; pods re-send PodUnschedulable for each still-unschedulable pod
  (reason ``resync``, ids carrying the round).
- ``request_full_resync()`` (after a buffer overflow): relist treating every object as new, so its current state
  is sent again; objects known but gone are reported deleted.

All state changes happen on the watcher's own thread; other threads only set flags and abort its connection.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from .kube import Gone, KubeClient, KubeError, NotFound
from .log import get_logger
from .metrics import Metrics
from .sender import backoff_delay, rfc3339
from .translate import Event, Reason, Resource

__all__ = ["Mode", "Watcher"]

log = get_logger("watch")
Mode = Literal["start", "gone", "resync", "full"]
_PRECEDENCE: dict[str, int] = {"start": 0, "gone": 0, "resync": 1, "full": 2}
#: sink(events, from_list): events found by a LIST may wait for room in the buffer (the LIST is repeatable)
Sink = Callable[[list[Event], bool], None]


class Watcher(threading.Thread):
    def __init__(
        self,
        resource: Resource,
        client: KubeClient,
        sink: Sink,
        metrics: Metrics,
        *,
        resync_seconds: float = 300.0,
        watch_timeout_seconds: int = 300,
        page_size: int = 500,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(name=f"watch-{resource.name}", daemon=True)
        self.resource = resource
        self.client = client
        self.sink = sink
        self.metrics = metrics
        self.resync_seconds = resync_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.page_size = page_size
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._clock = clock
        self._wall = wall
        self._rng = rng or random.Random()
        self.known: dict[str, Any] = {}  # uid -> compact state (translate.*State)
        self.resource_version = ""
        self.synced = threading.Event()  # the first LIST completed
        self._stopping = threading.Event()
        self._full = threading.Event()
        self._progress = False  # the current WATCH has delivered an event
        metrics.gauge("nodeflow_agent_known_objects", lambda: len(self.known), resource=resource.name)

    # -------------------------------------------------------------------------------- control

    def stop(self) -> None:
        self._stopping.set()
        self.client.abort()

    def request_full_resync(self) -> None:
        self._full.set()
        self.client.abort()

    # ------------------------------------------------------------------------------------ run

    def run(self) -> None:
        pending: Mode | None = "start"
        next_resync = self._clock() + self.resync_seconds
        attempt = 0
        gone_streak = 0
        while not self._stopping.is_set():
            # Clear a stale abort before reading the flags: an abort after this point breaks the next request.
            self.client.clear_abort()
            if self._full.is_set():
                self._full.clear()
                pending = "full"
            elif pending is None and self._clock() >= next_resync:
                pending = "resync"
            try:
                if pending is not None:
                    self.relist(pending)
                    pending = None
                    next_resync = self._clock() + self.resync_seconds
                else:
                    timeout = max(1, min(self.watch_timeout_seconds, round(next_resync - self._clock())))
                    self.watch_once(timeout)
                    gone_streak = 0
                attempt = 0
            except Gone as e:
                self.metrics.inc("nodeflow_agent_watch_errors_total", resource=self.resource.name, error="gone")
                log.info("resourceVersion expired; relisting", extra={"resource": self.resource.name, "error": str(e)})
                # A watch that delivered events before its 410 made progress: relist at once. 410s in a row (a
                # LIST whose continue token expired, a watch refused right after its LIST) back off first.
                gone_streak = 1 if pending is None and self._progress else gone_streak + 1
                if gone_streak > 1:
                    self._backoff(gone_streak - 2)
                pending = _stronger(pending, "gone")
            except NotFound as e:
                self.metrics.inc("nodeflow_agent_watch_errors_total", resource=self.resource.name, error="notfound")
                if attempt == 0 or attempt % 10 == 0:
                    log.warning(
                        "resource not served (is its CRD installed?); retrying",
                        extra={"resource": self.resource.name, "path": self.resource.path, "error": str(e)},
                    )
                if pending is None:
                    pending = "gone"  # the CRD went away: list again once it is back
                self._backoff(attempt)
                attempt += 1
            except (OSError, http.client.HTTPException, KubeError, ValueError) as e:
                if self._stopping.is_set():
                    break
                if self._full.is_set():
                    continue  # aborted on purpose
                self.metrics.inc("nodeflow_agent_watch_errors_total", resource=self.resource.name, error="error")
                if attempt == 0 or attempt % 10 == 0:
                    log.warning(
                        "watch failed; retrying",
                        extra={
                            "resource": self.resource.name,
                            "error": f"{type(e).__name__}: {e}",
                            "attempt": attempt + 1,
                            "resourceVersion": self.resource_version,
                        },
                    )
                self._backoff(attempt)
                attempt += 1
            except Exception:  # a bug (or an object shape nobody expected): log it, relist, keep watching
                if self._stopping.is_set():
                    break
                self.metrics.inc("nodeflow_agent_watch_errors_total", resource=self.resource.name, error="bug")
                log.exception("unexpected error in the watcher; full relist", extra={"resource": self.resource.name})
                pending = "full"  # what was known may not have been sent: re-send the current state
                self._backoff(attempt)
                attempt += 1
        log.info("watcher stopped", extra={"resource": self.resource.name})

    def _backoff(self, attempt: int) -> None:
        delay = backoff_delay(attempt, self.backoff_base, self.backoff_max, self._rng)
        self._stopping.wait(delay)

    # ----------------------------------------------------------------------------- LIST / WATCH

    def relist(self, mode: Mode) -> None:
        """LIST everything and reconcile with what is known (``full``: as if nothing were known)."""
        reason: Reason = "resync" if mode == "resync" else "relist"
        round_ = str(int(self._wall())) if mode == "resync" else ""
        self.metrics.inc("nodeflow_agent_relists_total", resource=self.resource.name, cause=mode)
        translate, known = self.resource.translate, self.known
        seen: set[str] = set()
        list_rv = ""
        emitted = 0
        for page in self.client.list_pages(self.resource.path, self.page_size):
            list_rv = list_rv or page.resource_version
            now = rfc3339(self._wall(), millis=True)
            events: list[Event] = []
            for obj in page.items:
                uid = str((obj.get("metadata") or {}).get("uid") or "")
                if not uid:
                    continue
                seen.add(uid)
                prev = None if mode == "full" else known.get(uid)
                state, new = translate(obj, prev, reason, now, round_)
                if state is None:
                    known.pop(uid, None)
                else:
                    known[uid] = state
                events.extend(new)
            if events:
                emitted += len(events)
                self.sink(events, True)
        now = rfc3339(self._wall(), millis=True)
        events = []
        for uid in [u for u in known if u not in seen]:
            events.extend(self.resource.delete(uid, known.pop(uid), None, reason, now, list_rv, round_))
        if events:
            emitted += len(events)
            self.sink(events, True)
        self.resource_version = list_rv
        if not self.synced.is_set():
            self.synced.set()
        log.info(
            "listed",
            extra={
                "resource": self.resource.name,
                "cause": mode,
                "objects": len(seen),
                "events": emitted,
                "resourceVersion": list_rv,
            },
        )

    def watch_once(self, timeout_seconds: int) -> None:
        """One WATCH request from the last resourceVersion, until the server ends it."""
        translate, delete, known = self.resource.translate, self.resource.delete, self.known
        name = self.resource.name
        self._progress = False
        for event in self.client.watch(self.resource.path, self.resource_version, timeout_seconds):
            type_ = event.get("type")
            obj = event.get("object")
            if not isinstance(obj, dict):
                continue
            meta = obj.get("metadata") or {}
            if type_ == "ERROR":
                raise KubeError.from_status(500, obj)
            self._progress = True
            rv = str(meta.get("resourceVersion") or "")
            if type_ == "BOOKMARK":
                self.resource_version = rv or self.resource_version
                continue
            self.metrics.inc("nodeflow_agent_watch_events_total", resource=name)
            uid = str(meta.get("uid") or "")
            if uid:
                now = rfc3339(self._wall(), millis=True)
                if type_ == "DELETED":
                    events = delete(uid, known.pop(uid, None), obj, "watch", now, rv)
                else:
                    state, events = translate(obj, known.get(uid), "watch", now)
                    if state is None:
                        known.pop(uid, None)
                    else:
                        known[uid] = state
                if events:
                    self.sink(events, False)
            if rv:
                self.resource_version = rv
            if self._stopping.is_set() or self._full.is_set():
                return


def _stronger(current: Mode | None, new: Mode) -> Mode:
    if current is None or _PRECEDENCE[new] > _PRECEDENCE[current]:
        return new
    return current
