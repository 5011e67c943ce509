"""Static NodePools (``spec.replicas``, Karpenter's alpha StaticCapacity): how many NodeClaims a pool still
needs, and which instance types they launch with. Pure: no Kubernetes or AWS calls, no clock.

A static NodePool keeps ``spec.replicas`` NodeClaims whatever the pods; the solver never opens a NodeClaim of
one for pending pods (its nodes, once there, take pods as any existing node does). Counting as Karpenter's
NodePool state does, over the pool's NodeClaims (label ``karpenter.sh/nodepool``):

- deleting: the NodeClaim or its Node has a deletion timestamp;
- pending disruption: not deleting, and its Node carries the ``karpenter.sh/disrupted`` taint (a disruption
  command is replacing it);
- active: the others, launched or not.

Provisioning (``missing``): nothing while active + pending disruption >= replicas; else ``replicas - active``,
capped by ``limits.nodes`` minus every NodeClaim of the pool (active, deleting and pending disruption). Scaling
down (active > replicas) is ``nodeflow.disruption.static``'s.

A new static NodeClaim has no pods and no requests: it may launch as any instance type the pool allows, the
cheapest first (the types cheapest first, at most 60, as the cloud provider orders a static NodeClaim's
types), GPU / accelerator and metal types left out while another type fits and no requirement has minValues
(Karpenter's launch filter for exotic types).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nodeflow.api import labels as wk
from nodeflow.api.core import Node
from nodeflow.api.karpenter import NodeClaim, NodePool
from nodeflow.api.quantity import to_milli
from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling.nodepools import make_pool
from nodeflow.scheduling.pricing import Pricer
from nodeflow.scheduling.types import NodeClaimPlan, NodePoolInput, PodInput, SchedulingInput

__all__ = [
    "MAX_STATIC_TYPES",
    "StaticCount",
    "StaticPlans",
    "is_static",
    "missing",
    "node_limit",
    "static_counts",
    "static_plan",
    "static_plans",
]

MAX_STATIC_TYPES = 60
_EXOTIC_RESOURCES = (
    wk.RESOURCE_AWS_NEURON,
    wk.RESOURCE_AWS_NEURON_CORE,
    wk.RESOURCE_AMD_GPU,
    wk.RESOURCE_NVIDIA_GPU,
    wk.RESOURCE_HABANA_GAUDI,
)


def is_static(pool: NodePool) -> bool:
    """A NodePool with ``spec.replicas`` set (0 included) is static."""
    return pool.spec.replicas is not None


def node_limit(pool: NodePool) -> int | None:
    """``spec.limits.nodes`` as a whole number of nodes (a fraction rounds up), None when unset."""
    limits = pool.spec.limits or {}
    if "nodes" not in limits:
        return None
    return math.ceil(to_milli(limits["nodes"]) / 1000)


@dataclass(frozen=True, slots=True)
class StaticCount:
    """A NodePool's NodeClaims by state (see the module docstring)."""

    active: tuple[str, ...] = ()
    deleting: tuple[str, ...] = ()
    pending_disruption: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return len(self.active) + len(self.deleting) + len(self.pending_disruption)


def static_counts(pool: str, claims: Iterable[NodeClaim], nodes: Iterable[Node]) -> StaticCount:
    """The NodeClaims of NodePool ``pool`` by state (names sorted)."""
    by_name = {n.metadata.name: n for n in nodes}
    by_provider = {n.spec.provider_id: n for n in by_name.values() if n.spec.provider_id}
    active: list[str] = []
    deleting: list[str] = []
    pending: list[str] = []
    for claim in claims:
        if (claim.metadata.labels or {}).get(wk.LABEL_NODEPOOL) != pool:
            continue
        status = claim.status
        node = None
        if status is not None:
            node = by_name.get(status.node_name) if status.node_name else None
            if node is None and status.provider_id:
                node = by_provider.get(status.provider_id)
        if claim.metadata.deletion_timestamp is not None or (
            node is not None and node.metadata.deletion_timestamp is not None
        ):
            deleting.append(claim.name)
        elif node is not None and any(t.key == wk.TAINT_DISRUPTED for t in node.spec.taints or ()):
            pending.append(claim.name)
        else:
            active.append(claim.name)
    return StaticCount(tuple(sorted(active)), tuple(sorted(deleting)), tuple(sorted(pending)))


