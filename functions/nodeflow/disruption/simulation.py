"""Simulation: where would the pods of some nodes go if those nodes left? Pure (the solver, no clock).

``Simulator.run(candidates, cluster=True)`` simulates as Karpenter does: the pods of nodes already being
deleted (they are leaving too) and the cluster's pending pods take their places first, on any other node
(existing or launching; a pending pod that fits nowhere is not the candidates' concern), then the
candidates' movable pods (not those held by do-not-disrupt or a PodDisruptionBudget) go to the other nodes
plus new NodeClaims from any NodePool, sharing new capacity with the pods carried over. Nodes being deleted
are no destination; neither, for the candidates' pods, is a node inside its consolidateAfter window
(``on_hold``: its NodeClaim's last pod event, else its initialization, less than consolidateAfter ago), in
consolidation only (``run(..., consolidation=True)``, Karpenter's IsConsolidationSimulation: drift's
simulation does not pass it, so a drifted node's pods may go to such a node). A
simulation that needs an uninitialized node (not yet initialized, or still launching) for a candidate's pod
fails: pods are packed on initialized nodes first, and only if one would still need an uninitialized node
is the move refused (Karpenter cannot trust a node that has not finished initializing). Drift uses
``run(candidates)``: the candidate's pods only, onto any node (consolidateAfter windows do not hold nodes).

Before simulating, ``Simulator.hopeless`` rules candidates out cheaply (a necessary condition, see
there), which keeps a round over a full cluster fast.

What a simulation must not decide: whether its outcome is worth a command (``consolidation.consolidate``,
the methods) and whether policies or budgets allow it (``method.Round``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from nodeflow.api import labels as wk
from nodeflow.api.core import Pod
from nodeflow.api.duration import shift
from nodeflow.cluster import ClusterState
from nodeflow.disruption.candidates import Candidate, _aware
from nodeflow.disruption.model import Move
from nodeflow.plan import pod_converter
from nodeflow.scheduling.pricing import type_matches
from nodeflow.scheduling.solver import solve, solve_packed
from nodeflow.scheduling.types import (
    CeilingInput,
    GroupLimitInput,
    NodeInput,
    PodInput,
    SchedulingInput,
    SchedulingResult,
    UnschedulablePod,
)

__all__ = ["HOPELESS", "PodInputs", "Simulator", "moves_of", "on_hold"]


def on_hold(candidates: Iterable[Candidate], last_pod_events: Mapping[str, datetime], now: datetime) -> frozenset[str]:
    """The nodes inside their consolidateAfter window: no pod may be consolidated onto them. The window
    starts at the last pod event (the round's record, else the NodeClaim's status.lastPodEventTime), else at
    the NodeClaim's initialization; consolidateAfter 0 or Never holds nothing, nor does an uninitialized node."""
    held: set[str] = set()
    for c in candidates:
        after = c.pool.spec.disruption.consolidate_after_seconds
        status = c.claim.status
        initialized = status.condition("Initialized") if status is not None else None
        if not after or initialized is None or initialized.status != "True":
            continue
        since = last_pod_events.get(c.name) or (status.last_pod_event_time if status is not None else None)
        since = since or initialized.last_transition_time
        if since is not None and shift(_aware(since), after) > now:
            held.add(c.name)
    return frozenset(held)


HOPELESS = "its pods fit neither on the other nodes nor on any cheaper instance type"  # why ``hopeless`` rules out


@dataclass(frozen=True, slots=True)
class _Offer:
    price: float
    allocatable: Mapping[str, int]


@dataclass(slots=True)
class _Fits:
    """The nodes found so far whose room holds one request shape, and how far the scan of the nodes has got."""

    found: list[str] = field(default_factory=list)
    scanned: int = 0


def _free(node: NodeInput) -> dict[str, int]:
    return {k: max(0, v - node.requested.get(k, 0)) for k, v in node.allocatable.items()}


def _uninitialized(node: NodeInput) -> bool:
    return node.in_flight or (node.nodepool is not None and node.labels.get(wk.LABEL_INITIALIZED) != "true")


