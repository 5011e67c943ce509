"""Isolation between tests that share one control plane: after ``reset(mark)`` the cluster holds what it held at
``mark()`` again, as far as creations go. Namespaces, cluster-scoped objects (Nodes, NodePools, NodeClaims, PVs,
StorageClasses, ClusterRoles, CRDs...) and objects created in the namespaces that existed at the mark
(``default``, ``kube-system``, ``nodeflow``...: a test's pods, Events, PDBs, Deployments there) are deleted;
nothing the test changed or deleted is restored (tests must not change what they did not create).

``mark()`` records the uid of every object of every kind that can be listed and deleted (one metadata-only LIST
per kind, in parallel) and the namespaces that exist; ``created_since(mark)`` finds what was not there;
``reset(mark)`` deletes it, in an order no controller can undo:

1. the workload controllers (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs,
   ReplicationControllers), so nothing creates pods any more;
2. pods, with grace period 0 (no kubelet may be left to confirm a graceful deletion) and their finalizers
   cleared, again until none created since the mark is left (a ReplicaSet controller's create in flight lands
   after step 1);
3. every other object; then its finalizers are cleared (no controller of ours may be left to clear them; once
   an object is being deleted nobody can add one);
4. namespaces created since the mark: deleted (Terminating: the API server refuses every create in them from
   then on), emptied (a DELETE of the collection of every namespaced kind, pods with grace period 0, finalizers
   cleared), then finalized (``/finalize`` with no finalizers), so they are gone when ``reset`` returns. The
   namespace controller would do the same, but not before 5 s (its fixed delay after a namespace's deletion),
   and a later test could not create a namespace of the same name meanwhile.

Kinds are found by discovery once (every kind with list and delete, in every version its group serves: one a
group serves only at a version other than its preferred one, such as karpenter.sh's v1alpha1 NodeOverlays,
included), less those the API server itself allocates or reconciles (service IPs and CIDRs, API Priority and
Fairness objects, the APIService registrations) and events.k8s.io Events (the core Events under another API).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from nodeflow.kube.client import NAMESPACES, PODS, KubeClient, Resource
from nodeflow.kube.errors import Conflict, KubeError, NotFound, from_exception, from_response

__all__ = ["ClusterScope", "Mark"]

SKIPPED_GROUPS = ("flowcontrol.apiserver.k8s.io", "apiregistration.k8s.io")
SKIPPED = {
    ("networking.k8s.io", "ipaddresses"),
    ("networking.k8s.io", "servicecidrs"),
    ("", "componentstatuses"),
    ("events.k8s.io", "events"),  # the core Events, seen through another API
}
WORKLOADS = {
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("", "replicationcontrollers"),
}
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
FORCE = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
POD_PASSES = 3

Key = tuple[str, str]  # (namespace or "", name)


@dataclass(frozen=True)
class Mark:
    """The uids of the objects that existed, by kind, and the namespaces that existed."""

    uids: Mapping[Resource, frozenset[str]]
    namespaces: frozenset[str]


def _discover(kube: KubeClient) -> list[Resource]:
    """Every kind that can be listed and deleted, once each: at its group's preferred version when served there,
    else at the first version that serves it (karpenter.sh's NodeOverlays are v1alpha1 only, its preferred
    version is v1)."""
    versions = [("", "v1")]
    for group in kube.request("GET", "/apis").get("groups") or []:
        if group["name"] in SKIPPED_GROUPS:
            continue
        preferred = group["preferredVersion"]["version"]
        others = [v["version"] for v in group.get("versions") or [] if v["version"] != preferred]
        versions.extend((group["name"], v) for v in [preferred, *others])
    found = []
    seen: set[tuple[str, str]] = set()
    for group, version in versions:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        for r in kube.request("GET", path).get("resources") or []:
            verbs = set(r.get("verbs") or [])
            key = (group, r["name"])
            if "/" in r["name"] or not {"list", "delete"} <= verbs or key in SKIPPED or key in seen:
                continue
            seen.add(key)
            found.append(Resource(group, version, r["name"], r["kind"], bool(r.get("namespaced"))))
    return found


class ClusterScope:
    def __init__(self, kube: KubeClient, kinds: Iterable[Resource] | None = None, *, workers: int = 8) -> None:
        self.kube = kube
        self.kinds = list(kinds) if kinds is not None else _discover(kube)
        self.namespaced = [k for k in self.kinds if k.namespaced]
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="cluster-scope")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------------------------------------- listing

    def _metadata(self, kind: Resource) -> list[dict[str, Any]]:
        """Every object of ``kind`` (all namespaces) as its metadata only; [] when the kind is gone (a CRD a
        test deleted)."""
        api = self.kube.api_client
        try:
            method, url, headers, _, _ = api.param_serialize(
                method="GET",
                resource_path=kind.path(),
                query_params=None,
                header_params={"Accept": METADATA_LIST},
                auth_settings=["BearerToken"],
            )
            response = api.call_api(method, url, headers, None, None, _request_timeout=(5.0, 30.0))
            data: bytes = response.read()  # type: ignore[no-untyped-call]
        except Exception as exc:
            raise from_exception(exc) from exc
        if response.status == 404:
            return []
        if not 200 <= response.status <= 299:
            raise from_response(response.status, data, response.headers)
        return [item.get("metadata") or {} for item in json.loads(data).get("items") or []]

    def _all(self) -> dict[Resource, list[dict[str, Any]]]:
        return dict(zip(self.kinds, self._pool.map(self._metadata, self.kinds), strict=True))

    def mark(self) -> Mark:
        lists = self._all()
        namespaces = frozenset(str(m["name"]) for m in lists.get(NAMESPACES, []))
        return Mark(
            {kind: frozenset(str(m.get("uid")) for m in items) for kind, items in lists.items()},
            namespaces,
        )

    def _created(self, mark: Mark, lists: Mapping[Resource, list[dict[str, Any]]]) -> dict[Resource, list[Key]]:
        out: dict[Resource, list[Key]] = {}
        for kind, items in lists.items():
            before = mark.uids.get(kind, frozenset())
            keys = [
                (str(m.get("namespace") or ""), str(m["name"]))
                for m in items
                if m.get("uid") not in before and (not kind.namespaced or m.get("namespace") in mark.namespaces)
            ]
            if keys:
                out[kind] = keys
        return out

    def created_since(self, mark: Mark) -> dict[Resource, list[str]]:
        """What was not there at ``mark``, by kind: names (``namespace/name`` for namespaced objects; objects in
        namespaces created since the mark are not listed, their namespace is)."""
        return {
            kind: [f"{ns}/{name}" if ns else name for ns, name in keys]
            for kind, keys in self._created(mark, self._all()).items()
        }

    # ------------------------------------------------------------------------------------------- reset

    def reset(self, mark: Mark) -> dict[Resource, list[str]]:
        """Delete what was created since ``mark`` (see the module docstring); returns it, as ``created_since``."""
        created = self._created(mark, self._all())
        workloads = [(k, key) for k, keys in created.items() if (k.group, k.plural) in WORKLOADS for key in keys]
        self._run(self._remove, workloads)
        pods = created.get(PODS, [])
        for _ in range(POD_PASSES):
            if not pods:
                break
            self._run(lambda job: self._force_pod(*job[1]), [(PODS, key) for key in pods])
            pods = self._created(mark, {PODS: self._metadata(PODS)}).get(PODS, [])
        rest = [
            (k, key)
            for k, keys in created.items()
            if k not in (PODS, NAMESPACES) and (k.group, k.plural) not in WORKLOADS
            for key in keys
        ]
        self._run(self._remove, rest)
        for _, name in created.get(NAMESPACES, []):
            self._remove_namespace(name)
        return {kind: [f"{ns}/{name}" if ns else name for ns, name in keys] for kind, keys in created.items()}

    def _run(self, fn: Any, jobs: list[Any]) -> None:
        list(self._pool.map(fn, jobs))

    def _force_pod(self, namespace: str, name: str) -> None:
        try:
            current = self.kube.request("DELETE", PODS.path(name, namespace), body=FORCE)
        except NotFound:
            return
        self._clear_finalizers(PODS, name, namespace, current)

    def _remove(self, job: tuple[Resource, Key]) -> None:
        kind, (namespace, name) = job
        ns = namespace or None
        try:
            current = self.kube.delete(kind, name, ns, propagation_policy="Background")
        except NotFound:
            return
        if current.get("kind") != kind.kind:  # a Status: the object is gone, or the answer does not say
            try:
                current = self.kube.get(kind, name, ns)
            except NotFound:
                return
        self._clear_finalizers(kind, name, ns, current)

    def _clear_finalizers(self, kind: Resource, name: str, namespace: str | None, current: Mapping[str, Any]) -> None:
        if (current.get("metadata") or {}).get("finalizers"):
            with contextlib.suppress(NotFound, Conflict):
                self.kube.patch(kind, name, {"metadata": {"finalizers": None}}, namespace=namespace)

    def _remove_namespace(self, name: str) -> None:
        try:
            self.kube.delete(NAMESPACES, name)
        except NotFound:
            return

        def empty(kind: Resource) -> None:
            try:
                deleted = self.kube.request("DELETE", kind.path(namespace=name), body=FORCE if kind == PODS else None)
            except NotFound:
                return
            except KubeError:  # a kind that refuses a DELETE of its collection: one by one
                for meta in self._metadata_in(kind, name):
                    self._remove((kind, (name, str(meta["name"]))))
                return
            for item in deleted.get("items") or []:  # those a finalizer keeps
                self._clear_finalizers(kind, str(item["metadata"]["name"]), name, item)

        self._run(empty, self.namespaced)
        with contextlib.suppress(NotFound, Conflict):
            current = self.kube.get(NAMESPACES, name)
            current["spec"] = {"finalizers": []}
            self.kube.request("PUT", NAMESPACES.path(name, subresource="finalize"), body=current)

    def _metadata_in(self, kind: Resource, namespace: str) -> list[dict[str, Any]]:
        try:
            return [item.get("metadata") or {} for item in self.kube.list_items(kind, namespace=namespace)]
        except NotFound:
            return []
