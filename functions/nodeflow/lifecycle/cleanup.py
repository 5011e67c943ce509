"""The CleanUp step (the launch workflow's Catch) and garbage collection.

CleanUp makes sure no instance outlives a failed NodeClaim: it terminates every instance of the
NodeClaim, records an event saying why, deletes the Node (if one registered; found by name or, when
``status.nodeName`` was never written, by providerID) and the NodeClaim, and asks for the NodeClaim's
pods to be provisioned again.

Garbage collection (scheduled) finishes whatever a fault left half done, from one snapshot of NodePools,
EC2NodeClasses, NodeClaims and Nodes:

- status: every EC2NodeClass is resolved again and every NodePool's conditions written
  (``nodeflow.lifecycle.nodeclass.reconcile_status``), so a class recovers (or fails) without an edit;
- failed launches: a NodeClaim not initialized whose launch execution ended without success (its CleanUp
  failed or crashed), or that has no execution and outlived the liveness TTL, is cleaned up as CleanUp
  would (instance terminated, Node and NodeClaim deleted, pods provisioned again);
- leaked instances: an instance tagged for the cluster is owned only by the NodeClaim whose providerID
  names it (or, while that NodeClaim has no providerID yet, by the NodeClaim its tag names); any other is
  terminated once older than the grace period;
- NodeClaims whose instance is gone are deleted with their Node;
- Nodes left behind: a Node of a NodePool (``karpenter.sh/nodepool``) that no NodeClaim names (by
  ``status.nodeName`` or providerID) and whose instance is gone is deleted;
- stale nominations: each NodeClaim's ``nodeflow.io/nominated-pods`` annotation is pruned of the pods that are gone,
  finished or bound to a node that stays (``lifecycle/nominations.py``; the pods are listed only when a NodeClaim
  carries nominations);
- while a Karpenter controller runs, none of the above (``lifecycle/karpenter_guard.py``): garbage collection does
  nothing, its result says why;
- launch templates: the EC2NodeClass finalizer, the templates of a deleted class, and those no live instance was
  launched from past a grace period (``lifecycle/launch_template_gc.py``).

Must not touch: launch templates (``launch_template_gc``); what a launch or termination does (their steps).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from nodeflow.api import labels as wk
from nodeflow.api.core import Node
from nodeflow.api.karpenter import NodeClaim
from nodeflow.aws.ec2.instances import (
    InstanceInfo,
    describe_instance_states,
    list_cluster_instances,
    terminate_instances,
)
from nodeflow.aws.ec2.tags import TAG_NODECLAIM
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import NODE_CLAIMS, NODES, KubeClient
from nodeflow.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from nodeflow.kube.reports import Reports
from nodeflow.kube.writes import delete, find_node, get_node_claim, remove_finalizer

if TYPE_CHECKING:  # the CleanUp step does not load the snapshot, the planner or EC2NodeClass resolution
    from nodeflow.lifecycle.karpenter_guard import Pause
    from nodeflow.lifecycle.nodeclass import NodeClassResolver

__all__ = ["CleanupDeps", "cleanup", "collect_garbage", "failure_reason"]

# Error name -> (event reason, what happened).
_REASONS: Mapping[str, tuple[str, str]] = {
    "NoCapacity": ("InsufficientCapacityError", "no offering the NodeClaim allows had capacity"),
    "RegistrationTimeout": ("RegistrationTimeout", "the node did not register in time"),
    "InitializationTimeout": ("InitializationTimeout", "the node did not become ready in time"),
    "NodeClassNotReady": ("NodeClassNotReady", "its EC2NodeClass is not ready"),
    "NodeClaimGone": ("NodeClaimDeleted", "the NodeClaim was deleted"),
    "States.Timeout": ("LaunchTimeout", "the launch timed out"),
    "LaunchAbandoned": ("LaunchFailed", "its launch workflow ended without a node and without cleaning up"),
    "LivenessTimeout": ("LivenessTimeout", "it was not initialized within its time to live"),
}
_LAUNCH_FAILED = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})
# What garbage collection returns when it does nothing (the launch templates' keys: ``collect_launch_templates``).
_NOTHING_DONE: Mapping[str, Any] = {
    "deletedLaunchTemplates": [],
    "finalizedNodeClasses": [],
    "terminatedInstances": [],
    "deletedNodeClaims": [],
    "abandonedNodeClaims": [],
    "deletedNodes": [],
    "disrupted": [],
    "nominationsPruned": [],
    "reportErrors": 0,
}
LAUNCH_CHECKS_PER_RUN = 200  # DescribeExecution calls per run, oldest NodeClaims first (Step Functions quotas)


@dataclass(frozen=True)
class CleanupDeps:
    kube: KubeClient
    ec2: Any
    recorder: EventRecorder
    now: Callable[[], datetime]
    cluster_name: str
    requeue: Callable[[Mapping[str, Any]], None] | None = None  # puts a message on the provisioning queue
    launch_status: Callable[[str], str | None] | None = None  # NodeClaim -> its launch execution's status
    resolver: NodeClassResolver | None = None  # EC2NodeClass status (garbage collection)
    liveness_seconds: int = 2100  # a NodeClaim not initialized this long after creation is cleaned up
    log: Callable[[str, dict[str, Any]], None] = lambda _message, _extra: None
    # Garbage collection holds still while a Karpenter controller runs (``karpenter_guard``; None: never asked). The
    # CleanUp step of nodeflow's own failed launch does not ask.
    karpenter: Callable[[], Pause | None] | None = None


def failure_reason(error: Mapping[str, Any] | None) -> tuple[str, str]:
    """(event reason, message) for the workflow error caught (``{"Error": ..., "Cause": ...}``)."""
    name = str((error or {}).get("Error") or "LaunchFailed")
    cause = str((error or {}).get("Cause") or "")
    with contextlib.suppress(ValueError, AttributeError):  # a Lambda error's Cause is its JSON payload
        cause = str(json.loads(cause).get("errorMessage", cause))
    reason, what = _REASONS.get(name, ("LaunchFailed", f"launch failed ({name})"))
    return reason, f"{what}: {cause}" if cause else what


def _get_claim(kube: KubeClient, name: str) -> NodeClaim | None:
    try:
        return get_node_claim(kube, name)
    except kerr.NotFound:
        return None


def _provider_id(claim: NodeClaim | None) -> str | None:
    return claim.status.provider_id if claim is not None and claim.status is not None else None


def _instance_id(provider_id: str | None) -> str | None:
    return provider_id.rsplit("/", 1)[-1] if provider_id and provider_id.startswith("aws://") else None


def _delete_with_finalizer(kube: KubeClient, resource: Any, name: str) -> bool:
    """Delete ``name`` and drop our termination finalizer (we are the terminator here)."""
    accepted = delete(kube, resource, name)
    remove_finalizer(kube, resource, name, wk.FINALIZER_TERMINATION)
    return accepted


def cleanup(
    deps: CleanupDeps,
    claim_name: str,
    error: Mapping[str, Any] | None = None,
    instance_id: str | None = None,
) -> dict[str, Any]:
    """Terminate the NodeClaim's instances, delete its Node and itself, requeue its pods."""
    claim = _get_claim(deps.kube, claim_name)
    ids = {i for i in (instance_id, _instance_id(claim.status.provider_id if claim and claim.status else None)) if i}
    ids |= {info.instance_id for info in list_cluster_instances(deps.ec2, deps.cluster_name, node_claim=claim_name)}
    states = terminate_instances(deps.ec2, ids) if ids else {}
    reason, message = failure_reason(error)
    deleted = False
    if claim is not None:
        terminated = f"; terminated {', '.join(sorted(states))}" if states else ""
        deps.recorder.record(ObjectRef.of(claim), WARNING, reason, f"NodeClaim {claim_name}: {message}{terminated}")
        node = find_node(deps.kube, claim.status.node_name if claim.status else None, _provider_id(claim))
        if node is not None:
            _delete_with_finalizer(deps.kube, NODES, str(node["metadata"]["name"]))
        deleted = _delete_with_finalizer(deps.kube, NODE_CLAIMS, claim_name)
        from nodeflow.cluster import nominated_pods

        pods = nominated_pods(claim)
        if pods and deps.requeue is not None:
            deps.requeue(
                {
                    "id": str(uuid.uuid4()),
                    "source": "nodeflow",
                    "detail-type": "NodeClaim Deleted",
                    "detail": {"nodeClaim": claim_name, "reason": reason, "pods": list(pods)},
                }
            )
    labels = dict(claim.metadata.labels or {}) if claim is not None and deleted else None  # for the metrics
    return {
        "nodeClaim": claim_name,
        "reason": reason,
        "terminated": sorted(states),
        "nodeClaimDeleted": deleted,
        "labels": labels,
    }


