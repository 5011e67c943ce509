"""Writes: NodeClaims, node taints/labels/annotations/finalizers/cordon, evictions, deletes.

Every operation is idempotent (running it twice leaves the same object and does not fail)
and needs no business knowledge. Lists that must not be merged by the server (taints,
finalizers) are written read-modify-write: GET, compute, and a JSON merge patch that
carries ``metadata.resourceVersion``, so a concurrent writer makes it fail with 409 and it
is retried on a fresh copy (client-go's ``MergeFromWithOptimisticLock``). Maps (labels,
annotations) use plain merge patches (``None`` deletes a key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from nodeflow.api import labels as wk
from nodeflow.api.core import Node, Pod
from nodeflow.api.karpenter import NodeClaim
from nodeflow.api.meta import Taint
from nodeflow.kube.client import NODE_CLAIMS, NODES, PODS, KubeClient, Resource
from nodeflow.kube.errors import AlreadyExists, Conflict, NotFound, TooManyRequests, Unavailable, retry_conflict

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "MULTIPLE_BUDGETS",
    "add_finalizer",
    "add_taints",
    "cordon",
    "create_node_claim",
    "delete",
    "evict",
    "find_node",
    "get_node",
    "get_node_claim",
    "get_pod",
    "patch_node_claim_status",
    "remove_finalizer",
    "remove_taints",
    "set_annotations",
    "set_labels",
    "uncordon",
    "update",
]


#: The eviction API's answer (HTTP 500) for a pod that more than one PodDisruptionBudget selects (kube-apiserver's
#: pkg/registry/core/pod/storage/eviction.go): no eviction of it can succeed until a budget goes.
MULTIPLE_BUDGETS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."


def _c(client: KubeClient | ApiClient) -> KubeClient:
    return KubeClient.of(client)


def _dump(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(by_alias=True, exclude_none=True, mode="json"))


# --- reads ------------------------------------------------------------------------------------


def get_node(client: KubeClient | ApiClient, name: str) -> Node:
    return Node.model_validate(_c(client).get(NODES, name))


def find_node(client: KubeClient | ApiClient, name: str | None, provider_id: str | None) -> dict[str, Any] | None:
    """A NodeClaim's Node: the one named ``name`` (its ``status.nodeName``) when its providerID agrees, else the
    oldest Node whose ``spec.providerID`` is ``provider_id`` (a Node registered while ``status.nodeName`` was
    never written). None when there is none."""
    kube = _c(client)
    if name:
        try:
            found: dict[str, Any] | None = kube.get(NODES, name)
        except NotFound:
            found = None
        if found is not None:
            node_provider = (found.get("spec") or {}).get("providerID")
            if not provider_id or not node_provider or node_provider == provider_id:
                return found
    if provider_id:
        matching = [n for n in kube.list_items(NODES) if (n.get("spec") or {}).get("providerID") == provider_id]
        matching.sort(key=lambda n: str((n.get("metadata") or {}).get("creationTimestamp") or ""))
        return matching[0] if matching else None
    return None


def get_pod(client: KubeClient | ApiClient, namespace: str, name: str) -> Pod:
    return Pod.model_validate(_c(client).get(PODS, name, namespace))


def get_node_claim(client: KubeClient | ApiClient, name: str) -> NodeClaim:
    return NodeClaim.model_validate(_c(client).get(NODE_CLAIMS, name))


# --- NodeClaims -------------------------------------------------------------------------------


def create_node_claim(client: KubeClient | ApiClient, claim: NodeClaim | Mapping[str, Any]) -> NodeClaim:
    """Create ``claim``; when one of that name exists with the same spec, return it (idempotent).

    Raises ``AlreadyExists`` when the existing NodeClaim has a different spec.
    """
    kube = _c(client)
    model = claim if isinstance(claim, NodeClaim) else NodeClaim.model_validate(claim)
    body = _dump(model)
    body.pop("status", None)
    for key in ("resourceVersion", "uid", "creationTimestamp"):
        body.get("metadata", {}).pop(key, None)
    try:
        return NodeClaim.model_validate(kube.create(NODE_CLAIMS, body))
    except AlreadyExists:
        if not model.metadata.name:
            raise
        existing = NodeClaim.model_validate(kube.get(NODE_CLAIMS, model.metadata.name))
        if existing.spec != model.spec:
            raise AlreadyExists(
                f"NodeClaim {model.metadata.name!r} already exists with a different spec",
                status=409,
                reason="AlreadyExists",
            ) from None
        return existing


def patch_node_claim_status(client: KubeClient | ApiClient, name: str, status: Mapping[str, Any] | Any) -> NodeClaim:
    """Merge-patch ``status`` into the NodeClaim's status subresource (lists such as conditions are replaced)."""
    body = status if isinstance(status, Mapping) else _dump(status)
    return NodeClaim.model_validate(_c(client).patch(NODE_CLAIMS, name, {"status": dict(body)}, subresource="status"))


