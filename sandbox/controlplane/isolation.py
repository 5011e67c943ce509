"""Isolation between tests that share one control plane: each test works in namespaces of its own, and what it
created outside them (cluster-scoped objects: Nodes, NodePools, NodeClaims, PVs, StorageClasses, ClusterRoles,
CRDs, more namespaces...) is deleted when it ends.

``ClusterScope.mark()`` records the uid of every cluster-scoped object (one LIST per kind, in parallel);
``reset(mark)`` deletes every object that was not there: namespaces get their pods force-deleted (no kubelet may
be left to confirm a graceful deletion) and are then deleted (the namespace controller empties them); other objects
are deleted, then their finalizers are cleared (no controller of ours may be left to clear them; once an object is
being deleted nobody can add one). Deletion is not waited for: later tests use names of their own.

Kinds are found by discovery once (preferred version of every group, cluster-scoped, with list and delete), less
those the API server itself allocates or reconciles (service IPs and CIDRs, API Priority and Fairness objects).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from nodeflow.kube.client import NAMESPACES, PODS, KubeClient, Resource
from nodeflow.kube.errors import KubeError, NotFound

__all__ = ["ClusterScope", "Mark"]

SKIPPED_GROUPS = ("flowcontrol.apiserver.k8s.io", "apiregistration.k8s.io")
SKIPPED = {("networking.k8s.io", "ipaddresses"), ("networking.k8s.io", "servicecidrs"), ("", "componentstatuses")}


@dataclass(frozen=True)
class Mark:
    """The uids of the cluster-scoped objects that existed, by kind."""

    uids: Mapping[Resource, frozenset[str]]


def _discover(kube: KubeClient) -> list[Resource]:
    versions = [("", "v1")]
    for group in kube.request("GET", "/apis").get("groups") or []:
        if group["name"] not in SKIPPED_GROUPS:
            versions.append((group["name"], group["preferredVersion"]["version"]))
    found = []
    for group, version in versions:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        for r in kube.request("GET", path).get("resources") or []:
            verbs = set(r.get("verbs") or [])
            if (
                "/" in r["name"]
                or r.get("namespaced")
                or not {"list", "delete"} <= verbs
                or (group, r["name"]) in SKIPPED
            ):
                continue
            found.append(Resource(group, version, r["name"], r["kind"], False))
    return found


class ClusterScope:
    def __init__(self, kube: KubeClient, kinds: Iterable[Resource] | None = None, *, workers: int = 8) -> None:
        self.kube = kube
        self.kinds = list(kinds) if kinds is not None else _discover(kube)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="cluster-scope")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _items(self, kind: Resource) -> list[dict[str, object]]:
        try:
            return self.kube.list_items(kind)
        except NotFound:  # a kind whose CRD a test deleted
            return []

    def mark(self) -> Mark:
        lists = self._pool.map(self._items, self.kinds)
        return Mark(
            {
                kind: frozenset(str(o["metadata"]["uid"]) for o in items)  # type: ignore[index]
                for kind, items in zip(self.kinds, lists, strict=True)
            }
        )

    def created_since(self, mark: Mark) -> dict[Resource, list[str]]:
        """Names of the objects, by kind, that were not there at ``mark``."""
        lists = self._pool.map(self._items, self.kinds)
        out: dict[Resource, list[str]] = {}
        for kind, items in zip(self.kinds, lists, strict=True):
            before = mark.uids.get(kind, frozenset())
            names = [str(o["metadata"]["name"]) for o in items if o["metadata"]["uid"] not in before]  # type: ignore[index]
            if names:
                out[kind] = names
        return out

    def reset(self, mark: Mark) -> dict[Resource, list[str]]:
        """Delete what was created since ``mark``; returns it."""
        created = self.created_since(mark)
        jobs = [(kind, name) for kind, names in created.items() for name in names]
        list(self._pool.map(lambda job: self._remove(*job), jobs))
        return created

    def _remove(self, kind: Resource, name: str) -> None:
        try:
            current = self.kube.get(kind, name)
        except NotFound:
            return
        if kind == NAMESPACES:  # also when it is already Terminating: its pods may be stuck there
            with contextlib.suppress(KubeError):
                self.kube.request(
                    "DELETE",
                    PODS.path(namespace=name),
                    body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                )
        if not current.get("metadata", {}).get("deletionTimestamp"):
            try:
                self.kube.delete(kind, name, propagation_policy="Background")
                current = self.kube.get(kind, name)
            except NotFound:
                return
        if current.get("metadata", {}).get("finalizers"):
            with contextlib.suppress(NotFound):
                self.kube.patch(kind, name, {"metadata": {"finalizers": None}})
