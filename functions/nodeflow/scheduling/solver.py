"""The solver: pending pods in, NodeClaims to launch and placements out. Pure.

The shape follows Karpenter's scheduler: pods are tried, largest first, on existing nodes
(and NodeClaims still launching), then on NodeClaims opened earlier in this solve, then
on a new NodeClaim from the highest-weight NodePool that can take them. Three things are
different, for speed and cost:

* Identical pods (same requests, constraints and tolerations — e.g. a Deployment's
  replicas) are placed as a group: "how many of these fit here" is one division per
  resource, not one trial per pod.
* A new NodeClaim is sized for cost: among the instance types that fit, the one with
  the lowest price per pod of the group being placed decides how many pods it takes
  (so three small pods get one right-sized node, a thousand get efficient large ones).
* Later pods fill the room left on open NodeClaims only while that does not push the
  NodeClaim onto a pricier instance type; otherwise they open a NodeClaim of their own.

Every NodeClaim keeps all instance types that still fit its pods, cheapest first, so the
launcher can fall back when capacity is short.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nodeflow.api import labels as wk
from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.taints import Taint, Toleration, untolerated
from nodeflow.scheduling.types import (
    ExistingPlacement,
    HostPort,
    NodeClaimPlan,
    NodeInput,
    NodePoolInput,
    PodInput,
    SchedulingInput,
    SchedulingResult,
    UnschedulablePod,
)

__all__ = ["NO_NODEPOOL", "solve"]

NO_NODEPOOL = "-"
# Well-known labels a new node gets from its instance type and offering: a pod may ask
# for them even when the NodePool does not mention them.
ALLOW_UNDEFINED = wk.WELL_KNOWN_LABELS | {wk.LABEL_ZONE, wk.LABEL_REGION, wk.LABEL_CAPACITY_TYPE}
# Labels that come from the offering (zone, capacity type), not from the instance type.
_OFFERING_KEYS = frozenset({wk.LABEL_ZONE, wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE_ID})
# Instance-type labels: a type that lacks one (e.g. no GPU) acts as DoesNotExist for it.
_TYPE_KEYS = wk.WELL_KNOWN_LABELS - _OFFERING_KEYS - {wk.LABEL_NODEPOOL, wk.LABEL_REGION}
# Taints a node carries only while it starts; not held against pods for nodes in flight.
_EPHEMERAL_TAINTS = frozenset(
    {
        wk.TAINT_UNREGISTERED,
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
    }
)
_PRICE_EPSILON = 1e-9


# --- offerings and instance-type filtering ------------------------------------------------------


class _Pricer:
    """Cheapest available offering of a type under a NodeClaim's zone/capacity-type limits."""

    def __init__(self) -> None:
        self._cache: dict[
            tuple[str, Requirement | None, Requirement | None, Requirement | None], Offering | None
        ] = {}

    def cheapest(self, it: InstanceType, reqs: Requirements) -> Offering | None:
        zone = reqs.get(wk.LABEL_ZONE)
        ctype = reqs.get(wk.LABEL_CAPACITY_TYPE)
        zone_id = reqs.get(wk.LABEL_ZONE_ID)
        key = (it.name, zone, ctype, zone_id)
        try:
            return self._cache[key]
        except KeyError:
            pass
        best: Offering | None = None
        for offering in it.offerings:
            if not offering.available:
                continue
            if zone is not None and not zone.has(offering.zone):
                continue
            if ctype is not None and not ctype.has(offering.capacity_type):
                continue
            if zone_id is not None and not zone_id.has(offering.zone_id):
                continue
            if best is None or _offering_rank(offering) < _offering_rank(best):
                best = offering
        self._cache[key] = best
        return best

    def price(self, it: InstanceType, reqs: Requirements) -> float:
        offering = self.cheapest(it, reqs)
        return float("inf") if offering is None else offering.price


def _offering_rank(o: Offering) -> tuple[float, int, str]:
    # Cheapest first; on a tie prefer spot (Karpenter prefers spot when both are allowed).
    return (o.price, 0 if o.capacity_type == wk.CAPACITY_TYPE_SPOT else 1, o.zone)


def type_matches(it: InstanceType, reqs: Requirements) -> bool:
    """Do an instance type's labels satisfy the requirements (offerings checked separately)?"""
    type_labels = it.labels
    for key, req in reqs.items():
        value = type_labels.get(key)
        if value is not None:
            if not req.has(value):
                return False
        elif key in _TYPE_KEYS and not req.allows_absent():
            return False
    return True


# --- mutable solve state ------------------------------------------------------------------------


