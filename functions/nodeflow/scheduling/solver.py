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
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nodeflow.api import labels as wk
from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.preferences import Constraints, Preferences, initial_preferences
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.taints import Taint, Toleration, untolerated
from nodeflow.scheduling.types import (
    AffinityTerm,
    ExistingPlacement,
    HostPort,
    NodeClaimPlan,
    NodeInput,
    NodePoolInput,
    PodExplanation,
    PodInput,
    SchedulingInput,
    SchedulingResult,
    Selector,
    TopologySpread,
    UnschedulablePod,
)

__all__ = ["MAX_INSTANCE_TYPES", "NO_NODEPOOL", "explain", "ports_conflict", "solve", "type_matches", "water_fill"]

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
        table = self.table(reqs)
        priced: list[tuple[float, str, InstanceType]] = []
        for it in types:
            name = it.name
            if name in table:
                offering = table[name]
            else:
                offering = table[name] = _cheapest_offering(it, reqs)
            if offering is not None:
                priced.append((offering.price, name, it))
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


def _type_keys_changed(old: Requirements, new: Requirements) -> bool:
    """Could going from ``old`` to ``new`` rule out instance types by their labels (not only
    by offerings)? Zone and capacity-type pins and custom labels cannot."""
    for key, req in new.items():
        if key in _OFFERING_KEYS or (key not in wk.WELL_KNOWN_LABELS and key != wk.LABEL_REGION):
            continue
        if old.get(key) != req:
            return True
    return False


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

_UNBOUNDED = 1 << 30
_NOSCHEDULE = frozenset({"NoSchedule", "NoExecute"})
_ALL_EFFECTS = frozenset({"NoSchedule", "NoExecute", "PreferNoSchedule"})
Reasons = dict[str, str]
_GROUP_SERIAL = itertools.count()
_BASIC_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})
# How many of the most recent open NodeClaims may be grown onto a larger type for a group.
_GROW_WINDOW = 64
# ...and how many larger types of each are looked at (the cheapest ones).
_GROW_TYPES = 256
# ...and only for groups that would otherwise fill fewer than this many new NodeClaims.
_GROW_MAX_NODES = 4
# ...in at most this many passes over the NodeClaims.
_GROW_PASSES = 3
# Plans with at most this many NodeClaims get the final merge pass (it compares pairs).
_MERGE_MAX_CLAIMS = 200
# ...and up to this many, every NodeClaim (not only partly filled ones) may be moved.
_MERGE_ALL_CLAIMS = 100
# How many of the most recently opened NodeClaims with room are offered each group's pods.
_OPEN_WINDOW = 16384


@dataclass(slots=True)
class _Group:
    """Identical pods (same requests, constraints, tolerations, namespace and relevant labels)."""

    pods: list[PodInput]
    requests: Mapping[str, int]
    constraints: Constraints
    preferences: Preferences
    tolerations: tuple[Toleration, ...]
    host_ports: frozenset[HostPort]
    namespace: str
    labels: Mapping[str, str]
    error: str | None
    # A serial number: caches key on it (ids of dead groups get reused).
    uid: int = field(default_factory=lambda: next(_GROUP_SERIAL))

    @property
    def first(self) -> PodInput:
        return self.pods[0]

    @property
    def requirements(self) -> tuple[Requirements, ...]:
        return self.constraints.requirements

    @property
    def effects(self) -> frozenset[str]:
        """Taint effects the group must tolerate (PreferNoSchedule until relaxed)."""
        return _NOSCHEDULE if self.constraints.tolerate_prefer_no_schedule else _ALL_EFFECTS

    def required_anti_affinity(self) -> tuple[AffinityTerm, ...]:
        return tuple(t for t in self.first.affinity if t.anti and t.weight == 0)


@dataclass(slots=True)
class _Pool:
    input: NodePoolInput
    requirements: Requirements
    daemon: dict[str, int]
    types: list[InstanceType]  # compatible with the pool's requirements, cheapest first
    prices: list[float]
    remaining: dict[str, int] | None  # limits minus what the pool runs
    min_values: bool  # some requirement has minValues


@dataclass(slots=True)
class _Node:
    input: NodeInput
    requirements: Requirements
    taints: tuple[Taint, ...]
    used: dict[str, int]
    ports: set[HostPort]
    placed: list[str] = field(default_factory=list)
    # (namespace, labels, count) of every pod on it, running or placed now: topology counts.
    entries: list[tuple[str, Mapping[str, str], int]] = field(default_factory=list)

    def domain(self, key: str) -> str | None:
        if key == wk.LABEL_HOSTNAME:
            return self.input.labels.get(key) or self.input.name
        return self.input.labels.get(key)


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
    entries: list[tuple[str, Mapping[str, str], int]] = field(default_factory=list)
    index: int = 0
    # Most cpu, memory and pods free on a type at the current price: a quick "no room" test.
    free: tuple[int, int, int] = (0, 0, 0)
    # Holds pods that topology constraints or selectors care about: never merged away.
    topology: bool = False

    def domain(self, key: str) -> str | None:
        """The NodeClaim's value for a topology key, once its requirements pin one."""
        if key == wk.LABEL_HOSTNAME:
            return f"nodeclaim-{self.index}"
        req = self.requirements.get(key)
        if req is not None and not req.complement and len(req.values) == 1:
            return next(iter(req.values))
        return None

    @property
    def price(self) -> float:
        return self.prices[self.start]

    def advance(self) -> None:
        """Skip types that no longer hold the pods; note the room left at the current price."""
        types, used = self.types, self.used
        while not res.fits(used, types[self.start].allocatable):
            self.start += 1
        bound = self.prices[self.start] + _PRICE_EPSILON
        cpu = memory = pods = 0
        for i in range(self.start, len(types)):
            if self.prices[i] > bound:
                break
            alloc = types[i].allocatable
            if res.fits(used, alloc):
                cpu = max(cpu, alloc.get("cpu", 0) - used.get("cpu", 0))
                memory = max(memory, alloc.get("memory", 0) - used.get("memory", 0))
                pods = max(pods, alloc.get("pods", 0) - used.get("pods", 0))
        self.free = (cpu, memory, pods)

    def room(
        self,
        request: Mapping[str, int],
        types: list[InstanceType],
        prices: list[float],
        first: int,
        upsize: bool = False,
    ) -> int:
        """Pods of ``request`` that fit on some type priced like the cheapest one now (any type
        when ``upsize``)."""
        bound = float("inf") if upsize else self.price + _PRICE_EPSILON
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
            # Every type here holds all N pods: price per pod is price / N, so cheapest, then name.
            if best < 0 or (prices[i], types[i].name) < (prices[best], types[best].name):
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


_Target = _Node | _Claim


@dataclass(slots=True)
class _Tracker:
    """Pods matching one selector (in some namespaces), counted per node or NodeClaim."""

    selector: Selector
    namespaces: frozenset[str] | None
    counts: dict[int, int] = field(default_factory=dict)  # id(target) -> matching pods

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.namespaces is None or namespace in self.namespaces) and self.selector.matches(labels)


