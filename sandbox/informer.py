"""List, then watch, one kind of object in a thread, and hand every change to a callback: what a controller's
informer does, for the sandbox's simulated components (no polling over everything).

- LIST (paged) gives the current objects (``ADDED``) and a resourceVersion; WATCH continues from there with
  bookmarks on, so an idle watch's resourceVersion stays current.
- A watch that ends (the server's ``timeoutSeconds``) is resumed from the last resourceVersion seen.
- 410 Gone (an ``ERROR`` event carrying it, or the HTTP answer) relists: objects found are delivered as
  ``MODIFIED``, objects known but gone as ``DELETED`` (with their last known metadata only).
- Any other failure (connection, 5xx, 429) waits ``backoff`` seconds (doubling to ``backoff_max``) and resumes.
- ``stop()`` shuts the open connection down, so it returns at once rather than after the watch's timeout.

``on_event(kind, obj)`` runs on the informer's thread; an exception there is logged and does not stop it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from nodeflow.kube.client import KubeClient, Resource
from nodeflow.kube.errors import Gone, KubeError, from_exception, from_response

__all__ = ["Informer"]

LOG = logging.getLogger(__name__)
Handler = Callable[[str, dict[str, Any]], None]


class _Expired(Exception):
    pass


class Informer:
    def __init__(
        self,
        kube: KubeClient,
        resource: Resource,
        on_event: Handler,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        page_size: int = 500,
        timeout_seconds: int = 300,
        backoff: float = 0.2,
        backoff_max: float = 5.0,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.on_event = on_event
        self.namespace = namespace
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.page_size = page_size
        self.timeout_seconds = timeout_seconds
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.resource_version = ""
        self.synced = threading.Event()  # the first LIST was delivered
        self.relists = 0
        self.errors: list[BaseException] = []
        self._known: dict[str, dict[str, Any]] = {}  # uid -> metadata (name, namespace)
        self._stop = threading.Event()
        self._response: Any = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> Informer:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.resource.plural}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:
                response.close()
        if self._thread is not None:
            self._thread.join(timeout)

    # ---------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        delay = self.backoff
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                delay = self.backoff
            except (_Expired, Gone):
                need_list = True
                self.relists += 1
            except Exception as exc:
                if self._stop.is_set():
                    return
                LOG.debug("informer %s: %s; retrying in %.1f s", self.resource.plural, exc, delay)
                self.errors.append(exc)
                self._stop.wait(delay)
                delay = min(delay * 2, self.backoff_max)

    def _deliver(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if kind == "DELETED":
            self._known.pop(uid, None)
        else:
            self._known[uid] = {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": uid}
        try:
            self.on_event(kind, obj)
        except Exception:
            LOG.exception("informer %s: handler failed on %s %s", self.resource.plural, kind, meta.get("name"))

    def _list(self) -> None:
        token: str | None = None
        items: list[dict[str, Any]] = []
        version = ""
        while True:
            doc = json.loads(
                self.kube.list_raw(
                    self.resource,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    limit=self.page_size,
                    continue_token=token,
                )
            )
            items.extend(doc.get("items") or [])
            meta = doc.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                break
        first = not self.synced.is_set()
        seen = set()
        for obj in items:
            seen.add(str(obj["metadata"].get("uid")))
            self._deliver("ADDED" if first or obj["metadata"].get("uid") not in self._known else "MODIFIED", obj)
        for uid in [u for u in self._known if u not in seen]:
            self._deliver("DELETED", {"metadata": dict(self._known[uid])})
        self.resource_version = version
        self.synced.set()

    def _watch(self) -> None:
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_version),
            ("timeoutSeconds", self.timeout_seconds),
        ]
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        api = self.kube.api_client
        method, url, headers, _, _ = api.param_serialize(
            method="GET",
            resource_path=self.resource.path(namespace=self.namespace),
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            rest = api.call_api(method, url, headers, None, None, _request_timeout=(5.0, self.timeout_seconds + 30.0))
        except Exception as exc:
            raise from_exception(exc) from exc
        response = rest.response
        if rest.status != 200:
            raise from_response(rest.status, response.data, response.headers)
        with self._lock:
            self._response = response
        ended = False
        try:
            for line in response:
                if self._stop.is_set():
                    return
                if line.strip():
                    self._event(json.loads(line))
            ended = True
        finally:
            with self._lock:
                self._response = None
            if ended:  # the server closed the watch cleanly: the connection can be reused
                response.release_conn()
            else:
                response.close()

    def _event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired(obj.get("message"))
            raise KubeError(str(obj.get("message")), status=int(obj.get("code") or 0), reason=str(obj.get("reason")))
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._deliver(kind, obj)