def _initialized(claim: NodeClaim) -> bool:
    cond = claim.status.condition("Initialized") if claim.status is not None else None
    return cond is not None and cond.status == "True"


def _age(now: datetime, since: datetime | None) -> float:
    return float("inf") if since is None else (now - since).total_seconds()


def _abandoned(deps: CleanupDeps, claims: Sequence[NodeClaim], now: datetime, grace: int) -> list[tuple[str, str]]:
    """(NodeClaim, error name) of NodeClaims whose launch ended without a node and without cleaning up."""
    waiting = sorted(
        (c for c in claims if not _initialized(c) and _age(now, c.metadata.creation_timestamp) >= grace),
        key=lambda c: (c.metadata.creation_timestamp is not None, c.metadata.creation_timestamp, c.name),
    )
    out: list[tuple[str, str]] = []
    for claim in waiting[:LAUNCH_CHECKS_PER_RUN] if deps.launch_status is not None else ():
        assert deps.launch_status is not None
        status = deps.launch_status(claim.name)
        if status in _LAUNCH_FAILED:
            out.append((claim.name, "LaunchAbandoned"))
        elif status is None and _age(now, claim.metadata.creation_timestamp) >= deps.liveness_seconds:
            out.append((claim.name, "LivenessTimeout"))
    return out


