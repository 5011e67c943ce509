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

import bisect
from collections.abc import Iterable, Mapping, Sequence
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

__all__ = ["MAX_INSTANCE_TYPES", "NO_NODEPOOL", "solve"]

# Like Karpenter, a NodeClaim carries at most this many instance types (the cheapest).
MAX_INSTANCE_TYPES = 60

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
    """Cheapest available offering of each type under a NodeClaim's zone/capacity-type limits."""

    def __init__(self) -> None:
        self._tables: dict[tuple[Requirement | None, ...], dict[str, Offering | None]] = {}

    def table(self, reqs: Requirements) -> dict[str, Offering | None]:
        """A cache of instance-type name -> cheapest allowed offering, for these requirements."""
        key = (reqs.get(wk.LABEL_ZONE), reqs.get(wk.LABEL_CAPACITY_TYPE), reqs.get(wk.LABEL_ZONE_ID))
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = {}
        return table

    def cheapest(self, it: InstanceType, reqs: Requirements) -> Offering | None:
        table = self.table(reqs)
        if it.name in table:
            return table[it.name]
        best = _cheapest_offering(it, reqs)
        table[it.name] = best
        return best

    def price(self, it: InstanceType, reqs: Requirements) -> float:
        offering = self.cheapest(it, reqs)
        return float("inf") if offering is None else offering.price

    def sorted_types(self, types: Sequence[InstanceType], reqs: Requirements) -> tuple[list[InstanceType], list[float]]:
        """The types with an allowed offering, cheapest first (ties by name), and their prices."""
        priced = [(self.price(it, reqs), it.name, it) for it in types]
        priced = [p for p in priced if p[0] != float("inf")]
        priced.sort(key=lambda p: (p[0], p[1]))
        return [p[2] for p in priced], [p[0] for p in priced]


def _cheapest_offering(it: InstanceType, reqs: Requirements) -> Offering | None:
    zone = reqs.get(wk.LABEL_ZONE)
    ctype = reqs.get(wk.LABEL_CAPACITY_TYPE)
    zone_id = reqs.get(wk.LABEL_ZONE_ID)
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
    return best


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
    prices: list[float]
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
    """A NodeClaim being filled. ``types`` are the instance types its requirements allow,
    cheapest first; types before ``start`` can no longer hold its pods. Types further on
    that no longer fit are dropped when the plan is written, not on every add."""

    pool: _Pool
    requirements: Requirements
    types: list[InstanceType]
    prices: list[float]
    start: int
    used: dict[str, int]
    pods: list[str] = field(default_factory=list)
    ports: set[HostPort] = field(default_factory=set)

    @property
    def price(self) -> float:
        return self.prices[self.start]

    def advance(self) -> None:
        types, used = self.types, self.used
        while not res.fits(used, types[self.start].allocatable):
            self.start += 1

    def room(self, request: Mapping[str, int], types: list[InstanceType], prices: list[float], first: int) -> int:
        """Pods of ``request`` that fit on some type priced like the cheapest one now."""
        bound = self.price + _PRICE_EPSILON
        used = self.used
        best = 0
        for i in range(first, len(types)):
            if prices[i] > bound:
                break
            alloc = types[i].allocatable
            if res.fits(used, alloc):
                count = res.max_count(request, alloc, used)
                if count > best:
                    best = count
        return best


@dataclass(slots=True)
class _Candidates:
    """The instance types of a pool that hold at least one pod of a group, cheapest first."""

    requirements: Requirements
    types: list[InstanceType]
    prices: list[float]
    caps: list[int]  # pods of the group that fit each type next to the daemonsets
    _by_cap: _BestPerPod | None = None

    def best(self, count: int) -> int:
        """Index of the type with the lowest price per pod when ``count`` pods remain."""
        if self._by_cap is None:
            self._by_cap = _BestPerPod(self.types, self.prices, self.caps)
        return self._by_cap.best(count)


