"""Re-packing: the last pass of a solve, for plans of modest size.

Pods are placed one group at a time, largest first, so a group of large CPU-heavy pods picks
the type that is cheapest per pod *for that group alone* (often a big compute type holding a
few of them), and the memory-heavy pods that come later open memory-optimised nodes of their
own. Mixing the two shapes on shared nodes can be cheaper: a 16-CPU pod leaves room on a
64-CPU compute node that a memory-heavy pod cannot use, but a general-purpose node holds both.

This pass takes every NodeClaim of a NodePool whose pods can go on any of its instance types
(no topology rule or selector looks at them, no node selector or affinity, no host ports, no
limits or minValues on the NodePool) and packs those pods again from scratch, greedily:

* each pod is given a value, its requests priced at the dual prices of the fractional covering
  LP "buy instance types so that their cpu and memory cover the pods' total" (the prices at
  which the cheapest mix of types is exactly worth its cost; no type is worth more than its
  price at them);
* one node at a time, every instance type on the NodePool's price/size frontier is filled
  largest-value-first with the pods left, and the type whose fill is worth the most per dollar
  opens the node (so CPU-heavy and memory-heavy pods end up together when a balanced type
  holds them for less);
* a few rounds correct the values (a pod size that landed on poorly used nodes is worth more in
  the next round, so it is paired first), and a few subsets are tried: all the NodeClaims, or
  only those worth less than 97 %, 95 %, ... of their price at the LP prices (well-packed ones
  stay as they are).

Every round stops as soon as what it spent plus the LP value of the pods left reaches the cost
to beat, so a plan that is already close to the bound costs little time. Only plans of at most
``MAX_CLAIMS`` NodeClaims are looked at (the Karpenter benchmark mix from 1,000 pods on has more
and never runs the pass).

The result replaces those NodeClaims only if it costs strictly less in total; otherwise they are
left exactly as they were (the plan stays byte-identical). Each new node is then priced as any
NodeClaim is: the cheapest of the NodePool's types that holds its pods, with the usual fallbacks.

Must not touch: NodeClaims outside the movable ones (topology, limits, minValues, reservations keep theirs); the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.nodeclaim import Claim
from nodeflow.scheduling.nodepools import Pool
from nodeflow.scheduling.types import PodInput

__all__ = ["MAX_CLAIMS", "MAX_SHAPES", "MAX_SIZES", "Shape", "dual_prices", "frontier", "repack", "repack_claims"]

# The pass runs on plans of at most this many NodeClaims (as the merge pass).
MAX_CLAIMS = 200
# ...over at most this many distinct pod sizes...
MAX_SIZES = 64
# ...and at most this many instance types of the NodePool's price/size frontier.
MAX_SHAPES = 96
# The new NodeClaims are kept only when they save at least this much per hour.
_MIN_SAVING = 1e-6

# The resources the LP prices; pods asking for anything else (GPUs, ...) are not re-packed.
_PRICED = ("cpu", "memory")
_MOVABLE_RESOURCES = frozenset({"cpu", "memory", "pods"})


@dataclass(frozen=True, slots=True)
class Shape:
    """An instance type as the pass sees it: room for pods (allocatable minus daemonsets), price."""

    name: str
    room: Mapping[str, int]
    price: float


def movable_requests(requests: Mapping[str, int]) -> bool:
    """Pods asking only for cpu, memory and a pod slot can be priced and moved by this pass."""
    return all(k in _MOVABLE_RESOURCES or v <= 0 for k, v in requests.items())


def frontier(
    types: Sequence[InstanceType], prices: Sequence[float], daemon: Mapping[str, int], limit: int = MAX_SHAPES
) -> list[Shape]:
    """The types (cheapest first) that no cheaper-or-equal type beats on cpu, memory and pods,
    with their room next to the daemonsets; at most ``limit`` of them."""
    kept: list[Shape] = []
    vectors: list[tuple[int, int, int]] = []
    dc, dm, dp = (daemon.get(k, 0) for k in ("cpu", "memory", "pods"))
    for it, price in zip(types, prices, strict=True):
        alloc = it.allocatable
        c, m, p = alloc.get("cpu", 0) - dc, alloc.get("memory", 0) - dm, alloc.get("pods", 0) - dp
        if c <= 0 or m <= 0 or p <= 0:
            continue
        if any(c <= kc and m <= km and p <= kp for kc, km, kp in vectors):
            continue
        vectors.append((c, m, p))
        kept.append(Shape(it.name, {"cpu": c, "memory": m, "pods": p}, price))
        if len(kept) == limit:
            break
    return kept


def _vector(resources: Mapping[str, int]) -> tuple[int, int, int]:
    return resources.get("cpu", 0), resources.get("memory", 0), resources.get("pods", 0)


def dual_prices(demand: Mapping[str, int], shapes: Sequence[Shape]) -> dict[str, float]:
    """Prices per unit of cpu and memory from the cheapest fractional cover of ``demand`` by the
    shapes (at most two shapes are needed for two resources: every single one and pair is tried).
    At these prices no shape's room is worth more than its price."""
    rows = [r for r in _PRICED if demand.get(r, 0) > 0]
    if not rows or not shapes:
        return dict.fromkeys(_PRICED, 0.0)
    best_cost = float("inf")
    best: dict[str, float] = {}
    for s in shapes:
        need = max(demand[r] / s.room[r] for r in rows)
        cost = s.price * need
        if cost < best_cost:
            binding = max(rows, key=lambda r: demand[r] / s.room[r])
            best_cost, best = cost, {binding: s.price / s.room[binding]}
    if len(rows) == 2:
        a, b = rows
        for i, s in enumerate(shapes):
            for t in shapes[i + 1 :]:
                det = s.room[a] * t.room[b] - t.room[a] * s.room[b]
                if det == 0:
                    continue
                # x_s, x_t covering both rows exactly.
                xs = (demand[a] * t.room[b] - t.room[a] * demand[b]) / det
                xt = (s.room[a] * demand[b] - demand[a] * s.room[b]) / det
                if xs < 0 or xt < 0:
                    continue
                cost = s.price * xs + t.price * xt
                if cost >= best_cost:
                    continue
                ya = (s.price * t.room[b] - t.price * s.room[b]) / det
                yb = (s.room[a] * t.price - t.room[a] * s.price) / det
                if ya < 0 or yb < 0:
                    continue
                best_cost, best = cost, {a: ya, b: yb}
    out = dict.fromkeys(_PRICED, 0.0)
    out.update(best)
    # Scale down until no shape is worth more than its price (the covering LP's dual constraint).
    excess = max((sum(out[r] * s.room[r] for r in _PRICED) / s.price for s in shapes if s.price > 0), default=1.0)
    if excess > 1:
        out = {r: v / excess for r, v in out.items()}
    return out


