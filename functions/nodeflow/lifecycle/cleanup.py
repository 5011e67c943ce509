"""The CleanUp step (the launch workflow's Catch) and garbage collection.

CleanUp makes sure no instance outlives a failed NodeClaim: it terminates every instance of the
NodeClaim, records an event saying why, deletes the Node (if one registered) and the NodeClaim,
and asks for the NodeClaim's pods to be provisioned again.

Garbage collection (scheduled) terminates instances tagged for the cluster that no NodeClaim
accounts for, once older than a grace period, and deletes NodeClaims whose instance is gone.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import NodeClaim
from nodeflow.aws import ec2 as ec2x
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import NODE_CLAIMS, NODES, KubeClient
from nodeflow.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from nodeflow.kube.writes import delete, get_node_claim, remove_finalizer
from nodeflow.plan import nominated_pods

__all__ = ["CleanupDeps", "cleanup", "collect_garbage", "failure_reason"]

# Error name -> (event reason, what happened).
_REASONS: Mapping[str, tuple[str, str]] = {
    "NoCapacity": ("InsufficientCapacityError", "no offering the NodeClaim allows had capacity"),
    "RegistrationTimeout": ("RegistrationTimeout", "the node did not register in time"),
    "InitializationTimeout": ("InitializationTimeout", "the node did not become ready in time"),
    "NodeClassNotReady": ("NodeClassNotReady", "its EC2NodeClass is not ready"),
    "NodeClaimGone": ("NodeClaimDeleted", "the NodeClaim was deleted"),
    "States.Timeout": ("LaunchTimeout", "the launch timed out"),
}


@dataclass(frozen=True)
class CleanupDeps:
    kube: KubeClient
    ec2: Any
    recorder: EventRecorder
    now: Callable[[], datetime]
    cluster_name: str
    requeue: Callable[[Mapping[str, Any]], None] | None = None  # puts a message on the provisioning queue


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
    ids |= {
        info.instance_id for info in ec2x.list_cluster_instances(deps.ec2, deps.cluster_name, node_claim=claim_name)
    }
    states = ec2x.terminate_instances(deps.ec2, ids) if ids else {}
    reason, message = failure_reason(error)
    deleted = False
    if claim is not None:
        terminated = f"; terminated {', '.join(sorted(states))}" if states else ""
        deps.recorder.record(ObjectRef.of(claim), WARNING, reason, f"NodeClaim {claim_name}: {message}{terminated}")
        node_name = claim.status.node_name if claim.status else None
        if node_name:
            _delete_with_finalizer(deps.kube, NODES, node_name)
        deleted = _delete_with_finalizer(deps.kube, NODE_CLAIMS, claim_name)
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
    return {"nodeClaim": claim_name, "reason": reason, "terminated": sorted(states), "nodeClaimDeleted": deleted}


def collect_garbage(deps: CleanupDeps, grace_seconds: int = 30) -> dict[str, Any]:
    """Terminate unaccounted instances older than ``grace_seconds``; delete NodeClaims whose instance is gone."""
    now = deps.now()
    claims = [NodeClaim.model_validate(o) for o in deps.kube.list_items(NODE_CLAIMS)]
    names = {c.name for c in claims}
    by_instance = {iid: c for c in claims if (iid := _instance_id(c.status.provider_id if c.status else None))}

    orphans = [
        info.instance_id
        for info in ec2x.list_cluster_instances(deps.ec2, deps.cluster_name)
        if info.instance_id not in by_instance
        and info.tags.get(ec2x.TAG_NODECLAIM) not in names
        and (info.launch_time is None or (now - info.launch_time).total_seconds() >= grace_seconds)
    ]
    terminated = ec2x.terminate_instances(deps.ec2, orphans) if orphans else {}

    def launched_long_ago(c: NodeClaim) -> bool:
        cond = c.status.condition("Launched") if c.status else None
        since = cond.last_transition_time if cond is not None and cond.last_transition_time else None
        since = since or c.metadata.creation_timestamp
        return since is None or (now - since).total_seconds() >= grace_seconds

    candidates = {iid: c for iid, c in by_instance.items() if launched_long_ago(c)}
    live = ec2x.describe_instance_states(deps.ec2, candidates) if candidates else {}
    deleted = []
    for iid, claim in sorted(candidates.items()):
        if iid in live:
            continue
        deps.recorder.record(
            ObjectRef.of(claim), NORMAL, "InstanceGone", f"NodeClaim {claim.name}: instance {iid} no longer exists"
        )
        node_name = claim.status.node_name if claim.status else None
        if node_name:
            _delete_with_finalizer(deps.kube, NODES, node_name)
        if _delete_with_finalizer(deps.kube, NODE_CLAIMS, claim.name):
            deleted.append(claim.name)
    return {"terminatedInstances": sorted(terminated), "deletedNodeClaims": deleted}