class PodInputs(Mapping[str, PodInput]):
    """The bound pods of ``state`` as solver input, keyed "namespace/name", converted as
    ``nodeflow.plan.convert_pods`` converts them but only when first needed, in batches (``load``): a round
    over a full cluster, where ``Simulator.hopeless`` rules every candidate out, converts none of its pods.
    ``requests`` gives a pod's requests without converting it."""

    def __init__(self, state: ClusterState, pods: Iterable[Pod]) -> None:
        self._state = state
        self._pods = {p.key: p for p in pods}
        self._done: dict[str, PodInput] = {}
        self._convert: Callable[[Iterable[Pod]], dict[str, PodInput]] | None = None  # built at the first batch

    def __getitem__(self, key: str) -> PodInput:
        hit = self._done.get(key)
        if hit is None:
            self.load((key,))
            hit = self._done[key]  # KeyError for a pod it does not hold
        return hit

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def __iter__(self) -> Iterator[str]:
        return iter(self._pods)

    def __len__(self) -> int:
        return len(self._pods)

    def load(self, keys: Iterable[str]) -> None:
        """Convert those of ``keys`` not converted yet, together, as ``convert_pods`` does (one converter for
        every batch: the cluster's namespace and volume maps are built once, not per batch)."""
        missing = [self._pods[k] for k in dict.fromkeys(keys) if k in self._pods and k not in self._done]
        if missing:
            if self._convert is None:
                self._convert = pod_converter(self._state)
            self._done.update(self._convert(missing))

    def requests(self, key: str) -> Mapping[str, int] | None:
        """The pod's requests in milli-units (``PodInput.requests``: ``PodSpec.effective_requests``), None
        for a pod it does not hold."""
        hit = self._done.get(key)
        if hit is not None:
            return hit.requests
        pod = self._pods.get(key)
        return pod.spec.effective_requests() if pod is not None else None