class _Solver:
    def __init__(self, inp: SchedulingInput) -> None:
        self.inp = inp
        self.pricer = _Pricer()
        self.pools = [self._make_pool(p, inp) for p in sorted(inp.nodepools, key=lambda p: (-p.weight, p.name))]
        self.nodes = [self._make_node(n, inp) for n in sorted(inp.nodes, key=lambda n: (n.in_flight, n.name))]
        self.claims: list[_Claim] = []
        # NodeClaims that may still take a pod at their price: the smallest pending pod fits.
        self.open_claims: list[_Claim] = []
        # NodeClaims opened for fewer pods than their type holds: the ones worth growing.
        self.tails: list[_Claim] = []
        smallest = [p.requests for p in inp.pods] or [{}]
        self.min_request = (
            min(r.get("cpu", 0) for r in smallest),
            min(r.get("memory", 0) for r in smallest),
            min(r.get("pods", 0) for r in smallest),
        )
        self.targets: dict[int, _Target] = {id(n): n for n in self.nodes}
        self.trackers: dict[tuple[Selector, frozenset[str] | None], _Tracker] = {}
        self._group_trackers: dict[int, list[_Tracker]] = {}  # group uid -> trackers selecting it
        # Required anti-affinity of pods already placed: (term, namespace of its pod, where).
        self.anti: list[tuple[AffinityTerm, str, _Target]] = []
        for node in self.nodes:
            for pod in node.input.running:
                node.entries.append((pod.namespace, pod.labels, 1))
                self.anti.extend((term, pod.namespace, node) for term in pod.anti_affinity)
        # Every selector a pod's spread or affinity uses gets its tracker now, counted over the
        # existing nodes only; placements keep them current.
        for pending in inp.pods:
            for spread in pending.spread:
                self._tracker(spread.selector, frozenset({pending.namespace}))
            for term in pending.affinity:
                self._tracker(term.selector, term.namespaces)
        self._zone_cache: dict[tuple[int, str], frozenset[tuple[str, str]]] = {}
        self._plan_cache: dict[
            tuple[object, ...], tuple[list[InstanceType], tuple[str, ...], Offering, tuple[str, ...]]
        ] = {}
        self.unschedulable: list[UnschedulablePod] = []
        self.placed_in: dict[str, str] = {}  # pod key -> node name or "nodeclaim-N"
        self.group_of: dict[str, _Group] = {}  # pod key -> the group it was last tried in
        self._candidate_cache: dict[tuple[object, ...], _Candidates | str] = {}
        self._narrow_cache: dict[
            tuple[int, Requirements], tuple[list[InstanceType], list[InstanceType], list[float]]
        ] = {}
        self._domain_cache: dict[tuple[int, Requirements, str], frozenset[str]] = {}
        self.strict_min_values = inp.min_values_policy != "BestEffort"

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
        min_values = any(r.min_values for r in reqs.values())
        return _Pool(np, reqs, daemon, types, prices, remaining, min_values)

    def _make_node(self, node: NodeInput, inp: SchedulingInput) -> _Node:
        initializing = node.in_flight or (node.nodepool is not None and node.labels.get(wk.LABEL_INITIALIZED) != "true")
        taints = node.taints
        if initializing:
            startup = {t.key for p in inp.nodepools if p.name == node.nodepool for t in p.startup_taints}
            taints = tuple(t for t in taints if t.key not in wk.EPHEMERAL_TAINTS and t.key not in startup)
        return _Node(node, Requirements.from_labels(node.labels), taints, dict(node.requested), set(node.host_ports))

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> SchedulingResult:
        """Place every group; groups that fail are retried once (pod affinity may target pods
        placed later), then with one preference relaxed at a time, as Karpenter does."""
        queue = _group(self.inp.pods, self.inp.preference_policy == "Ignore", self.inp)
        for group in queue:
            for pod in group.pods:
                self.group_of[pod.key] = group
        retried: set[int] = set()
        while queue:
            failed: list[tuple[_Group, list[str], Reasons]] = []
            for group in queue:
                remaining, reasons = self._place_group(group, [p.key for p in group.pods])
                if remaining:
                    failed.append((group, remaining, reasons))
            queue = []
            for group, remaining, reasons in failed:
                left = [p for p in group.pods if p.key in set(remaining)]
                if group.constraints.affinity and group.uid not in retried:
                    retry = _regroup(group, left, group.preferences)
                    retried.add(retry.uid)
                    queue.append(retry)
                    self.group_of.update((p.key, retry) for p in left)
                    continue
                relaxed = group.preferences.relax()
                if relaxed is not None and group.error is None:
                    regrouped = _regroup(group, left, relaxed[0])
                    queue.append(regrouped)
                    self.group_of.update((p.key, regrouped) for p in left)
                    continue
                for key in remaining:
                    self.unschedulable.append(UnschedulablePod(key, reasons))
        self.unschedulable.sort(key=lambda u: u.pod)
        if len(self.claims) <= _MERGE_MAX_CLAIMS:
            self._merge_claims()
        return self._result()

    def _merge_claims(self) -> None:
        """Last pass, for plans of modest size: put the pods of two NodeClaims of one NodePool on
        one node whenever a single instance type that holds them all costs less than the two.
        Only NodeClaims whose pods no topology rule or selector looks at, in NodePools without
        limits, are merged (moving them cannot break a spread, an affinity or a limit)."""
        small_plan = len(self.claims) <= _MERGE_ALL_CLAIMS
        partial = {id(c) for c in self.tails}
        for _ in range(_GROW_PASSES):
            merged = False
            candidates = sorted(
                (c for c in self.claims if not c.topology and c.pool.remaining is None),
                key=lambda c: (c.price, c.index),
            )
            for small in candidates:
                # In larger plans only NodeClaims opened for fewer pods than they hold are moved
                # (full ones are already efficient): the pass stays at (partial x all) pairs.
                if small.topology or (not small_plan and id(small) not in partial):
                    continue
                best: tuple[float, int] | None = None
                plan: tuple[_Claim, Requirements, list[InstanceType], list[float], int, dict[str, int]] | None = None
                for big in candidates:
                    if big is small or big.topology or big.pool is not small.pool:
                        continue
                    if ports_conflict(small.ports, big.ports):
                        continue
                    if big.requirements == small.requirements:
                        reqs = big.requirements
                    elif big.requirements.intersects(small.requirements) is None:
                        reqs = big.requirements.add(small.requirements)
                    else:
                        continue
                    used = res.subtract(res.add(big.used, small.used), big.pool.daemon)
                    types, prices = self._narrow(big.pool.types, big.pool.requirements, reqs)
                    # Types cheaper than either NodeClaim's cannot hold its pods; types costing the
                    # two together (or more than the best merge so far) save nothing.
                    ceiling = small.price + big.price - (_PRICE_EPSILON if best is None else -best[0])
                    first = None
                    for i in range(
                        bisect.bisect_left(prices, max(big.price, small.price) - _PRICE_EPSILON), len(types)
                    ):
                        if prices[i] >= ceiling:
                            break
                        if res.fits(used, types[i].allocatable):
                            first = i
                            break
                    if first is None:
                        continue
                    saving = small.price + big.price - prices[first]
                    strict = big.pool.min_values and self.strict_min_values
                    if strict and min_values_violation(reqs, _fitting(types, first, used)) is not None:
                        continue
                    best, plan = (-saving, big.index), (big, reqs, types, prices, first, used)
                if plan is None:
                    continue
                big, reqs, types, prices, first, used = plan
                big.requirements, big.types, big.prices, big.start, big.used = reqs, types, prices, first, used
                big.advance()
                big.pods.extend(small.pods)
                big.ports |= small.ports
                big.entries.extend(small.entries)
                self.claims.remove(small)
                small.topology = True  # gone: never a partner again in this pass
                partial.add(id(big))
                merged = True
            if not merged:
                break
        for index, claim in enumerate(self.claims):
            claim.index = index
            for key in claim.pods:
                self.placed_in[key] = f"nodeclaim-{index}"

    def _place_group(self, group: _Group, pending: list[str]) -> tuple[list[str], Reasons]:
        if group.error is not None:
            return pending, self._all_pools(group.error)
        extra, blocked_targets = self._inverse_anti_affinity(group)
        items: list[TopologySpread | AffinityTerm] = [s for s in group.constraints.spread if s.key != wk.LABEL_HOSTNAME]
        items += [t for t in group.constraints.affinity if t.key != wk.LABEL_HOSTNAME]
        return self._split(group, pending, extra, items, 0, blocked_targets)

    def _all_pools(self, reason: str) -> Reasons:
        return {p.input.name: reason for p in self.pools} or {NO_NODEPOOL: reason}

    # -- topology: counting ----------------------------------------------------------------------
    def _tracker(self, selector: Selector, namespaces: frozenset[str] | None) -> _Tracker:
        tracker = self.trackers.get((selector, namespaces))
        if tracker is None:
            tracker = _Tracker(selector, namespaces)
            for tid, target in self.targets.items():
                count = sum(n for ns, labels, n in target.entries if tracker.selects(ns, labels))
                if count:
                    tracker.counts[tid] = count
            self.trackers[(selector, namespaces)] = tracker
            self._group_trackers.clear()  # which trackers select which group: work it out again
        return tracker

    def _record(self, group: _Group, target: _Target, keys: list[str]) -> None:
        """Book pods onto a node or NodeClaim: topology counts and anti-affinity follow them."""
        count = len(keys)
        target.entries.append((group.namespace, group.labels, count))
        matching = self._group_trackers.get(group.uid)
        if matching is None:
            matching = self._matching_trackers(group)
        tid = id(target)
        for tracker in matching:
            tracker.counts[tid] = tracker.counts.get(tid, 0) + count
        for term in group.required_anti_affinity():
            self.anti.append((term, group.namespace, target))
        if isinstance(target, _Claim) and (matching or group.constraints.spread or group.constraints.affinity):
            target.topology = True
        where = target.input.name if isinstance(target, _Node) else f"nodeclaim-{target.index}"
        for key in keys:
            self.placed_in[key] = where

    def _matching_trackers(self, group: _Group) -> list[_Tracker]:
        """The trackers whose selector picks this group's pods (cached until a tracker is added)."""
        matching = [t for t in self.trackers.values() if t.selects(group.namespace, group.labels)]
        self._group_trackers[group.uid] = matching
        return matching

    def _domain_counts(
        self, tracker: _Tracker, key: str, group: _Group, spread: TopologySpread | None
    ) -> dict[str, int]:
        counts: dict[str, int] = {}
        for tid, count in tracker.counts.items():
            target = self.targets[tid]
            if spread is not None and isinstance(target, _Node) and not self._eligible(target, group, spread):
                continue
            domain = target.domain(key)
            if domain is not None:
                counts[domain] = counts.get(domain, 0) + count
        return counts

    def _eligible(self, node: _Node, group: _Group, spread: TopologySpread) -> bool:
        """Does a node count for a spread constraint (nodeAffinityPolicy / nodeTaintsPolicy)?"""
        if spread.honor_node_affinity and not any(node.requirements.compatible(a) is None for a in group.requirements):
            return False
        return not (spread.honor_node_taints and untolerated(group.tolerations, node.taints, group.effects) is not None)

    def _domains(self, group: _Group, extra: Requirements, key: str, spread: TopologySpread | None) -> frozenset[str]:
        """Every value of a topology key that counts for the group: the offerings or enumerated
        values of the NodePools, and the labels of eligible nodes. For a spread constraint the
        NodePools' taints and the pod's node affinity narrow this only when its
        nodeTaintsPolicy / nodeAffinityPolicy say Honor (as in Kubernetes: a domain the pod
        cannot use still holds the minimum down under Ignore)."""
        honor_taints = spread is None or spread.honor_node_taints
        honor_affinity = spread is None or spread.honor_node_affinity
        values: set[str] = set()
        alternatives = group.requirements if honor_affinity else (Requirements(),)
        for alt in alternatives:
            full = alt.add(extra) if len(extra) else alt
            for pool in self.pools:
                if pool.input.error:
                    continue
                if honor_taints and untolerated(group.tolerations, pool.input.taints, group.effects):
                    continue
                if pool.requirements.compatible(full, ALLOW_UNDEFINED) is not None:
                    continue
                values |= self._pool_domains(pool, full, key)
        for node in self.nodes:
            if not node.input.schedulable:
                continue
            if spread is not None and not self._eligible(node, group, spread):
                continue
            domain = node.domain(key)
            if domain is not None:
                values.add(domain)
        for claim in self.claims:
            domain = claim.domain(key)
            if domain is not None:
                values.add(domain)
        return frozenset(values)

    def _pool_domains(self, pool: _Pool, alt: Requirements, key: str) -> frozenset[str]:
        cache_key = (id(pool), alt, key)
        cached = self._domain_cache.get(cache_key)
        if cached is not None:
            return cached
        reqs = pool.requirements.add(alt)
        allowed = reqs.get(key)
        out: set[str] = set()
        if key in _OFFERING_KEYS:
            zone, ctype, zone_id = reqs.get(wk.LABEL_ZONE), reqs.get(wk.LABEL_CAPACITY_TYPE), reqs.get(wk.LABEL_ZONE_ID)
            for it in pool.types:
                if not type_matches(it, reqs):
                    continue
                for o in it.offerings:
                    if (
                        o.available
                        and (zone is None or zone.has(o.zone))
                        and (ctype is None or ctype.has(o.capacity_type))
                        and (zone_id is None or zone_id.has(o.zone_id))
                    ):
                        out.add({wk.LABEL_ZONE: o.zone, wk.LABEL_CAPACITY_TYPE: o.capacity_type}.get(key, o.zone_id))
        elif allowed is not None and not allowed.complement:
            out = set(allowed.values)
        else:
            out = {it.labels[key] for it in pool.types if key in it.labels and type_matches(it, reqs)}
        frozen = frozenset(out)
        self._domain_cache[cache_key] = frozen
        return frozen

    def _inverse_anti_affinity(self, group: _Group) -> tuple[Requirements, set[int]]:
        """Where placed pods' required anti-affinity keeps this group out: zones (or other
        keys) as NotIn requirements, nodes and NodeClaims as a set."""
        blocked: dict[str, set[str]] = {}
        targets: set[int] = set()
        for term, _owner, target in self.anti:
            if not term.selects(group.namespace, group.labels):
                continue
            if term.key == wk.LABEL_HOSTNAME:
                targets.add(id(target))
                continue
            domain = target.domain(term.key)
            if domain is not None:
                blocked.setdefault(term.key, set()).add(domain)
        extra = Requirements(Requirement(k, True, frozenset(v)) for k, v in sorted(blocked.items()))
        return extra, targets

    # -- topology: splitting a group across domains ---------------------------------------------------
    def _split(
        self,
        group: _Group,
        pending: list[str],
        extra: Requirements,
        items: Sequence[TopologySpread | AffinityTerm],
        index: int,
        blocked: set[int],
    ) -> tuple[list[str], Reasons]:
        if index == len(items):
            return self._place(group, pending, extra, blocked)
        item = items[index]
        if isinstance(item, TopologySpread):
            return self._split_spread(group, pending, extra, items, index, blocked, item)
        if item.anti:
            return self._split_anti(group, pending, extra, items, index, blocked, item)
        return self._split_affinity(group, pending, extra, items, index, blocked, item)

    def _pin(self, extra: Requirements, key: str, domain: str) -> Requirements:
        return extra.add(Requirements([Requirement(key, False, frozenset({domain}))]))

    def _split_spread(
        self,
        group: _Group,
        pending: list[str],
        extra: Requirements,
        items: Sequence[TopologySpread | AffinityTerm],
        index: int,
        blocked: set[int],
        spread: TopologySpread,
    ) -> tuple[list[str], Reasons]:
        tracker = self._tracker(spread.selector, frozenset({group.namespace}))
        self_match = spread.selector.matches(group.labels)
        domains = self._domains(group, extra, spread.key, spread)
        if not domains:
            return pending, self._all_pools(f"topology spread on {spread.key}: no domain is available")
        counts = dict.fromkeys(domains, 0)
        for d, n in self._domain_counts(tracker, spread.key, group, spread).items():
            if d in counts:
                counts[d] = n
        closed: set[str] = set()
        reasons: Reasons = {}
        few_domains = bool(spread.min_domains and len(domains) < spread.min_domains)
        probed: set[str] = set()
        while pending:
            open_domains = sorted(d for d in domains if d not in closed)
            if not open_domains:
                break
            if not self_match:
                # The pods do not count towards their own spread: all go to the emptiest domain.
                floor = 0 if few_domains else min(counts.values())
                domain = min(open_domains, key=lambda d: (counts[d], d))
                if counts[domain] - floor > spread.max_skew:
                    break
                left, why = self._split(group, pending, self._pin(extra, spread.key, domain), items, index + 1, blocked)
                if left:
                    closed.add(domain)
                    reasons.update(why)
                pending = left
                continue
            # Fill domains towards an even level (water-filling). Each domain is first probed with
            # one pod, so a domain that cannot take any closes before the others are filled; then
            # each gets its share at once, never above the final floor + maxSkew.
            quotas = water_fill(counts, open_domains, len(pending))
            final = {d: counts[d] + quotas.get(d, 0) for d in domains}
            floor = 0 if few_domains else min(final.values())
            progress = False
            for domain in sorted((d for d in open_domains if quotas[d]), key=lambda d: (counts[d], d)):
                room = floor + spread.max_skew - counts[domain]
                take = min(quotas[domain], room, len(pending), 1 if domain not in probed else _UNBOUNDED)
                if take <= 0:
                    continue
                probed.add(domain)
                pinned = self._pin(extra, spread.key, domain)
                left, why = self._split(group, pending[:take], pinned, items, index + 1, blocked)
                placed = take - len(left)
                counts[domain] += placed
                progress = progress or placed > 0
                pending = left + pending[take:]
                if left:
                    closed.add(domain)
                    reasons.update(why)
                    break  # the level changes: work the shares out again
            else:
                if not progress:
                    break
        if pending:
            detail = ", ".join(f"{d}={counts[d]}" for d in sorted(counts))
            topology = (
                f"topology spread on {spread.key} (maxSkew {spread.max_skew}, selector {spread.selector.describe()}) "
                f"cannot be met; domain counts: {detail}"
            )
            reasons = {name: f"{topology}; {why}" if why else topology for name, why in reasons.items()} or (
                self._all_pools(topology)
            )
        return pending, reasons

    def _split_affinity(
        self,
        group: _Group,
        pending: list[str],
        extra: Requirements,
        items: Sequence[TopologySpread | AffinityTerm],
        index: int,
        blocked: set[int],
        term: AffinityTerm,
    ) -> tuple[list[str], Reasons]:
        tracker = self._tracker(term.selector, term.namespaces)
        counts = self._domain_counts(tracker, term.key, group, None)
        candidates = sorted((d for d, n in counts.items() if n > 0), key=lambda d: (-counts[d], d))
        self_match = term.selects(group.namespace, group.labels)
        if not candidates and self_match:
            candidates = sorted(self._domains(group, extra, term.key, None))
        if not candidates:
            return pending, self._all_pools(
                f"pod affinity on {term.key}: no pod matches {term.selector.describe()} in any domain yet"
            )
        reasons: Reasons = {}
        for domain in candidates:
            left, why = self._split(group, pending, self._pin(extra, term.key, domain), items, index + 1, blocked)
            placed = len(pending) - len(left)
            pending = left
            reasons.update(why)
            if not pending or (self_match and placed and not counts):
                # Self-affinity without earlier pods: the first domain used is the domain.
                break
        return pending, reasons

    def _split_anti(
        self,
        group: _Group,
        pending: list[str],
        extra: Requirements,
        items: Sequence[TopologySpread | AffinityTerm],
        index: int,
        blocked: set[int],
        term: AffinityTerm,
    ) -> tuple[list[str], Reasons]:
        tracker = self._tracker(term.selector, term.namespaces)
        taken = {d for d, n in self._domain_counts(tracker, term.key, group, None).items() if n > 0}
        if not term.selects(group.namespace, group.labels):
            if taken:
                extra = extra.add(Requirements([Requirement(term.key, True, frozenset(taken))]))
            return self._split(group, pending, extra, items, index + 1, blocked)
        # The pods repel each other: one per free domain.
        reasons: Reasons = {}
        for domain in sorted(self._domains(group, extra, term.key, None) - taken):
            if not pending:
                break
            left, why = self._split(group, pending[:1], self._pin(extra, term.key, domain), items, index + 1, blocked)
            if left:
                reasons.update(why)
            else:
                pending = pending[1:]
        if pending:
            message = (
                f"pod anti-affinity on {term.key}: every domain already has a pod matching {term.selector.describe()}"
            )
            reasons = self._all_pools(message)
        return pending, reasons

    # -- placing onto nodes and NodeClaims -------------------------------------------------------------
    def _host_caps(self, group: _Group, blocked: set[int]) -> tuple[list[tuple[_Tracker, int, bool]], _Tracker | None]:
        """Per-node limits from hostname spread and anti-affinity: (tracker, limit, self-match),
        and the tracker of a required hostname affinity term, if any."""
        caps: list[tuple[_Tracker, int, bool]] = []
        for spread in group.constraints.spread:
            if spread.key == wk.LABEL_HOSTNAME:
                tracker = self._tracker(spread.selector, frozenset({group.namespace}))
                caps.append((tracker, spread.max_skew, spread.selector.matches(group.labels)))
        affinity: _Tracker | None = None
        for term in group.constraints.affinity:
            if term.key != wk.LABEL_HOSTNAME:
                continue
            tracker = self._tracker(term.selector, term.namespaces)
            if term.anti:
                caps.append((tracker, 0, term.selects(group.namespace, group.labels)))
            else:
                affinity = tracker
        return caps, affinity

    @staticmethod
    def _cap(target_id: int, caps: list[tuple[_Tracker, int, bool]]) -> int:
        """How many more pods of the group a node or NodeClaim may take under hostname rules
        (``target_id`` -1: a new NodeClaim)."""
        cap = _UNBOUNDED
        for tracker, limit, self_match in caps:
            count = tracker.counts.get(target_id, 0)
            if limit == 0:  # anti-affinity: no matching pod may share the node
                if count:
                    return 0
                if self_match:
                    cap = min(cap, 1)
            elif self_match:  # hostname spread: a fresh node is always a domain with 0
                cap = min(cap, max(0, limit - count))
            elif count > limit:
                return 0
        return cap

    def _place(
        self, group: _Group, pending: list[str], extra: Requirements, blocked: set[int]
    ) -> tuple[list[str], Reasons]:
        alts = tuple(alt.add(extra) for alt in group.requirements) if len(extra) else group.requirements
        caps, affinity = self._host_caps(group, blocked)
        allowed: set[int] | None = None
        self_affinity = False
        if affinity is not None:
            allowed = {tid for tid, n in affinity.counts.items() if n > 0}
            if not allowed:
                self_affinity = affinity.selects(group.namespace, group.labels)
                if not self_affinity:
                    term = next(t for t in group.constraints.affinity if t.key == wk.LABEL_HOSTNAME and not t.anti)
                    selector = term.selector.describe()
                    return pending, self._all_pools(
                        f"pod affinity on {wk.LABEL_HOSTNAME}: no pod matches {selector} on any node yet"
                    )
                allowed = None
        pending = self._on_nodes(group, pending, alts, caps, blocked, allowed)
        if pending:
            pending = self._on_claims(group, pending, alts, caps, blocked, allowed)
        reasons: Reasons = {}
        if allowed is not None and pending:
            return pending, self._all_pools(
                f"pod affinity on {wk.LABEL_HOSTNAME}: the nodes with matching pods have no room left"
            )
        fresh = self._cap(-1, caps)
        grow = not self_affinity and not caps and not group.host_ports
        while pending and fresh > 0:
            if grow and self._few_nodes(group, alts, len(pending)):
                # Pods for a few nodes at most: first see whether growing partly filled NodeClaims
                # is the cheaper home for them. (Large groups fill efficient nodes of their own.)
                grow = False
                pending = self._grow_claims(group, pending, alts, blocked)
                continue
            outcome = self._new_claim(group, pending, alts, fresh, together=self_affinity)
            if isinstance(outcome, dict):
                reasons = outcome
                break
            pending = pending[outcome:]
            if self_affinity:
                if pending:
                    reasons = self._all_pools(
                        f"pod affinity on {wk.LABEL_HOSTNAME}: the pods must share one node and do not fit on one"
                    )
                break
        if pending and fresh == 0 and not reasons:
            reasons = self._all_pools(f"pod anti-affinity or spread on {wk.LABEL_HOSTNAME} leaves no node for it")
        return pending, reasons

    def _tolerates(self, group: _Group, taints: Iterable[Taint]) -> bool:
        return untolerated(group.tolerations, taints, group.effects) is None

    def _on_nodes(
        self,
        group: _Group,
        pending: list[str],
        alts: tuple[Requirements, ...],
        caps: list[tuple[_Tracker, int, bool]],
        blocked: set[int],
        allowed: set[int] | None,
    ) -> list[str]:
        for node in self.nodes:
            if not pending:
                break
            nid = id(node)
            if not node.input.schedulable or nid in blocked or (allowed is not None and nid not in allowed):
                continue
            if not self._tolerates(group, node.taints):
                continue
            if not any(node.requirements.compatible(alt) is None for alt in alts):
                continue
            count = min(res.max_count(group.requests, node.input.allocatable, node.used), self._cap(nid, caps))
            if group.host_ports:
                count = min(count, 0 if ports_conflict(group.host_ports, node.ports) else 1)
            take = min(count, len(pending))
            if take <= 0:
                continue
            node.used = res.add(node.used, group.requests, take)
            node.ports |= group.host_ports
            node.placed.extend(pending[:take])
            self._record(group, node, pending[:take])
            pending = pending[take:]
        return pending

    def _on_claims(
        self,
        group: _Group,
        pending: list[str],
        alts: tuple[Requirements, ...],
        caps: list[tuple[_Tracker, int, bool]],
        blocked: set[int],
        allowed: set[int] | None,
    ) -> list[str]:
        # Zone / capacity-type pins of the group: a cheap first test before the resource check.
        pins = (
            [(k, next(iter(r.values))) for k, r in alts[0].items() if k in _OFFERING_KEYS and r.operator == "In"]
            if len(alts) == 1
            else []
        )
        upsize = allowed is not None  # pods that must join given NodeClaims may grow them
        cpu, memory = group.requests.get("cpu", 0), group.requests.get("memory", 0)
        closed = False
        if upsize:
            candidates = self.claims
        else:
            # One pass in a comprehension drops the NodeClaims without room first (cheap: most are).
            # Only the most recent open NodeClaims are looked at: in very large plans the room
            # left on old ones is small, and scanning tens of thousands per group is not.
            recent = self.open_claims[-_OPEN_WINDOW:]
            candidates = [c for c in recent if c.free[0] >= cpu and c.free[1] >= memory and c.free[2] > 0]
        for claim in candidates:
            if not pending:
                break
            cid = id(claim)
            if cid in blocked or (allowed is not None and cid not in allowed):
                continue
            if pins and any((r := claim.requirements.get(k)) is not None and not r.has(v) for k, v in pins):
                continue
            if group.host_ports and ports_conflict(group.host_ports, claim.ports):
                continue
            if claim.room(group.requests, claim.types, claim.prices, claim.start, upsize) == 0:
                continue
            if not self._tolerates(group, claim.pool.input.taints):
                continue
            cap = self._cap(cid, caps)
            if cap <= 0:
                continue
            for alt in alts:
                if claim.requirements.compatible(alt, ALLOW_UNDEFINED) is not None:
                    continue
                take = self._add_to_claim(claim, group, alt, min(len(pending), cap), upsize)
                if take:
                    claim.pods.extend(pending[:take])
                    self._record(group, claim, pending[:take])
                    pending = pending[take:]
                    free, least = claim.free, self.min_request
                    closed = closed or free[0] < least[0] or free[1] < least[1] or free[2] < least[2]
                    break
        if closed:
            least = self.min_request
            self.open_claims = [
                c for c in self.open_claims if c.free[0] >= least[0] and c.free[1] >= least[1] and c.free[2] >= least[2]
            ]
        return pending

    def _standalone(self, group: _Group, alts: tuple[Requirements, ...], count: int) -> tuple[float, int] | None:
        """Price per pod, and pods per NodeClaim, of ``count`` pods of the group on NodeClaims of
        their own (from the first NodePool that takes them, without limits)."""
        for alt in alts:
            for pool in self.pools:
                cands = self._candidates(pool, group, alt)
                if isinstance(cands, str) or pool.remaining is not None:
                    continue
                best = cands.best(count)
                return cands.prices[best] / min(cands.caps[best], count), cands.caps[best]
        return None

    def _few_nodes(self, group: _Group, alts: tuple[Requirements, ...], count: int) -> bool:
        standalone = self._standalone(group, alts, count)
        return standalone is not None and standalone[1] * _GROW_MAX_NODES > count

    def _grow_claims(
        self,
        group: _Group,
        pending: list[str],
        alts: tuple[Requirements, ...],
        blocked: set[int],
    ) -> list[str]:
        """Move open NodeClaims onto a larger instance type when that costs less per pod than
        new NodeClaims would: pods of different shapes then share nodes (a memory-heavy pod
        turns a compute node into a general-purpose one) instead of each shape getting its own."""
        for _ in range(_GROW_PASSES):
            if not pending:
                break
            found = self._standalone(group, alts, len(pending))
            if found is None:
                break
            standalone, per_node = found
            cap = min(len(pending), per_node)
            # One scan finds each NodeClaim's best growth; the best ones are then applied in order.
            options: list[tuple[float, int, int, _Claim, Requirements, list[InstanceType], list[float], int]] = []
            for claim in self.tails[-_GROW_WINDOW:]:
                option = self._best_growth(claim, group, alts, blocked, standalone, cap)
                if option is not None:
                    options.append(option)
            if not options:
                break
            options.sort(key=lambda o: (o[0], o[1], o[2]))
            applied = False
            for _marginal, _k, _index, claim, reqs, types, prices, i in options:
                if not pending:
                    break
                take = min(res.max_count(group.requests, types[i].allocatable, claim.used), len(pending))
                if take <= 0:
                    continue
                used = res.add(claim.used, group.requests, take)
                strict = claim.pool.min_values and self.strict_min_values
                if strict and min_values_violation(reqs, _fitting(types, i, used)) is not None:
                    continue
                if types is not claim.types:
                    claim.start = 0
                claim.requirements, claim.types, claim.prices = reqs, types, prices
                claim.used = used
                claim.advance()
                claim.pods.extend(pending[:take])
                self._record(group, claim, pending[:take])
                pending = pending[take:]
                applied = True
            if not applied:
                break
        return pending

    def _best_growth(
        self,
        claim: _Claim,
        group: _Group,
        alts: tuple[Requirements, ...],
        blocked: set[int],
        standalone: float,
        cap: int,
    ) -> tuple[float, int, int, _Claim, Requirements, list[InstanceType], list[float], int] | None:
        """The larger type of one NodeClaim that adds the group's pods most cheaply per pod,
        if that beats ``standalone`` (the price per pod of new NodeClaims)."""
        if id(claim) in blocked or not self._tolerates(group, claim.pool.input.taints):
            return None
        alt = next((a for a in alts if claim.requirements.compatible(a, ALLOW_UNDEFINED) is None), None)
        if alt is None:
            return None
        reqs = claim.requirements.add(alt) if len(alt) else claim.requirements
        if reqs == claim.requirements:
            types, prices, first = claim.types, claim.prices, claim.start
        else:
            types, prices = self._narrow(claim.types, claim.requirements, reqs)
            first = 0
        best: tuple[float, int, int, _Claim, Requirements, list[InstanceType], list[float], int] | None = None
        # A larger type costs at least (price - now) / cap per pod: stop once that cannot win.
        budget = claim.price + standalone * cap
        now, used, request = claim.price, claim.used, group.requests
        scanned = 0
        for i in range(first, len(types)):
            price = prices[i]
            if price >= budget or scanned == _GROW_TYPES:
                break
            if price <= now + _PRICE_EPSILON:
                continue
            alloc = types[i].allocatable
            if not res.fits(used, alloc):
                continue
            scanned += 1
            k = min(res.max_count(request, alloc, used), cap)
            if k <= 0:
                continue
            marginal = (price - now) / k
            if marginal < standalone * (1 - 1e-9) and (best is None or (marginal, -k) < (best[0], best[1])):
                best = (marginal, -k, claim.index, claim, reqs, types, prices, i)
                budget = min(budget, now + marginal * cap)
        return best

    def _add_to_claim(self, claim: _Claim, group: _Group, alt: Requirements, count: int, upsize: bool = False) -> int:
        """Add up to ``count`` pods of the group without making the NodeClaim pricier (unless
        ``upsize``: pods that can only go here may move it onto a larger type)."""
        reqs = claim.requirements.add(alt) if len(alt) else claim.requirements
        if reqs == claim.requirements:
            types, prices, first = claim.types, claim.prices, claim.start
        else:
            types, prices = self._narrow(claim.types, claim.requirements, reqs)
            first = 0
            while first < len(types) and not res.fits(claim.used, types[first].allocatable):
                first += 1
            if first == len(types) or (not upsize and prices[first] > claim.price + _PRICE_EPSILON):
                return 0
        best = claim.room(group.requests, types, prices, first, upsize)
        if group.host_ports:
            best = min(best, 1)
        take = min(best, count)
        if take <= 0:
            return 0
        used = res.add(claim.used, group.requests, take)
        strict = claim.pool.min_values and self.strict_min_values
        if strict and min_values_violation(reqs, _fitting(types, first, used)) is not None:
            return 0
        claim.requirements, claim.types, claim.prices, claim.start = reqs, types, prices, first
        claim.used = used
        claim.ports |= group.host_ports
        claim.advance()
        return take

    def _narrow(
        self, types: list[InstanceType], old: Requirements, new: Requirements
    ) -> tuple[list[InstanceType], list[float]]:
        """``types`` (allowed by ``old``) that ``new`` still allows, cheapest first under ``new``.
        Cached: NodeClaims opened from the same candidates share their type lists."""
        key = (id(types), new)
        hit = self._narrow_cache.get(key)
        if hit is not None and hit[0] is types:
            return hit[1], hit[2]
        kept = [it for it in types if type_matches(it, new)] if _type_keys_changed(old, new) else types
        narrowed, prices = self.pricer.sorted_types(kept, new)
        self._narrow_cache[key] = (types, narrowed, prices)
        return narrowed, prices

    def _new_claim(
        self, group: _Group, pending: list[str], alts: tuple[Requirements, ...], cap: int, together: bool = False
    ) -> int | Reasons:
        """Open a NodeClaim for the group's pending pods: the number placed, or why not per pool.
        ``together``: all of them or none (pods with hostname affinity to each other)."""
        reasons: dict[str, list[str]] = {}
        count = len(pending) if together else min(len(pending), cap)
        for alt_index, alt in enumerate(alts):
            for pool in self.pools:
                outcome = self._try_pool(pool, group, alt, count, together)
                if not isinstance(outcome, str):
                    claim, take, partial = outcome
                    if partial:
                        self.tails.append(claim)
                    claim.index = len(self.claims)
                    claim.pods.extend(pending[:take])
                    self.claims.append(claim)
                    self.open_claims.append(claim)
                    self.targets[id(claim)] = claim
                    self._record(group, claim, pending[:take])
                    return take
                prefix = f"node affinity term {alt_index + 1}: " if len(alts) > 1 else ""
                reasons.setdefault(pool.input.name, []).append(prefix + outcome)
        merged = {name: "; ".join(parts) for name, parts in reasons.items()}
        return merged or {NO_NODEPOOL: "no NodePool is defined"}

    def _candidates(self, pool: _Pool, group: _Group, alt: Requirements) -> _Candidates | str:
        """Instance types of a pool that can hold at least one pod of the group (cached)."""
        key = (
            id(pool),
            tuple(sorted(group.requests.items())),
            group.tolerations,
            group.effects,
            bool(group.host_ports),
            alt,
        )
        cached = self._candidate_cache.get(key)
        if cached is not None:
            return cached
        outcome = self._compute_candidates(pool, group, alt)
        self._candidate_cache[key] = outcome
        return outcome

    def _compute_candidates(self, pool: _Pool, group: _Group, alt: Requirements) -> _Candidates | str:
        if pool.input.error:
            return pool.input.error
        taint = untolerated(group.tolerations, pool.input.taints, group.effects)
        if taint is not None:
            return f"did not tolerate taint {taint}"
        conflict = pool.requirements.compatible(alt, ALLOW_UNDEFINED)
        if conflict is not None:
            return f"incompatible requirements: {conflict}"
        if len(alt):
            reqs = pool.requirements.add(alt)
            base_alt = Requirements(r for k, r in alt.items() if k not in _OFFERING_KEYS)
            if len(base_alt) < len(alt):
                # Only zone / capacity-type pins on top of an alternative already worked out:
                # re-price its candidates instead of filtering the whole pool again.
                base = self._candidates(pool, group, base_alt)
                if isinstance(base, str):
                    return base
                kept, prices = self.pricer.sorted_types(base.types, reqs)
                if not kept:
                    return "no instance type is offered there" + _describe_offering_reqs(reqs)
                caps_by_name = dict(zip((it.name for it in base.types), base.caps, strict=True))
                return _Candidates(reqs, kept, prices, [caps_by_name[it.name] for it in kept])
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
        limit = 1 if group.host_ports else _UNBOUNDED
        return _Candidates(
            requirements=reqs,
            types=[types[i] for i in fitting],
            prices=[prices[i] for i in fitting],
            caps=[min(res.max_count(group.requests, types[i].allocatable, pool.daemon), limit) for i in fitting],
        )

    def _try_pool(
        self, pool: _Pool, group: _Group, alt: Requirements, count: int, together: bool = False
    ) -> tuple[_Claim, int, bool] | str:
        cands = self._candidates(pool, group, alt)
        if isinstance(cands, str):
            return cands
        types, prices, caps = cands.types, cands.prices, cands.caps
        remaining = pool.remaining
        if together:
            whole = [i for i, cap in enumerate(caps) if cap >= count]
            if not whole:
                return f"no instance type holds all {count} pods that must share a node (largest holds {max(caps)})"
            keep = [
                i for i in whole if remaining is None or all(_capacity(types[i], k) <= v for k, v in remaining.items())
            ]
            if not keep:
                return _limit_reason(pool, [types[i] for i in whole], remaining or {})
            types, prices, caps = [types[i] for i in keep], [prices[i] for i in keep], [caps[i] for i in keep]
            best = 0
        elif remaining is not None:
            indices = [i for i, it in enumerate(types) if all(_capacity(it, k) <= v for k, v in remaining.items())]
            if not indices:
                return _limit_reason(pool, types, remaining)
            best = _best_index(indices, prices, caps, types, count)
            types, prices, caps = [types[i] for i in indices], [prices[i] for i in indices], [caps[i] for i in indices]
            best = indices.index(best)
        else:
            best = cands.best(count)
        take = min(caps[best], count)
        if pool.min_values and self.strict_min_values:
            take = self._min_values_take(cands.requirements, types, caps, pool.daemon, group, take)
            if take <= 0 or (together and take < count):
                fitting = _fitting(types, 0, res.add(pool.daemon, group.requests, max(take, 1)))
                return min_values_violation(cands.requirements, fitting) or "minValues cannot be met"
            best = min((i for i in range(len(types)) if caps[i] >= take), key=lambda i: (prices[i], types[i].name))
        partial = take < caps[best]
        if remaining is not None:
            # Under a limit the NodeClaim keeps only types no larger than the chosen one on the
            # limited resources, so it is charged exactly what it may launch (Karpenter charges
            # the largest option; keeping oversized fallbacks would waste the limit).
            chosen = types[best]
            keep = [
                i for i in range(len(types)) if all(_capacity(types[i], k) <= _capacity(chosen, k) for k in remaining)
            ]
            best = keep.index(best)
            types, prices, caps = [types[i] for i in keep], [prices[i] for i in keep], [caps[i] for i in keep]
            for name in remaining:
                remaining[name] -= _capacity(chosen, name)
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
        return claim, take, partial

    def _min_values_take(
        self,
        reqs: Requirements,
        types: list[InstanceType],
        caps: list[int],
        daemon: Mapping[str, int],
        group: _Group,
        take: int,
    ) -> int:
        """The most pods (at most ``take``) a NodeClaim can hold while its instance types keep
        minValues distinct values; 0 when even one pod cannot."""
        for candidate in sorted({c for c in caps if c < take} | {take}, reverse=True):
            used = res.add(daemon, group.requests, candidate)
            if min_values_violation(reqs, _fitting(types, 0, used)) is None:
                return candidate
        return 0

    def _zones_of(self, it: InstanceType, capacity_type: str) -> frozenset[tuple[str, str]]:
        key = (id(it), capacity_type)
        zones = self._zone_cache.get(key)
        if zones is None:
            zones = frozenset(
                (o.zone, o.zone_id) for o in it.offerings if o.available and o.capacity_type == capacity_type
            )
            self._zone_cache[key] = zones
        return zones

    # -- explanations ------------------------------------------------------------------------------
    def explain(self, key: str, result: SchedulingResult) -> PodExplanation:
        """Per NodePool, where the pod goes or why it cannot go there (after ``run``)."""
        group = self.group_of[key]
        where = self.placed_in.get(key)
        per_pool: dict[str, str] = {}
        unschedulable = next((u for u in result.unschedulable if u.pod == key), None)
        chosen: NodeClaimPlan | None = None
        if where is not None and where.startswith("nodeclaim-") and where not in {n.input.name for n in self.nodes}:
            chosen = result.node_claims[int(where.removeprefix("nodeclaim-"))]
        for pool in self.pools:
            name = pool.input.name
            if chosen is not None and chosen.nodepool == name:
                others = len(chosen.pods) - 1
                per_pool[name] = (
                    f"new NodeClaim {where}: {chosen.instance_types[0]} (+{len(chosen.instance_types) - 1} other "
                    f"types), {chosen.capacity_type}, zones {','.join(chosen.zones)}, ${chosen.price:.4f}/hour, "
                    f"shared with {others} other pod(s)"
                )
                continue
            if unschedulable is not None and name in unschedulable.reasons:
                per_pool[name] = unschedulable.reasons[name]
                continue
            why = [self._candidates(pool, group, alt) for alt in group.requirements]
            reasons = [w for w in why if isinstance(w, str)]
            if len(reasons) < len(why):
                if chosen is not None:
                    per_pool[name] = (
                        f"could host it, but NodePool {chosen.nodepool} comes first (higher weight, or an open "
                        f"NodeClaim with room); this one has weight {pool.input.weight}"
                    )
                else:
                    per_pool[name] = f"could host it, but existing node {where} has room for it"
            else:
                per_pool[name] = "; ".join(reasons)
        if not self.pools:
            per_pool[NO_NODEPOOL] = "no NodePool is defined"
        placement = None
        if where is not None:
            placement = f"new NodeClaim {where} (NodePool {chosen.nodepool})" if chosen else f"existing node {where}"
        return PodExplanation(key, placement, per_pool)

    # -- output --------------------------------------------------------------------------------
    def _result(self) -> SchedulingResult:
        plans = tuple(self._plan(c) for c in self.claims)
        existing = tuple(
            ExistingPlacement(n.input.name, tuple(n.placed), n.input.in_flight) for n in self.nodes if n.placed
        )
        return SchedulingResult(plans, existing, tuple(self.unschedulable))

    def _plan(self, claim: _Claim) -> NodeClaimPlan:
        reqs = claim.requirements
        requests = dict(sorted(claim.used.items()))
        # NodeClaims of one group are often alike (same type list, requirements and usage):
        # their instance types, capacity type, zones and price are worked out once.
        key = (id(claim.types), claim.start, reqs, tuple(requests.items()))
        hit = self._plan_cache.get(key)
        if hit is None or hit[0] is not claim.types:
            table = self.pricer.table(reqs)
            fitting = _fitting(claim.types, claim.start, claim.used)
            cheapest = table[fitting[0].name]
            assert cheapest is not None  # types without an allowed offering were filtered out
            zone_req = reqs.get(wk.LABEL_ZONE)
            zone_id_req = reqs.get(wk.LABEL_ZONE_ID)
            offered: set[tuple[str, str]] = set()
            for it in fitting:
                offered |= self._zones_of(it, cheapest.capacity_type)
            zones = tuple(
                sorted(
                    zone
                    for zone, zone_id in offered
                    if (zone_req is None or zone_req.has(zone)) and (zone_id_req is None or zone_id_req.has(zone_id))
                )
            )
            names = tuple(it.name for it in fitting)
            hit = (claim.types, names, cheapest, zones)
            self._plan_cache[key] = hit
        _, names, cheapest, zones = hit
        return NodeClaimPlan(
            nodepool=claim.pool.input.name,
            requirements=reqs,
            instance_types=names,
            capacity_type=cheapest.capacity_type,
            zones=zones,
            pods=tuple(claim.pods),
            requests=requests,
            price=cheapest.price,
        )