def repack(
    claims: Sequence[tuple[Sequence[tuple[str, Mapping[str, int]]], float]],
    shapes: Sequence[Shape],
    cheapest: Callable[[Mapping[str, int]], float],
    min_saving: float = 1e-6,
) -> tuple[list[int], list[list[str]]] | None:
    """Re-pack the pods of NodeClaims given as ((key, requests) of their pods, price): which of them
    to keep as they are and the pods of each new node, or None when no re-packing found costs at
    least ``min_saving`` less. ``cheapest(used)`` prices a node: the cheapest type that holds ``used``.

    The NodeClaims worth less than a threshold at the LP prices (the wasteful ones) are re-packed
    together; a few thresholds are tried, from all of them to only the most wasteful."""
    demand: dict[str, int] = {}
    for pods, _ in claims:
        for _, requests in pods:
            for k, v in requests.items():
                demand[k] = demand.get(k, 0) + v
    y = dual_prices(demand, shapes)
    worth = [
        sum(y.get(k, 0.0) * v for _, requests in pods for k, v in requests.items()) / price if price > 0 else 1.0
        for pods, price in claims
    ]
    rooms = [(_vector(s.room), s.price, s.name) for s in shapes if s.price > 0]
    best: tuple[float, list[int], list[list[str]]] | None = None
    tried: set[tuple[int, ...]] = set()
    for threshold in THRESHOLDS:
        moved = tuple(i for i, w in enumerate(worth) if w < threshold)
        if not moved or moved in tried:
            continue
        tried.add(moved)
        before = sum(claims[i][1] for i in moved)
        saving = min_saving if best is None else max(min_saving, best[0])
        nodes = _pack([pod for i in moved for pod in claims[i][0]], y, rooms, before - saving, cheapest)
        if nodes is None:
            continue
        keep = [i for i in range(len(claims)) if i not in set(moved)]
        best = (before - nodes[0], keep, nodes[1])
    return None if best is None else (best[1], best[2])


# NodeClaims worth less than this share of their price at the LP prices are re-packed; each
# threshold is tried (infinity: all of them) and the cheapest outcome is kept.
THRESHOLDS = (float("inf"), 0.97, 0.95, 0.93, 0.9)


