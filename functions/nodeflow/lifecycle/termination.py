"""The terminate workflow's steps: Taint -> Drain (polled) -> Terminate -> RemoveFinalizer.

One execution per node, named after its NodeClaim. Every step reads the cluster afresh and is
idempotent: re-running any of them (a retry, a second execution after a failed one) is safe.

- **Taint**: DELETE the NodeClaim and its Node (both carry ``karpenter.sh/termination``, so they get a
  deletionTimestamp and stay; the NodeClaim's is the terminationGracePeriod clock), add the
  ``karpenter.sh/disrupted:NoSchedule`` taint and the exclude-from-external-load-balancers label.
- **Drain**: apply ``nodeflow.lifecycle.drain_plan`` (evict through the Eviction API, delete for the
  deadline), set the NodeClaim's ``Drained`` and ``VolumesDetached`` conditions and say how long the
  workflow waits before the next look. Skipped when the instance is gone already.
- **Terminate**: TerminateInstances for the NodeClaim's instance(s); done once they are shutting down (if not,
  the workflow looks again through Drain).
- **RemoveFinalizer**: drop the finalizer from the Node, then the NodeClaim: both go away.

**Bounded history, any length of drain.** Every loop of the workflow goes through Drain, and ``drain_step``
counts the passes of its execution. When an execution has run ``PASSES_PER_EXECUTION`` passes, the next Drain
step starts the next execution of the same state machine instead of draining (``nodeflow.aws.sfn.chain_name``:
``<root>_c<generation>``), with everything needed to go on (nodeClaim, reason, the Taint output, the last
drain state with its ``heldPasses``, ``workflow`` = the root, ``generation``), and returns state
``continued``: this execution ends at its Succeed state ``ContinuedAsNew``. The name is deterministic, so a
retried step never starts two. If the start fails, the step drains as usual and tries again on the next pass
(waiting at least 10, 20, ... 300 s); only after ``HAND_OVER_ATTEMPTS`` failed attempts (about 4 hours) does it
fail with ``TerminationFailed`` (the node keeps its finalizer and taint). The continuation runs Taint again
(idempotent; its events are counted, not repeated) and then drains on.

``max_history_events()`` is the most history events one terminate execution can have: 10,636 with the
defaults, against Step Functions' limit of 25,000. Counting as Step Functions does: 1 ExecutionStarted; a Task
visit is TaskStateEntered + TaskStateExited + 3 per attempt (LambdaFunctionScheduled, -Started, and
-Succeeded / -Failed / -TimedOut), at most ``TASK_ATTEMPTS`` = 10 attempts (1 + the 5 ``Transient`` and 4
``Lambda.*`` retries of statemachines/terminate.asl.json): 32; a Choice, Wait, Succeed or Fail state 2;
ExecutionSucceeded / -Failed 1. Drain runs at most ``PASSES_PER_EXECUTION + HAND_OVER_ATTEMPTS + 1`` times,
and after each pass the longest way back to Drain is Drained? -> Terminate -> Terminating? ->
WaitForTermination (38 events); so 1 + 32 (Taint) + 151 x (32 + 38) + (32 + 2 + 1 - 2) (RemoveFinalizer, the
end state and the execution's end instead of the last wait). A pass without retries is 9 events (Drain 5,
Drained? 2, WaitForDrain 2, as measured from moto's execution history): a normal execution of a held drain
stays near 100 x 9 = 900 events.

Must not touch: which pods a drain evicts or deletes, and when (``drain_plan`` decides); why a node is terminated (the
caller's reason).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import NodeClaim
from nodeflow.api.meta import Taint
from nodeflow.aws import sfn
from nodeflow.aws.ec2.instances import describe_instance_states, list_cluster_instances, terminate_instances
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import NODE_CLAIMS, NODES, PODS, PVCS, VOLUME_ATTACHMENTS, KubeClient
from nodeflow.kube.events import (
    NORMAL,
    REASON_DISRUPTION_TERMINATING,
    REASON_EVICTED,
    REASON_FAILED_DRAINING,
    WARNING,
    EventRecorder,
    ObjectRef,
)
from nodeflow.kube.status import recount_node_pool, set_node_claim_conditions
from nodeflow.kube.writes import (
    add_finalizer,
    add_taints,
    delete,
    evict,
    find_node,
    get_node_claim,
    remove_finalizer,
)
from nodeflow.lifecycle import drain_plan as plan
from nodeflow.lifecycle.errors import TerminationFailed

__all__ = [
    "CONDITION_DRAINED",
    "CONDITION_INSTANCE_TERMINATING",
    "CONDITION_VOLUMES_DETACHED",
    "DISRUPTED_TAINT",
    "FORCEFUL_REASONS",
    "HAND_OVER_ATTEMPTS",
    "PASSES_PER_EXECUTION",
    "TASK_ATTEMPTS",
    "Execution",
    "TerminationDeps",
    "drain",
    "drain_step",
    "max_history_events",
    "remove_finalizers",
    "taint",
    "terminate",
]

CONDITION_DRAINED = "Drained"
CONDITION_VOLUMES_DETACHED = "VolumesDetached"
CONDITION_INSTANCE_TERMINATING = "InstanceTerminating"
REASON_TERMINATION_GRACE_PERIOD_EXPIRING = "TerminationGracePeriodExpiring"
REASON_AWAITING_VOLUME_DETACHMENT = "AwaitingVolumeDetachment"
REASON_INSTANCE_TERMINATING = "InstanceTerminating"
DISRUPTED_TAINT = Taint(key=wk.TAINT_DISRUPTED, effect="NoSchedule")
EXCLUDE_LB_VALUE = "karpenter"  # what Karpenter sets the label to
TERMINATION_WAIT_SECONDS = 5
#: reasons whose termination is forceful (node repair, failed EC2 status checks): Taint sets the termination
#: timestamp to now (unless an earlier one is set), so Drain deletes every pod at once, PDBs notwithstanding
FORCEFUL_REASONS = frozenset({"Unhealthy", "InstanceStatusFailed", "SystemStatusFailed"})
_GONE_STATES = frozenset({"shutting-down", "terminated"})
_LISTED = 10  # pod keys listed in a step's output (the execution state stays small)

# Bounded history (see the module docstring).
PASSES_PER_EXECUTION = 100  # Drain passes before an execution hands over to the next one (also the most allowed)
HAND_OVER_ATTEMPTS = 50  # passes that try to hand over before the execution fails (~4 h with the backoff)
TASK_ATTEMPTS = 1 + 5 + 4  # a Task's first attempt + its Retry MaxAttempts ("Transient", "Lambda.*")
_TASK_EVENTS = 2 + 3 * TASK_ATTEMPTS  # TaskStateEntered/-Exited + LambdaFunctionScheduled/-Started/-<outcome>
_STATE_EVENTS = 2  # a Choice, Wait, Succeed or Fail state: entered + exited (Fail: entered + ExecutionFailed)
_LOOPING = frozenset({"draining", "detaching"})
CONTINUED = "continued"


@dataclass(frozen=True)
class TerminationDeps:
    kube: KubeClient
    ec2_client: Callable[[], Any]  # built on first use: Taint and RemoveFinalizer never call EC2
    recorder: EventRecorder
    now: Callable[[], datetime]
    cluster_name: str

    @property
    def ec2(self) -> Any:
        return self.ec2_client()


# --- reading ----------------------------------------------------------------------------------


def _claim(deps: TerminationDeps, name: str) -> NodeClaim | None:
    try:
        return get_node_claim(deps.kube, name)
    except kerr.NotFound:
        return None


def _provider_id(claim: NodeClaim | None) -> str | None:
    return claim.status.provider_id if claim is not None and claim.status else None


def _instance_id(provider_id: str | None) -> str | None:
    return provider_id.rsplit("/", 1)[-1] if provider_id and provider_id.startswith("aws://") else None


def _node(deps: TerminationDeps, claim: NodeClaim | None, name: str | None = None) -> dict[str, Any] | None:
    """The NodeClaim's Node: by status.nodeName (or ``name``) when its providerID agrees, else by providerID."""
    name = (claim.status.node_name if claim is not None and claim.status else None) or name
    return find_node(deps.kube, name, _provider_id(claim))


