"""The sender: one thread that batches buffered events and POSTs them to the webhook (PROTOCOL.md).

Batches are bounded by ``batch_max_events`` and ``batch_max_bytes`` (the whole body) and by time: a batch goes
as soon as it is full, otherwise ``batch_max_wait`` seconds after its first event. Responses:

- 2xx: done. After an overflow, once the buffer is at most half full again, a full resync is triggered.
- 400: the batch is bisected until the bad event is alone; that event is dropped and logged.
- 413: the batch is split; a single event is re-sent with its pod ``spec`` replaced by ``{"truncated": true}``.
- 405 / 415: an agent bug; logged, dropped.
- anything else (401, 403, 429, 5xx, other 4xx, network errors, missing credentials): retried, re-signed, with
  exponential backoff and full jitter (``backoff_base_seconds`` doubling up to ``backoff_max_seconds``).
"""

from __future__ import annotations

import http.client
import json
import random
import secrets
import ssl
import threading
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol
from urllib.parse import urlsplit

from . import __version__
from .auth import CredentialsError, Signer
from .buffer import Buffer, Item
from .log import get_logger
from .metrics import Metrics

__all__ = ["HTTPTransport", "Response", "Sender", "StaleConnection", "Transport", "backoff_delay", "rfc3339"]

log = get_logger("sender")
_USER_AGENT = f"nodeflow-agent/{__version__}"


