"""A thin, typed request layer over the official ``kubernetes.client.ApiClient``.

It keeps what the official client is good at (configuration, TLS, bearer-token auth and
its refresh hook, the urllib3 pool) and skips what is slow or heavy for a Lambda: the
generated ``*Api`` classes (importing ``CoreV1Api`` alone costs ~1 s) and the client's
model deserialization. Responses come back as raw bytes; callers parse them straight
into ``nodeflow.api`` pydantic models. Every error comes out as a
``nodeflow.kube.errors.KubeError`` subclass.

Must not touch: what any object means or which to write (the lifecycle steps decide); only requests, answers and typed
errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from nodeflow.kube.errors import KubeError, Unavailable, from_exception, from_response

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "APPLY_PATCH",
    "CONFIG_MAPS",
    "DAEMON_SETS",
    "DEPLOYMENTS",
    "EC2_NODE_CLASSES",
    "EVENTS",
    "JSON_PATCH",
    "LEASES",
    "MERGE_PATCH",
    "NAMESPACES",
    "NODEFLOW_POLICIES",
    "NODES",
    "NODE_CLAIMS",
    "NODE_OVERLAYS",
    "NODE_POOLS",
    "PDBS",
    "PODS",
    "PVCS",
    "PVS",
    "STORAGE_CLASSES",
    "STRATEGIC_MERGE_PATCH",
    "VOLUME_ATTACHMENTS",
    "KubeClient",
    "Resource",
]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply (a JSON body is YAML)


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource: ``group`` "" is the core API (``/api/v1``)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, name: str | None = None, namespace: str | None = None, subresource: str | None = None) -> str:
        """``/api/v1/namespaces/ns/pods/name/eviction``-style path (all namespaces when ``namespace`` is None)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", "Pod", True)
NODES = Resource("", "v1", "nodes", "Node", False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True)
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", False)
EVENTS = Resource("", "v1", "events", "Event", True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
DAEMON_SETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
VOLUME_ATTACHMENTS = Resource("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)
NODE_POOLS = Resource("karpenter.sh", "v1", "nodepools", "NodePool", False)
NODE_CLAIMS = Resource("karpenter.sh", "v1", "nodeclaims", "NodeClaim", False)
EC2_NODE_CLASSES = Resource("karpenter.k8s.aws", "v1", "ec2nodeclasses", "EC2NodeClass", False)
NODE_OVERLAYS = Resource("karpenter.sh", "v1alpha1", "nodeoverlays", "NodeOverlay", False)
NODEFLOW_POLICIES = Resource("nodeflow.io", "v1alpha1", "nodeflowpolicies", "NodeflowPolicy", False)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)


class KubeClient:
    """Raw JSON requests through an official ``ApiClient``; typed errors out."""

    def __init__(self, api_client: ApiClient, *, timeout: float | tuple[float, float] | None = (5.0, 30.0)) -> None:
        self.api_client = api_client
        self.timeout = timeout

    @staticmethod
    def of(client: KubeClient | ApiClient) -> KubeClient:
        return client if isinstance(client, KubeClient) else KubeClient(client)

    # --- raw -----------------------------------------------------------------------------

    def request_raw(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str | None = None,
    ) -> bytes:
        """Send one request; return the response body bytes of a 2xx, raise ``KubeError`` otherwise."""
        return self._send(method, path, query, body, content_type)[1]

    def _send(
        self, method: str, path: str, query: Sequence[tuple[str, Any]], body: Any, content_type: str | None
    ) -> tuple[int, bytes]:
        """(status, body bytes) of a 2xx answer; ``KubeError`` otherwise."""
        headers: dict[str, str] = {"Accept": "application/json"}
        if body is not None:
            # The REST layer json.dumps()es the body for every JSON content type.
            headers["Content-Type"] = content_type or "application/json"
        try:
            request = self.api_client.param_serialize(
                method=method,
                resource_path=path,
                query_params=list(query) or None,
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            # param_serialize would run the body through sanitize_for_serialization; we send it as is.
            method_, url, header_params, _, post_params = request
            response = self.api_client.call_api(
                method_, url, header_params, body, post_params, _request_timeout=self.timeout
            )
            data: bytes = response.read()  # type: ignore[no-untyped-call]
        except KubeError:
            raise
        except Exception as exc:  # ApiException, urllib3 errors, OSError: mapped in one place
            raise from_exception(exc) from exc
        if not 200 <= response.status <= 299:
            raise from_response(response.status, data, response.headers)
        return int(response.status), data

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        data = self.request_raw(method, path, query=query, body=body, content_type=content_type)
        if not data:
            return {}
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise Unavailable(f"{method} {path}: response is not JSON: {data[:200]!r}") from exc
        return doc if isinstance(doc, dict) else {"value": doc}

    # --- verbs ---------------------------------------------------------------------------

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.request("GET", resource.path(name, namespace))

    def list_raw(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> bytes:
        """The raw JSON bytes of one LIST page."""
        query: list[tuple[str, Any]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if limit:
            query.append(("limit", limit))
        if continue_token:
            query.append(("continue", continue_token))
        return self.request_raw("GET", resource.path(namespace=namespace), query=query)

    def list_items(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int | None = None,
    ) -> list[dict[str, Any]]:
        """All items of a LIST as dicts (paged when ``page_size`` is set)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            data = self.list_raw(
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_token=token,
            )
            doc = json.loads(data)
            items.extend(doc.get("items") or [])
            token = (doc.get("metadata") or {}).get("continue") if page_size else None
            if not token:
                return items

    def create(self, resource: Resource, body: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        return self.request("POST", resource.path(namespace=namespace), body=dict(body))

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        return self.request("PATCH", resource.path(name, namespace, subresource), body=patch, content_type=content_type)

    def apply(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = True,
        dry_run: bool = False,
    ) -> tuple[bool, dict[str, Any]]:
        """Server-side apply ``body`` (named by its metadata) as ``field_manager``: the object is created when absent,
        and fields this manager applied before but ``body`` no longer has are removed. ``force`` takes over fields
        another manager set. Returns (created, the object as stored)."""
        meta = body.get("metadata") or {}
        query: list[tuple[str, Any]] = [("fieldManager", field_manager), ("force", "true" if force else "false")]
        if dry_run:
            query.append(("dryRun", "All"))
        path = resource.path(meta.get("name"), meta.get("namespace") if resource.namespaced else None)
        status, data = self._send("PATCH", path, query, dict(body), APPLY_PATCH)
        try:
            stored = json.loads(data) if data else {}
        except ValueError as exc:
            raise Unavailable(f"PATCH {path}: response is not JSON: {data[:200]!r}") from exc
        return status == 201, stored

    def replace(
        self, resource: Resource, name: str, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        return self.request("PUT", resource.path(name, namespace), body=dict(body))

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        propagation_policy: str | None = None,
    ) -> dict[str, Any]:
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        return self.request("DELETE", resource.path(name, namespace), body=options)
