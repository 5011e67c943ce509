"""What a pod's annotations, owners and PodDisruptionBudgets say about moving it (Karpenter's pod and PDB
utilities), shared by the provisioning plan and the disruption decisions. Pure: the caller gives the time.

Must not touch: where pods go or which nodes are disrupted (their deciders); the clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from nodeflow.api import labels as wk
from nodeflow.api.core import Pod, PodDisruptionBudget
from nodeflow.api.duration import parse_duration, shift

_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def eviction_cost(pod: Pod) -> float:
    """Karpenter's EvictionCost: 1 + pod-deletion-cost / 2^27 + priority / 2^25, clamped to [-10, 10]."""
    cost = 1.0
    raw = (pod.metadata.annotations or {}).get(_DELETION_COST)
    if raw is not None:
        with contextlib.suppress(ValueError):
            cost += int(raw) / 2.0**27
    cost += (pod.spec.priority or 0) / 2.0**25
    return max(-10.0, min(10.0, cost))


def is_daemon_or_mirror(pod: Pod) -> bool:
    """Owned by a DaemonSet or a Node (a static pod's mirror), or annotated as a mirror pod."""
    owners = {o.kind for o in pod.metadata.owner_references or ()}
    return bool(owners & {"DaemonSet", "Node"}) or wk.ANNOTATION_MIRROR_POD in (pod.metadata.annotations or {})


def do_not_disrupt_active(
    annotations: Mapping[str, str] | None, started: datetime | None, now: datetime | None
) -> str | None:
    """The do-not-disrupt value if it protects at ``now``: ``"true"``, or a positive Go duration not yet elapsed
    since ``started`` (unknown start, or no ``now``: it protects, to be safe); any other value (invalid, zero,
    negative) protects nothing. None when it does not protect."""
    value = (annotations or {}).get(wk.ANNOTATION_DO_NOT_DISRUPT)
    if value is None:
        return None
    if value == "true":
        return value
    try:
        seconds = parse_duration(value)
    except ValueError:
        return None
    if seconds is None or seconds <= 0:
        return None
    if started is None or now is None:
        return value
    since = started if started.tzinfo is not None else started.replace(tzinfo=UTC)
    return value if shift(since, seconds) > now else None


def fully_blocking_pdbs(pod: Pod, pdbs: Sequence[PodDisruptionBudget]) -> bool:
    """Would PodDisruptionBudgets never let ``pod`` be evicted (Karpenter's fully blocking PDBs): two PDBs select
    it, or one whose spec allows no disruption at all (maxUnavailable 0 or "0%", minAvailable "100%") -- unless
    the pod is not Ready and that PDB's unhealthyPodEvictionPolicy is AlwaysAllow."""
    matching = [
        p
        for p in pdbs
        if (p.metadata.namespace or "default") == pod.namespace
        and p.spec.selector is not None
        and p.spec.selector.matches(pod.labels)
    ]
    if len(matching) > 1:
        return True
    ready = pod.status.condition("Ready") if pod.status is not None else None
    unhealthy = ready is not None and ready.status == "False"
    for pdb in matching:
        if unhealthy and pdb.spec.unhealthy_pod_eviction_policy == "AlwaysAllow":
            return False
        if pdb.spec.max_unavailable in (0, "0%") or pdb.spec.min_available == "100%":
            return True
    return False
