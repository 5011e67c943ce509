"""``RealKubeAPI``: the Kubernetes side of the tests, the sandbox and the benchmarks: a real control plane
(``ControlPlane``) behind a fault-injecting proxy (``FaultProxy``), with the surface the tests had on the old
in-process imitation (tests/realk8s/README.md says what a real cluster does differently).

What each part means on the real server:

- ``url``, ``api_client()``, ``kubeconfig()``, ``write_kubeconfig()``: the proxy, with the admin's token unless
  another is given (``impersonator_token``, ``service_account_token()``). Everything the code under test sends
  goes through the proxy: it is logged (``requests``, ``count()``, ``exchanges``) and can be failed
  (``before_request``).
- ``create``, ``get``, ``objects``, ``list_items``, ``patch``, ``delete``, ``register_crd``,
  ``store_bypassing_admission``: the test's own seeding and reading, as the admin, straight to the API server
  (not through the proxy: not logged, never failed). ``create`` keeps a given ``status`` the way a controller
  would write it: create, then write the status subresource.
- ``store_bypassing_admission(obj)`` writes the object's JSON straight into etcd (``etcd.py``), as an older CRD
  or server version would have stored it, then reads it back through the API server (defaults applied on read,
  as the server does for stored custom resources).
- ``reset()``: what the tests created since ``start()`` is deleted (``isolation.py``), the proxy's log, hook and
  compaction are cleared, RBAC recording stops.
- ``compact()``: etcd's history is compacted (as kube-apiserver does every five minutes) and from then on a watch
  from an older resourceVersion gets 410 Expired through the proxy (the API server's own watch cache would
  still serve it for a while: its window is not ours to move).
- RBAC is always on, with the ClusterRoles the install applies (``infra/cluster/controller-rbac.yaml``,
  ``agent/manifests``: applied once by ``start()``). ``enable_rbac()`` starts recording; ``denied()`` is the 403s
  the API server gave since then; ``disable_rbac()`` stops recording.
- Nothing is switched off or faked: the real controllers run (disruption controller for PDB status, garbage
  collector, node lifecycle, ReplicaSets...), CEL rules are the API server's, and its clock is the machine's.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from nodeflow.kube.client import MERGE_PATCH, NAMESPACES, KubeClient, Resource
from nodeflow.kube.errors import AlreadyExists, KubeError, NotFound
from sandbox.controlplane.binaries import REPO
from sandbox.controlplane.etcd import EtcdGateway, registry_key
from sandbox.controlplane.isolation import ClusterScope, Mark
from sandbox.controlplane.launcher import ADMIN, IMPERSONATOR, ControlPlane
from sandbox.controlplane.proxy import Exchange, FaultProxy, Hook

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["INSTALL_MANIFESTS", "RealKubeAPI", "wait_for"]

INSTALL_MANIFESTS = (
    REPO / "agent" / "manifests" / "00-namespace.yaml",
    REPO / "agent" / "manifests" / "10-serviceaccount.yaml",
    REPO / "agent" / "manifests" / "20-rbac.yaml",
    REPO / "infra" / "cluster" / "controller-rbac.yaml",
)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 30.0, every: float = 0.05) -> T:
    """``check()``'s first truthy value; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


