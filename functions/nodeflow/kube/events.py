"""core/v1 Events on pods, nodes, NodeClaims and NodePools, with Karpenter's reasons.

Like client-go's EventRecorder, a repeat of the same (involvedObject, type, reason,
message) increments ``count`` and ``lastTimestamp`` of one Event instead of adding
another. The Event's name is derived from that key, so the deduplication also holds
across Lambda invocations (and concurrent ones: the increment is a read-modify-write
with resourceVersion).

Must not touch: when an Event is due (the steps decide); only how it is written and deduplicated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from nodeflow.api.core import Node, Pod
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.kube.client import EVENTS, KubeClient
from nodeflow.kube.errors import AlreadyExists, Conflict, NotFound, retry_conflict

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "NORMAL",
    "REASON_DISRUPTION_BLOCKED",
    "REASON_DISRUPTION_LAUNCHING",
    "REASON_DISRUPTION_TERMINATING",
    "REASON_DISRUPTION_WAITING_READINESS",
    "REASON_EVICTED",
    "REASON_FAILED_DRAINING",
    "REASON_FAILED_SCHEDULING",
    "REASON_INSUFFICIENT_CAPACITY",
    "REASON_NODECLASS_NOT_READY",
    "REASON_NOMINATED",
    "REASON_VALIDATION_FAILED",
    "WARNING",
    "EventRecorder",
    "ObjectRef",
]

EventType = Literal["Normal", "Warning"]
NORMAL: EventType = "Normal"
WARNING: EventType = "Warning"

# Karpenter's event reasons (pkg/events and the controllers that emit them).
REASON_NOMINATED = "Nominated"
REASON_FAILED_SCHEDULING = "FailedScheduling"
REASON_DISRUPTION_BLOCKED = "DisruptionBlocked"
REASON_DISRUPTION_LAUNCHING = "DisruptionLaunching"
REASON_DISRUPTION_WAITING_READINESS = "DisruptionWaitingReadiness"
REASON_DISRUPTION_TERMINATING = "DisruptionTerminating"
REASON_EVICTED = "Evicted"
REASON_FAILED_DRAINING = "FailedDraining"
REASON_INSUFFICIENT_CAPACITY = "InsufficientCapacityError"
REASON_NODECLASS_NOT_READY = "NodeClassNotReady"
REASON_VALIDATION_FAILED = "ValidationFailed"

MAX_MESSAGE = 1024


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The involvedObject of an Event."""

    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None
    api_version: str = "v1"

    @staticmethod
    def of(obj: Pod | Node | NodeClaim | NodePool | EC2NodeClass) -> ObjectRef:
        meta = obj.metadata
        namespace = (meta.namespace or "default") if isinstance(obj, Pod) else None
        return ObjectRef(obj.kind, meta.name or "", namespace, meta.uid, obj.api_version)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "apiVersion": self.api_version}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Records deduplicated core/v1 Events (``source.component`` = ``component``)."""

    def __init__(
        self,
        client: KubeClient | ApiClient,
        *,
        component: str = "karpenter",
        host: str | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.client = KubeClient.of(client)
        self.component = component
        self.host = host
        self.clock = clock
        self._seen: dict[tuple[str, str], tuple[int, str]] = {}  # (namespace, name) -> (count, resourceVersion)

    def event_name(self, ref: ObjectRef, event_type: str, reason: str, message: str) -> str:
        key = "\x00".join((ref.kind, ref.namespace or "", ref.name, ref.uid or "", event_type, reason, message))
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return f"{ref.name[:200]}.{digest}"

    def record(self, ref: ObjectRef, event_type: EventType, reason: str, message: str) -> dict[str, Any]:
        """Create the Event, or bump the count of the same one. Returns the Event as stored."""
        message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        namespace = ref.namespace or "default"
        name = self.event_name(ref, event_type, reason, message)
        now = _stamp(self.clock())
        cached = self._seen.get((namespace, name))
        if cached is not None:
            count, version = cached
            patch = {"count": count + 1, "lastTimestamp": now, "metadata": {"resourceVersion": version}}
            try:
                return self._remember(self.client.patch(EVENTS, name, patch, namespace=namespace))
            except (Conflict, NotFound):
                pass
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref.as_dict(),
            "type": event_type,
            "reason": reason,
            "message": message,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
        }
        try:
            return self._remember(self.client.create(EVENTS, body, namespace=namespace))
        except AlreadyExists:
            pass

        def bump() -> dict[str, Any]:
            current = self.client.get(EVENTS, name, namespace)
            patch = {
                "count": int(current.get("count") or 1) + 1,
                "lastTimestamp": now,
                "metadata": {"resourceVersion": (current.get("metadata") or {}).get("resourceVersion")},
            }
            return self.client.patch(EVENTS, name, patch, namespace=namespace)

        return self._remember(retry_conflict(bump))

    def _remember(self, event: dict[str, Any]) -> dict[str, Any]:
        meta = event.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        self._seen[key] = (int(event.get("count") or 1), str(meta.get("resourceVersion") or ""))
        return event

    # --- Karpenter's events ---------------------------------------------------------------

    def nominated(self, pod: Pod, node_claim: str, node: str | None = None) -> dict[str, Any]:
        """Pod: Normal Nominated "Pod should schedule on: nodeclaim/<name>" (or "node/<n>, nodeclaim/<c>")."""
        target = f"node/{node}, nodeclaim/{node_claim}" if node else f"nodeclaim/{node_claim}"
        return self.record(ObjectRef.of(pod), NORMAL, REASON_NOMINATED, f"Pod should schedule on: {target}")

    def failed_scheduling(self, pod: Pod, why: str) -> dict[str, Any]:
        """Pod: Warning FailedScheduling "Failed to schedule pod, <the solver's reason>"."""
        return self.record(ObjectRef.of(pod), WARNING, REASON_FAILED_SCHEDULING, f"Failed to schedule pod, {why}")

    def disruption_blocked(self, obj: Node | NodeClaim | NodePool | Pod, why: str) -> dict[str, Any]:
        """Normal DisruptionBlocked with the blocking reason."""
        return self.record(ObjectRef.of(obj), NORMAL, REASON_DISRUPTION_BLOCKED, why)

    def evicted(self, pod: Pod, why: str = "") -> dict[str, Any]:
        message = f"Evicted pod: {why}" if why else "Evicted pod"
        return self.record(ObjectRef.of(pod), NORMAL, REASON_EVICTED, message)

    def failed_draining(self, node: Node, why: str) -> dict[str, Any]:
        return self.record(ObjectRef.of(node), WARNING, REASON_FAILED_DRAINING, f"Failed to drain node, {why}")

    def insufficient_capacity(self, claim: NodeClaim, why: str) -> dict[str, Any]:
        message = f"NodeClaim {claim.name} event: {why}"
        return self.record(ObjectRef.of(claim), WARNING, REASON_INSUFFICIENT_CAPACITY, message)

    def validation_failed(self, pool: NodePool | ObjectRef, lines: list[str]) -> dict[str, Any]:
        """NodePool: Warning ValidationFailed naming the fields (``format_validation_error`` lines)."""
        ref = pool if isinstance(pool, ObjectRef) else ObjectRef.of(pool)
        return self.record(ref, WARNING, REASON_VALIDATION_FAILED, "; ".join(lines))