def rfc3339(t: float, millis: bool = False) -> str:
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
    return f"{base}.{int(t * 1000) % 1000:03d}Z" if millis else f"{base}Z"


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)]."""
    return rng.uniform(0.0, min(cap, base * (2 ** min(attempt, 62))))


class Response(NamedTuple):
    status: int
    body: bytes


class StaleConnection(ConnectionError):
    """A reused keep-alive connection was closed by the peer before answering: retry at once on a new one."""


class Transport(Protocol):
    def post(self, headers: dict[str, str], body: bytes) -> Response:
        """POST to the webhook; network problems raise OSError or http.client.HTTPException."""
        ...


class HTTPTransport:
    """http.client with one keep-alive connection (TLS is set up once, not per batch)."""

    def __init__(self, url: str, timeout: float = 15.0) -> None:
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._timeout = timeout
        self._ssl = ssl.create_default_context() if self._https else None
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def post(self, headers: dict[str, str], body: bytes) -> Response:
        reused = self._conn is not None
        if self._conn is None:
            if self._https:
                self._conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout, context=self._ssl
                )
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        conn = self._conn
        try:
            conn.request("POST", self._target, body=body, headers={**headers, "User-Agent": _USER_AGENT})
            resp = conn.getresponse()
            data = resp.read()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
            self.close()
            if reused:
                raise StaleConnection(str(e)) from e
            raise
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if resp.will_close:
            self.close()
        return Response(resp.status, data)


class Sender(threading.Thread):
    def __init__(
        self,
        *,
        url: str,
        cluster: str,
        agent: str,
        buffer: Buffer,
        transport: Transport,
        signer: Signer,
        metrics: Metrics,
        batch_max_events: int = 100,
        batch_max_bytes: int = 200_000,
        batch_max_wait: float = 1.0,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        on_full_resync: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(name="sender", daemon=True)
        self.url = url
        self.cluster = cluster
        self.agent = agent
        self.buffer = buffer
        self.transport = transport
        self.signer = signer
        self.metrics = metrics
        self.batch_max_events = batch_max_events
        self.batch_max_bytes = batch_max_bytes
        self.batch_max_wait = batch_max_wait
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.on_full_resync = on_full_resync
        self._clock = clock
        self._wall = wall
        self._rng = rng or random.Random()
        self._interrupt = threading.Event()  # cuts a backoff sleep short (flush, stop)
        self._halted = False
        self._deadline: float | None = None
        #: monotonic time of the first failure of the current failure streak (None: last request succeeded)
        self.failing_since: float | None = None
        prefix = json.dumps({"cluster": cluster, "agent": agent, "sentAt": rfc3339(0)}, separators=(",", ":"))
        self._envelope_bytes = len(prefix.encode()) + len(',"events":[]}')
        self.requests = 0
        self._abandoned = False

    # ------------------------------------------------------------------------------------ control

    def flush(self, timeout: float) -> bool:
        """Send what is buffered for up to ``timeout`` seconds, then stop. True when the buffer was emptied."""
        self._deadline = self._clock() + timeout
        self._interrupt.set()
        self.buffer.wake()
        if self.is_alive():
            self.join(timeout + 5.0)
        return len(self.buffer) == 0 and not self._abandoned

    def stop(self) -> None:
        self._halted = True
        self._interrupt.set()
        self.buffer.wake()

    def healthy(self, grace: float) -> bool:
        """False when requests have been failing for longer than ``grace`` seconds."""
        since = self.failing_since
        return since is None or self._clock() - since <= grace

    # ---------------------------------------------------------------------------------------- run

    def _stopping(self) -> bool:
        return self._halted or self._deadline is not None

    def _past_deadline(self) -> bool:
        return self._halted or (self._deadline is not None and self._clock() >= self._deadline)

    def run(self) -> None:
        room = self.batch_max_bytes - self._envelope_bytes
        while True:
            if self._halted or (self._deadline is not None and (len(self.buffer) == 0 or self._past_deadline())):
                break
            if not self.buffer.wait_batch(self.batch_max_events, room, self.batch_max_wait, self._stopping):
                continue
            items = self.buffer.take(self.batch_max_events, room)
            if items:
                if not self.deliver(items):
                    self._abandoned = True
                self._after_send()
        left = len(self.buffer)
        if left:
            self.metrics.inc("nodeflow_agent_events_dropped_total", left, reason="shutdown")
            log.warning("stopping with undelivered events", extra={"events": left})

    def _after_send(self) -> None:
        """After an overflow: once delivery works and the buffer has room again, re-send everything."""
        if (
            self.failing_since is None
            and self.buffer.overflow_pending
            and len(self.buffer) <= self.buffer.max_events // 2
            and self.buffer.claim_overflow()
        ):
            self.metrics.inc("nodeflow_agent_full_resyncs_total")
            log.warning(
                "events were dropped while the buffer was full; full resync", extra={"dropped": self.buffer.dropped}
            )
            self.on_full_resync()

    # ------------------------------------------------------------------------------------ deliver

    def _body(self, items: list[Item]) -> bytes:
        head = json.dumps(
            {"cluster": self.cluster, "agent": self.agent, "sentAt": rfc3339(self._wall())}, separators=(",", ":")
        )
        return head[:-1].encode() + b',"events":[' + b",".join(i.data for i in items) + b"]}"

    def _fit(self, item: Item) -> Item | None:
        """An event too large for a request on its own gets its spec truncated (None if even that is too big)."""
        if len(item.data) + self._envelope_bytes <= self.batch_max_bytes:
            return item
        truncated = _truncate(item)
        if truncated is not None and len(truncated.data) + self._envelope_bytes <= self.batch_max_bytes:
            self.metrics.inc("nodeflow_agent_events_truncated_total")
            log.warning("event too large; spec truncated", extra={"event": item.event_id, "bytes": len(item.data)})
            return truncated
        self._drop([item], "event too large to send, even truncated", status=413)
        return None

    def _drop(self, items: list[Item], why: str, status: int, detail: bytes = b"") -> None:
        self.metrics.inc("nodeflow_agent_events_dropped_total", len(items), reason="rejected")
        for item in items:
            log.error(
                why,
                extra={
                    "status": status,
                    "event": item.event_id,
                    "object": f"{item.key[0]}/{item.key[1]}",
                    "response": detail[:500].decode("utf-8", "replace"),
                },
            )

    def _post(self, items: list[Item]) -> Response:
        body = self._body(items)
        headers = {
            "Content-Type": "application/json",
            "X-Nodeflow-Timestamp": str(int(self._wall())),
            "X-Nodeflow-Nonce": secrets.token_hex(16),
        }
        self.requests += 1
        try:
            return self.transport.post(self.signer.sign("POST", self.url, headers, body), body)
        except StaleConnection:
            headers["X-Nodeflow-Nonce"] = secrets.token_hex(16)
            headers["X-Nodeflow-Timestamp"] = str(int(self._wall()))
            return self.transport.post(self.signer.sign("POST", self.url, headers, body), body)

    def deliver(self, items: list[Item]) -> bool:
        """Deliver one batch (splitting it on 400/413). False when given up because the flush deadline passed."""
        fitted = [f for f in (self._fit(i) for i in items) if f is not None]
        if not fitted:
            return True
        items = fitted
        attempt = 0
        while True:
            error = ""
            try:
                resp = self._post(items)
            except (OSError, http.client.HTTPException) as e:
                resp, error = Response(0, b""), f"{type(e).__name__}: {e}"
            except CredentialsError as e:
                resp, error = Response(0, b""), str(e)
            except Exception as e:  # a bug: keep the events, retry with backoff (readiness shows the streak)
                log.exception("unexpected error sending to the webhook")
                resp, error = Response(0, b""), f"{type(e).__name__}: {e}"
            self.metrics.inc("nodeflow_agent_requests_total", code=str(resp.status))
            status = resp.status
            if 200 <= status < 300:
                if self.failing_since is not None:
                    log.info(
                        "webhook reachable again", extra={"failed_for": round(self._clock() - self.failing_since, 1)}
                    )
                self.failing_since = None
                self.metrics.inc("nodeflow_agent_events_sent_total", len(items))
                return True
            if status in (400, 413) and len(items) > 1:
                half = len(items) // 2
                return self.deliver(items[:half]) and self.deliver(items[half:])
            if status == 400:
                self._drop(items, "webhook rejected the event", status, resp.body)
                return True
            if status == 413:
                truncated = _truncate(items[0])
                if truncated is None:
                    self._drop(items, "webhook refused the event as too large", status, resp.body)
                    return True
                self.metrics.inc("nodeflow_agent_events_truncated_total")
                items = [truncated]
                continue
            if status in (405, 415):
                self._drop(items, "webhook refused the request (agent bug)", status, resp.body)
                return True
            # Retry: credentials may be rotating (401/403), the webhook or the bus may be down (429, 5xx, network).
            self.metrics.inc("nodeflow_agent_send_failures_total")
            if self.failing_since is None:
                self.failing_since = self._clock()
            delay = backoff_delay(attempt, self.backoff_base, self.backoff_max, self._rng)
            if attempt == 0 or attempt % 10 == 0:
                log.warning(
                    "webhook request failed; retrying",
                    extra={
                        "status": status,
                        "error": error or resp.body[:300].decode("utf-8", "replace"),
                        "attempt": attempt + 1,
                        "events": len(items),
                        "retry_in": round(delay, 2),
                    },
                )
            attempt += 1
            if not self._sleep(delay):
                self.metrics.inc("nodeflow_agent_events_dropped_total", len(items), reason="shutdown")
                log.warning("flush deadline passed; batch abandoned", extra={"events": len(items)})
                return False

    def _sleep(self, delay: float) -> bool:
        """Back off; False when the flush deadline has passed (or a hard stop)."""
        if self._past_deadline():
            return False
        if self._deadline is not None:
            delay = min(delay, max(0.0, self._deadline - self._clock()))
        if self._interrupt.wait(delay):
            self._interrupt.clear()  # a flush started: retry at once, then keep backing off within its deadline
        return not self._past_deadline()


def _truncate(item: Item) -> Item | None:
    """The same event with ``object.spec`` replaced by ``{"truncated": true}`` (None if there is no spec)."""
    try:
        event = json.loads(item.data)
    except ValueError:
        return None
    obj = event.get("object")
    if not isinstance(obj, dict) or "spec" not in obj or obj["spec"] == {"truncated": True}:
        return None
    obj["spec"] = {"truncated": True}
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
    return Item(item.key, item.event_id, data)