def collect_garbage(deps: CleanupDeps, grace_seconds: int = 30) -> dict[str, Any]:
    """Finish what faults left half done (see the module docstring); returns what was done.

    Steps, in this order: EC2NodeClass status, abandoned launches cleaned up (``_clean_abandoned``), instances no
    NodeClaim owns terminated (``_terminate_orphans``), NodeClaims whose instance is gone deleted
    (``_delete_gone_claims``), stale nominations pruned, Nodes left by gone instances deleted (``_delete_ghosts``),
    launch templates collected."""
    from nodeflow.kube.snapshot import take_snapshot
    from nodeflow.lifecycle.nodeclass import reconcile_status

    if deps.karpenter is not None and (pause := deps.karpenter()) is not None:
        return {**_NOTHING_DONE, "karpenterRunning": pause.to_json()}
    now = deps.now()
    reports = Reports(deps.log)  # each object's status, Event and deletion on its own: a refusal is logged, counted
    snap = take_snapshot(deps.kube, kinds=("node_pools", "node_classes", "node_claims", "nodes"))
    snap = reconcile_status(
        deps.kube, deps.recorder, snap, now, resolver=deps.resolver, only_unknown=False, log=deps.log, reports=reports
    )
    cleaned = _clean_abandoned(deps, list(snap.node_claims), now, grace_seconds)
    claims = [c for c in snap.node_claims if c.name not in set(cleaned)]
    by_instance = {iid: c for c in claims if (iid := _instance_id(_provider_id(c)))}
    instances = list_cluster_instances(deps.ec2, deps.cluster_name)
    terminated = _terminate_orphans(deps, claims, by_instance, instances, now, grace_seconds)

    def launched_long_ago(c: NodeClaim) -> bool:
        cond = c.status.condition("Launched") if c.status else None
        since = cond.last_transition_time if cond is not None and cond.last_transition_time else None
        return _age(now, since or c.metadata.creation_timestamp) >= grace_seconds

    candidates = {iid: c for iid, c in by_instance.items() if launched_long_ago(c)}
    ghosts = [
        (iid, n)
        for n in snap.nodes
        if (iid := _instance_id(n.spec.provider_id)) and _ghost_candidate(n, claims, now, grace_seconds)
    ]
    asked = {*candidates, *(iid for iid, _ in ghosts)}
    live = describe_instance_states(deps.ec2, asked) if asked else {}
    deleted, disrupted = _delete_gone_claims(deps, candidates, live, reports)

    # Nodes left behind by a failed or terminated launch: no NodeClaim names them and their instance is gone.
    pruned = _prune_nominations(deps, [c for c in claims if c.name not in set(deleted)], snap.nodes, reports)
    nodes_deleted = _delete_ghosts(deps, ghosts, live, reports)

    # Launch templates nothing uses any more, and those of deleted EC2NodeClasses (with the classes' finalizer).
    from nodeflow.lifecycle.launch_template_gc import LaunchTemplateDeps, collect_launch_templates

    templates = LaunchTemplateDeps(deps.kube, deps.ec2, deps.recorder, deps.cluster_name, deps.log)
    swept = collect_launch_templates(templates, snap.node_classes, snap.node_claims, instances, now, reports)
    return {
        **swept,
        "terminatedInstances": sorted(terminated),
        "deletedNodeClaims": deleted,
        "abandonedNodeClaims": cleaned,
        "deletedNodes": nodes_deleted,
        "disrupted": disrupted,
        "nominationsPruned": sorted(pruned),
        "reportErrors": reports.failed,
    }


def _clean_abandoned(deps: CleanupDeps, claims: Sequence[NodeClaim], now: datetime, grace: int) -> list[str]:
    """A launch that failed and whose CleanUp failed too (or crashed): clean up as CleanUp would have. The
    NodeClaims cleaned up (one the API server refused now is tried again next run)."""
    cleaned: list[str] = []
    for name, error in _abandoned(deps, claims, now, grace):
        why = {"Error": error, "Cause": ""}
        try:
            cleanup(deps, name, why)
        except kerr.KubeError as exc:  # the next run tries again
            deps.log("abandoned NodeClaim not cleaned up", {"nodeClaim": name, "error": f"{type(exc).__name__}: {exc}"})
            continue
        cleaned.append(name)
    return cleaned


