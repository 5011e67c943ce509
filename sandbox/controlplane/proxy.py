"""A small fault-injecting HTTP proxy in front of the real API server: what tests use to make a real control plane
fail on purpose, and to see what the code under test sent.

What it decides:

- It listens on 127.0.0.1 (a free port), plain HTTP by default or TLS with the API server's own serving
  certificate (``tls=True``: same CA, same 127.0.0.1 name, so a kubeconfig for the proxy only changes the
  URL; kubectl sends its token only over TLS). Upstream it always speaks TLS to kube-apiserver, trusting the
  control plane's CA. Every request header (``Authorization``, ``Impersonate-*``, content types) goes through
  as sent, so authentication, impersonation and RBAC are the real server's.
- ``before_request(method, path, query)`` runs first for every request (``query``: the decoded query string,
  one value per key). It returns ``None`` to forward the request as it is, or an action (below); raising a
  ``Fault`` answers it.
  An exception of any other kind is answered 500 and kept in ``hook_errors`` (a broken hook must show).
- Actions: ``Fault`` (answer a ``Status`` with its code, reason, message, details and ``Retry-After``; a
  ``Fault`` of code 410 on a watch is sent as the real server sends an expired watch: HTTP 200 and one
  ``ERROR`` event carrying the Status), ``Delay`` (wait, then forward: a slow answer), ``Drop`` (close the
  client's connection without an answer), ``CutWatch`` (forward a watch, then break its connection after some
  seconds or events, as a load balancer or a restarting server does) and ``ExpireWatch`` (forward a watch, then
  end it with a 410 ``ERROR`` event, as when the server's window moved past the watcher's resourceVersion).
- Streaming answers (watches, and any answer without a Content-Length) are relayed piece by piece as they
  arrive, never buffered; each piece is flushed at once.
- ``requests`` holds ``(method, path, query string)`` of every request (for ``count``);
  ``exchanges`` holds each one's answer too: the status code, who it impersonated, and whether the proxy
  made it up (``injected``) or the server gave it. ``denied()`` is the 403s the server gave.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

__all__ = [
    "CutWatch",
    "Delay",
    "Drop",
    "Exchange",
    "ExpireWatch",
    "Fault",
    "FaultProxy",
    "Hook",
    "is_watch",
]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
PIECE = 64 * 1024


class Fault(Exception):
    """Answer the request with a ``Status`` of ``code``/``reason``/``message`` (raise it or return it)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str = "",
        *,
        details: Mapping[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message or reason)
        self.code = code
        self.reason = reason
        self.message = message or f"injected {code} {reason}"
        self.details = dict(details) if details is not None else None
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out

    # the answers tests ask for most, as the real server words them
    @classmethod
    def internal(cls, message: str = "injected: etcdserver: request timed out") -> Fault:
        return cls(500, "InternalError", message)

    @classmethod
    def unavailable(cls, message: str = "injected: the server is currently unable to handle the request") -> Fault:
        return cls(503, "ServiceUnavailable", message)

    @classmethod
    def conflict(
        cls,
        message: str = "injected: the object has been modified; please apply your changes to the "
        "latest version and try again",
    ) -> Fault:
        return cls(409, "Conflict", message)

    @classmethod
    def too_many_requests(cls, retry_after: int = 1, message: str = "injected: too many requests") -> Fault:
        return cls(429, "TooManyRequests", message, retry_after=retry_after)

    @classmethod
    def forbidden(cls, message: str = "injected: forbidden") -> Fault:
        return cls(403, "Forbidden", message)

    @classmethod
    def gone(cls, message: str = "injected: too old resource version") -> Fault:
        return cls(410, "Expired", message)


@dataclass(frozen=True)
class Delay:
    """Forward the request after ``seconds``."""

    seconds: float


@dataclass(frozen=True)
class Drop:
    """Close the client's connection without answering (the client sees a reset or an empty reply)."""


@dataclass(frozen=True)
class CutWatch:
    """Forward a watch, then break its connection (no terminating chunk) after ``seconds`` or ``events``
    watch events, whichever comes first (None: not that one)."""

    seconds: float | None = None
    events: int | None = None


@dataclass(frozen=True)
class ExpireWatch:
    """Forward a watch, then after ``events`` watch events (0: at once) send an ``ERROR`` event with a 410
    Expired Status and end the stream cleanly."""

    events: int = 0
    message: str = "injected: too old resource version"


Action = Fault | Delay | Drop | CutWatch | ExpireWatch
Hook = Callable[[str, str, dict[str, str]], "Action | None"]


