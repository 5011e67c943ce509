"""Nodes and NodeClaims still launching to solver input (``NodeInput``). Pure.

Decides what a node offers and holds (``node_input``: until initialized, resources its kubelet does not report yet
are the NodeClaim's), which NodeClaim a Node belongs to and which are being deleted (``claim_index``), which Nodes a
failed launch left behind (``left_behind``: not capacity), which pods a NodeClaim was made for (``nominated_pods``)
and what a NodeClaim still launching offers pods (``claim_input``).

Must not touch: pending pods (``pods``), NodePools' instance types beyond reading them, policies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nodeflow.api import labels as wk
from nodeflow.api.core import Node, resource_milli
from nodeflow.api.karpenter import NodeClaim
from nodeflow.cluster import claim_index, left_behind, nominated_pods
from nodeflow.plan.pods import taint
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.pricing import type_matches
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.types import NodeInput, NodePoolInput, PodInput, RunningPod

__all__ = [
    "Placed",
    "claim_index",
    "claim_input",
    "initialized",
    "left_behind",
    "node_input",
    "nominated_pods",
]


@dataclass(frozen=True, slots=True)
class Placed:
    """A pod on a node (or nominated to its NodeClaim), as its node's input needs it: key and requests
    (``PodInput.requests``: ``PodSpec.effective_requests``)."""

    key: str
    requests: Mapping[str, int]


def node_input(
    node: Node,
    pods: Sequence[Placed],
    ports: Iterable[tuple[str, str, int]],
    running: tuple[RunningPod, ...],
    claim: NodeClaim | None = None,
    deleting: bool = False,
) -> NodeInput:
    """A registered node. Until it carries karpenter.sh/initialized "true" (what Karpenter's cluster state
    reads: the Node's label, not the NodeClaim's condition), a resource its kubelet reports as zero or not
    yet (e.g. GPUs before the device plugin runs) is taken from the NodeClaim, as Karpenter does."""
    labels = dict(node.metadata.labels or {})
    allocatable, capacity = node.allocatable_milli(), node.capacity_milli()
    if claim is not None and labels.get(wk.LABEL_INITIALIZED) != "true":
        status = claim.status
        if status is not None:
            allocatable = _fill_zeros(allocatable, resource_milli(status.allocatable or {}))
            capacity = _fill_zeros(capacity, resource_milli(status.capacity or {}))
    return NodeInput(
        name=node.metadata.name or "",
        labels=labels,
        allocatable=allocatable,
        capacity=capacity,
        taints=tuple(taint(t) for t in node.spec.taints or ()),
        pods=tuple(p.key for p in pods),
        requested=res.total(p.requests for p in pods),
        host_ports=frozenset(ports),
        nodepool=labels.get(wk.LABEL_NODEPOOL),
        schedulable=not node.spec.unschedulable and node.metadata.deletion_timestamp is None and not deleting,
        running=running,
        leaving=node.metadata.deletion_timestamp is not None or deleting,
    )


def _fill_zeros(reported: Mapping[str, int], expected: Mapping[str, int]) -> dict[str, int]:
    """``reported`` with the resources it lacks or has at zero taken from ``expected``."""
    out = dict(reported)
    for key, value in expected.items():
        if not out.get(key):
            out[key] = value
    return out


def initialized(claim: NodeClaim) -> bool:
    cond = claim.status.condition("Initialized") if claim.status is not None else None
    return cond is not None and cond.status == "True"


def claim_input(
    claim: NodeClaim, pools: Mapping[str, NodePoolInput], nominated: Sequence[PodInput] = ()
) -> NodeInput | None:
    """A NodeClaim still launching, as capacity pods can join (None when nothing is known of it).

    What it already holds is its ``spec.resources.requests`` (its pods and daemons, as planned),
    or else the requests of the ``nominated`` pods still pending.
    """
    reqs = Requirements(
        Requirement.create(r.key, r.operator, r.values or (), r.min_values) for r in claim.spec.requirements
    )
    labels = {**reqs.labels(), **(claim.metadata.labels or {})}
    pool_name = labels.get(wk.LABEL_NODEPOOL)
    status = claim.status
    allocatable = resource_milli(status.allocatable) if status and status.allocatable else {}
    capacity = resource_milli(status.capacity) if status and status.capacity else {}
    if not allocatable:
        pool = pools.get(pool_name or "")
        matching = [it for it in (pool.instance_types if pool else ()) if type_matches(it, reqs)]
        if not matching:
            return None
        allocatable = {k: min(it.allocatable.get(k, 0) for it in matching) for k in matching[0].allocatable}
        capacity = capacity or {k: max(it.capacity.get(k, 0) for it in matching) for k in matching[0].capacity}
    planned = claim.spec.resources.requests if claim.spec.resources is not None else None
    requested = resource_milli(planned) if planned else res.total(p.requests for p in nominated)
    return NodeInput(
        name=claim.name,
        labels=labels,
        allocatable=allocatable,
        capacity=capacity,
        taints=tuple(taint(t) for t in claim.spec.taints or ()),
        pods=tuple(p.key for p in nominated),
        requested=requested,
        host_ports=frozenset(hp for p in nominated for hp in p.host_ports),
        nodepool=pool_name,
        in_flight=True,
    )