class _BestPerPod:
    """Answers "cheapest per pod for N pods" in O(log n).

    With N pods left, a type holding ``cap >= N`` costs price/N per pod, so the best of those
    is the cheapest among them; a type holding fewer costs price/cap. Sorting by cap gives a
    suffix minimum of price and a prefix minimum of price/cap; the answer is the better of
    the two at the split point. Ties break on more pods, then on name, as ``_best_index``.
    """

    def __init__(self, types: Sequence[InstanceType], prices: Sequence[float], caps: Sequence[int]) -> None:
        order = sorted(range(len(types)), key=lambda i: caps[i])
        self.caps_sorted = [caps[i] for i in order]
        self.types, self.prices, self.caps = types, prices, caps
        n = len(order)
        self.suffix: list[int] = [0] * n
        best = -1
        for k in range(n - 1, -1, -1):
            i = order[k]
            if best < 0 or (prices[i], -caps[i], types[i].name) < (
                prices[best],
                -caps[best],
                types[best].name,
            ):
                best = i
            self.suffix[k] = best
        self.prefix: list[int] = [0] * (n + 1)
        best = -1
        for k in range(n):
            i = order[k]
            if best < 0 or self._unbounded_key(i) < self._unbounded_key(best):
                best = i
            self.prefix[k + 1] = best

    def _unbounded_key(self, i: int) -> tuple[float, int, str]:
        return (self.prices[i] / self.caps[i], -self.caps[i], self.types[i].name)

    def best(self, count: int) -> int:
        k = bisect.bisect_left(self.caps_sorted, count)
        options = []
        if k < len(self.caps_sorted):
            i = self.suffix[k]
            options.append(((self.prices[i] / count, -count, self.types[i].name), i))
        if k > 0:
            i = self.prefix[k]
            options.append((self._unbounded_key(i), i))
        return min(options)[1]


