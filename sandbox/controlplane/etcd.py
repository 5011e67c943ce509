"""etcd's v3 HTTP/JSON gateway (``/v3/kv/...`` on the client port): the few calls tests make below the API server.

- ``put(key, value)`` writes a key as kube-apiserver would (an object's JSON under ``/registry/...``), with no
  admission, validation or defaulting on the way: what an older server version, a CRD's earlier schema or a
  restored backup leaves in storage. The API server's watch on etcd delivers it like any other write.
- ``revision()`` is the store's current revision (what the API server hands out as resourceVersions).
- ``compact(revision)`` drops the history before ``revision``, as kube-apiserver's own compaction does every five
  minutes (``--etcd-compaction-interval``).

Keys and values go base64-encoded in JSON, as the gateway wants them.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

__all__ = ["EtcdError", "EtcdGateway", "registry_key"]


class EtcdError(RuntimeError):
    """etcd refused or did not answer a call (the message says which and why)."""


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


# Built-in resources stored under another name than their plural (kube-apiserver's storage factory).
_STORED_AS = {("", "nodes"): "minions", ("", "services"): "services/specs"}


def registry_key(group: str, plural: str, name: str, namespace: str | None, *, custom: bool) -> str:
    """Where kube-apiserver keeps an object: ``/registry/<group>/<plural>/[<namespace>/]<name>`` for custom
    resources, ``/registry/<plural>/...`` for built-ins (their group is not part of the key)."""
    prefix = f"{group}/{plural}" if custom else _STORED_AS.get((group, plural), plural)
    return f"/registry/{prefix}/" + (f"{namespace}/" if namespace else "") + name


class EtcdGateway:
    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                doc = json.loads(response.read())
        except OSError as exc:  # HTTPError included
            detail = exc.read().decode(errors="replace")[:500] if hasattr(exc, "read") else ""
            raise EtcdError(f"etcd {path}: {exc} {detail}".rstrip()) from exc
        return doc if isinstance(doc, dict) else {}

    def put(self, key: str, value: bytes) -> int:
        """Write ``key``; returns the revision of the write."""
        return int(self._call("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})["header"]["revision"])

    def delete(self, key: str) -> int:
        return int(self._call("/v3/kv/deleterange", {"key": _b64(key)})["header"]["revision"])

    def revision(self) -> int:
        return int(self._call("/v3/kv/range", {"key": _b64("/"), "count_only": True})["header"]["revision"])

    def compact(self, revision: int | None = None) -> int:
        """Compact the history up to ``revision`` (default: the current one); returns it."""
        target = self.revision() if revision is None else revision
        self._call("/v3/kv/compaction", {"revision": str(target), "physical": True})
        return target