@dataclass(slots=True)
class _Group:
    pods: list[PodInput]
    requests: Mapping[str, int]
    requirements: tuple[Requirements, ...]
    tolerations: tuple[Toleration, ...]
    host_ports: frozenset[HostPort]

    @property
    def first(self) -> PodInput:
        return self.pods[0]


@dataclass(slots=True)
class _Pool:
    input: NodePoolInput
    requirements: Requirements
    daemon: dict[str, int]
    types: list[InstanceType]  # compatible with the pool's requirements, cheapest first
    remaining: dict[str, int] | None  # limits minus what the pool runs


@dataclass(slots=True)
class _Node:
    input: NodeInput
    requirements: Requirements
    taints: tuple[Taint, ...]
    used: dict[str, int]
    ports: set[HostPort]
    placed: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Claim:
    pool: _Pool
    requirements: Requirements
    types: list[InstanceType]
    used: dict[str, int]
    price: float
    pods: list[str] = field(default_factory=list)
    ports: set[HostPort] = field(default_factory=set)


class _Solver:
    def __init__(self, inp: SchedulingInput) -> None:
        self.pricer = _Pricer()
        self.pools = [
            self._make_pool(p, inp) for p in sorted(inp.nodepools, key=lambda p: (-p.weight, p.name))
        ]
        self.nodes = [self._make_node(n, inp) for n in sorted(inp.nodes, key=lambda n: (n.in_flight, n.name))]
        self.claims: list[_Claim] = []
        self.unschedulable: list[UnschedulablePod] = []

    # -- setup ---------------------------------------------------------------------------------
    def _make_pool(self, np: NodePoolInput, inp: SchedulingInput) -> _Pool:
        reqs = np.requirements.add(
            Requirements.from_labels(np.labels),
            Requirements([Requirement(wk.LABEL_NODEPOOL, False, frozenset({np.name}))]),
        )
        if wk.LABEL_CAPACITY_TYPE not in reqs:
            # Karpenter launches on-demand unless the NodePool allows spot explicitly.
            reqs = reqs.add(
                Requirements(
                    [Requirement(wk.LABEL_CAPACITY_TYPE, False, frozenset({wk.CAPACITY_TYPE_ON_DEMAND}))]
                )
            )
        daemon: dict[str, int] = {}
        for dpod in inp.daemon_pods:
            if untolerated(dpod.tolerations, np.taints) is not None:
                continue
            if any(reqs.compatible(alt, ALLOW_UNDEFINED) is None for alt in dpod.requirements):
                daemon = res.add(daemon, dpod.requests)
        types = [it for it in np.instance_types if type_matches(it, reqs) and self.pricer.cheapest(it, reqs)]
        types.sort(key=lambda it: (self.pricer.price(it, reqs), it.name))
        remaining: dict[str, int] | None = None
        if np.limits is not None:
            in_use = res.total(n.capacity or n.allocatable for n in inp.nodes if n.nodepool == np.name)
            remaining = {k: v - in_use.get(k, 0) for k, v in np.limits.items()}
        return _Pool(np, reqs, daemon, types, remaining)

    def _make_node(self, node: NodeInput, inp: SchedulingInput) -> _Node:
        initializing = node.in_flight or (
            node.nodepool is not None and node.labels.get(wk.LABEL_INITIALIZED) != "true"
        )
        taints = node.taints
        if initializing:
            startup = {t.key for p in inp.nodepools if p.name == node.nodepool for t in p.startup_taints}
            taints = tuple(t for t in taints if t.key not in _EPHEMERAL_TAINTS and t.key not in startup)
        return _Node(
            node, Requirements.from_labels(node.labels), taints, dict(node.requested), set(node.host_ports)
        )

    # -- placing -------------------------------------------------------------------------------
    def run(self, pods: Sequence[PodInput]) -> SchedulingResult:
        for group in _group(pods):
            remaining = [p.key for p in group.pods]
            remaining = self._on_nodes(group, remaining)
            if remaining:
                remaining = self._on_claims(group, remaining)
            while remaining:
                placed = self._new_claim(group, remaining)
                if placed is None:
                    break
                remaining = remaining[placed:]
        return self._result()

    def _on_nodes(self, group: _Group, pending: list[str]) -> list[str]:
        for node in self.nodes:
            if not pending:
                break
            if not node.input.schedulable:
                continue
            if untolerated(group.first.tolerations, node.taints) is not None:
                continue
            if not any(node.requirements.compatible(alt) is None for alt in group.requirements):
                continue
            count = res.max_count(group.requests, node.input.allocatable, node.used)
            if group.host_ports:
                count = min(count, 0 if group.host_ports & node.ports else 1)
            take = min(count, len(pending))
            if take <= 0:
                continue
            node.used = res.add(node.used, group.requests, take)
            node.ports |= group.host_ports
            node.placed.extend(pending[:take])
            pending = pending[take:]
        return pending

    def _on_claims(self, group: _Group, pending: list[str]) -> list[str]:
        for claim in self.claims:
            if not pending:
                break
            if group.host_ports and group.host_ports & claim.ports:
                continue
            if untolerated(group.first.tolerations, claim.pool.input.taints) is not None:
                continue
            for alt in group.requirements:
                if claim.requirements.compatible(alt, ALLOW_UNDEFINED) is not None:
                    continue
                take = self._add_to_claim(claim, group, alt, len(pending))
                if take:
                    claim.pods.extend(pending[:take])
                    pending = pending[take:]
                    break
        return pending

    def _add_to_claim(self, claim: _Claim, group: _Group, alt: Requirements, count: int) -> int:
        """Add up to ``count`` pods of the group without making the NodeClaim pricier."""
        reqs = claim.requirements.add(alt) if len(alt) else claim.requirements
        types = claim.types
        if reqs != claim.requirements:
            types = [it for it in types if type_matches(it, reqs) and self.pricer.cheapest(it, reqs)]
        limit = 1 if group.host_ports else count
        caps: list[int] = []
        best = 0
        for it in types:
            cap = min(res.max_count(group.requests, it.allocatable, claim.used), limit)
            caps.append(cap)
            if cap > best and self.pricer.price(it, reqs) <= claim.price + _PRICE_EPSILON:
                best = cap
        take = min(best, count)
        if take <= 0:
            return 0
        claim.types = [it for it, cap in zip(types, caps, strict=True) if cap >= take]
        claim.requirements = reqs
        claim.used = res.add(claim.used, group.requests, take)
        claim.ports |= group.host_ports
        claim.price = min(self.pricer.price(it, reqs) for it in claim.types)
        return take

    def _new_claim(self, group: _Group, pending: list[str]) -> int | None:
        """Open a NodeClaim for the group's pending pods; the number placed, or None."""
        reasons: dict[str, list[str]] = {}
        for alt_index, alt in enumerate(group.requirements):
            for pool in self.pools:
                outcome = self._try_pool(pool, group, alt, len(pending))
                if not isinstance(outcome, str):
                    claim, take = outcome
                    claim.pods.extend(pending[:take])
                    self.claims.append(claim)
                    return take
                prefix = f"node affinity term {alt_index + 1}: " if len(group.requirements) > 1 else ""
                reasons.setdefault(pool.input.name, []).append(prefix + outcome)
        merged = {name: "; ".join(parts) for name, parts in reasons.items()}
        if not merged:
            merged = {NO_NODEPOOL: "no NodePool is defined"}
        for key in pending:
            self.unschedulable.append(UnschedulablePod(key, merged))
        return None

    def _try_pool(
        self, pool: _Pool, group: _Group, alt: Requirements, count: int
    ) -> tuple[_Claim, int] | str:
        if pool.input.error:
            return pool.input.error
        taint = untolerated(group.first.tolerations, pool.input.taints)
        if taint is not None:
            return f"did not tolerate taint {taint}"
        conflict = pool.requirements.compatible(alt, ALLOW_UNDEFINED)
        if conflict is not None:
            return f"incompatible requirements: {conflict}"
        reqs = pool.requirements.add(alt) if len(alt) else pool.requirements
        types = pool.types
        if reqs is not pool.requirements:
            types = [it for it in types if type_matches(it, reqs) and self.pricer.cheapest(it, reqs)]
        if not types:
            return "no instance type satisfies the requirements" + _describe_offering_reqs(reqs)
        needed = res.add(pool.daemon, group.requests)
        fitting = [it for it in types if res.fits(needed, it.allocatable)]
        if not fitting:
            largest = max(
                types, key=lambda it: (it.allocatable.get("cpu", 0), it.allocatable.get("memory", 0))
            )
            short = res.first_shortfall(needed, largest.allocatable) or "cpu"
            return (
                f"no instance type has enough {short}: needs {format_milli(needed.get(short, 0), short)} "
                f"(pod {format_milli(group.requests.get(short, 0), short)} + daemonsets "
                f"{format_milli(pool.daemon.get(short, 0), short)}), largest candidate {largest.name} has "
                f"{format_milli(largest.allocatable.get(short, 0), short)} allocatable"
            )
        if pool.remaining is not None:
            remaining = pool.remaining
            within = [it for it in fitting if all(it.capacity.get(k, 0) <= v for k, v in remaining.items())]
            if not within:
                smallest = min(
                    fitting, key=lambda it: tuple(it.capacity.get(k, 0) for k in sorted(remaining))
                )
                name = next(k for k in sorted(remaining) if smallest.capacity.get(k, 0) > remaining[k])
                limit = pool.input.limits[name] if pool.input.limits else 0
                return (
                    f"exceeds NodePool limit {name}={format_milli(limit, name)}: "
                    f"{format_milli(max(remaining[name], 0), name)} remaining, the smallest fitting "
                    f"instance type {smallest.name} has {format_milli(smallest.capacity.get(name, 0), name)}"
                )
            fitting = within
        # Size the NodeClaim by the lowest price per pod for this group.
        limit = 1 if group.host_ports else count
        caps = [min(res.max_count(group.requests, it.allocatable, pool.daemon), limit) for it in fitting]
        best_index = min(
            range(len(fitting)),
            key=lambda i: (self.pricer.price(fitting[i], reqs) / caps[i], -caps[i], fitting[i].name),
        )
        take = caps[best_index]
        chosen = [it for it, cap in zip(fitting, caps, strict=True) if cap >= take]
        if pool.remaining is not None:
            for name in pool.remaining:
                pool.remaining[name] -= max(it.capacity.get(name, 0) for it in chosen)
        claim = _Claim(
            pool=pool,
            requirements=reqs,
            types=chosen,
            used=res.add(pool.daemon, group.requests, take),
            price=min(self.pricer.price(it, reqs) for it in chosen),
            ports=set(group.host_ports),
        )
        return claim, take

    # -- output --------------------------------------------------------------------------------
    def _result(self) -> SchedulingResult:
        plans = tuple(self._plan(c) for c in self.claims)
        existing = tuple(
            ExistingPlacement(n.input.name, tuple(n.placed), n.input.in_flight)
            for n in self.nodes
            if n.placed
        )
        return SchedulingResult(plans, existing, tuple(self.unschedulable))

    def _plan(self, claim: _Claim) -> NodeClaimPlan:
        reqs = claim.requirements
        priced = sorted(
            ((self.pricer.cheapest(it, reqs), it) for it in claim.types),
            key=lambda pair: (pair[0].price if pair[0] else float("inf"), pair[1].name),
        )
        cheapest = priced[0][0]
        assert cheapest is not None  # types without an allowed offering were filtered out
        zone_req = reqs.get(wk.LABEL_ZONE)
        zones = sorted(
            {
                o.zone
                for _, it in priced
                for o in it.offerings
                if o.available
                and o.capacity_type == cheapest.capacity_type
                and (zone_req is None or zone_req.has(o.zone))
            }
        )
        return NodeClaimPlan(
            nodepool=claim.pool.input.name,
            requirements=reqs,
            instance_types=tuple(it.name for _, it in priced),
            capacity_type=cheapest.capacity_type,
            zones=tuple(zones),
            pods=tuple(claim.pods),
            requests=dict(sorted(claim.used.items())),
            price=cheapest.price,
        )