def _terminate_orphans(
    deps: CleanupDeps,
    claims: Sequence[NodeClaim],
    by_instance: Mapping[str, NodeClaim],
    instances: Sequence[InstanceInfo],
    now: datetime,
    grace: int,
) -> dict[str, str]:
    """Terminate the cluster's instances older than ``grace`` seconds that no NodeClaim owns: none points to it, and
    the NodeClaim its tag names (if any) points to another instance already. Their states after TerminateInstances."""
    names = {c.name: c for c in claims}

    def owned(info: InstanceInfo) -> bool:
        if info.instance_id in by_instance:
            return True
        claim = names.get(info.tags.get(TAG_NODECLAIM, ""))
        # The NodeClaim its tag names owns it only while that NodeClaim points to no instance yet (launching).
        return claim is not None and _provider_id(claim) is None

    orphans = [info.instance_id for info in instances if not owned(info) and _age(now, info.launch_time) >= grace]
    return terminate_instances(deps.ec2, orphans) if orphans else {}


def _delete_gone_claims(
    deps: CleanupDeps, candidates: Mapping[str, NodeClaim], live: Mapping[str, Any], reports: Reports
) -> tuple[list[str], list[dict[str, str]]]:
    """Delete (with their Node) the NodeClaims among ``candidates`` (instance id -> NodeClaim) whose instance is not
    ``live``: the NodeClaims deleted, and their labels (for the metrics)."""
    deleted: list[str] = []
    disrupted: list[dict[str, str]] = []
    for iid, claim in sorted(candidates.items()):
        if iid in live:
            continue
        name = f"NodeClaim/{claim.name}"
        gone = f"NodeClaim {claim.name}: instance {iid} no longer exists"
        reports.run(
            "NodeClaim event", name, partial(deps.recorder.record, ObjectRef.of(claim), NORMAL, "InstanceGone", gone)
        )
        if reports.run("NodeClaim deletion", name, partial(_delete_claim_and_node, deps.kube, claim)):
            deleted.append(claim.name)
            disrupted.append(dict(claim.metadata.labels or {}))
    return deleted, disrupted


def _delete_ghosts(
    deps: CleanupDeps, ghosts: Sequence[tuple[str, Node]], live: Mapping[str, Any], reports: Reports
) -> list[str]:
    """Delete the Nodes (instance id, Node) no NodeClaim names whose instance is gone; the Nodes deleted."""
    nodes_deleted: list[str] = []
    for iid, ghost in ghosts:
        if iid in live:
            continue  # a running instance without a NodeClaim is a leak: terminated above, the Node next time
        name = ghost.metadata.name or ""
        if (
            reports.run("Node deletion", f"Node/{name}", partial(_delete_with_finalizer, deps.kube, NODES, name))
            is not None
        ):
            nodes_deleted.append(name)
    return nodes_deleted


def _prune_nominations(
    deps: CleanupDeps, claims: Sequence[NodeClaim], nodes: Sequence[Node], reports: Reports
) -> dict[str, tuple[str, ...]]:
    """Stale nominations pruned (``lifecycle/nominations.py``); the pods are listed (after the NodeClaims) only when
    a NodeClaim carries nominations."""
    from nodeflow.cluster import nominated_pods
    from nodeflow.kube.snapshot import take_snapshot
    from nodeflow.lifecycle.nominations import prune_nominations

    if not any(nominated_pods(c) and c.metadata.deletion_timestamp is None for c in claims):
        return {}
    listed = take_snapshot(deps.kube, kinds=("pods",))
    unreadable = {f"{o.namespace or 'default'}/{o.name}" for o in listed.invalid_of("Pod")}
    return prune_nominations(deps.kube, claims, nodes, listed.pods, unreadable=unreadable, reports=reports)


def _delete_claim_and_node(kube: KubeClient, claim: NodeClaim) -> bool:
    """Delete a NodeClaim whose instance is gone, and its Node first; True when the NodeClaim's delete was taken."""
    found = find_node(kube, claim.status.node_name if claim.status else None, _provider_id(claim))
    if found is not None:
        _delete_with_finalizer(kube, NODES, str(found["metadata"]["name"]))
    return _delete_with_finalizer(kube, NODE_CLAIMS, claim.name)


def _ghost_candidate(node: Node, claims: Sequence[NodeClaim], now: datetime, grace: int) -> bool:
    """A Node of a NodePool that no NodeClaim names (by status.nodeName or providerID), older than ``grace``."""
    if wk.LABEL_NODEPOOL not in (node.metadata.labels or {}) or _age(now, node.metadata.creation_timestamp) < grace:
        return False
    name, provider = node.metadata.name, node.spec.provider_id
    return not any(
        c.status is not None and (c.status.node_name == name or (provider and c.status.provider_id == provider))
        for c in claims
    )