def _deadline(claim: NodeClaim) -> datetime | None:
    """When the drain must end: the termination-timestamp annotation, else deletionTimestamp + TGP."""
    annotated = plan.parse_time(claim.metadata.annotation(wk.ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP))
    if annotated is not None:
        return annotated
    return plan.drain_deadline(claim.metadata.deletion_timestamp, claim.spec.termination_grace_period_seconds)


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node_ref(node: Mapping[str, Any]) -> ObjectRef:
    meta = node.get("metadata") or {}
    return ObjectRef("Node", str(meta.get("name") or ""), None, meta.get("uid"))


def _pod_ref(pod: plan.DrainPod) -> ObjectRef:
    return ObjectRef("Pod", pod.name, pod.namespace, pod.uid)


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _set_conditions(deps: TerminationDeps, claim: NodeClaim, updates: Sequence[tuple[str, str, str, str]]) -> None:
    set_node_claim_conditions(deps.kube, claim, updates, now=deps.now())


def _keys(pods: Iterable[plan.DrainPod]) -> list[str]:
    return [p.key for p in pods][:_LISTED]


# --- Taint ------------------------------------------------------------------------------------


def taint(deps: TerminationDeps, claim_name: str, reason: str | None = None) -> dict[str, Any]:
    """Start the termination: delete the NodeClaim and Node (finalizers keep them), taint and label the Node."""
    why = reason or "Deleted"
    claim = _claim(deps, claim_name)
    if claim is None:
        return {"nodeClaim": claim_name, "gone": True, "node": None, "providerID": None}
    if claim.metadata.deletion_timestamp is None:
        if wk.FINALIZER_TERMINATION not in (claim.metadata.finalizers or []):
            add_finalizer(deps.kube, NODE_CLAIMS, claim_name)  # so the DELETE waits for the drain
        delete(deps.kube, NODE_CLAIMS, claim_name)
        claim = _claim(deps, claim_name)
        if claim is None:
            return {"nodeClaim": claim_name, "gone": True, "node": None, "providerID": None}
    deadline = _deadline(claim)
    now = deps.now().replace(microsecond=0)
    forced = why in FORCEFUL_REASONS and (deadline is None or deadline > now)
    if forced:  # the node is broken: no waiting for evictions or the terminationGracePeriod
        deadline = now
    if deadline is not None and (
        forced or claim.metadata.annotation(wk.ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP) is None
    ):
        deps.kube.patch(
            NODE_CLAIMS,
            claim_name,
            {"metadata": {"annotations": {wk.ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP: _stamp(deadline)}}},
        )

    node = _node(deps, claim)
    node_name = str(node["metadata"]["name"]) if node is not None else None
    if node is not None and node_name is not None:
        try:
            _taint_node(deps, node, node_name)
        except kerr.NotFound:  # the Node went away meanwhile: nothing to drain there
            node_name = None
        else:
            deps.recorder.record(_node_ref(node), NORMAL, REASON_DISRUPTION_TERMINATING, f"Disrupting Node: {why}")
    deps.recorder.record(ObjectRef.of(claim), NORMAL, REASON_DISRUPTION_TERMINATING, f"Disrupting NodeClaim: {why}")
    if deadline is not None:
        expiring = f"All pods will be deleted by {_stamp(deadline)}"
        deps.recorder.record(ObjectRef.of(claim), WARNING, REASON_TERMINATION_GRACE_PERIOD_EXPIRING, expiring)
    return {
        "nodeClaim": claim_name,
        "gone": False,
        "node": node_name,
        "providerID": _provider_id(claim),
        "reason": why,
        "deadline": _stamp(deadline) if deadline is not None else None,
    }