def _fitting(types: Sequence[InstanceType], first: int, used: Mapping[str, int]) -> list[InstanceType]:
    """The (at most MAX_INSTANCE_TYPES) cheapest types from ``first`` on that hold ``used``."""
    out: list[InstanceType] = []
    for it in types[first:]:
        if res.fits(used, it.allocatable):
            out.append(it)
            if len(out) == MAX_INSTANCE_TYPES:
                break
    return out


def min_values_violation(reqs: Requirements, types: Sequence[InstanceType]) -> str | None:
    """Karpenter's minValues: a NodeClaim's instance types must span that many distinct values."""
    for key, req in sorted(reqs.items()):
        if not req.min_values:
            continue
        if key in _OFFERING_KEYS:
            field_name = {wk.LABEL_ZONE: "zone", wk.LABEL_CAPACITY_TYPE: "capacity_type"}.get(key, "zone_id")
            seen = {getattr(o, field_name) for it in types for o in it.offerings if o.available}
            seen = {v for v in seen if req.has(v)}
        else:
            seen = {it.labels[key] for it in types if key in it.labels}
        if len(seen) < req.min_values:
            shown = ", ".join(sorted(seen)[:8]) or "none"
            return (
                f"minValues: {key} needs {req.min_values} distinct values among the instance types that fit, "
                f"only {len(seen)} ({shown})"
            )
    return None