# --- read-modify-write ------------------------------------------------------------------------


def update(
    client: KubeClient | ApiClient,
    resource: Resource,
    name: str,
    mutate: Callable[[dict[str, Any]], dict[str, Any] | None],
    *,
    namespace: str | None = None,
    attempts: int = 5,
    sleep: Callable[[float], None] | None = None,
) -> tuple[dict[str, Any], bool]:
    """GET the object, ``mutate(obj)`` -> merge patch (None: nothing to do), PATCH with its resourceVersion.

    Retried on ``Conflict`` with a fresh GET each time. Returns (object, changed).
    """
    kube = _c(client)

    def once() -> tuple[dict[str, Any], bool]:
        obj = kube.get(resource, name, namespace)
        patch = mutate(obj)
        if patch is None:
            return obj, False
        meta = dict(patch.get("metadata") or {})
        meta["resourceVersion"] = (obj.get("metadata") or {}).get("resourceVersion")
        patch = {**patch, "metadata": meta}
        return kube.patch(resource, name, patch, namespace=namespace), True

    kwargs: dict[str, Any] = {"attempts": attempts}
    if sleep is not None:
        kwargs["sleep"] = sleep
    return retry_conflict(once, **kwargs)


def _taint_dicts(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(t) for t in ((obj.get("spec") or {}).get("taints") or [])]


def _taint_dict(taint: Taint) -> dict[str, Any]:
    return _dump(taint)


def add_taints(client: KubeClient | ApiClient, node: str, taints: Iterable[Taint], **kw: Any) -> Node:
    """Ensure ``taints`` are on the node (same key+effect with another value is replaced)."""
    wanted = [_taint_dict(t) for t in taints]

    def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
        current = _taint_dicts(obj)
        out = list(current)
        for new in wanted:
            same = [i for i, t in enumerate(out) if t.get("key") == new["key"] and t.get("effect") == new["effect"]]
            if same:
                old = out[same[0]]
                if (old.get("value") or "") == (new.get("value") or ""):
                    continue
                out[same[0]] = {**new, **({"timeAdded": old["timeAdded"]} if "timeAdded" in old else {})}
            else:
                out.append(new)
        return None if out == current else {"spec": {"taints": out}}

    return Node.model_validate(update(client, NODES, node, mutate, **kw)[0])


def remove_taints(client: KubeClient | ApiClient, node: str, taints: Iterable[Taint | str], **kw: Any) -> Node:
    """Remove taints matching by key and effect (a plain key string removes every effect)."""
    keys = [(t, None) if isinstance(t, str) else (t.key, t.effect) for t in taints]

    def matches(t: Mapping[str, Any]) -> bool:
        return any(t.get("key") == k and (e is None or t.get("effect") == e) for k, e in keys)

    def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
        current = _taint_dicts(obj)
        out = [t for t in current if not matches(t)]
        return None if len(out) == len(current) else {"spec": {"taints": out}}

    return Node.model_validate(update(client, NODES, node, mutate, **kw)[0])


def add_finalizer(
    client: KubeClient | ApiClient,
    resource: Resource,
    name: str,
    finalizer: str = wk.FINALIZER_TERMINATION,
    *,
    namespace: str | None = None,
    **kw: Any,
) -> bool:
    """Ensure ``finalizer`` is in metadata.finalizers; True when it was added.

    Refused with ``Invalid``/``Forbidden`` by the server on an object being deleted; a
    NotFound propagates.
    """

    def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
        current = list((obj.get("metadata") or {}).get("finalizers") or [])
        if finalizer in current:
            return None
        return {"metadata": {"finalizers": [*current, finalizer]}}

    return update(client, resource, name, mutate, namespace=namespace, **kw)[1]