def _taint_node(deps: TerminationDeps, node: Mapping[str, Any], name: str) -> None:
    """Taint, label and delete the Node (its finalizer keeps it until RemoveFinalizer)."""
    add_taints(deps.kube, name, [DISRUPTED_TAINT])
    labels = node["metadata"].get("labels") or {}
    if wk.LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS not in labels:
        exclude = {wk.LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: EXCLUDE_LB_VALUE}
        deps.kube.patch(NODES, name, {"metadata": {"labels": exclude}})
    if not _deleting(node):
        if wk.FINALIZER_TERMINATION not in (node["metadata"].get("finalizers") or []):
            add_finalizer(deps.kube, NODES, name)
        delete(deps.kube, NODES, name)


# --- Drain ------------------------------------------------------------------------------------


def _instance_gone(deps: TerminationDeps, claim: NodeClaim) -> bool:
    """True when no instance of the NodeClaim is pending or running any more (or none was ever launched)."""
    iid = _instance_id(_provider_id(claim))
    if iid is not None and describe_instance_states(deps.ec2, [iid]):
        return False
    return not list_cluster_instances(deps.ec2, deps.cluster_name, node_claim=claim.name)


def _ignored_volumes(deps: TerminationDeps, pods: Iterable[plan.DrainPod]) -> set[str]:
    """PersistentVolumes used by pods that stay on the node (their attachments never go)."""
    volumes: set[str] = set()
    for pod in pods:
        for claim_name in pod.claims:
            try:
                pvc = deps.kube.get(PVCS, claim_name, pod.namespace)
            except kerr.NotFound:
                continue
            volume = (pvc.get("spec") or {}).get("volumeName")
            if volume:
                volumes.add(str(volume))
    return volumes