def water_fill(counts: Mapping[str, int], domains: Sequence[str], n: int) -> dict[str, int]:
    """Spread ``n`` pods over ``domains`` one at a time onto the emptiest (ties by name):
    how many each gets. Computed level by level, not pod by pod."""
    quota = dict.fromkeys(domains, 0)
    left = n
    while left > 0:
        level = min(counts[d] + quota[d] for d in domains)
        at_level = sorted(d for d in domains if counts[d] + quota[d] == level)
        higher = [counts[d] + quota[d] for d in domains if counts[d] + quota[d] > level]
        step = (min(higher) - level) if higher else None
        if step is not None and step * len(at_level) <= left:
            for d in at_level:
                quota[d] += step
            left -= step * len(at_level)
            continue
        per, extra = divmod(left, len(at_level))
        for i, d in enumerate(at_level):
            quota[d] += per + (1 if i < extra else 0)
        left = 0
    return quota


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


def _relevant_label_keys(inp: SchedulingInput) -> frozenset[str]:
    """Label keys some selector looks at: only these separate otherwise identical pods."""
    selectors: list[Selector] = []
    for pod in inp.pods:
        selectors += [s.selector for s in pod.spread] + [t.selector for t in pod.affinity]
    for node in inp.nodes:
        for running in node.running:
            selectors += [t.selector for t in running.anti_affinity]
    keys: set[str] = set()
    for selector in set(selectors):
        keys |= {k for k, _ in selector.match_labels} | {k for k, _, _ in selector.expressions}
    return frozenset(keys)