def _describe_offering_reqs(reqs: Requirements) -> str:
    keys = [k for k in sorted(reqs) if k in _TYPE_KEYS or k in _OFFERING_KEYS]
    if not keys:
        return ""
    return " (" + ", ".join(f"{k} {reqs[k].describe()}" for k in keys) + ")"


def _group(pods: Sequence[PodInput]) -> list[_Group]:
    """Identical pods grouped; groups ordered largest first (cpu, then memory), then by key."""
    groups: dict[tuple[object, ...], _Group] = {}
    for pod in pods:
        signature = (
            tuple(sorted(pod.requests.items())),
            pod.requirements,
            pod.tolerations,
            pod.host_ports,
        )
        group = groups.get(signature)
        if group is None:
            groups[signature] = _Group([pod], pod.requests, pod.requirements, pod.tolerations, pod.host_ports)
        else:
            group.pods.append(pod)
    ordered = list(groups.values())
    for group in ordered:
        group.pods.sort(key=lambda p: p.key)
    ordered.sort(key=lambda g: (-g.requests.get("cpu", 0), -g.requests.get("memory", 0), g.first.key))
    return ordered


def solve(inp: SchedulingInput) -> SchedulingResult:
    """Plan NodeClaims for the pending pods of ``inp``. Pure and deterministic."""
    return _Solver(inp).run(inp.pods)
