"""The health server: ``/healthz`` (threads alive), ``/readyz`` (listed everything, sender healthy), ``/metrics``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .log import get_logger
from .metrics import Metrics

__all__ = ["HealthServer"]

log = get_logger("health")


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        owner = self.server.owner
        if path in ("/healthz", "/livez"):
            problems = owner.liveness()
            self._send(200 if not problems else 503, "ok\n" if not problems else "\n".join(problems) + "\n")
        elif path == "/readyz":
            problems = owner.readiness()
            self._send(200 if not problems else 503, "ok\n" if not problems else "\n".join(problems) + "\n")
        elif path == "/metrics":
            self._send(200, owner.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, "not found\n")

    do_HEAD = do_GET


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: HealthServer


class HealthServer:
    """``liveness``/``readiness`` return the list of problems (empty: healthy)."""

    def __init__(
        self,
        bind: str,
        port: int,
        metrics: Metrics,
        liveness: Callable[[], list[str]],
        readiness: Callable[[], list[str]],
    ) -> None:
        self.metrics = metrics
        self.liveness = liveness
        self.readiness = readiness
        self._httpd = _Server((bind, port), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="health", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