def _group(pods: Sequence[PodInput], ignore_preferences: bool, inp: SchedulingInput) -> list[_Group]:
    """Identical pods grouped; groups ordered largest first (cpu, then memory), then by key."""
    relevant = _relevant_label_keys(inp)
    groups: dict[tuple[object, ...], _Group] = {}
    for pod in pods:
        labels = tuple(sorted((k, v) for k, v in pod.labels.items() if k in relevant)) if relevant else ()
        signature = (
            tuple(sorted(pod.requests.items())),
            pod.requirements,
            pod.tolerations,
            pod.host_ports,
            pod.preferred,
            pod.spread,
            pod.affinity,
            pod.error,
            pod.namespace if relevant else "",
            labels,
        )
        group = groups.get(signature)
        if group is None:
            prefs = initial_preferences(pod, ignore_preferences)
            groups[signature] = _Group(
                pods=[pod],
                requests=pod.requests,
                constraints=prefs.constraints(pod),
                preferences=prefs,
                tolerations=pod.tolerations,
                host_ports=pod.host_ports,
                namespace=pod.namespace,
                labels=pod.labels,
                error=pod.error,
            )
        else:
            group.pods.append(pod)
    ordered = list(groups.values())
    for group in ordered:
        group.pods.sort(key=lambda p: p.key)
    ordered.sort(key=_size_order)
    return ordered