def drain(
    deps: TerminationDeps, claim_name: str, node_name: str | None = None, *, held_passes: int = 0
) -> dict[str, Any]:
    """One drain pass; ``{"state": "draining" | "detaching" | "done" | "gone", "waitSeconds": n, ...}``.

    ``held_passes``: how many passes in a row only do-not-disrupt pods held the drain (from the previous
    pass's ``heldPasses``); such a drain is looked at less and less often (``drain_plan.HELD_MAX_WAIT_SECONDS``).
    Steps: the pods past the deadline deleted (``_delete_overdue``), the others evicted (``_evict``), then either
    the drain goes on (``_still_draining``) or the node waits for its volumes to detach (``_drained``)."""
    claim = _claim(deps, claim_name)
    if claim is None:
        return {"state": "gone", "waitSeconds": 0}
    now = deps.now()
    if _instance_gone(deps, claim):
        gone = ("True", "InstanceTerminated", "the instance is gone: nothing to drain")
        _set_conditions(deps, claim, [(CONDITION_DRAINED, *gone), (CONDITION_VOLUMES_DETACHED, *gone)])
        return {"state": "done", "waitSeconds": 0, "instanceGone": True}

    node = _node(deps, claim, node_name)  # none (never registered, or deleted): no pods of ours to drain
    name = str(node["metadata"]["name"]) if node is not None else None
    raw_pods = deps.kube.list_items(PODS, field_selector=f"spec.nodeName={name}") if name else []
    deadline = _deadline(claim)
    decided = plan.plan_drain((plan.pod_from_manifest(p) for p in raw_pods), now, deadline)
    deleted = _delete_overdue(deps, decided, deadline or now)
    evicted, refused, codes = _evict(deps, decided)
    out: dict[str, Any] = {
        "node": name,
        "group": decided.group.label if decided.group is not None else None,
        "evicted": _keys(evicted),
        "deleted": _keys(deleted),
        "waiting": len(decided.waiting),
        "skipped": len(decided.skipped),
        # exact, for the metrics (the lists above are truncated): eviction responses by HTTP code (a pod found gone,
        # 404 or 409, is not told apart by ``evict`` and not counted)
        "evictionRequests": codes,
    }
    if not decided.done:
        return {**out, **_still_draining(deps, claim, node, decided, refused, held_passes)}
    return {**out, **_drained(deps, claim, node, decided, now, deadline)}


