"""A minimal Kubernetes API client (stdlib http.client): LIST with paging and a streaming WATCH.

In a cluster: ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`` with the service-account token
(re-read every minute: bound tokens rotate) and its ``ca.crt``. For tests: ``KUBE_API_URL`` (http or https)
with optional token/CA files.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit

from .log import get_logger

__all__ = ["Gone", "KubeClient", "KubeError", "NotFound", "Page"]

log = get_logger("kube")
Obj = dict[str, Any]
_READ_SIZE = 1 << 16


class KubeError(Exception):
    """The API server answered with an error status (or an ERROR watch event)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @classmethod
    def from_status(cls, status: int, body: Any) -> KubeError:
        reason, message = "", ""
        if isinstance(body, dict):
            status = int(body.get("code") or status)
            reason = str(body.get("reason") or "")
            message = str(body.get("message") or "")
        kind = Gone if status == 410 else NotFound if status == 404 else KubeError
        return kind(status, reason, message)


class Gone(KubeError):
    """410: the requested resourceVersion (or continue token) is too old; relist."""


class NotFound(KubeError):
    """404: e.g. a CustomResourceDefinition is not installed (yet)."""


class Page:
    """One LIST page: its items and the list's resourceVersion."""

    __slots__ = ("items", "resource_version")

    def __init__(self, items: list[Obj], resource_version: str) -> None:
        self.items = items
        self.resource_version = resource_version


class KubeClient:
    """Not shared between threads: each watcher owns one (``abort`` may be called from another thread)."""

    def __init__(
        self,
        base_url: str,
        *,
        token_file: str = "",
        ca_file: str = "",
        insecure: bool = False,
        timeout: float = 15.0,
        token_refresh_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._token_file = token_file
        self._timeout = timeout
        self._token_refresh = token_refresh_seconds
        self._clock = clock
        self._token: str | None = None
        self._token_read_at: float | None = None
        self._ssl: ssl.SSLContext | None = None
        if self._https:
            if insecure:
                self._ssl = ssl._create_unverified_context()
            elif ca_file and os.path.exists(ca_file):
                self._ssl = ssl.create_default_context(cafile=ca_file)
            else:
                self._ssl = ssl.create_default_context()
        self._lock = threading.Lock()
        self._active: socket.socket | None = None
        self._aborted = False

    # ------------------------------------------------------------------ plumbing

    def token(self) -> str | None:
        """The bearer token, re-read from its file at most every ``token_refresh_seconds``."""
        now = self._clock()
        if not self._token_file:
            return None
        if self._token_read_at is None or now - self._token_read_at >= self._token_refresh:
            try:
                with open(self._token_file, encoding="utf-8") as f:
                    self._token = f.read().strip() or None
            except OSError as e:
                if self._token is None:
                    log.debug("no service-account token", extra={"file": self._token_file, "error": e.strerror})
            self._token_read_at = now
        return self._token

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "nodeflow-agent"}
        token = self.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _target(self, path: str, query: dict[str, str]) -> str:
        return f"{self._prefix}{path}?{urlencode(query)}" if query else f"{self._prefix}{path}"

    def _open(self, timeout: float) -> http.client.HTTPConnection:
        """A connected connection whose socket ``abort`` can shut down (the response keeps using it even after
        http.client hands it over on ``Connection: close``)."""
        conn = self._connection(timeout)
        conn.connect()
        with self._lock:
            if self._aborted:
                self._aborted = False
                conn.close()
                raise ConnectionAbortedError("aborted")
            self._active = conn.sock
        return conn

    def _done(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._active = None
        conn.close()

    def abort(self) -> None:
        """Break the request in progress (a watch blocked in a read, a LIST): it raises an error. With nothing in
        flight, the next request fails at once instead."""
        with self._lock:
            sock = self._active
            self._aborted = sock is None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def clear_abort(self) -> None:
        with self._lock:
            self._aborted = False

    @staticmethod
    def _error(resp: http.client.HTTPResponse) -> KubeError:
        raw = resp.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"message": raw[:200].decode("utf-8", "replace")}
        return KubeError.from_status(resp.status, body)

    # -------------------------------------------------------------------- verbs

    def list_pages(self, path: str, page_size: int = 500) -> Iterator[Page]:
        """LIST a collection page by page (``limit``/``continue``); each page carries the list's resourceVersion.

        Raises ``Gone`` when a continue token expired (the caller restarts the list), ``KubeError`` otherwise.
        """
        conn = self._open(self._timeout)
        try:
            cont = ""
            while True:
                query = {"limit": str(page_size)}
                if cont:
                    query["continue"] = cont
                conn.request("GET", self._target(path, query), headers=self._headers())
                resp = conn.getresponse()
                if resp.status != 200:
                    raise self._error(resp)
                body = json.loads(resp.read())
                meta = body.get("metadata") or {}
                cont = meta.get("continue") or ""
                yield Page(body.get("items") or [], str(meta.get("resourceVersion") or ""))
                if not cont:
                    return
        finally:
            self._done(conn)

    def watch(self, path: str, resource_version: str, timeout_seconds: int) -> Iterator[Obj]:
        """Stream watch events (``{"type": ..., "object": ...}``) from ``resource_version`` until the server ends
        the watch (``timeoutSeconds``). HTTP errors raise ``KubeError`` (``Gone`` for 410); ERROR events are
        yielded as they are. Connection problems raise ``OSError``/``http.client.HTTPException``."""
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if resource_version:
            query["resourceVersion"] = resource_version
        # The server ends the watch after timeoutSeconds; a silent connection for longer than that is dead.
        conn = self._open(timeout_seconds + 30.0)
        try:
            conn.request("GET", self._target(path, query), headers=self._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                raise self._error(resp)
            pending = b""
            while True:
                chunk = resp.read1(_READ_SIZE)
                if not chunk:
                    break
                pending += chunk
                if b"\n" not in chunk:
                    continue
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
            if pending.strip():
                yield json.loads(pending)
        finally:
            self._done(conn)