def _pack(
    pods: Sequence[tuple[str, Mapping[str, int]]],
    y: Mapping[str, float],
    rooms: Sequence[tuple[tuple[int, int, int], float, str]],
    budget: float,
    cheapest: Callable[[Mapping[str, int]], float],
) -> tuple[float, list[list[str]]] | None:
    """Greedy packing of ``pods``: (cost, pods of each node), or None when it costs ``budget`` or more."""
    sizes: dict[tuple[tuple[str, int], ...], list[str]] = {}
    for key, asked in pods:
        sizes.setdefault(tuple(sorted((k, v) for k, v in asked.items() if v > 0)), []).append(key)
    if len(sizes) > MAX_SIZES:
        return None
    order = sorted(
        ((_vector(dict(size)), sum(y.get(k, 0.0) * v for k, v in size), keys) for size, keys in sizes.items()),
        key=lambda item: (-item[1], -item[0][0], -item[0][1], item[2][0]),
    )
    requests = [v for v, _, _ in order]
    values = [value for _, value, _ in order]
    counts = [len(keys) for _, _, keys in order]
    # Sequential value correction: after a round each pod size is worth the average of its LP value
    # and what the nodes it landed on cost per unit of value (a size that packed badly, e.g. CPU-heavy
    # pods left for compute nodes at the end, is then paired first). The cheapest round is kept.
    bounds = values
    best: tuple[float, list[list[tuple[int, int]]]] | None = None
    for _ in range(ROUNDS):
        cost, fills, paid, complete = _greedy(
            requests, values, bounds, counts, rooms, budget if best is None else best[0], cheapest
        )
        if complete:
            best = (cost, fills)
        if not fills:
            break
        values = _corrected(values, fills, paid)
    if best is None:
        return None
    taken = [0] * len(order)
    nodes: list[list[str]] = []
    for fill in best[1]:
        node: list[str] = []
        for g, n in fill:
            node.extend(order[g][2][taken[g] : taken[g] + n])
            taken[g] += n
        nodes.append(node)
    return best[0], nodes


# Rounds of the greedy packing, each with corrected pod values.
ROUNDS = 3


def _corrected(
    values: Sequence[float], fills: Sequence[Sequence[tuple[int, int]]], prices: Sequence[float]
) -> list[float]:
    paid = [0.0] * len(values)
    count = [0] * len(values)
    for fill, price in zip(fills, prices, strict=True):
        worth = sum(values[g] * n for g, n in fill)
        if worth <= 0:
            continue
        for g, n in fill:
            paid[g] += price * values[g] / worth * n
            count[g] += n
    return [(v + paid[g] / count[g]) / 2 if count[g] else v for g, v in enumerate(values)]


def _unit(values: Sequence[float], requests: Sequence[tuple[int, int, int]]) -> tuple[float, ...]:
    """Per resource, the most value any size carries per unit of it: a node's fill is worth at
    most its room times this on every resource (infinite when some size does not ask for it)."""
    out = []
    for i in range(3):
        if any(req[i] <= 0 for req in requests):
            out.append(float("inf"))
        else:
            out.append(max(v / req[i] for v, req in zip(values, requests, strict=True)))
    return tuple(out)


