"""PURE: what the terminate workflow's Drain step does to a node's pods, now (Karpenter v1 semantics).

Given the node's pods, the drain deadline (the NodeClaim's deletionTimestamp + its
``spec.terminationGracePeriod``, if it has one) and ``now``, ``plan_drain`` says which pods to evict,
which to delete, which the drain still waits for and whether it is done; ``choose_wait`` picks how long
the workflow waits before looking again; ``blocking_attachments`` says which VolumeAttachments still
hold the instance. No boto3, no Kubernetes client, no clock: the caller passes ``now``.

- Skipped (never evicted, not waited for): terminal pods (Succeeded/Failed), mirror pods (owned by
  the Node, or annotated ``kubernetes.io/config.mirror``), pods that tolerate the
  ``karpenter.sh/disrupted:NoSchedule`` taint, and pods stuck terminating (deleted more than a minute
  ago: their kubelet is not coming back for them).
- The rest drain one group at a time, the next group only once the previous one is gone: ordinary
  pods, then non-critical DaemonSet pods, then critical (``system-cluster-critical`` /
  ``system-node-critical``) pods, then critical DaemonSet pods. Pods already terminating are waited
  for, not evicted again. Pods annotated ``karpenter.sh/do-not-disrupt: "true"`` are not evicted.
- With a deadline, every pod still there (do-not-disrupt and PDB-blocked ones included, any group) is
  DELETED at ``deadline - its terminationGracePeriodSeconds`` so it can use its whole grace period
  before the instance goes; past the deadline everything left is deleted and the drain is done.
  Without a deadline a do-not-disrupt pod blocks the drain for as long as it runs.
- A pass that is only held (``held_only``: PodDisruptionBudget refusals and/or do-not-disrupt pods, nothing
  evicted, deleted or terminating) waits ``backoff_wait(n)`` for the n-th such pass in a row: 10, 20, 40, ...
  up to ``HELD_MAX_WAIT_SECONDS`` (never past a pod's deletion time or the deadline). Any progress resets n.
  A drain may be held for any length of time: n is not bounded, only the arithmetic is clamped.

Must not touch: the API server (``termination`` evicts and deletes); the clock (``now`` is an input).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.duration import shift

__all__ = [
    "BLOCKED_WAIT_SECONDS",
    "CRITICAL_PRIORITY_CLASSES",
    "DEFAULT_GRACE_SECONDS",
    "HELD_MAX_WAIT_SECONDS",
    "MAX_WAIT_SECONDS",
    "MIN_WAIT_SECONDS",
    "STUCK_TERMINATING",
    "VOLUME_WAIT_SECONDS",
    "Attachment",
    "Deletion",
    "DrainPlan",
    "DrainPod",
    "Group",
    "Skip",
    "attachment_from_manifest",
    "backoff_wait",
    "blocking_attachments",
    "choose_volume_wait",
    "choose_wait",
    "drain_deadline",
    "held_only",
    "parse_time",
    "plan_drain",
    "pod_from_manifest",
    "tolerates",
]

CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
DEFAULT_GRACE_SECONDS = 30  # what the API server defaults terminationGracePeriodSeconds to
STUCK_TERMINATING = timedelta(minutes=1)  # Karpenter's IsStuckTerminating buffer
MIN_WAIT_SECONDS = 2
MAX_WAIT_SECONDS = 30
BLOCKED_WAIT_SECONDS = 10  # nothing in flight: a PodDisruptionBudget or do-not-disrupt holds the drain
# Only PodDisruptionBudgets and do-not-disrupt pods hold the drain: that can last for days, so the wait doubles
# per such pass up to this (keeps an indefinitely held node at ~300 transitions a day instead of ~26,000).
HELD_MAX_WAIT_SECONDS = 300
_BACKOFF_DOUBLINGS = 5  # BLOCKED_WAIT_SECONDS * 2**5 >= HELD_MAX_WAIT_SECONDS: more doublings change nothing
VOLUME_WAIT_SECONDS = 5  # the attach/detach controller usually detaches within seconds


class Group(IntEnum):
    """Drain order (Kubernetes' graceful node shutdown order, as Karpenter drains)."""

    ORDINARY = 0
    DAEMONSET = 1
    CRITICAL = 2
    CRITICAL_DAEMONSET = 3

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


class Skip(StrEnum):
    """Why a pod is not drained."""

    TERMINAL = "terminal"
    MIRROR = "mirror"
    TOLERATES_DISRUPTED = "tolerates-disrupted"
    STUCK_TERMINATING = "stuck-terminating"


@dataclass(frozen=True, slots=True)
class DrainPod:
    """What the drain needs to know about one pod."""

    namespace: str
    name: str
    uid: str | None = None
    phase: str | None = None
    owner_kinds: tuple[str, ...] = ()
    mirror_annotation: bool = False
    do_not_disrupt: bool = False
    priority_class_name: str | None = None
    tolerates_disrupted: bool = False
    deletion_timestamp: datetime | None = None
    grace_seconds: int | None = None  # spec.terminationGracePeriodSeconds
    claims: tuple[str, ...] = ()  # PersistentVolumeClaim names its volumes use

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def grace(self) -> int:
        return DEFAULT_GRACE_SECONDS if self.grace_seconds is None else max(0, self.grace_seconds)

    @property
    def is_terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def is_mirror(self) -> bool:
        return self.mirror_annotation or "Node" in self.owner_kinds

    @property
    def is_daemon(self) -> bool:
        return "DaemonSet" in self.owner_kinds

    @property
    def is_critical(self) -> bool:
        return self.priority_class_name in CRITICAL_PRIORITY_CLASSES

    @property
    def is_terminating(self) -> bool:
        return self.deletion_timestamp is not None

    @property
    def group(self) -> Group:
        if self.is_critical:
            return Group.CRITICAL_DAEMONSET if self.is_daemon else Group.CRITICAL
        return Group.DAEMONSET if self.is_daemon else Group.ORDINARY

    def skip_reason(self, now: datetime) -> Skip | None:
        """Why the drain leaves this pod alone (None: it is drained)."""
        if self.is_terminal:
            return Skip.TERMINAL
        return self.undrainable_reason(now)

    def undrainable_reason(self, now: datetime) -> Skip | None:
        """Karpenter's ``!IsDrainable``: the pod will not leave through a drain (its volumes stay attached)."""
        if self.is_mirror:
            return Skip.MIRROR
        if self.tolerates_disrupted:
            return Skip.TOLERATES_DISRUPTED
        if self.deletion_timestamp is not None and now - self.deletion_timestamp > STUCK_TERMINATING:
            return Skip.STUCK_TERMINATING
        return None


@dataclass(frozen=True, slots=True)
class Deletion:
    """A pod deleted (not evicted) for the drain deadline, with the grace period it is given."""

    pod: DrainPod
    grace_seconds: int


@dataclass(frozen=True, slots=True)
class DrainPlan:
    now: datetime
    deadline: datetime | None
    group: Group | None  # the group being drained (None: nothing left to wait for)
    evict: tuple[DrainPod, ...]  # evict now (the current group's evictable pods)
    delete: tuple[Deletion, ...]  # delete now, for the deadline (any group)
    waiting: tuple[DrainPod, ...]  # every pod the drain still waits for (all groups)
    blocked: tuple[DrainPod, ...]  # do-not-disrupt pods of the current group, neither evicted nor deleted
    skipped: tuple[tuple[DrainPod, Skip], ...]

    @property
    def deadline_passed(self) -> bool:
        return self.deadline is not None and self.now >= self.deadline

    @property
    def done(self) -> bool:
        """Nothing left to wait for, or the deadline has passed (what is left was deleted)."""
        return not self.waiting or self.deadline_passed

    @property
    def terminating(self) -> tuple[DrainPod, ...]:
        """Waited-for pods that are already on their way out."""
        return tuple(p for p in self.waiting if p.is_terminating)

    @property
    def undrainable(self) -> tuple[DrainPod, ...]:
        """Skipped pods that will stay on the node (their volumes do not block the termination)."""
        return tuple(p for p, why in self.skipped if why is not Skip.TERMINAL)


def drain_deadline(deleted_at: datetime | None, termination_grace_seconds: float | None) -> datetime | None:
    """deletionTimestamp + terminationGracePeriod (None unless both are known)."""
    if deleted_at is None or termination_grace_seconds is None:
        return None
    return shift(deleted_at, termination_grace_seconds)


def plan_drain(pods: Iterable[DrainPod], now: datetime, deadline: datetime | None = None) -> DrainPlan:
    """What to do to the node's pods at ``now``."""
    skipped: list[tuple[DrainPod, Skip]] = []
    waiting: list[DrainPod] = []
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        why = pod.skip_reason(now)
        if why is None:
            waiting.append(pod)
        else:
            skipped.append((pod, why))

    deletions: list[Deletion] = []
    if deadline is not None:
        left = max(0, math.floor((deadline - now).total_seconds()))
        for pod in waiting:
            if pod.is_terminating:
                continue
            if now >= shift(deadline, -pod.grace):
                deletions.append(Deletion(pod, min(pod.grace, left)))
    deleted = {d.pod.key for d in deletions}

    group = min((p.group for p in waiting), default=None)
    evict: list[DrainPod] = []
    blocked: list[DrainPod] = []
    if group is not None and not (deadline is not None and now >= deadline):
        for pod in waiting:
            if pod.group != group or pod.is_terminating or pod.key in deleted:
                continue
            (blocked if pod.do_not_disrupt else evict).append(pod)
    return DrainPlan(
        now=now,
        deadline=deadline,
        group=group,
        evict=tuple(evict),
        delete=tuple(deletions),
        waiting=tuple(waiting),
        blocked=tuple(blocked),
        skipped=tuple(skipped),
    )


def _clamp(seconds: float) -> int:
    return int(max(MIN_WAIT_SECONDS, min(MAX_WAIT_SECONDS, math.ceil(seconds))))


def _until(later: datetime, now: datetime) -> float:
    return (later - now).total_seconds()


def held_only(plan: DrainPlan, *, refused: Collection[str] = ()) -> bool:
    """The pass made no progress and only PodDisruptionBudgets (``refused``: the pod keys whose eviction got a
    429) and/or do-not-disrupt pods hold the drain: every eviction was refused, nothing was deleted, nothing is
    terminating. A deadline does not matter here (``choose_wait`` never waits past it)."""
    if plan.done or not (plan.blocked or refused):
        return False
    if plan.delete or plan.terminating:
        return False
    return all(p.key in refused for p in plan.evict)


def backoff_wait(held_passes: int) -> int:
    """The wait after the ``held_passes``-th held pass in a row (0 for the first): 10, 20, 40, ... up to
    ``HELD_MAX_WAIT_SECONDS``. Any non-negative count is fine (only the exponent is clamped)."""
    doublings = min(max(0, held_passes), _BACKOFF_DOUBLINGS)
    return int(min(HELD_MAX_WAIT_SECONDS, BLOCKED_WAIT_SECONDS * 2**doublings))


def _not_past_deadline(plan: DrainPlan, wait: float) -> float:
    """``wait`` cut at the next pod's deletion time and the deadline (when there is one)."""
    if plan.deadline is None:
        return wait
    deleted = {d.pod.key for d in plan.delete}
    upcoming = [shift(plan.deadline, -p.grace) for p in plan.waiting if not p.is_terminating and p.key not in deleted]
    upcoming.append(plan.deadline)
    return min(wait, min(_until(t, plan.now) for t in upcoming))


def choose_wait(plan: DrainPlan, *, refused: Collection[str] = (), held_passes: int = 0) -> int:
    """Seconds to wait before the next Drain call (0 when the drain is done).

    A pass that is ``held_only`` waits ``backoff_wait(held_passes)`` (``held_passes``: the held passes in a
    row before this one). Otherwise pods evicted or deleted now, and pods already terminating, are given until
    the longest of their grace periods; evictions ``refused`` (pod keys a PodDisruptionBudget blocked) and
    do-not-disrupt pods are looked at again after ``BLOCKED_WAIT_SECONDS``. With a deadline, never past the
    next pod's deletion time or the deadline. Bounded to [MIN_WAIT_SECONDS, MAX_WAIT_SECONDS], or to
    [MIN_WAIT_SECONDS, HELD_MAX_WAIT_SECONDS] when held.
    """
    if plan.done:
        return 0
    if held_only(plan, refused=refused):
        held = _not_past_deadline(plan, float(backoff_wait(held_passes)))
        return int(max(MIN_WAIT_SECONDS, min(HELD_MAX_WAIT_SECONDS, math.ceil(held))))
    now = plan.now
    in_flight = [float(p.grace) for p in plan.evict if p.key not in refused]
    in_flight += [float(d.grace_seconds) for d in plan.delete]
    in_flight += [
        max(0.0, _until(p.deletion_timestamp, now)) for p in plan.terminating if p.deletion_timestamp is not None
    ]
    held = bool(plan.blocked) or any(p.key in refused for p in plan.evict)
    wait = max(in_flight) if in_flight else float(BLOCKED_WAIT_SECONDS)
    if held:
        wait = min(wait, float(BLOCKED_WAIT_SECONDS))
    return _clamp(_not_past_deadline(plan, wait))


def choose_volume_wait(now: datetime, deadline: datetime | None) -> int:
    """Seconds to wait for VolumeAttachments to go (never past the deadline)."""
    wait = float(VOLUME_WAIT_SECONDS)
    if deadline is not None:
        wait = min(wait, _until(deadline, now))
    return _clamp(wait)


# --- volume attachments ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attachment:
    """A storage.k8s.io/v1 VolumeAttachment."""

    name: str
    node_name: str | None
    volume: str | None  # spec.source.persistentVolumeName (None: an inline volume)


def blocking_attachments(
    attachments: Iterable[Attachment], node_name: str, ignored_volumes: Collection[str] = ()
) -> tuple[Attachment, ...]:
    """The node's attachments the termination waits for: persistent volumes not used by undrainable pods."""
    return tuple(
        a
        for a in sorted(attachments, key=lambda a: a.name)
        if a.node_name == node_name and a.volume is not None and a.volume not in ignored_volumes
    )


# --- parsing manifests (JSON as the API server returns it) -------------------------------------


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp ("2025-01-02T15:04:05Z") as an aware datetime (None if absent or malformed)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def tolerates(tolerations: Sequence[Mapping[str, Any]], key: str, effect: str, value: str = "") -> bool:
    """True when one of ``tolerations`` (core/v1 JSON) tolerates the taint key=value:effect."""
    for t in tolerations:
        t_effect = t.get("effect") or ""
        if t_effect and t_effect != effect:
            continue
        t_key = t.get("key") or ""
        operator = t.get("operator") or "Equal"
        if not t_key:
            if operator == "Exists":
                return True
            continue
        if t_key != key:
            continue
        if operator == "Exists" or (t.get("value") or "") == value:
            return True
    return False


def _as_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _as_list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def pod_from_manifest(obj: Mapping[str, Any]) -> DrainPod:
    """A ``DrainPod`` from a core/v1 Pod as JSON (lenient: missing fields take their defaults)."""
    meta = _as_mapping(obj.get("metadata"))
    spec = _as_mapping(obj.get("spec"))
    status = _as_mapping(obj.get("status"))
    annotations = _as_mapping(meta.get("annotations"))
    owners = tuple(str(_as_mapping(o).get("kind") or "") for o in _as_list(meta.get("ownerReferences")))
    claims: list[str] = []
    for volume in _as_list(spec.get("volumes")):
        v = _as_mapping(volume)
        pvc = _as_mapping(v.get("persistentVolumeClaim"))
        if pvc.get("claimName"):
            claims.append(str(pvc["claimName"]))
        elif v.get("ephemeral") is not None and v.get("name"):
            claims.append(f"{meta.get('name') or ''}-{v['name']}")
    grace = spec.get("terminationGracePeriodSeconds")
    tolerations = [_as_mapping(t) for t in _as_list(spec.get("tolerations"))]
    return DrainPod(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta["uid"]) if meta.get("uid") else None,
        phase=str(status["phase"]) if status.get("phase") else None,
        owner_kinds=owners,
        mirror_annotation=wk.ANNOTATION_MIRROR_POD in annotations,
        do_not_disrupt=annotations.get(wk.ANNOTATION_DO_NOT_DISRUPT) == "true",
        priority_class_name=str(spec["priorityClassName"]) if spec.get("priorityClassName") else None,
        tolerates_disrupted=tolerates(tolerations, wk.TAINT_DISRUPTED, "NoSchedule"),
        deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
        grace_seconds=int(grace) if isinstance(grace, int) and not isinstance(grace, bool) else None,
        claims=tuple(claims),
    )


def attachment_from_manifest(obj: Mapping[str, Any]) -> Attachment:
    """An ``Attachment`` from a storage.k8s.io/v1 VolumeAttachment as JSON."""
    spec = _as_mapping(obj.get("spec"))
    source = _as_mapping(spec.get("source"))
    volume = source.get("persistentVolumeName")
    node = spec.get("nodeName")
    return Attachment(
        name=str(_as_mapping(obj.get("metadata")).get("name") or ""),
        node_name=str(node) if node else None,
        volume=str(volume) if volume else None,
    )
