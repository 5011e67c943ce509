"""The Register and Initialize steps: a launched NodeClaim meets its Node.

Register finds the Node whose providerID is the NodeClaim's (``find_registering_node``), syncs the
NodeClaim's labels, annotations and taints onto it, adds the termination finalizer and an owner reference, lifts
the ``karpenter.sh/unregistered`` taint and marks the NodeClaim Registered. Initialize waits
for the node to be Ready, its startup and not-ready taints gone and the requested extended
resources allocatable, then marks it Initialized (and Ready).

Each step is idempotent and returns quickly; the state machine's Wait loop polls them. Past the
TTL (measured from the launch) they raise ``RegistrationTimeout`` / ``InitializationTimeout``.

Must not touch: how an instance launches (``launch``); disruption or termination of the node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.core import Node
from nodeflow.api.karpenter import NodeClaim
from nodeflow.api.quantity import to_milli
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import NODE_CLAIMS, NODES, KubeClient
from nodeflow.kube.status import recount_node_pool, set_condition
from nodeflow.kube.writes import get_node_claim, update
from nodeflow.lifecycle.errors import InitializationTimeout, NodeClaimGone, RegistrationTimeout

__all__ = ["FULL_LIST_EVERY_SECONDS", "StepDeps", "find_registering_node", "initialize", "register"]

# Annotations that are nodeflow's bookkeeping on the NodeClaim, not meant for the Node.
_CLAIM_ONLY_ANNOTATIONS = frozenset({wk.ANNOTATION_NOMINATED_PODS, wk.ANNOTATION_BATCH})
_BASE_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


@dataclass(frozen=True)
class StepDeps:
    kube: KubeClient
    now: Callable[[], datetime]
    registration_ttl_seconds: int = 900
    initialization_ttl_seconds: int = 900


def _claim(deps: StepDeps, name: str) -> NodeClaim:
    try:
        claim = get_node_claim(deps.kube, name)
    except kerr.NotFound:
        raise NodeClaimGone(f"NodeClaim {name} was deleted") from None
    if claim.metadata.deletion_timestamp is not None:
        raise NodeClaimGone(f"NodeClaim {name} is being deleted")
    return claim


def _launched_at(claim: NodeClaim, launched_at: str | None) -> datetime | None:
    if launched_at:
        try:
            return datetime.fromisoformat(launched_at.replace("Z", "+00:00"))
        except ValueError:
            pass
    cond = claim.status.condition("Launched") if claim.status else None
    if cond is not None and cond.last_transition_time is not None:
        return cond.last_transition_time
    return claim.metadata.creation_timestamp


def _elapsed(deps: StepDeps, since: datetime | None) -> float:
    return 0.0 if since is None else (deps.now() - since).total_seconds()


FULL_LIST_EVERY_SECONDS = 60  # a Node not under its expected name is searched for among all Nodes this often


def find_registering_node(
    kube: KubeClient,
    provider_id: str,
    names: Iterable[str | None],
    *,
    elapsed: float,
    listed_at: int | None,
    last_look: bool,
) -> tuple[dict[str, Any] | None, bool]:
    """The NodeClaim's Node (the oldest Node whose providerID is ``provider_id``) and whether all Nodes were LISTed.

    Karpenter finds it through an index of its Node cache; a step without a cache GETs the Nodes named in ``names``
    first (the NodeClaim's ``status.nodeName``, the instance's private DNS name: what a kubelet registers under by
    default, as an EKS node of either hostname type), which costs one small read per poll. Kubernetes has no field
    selector on ``spec.providerID``, so finding a Node named otherwise (a hostname override) takes a LIST of every
    Node: done on every poll when no name is known, else once ``FULL_LIST_EVERY_SECONDS`` have passed since the
    launch or the last such LIST (``listed_at``, in seconds since the launch), and on the ``last_look`` before the
    registration times out. A burst of N launches then reads O(N) Nodes per round of polls, not O(N^2)."""
    wanted = [name for name in dict.fromkeys(names) if name]
    for name in wanted:
        try:
            node = kube.get(NODES, name)
        except kerr.NotFound:
            continue
        if (node.get("spec") or {}).get("providerID") == provider_id:
            return node, False
    if wanted and not last_look and elapsed - (listed_at or 0) < FULL_LIST_EVERY_SECONDS:
        return None, False
    found = [n for n in kube.list_items(NODES) if (n.get("spec") or {}).get("providerID") == provider_id]
    found.sort(key=lambda n: n["metadata"].get("creationTimestamp", ""))
    return (found[0] if found else None), True


def _set_claim_conditions(deps: StepDeps, claim: NodeClaim, updates: list[tuple[str, str, str]], **extra: Any) -> None:
    conditions = (
        [c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in (claim.status.conditions or [])]
        if claim.status
        else []
    )
    for kind, status, reason in updates:
        conditions = set_condition(
            conditions, kind, status, reason, "", now=deps.now(), generation=claim.metadata.generation
        )
    deps.kube.patch(NODE_CLAIMS, claim.name, {"status": {"conditions": conditions, **extra}}, subresource="status")


def register(
    deps: StepDeps,
    claim_name: str,
    launched_at: str | None = None,
    *,
    node_name: str | None = None,
    listed_at: int | None = None,
) -> dict[str, Any]:
    """Register the NodeClaim's Node if it has appeared; ``{"registered": bool, "node": name}``.

    ``node_name``: the name its Node is expected under (the instance's private DNS name); ``listed_at``: when the
    previous poll last LISTed all Nodes (its ``listedAt``). See ``find_registering_node``."""
    claim = _claim(deps, claim_name)
    provider = claim.status.provider_id if claim.status else None
    if not provider:
        raise NodeClaimGone(f"NodeClaim {claim_name} has no providerID: it was not launched")
    elapsed = _elapsed(deps, _launched_at(claim, launched_at))
    raw, listed = find_registering_node(
        deps.kube,
        provider,
        (claim.status.node_name if claim.status else None, node_name),
        elapsed=elapsed,
        listed_at=listed_at,
        last_look=elapsed >= deps.registration_ttl_seconds,
    )
    if raw is None:
        if elapsed >= deps.registration_ttl_seconds:
            raise RegistrationTimeout(
                f"NodeClaim {claim_name}: no node registered for {provider} within "
                f"{deps.registration_ttl_seconds}s of the launch"
            )
        seen = int(elapsed) if listed else listed_at
        return {"registered": False, "elapsedSeconds": int(elapsed), **({"listedAt": seen} if seen is not None else {})}

    node_name = raw["metadata"]["name"]
    claim_labels = dict(claim.metadata.labels or {})
    mutate = _NodeSync.of(claim)
    try:
        updated, _ = update(deps.kube, NODES, node_name, mutate)
    except kerr.NotFound:
        return {"registered": False, "elapsedSeconds": int(elapsed)}
    created = {"created": _created(mutate.first, claim_labels)}  # for the metrics
    recount_node_pool(deps.kube, claim_labels.get(wk.LABEL_NODEPOOL, ""))  # the pool's NODES column follows
    # A node that is ready already (polls are sparse) is initialized in the same step.
    if _waiting_for(Node.model_validate(updated), claim) is None:
        deps.kube.patch(NODES, node_name, {"metadata": {"labels": {wk.LABEL_INITIALIZED: "true"}}})
        _set_claim_conditions(
            deps,
            claim,
            [("Registered", "True", "Registered"), ("Initialized", "True", "Initialized"), ("Ready", "True", "Ready")],
            nodeName=node_name,
        )
        return {"registered": True, "initialized": True, "node": node_name, **created}
    _set_claim_conditions(deps, claim, [("Registered", "True", "Registered")], nodeName=node_name)
    return {"registered": True, "initialized": False, "node": node_name, **created}


@dataclass
class _NodeSync:
    """What Register writes onto the NodeClaim's Node (an ``update`` mutation): the NodeClaim's labels and
    annotations, registered, the termination finalizer, the NodeClaim as owner, and (the first time only: later edits
    are the user's) its taints and startup taints in place of the unregistered taint. ``first``: this write
    registered the Node."""

    labels: dict[str, str]
    annotations: dict[str, str]
    taints: list[dict[str, Any]]
    owner: dict[str, Any]
    first: bool = False

    @classmethod
    def of(cls, claim: NodeClaim) -> _NodeSync:
        return cls(
            labels=dict(claim.metadata.labels or {}),
            annotations={
                k: v for k, v in (claim.metadata.annotations or {}).items() if k not in _CLAIM_ONLY_ANNOTATIONS
            },
            taints=[  # as JSON: a taint's timeAdded is a time
                t.model_dump(by_alias=True, exclude_none=True, mode="json")
                for t in (*(claim.spec.taints or ()), *(claim.spec.startup_taints or ()))
            ],
            owner={
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "name": claim.name,
                "uid": claim.metadata.uid or "",
                "blockOwnerDeletion": True,
            },
        )

    def __call__(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        meta = obj.setdefault("metadata", {})
        labels = meta.setdefault("labels", {})
        first_time = self.first = labels.get(wk.LABEL_REGISTERED) != "true"
        labels.update(self.labels)
        labels[wk.LABEL_REGISTERED] = "true"
        meta.setdefault("annotations", {}).update(self.annotations)
        finalizers = meta.setdefault("finalizers", [])
        if wk.FINALIZER_TERMINATION not in finalizers:
            finalizers.append(wk.FINALIZER_TERMINATION)
        owners = meta.setdefault("ownerReferences", [])
        if not any(o.get("uid") == self.owner["uid"] and o.get("kind") == "NodeClaim" for o in owners):
            owners.append(self.owner)
        spec = obj.setdefault("spec", {})
        taints = [t for t in spec.get("taints") or [] if t.get("key") != wk.TAINT_UNREGISTERED]
        if first_time:  # taints are synced once: later edits on the node are the user's
            have = {(t.get("key"), t.get("effect")) for t in taints}
            taints += [t for t in self.taints if (t.get("key"), t.get("effect")) not in have]
        spec["taints"] = taints
        return obj


def _created(first: bool, labels: Mapping[str, str]) -> dict[str, str] | None:
    """The Node this step registered for the first time (its NodePool and zone); None when it was already."""
    return {"nodepool": labels.get(wk.LABEL_NODEPOOL, ""), "zone": labels.get(wk.LABEL_ZONE, "")} if first else None


def _waiting_for(node: Node, claim: NodeClaim) -> str | None:
    """What the node still lacks to be initialized (None when it is)."""
    ready = next((c for c in (node.status.conditions or []) if c.type == "Ready"), None) if node.status else None
    if ready is None or ready.status != "True":
        return "node Ready condition"
    taints = list(node.spec.taints or ())
    startup = {(t.key, t.effect) for t in claim.spec.startup_taints or ()}
    left = [t.key for t in taints if (t.key, t.effect) in startup or t.key in wk.EPHEMERAL_TAINTS]
    if left:
        return f"taints {', '.join(sorted(set(left)))} to be removed"
    requests: Mapping[str, Any] = (claim.spec.resources.requests or {}) if claim.spec.resources else {}
    allocatable = node.status.allocatable or {} if node.status else {}
    missing = [
        name
        for name in sorted(requests)
        if name not in _BASE_RESOURCES and to_milli(str(allocatable.get(name, "0"))) <= 0
    ]
    if missing:
        return f"extended resources {', '.join(missing)} to be allocatable"
    return None


def initialize(deps: StepDeps, claim_name: str, launched_at: str | None = None) -> dict[str, Any]:
    """Mark the NodeClaim Initialized once its node is ready; ``{"initialized": bool, ...}``."""
    claim = _claim(deps, claim_name)
    node_name = claim.status.node_name if claim.status else None
    if not node_name:
        raise NodeClaimGone(f"NodeClaim {claim_name} is not registered")
    try:
        node = Node.model_validate(deps.kube.get(NODES, node_name))
    except kerr.NotFound:
        node = None
    waiting = "node object" if node is None else _waiting_for(node, claim)
    if waiting is not None:
        elapsed = _elapsed(deps, _launched_at(claim, launched_at))
        if elapsed >= deps.initialization_ttl_seconds:
            raise InitializationTimeout(
                f"NodeClaim {claim_name}: node {node_name} did not initialize within "
                f"{deps.initialization_ttl_seconds}s of the launch (waiting for {waiting})"
            )
        return {"initialized": False, "waitingFor": waiting, "elapsedSeconds": int(elapsed)}
    deps.kube.patch(NODES, node_name, {"metadata": {"labels": {wk.LABEL_INITIALIZED: "true"}}})
    _set_claim_conditions(deps, claim, [("Initialized", "True", "Initialized"), ("Ready", "True", "Ready")])
    return {"initialized": True, "node": node_name}