class _Solver:
    def __init__(self, inp: SchedulingInput) -> None:
        self.pricer = _Pricer()
        self.pools = [self._make_pool(p, inp) for p in sorted(inp.nodepools, key=lambda p: (-p.weight, p.name))]
        self.nodes = [self._make_node(n, inp) for n in sorted(inp.nodes, key=lambda n: (n.in_flight, n.name))]
        self.claims: list[_Claim] = []
        self.unschedulable: list[UnschedulablePod] = []
        self._candidate_cache: dict[tuple[int, int, Requirements], _Candidates | str] = {}

    # -- setup ---------------------------------------------------------------------------------
    def _make_pool(self, np: NodePoolInput, inp: SchedulingInput) -> _Pool:
        reqs = np.requirements.add(
            Requirements.from_labels(np.labels),
            Requirements([Requirement(wk.LABEL_NODEPOOL, False, frozenset({np.name}))]),
        )
        if wk.LABEL_CAPACITY_TYPE not in reqs:
            # Karpenter launches on-demand unless the NodePool allows spot explicitly.
            reqs = reqs.add(
                Requirements([Requirement(wk.LABEL_CAPACITY_TYPE, False, frozenset({wk.CAPACITY_TYPE_ON_DEMAND}))])
            )
        daemon: dict[str, int] = {}
        for dpod in inp.daemon_pods:
            if untolerated(dpod.tolerations, np.taints) is not None:
                continue
            if any(reqs.compatible(alt, ALLOW_UNDEFINED) is None for alt in dpod.requirements):
                daemon = res.add(daemon, dpod.requests)
        types, prices = self.pricer.sorted_types([it for it in np.instance_types if type_matches(it, reqs)], reqs)
        remaining: dict[str, int] | None = None
        if np.limits is not None:
            in_use = res.total(
                {**(n.capacity or n.allocatable), "nodes": 1000} for n in inp.nodes if n.nodepool == np.name
            )
            remaining = {k: v - in_use.get(k, 0) for k, v in np.limits.items()}
        return _Pool(np, reqs, daemon, types, prices, remaining)

    def _make_node(self, node: NodeInput, inp: SchedulingInput) -> _Node:
        initializing = node.in_flight or (node.nodepool is not None and node.labels.get(wk.LABEL_INITIALIZED) != "true")
        taints = node.taints
        if initializing:
            startup = {t.key for p in inp.nodepools if p.name == node.nodepool for t in p.startup_taints}
            taints = tuple(t for t in taints if t.key not in _EPHEMERAL_TAINTS and t.key not in startup)
        return _Node(node, Requirements.from_labels(node.labels), taints, dict(node.requested), set(node.host_ports))

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
                count = min(count, 0 if ports_conflict(group.host_ports, node.ports) else 1)
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
            if group.host_ports and ports_conflict(group.host_ports, claim.ports):
                continue
            if claim.room(group.requests, claim.types, claim.prices, claim.start) == 0:
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
        if len(alt):
            reqs = claim.requirements.add(alt)
        else:
            reqs = claim.requirements
        if reqs == claim.requirements:
            types, prices, first = claim.types, claim.prices, claim.start
        else:
            narrowed = [it for it in claim.types[claim.start :] if type_matches(it, reqs)]
            types, prices = self.pricer.sorted_types(narrowed, reqs)
            first = 0
            while first < len(types) and not res.fits(claim.used, types[first].allocatable):
                first += 1
            if first == len(types) or prices[first] > claim.price + _PRICE_EPSILON:
                return 0
        best = claim.room(group.requests, types, prices, first)
        if group.host_ports:
            best = min(best, 1)
        take = min(best, count)
        if take <= 0:
            return 0
        claim.requirements, claim.types, claim.prices, claim.start = reqs, types, prices, first
        claim.used = res.add(claim.used, group.requests, take)
        claim.ports |= group.host_ports
        claim.advance()
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

    def _candidates(self, pool: _Pool, group: _Group, alt: Requirements) -> _Candidates | str:
        """Instance types of a pool that can hold at least one pod of the group (cached)."""
        key = (id(pool), id(group), alt)
        cached = self._candidate_cache.get(key)
        if cached is not None:
            return cached
        outcome = self._compute_candidates(pool, group, alt)
        self._candidate_cache[key] = outcome
        return outcome

    def _compute_candidates(self, pool: _Pool, group: _Group, alt: Requirements) -> _Candidates | str:
        if pool.input.error:
            return pool.input.error
        taint = untolerated(group.first.tolerations, pool.input.taints)
        if taint is not None:
            return f"did not tolerate taint {taint}"
        conflict = pool.requirements.compatible(alt, ALLOW_UNDEFINED)
        if conflict is not None:
            return f"incompatible requirements: {conflict}"
        if len(alt):
            reqs = pool.requirements.add(alt)
            types, prices = self.pricer.sorted_types([it for it in pool.types if type_matches(it, reqs)], reqs)
        else:
            reqs, types, prices = pool.requirements, pool.types, pool.prices
        if not types:
            return "no instance type satisfies the requirements" + _describe_offering_reqs(reqs)
        needed = res.add(pool.daemon, group.requests)
        fitting = [i for i, it in enumerate(types) if res.fits(needed, it.allocatable)]
        if not fitting:
            absent = [k for k in sorted(needed) if needed[k] > 0 and not any(it.allocatable.get(k) for it in types)]
            if absent:
                return f"no instance type offers {absent[0]} (needs {format_milli(needed[absent[0]], absent[0])})"
            largest = max(types, key=lambda it: (it.allocatable.get("cpu", 0), it.allocatable.get("memory", 0)))
            short = res.first_shortfall(needed, largest.allocatable) or "cpu"
            return (
                f"no instance type has enough {short}: needs {format_milli(needed.get(short, 0), short)} "
                f"(pod {format_milli(group.requests.get(short, 0), short)} + daemonsets "
                f"{format_milli(pool.daemon.get(short, 0), short)}), largest candidate {largest.name} has "
                f"{format_milli(largest.allocatable.get(short, 0), short)} allocatable"
            )
        limit = 1 if group.host_ports else 1 << 30
        return _Candidates(
            requirements=reqs,
            types=[types[i] for i in fitting],
            prices=[prices[i] for i in fitting],
            caps=[min(res.max_count(group.requests, types[i].allocatable, pool.daemon), limit) for i in fitting],
        )

    def _try_pool(self, pool: _Pool, group: _Group, alt: Requirements, count: int) -> tuple[_Claim, int] | str:
        cands = self._candidates(pool, group, alt)
        if isinstance(cands, str):
            return cands
        types, prices, caps = cands.types, cands.prices, cands.caps
        remaining = pool.remaining
        if remaining is not None:
            indices = [i for i, it in enumerate(types) if all(_capacity(it, k) <= v for k, v in remaining.items())]
            if not indices:
                return _limit_reason(pool, types, remaining)
            best = _best_index(indices, prices, caps, types, count)
            types, prices, caps = (
                [types[i] for i in indices],
                [prices[i] for i in indices],
                [caps[i] for i in indices],
            )
            best = indices.index(best)
        else:
            best = cands.best(count)
        take = min(caps[best], count)
        if remaining is not None:
            for name in remaining:
                remaining[name] -= max(_capacity(it, name) for it, cap in zip(types, caps, strict=True) if cap >= take)
        # Cheaper types than the chosen one cannot hold ``take`` pods (it would be cheaper per pod).
        first = bisect.bisect_left(prices, prices[best])
        claim = _Claim(
            pool=pool,
            requirements=cands.requirements,
            types=types,
            prices=prices,
            start=first,
            used=res.add(pool.daemon, group.requests, take),
            ports=set(group.host_ports),
        )
        claim.advance()
        return claim, take

    # -- output --------------------------------------------------------------------------------
    def _result(self) -> SchedulingResult:
        plans = tuple(self._plan(c) for c in self.claims)
        existing = tuple(
            ExistingPlacement(n.input.name, tuple(n.placed), n.input.in_flight) for n in self.nodes if n.placed
        )
        return SchedulingResult(plans, existing, tuple(self.unschedulable))

    def _plan(self, claim: _Claim) -> NodeClaimPlan:
        reqs = claim.requirements
        table = self.pricer.table(reqs)
        used = claim.used
        fitting: list[InstanceType] = []
        for it in claim.types[claim.start :]:
            if res.fits(used, it.allocatable):
                fitting.append(it)
                if len(fitting) == MAX_INSTANCE_TYPES:
                    break
        cheapest = table[fitting[0].name]
        assert cheapest is not None  # types without an allowed offering were filtered out
        zone_req = reqs.get(wk.LABEL_ZONE)
        zone_id_req = reqs.get(wk.LABEL_ZONE_ID)
        zones = sorted(
            {
                o.zone
                for it in fitting
                for o in it.offerings
                if o.available
                and o.capacity_type == cheapest.capacity_type
                and (zone_req is None or zone_req.has(o.zone))
                and (zone_id_req is None or zone_id_req.has(o.zone_id))
            }
        )
        return NodeClaimPlan(
            nodepool=claim.pool.input.name,
            requirements=reqs,
            instance_types=tuple(it.name for it in fitting),
            capacity_type=cheapest.capacity_type,
            zones=tuple(zones),
            pods=tuple(claim.pods),
            requests=dict(sorted(used.items())),
            price=cheapest.price,
        )