def remove_finalizer(
    client: KubeClient | ApiClient,
    resource: Resource,
    name: str,
    finalizer: str = wk.FINALIZER_TERMINATION,
    *,
    namespace: str | None = None,
    **kw: Any,
) -> bool:
    """Ensure ``finalizer`` is not in metadata.finalizers; True when it was removed (object gone: False)."""

    def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
        current = list((obj.get("metadata") or {}).get("finalizers") or [])
        if finalizer not in current:
            return None
        return {"metadata": {"finalizers": [f for f in current if f != finalizer]}}

    try:
        return update(client, resource, name, mutate, namespace=namespace, **kw)[1]
    except NotFound:
        return False


# --- maps and flags ---------------------------------------------------------------------------


def set_labels(
    client: KubeClient | ApiClient,
    resource: Resource,
    name: str,
    labels: Mapping[str, str | None],
    *,
    namespace: str | None = None,
) -> dict[str, Any]:
    """Merge ``labels`` into metadata.labels (a None value removes the key)."""
    return _c(client).patch(resource, name, {"metadata": {"labels": dict(labels)}}, namespace=namespace)


def set_annotations(
    client: KubeClient | ApiClient,
    resource: Resource,
    name: str,
    annotations: Mapping[str, str | None],
    *,
    namespace: str | None = None,
) -> dict[str, Any]:
    """Merge ``annotations`` into metadata.annotations (a None value removes the key)."""
    return _c(client).patch(resource, name, {"metadata": {"annotations": dict(annotations)}}, namespace=namespace)


def cordon(client: KubeClient | ApiClient, node: str) -> Node:
    """spec.unschedulable = true."""
    return Node.model_validate(_c(client).patch(NODES, node, {"spec": {"unschedulable": True}}))


def uncordon(client: KubeClient | ApiClient, node: str) -> Node:
    """spec.unschedulable removed."""
    return Node.model_validate(_c(client).patch(NODES, node, {"spec": {"unschedulable": None}}))


# --- evictions and deletes --------------------------------------------------------------------


def evict(
    client: KubeClient | ApiClient,
    namespace: str,
    name: str,
    *,
    grace_period_seconds: int | None = None,
    uid: str | None = None,
) -> bool:
    """Evict a pod through policy/v1 Eviction. True: evicted; False: the pod is already gone.

    Raises ``TooManyRequests`` (with the PodDisruptionBudget's message) when a budget does
    not allow it now: try again later, it is not a failure. A pod that more than one budget
    selects is never evicted: the API server answers 500 with ``MULTIPLE_BUDGETS`` (not a
    fault of the server); that too is raised as ``TooManyRequests``, its ``status`` 500 (as
    Karpenter, which holds the drain on it as on a budget).
    """
    options: dict[str, Any] = {}
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    if uid is not None:
        options["preconditions"] = {"uid": uid}
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if options:
        body["deleteOptions"] = options
    try:
        _c(client).request("POST", PODS.path(name, namespace, "eviction"), body=body)
    except NotFound:
        return False
    except Conflict as exc:
        if uid is not None:  # the uid precondition failed: that pod is gone (a new one took the name)
            return False
        raise exc
    except Unavailable as exc:
        if exc.status == 500 and exc.message == MULTIPLE_BUDGETS:
            raise TooManyRequests(exc.message, status=500, reason=exc.reason, details=exc.details) from exc
        raise
    return True


def delete(
    client: KubeClient | ApiClient,
    resource: Resource,
    name: str,
    namespace: str | None = None,
    *,
    grace_period_seconds: int | None = None,
    uid: str | None = None,
) -> bool:
    """Delete an object. True: deletion accepted; False: it was already gone."""
    try:
        _c(client).delete(resource, name, namespace, grace_period_seconds=grace_period_seconds, uid=uid)
    except NotFound:
        return False
    return True