def missing(pool: NodePool, count: StaticCount) -> int:
    """How many NodeClaims static ``pool`` should create now (0 for a dynamic pool)."""
    replicas = pool.spec.replicas
    if replicas is None:
        return 0
    active = len(count.active)
    if active + len(count.pending_disruption) >= replicas:
        return 0
    wanted = replicas - active
    limit = node_limit(pool)
    if limit is None:
        return wanted
    return max(0, min(wanted, limit - count.total))


def _exotic(it: InstanceType) -> bool:
    if "metal" in it.labels.get(wk.LABEL_INSTANCE_SIZE, ""):
        return True
    return any(it.capacity.get(r, 0) > 0 for r in _EXOTIC_RESOURCES)


def static_plan(
    pool: NodePoolInput, daemon_pods: Sequence[PodInput] = (), pricer: Pricer | None = None
) -> NodeClaimPlan | str:
    """One NodeClaim of static ``pool`` (its requirements, template labels and NodePool label; the cheapest
    types first), or why none can be made."""
    if pool.error is not None:
        return pool.error
    pricer = pricer or Pricer()
    made = make_pool(pool, SchedulingInput(pods=(), nodepools=(pool,), daemon_pods=tuple(daemon_pods)), pricer)
    types, prices = made.types, made.prices
    if not types:
        return "no instance type satisfies the NodePool's requirements (with an available offering)"
    if not made.min_values:
        generic = [(it, p) for it, p in zip(types, prices, strict=True) if not _exotic(it)]
        if generic:
            types, prices = [g[0] for g in generic], [g[1] for g in generic]
    types, prices = types[:MAX_STATIC_TYPES], prices[:MAX_STATIC_TYPES]
    reqs = made.requirements
    cheapest = pricer.cheapest(types[0], reqs)
    assert cheapest is not None  # sorted_types keeps only types with an allowed offering
    zone_req = reqs.get(wk.LABEL_ZONE)
    zone_id_req = reqs.get(wk.LABEL_ZONE_ID)
    zones = sorted(
        {
            o.zone
            for it in types
            for o in it.offerings
            if o.available
            and o.capacity_type == cheapest.capacity_type
            and (zone_req is None or zone_req.has(o.zone))
            and (zone_id_req is None or zone_id_req.has(o.zone_id))
        }
    )
    return NodeClaimPlan(
        nodepool=pool.name,
        requirements=reqs,
        instance_types=tuple(it.name for it in types),
        capacity_type=cheapest.capacity_type,
        zones=tuple(zones),
        pods=(),
        requests={},
        price=prices[0],
        static=True,
    )


@dataclass(frozen=True, slots=True)
class StaticPlans:
    """The NodeClaims static NodePools still need, and why some that are short get none (one sentence each)."""

    node_claims: tuple[NodeClaimPlan, ...] = ()
    problems: tuple[str, ...] = ()


def static_plans(
    node_pools: Sequence[NodePool],
    pool_inputs: Mapping[str, NodePoolInput],
    claims: Sequence[NodeClaim],
    nodes: Sequence[Node],
    daemon_pods: Sequence[PodInput] = (),
) -> StaticPlans:
    """The NodeClaims the static NodePools of ``node_pools`` still need (NodePools in name order)."""
    out: list[NodeClaimPlan] = []
    problems: list[str] = []
    pricer = Pricer()
    for pool in sorted(node_pools, key=lambda p: p.name):
        if not is_static(pool) or pool.metadata.deletion_timestamp is not None or pool.name not in pool_inputs:
            continue
        count = static_counts(pool.name, claims, nodes)
        n = missing(pool, count)
        short = (pool.spec.replicas or 0) - len(count.active) - len(count.pending_disruption)
        if n <= 0:
            if short > 0:
                problems.append(
                    f"static NodePool {pool.name!r}: {len(count.active)} of {pool.spec.replicas} replicas, "
                    f"limits.nodes={node_limit(pool)} reached ({count.total} NodeClaims)"
                )
            continue
        plan = static_plan(pool_inputs[pool.name], daemon_pods, pricer)
        if isinstance(plan, NodeClaimPlan):
            out.extend([plan] * n)
        else:
            problems.append(f"static NodePool {pool.name!r} needs {n} NodeClaim(s) but none can be made: {plan}")
    return StaticPlans(tuple(out), tuple(problems))