def _delete_overdue(deps: TerminationDeps, decided: plan.DrainPlan, deadline: datetime) -> list[plan.DrainPod]:
    """Delete the pods the termination grace period leaves no time to evict (each with the grace it has left, PDBs
    and do-not-disrupt bypassed, a Warning event on each); the pods whose deletion was accepted."""
    deleted: list[plan.DrainPod] = []
    for d in decided.delete:
        try:
            accepted = delete(
                deps.kube, PODS, d.pod.name, d.pod.namespace, grace_period_seconds=d.grace_seconds, uid=d.pod.uid
            )
        except kerr.Conflict:  # the uid precondition failed: that pod is gone already
            accepted = False
        if accepted:
            deleted.append(d.pod)
            message = (
                f"Deleting the pod to accommodate the terminationTime {_stamp(deadline)} of the node. "
                f"The pod was granted {d.grace_seconds} seconds of grace-period of its {d.pod.grace} "
                "terminationGracePeriodSeconds. This bypasses the PDB of the pod and the do-not-disrupt annotation."
            )
            deps.recorder.record(_pod_ref(d.pod), WARNING, REASON_TERMINATION_GRACE_PERIOD_EXPIRING, message)
    return deleted


def _evict(
    deps: TerminationDeps, decided: plan.DrainPlan
) -> tuple[list[plan.DrainPod], dict[str, str], dict[str, int]]:
    """Evict the pods due now: the ones evicted, the ones a PodDisruptionBudget refused (pod key -> why) and the
    eviction answers by HTTP code."""
    evicted: list[plan.DrainPod] = []
    refused: dict[str, str] = {}
    codes = {"200": 0, "429": 0}  # eviction answers by HTTP code (a pod under two budgets is refused with a 500)
    for pod in decided.evict:
        try:
            if evict(deps.kube, pod.namespace, pod.name, uid=pod.uid):
                evicted.append(pod)
                codes["200"] += 1
                deps.recorder.record(_pod_ref(pod), NORMAL, REASON_EVICTED, "Evicted pod")
        except kerr.TooManyRequests as exc:  # a PodDisruptionBudget says not now: try again next time
            refused[pod.key] = exc.message
            code = str(exc.status or 429)
            codes[code] = codes.get(code, 0) + 1
    return evicted, refused, codes


def _still_draining(
    deps: TerminationDeps,
    claim: NodeClaim,
    node: dict[str, Any] | None,
    decided: plan.DrainPlan,
    refused: Mapping[str, str],
    held_passes: int,
) -> dict[str, Any]:
    """Pods are left: Drained False with why, a FailedDraining event, and how long to wait before the next pass."""
    held = plan.held_only(decided, refused=refused)
    wait = plan.choose_wait(decided, refused=refused, held_passes=held_passes if held else 0)
    why = _draining_message(decided, refused)
    _set_conditions(deps, claim, [(CONDITION_DRAINED, "False", "Draining", why)])
    if node is not None:
        deps.recorder.record(_node_ref(node), WARNING, REASON_FAILED_DRAINING, f"Failed to drain node, {why}")
    return {
        "state": "draining",
        "waitSeconds": wait,
        "blockedByPDB": sorted(refused)[:_LISTED],
        "doNotDisrupt": _keys(decided.blocked),
        "heldPasses": held_passes + 1 if held else 0,
    }