@dataclass(frozen=True)
class Exchange:
    """One request and how it was answered."""

    method: str
    path: str
    query: str
    status: int
    impersonated: str  # the Impersonate-User header ("" when none)
    groups: tuple[str, ...]
    injected: bool
    seconds: float
    message: str = ""  # the Status message of an error answer (first 500 characters)

    def describe(self) -> str:
        who = f" as {self.impersonated} {list(self.groups)}" if self.impersonated else ""
        query = f"?{self.query}" if self.query else ""
        return f"{self.method} {self.path}{query}{who}: {self.status} {self.message}".rstrip()


def is_watch(path: str, query: Mapping[str, str]) -> bool:
    return query.get("watch", "").lower() in ("true", "1") or "/watch/" in path


@dataclass
class _Upstream:
    host: str
    port: int
    context: ssl.SSLContext
    connection: http.client.HTTPSConnection | None = None

    def connect(self) -> http.client.HTTPSConnection:
        if self.connection is None:
            self.connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=None)
        return self.connection

    def close(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(Exception):
                self.connection.close()
            self.connection = None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        proxy = self.server.proxy
        self.upstream = _Upstream(proxy.upstream_host, proxy.upstream_port, proxy.upstream_context)
        with proxy._lock:
            proxy._active.add(self)

    def finish(self) -> None:
        with contextlib.suppress(Exception):
            super().finish()
        self.upstream.close()
        with self.server.proxy._lock:
            self.server.proxy._active.discard(self)

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    # ------------------------------------------------------------------------------------------------

    def _handle(self) -> None:
        proxy = self.server.proxy
        began = time.monotonic()
        parts = urlsplit(self.path)
        path, raw_query = parts.path, parts.query
        query = dict(parse_qsl(raw_query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        who = self.headers.get("Impersonate-User") or ""
        groups = tuple(self.headers.get_all("Impersonate-Group") or ())
        proxy._log_request(self.command, path, raw_query)

        def record(status: int, injected: bool, message: str = "") -> None:
            proxy._log_exchange(
                Exchange(
                    self.command,
                    path,
                    raw_query,
                    status,
                    who,
                    groups,
                    injected,
                    time.monotonic() - began,
                    message[:500],
                )
            )

        action: Action | None
        try:
            hook = proxy.before_request
            action = hook(self.command, path, query) if hook is not None else None
        except Fault as fault:
            action = fault
        except Exception as exc:
            proxy.hook_errors.append(exc)
            action = Fault.internal(f"proxy hook failed: {exc!r}")
        watch = is_watch(path, query)
        if action is None and watch and proxy.expired(query.get("resourceVersion", "")):
            action = Fault.gone("too old resource version: the history before it was compacted")
        # each exchange is logged before its answer goes out: a client that has its answer finds it logged
        if isinstance(action, Fault):
            record(action.code, True, action.message)
            self._answer_fault(action, watch)
            return
        if isinstance(action, Drop):
            record(0, True, "dropped")
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if isinstance(action, Delay):
            time.sleep(action.seconds)
        self._forward(path, raw_query, body, action if watch else None, record)

    def _answer_fault(self, fault: Fault, watch: bool) -> None:
        if watch and fault.code == 410:  # an expired watch: 200, one ERROR event, the end
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._chunk(json.dumps({"type": "ERROR", "object": fault.status()}).encode() + b"\n")
            self._chunk(b"")
            return
        data = json.dumps(fault.status()).encode()
        self.send_response(fault.code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if fault.retry_after is not None:  # whole seconds, as HTTP has them
            self.send_header("Retry-After", str(int(fault.retry_after)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _forward(
        self, path: str, raw_query: str, body: bytes, watch_action: Action | None, record: Callable[..., None]
    ) -> None:
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP]  # repeats kept
        if body:
            headers.append(("Content-Length", str(len(body))))
        target = path + (f"?{raw_query}" if raw_query else "")
        for attempt in (1, 2):  # a kept-alive upstream connection the server closed meanwhile: one fresh try
            conn = self.upstream.connect()
            try:
                conn.putrequest(self.command, target, skip_host=False, skip_accept_encoding=True)
                for key, value in headers:
                    conn.putheader(key, value)
                conn.endheaders(body or None)
                response = conn.getresponse()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.upstream.close()
                if attempt == 2:
                    raise
        streaming = response.getheader("Content-Length") is None
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        if not streaming:
            data = response.read()
            record(response.status, False, _status_message(data) if response.status >= 400 else "")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            if response.will_close:
                self.upstream.close()
            return
        record(response.status, False)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._relay(response, watch_action)

    def _relay(self, response: http.client.HTTPResponse, action: Action | None) -> None:
        """Copy a streaming answer piece by piece; ``CutWatch``/``ExpireWatch`` end it early."""
        limit = action.events if isinstance(action, CutWatch | ExpireWatch) else None
        timer = None
        if isinstance(action, CutWatch) and action.seconds is not None:
            timer = threading.Timer(action.seconds, self._cut)  # wakes the blocked read below too
            timer.daemon = True
            timer.start()
        events = 0
        pending = b""
        try:
            if isinstance(action, ExpireWatch) and action.events == 0:
                self._expire(action)
                return
            while True:
                data = response.read1(PIECE)
                if not data:
                    break
                if limit is None:
                    self._chunk(data)
                    continue
                pending += data
                out = b""
                while b"\n" in pending and events < limit:
                    line, pending = pending.split(b"\n", 1)
                    out += line + b"\n"
                    events += 1
                if out:
                    self._chunk(out)
                if events >= limit:
                    if isinstance(action, ExpireWatch):
                        self._expire(action)
                    else:
                        self._cut()
                    return
            self._chunk(b"")
        except (OSError, http.client.HTTPException):  # the client went away, or the stream was cut
            self.close_connection = True
        finally:
            if timer is not None:
                timer.cancel()
            self.upstream.close()  # a watch's upstream connection is not reused

    def _expire(self, action: ExpireWatch) -> None:
        status = Fault.gone(action.message).status()
        self._chunk(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
        self._chunk(b"")

    def _cut(self) -> None:
        """Break the client's connection (no terminating chunk) and the upstream stream feeding it."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        upstream = self.upstream.connection
        if upstream is not None and upstream.sock is not None:
            with contextlib.suppress(OSError):
                upstream.sock.shutdown(socket.SHUT_RDWR)


def _status_message(data: bytes) -> str:
    try:
        doc = json.loads(data)
    except ValueError:
        return data[:200].decode(errors="replace")
    return str(doc.get("message") or "") if isinstance(doc, dict) else ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, proxy: FaultProxy) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.proxy = proxy

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (reset, broken pipe) is not worth a traceback; anything else is."""
        import sys

        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.proxy.client_context is not None:
            sock = self.proxy.client_context.wrap_socket(sock, server_side=True)
        return sock, address


@dataclass
class FaultProxy:
    """``FaultProxy(upstream_url, ca_file).start()``; ``url``; ``before_request``; ``requests``,
    ``exchanges``, ``count()``, ``denied()``, ``clear()``; ``stop()``."""

    upstream_url: str
    ca_file: Path
    tls: bool = False
    serving_cert: Path | None = None  # with tls: the certificate and key to serve (the API server's)
    serving_key: Path | None = None
    before_request: Hook | None = None
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    exchanges: list[Exchange] = field(default_factory=list)
    hook_errors: list[BaseException] = field(default_factory=list)
    #: watches from a resourceVersion below this get 410 Expired (``compact``); None: none do
    expired_before: int | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream_url)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 443
        self.upstream_context = ssl.create_default_context(cafile=str(self.ca_file))
        self.client_context: ssl.SSLContext | None = None
        if self.tls:
            if self.serving_cert is None or self.serving_key is None:
                raise ValueError("FaultProxy(tls=True) needs serving_cert and serving_key")
            self.client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.client_context.load_cert_chain(str(self.serving_cert), str(self.serving_key))
        self._lock = threading.Lock()
        self._active: set[_Handler] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> FaultProxy:
        if self._server is None:
            self._server = _Server(self)
            self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
            self._thread.start()
        return self

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FaultProxy is not started")
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            active = list(self._active)
        for handler in active:  # open watches end now, not when the server ends them
            handler._cut()
        if self._thread is not None:
            self._thread.join(5)
        self._server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------------ log

    def _log_request(self, method: str, path: str, query: str) -> None:
        with self._lock:
            self.requests.append((method, path, query))

    def _log_exchange(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def expired(self, resource_version: str) -> bool:
        """A watch from ``resource_version`` is past the compacted history (``expired_before``)."""
        return (
            self.expired_before is not None
            and resource_version.isdigit()
            and (0 < int(resource_version) < self.expired_before)
        )

    def count(self, method: str, path: str, query_contains: str = "") -> int:
        """How many requests had this method and path (and a query string containing ``query_contains``)."""
        with self._lock:
            return sum(1 for m, p, q in self.requests if m == method and p == path and query_contains in q)

    def denied(self) -> list[Exchange]:
        """The 403s the API server gave (not the injected ones)."""
        with self._lock:
            return [e for e in self.exchanges if e.status == 403 and not e.injected]

    def clear(self) -> None:
        """Forget the log, the hook errors and the compaction, and remove the hook."""
        self.expired_before = None
        with self._lock:
            self.requests.clear()
            self.exchanges.clear()
            self.hook_errors.clear()
        self.before_request = None