def _greedy(
    requests: Sequence[tuple[int, int, int]],
    values: Sequence[float],
    bounds: Sequence[float],
    counts: Sequence[int],
    rooms: Sequence[tuple[tuple[int, int, int], float, str]],
    budget: float,
    cheapest: Callable[[Mapping[str, int]], float],
) -> tuple[float, list[list[tuple[int, int]]], list[float], bool]:
    """One greedy packing: its cost, per node the (size index, count) it holds, the node prices,
    and whether it is complete: it stops early once it cannot cost less than ``budget`` (what is
    spent plus the LP value ``bounds`` of the pods left is a lower bound) or a pod fits nowhere.
    Each node takes the shape whose fill (sizes in order, as many of each as fit) is worth the
    most ``values`` per dollar."""
    left = list(counts)
    # Shapes by the most their room could be worth per dollar: the scan stops when none can win.
    unit = _unit(values, requests)
    ranked = sorted(
        (
            (room, price, name, min(u * r for u, r in zip(unit, room, strict=True)) / price)
            for room, price, name in rooms
        ),
        key=lambda r: (-r[3], r[1], r[2]),
    )
    fills: list[list[tuple[int, int]]] = []
    paid: list[float] = []
    spent = 0.0
    prices: dict[tuple[int, int, int], float] = {}
    while any(left):
        best: tuple[float, float, str] | None = None
        best_fill: list[tuple[int, int]] = []
        for (cpu, memory, slots), price, name, potential in ranked:
            if best is not None and potential < -best[0]:
                break
            fill: list[tuple[int, int]] = []
            value = 0.0
            for g, (rc, rm, rp) in enumerate(requests):
                n = left[g]
                if not n or rc > cpu or rm > memory or rp > slots:
                    continue
                if rc:
                    n = min(n, cpu // rc)
                if rm:
                    n = min(n, memory // rm)
                if rp:
                    n = min(n, slots // rp)
                cpu, memory, slots = cpu - rc * n, memory - rm * n, slots - rp * n
                fill.append((g, n))
                value += values[g] * n
            if not fill:
                continue
            rank = (-value / price, price, name)
            if best is None or rank < best:
                best, best_fill = rank, fill
        if best is None:
            return spent, fills, paid, False
        used = [0, 0, 0]
        for g, n in best_fill:
            left[g] -= n
            for i in range(3):
                used[i] += requests[g][i] * n
        key = (used[0], used[1], used[2])
        cost = prices.get(key)
        if cost is None:
            cost = prices[key] = cheapest({"cpu": used[0], "memory": used[1], "pods": used[2]})
        spent += cost
        fills.append(best_fill)
        paid.append(cost)
        if spent + sum(bounds[g] * n for g, n in enumerate(left)) >= budget:
            return spent, fills, paid, False
    return spent, fills, paid, True


# -- the pass over a plan's NodeClaims --------------------------------------------------------------------------------
def repack_claims(claims: list[Claim], pods: Sequence[PodInput], bounded: Callable[[Pool], bool]) -> None:
    """Pack the pods of each NodePool's freely movable NodeClaims again, mixing pod shapes on
    shared nodes, and keep the new NodeClaims only when they cost less (see ``repack``).
    ``bounded``: NodePools under a limit or ceiling (left alone)."""
    movable: dict[int, list[Claim]] = {}
    by_key: dict[str, PodInput] | None = None
    for claim in claims:
        pool = claim.pool
        if claim.topology or claim.ports or pool.min_values or bounded(pool):
            continue
        if claim.requirements != pool.requirements:
            continue
        if by_key is None:
            by_key = {p.key: p for p in pods}
        if all(_movable_pod(by_key[key]) for key in claim.pods):
            movable.setdefault(id(pool), []).append(claim)
    for group in movable.values():
        if len(group) >= 2:
            assert by_key is not None
            _repack_pool(claims, group, by_key)


def _repack_pool(every: list[Claim], claims: list[Claim], by_key: Mapping[str, PodInput]) -> None:
    """Re-pack one NodePool's movable ``claims`` (part of ``every``, the plan's NodeClaims, changed in place)."""
    pool = claims[0].pool
    shapes = frontier(pool.types, pool.prices, pool.daemon)
    types, prices, daemon = pool.types, pool.prices, pool.daemon

    vectors = [(a.get("cpu", 0), a.get("memory", 0), a.get("pods", 0)) for a in (it.allocatable for it in types)]

    def cheapest(requests: Mapping[str, int]) -> float:
        used = res.add(daemon, requests)
        c, m, p = used.get("cpu", 0), used.get("memory", 0), used.get("pods", 0)
        for i, (ac, am, ap) in enumerate(vectors):
            if c <= ac and m <= am and p <= ap and res.fits(used, types[i].allocatable):
                return prices[i]
        return float("inf")

    found = repack(
        [([(key, by_key[key].requests) for key in c.pods], c.price) for c in claims],
        shapes,
        cheapest,
        _MIN_SAVING,
    )
    if found is None:
        return
    keep, nodes = found
    position = {key: i for i, key in enumerate(key for c in claims for key in c.pods)}
    fresh: list[Claim] = []
    for keys in nodes:
        keys.sort(key=position.__getitem__)
        used = res.add(daemon, res.total(by_key[k].requests for k in keys))
        claim = Claim(pool=pool, requirements=pool.requirements, types=types, prices=prices, start=0, used=used)
        claim.pods = keys
        claim.advance()
        fresh.append(claim)
    stay = {id(claims[i]) for i in keep}
    gone = {id(c) for c in claims if id(c) not in stay}
    at = next(i for i, c in enumerate(every) if id(c) in gone)
    rest = [c for c in every if id(c) not in gone]
    every[:] = [*rest[:at], *fresh, *rest[at:]]


def _movable_pod(pod: PodInput) -> bool:
    """A pod any type of its NodeClaim's NodePool may hold: no node constraints of its own, no
    preferences, no host ports, only cpu / memory requests."""
    return (
        all(not len(alt) for alt in pod.requirements)
        and not pod.preferred
        and not pod.host_ports
        and movable_requests(pod.requests)
    )