def _drained(
    deps: TerminationDeps,
    claim: NodeClaim,
    node: dict[str, Any] | None,
    decided: plan.DrainPlan,
    now: datetime,
    deadline: datetime | None,
) -> dict[str, Any]:
    """No pods left to drain: Drained True, then done unless VolumeAttachments still hold the instance (done anyway
    once the termination grace period has elapsed)."""
    out: dict[str, Any] = {}
    drained = ("True", "Drained", "")
    was = claim.status.condition(CONDITION_DRAINED) if claim.status is not None else None
    if node is not None and (was is None or was.status != "True"):  # turns True now: counted by the metrics
        out["drainedNodePool"] = ((node.get("metadata") or {}).get("labels") or {}).get(wk.LABEL_NODEPOOL, "")
    if decided.deadline_passed:
        elapsed = ("False", "TerminationGracePeriodElapsed", "the termination grace period has elapsed")
        _set_conditions(deps, claim, [(CONDITION_DRAINED, *drained), (CONDITION_VOLUMES_DETACHED, *elapsed)])
        return {**out, "state": "done", "waitSeconds": 0, "deadlinePassed": True}
    name = str(node["metadata"]["name"]) if node is not None else None
    attachments = [
        plan.attachment_from_manifest(a)
        for a in deps.kube.list_items(VOLUME_ATTACHMENTS)
        if name and (a.get("spec") or {}).get("nodeName") == name
    ]
    ignored = _ignored_volumes(deps, decided.undrainable) if attachments else set()
    blocking = plan.blocking_attachments(attachments, name or "", ignored)
    if blocking:
        message = f"Awaiting deletion of {len(blocking)} VolumeAttachments bound to node"
        awaiting = ("False", REASON_AWAITING_VOLUME_DETACHMENT, message)
        _set_conditions(deps, claim, [(CONDITION_DRAINED, *drained), (CONDITION_VOLUMES_DETACHED, *awaiting)])
        if node is not None:
            deps.recorder.record(_node_ref(node), WARNING, REASON_AWAITING_VOLUME_DETACHMENT, message)
        return {
            **out,
            "state": "detaching",
            "waitSeconds": plan.choose_volume_wait(now, deadline),
            "volumeAttachments": [a.name for a in blocking][:_LISTED],
        }
    detached = ("True", "VolumesDetached", "")
    _set_conditions(deps, claim, [(CONDITION_DRAINED, *drained), (CONDITION_VOLUMES_DETACHED, *detached)])
    return {**out, "state": "done", "waitSeconds": 0}


# --- handing over to the next execution ------------------------------------------------------------


def max_history_events(passes_per_execution: int = PASSES_PER_EXECUTION) -> int:
    """The most history events one terminate execution can have (10,636 with the default; the module
    docstring shows the count). Step Functions fails an execution at 25,000."""
    drain_visits = passes_per_execution + HAND_OVER_ATTEMPTS + 1
    back_to_drain = _STATE_EVENTS + _TASK_EVENTS + _STATE_EVENTS + _STATE_EVENTS  # via WaitForTermination
    start = 1 + _TASK_EVENTS  # ExecutionStarted, Taint
    end = _TASK_EVENTS + _STATE_EVENTS + 1 - _STATE_EVENTS  # RemoveFinalizer, Terminated, ExecutionSucceeded
    return start + drain_visits * (_TASK_EVENTS + back_to_drain) + end


@dataclass(frozen=True, slots=True)
class Execution:
    """The terminate execution a Drain step runs in, as far as handing over to the next one needs it."""

    name: str | None = None  # $$.Execution.Name (None: an execution of an older definition, never hands over)
    state: Mapping[str, Any] = field(default_factory=dict)  # its state (nodeClaim, reason, taint, drain, ...)
    workflow: str | None = None  # the chain's first execution (None: this one)
    generation: int = 1
    passes: int = 0  # Drain passes this execution ran before this one

    @property
    def successor(self) -> str | None:
        """The name of the execution this one hands over to."""
        root = self.workflow or self.name
        return sfn.chain_name(root, self.generation + 1) if root else None


StartExecution = Callable[[str, Mapping[str, Any]], bool]  # (name, input) -> started (False: it existed)


