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

NodeflowPolicies: a provisioning pause makes no top-up (the NodePool input carries the pause as its error). $/hour
ceilings of the cluster and of the NodePool, and group limits naming the NodePool, bind top-ups as they bind the
solver's NodeClaims: a top-up is planned only while it keeps each of them at or under its maximum, its types
trimmed to those priced within what is left (and, under a group limit, no larger than its cheapest type on the
limited resources), charged its cheapest type. Namespace ceilings do not apply (a new static node has no pods).
Top-ups come before the solver's NodeClaims (they are the capacity the NodePool declares, made whatever the pods):
static NodePools in name order take from what is left first, the solver gets the rest (``StaticPlans.ceilings``,
``StaticPlans.group_limits``).

Must not touch: pods (static NodeClaims are never opened for them); scale-down (``nodeflow.disruption.static``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nodeflow.api import labels as wk
from nodeflow.api.core import Node
from nodeflow.api.karpenter import NodeClaim, NodePool
from nodeflow.api.quantity import to_milli
from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling.ceilings import CeilingBudget
from nodeflow.scheduling.limits import GroupBudget, capacity
from nodeflow.scheduling.nodepools import make_pool
from nodeflow.scheduling.pricing import PRICE_EPSILON, Pricer
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.types import (
    CeilingInput,
    GroupLimitInput,
    NodeClaimPlan,
    NodePoolInput,
    PodInput,
    SchedulingInput,
)

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
    pricer = pricer or Pricer()
    options = _static_types(pool, daemon_pods, pricer)
    if isinstance(options, str):
        return options
    return _plan(pool.name, *options, pricer)


def _static_types(
    pool: NodePoolInput, daemon_pods: Sequence[PodInput], pricer: Pricer
) -> tuple[Requirements, list[InstanceType], list[float]] | str:
    """The requirements, instance types (cheapest first) and prices of a NodeClaim of static ``pool``, or why
    none can be made."""
    if pool.error is not None:
        return pool.error
    made = make_pool(pool, SchedulingInput(pods=(), nodepools=(pool,), daemon_pods=tuple(daemon_pods)), pricer)
    types, prices = made.types, made.prices
    if not types:
        return "no instance type satisfies the NodePool's requirements (with an available offering)"
    if not made.min_values:
        generic = [(it, p) for it, p in zip(types, prices, strict=True) if not _exotic(it)]
        if generic:
            types, prices = [g[0] for g in generic], [g[1] for g in generic]
    return made.requirements, types[:MAX_STATIC_TYPES], prices[:MAX_STATIC_TYPES]


def _plan(
    name: str, reqs: Requirements, types: Sequence[InstanceType], prices: Sequence[float], pricer: Pricer
) -> NodeClaimPlan:
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
        nodepool=name,
        requirements=pricer.with_capacity_types(types, reqs),
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
    """The NodeClaims static NodePools still need, and why some that are short get none (one sentence each);
    under NodeflowPolicies, the ceilings and group limits given with what the planned top-ups take counted as in
    use (what the solver may still spend)."""

    node_claims: tuple[NodeClaimPlan, ...] = ()
    problems: tuple[str, ...] = ()
    ceilings: tuple[CeilingInput, ...] = ()
    group_limits: tuple[GroupLimitInput, ...] = ()


def static_plans(
    node_pools: Sequence[NodePool],
    pool_inputs: Mapping[str, NodePoolInput],
    claims: Sequence[NodeClaim],
    nodes: Sequence[Node],
    daemon_pods: Sequence[PodInput] = (),
    ceilings: Sequence[CeilingInput] = (),
    group_limits: Sequence[GroupLimitInput] = (),
) -> StaticPlans:
    """The NodeClaims the static NodePools of ``node_pools`` still need (NodePools in name order), within the
    NodeflowPolicy ``ceilings`` (cluster and NodePool scopes) and ``group_limits`` (see the module docstring)."""
    out: list[NodeClaimPlan] = []
    problems: list[str] = []
    pricer = Pricer()
    budgets = [CeilingBudget.start(c) for c in ceilings]
    groups = [GroupBudget.start(g) for g in group_limits]
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
        options = _static_types(pool_inputs[pool.name], daemon_pods, pricer)
        if isinstance(options, str):
            problems.append(f"static NodePool {pool.name!r} needs {n} NodeClaim(s) but none can be made: {options}")
            continue
        mine = [
            b for b in budgets if b.input.scope == "cluster" or (b.input.scope, b.input.name) == ("nodePool", pool.name)
        ]
        in_groups = [g for g in groups if pool.name in g.input.nodepools]
        if not mine and not in_groups:
            out.extend([_plan(pool.name, *options, pricer)] * n)
            continue
        made = 0
        while made < n:
            plan = _governed(pool.name, *options, mine, in_groups, pricer)
            if isinstance(plan, str):
                some = f"only {made}" if made else "none"
                problems.append(f"static NodePool {pool.name!r} needs {n} NodeClaim(s) but {some} can be made: {plan}")
                break
            out.append(plan)
            made += 1
    return StaticPlans(
        tuple(out),
        tuple(problems),
        # (a ceiling or group limit no top-up took from is handed on as it came)
        tuple(
            b.input
            if b.left == b.input.max_per_hour - b.input.in_use
            else dataclasses.replace(b.input, in_use=b.in_use)
            for b in budgets
        ),
        tuple(
            dataclasses.replace(g.input, in_use={k: v - g.remaining[k] for k, v in g.input.limits.items()})
            if any(g.remaining[k] != v - g.input.in_use.get(k, 0) for k, v in g.input.limits.items())
            else g.input
            for g in groups
        ),
    )


def _governed(
    name: str,
    reqs: Requirements,
    types: Sequence[InstanceType],
    prices: Sequence[float],
    budgets: Sequence[CeilingBudget],
    groups: Sequence[GroupBudget],
    pricer: Pricer,
) -> NodeClaimPlan | str:
    """One static NodeClaim within the ceilings and group limits (charged to them), or why none fits: as the solver
    does, group limits first, then the ceilings, the reason naming the policy."""
    fitting = [
        i for i, it in enumerate(types) if all(capacity(it, k) <= v for g in groups for k, v in g.remaining.items())
    ]
    if not fitting:
        binding = next(
            (g for g in groups if not any(all(capacity(it, k) <= v for k, v in g.remaining.items()) for it in types)),
            None,
        )
        return binding.reason(types) if binding is not None else "; ".join(g.reason(types) for g in groups)
    if budgets:
        allow = min(b.left for b in budgets) + PRICE_EPSILON
        priced = [i for i in fitting if prices[i] <= allow]
        if not priced:
            return min(budgets, key=lambda b: b.left).reason(name, prices[fitting[0]])
        fitting = priced
    chosen = types[fitting[0]]
    limited = {k for g in groups for k in g.remaining}
    # Under a group limit no type larger than the chosen one on the limited resources (charged what it may launch).
    keep = [i for i in fitting if all(capacity(types[i], k) <= capacity(chosen, k) for k in limited)]
    for b in budgets:
        b.left -= prices[keep[0]]
    for g in groups:
        for k in g.remaining:
            g.remaining[k] -= capacity(chosen, k)
    return _plan(name, reqs, [types[i] for i in keep], [prices[i] for i in keep], pricer)
