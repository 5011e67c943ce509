"""A set of objects applied, pruned and removed as one, with server-side apply, in a valid order.

What it decides:

- Kinds: ``KINDS`` maps (apiVersion, kind) to the REST resource and its place in the apply order (namespaces, then
  CRDs, then what runs in them: identities and configuration, RBAC, services and policies, workloads last). An object
  of another kind is refused before anything is sent (``ApplyError`` naming it).
- Apply: one server-side apply per object as ``field_manager`` with ``force`` (a field another manager set is taken
  over, as ``kubectl apply --server-side --force-conflicts`` does); fields this manager applied before and the object
  no longer has are removed by the API server itself. Re-applying an unchanged object changes nothing (same
  resourceVersion). A CRD is waited for until Established (its names accepted) before anything after it is applied,
  so custom resources of it can follow. An object found being deleted (a namespace still terminating after an
  uninstall) is waited for until it is gone, then applied again. Transient answers (5xx, 429, no answer) are retried.
- Prune: every object of a prunable kind that carries the set's label and is not in the new set is deleted
  (``PRUNED_KINDS``: never a CRD, whose deletion deletes every custom resource of it, nor a namespace, whose deletion
  deletes everything in it).
- Remove: the given objects are deleted in the reverse of the apply order (workloads first); one already gone is fine.

Every wait is bounded by ``time_left`` (seconds); running out raises ``ApplyError`` saying what was waited for.

Must not touch: what the objects hold (``nodeflow.install`` renders them); other objects than the set's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeflow.kube.client import CONFIG_MAPS, NAMESPACES, KubeClient, Resource
from nodeflow.kube.errors import KubeError, NotFound, TooManyRequests, Unavailable, retry

__all__ = [
    "CRDS",
    "KINDS",
    "PRUNED_KINDS",
    "Applied",
    "ApplyError",
    "Ref",
    "apply_all",
    "find_labelled",
    "ordered",
    "prune",
    "ref_of",
    "remove",
    "resource_of",
]

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
_RBAC = "rbac.authorization.k8s.io"
# (apiVersion, kind) -> (resource, rank in the apply order)
KINDS: Mapping[tuple[str, str], tuple[Resource, int]] = {
    ("v1", "Namespace"): (NAMESPACES, 0),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): (CRDS, 1),
    ("v1", "ServiceAccount"): (Resource("", "v1", "serviceaccounts", "ServiceAccount", True), 2),
    ("v1", "Secret"): (Resource("", "v1", "secrets", "Secret", True), 2),
    ("v1", "ConfigMap"): (CONFIG_MAPS, 2),
    (f"{_RBAC}/v1", "ClusterRole"): (Resource(_RBAC, "v1", "clusterroles", "ClusterRole", False), 3),
    (f"{_RBAC}/v1", "Role"): (Resource(_RBAC, "v1", "roles", "Role", True), 3),
    (f"{_RBAC}/v1", "ClusterRoleBinding"): (
        Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False),
        4,
    ),
    (f"{_RBAC}/v1", "RoleBinding"): (Resource(_RBAC, "v1", "rolebindings", "RoleBinding", True), 4),
    ("v1", "Service"): (Resource("", "v1", "services", "Service", True), 5),
    ("networking.k8s.io/v1", "NetworkPolicy"): (
        Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True),
        5,
    ),
    ("apps/v1", "Deployment"): (Resource("apps", "v1", "deployments", "Deployment", True), 6),
}
PRUNED_KINDS: frozenset[tuple[str, str]] = frozenset(KINDS) - {
    ("v1", "Namespace"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
}
_TRANSIENT = (Unavailable, TooManyRequests)
_POLL_SECONDS = 0.25


class ApplyError(Exception):
    """The set could not be applied, pruned or removed (the message names the object and why)."""


@dataclass(frozen=True, order=True, slots=True)
class Ref:
    """One object: (apiVersion, kind), namespace ("" when cluster-scoped), name."""

    api_version: str
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclass
class Applied:
    """What ``apply_all`` did so far (filled as it goes, so a caller sees it after a failure too)."""

    created: list[Ref] = field(default_factory=list)
    applied: list[Ref] = field(default_factory=list)  # existed before (changed or not)


def resource_of(api_version: str, kind: str) -> Resource:
    try:
        return KINDS[(api_version, kind)][0]
    except KeyError:
        known = ", ".join(sorted(k for _, k in KINDS))
        raise ApplyError(f"{api_version} {kind}: not a kind this installer applies (known: {known})") from None


def ref_of(obj: Mapping[str, Any]) -> Ref:
    meta = obj.get("metadata") or {}
    api_version, kind, name = str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), meta.get("name")
    if not name:
        raise ApplyError(f"{api_version} {kind}: metadata.name is missing")
    namespaced = resource_of(api_version, kind).namespaced
    namespace = str(meta.get("namespace") or "") if namespaced else ""
    if namespaced and not namespace:
        raise ApplyError(f"{kind} {name}: metadata.namespace is missing")
    return Ref(api_version, kind, namespace, str(name))


def _rank(ref: Ref) -> int:
    return KINDS[(ref.api_version, ref.kind)][1]


def ordered(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``objects`` in apply order (stable within a kind's rank)."""
    return sorted(objects, key=lambda o: _rank(ref_of(o)))