class _Discovery:
    """(apiVersion, kind) -> Resource, and which resources have a status subresource; refreshed on a miss."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.kinds: dict[tuple[str, str], Resource] = {}
        self.with_status: set[Resource] = set()
        self.custom_groups: set[str] = set()

    def refresh(self) -> None:
        versions = [("", "v1")]
        for group in self.kube.request("GET", "/apis").get("groups") or []:
            versions += [(group["name"], v["version"]) for v in group.get("versions") or []]
        self.custom_groups = {
            crd["spec"]["group"] for crd in self.kube.list_items(CRDS) if crd.get("spec", {}).get("group")
        }
        for group, version in versions:
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                resources = self.kube.request("GET", path).get("resources") or []
            except NotFound:  # a group removed meanwhile
                continue
            subresources = {r["name"] for r in resources if "/" in r["name"]}
            for r in resources:
                if "/" in r["name"]:
                    continue
                rt = Resource(group, version, r["name"], r["kind"], bool(r.get("namespaced")))
                self.kinds[(rt.api_version, rt.kind)] = rt
                if f"{r['name']}/status" in subresources:
                    self.with_status.add(rt)

    def resource(self, api_version: str, kind: str) -> Resource:
        key = (api_version, kind)
        if key not in self.kinds:
            self.refresh()
        if key not in self.kinds:
            raise KeyError(f"no resource serves {api_version} {kind}")
        return self.kinds[key]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_condition(status: str = "True", **extra: str) -> dict[str, str]:
    """A Node's Ready condition as a kubelet writes it, heartbeat stamped now. Without a heartbeat, a Node created
    under the name of one deleted a moment before (test isolation deletes every Node; tests reuse names) inherits
    the node lifecycle controller's record of the old one, whose last heartbeat is older than the grace period, and
    is marked unreachable within a second."""
    now = _now()
    return {"type": "Ready", "status": status, "lastHeartbeatTime": now, "lastTransitionTime": now, **extra}


class RealKubeAPI:
    """``RealKubeAPI(plane).start()`` (the plane started, with controllers for anything that runs pods);
    ``stop()`` (the plane is its owner's to stop)."""

    def __init__(self, plane: ControlPlane, *, tls: bool = False) -> None:
        self.plane = plane
        pki = plane.pki
        if pki is None:
            raise ValueError("RealKubeAPI: start the control plane first")
        self.proxy = FaultProxy(
            plane.url, pki.ca_cert, tls=tls, serving_cert=pki.serving_cert, serving_key=pki.serving_key
        )
        self.etcd = EtcdGateway(f"http://127.0.0.1:{plane.ports['etcd']}")
        self.kube = plane.kube(ADMIN)  # straight to the API server: the test's own reads and writes
        self.discovery = _Discovery(self.kube)
        self.scope: ClusterScope | None = None
        self.baseline: Mark | None = None
        self._rbac_from: int | None = None
        self._rbac_to: int | None = None
        self.timings: dict[str, float] = {}

    # ------------------------------------------------------------------------------------------- lifecycle

    def start(self) -> RealKubeAPI:
        """Start the proxy, apply the install's RBAC and agent manifests, and mark what exists: ``reset()``
        comes back to it."""
        began = time.monotonic()
        self.proxy.start()
        for path in INSTALL_MANIFESTS:
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    with contextlib.suppress(AlreadyExists):
                        self.create(doc)
        self._settle()
        self.scope = ClusterScope(self.kube)
        self.baseline = self.scope.mark()
        self.timings["start"] = time.monotonic() - began
        return self

    def _settle(self, timeout: float = 10.0) -> None:
        """Wait for what the controller-manager creates in every namespace (its ``default`` ServiceAccount, the
        ``kube-root-ca.crt`` ConfigMap), so the baseline has them and no reset deletes them."""
        if not self.plane.controllers:
            return
        for ns in self.kube.list_items(NAMESPACES):
            name = ns["metadata"]["name"]
            for kind, wanted in ((SERVICE_ACCOUNTS, "default"), (CONFIG_MAPS, "kube-root-ca.crt")):

                def present(kind: Resource = kind, wanted: str = wanted, name: str = name) -> bool:
                    with contextlib.suppress(NotFound):
                        return bool(self.kube.get(kind, wanted, name))
                    return False

                wait_for(f"{kind.kind} {name}/{wanted}", present, timeout)

    def stop(self) -> None:
        self.proxy.stop()
        if self.scope is not None:
            self.scope.close()
        self.kube.api_client.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> RealKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> dict[Resource, list[str]]:
        """Delete what was created since ``start()``; clear the proxy's log, hook and compaction; stop recording
        RBAC denials. Returns what was deleted."""
        if self.scope is None or self.baseline is None:
            raise RuntimeError("RealKubeAPI.start() first")
        began = time.monotonic()
        self.proxy.clear()
        removed = self.scope.reset(self.baseline)
        self._rbac_from = self._rbac_to = None
        self.timings["reset"] = time.monotonic() - began
        return removed

    # ------------------------------------------------------------------------------------------- clients

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def impersonator_token(self) -> str:
        """A token that may only impersonate (users, groups, service accounts): with ``acting_as``, each request
        is authorized as whom it impersonates."""
        return self.plane.token_for(IMPERSONATOR)

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A bound token of ServiceAccount ``namespace/name`` (the TokenRequest API, as a kubelet gets one)."""
        path = SERVICE_ACCOUNTS.path(name, namespace, "token")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        return str(self.kube.request("POST", path, body=body)["status"]["token"])

    def api_client(self, token: str | None = None) -> ApiClient:
        """An official ``ApiClient`` through the proxy (the admin's token unless ``token``); close it when done."""
        import kubernetes.client

        config = kubernetes.client.Configuration(host=self.url)
        if self.proxy.tls:
            config.ssl_ca_cert = str(self.plane.ca_file)
        config.api_key = {"BearerToken": token or self.plane.token_for(ADMIN)}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        return kubernetes.client.ApiClient(config)

    def kubeconfig(self, namespace: str = "default", token: str | None = None) -> dict[str, Any]:
        cluster: dict[str, Any] = {"server": self.url}
        if self.proxy.tls:
            cluster["certificate-authority"] = str(self.plane.ca_file)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "nodeflow-test", "cluster": cluster}],
            "users": [{"name": "nodeflow-test", "user": {"token": token or self.plane.token_for(ADMIN)}}],
            "contexts": [
                {
                    "name": "nodeflow-test",
                    "context": {"cluster": "nodeflow-test", "user": "nodeflow-test", "namespace": namespace},
                }
            ],
            "current-context": "nodeflow-test",
        }

    def write_kubeconfig(self, path: str | os.PathLike[str], token: str | None = None) -> str:
        """A kubeconfig for the proxy (JSON is YAML); returns its path."""
        Path(path).write_text(json.dumps(self.kubeconfig(token=token), indent=2) + "\n")
        return os.fspath(path)

    # ------------------------------------------------------------------------------------------- the proxy

    @property
    def before_request(self) -> Hook | None:
        return self.proxy.before_request

    @before_request.setter
    def before_request(self, hook: Hook | None) -> None:
        self.proxy.before_request = hook

    @property
    def requests(self) -> list[tuple[str, str, str]]:
        """``(method, path, query string)`` of every request through the proxy since the last reset (clear it to
        count from now)."""
        return self.proxy.requests

    @property
    def exchanges(self) -> list[Exchange]:
        return self.proxy.exchanges

    def count(self, method: str, path: str, query_contains: str = "") -> int:
        return self.proxy.count(method, path, query_contains)

    def compact(self) -> int:
        """Compact etcd's history at its current revision; watches from older resourceVersions get 410 from now
        on. Returns the revision."""
        revision = self.etcd.compact()
        self.proxy.expired_before = revision
        return revision

    # ------------------------------------------------------------------------------------------- RBAC

    def enable_rbac(self) -> RealKubeAPI:
        """Record the API server's RBAC denials from now on (RBAC itself is always on)."""
        self._rbac_from = len(self.proxy.exchanges)
        self._rbac_to = None
        return self

    def disable_rbac(self) -> None:
        """Stop recording: ``denied()`` keeps what it had."""
        if self._rbac_from is not None and self._rbac_to is None:
            self._rbac_to = len(self.proxy.exchanges)

    def denied(self) -> list[Exchange]:
        """The 403s the API server answered through the proxy while recording."""
        if self._rbac_from is None:
            return []
        window = self.proxy.exchanges[self._rbac_from : self._rbac_to]
        return [e for e in window if e.status == 403 and not e.injected]

    # ------------------------------------------------------------------------------------------- objects

    def resource_for(self, api_version: str, kind: str) -> Resource:
        """The served resource of an apiVersion and kind (KeyError if none)."""
        return self.discovery.resource(api_version, kind)

    def _locate(self, obj: Mapping[str, Any]) -> tuple[Resource, str | None, str]:
        rt = self.resource_for(str(obj.get("apiVersion")), str(obj.get("kind")))
        meta = obj.get("metadata") or {}
        namespace = (meta.get("namespace") or "default") if rt.namespaced else None
        return rt, namespace, str(meta.get("name") or "")

    def create(self, obj: Mapping[str, Any], keep_status: bool = True) -> dict[str, Any]:
        """Create ``obj`` as the admin (namespaced objects default to ``default``); with ``keep_status``, its
        ``status`` is then written through the status subresource (a real create drops it). A Namespace gets its
        ``default`` ServiceAccount at once (pods are refused until it exists). Returns the stored object."""
        rt, namespace, name = self._locate(obj)
        body = {k: v for k, v in obj.items() if k != "status"}
        if namespace is not None:
            body["metadata"] = {**(obj.get("metadata") or {}), "namespace": namespace}
        created = self.kube.create(rt, body, namespace=namespace)
        name = created["metadata"]["name"]
        if rt == NAMESPACES:
            with contextlib.suppress(AlreadyExists):
                self.kube.create(SERVICE_ACCOUNTS, {"metadata": {"name": "default"}}, namespace=name)
        status = obj.get("status")
        if keep_status and status and rt in self.discovery.with_status:
            created = self.kube.patch(rt, name, {"status": status}, namespace=namespace, subresource="status")
        return created

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        """One object (``nodeflow.kube.errors.NotFound`` when missing); namespaced kinds default to ``default``."""
        rt = self.resource_for(api_version, kind)
        return self.kube.get(rt, name, (namespace or "default") if rt.namespaced else None)

    def objects(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every object of a kind (in ``namespace``, or all of them), in the server's order (namespace, name)."""
        return self.list_items(api_version, kind, namespace)

    def list_items(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        rt = self.resource_for(api_version, kind)
        return self.kube.list_items(
            rt,
            namespace=namespace if rt.namespaced else None,
            label_selector=label_selector,
            field_selector=field_selector,
        )

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        rt = self.resource_for(api_version, kind)
        ns = (namespace or "default") if rt.namespaced else None
        return self.kube.patch(rt, name, patch, namespace=ns, subresource=subresource, content_type=content_type)

    def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None, **options: Any
    ) -> dict[str, Any]:
        """DELETE (``grace_period_seconds``, ``uid``, ``propagation_policy`` as ``KubeClient.delete``)."""
        rt = self.resource_for(api_version, kind)
        return self.kube.delete(rt, name, (namespace or "default") if rt.namespaced else None, **options)

    def register_crd(self, crd: Mapping[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """Create (or replace) a CustomResourceDefinition and wait until it is Established and served. One
        registered by a test is deleted by the next ``reset()``, its objects with it."""
        name = crd["metadata"]["name"]
        body = {k: v for k, v in crd.items() if k != "status"}
        try:
            self.kube.create(CRDS, body)
        except AlreadyExists:
            current = self.kube.get(CRDS, name)
            body["metadata"] = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
            self.kube.replace(CRDS, name, body)

        def established() -> dict[str, Any] | None:
            got = self.kube.get(CRDS, name)
            conditions = (got.get("status") or {}).get("conditions") or []
            ok = any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
            return got if ok else None

        stored = wait_for(f"CRD {name} Established", established, timeout)
        self.discovery.refresh()
        return stored

    def _check_decodable(self, rt: Resource, namespace: str | None, body: Mapping[str, Any]) -> None:
        """A built-in object the API server could not decode from etcd must never get there: its watch cache for
        the kind breaks for good (every LIST then waits 3 s for it and falls back to etcd). A dry-run create decodes
        the body as storage would: a 400 is a decoding error (validation would be a 422, and does not matter)."""
        meta = body["metadata"]  # all of it is decoded (a creationTimestamp "yesterday" is not a time), then reset
        try:
            self.kube.request("POST", rt.path(namespace=namespace), query=[("dryRun", "All")], body=dict(body))
        except KubeError as exc:
            if exc.status == 400:
                raise ValueError(
                    f"store_bypassing_admission: the API server cannot decode {rt.kind} {meta.get('name')} "
                    f"({exc.message}); no Kubernetes version could have stored it"
                ) from exc

    def store_bypassing_admission(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Write ``obj`` straight into etcd, as an older CRD's validation or server version would have let it be
        stored: no admission, no validation, no defaulting on the way in (the API server applies a custom
        resource's schema defaults when it reads it). ``status`` is kept. An existing object is replaced (its uid
        and creationTimestamp kept). Returns the object as the API server serves it; ValueError, and nothing
        written, when the server cannot decode it (an object no Kubernetes could have stored)."""
        rt, namespace, name = self._locate(obj)
        if not name:
            raise ValueError("store_bypassing_admission: metadata.name is required")
        custom = rt.group in self.discovery.custom_groups
        key = registry_key(rt.group, rt.plural, name, namespace, custom=custom)
        meta: dict[str, Any] = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
        try:
            current = self.kube.get(rt, name, namespace)
            meta["uid"] = current["metadata"]["uid"]
            meta["creationTimestamp"] = current["metadata"]["creationTimestamp"]
            meta["generation"] = int(current["metadata"].get("generation") or 0) + 1
        except NotFound:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta.setdefault("generation", 1)
        if namespace is not None:
            meta["namespace"] = namespace
        body = {**obj, "apiVersion": rt.api_version, "kind": rt.kind, "metadata": meta}
        if not custom:
            self._check_decodable(rt, namespace, body)
        self.etcd.put(key, json.dumps(body).encode())
        try:
            return self.kube.get(rt, name, namespace)
        except KubeError as exc:
            self.etcd.delete(key)
            raise ValueError(
                f"store_bypassing_admission: the API server cannot decode {rt.kind} {name} as stored "
                f"({exc}); no Kubernetes version could have stored it"
            ) from exc