def drain_step(
    deps: TerminationDeps,
    claim_name: str,
    node_name: str | None = None,
    *,
    held_passes: int = 0,
    execution: Execution | None = None,
    start: StartExecution | None = None,
    passes_per_execution: int = PASSES_PER_EXECUTION,
) -> dict[str, Any]:
    """The Drain step: hand over to the next execution once this one has run ``passes_per_execution`` passes
    (``{"state": "continued", "continuedAs": name, ...}``), else one ``drain`` pass (with ``passes``).

    A hand-over that fails (``start`` raised) is reported as ``handOverFailed``; the pass drains as usual and
    the next one tries again. After ``HAND_OVER_ATTEMPTS`` failures a pass that would loop again raises
    ``TerminationFailed`` instead (the execution's history must stay bounded)."""
    current = execution or Execution()
    attempt = current.passes - passes_per_execution + 1  # >= 1: this pass should hand over
    failed: str | None = None
    if current.successor is not None and start is not None and attempt >= 1:
        if attempt > HAND_OVER_ATTEMPTS:
            raise TerminationFailed(f"could not continue in execution {current.successor} after {attempt - 1} tries")
        try:
            return _hand_over(current, start, held_passes)
        except Exception as exc:  # anything: keep draining, try again next pass, fail loudly in the end
            failed = f"{type(exc).__name__}: {exc}"
    result = drain(deps, claim_name, node_name, held_passes=held_passes)
    result["passes"] = current.passes + 1
    if failed is not None:
        result["handOverFailed"] = failed[:512]
        if result["state"] in _LOOPING:
            if attempt >= HAND_OVER_ATTEMPTS:
                raise TerminationFailed(
                    f"could not continue in execution {current.successor} after {attempt} tries: {failed}"
                )
            result["waitSeconds"] = max(int(result["waitSeconds"]), plan.backoff_wait(attempt - 1))
    return result


def _hand_over(execution: Execution, start: StartExecution, held_passes: int) -> dict[str, Any]:
    """Start the next execution with the state so far (a no-op if it exists already); this one's last output."""
    successor = execution.successor
    assert successor is not None
    state = execution.state
    previous = state.get("drain")
    payload: dict[str, Any] = {
        key: state[key] for key in ("nodeClaim", "reason", "taint") if state.get(key) is not None
    }
    payload["drain"] = {**(previous if isinstance(previous, Mapping) else {}), "passes": 0}
    payload["workflow"] = execution.workflow or execution.name
    payload["generation"] = execution.generation + 1
    payload["continuedFrom"] = execution.name
    started = start(successor, payload)
    return {
        "state": CONTINUED,
        "waitSeconds": 0,
        "continuedAs": successor,
        "started": started,
        "generation": execution.generation + 1,
        "passes": execution.passes,
        "heldPasses": held_passes,
    }


def _draining_message(decided: plan.DrainPlan, refused: Mapping[str, str]) -> str:
    parts = []
    if refused:
        parts.append(f"{len(refused)} blocked by a PodDisruptionBudget")
    if decided.blocked:
        parts.append(f"{len(decided.blocked)} annotated {wk.ANNOTATION_DO_NOT_DISRUPT}")
    if decided.terminating:
        parts.append(f"{len(decided.terminating)} terminating")
    detail = f" ({', '.join(parts)})" if parts else ""
    return f"{len(decided.waiting)} pods are waiting to be evicted{detail}"


# --- Terminate --------------------------------------------------------------------------------