def _size_order(group: _Group) -> tuple[int, int, int, str]:
    """Largest first: scarce extended resources (GPUs, ...), then cpu, then memory (as Karpenter)."""
    requests = group.requests
    extended = sum(v for k, v in requests.items() if k not in _BASIC_RESOURCES)
    return (-extended, -requests.get("cpu", 0), -requests.get("memory", 0), group.first.key)


def _regroup(group: _Group, pods: list[PodInput], prefs: Preferences) -> _Group:
    """The same pods again, with (possibly relaxed) preferences."""
    return _Group(
        pods=pods,
        requests=group.requests,
        constraints=prefs.constraints(pods[0]),
        preferences=prefs,
        tolerations=group.tolerations,
        host_ports=group.host_ports,
        namespace=group.namespace,
        labels=group.labels,
        error=group.error,
    )


def solve(inp: SchedulingInput) -> SchedulingResult:
    """Plan NodeClaims for the pending pods of ``inp``. Pure and deterministic."""
    return _Solver(inp).run()


def explain(inp: SchedulingInput, pod_key: str) -> tuple[SchedulingResult, PodExplanation]:
    """Solve, then say for one pending pod, per NodePool, where it goes or why not."""
    if not any(p.key == pod_key for p in inp.pods):
        raise KeyError(pod_key)
    solver = _Solver(inp)
    result = solver.run()
    return result, solver.explain(pod_key, result)