def _established(crd: Mapping[str, Any]) -> tuple[bool, str]:
    conditions = (crd.get("status") or {}).get("conditions") or []
    for c in conditions:
        if c.get("type") == "Established" and c.get("status") == "True":
            return True, ""
    problems = [f"{c.get('type')}={c.get('status')} ({c.get('message') or c.get('reason') or ''})" for c in conditions]
    return False, "; ".join(problems) or "no conditions yet"


def _wait(
    what: str,
    check: Callable[[], tuple[bool, str]],
    time_left: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    while True:
        done, why = check()
        if done:
            return
        if time_left() <= _POLL_SECONDS:
            raise ApplyError(f"{what}: gave up waiting ({why})")
        sleep(_POLL_SECONDS)


def apply_all(
    kube: KubeClient,
    objects: Sequence[Mapping[str, Any]],
    *,
    field_manager: str,
    time_left: Callable[[], float],
    done: Applied | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Applied:
    """Server-side apply ``objects`` in apply order (see the module docstring); ``done`` records progress."""
    done = done if done is not None else Applied()
    refs = [ref_of(o) for o in objects]  # every kind known and every object named before anything is sent
    seen: set[Ref] = set()
    for ref in refs:
        if ref in seen:
            raise ApplyError(f"{ref}: twice in the set")
        seen.add(ref)
    for obj in ordered(objects):
        ref = ref_of(obj)
        try:
            created = _apply_one(kube, obj, ref, field_manager, time_left, sleep)
        except KubeError as exc:
            raise ApplyError(f"{ref}: {exc}") from exc
        (done.created if created else done.applied).append(ref)
    return done


def _apply_one(
    kube: KubeClient,
    obj: Mapping[str, Any],
    ref: Ref,
    field_manager: str,
    time_left: Callable[[], float],
    sleep: Callable[[float], None],
) -> bool:
    """Apply one object (waiting out its deletion first when it is being deleted, and after it until a CRD is
    Established); True when it was created."""
    resource = resource_of(ref.api_version, ref.kind)

    def send() -> tuple[bool, dict[str, Any]]:
        return retry(lambda: kube.apply(resource, obj, field_manager=field_manager), on=_TRANSIENT, sleep=sleep)

    def gone() -> tuple[bool, str]:
        try:
            kube.get(resource, ref.name, ref.namespace or None)
        except NotFound:
            return True, ""
        return False, "it is still being deleted"

    created, stored = send()
    if (stored.get("metadata") or {}).get("deletionTimestamp"):
        _wait(f"{ref} to be deleted before it is created again", gone, time_left, sleep)
        created, stored = send()
    if resource == CRDS:
        _wait(f"{ref} to be Established", lambda: _established(kube.get(CRDS, ref.name)), time_left, sleep)
    return created


def find_labelled(kube: KubeClient, selector: str, kinds: Iterable[tuple[str, str]] = PRUNED_KINDS) -> list[Ref]:
    """Every object of ``kinds`` (in every namespace) that ``selector`` matches; a kind the cluster does not serve
    has none."""
    found: list[Ref] = []
    for api_version, kind in sorted(kinds):
        resource = resource_of(api_version, kind)

        def listed(resource: Resource = resource) -> list[dict[str, Any]]:
            return kube.list_items(resource, label_selector=selector)

        try:
            items = retry(listed, on=_TRANSIENT)
        except NotFound:
            continue
        for item in items:
            meta = item.get("metadata") or {}
            found.append(Ref(api_version, kind, str(meta.get("namespace") or ""), str(meta.get("name"))))
    return sorted(found)


def remove(kube: KubeClient, refs: Iterable[Ref], *, sleep: Callable[[float], None] = time.sleep) -> list[Ref]:
    """Delete ``refs`` in the reverse of the apply order (the garbage collector removes what they own, such as a
    Deployment's pods); returns those that were there."""
    removed: list[Ref] = []
    for ref in sorted(refs, key=lambda r: (-_rank(r), r)):
        resource = resource_of(ref.api_version, ref.kind)

        def delete(ref: Ref = ref, resource: Resource = resource) -> dict[str, Any]:
            return kube.delete(resource, ref.name, ref.namespace or None, propagation_policy="Background")

        try:
            retry(delete, on=_TRANSIENT, sleep=sleep)
        except NotFound:
            continue
        except KubeError as exc:
            raise ApplyError(f"deleting {ref}: {exc}") from exc
        removed.append(ref)
    return removed


def prune(
    kube: KubeClient,
    keep: Iterable[Ref],
    *,
    selector: str,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Ref]:
    """Delete the objects of ``PRUNED_KINDS`` that ``selector`` matches and ``keep`` does not list; returns them."""
    kept = set(keep)
    return remove(kube, [r for r in find_labelled(kube, selector) if r not in kept], sleep=sleep)