def terminate(deps: TerminationDeps, claim_name: str, provider_id: str | None = None) -> dict[str, Any]:
    """TerminateInstances for the NodeClaim's instance(s); ``{"terminated": bool, "instances": {id: state}}``."""
    claim = _claim(deps, claim_name)
    ids = {i for i in (_instance_id(_provider_id(claim)), _instance_id(provider_id)) if i}
    ids |= {i.instance_id for i in list_cluster_instances(deps.ec2, deps.cluster_name, node_claim=claim_name)}
    states = terminate_instances(deps.ec2, ids) if ids else {}
    done = all(state in _GONE_STATES for state in states.values())
    if claim is not None:
        listed = ", ".join(f"{i} ({s})" for i, s in sorted(states.items())) or "no instance"
        _set_conditions(deps, claim, [(CONDITION_INSTANCE_TERMINATING, "True", REASON_INSTANCE_TERMINATING, "")])
        deps.recorder.record(
            ObjectRef.of(claim), NORMAL, REASON_INSTANCE_TERMINATING, f"Terminating instance: {listed}"
        )
    return {"terminated": done, "instances": states, "waitSeconds": 0 if done else TERMINATION_WAIT_SECONDS}


# --- RemoveFinalizer --------------------------------------------------------------------------


def remove_finalizers(deps: TerminationDeps, claim_name: str, node_name: str | None = None) -> dict[str, Any]:
    """Drop ``karpenter.sh/termination`` from the Node, then the NodeClaim (deleting them if they are not yet)."""
    claim = _claim(deps, claim_name)
    node = _node(deps, claim, node_name)
    node_removed = False
    if node is not None:
        name = str(node["metadata"]["name"])
        if not _deleting(node):
            delete(deps.kube, NODES, name)
        node_removed = remove_finalizer(deps.kube, NODES, name)
    claim_removed = False
    if claim is not None:
        if claim.metadata.deletion_timestamp is None:
            delete(deps.kube, NODE_CLAIMS, claim_name)
        claim_removed = remove_finalizer(deps.kube, NODE_CLAIMS, claim_name)
    pool = (claim.metadata.labels or {}).get(wk.LABEL_NODEPOOL) if claim is not None else None
    if not pool and node is not None:
        pool = ((node.get("metadata") or {}).get("labels") or {}).get(wk.LABEL_NODEPOOL)
    recount_node_pool(deps.kube, pool or "")  # the pool's NODES column drops without waiting for gc
    return {
        "node": node["metadata"]["name"] if node is not None else None,
        "nodeFinalized": node_removed,
        "nodeClaimFinalized": claim_removed,
        "terminated": _terminated(deps.now(), claim if claim_removed else None, node if node_removed else None),
    }


def _terminated(now: datetime, claim: NodeClaim | None, node: Mapping[str, Any] | None) -> dict[str, Any]:
    """What was finalized, for the metrics: labels, seconds since its deletion (and a Node's lifetime)."""
    out: dict[str, Any] = {}
    if node is not None:
        meta = node.get("metadata") or {}
        labels, born = meta.get("labels") or {}, plan.parse_time(meta.get("creationTimestamp"))
        out["node"] = {
            "nodepool": labels.get(wk.LABEL_NODEPOOL, ""),
            "zone": labels.get(wk.LABEL_ZONE, ""),
            "terminationSeconds": _since(now, plan.parse_time(meta.get("deletionTimestamp"))),
            "lifetimeSeconds": _since(now, born) if born is not None else None,
        }
    if claim is not None:
        labels = claim.metadata.labels or {}
        began = claim.status.condition(CONDITION_INSTANCE_TERMINATING) if claim.status is not None else None
        out["nodeClaim"] = {
            "nodepool": labels.get(wk.LABEL_NODEPOOL, ""),
            "capacity_type": labels.get(wk.LABEL_CAPACITY_TYPE, ""),
            "zone": labels.get(wk.LABEL_ZONE, ""),
            "terminationSeconds": _since(now, claim.metadata.deletion_timestamp),
            "instanceTerminationSeconds": _since(now, began.last_transition_time) if began is not None else None,
        }
    return out


def _since(now: datetime, then: datetime | None) -> float:
    """Seconds from ``then`` (None: deleted just now) to ``now``, never negative."""
    return 0.0 if then is None else max(0.0, (now - then).total_seconds())
