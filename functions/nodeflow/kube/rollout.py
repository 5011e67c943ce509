"""Whether a Deployment has rolled out, decided as ``kubectl rollout status`` decides it, and when it has not, why:
what its pods say (not scheduled and the scheduler's message, an image that cannot be pulled, a container that
keeps failing).

``rollout_status`` and ``pod_problems`` are pure functions of the objects; ``wait_rolled_out`` polls the API server
until the Deployment is out or ``time_left`` runs out (``RolloutError`` with the pods' problems).

Must not touch: the Deployment (this only reads it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodeflow.kube.client import PODS, KubeClient, Resource
from nodeflow.kube.errors import NotFound

__all__ = ["DEPLOYMENTS", "RolloutError", "pod_problems", "rollout_status", "wait_rolled_out"]

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
_POLL_SECONDS = 1.0


class RolloutError(Exception):
    """The Deployment did not roll out in time (the message says what its pods are waiting for)."""


def rollout_status(deployment: Mapping[str, Any]) -> tuple[bool, str]:
    """(rolled out, what it is waiting for): every replica updated, no old ones left, the updated ones available."""
    meta, spec, status = deployment.get("metadata") or {}, deployment.get("spec") or {}, deployment.get("status") or {}
    if int(meta.get("generation") or 0) > int(status.get("observedGeneration") or 0):
        return False, "the new spec is not observed yet"
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Progressing" and condition.get("reason") == "ProgressDeadlineExceeded":
            return False, f"its progress deadline was exceeded ({condition.get('message') or ''})"
    wanted = int(spec.get("replicas", 1))
    updated = int(status.get("updatedReplicas") or 0)
    total = int(status.get("replicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    if updated < wanted:
        return False, f"{updated} of {wanted} replicas updated"
    if total > updated:
        return False, f"{total - updated} old replicas pending termination"
    if available < updated:
        return False, f"{available} of {updated} updated replicas available"
    return True, ""


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_problems(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per pod that is not ready, saying why."""
    problems = []
    for pod in pods:
        if _ready(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        name = (pod.get("metadata") or {}).get("name", "?")
        status = pod.get("status") or {}
        why: list[str] = []
        for c in status.get("conditions") or ():
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                why.append(f"not scheduled: {c.get('message') or c.get('reason') or ''}".rstrip())
        for cs in status.get("containerStatuses") or ():
            waiting = (cs.get("state") or {}).get("waiting")
            if waiting:
                why.append(
                    f"container {cs.get('name')}: {waiting.get('reason')} {waiting.get('message') or ''}".rstrip()
                )
            terminated = (cs.get("lastState") or {}).get("terminated")
            if terminated:
                why.append(
                    f"container {cs.get('name')} last exited {terminated.get('exitCode')} "
                    f"({terminated.get('reason') or ''})"
                )
        problems.append(f"pod {name}: " + ("; ".join(why) or f"phase {status.get('phase') or 'unknown'}, not ready"))
    return problems


def wait_rolled_out(
    kube: KubeClient,
    namespace: str,
    name: str,
    *,
    time_left: Callable[[], float],
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Poll until Deployment ``namespace/name`` has rolled out; ``RolloutError`` when ``time_left`` runs out."""
    while True:
        try:
            deployment = kube.get(DEPLOYMENTS, name, namespace)
        except NotFound:
            raise RolloutError(f"Deployment {namespace}/{name} does not exist") from None
        done, why = rollout_status(deployment)
        if done:
            return
        if time_left() <= _POLL_SECONDS:
            selector = ",".join(
                f"{k}={v}"
                for k, v in sorted(
                    ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels", {}).items()
                )
            )
            pods = kube.list_items(PODS, namespace=namespace, label_selector=selector) if selector else []
            details = pod_problems(pods) or ["no pod reports a problem"]
            raise RolloutError(f"Deployment {namespace}/{name} did not roll out ({why}): " + "; ".join(details))
        sleep(_POLL_SECONDS)