def _best_index(
    indices: Iterable[int],
    prices: Sequence[float],
    caps: Sequence[int],
    types: Sequence[InstanceType],
    count: int,
) -> int:
    """The type with the lowest price per pod for ``count`` pods (more pods, then name, break ties)."""
    return min(indices, key=lambda i: (prices[i] / min(caps[i], count), -min(caps[i], count), types[i].name))


_WILDCARD_IPS = frozenset({"", "0.0.0.0", "::"})


def ports_conflict(wanted: Iterable[HostPort], used: Iterable[HostPort]) -> bool:
    """Do host ports clash? Same protocol and port, and the same IP or either one a wildcard."""
    used_list = list(used)
    for ip, protocol, port in wanted:
        for other_ip, other_protocol, other_port in used_list:
            same_ip = ip == other_ip or ip in _WILDCARD_IPS or other_ip in _WILDCARD_IPS
            if port == other_port and protocol == other_protocol and same_ip:
                return True
    return False


def _capacity(it: InstanceType, name: str) -> int:
    """What one node of this type counts against a NodePool limit (``nodes`` counts one)."""
    return 1000 if name == "nodes" else it.capacity.get(name, 0)


def _limit_reason(pool: _Pool, types: Sequence[InstanceType], remaining: Mapping[str, int]) -> str:
    keys = sorted(remaining)
    smallest = min(types, key=lambda it: tuple(_capacity(it, k) for k in keys))
    name = next((k for k in keys if _capacity(smallest, k) > remaining[k]), keys[0])
    limit = pool.input.limits[name] if pool.input.limits else 0
    return (
        f"exceeds NodePool limit {name}={format_milli(limit, name)}: "
        f"{format_milli(max(remaining[name], 0), name)} remaining, the smallest fitting "
        f"instance type {smallest.name} has {format_milli(_capacity(smallest, name), name)}"
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