@dataclass(frozen=True, slots=True)
class Simulator:
    base: SchedulingInput  # the whole cluster's solver input (pools, nodes, daemons)
    pods: Mapping[str, PodInput]  # every bound pod, as solver input
    # nodes inside their consolidateAfter window (see ``on_hold``): no destination in a consolidation simulation
    held: frozenset[str] = frozenset()
    draining: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # deleting node -> its movable pods
    # NodeflowPolicies: the moving pods with the NodePools they may not get new capacity in (``PodInput.denied``,
    # ``nodeflow.disruption.policy.RoundPolicy.denials``); None: no policy restricts access. (The pending pods of
    # ``base`` carry theirs already.)
    deny: Callable[[Sequence[PodInput]], Sequence[PodInput]] | None = None
    # NodeflowPolicies: the $/hour ceilings and group limits the solver is given in a simulation moving these pods
    # off these candidates (``nodeflow.disruption.policy.RoundPolicy.limits``: the candidates counted as freed);
    # None: the solver gets none (``base`` carries none either).
    limits: (
        Callable[
            [Sequence[Candidate], Sequence[PodInput]], tuple[tuple[CeilingInput, ...], tuple[GroupLimitInput, ...]]
        ]
        | None
    ) = None
    free: dict[str, int] = field(init=False)  # room left on every schedulable node, summed
    room: dict[str, list[dict[str, int]]] = field(init=False)  # node name -> its room (schedulable, not held)
    offers: tuple[_Offer, ...] = field(init=False)  # every type any usable pool may launch, cheapest first
    room_names: tuple[str, ...] = field(init=False)  # the nodes of ``room``, in order
    # requests (sorted items) -> the nodes found whose room holds them alone; scanned as asked (``_fits_elsewhere``)
    fits: dict[tuple[tuple[str, int], ...], _Fits] = field(init=False)

    def __post_init__(self) -> None:
        free: dict[str, int] = {}
        room: dict[str, list[dict[str, int]]] = {}
        for node in self.base.nodes:
            if node.schedulable and node.name not in self.held:
                room.setdefault(node.name, []).append(_free(node))
            if node.schedulable and node.name not in self.held and node.name not in self.draining:
                for k, v in _free(node).items():
                    free[k] = free.get(k, 0) + v
        offers: list[_Offer] = []
        for pool in self.base.nodepools:
            if pool.error is not None:
                continue
            zone = pool.requirements.get(wk.LABEL_ZONE)
            ctype = pool.requirements.get(wk.LABEL_CAPACITY_TYPE)
            for it in pool.instance_types:
                if not type_matches(it, pool.requirements):
                    continue
                prices = [
                    o.price
                    for o in it.offerings
                    if o.available
                    and (zone is None or zone.has(o.zone))
                    and (ctype is None or ctype.has(o.capacity_type))
                ]
                if prices:
                    offers.append(_Offer(min(prices), it.allocatable))
        object.__setattr__(self, "free", free)
        object.__setattr__(self, "room", room)
        object.__setattr__(self, "offers", tuple(sorted(offers, key=lambda o: o.price)))
        object.__setattr__(self, "room_names", tuple(room))
        object.__setattr__(self, "fits", {})

    def _leaving(self, candidates: Sequence[Candidate]) -> list[str]:
        """The pods that must find a place: the candidates' and those of nodes being deleted."""
        keys = [p.key for c in candidates for p in c.movable if p.key not in c.held]
        for pods in self.draining.values():
            keys.extend(pods)
        return keys

    def hopeless(self, candidates: Sequence[Candidate], before: float) -> str | None:
        """A cheap NECESSARY condition checked before simulating: the pods that cannot fit in the room
        left on the other nodes (summed, constraints ignored) must fit one instance type cheaper than
        ``before``. Returns why not, or None when a simulation is worth running."""
        floor = self.replacement_floor(candidates, before)
        if floor is None or floor < before:
            return None
        return HOPELESS

    def replacement_floor(
        self, candidates: Sequence[Candidate], below: float = math.inf, *, stranded: bool = False
    ) -> float | None:
        """What replacing ``candidates`` costs at least: None when the pods that must move may fit in the room
        left on the other nodes (summed, constraints ignored: a delete may exist); else the $/hour of the
        cheapest instance type any usable NodePool offers that holds what does not fit there (math.inf when none
        below ``below`` does). With ``stranded``, the pods that no other node's room holds on its own must fit
        there too (``_stranded``). A cheap bound, no simulation."""
        free = dict(self.free)
        for name in dict.fromkeys(c.name for c in candidates):
            for own in self.room.get(name, ()):
                for k, v in own.items():
                    free[k] = free.get(k, 0) - v
        need: dict[str, int] = {}
        for key in self._leaving(candidates):
            for k, v in (self._requests(key) or {}).items():
                need[k] = need.get(k, 0) + v
        need = {k: v - free.get(k, 0) for k, v in need.items() if v > free.get(k, 0)}
        if stranded:
            for k, v in self._stranded(candidates).items():
                need[k] = max(need.get(k, 0), v)
        if not need:
            return None
        for offer in self.offers:
            if offer.price >= below:
                break
            if all(offer.allocatable.get(k, 0) >= v for k, v in need.items()):
                return offer.price
        return math.inf

    def _stranded(self, candidates: Sequence[Candidate]) -> dict[str, int]:
        """The summed requests of the pods that must move and that the room of no other node (not a candidate,
        not being deleted) holds on its own, constraints ignored: whatever the simulation does, new capacity
        takes them."""
        gone = {c.name for c in candidates} | set(self.draining)
        need: dict[str, int] = {}
        for key in self._leaving(candidates):
            requests = self._requests(key) or {}
            if not self._fits_elsewhere(tuple(sorted(requests.items())), gone):
                for k, v in requests.items():
                    need[k] = need.get(k, 0) + v
        return need

    def _fits_elsewhere(self, shape: tuple[tuple[str, int], ...], gone: set[str]) -> bool:
        """Does the room of a node not in ``gone`` hold ``shape`` alone? The nodes are scanned in order, at most
        once a round for each shape (``fits``)."""
        fits = self.fits.setdefault(shape, _Fits())
        if any(name not in gone for name in fits.found):
            return True
        names = self.room_names
        while fits.scanned < len(names):
            name = names[fits.scanned]
            fits.scanned += 1
            if any(all(r.get(k, 0) >= v for k, v in shape) for r in self.room[name]):
                fits.found.append(name)
                if name not in gone:
                    return True
        return False

    def right_sized(self, candidate: Candidate) -> bool:
        """No instance type cheaper than ``candidate`` holds its movable pods (requests summed, constraints
        ignored): replaced alone it saves nothing, and only room on other nodes can take its pods."""
        if candidate.price is None:
            return False
        need: dict[str, int] = {}
        for pod in candidate.movable:
            if pod.key not in candidate.held:
                for k, v in (self._requests(pod.key) or {}).items():
                    need[k] = need.get(k, 0) + v
        for offer in self.offers:
            if offer.price >= candidate.price:
                return True
            if all(offer.allocatable.get(k, 0) >= v for k, v in need.items()):
                return False
        return True

    def requests_of(self, key: str) -> Mapping[str, int] | None:
        """A pod's requests (milli-units): a candidate's or a pending pod's; None for one it does not know."""
        found = self._requests(key)
        if found is None:
            pending = next((p for p in self.base.pods if p.key == key), None)
            found = pending.requests if pending is not None else None
        return found

    def _requests(self, key: str) -> Mapping[str, int] | None:
        if isinstance(self.pods, PodInputs):
            return self.pods.requests(key)  # no conversion needed for the sums
        inp = self.pods.get(key)
        return inp.requests if inp is not None else None

    def _solve(
        self,
        pods: tuple[PodInput, ...],
        nodes: Iterable[NodeInput],
        closed: frozenset[str],
        limits: tuple[tuple[CeilingInput, ...], tuple[GroupLimitInput, ...]] = ((), ()),
        packed: bool = False,
    ) -> SchedulingResult:
        kept = tuple(
            n if n.name not in closed else dataclasses.replace(n, schedulable=False, leaving=True) for n in nodes
        )
        how = solve_packed if packed else solve
        if limits[0] or limits[1]:
            return how(
                dataclasses.replace(self.base, pods=pods, nodes=kept, ceilings=limits[0], group_limits=limits[1])
            )
        return how(dataclasses.replace(self.base, pods=pods, nodes=kept))

    def _others_first(self, nodes: list[NodeInput]) -> tuple[list[NodeInput], tuple[PodInput, ...], str | None]:
        """Place the pods of the nodes being deleted and the pending pods first, on ``nodes`` (any node may take
        those, initialized or not, held or not, as Karpenter exempts them): (``nodes`` with them placed, those
        that need new capacity, why a pod of a node being deleted finds no place at all)."""
        leaving = [self.pods[k] for keys in self.draining.values() for k in keys if k in self.pods]
        if self.deny is not None and leaving:
            leaving = list(self.deny(leaving))
        draining = self._draining_keys  # the plan may already count them pending: once is enough
        pods = (*leaving, *(p for p in self.base.pods if p.key not in draining))
        if not pods:
            return nodes, (), None
        by_key = {p.key: p for p in pods}
        result = self._solve(pods, nodes, frozenset())
        stuck = [u.pod for u in result.unschedulable if u.pod in self._draining_keys]
        if stuck:
            return nodes, (), f"pod {stuck[0]} of a node being deleted cannot be rescheduled"
        carried = tuple(by_key[k] for nc in result.node_claims for k in nc.pods if k in by_key)
        placed = {e.name: e.pods for e in result.existing}
        out: list[NodeInput] = []
        for n in nodes:
            keys = placed.get(n.name, ())
            if keys:
                requested = dict(n.requested)
                for k in keys:
                    for r, v in by_key[k].requests.items():
                        requested[r] = requested.get(r, 0) + v
                n = dataclasses.replace(n, pods=(*n.pods, *keys), requested=requested)
            out.append(n)
        return out, carried, None

    @property
    def _draining_keys(self) -> frozenset[str]:
        return frozenset(k for keys in self.draining.values() for k in keys)

    def run(
        self,
        candidates: Sequence[Candidate],
        *,
        cluster: bool = False,
        consolidation: bool = False,
        packed: bool = False,
    ) -> SchedulingResult:
        """Where the candidates' pods go, or UNSCHEDULABLE entries (needing an uninitialized destination is
        one). With ``cluster`` (consolidation, as Karpenter simulates it), the pods of nodes being deleted and
        the pending pods take their places first and share the new capacity; pending pods that fit nowhere are
        not the candidates' concern. With ``consolidation`` (Karpenter's IsConsolidationSimulation, which only
        consolidation passes), the nodes inside their consolidateAfter window (``held``) take none of the
        candidates' pods; drift's simulation may use them. With ``packed``, the moving pods that need new capacity are
        packed as Karpenter's scheduler packs them (``solve_packed``: fewer, larger new NodeClaims) instead of
        sized for cost."""
        gone = {c.name for c in candidates} | (set(self.draining) if cluster else set())
        if isinstance(self.pods, PodInputs):  # one conversion for the whole simulation
            own_keys = (p.key for c in candidates for p in c.movable)
            self.pods.load((*own_keys, *(k for keys in self.draining.values() for k in keys)) if cluster else own_keys)
        own = tuple(
            self.pods[p.key] for c in candidates for p in c.movable if p.key in self.pods and p.key not in c.held
        )
        if self.deny is not None and own:
            own = tuple(self.deny(own))
        nodes = [n for n in self.base.nodes if n.name not in gone]
        pods = own
        if cluster:
            nodes, carried, stuck = self._others_first(nodes)
            if stuck is not None:
                return SchedulingResult((), (), (UnschedulablePod(own[0].key if own else "", {"": stuck}),))
            pods = (*own, *carried)
        limits = self.limits(candidates, pods) if self.limits is not None else ((), ())
        held = self.held if consolidation else frozenset()
        result = self._candidates_placed(pods, frozenset(p.key for p in own), nodes, held, limits, packed)
        if cluster and self.base.pods:
            pending = {p.key for p in self.base.pods}
            kept = tuple(u for u in result.unschedulable if u.pod not in pending)
            result = dataclasses.replace(result, unschedulable=kept)
        return result

    def _candidates_placed(
        self,
        pods: tuple[PodInput, ...],
        own: frozenset[str],
        nodes: list[NodeInput],
        held: frozenset[str],
        limits: tuple[tuple[CeilingInput, ...], tuple[GroupLimitInput, ...]] = ((), ()),
        packed: bool = False,
    ) -> SchedulingResult:
        unready = frozenset(n.name for n in nodes if _uninitialized(n))
        # initialized nodes first: only what they cannot take may reveal a need for an uninitialized node
        first = self._solve(pods, nodes, held | unready, limits, packed)
        if not unready or (not first.node_claims and not first.unschedulable):
            return first
        second = self._solve(pods, nodes, held, limits, packed)
        used = [(e.name, k) for e in second.existing if e.name in unready for k in e.pods if k in own]
        if not used:
            return first
        name, key = used[0]
        why = f"would schedule against uninitialized node {name}"
        return dataclasses.replace(second, unschedulable=(UnschedulablePod(key, {"": why}),))


def moves_of(result: SchedulingResult, only: Iterable[Candidate] | None = None) -> tuple[Move, ...]:
    """The moves of ``result`` (with ``only``: of those candidates' pods)."""
    keep = {p.key for c in only for p in c.movable} if only is not None else None
    moves = [Move(pod=p, node=e.name) for e in result.existing for p in e.pods]
    moves += [Move(pod=p, replacement=i) for i, nc in enumerate(result.node_claims) for p in nc.pods]
    return tuple(sorted((m for m in moves if keep is None or m.pod in keep), key=lambda m: m.pod))
