"""Solver parity benchmark: Karpenter's benchmark shape, a 100k-pod cluster, and cost quality.

Run: ``.venv/bin/python benchmarks/solver_parity.py [--sizes 100 1000 5000 20000] [--json]``
(``--skip-large`` drops the 100,000-pod case, ``--skip-cost`` the cost mixes, ``--cost-only`` runs only
the cost mixes).

(a) Throughput on Karpenter's scheduling-benchmark shape: one NodePool over the whole offline
    catalog (spot and on-demand), pods in Deployments of 10-50 replicas, one fifth each:
    plain, zone spread (maxSkew 1), hostname spread (maxSkew 1), zone self-affinity
    (required), hostname self anti-affinity (required).
(b) 100,000 pods from 200 Deployments of 500 replicas (mostly plain, every fifth zone-spread).
(c) Cost quality on three mixes (web, batch, GPU) against lower bounds computed here.

Each solve is timed alone (input built beforehand), best of ``--repeat`` runs, single process;
peak memory is measured in one extra run under ``tracemalloc`` (not timed). Every plan is
checked by ``benchmarks/validate.py``; a row passes only with zero violations.

Lower bounds (cost)
-------------------

* per-resource bound: for each resource r in (cpu, memory, nvidia.com/gpu),
  ``total requests of r x min over allowed offerings of price / allocatable r``; the bound is
  the max over r. Any plan must buy at least that much of each resource.
* LP bound: the optimum of the fractional covering LP "buy any non-negative amount of each
  allowed instance type so that total allocatable covers the total requests of cpu, memory,
  GPUs and pods". It is at least the per-resource bound (which uses one resource at a time)
  and is certified: the value reported is that of a feasible solution of the LP's dual, so it
  is a true lower bound even if the small simplex below stopped early. (Note: "the best single
  type for the combined vector" is NOT a lower bound: mixing a CPU-rich and a memory-rich type
  can be cheaper than any single type; the LP covers that.)

Both ignore that pods are indivisible and their constraints, so a plan within a few percent of
them is close to optimal.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
for _path in (str(_ROOT / "functions"), str(_ROOT)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from benchmarks.validate import cheapest_offers, check_result  # noqa: E402
from nodeflow.api import labels as wk  # noqa: E402
from nodeflow.api.quantity import to_milli  # noqa: E402
from nodeflow.catalog.instancetypes import NodeClassSettings, resolve_instance_types  # noqa: E402
from nodeflow.catalog.model import InstanceType  # noqa: E402
from nodeflow.catalog.offline import load_offline  # noqa: E402
from nodeflow.scheduling.requirements import Requirement, Requirements  # noqa: E402
from nodeflow.scheduling.solver import solve  # noqa: E402
from nodeflow.scheduling.taints import Taint, Toleration  # noqa: E402
from nodeflow.scheduling.types import (  # noqa: E402
    AffinityTerm,
    NodePoolInput,
    PodInput,
    SchedulingInput,
    SchedulingResult,
    Selector,
    TopologySpread,
)

NAMESPACE = "bench"
CPUS = ("100m", "250m", "500m", "1", "1.5")
MEMORY = ("100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi")
SPOT_AND_ON_DEMAND = Requirement.create(
    wk.LABEL_CAPACITY_TYPE, "In", [wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND]
)
GPU_TAINT = Taint(wk.RESOURCE_NVIDIA_GPU, "NoSchedule", "true")
KINDS = ("plain", "zone-spread", "hostname-spread", "zone-affinity", "hostname-anti-affinity")


# --- catalog and NodePools ------------------------------------------------------------------


def catalog() -> tuple[InstanceType, ...]:
    """Every priced instance type of the bundled us-east-1 snapshot."""
    return tuple(resolve_instance_types(load_offline("us-east-1"), NodeClassSettings()))


def full_pool(types: tuple[InstanceType, ...]) -> NodePoolInput:
    """Karpenter's benchmark NodePool: every instance type, spot and on-demand."""
    return NodePoolInput(name="all", requirements=Requirements([SPOT_AND_ON_DEMAND]), instance_types=types)


def general_pool(types: tuple[InstanceType, ...]) -> NodePoolInput:
    """A realistic default NodePool: c/m/r, generation > 2, spot and on-demand."""
    reqs = Requirements(
        [
            Requirement.create(wk.LABEL_INSTANCE_CATEGORY, "In", ["c", "m", "r"]),
            Requirement.create(wk.LABEL_INSTANCE_GENERATION, "Gt", ["2"]),
            SPOT_AND_ON_DEMAND,
        ]
    )
    return NodePoolInput(name="general", requirements=reqs, instance_types=types)


def gpu_pool(types: tuple[InstanceType, ...]) -> NodePoolInput:
    """A tainted GPU NodePool: g and p types, spot and on-demand."""
    reqs = Requirements([Requirement.create(wk.LABEL_INSTANCE_CATEGORY, "In", ["g", "p"]), SPOT_AND_ON_DEMAND])
    return NodePoolInput(name="gpu", requirements=reqs, instance_types=types, taints=(GPU_TAINT,))


# --- workloads ------------------------------------------------------------------------------


def _requests(cpu: str, memory: str, gpus: int = 0) -> dict[str, int]:
    out = {"cpu": to_milli(cpu), "memory": to_milli(memory), "pods": 1000}
    if gpus:
        out[wk.RESOURCE_NVIDIA_GPU] = gpus * 1000
    return out


def deployment(
    app: str,
    replicas: int,
    requests: Mapping[str, int],
    kind: str = "plain",
    tolerations: tuple[Toleration, ...] = (),
) -> list[PodInput]:
    """``replicas`` identical pods labelled ``app=<app>``, with the constraint ``kind`` on their own label."""
    labels = {"app": app}
    own = Selector(match_labels=(("app", app),))
    namespaces = frozenset({NAMESPACE})
    spread: tuple[TopologySpread, ...] = ()
    affinity: tuple[AffinityTerm, ...] = ()
    if kind == "zone-spread":
        spread = (TopologySpread(wk.LABEL_ZONE, 1, own),)
    elif kind == "hostname-spread":
        spread = (TopologySpread(wk.LABEL_HOSTNAME, 1, own),)
    elif kind == "zone-affinity":
        affinity = (AffinityTerm(wk.LABEL_ZONE, own, namespaces),)
    elif kind == "hostname-anti-affinity":
        affinity = (AffinityTerm(wk.LABEL_HOSTNAME, own, namespaces, anti=True),)
    elif kind != "plain":
        raise ValueError(f"unknown kind {kind!r}")
    return [
        PodInput(
            key=f"{NAMESPACE}/{app}-{i:04d}",
            requests=requests,
            labels=labels,
            spread=spread,
            affinity=affinity,
            tolerations=tolerations,
        )
        for i in range(replicas)
    ]


@dataclass(frozen=True, slots=True)
class MixDeployment:
    """One Deployment of Karpenter's benchmark mix: its pods request ``cpu`` and ``memory``; ``kind`` is one of
    ``KINDS``."""

    app: str
    replicas: int
    cpu: str
    memory: str
    kind: str


def karpenter_mix_deployments(count: int, seed: int = 42) -> tuple[MixDeployment, ...]:
    """Karpenter's benchmark mix as Deployments: 10-50 replicas each, the five kinds in turn, ``count`` pods."""
    rng = random.Random(seed)
    out: list[MixDeployment] = []
    total = 0
    while total < count:
        replicas = min(rng.randint(10, 50), count - total)
        cpu, memory = rng.choice(CPUS), rng.choice(MEMORY)
        index = len(out)
        out.append(MixDeployment(f"app-{index:05d}", replicas, cpu, memory, KINDS[index % len(KINDS)]))
        total += replicas
    return tuple(out)


def karpenter_mix(count: int, seed: int = 42) -> tuple[PodInput, ...]:
    """Karpenter's benchmark mix: Deployments of 10-50 replicas, the five kinds in turn."""
    pods: list[PodInput] = []
    for d in karpenter_mix_deployments(count, seed):
        pods += deployment(d.app, d.replicas, _requests(d.cpu, d.memory), d.kind)
    return tuple(pods)


def large_mix(deployments: int = 200, replicas: int = 500, seed: int = 42) -> tuple[PodInput, ...]:
    """A large cluster: ``deployments`` x ``replicas`` pods, every fifth Deployment zone-spread."""
    rng = random.Random(seed)
    pods: list[PodInput] = []
    for index in range(deployments):
        requests = _requests(rng.choice(CPUS), rng.choice(MEMORY))
        kind = "zone-spread" if index % 5 == 4 else "plain"
        pods += deployment(f"svc-{index:03d}", replicas, requests, kind)
    return tuple(pods)


def web_mix(seed: int = 42) -> tuple[PodInput, ...]:
    """2,000 small pods (100m-500m CPU, 128Mi-1Gi) in Deployments of 10-50."""
    rng = random.Random(seed)
    pods: list[PodInput] = []
    index = 0
    while len(pods) < 2000:
        replicas = min(rng.randint(10, 50), 2000 - len(pods))
        requests = _requests(
            rng.choice(("100m", "200m", "250m", "500m")), rng.choice(("128Mi", "256Mi", "512Mi", "1Gi"))
        )
        pods += deployment(f"web-{index:03d}", replicas, requests)
        index += 1
    return tuple(pods)


def batch_mix(seed: int = 42) -> tuple[PodInput, ...]:
    """300 large pods (2-16 CPU, 4-64Gi) in Jobs of 5-20."""
    rng = random.Random(seed)
    pods: list[PodInput] = []
    index = 0
    while len(pods) < 300:
        replicas = min(rng.randint(5, 20), 300 - len(pods))
        cpu = rng.choice((2, 4, 8, 16))
        memory = rng.choice((4, 8, 16, 32, 64))
        pods += deployment(f"batch-{index:03d}", replicas, _requests(str(cpu), f"{memory}Gi"))
        index += 1
    return tuple(pods)


def gpu_mix(seed: int = 42) -> tuple[PodInput, ...]:
    """100 pods with 1-4 GPUs (and 1-3 CPU, 4-12Gi per GPU), tolerating the GPU taint."""
    rng = random.Random(seed)
    tolerate = (Toleration(key=wk.RESOURCE_NVIDIA_GPU, operator="Exists", effect="NoSchedule"),)
    pods: list[PodInput] = []
    index = 0
    while len(pods) < 100:
        replicas = min(rng.randint(2, 10), 100 - len(pods))
        gpus = rng.choice((1, 1, 2, 4))
        cpu = gpus * rng.choice((1, 2, 3))
        memory = gpus * rng.choice((4, 8, 12))
        requests = _requests(str(cpu), f"{memory}Gi", gpus)
        pods += deployment(f"gpu-{index:03d}", replicas, requests, tolerations=tolerate)
        index += 1
    return tuple(pods)


# --- measuring ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    result: SchedulingResult
    seconds: float  # best of the timed runs
    peak_mib: float | None  # tracemalloc peak of one extra run
    violations: list[str]


def measure(inp: SchedulingInput, repeat: int, memory: bool = True) -> Measured:
    """Solve ``inp`` ``repeat`` times (best wall time), once more under tracemalloc, then validate."""
    best = float("inf")
    result: SchedulingResult | None = None
    for _ in range(max(repeat, 1)):
        start = time.perf_counter()
        result = solve(inp)
        best = min(best, time.perf_counter() - start)
    assert result is not None
    peak: float | None = None
    if memory:
        tracemalloc.start()
        try:
            solve(inp)
            peak = tracemalloc.get_traced_memory()[1] / 2**20
        finally:
            tracemalloc.stop()
    return Measured(result, best, peak, check_result(inp, result))


def throughput_row(label: str, inp: SchedulingInput, repeat: int, memory: bool) -> dict[str, Any]:
    m = measure(inp, repeat, memory)
    pods = len(inp.pods)
    return {
        "workload": label,
        "pods": pods,
        "instanceTypes": sum(len(cheapest_offers(p)) for p in inp.nodepools),
        "seconds": round(m.seconds, 4),
        "podsPerSecond": round(pods / m.seconds) if m.seconds else None,
        "nodeClaims": len(m.result.node_claims),
        "unschedulable": len(m.result.unschedulable),
        "pricePerHour": round(m.result.total_price, 4),
        "peakMiB": None if m.peak_mib is None else round(m.peak_mib, 1),
        "violations": len(m.violations),
        "violationSamples": m.violations[:10],
    }


# --- lower bounds ---------------------------------------------------------------------------

BOUND_RESOURCES = ("cpu", "memory", wk.RESOURCE_NVIDIA_GPU)
LP_RESOURCES = (*BOUND_RESOURCES, "pods")


def total_requests(pods: Sequence[PodInput]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pod in pods:
        for name, value in pod.requests.items():
            out[name] = out.get(name, 0) + value
    return out


def offers(pools: Sequence[NodePoolInput]) -> list[tuple[Mapping[str, int], float]]:
    """(allocatable, cheapest allowed price) of every instance type the NodePools may launch."""
    return [(it.allocatable, o.price) for pool in pools for it, o in cheapest_offers(pool)]


def per_resource_bound(demand: Mapping[str, int], options: Sequence[tuple[Mapping[str, int], float]]) -> float:
    """max over r of (total r) x (cheapest price per unit of allocatable r)."""
    bound = 0.0
    for r in BOUND_RESOURCES:
        if demand.get(r, 0) <= 0:
            continue
        unit = min((price / alloc[r] for alloc, price in options if alloc.get(r, 0) > 0), default=float("inf"))
        bound = max(bound, demand[r] * unit)
    return bound


def fit_bound(pods: Sequence[PodInput], pools: Sequence[NodePoolInput]) -> float:
    """A valid bound that knows a pod needs ONE node big enough for it (a 4-GPU pod cannot use
    the cheapest 1-GPU type): max over r of sum over pods of req_r x min over the types that
    hold that pod of price / allocatable_r. On any node t, the pods' req_r add up to at most
    alloc_t,r, so the node costs at least the sum of req_r x price_t / alloc_t,r of its pods."""
    options = offers(pools)
    unit_cache: dict[tuple[tuple[str, int], ...], dict[str, float]] = {}
    totals = dict.fromkeys(BOUND_RESOURCES, 0.0)
    for pod in pods:
        key = tuple(sorted(pod.requests.items()))
        units = unit_cache.get(key)
        if units is None:
            fitting = [(alloc, price) for alloc, price in options if all(alloc.get(k, 0) >= v for k, v in key if v)]
            units = {
                r: min((price / alloc[r] for alloc, price in fitting if alloc.get(r, 0) > 0), default=0.0)
                for r in BOUND_RESOURCES
            }
            unit_cache[key] = units
        for r in BOUND_RESOURCES:
            totals[r] += pod.requests.get(r, 0) * units[r]
    return max(totals.values())


def lp_bound(demand: Mapping[str, int], options: Sequence[tuple[Mapping[str, int], float]]) -> float:
    """Certified optimum of: min sum(price_t x_t) s.t. sum(alloc_t x_t) >= demand, x >= 0.

    A revised simplex (big-M start) over k <= 4 resource rows; rows are scaled so the demand is
    1. The value returned is ``sum(y)`` for a dual solution ``y`` clamped to >= 0 and scaled
    down until ``alloc_t . y <= price_t`` for every type, i.e. a valid lower bound by weak
    duality whatever the simplex did.
    """
    rows = [r for r in LP_RESOURCES if demand.get(r, 0) > 0]
    if not rows or not options:
        return 0.0
    k = len(rows)
    # Columns: instance types, then surplus (-e_i, cost 0), then artificials (+e_i, cost big).
    cols: list[list[float]] = [[alloc.get(r, 0) / demand[r] for r in rows] for alloc, _ in options]
    cost = [price for _, price in options]
    n = len(cols)
    big = 1e6 * max(cost)
    for i in range(k):
        cols.append([-1.0 if j == i else 0.0 for j in range(k)])
        cost.append(0.0)
    for i in range(k):
        cols.append([1.0 if j == i else 0.0 for j in range(k)])
        cost.append(big)
    basis = [n + k + i for i in range(k)]
    y = [big] * k
    for _ in range(10_000):
        inverse = _invert([[cols[b][i] for b in basis] for i in range(k)])
        if inverse is None:
            break
        y = [sum(cost[basis[i]] * inverse[i][j] for i in range(k)) for j in range(k)]
        x_basis = [sum(inverse[i][j] for j in range(k)) for i in range(k)]  # B^-1 . ones
        entering, best = -1, -1e-12
        for j in range(len(cols)):
            if j in basis:
                continue
            reduced = cost[j] - sum(y[i] * cols[j][i] for i in range(k))
            if reduced < best:
                entering, best = j, reduced
        if entering < 0:
            break  # optimal
        u = [sum(inverse[i][j] * cols[entering][j] for j in range(k)) for i in range(k)]
        ratios = [(x_basis[i] / u[i], basis[i], i) for i in range(k) if u[i] > 1e-12]
        if not ratios:
            return float("inf")  # unbounded cannot happen with non-negative costs; be safe
        basis[min(ratios)[2]] = entering
    # Certify: a dual-feasible y gives sum(y) <= LP optimum <= any plan's cost.
    y = [max(v, 0.0) for v in y]
    excess = max(sum(y[i] * cols[t][i] for i in range(k)) / cost[t] for t in range(n) if cost[t] > 0)
    if excess > 1:
        y = [v / excess for v in y]
    return sum(y)


def _invert(matrix: list[list[float]]) -> list[list[float]] | None:
    """Gauss-Jordan inverse of a small square matrix (None when singular)."""
    size = len(matrix)
    aug = [row[:] + [1.0 if i == j else 0.0 for j in range(size)] for i, row in enumerate(matrix)]
    for c in range(size):
        pivot = max(range(c, size), key=lambda r: abs(aug[r][c]))
        if abs(aug[pivot][c]) < 1e-15:
            return None
        aug[c], aug[pivot] = aug[pivot], aug[c]
        scale = aug[c][c]
        aug[c] = [v / scale for v in aug[c]]
        for r in range(size):
            if r != c and aug[r][c]:
                factor = aug[r][c]
                aug[r] = [a - factor * b for a, b in zip(aug[r], aug[c], strict=True)]
    return [row[size:] for row in aug]


def cost_row(label: str, inp: SchedulingInput, repeat: int) -> dict[str, Any]:
    m = measure(inp, repeat, memory=False)
    demand = total_requests(inp.pods)
    options = offers(inp.nodepools)
    bound = per_resource_bound(demand, options)
    lp = lp_bound(demand, options)
    fit = fit_bound(inp.pods, inp.nodepools)
    best = max(bound, lp, fit)
    price = m.result.total_price
    return {
        "mix": label,
        "pods": len(inp.pods),
        "nodeClaims": len(m.result.node_claims),
        "unschedulable": len(m.result.unschedulable),
        "seconds": round(m.seconds, 4),
        "pricePerHour": round(price, 4),
        "lowerBound": round(bound, 4),
        "ratio": round(price / bound, 4) if bound else None,
        "lpBound": round(lp, 4),
        "lpRatio": round(price / lp, 4) if lp else None,
        "fitBound": round(fit, 4),
        "bestBound": round(best, 4),
        "bestRatio": round(price / best, 4) if best else None,
        "violations": len(m.violations),
        "violationSamples": m.violations[:10],
    }


# --- report ---------------------------------------------------------------------------------


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()} ({model}), Python {platform.python_version()}, one core"


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def markdown(throughput: Sequence[dict[str, Any]], cost: Sequence[dict[str, Any]]) -> str:
    lines = [f"Measured on {machine()} (single process; solver only, input build excluded).", ""]
    if throughput:
        lines += [
            "| workload | pods | instance types | seconds | pods/s | NodeClaims | $/hour | peak MiB | violations |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in throughput:
            cells = [r["workload"], r["pods"], r["instanceTypes"], r["seconds"], r["podsPerSecond"], r["nodeClaims"]]
            cells += [r["pricePerHour"], r["peakMiB"], r["violations"]]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    if cost:
        lines += [
            "| cost mix | pods | NodeClaims | plan $/hour | per-resource bound | LP bound | pod-fit bound "
            "| plan / best bound | violations |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in cost:
            cells = [r["mix"], r["pods"], r["nodeClaims"], r["pricePerHour"], r["lowerBound"], r["lpBound"]]
            cells += [r["fitBound"], r["bestRatio"], r["violations"]]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines += [
            "",
            "Per-resource bound: max over cpu, memory, GPU of total requests x cheapest price per allocatable "
            "unit. LP bound: fractional covering LP of cpu, memory, GPU and pods over all allowed offerings "
            "(certified by its dual). Pod-fit bound: as per-resource, but each pod priced only on types that "
            "can hold it. All three are valid lower bounds; the ratio uses the largest. Target: <= 1.05.",
        ]
    return "\n".join(lines)


def run(
    sizes: Sequence[int],
    repeat: int,
    memory: bool = True,
    large: bool = True,
    cost: bool = True,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """All the measurements: (throughput rows, cost rows)."""
    types = catalog()
    say = progress or (lambda _msg: None)
    throughput = []
    for pool_label, pool in (("c/m/r", general_pool(types)), ("full catalog", full_pool(types))):
        for size in sizes:
            say(f"karpenter mix, {size} pods, {pool_label}")
            inp = SchedulingInput(pods=karpenter_mix(size), nodepools=(pool,))
            throughput.append(throughput_row(f"karpenter mix, {pool_label}", inp, repeat, memory))
        if large:
            say(f"200 deployments x 500 pods, {pool_label}")
            inp = SchedulingInput(pods=large_mix(), nodepools=(pool,))
            row = throughput_row(f"200 deployments x 500, {pool_label}", inp, max(1, min(repeat, 2)), memory)
            throughput.append(row)
    costs = []
    if cost:
        general, gpu = general_pool(types), gpu_pool(types)
        mixes = (("web", web_mix(), (general,)), ("batch", batch_mix(), (general,)), ("gpu", gpu_mix(), (gpu,)))
        for label, pods, pools in mixes:
            say(f"cost mix {label}")
            costs.append(cost_row(label, SchedulingInput(pods=pods, nodepools=pools), repeat))
    return throughput, costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 1000, 5000, 20000])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per size (best is kept)")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc run")
    parser.add_argument("--skip-large", action="store_true", help="skip the 100,000-pod case")
    parser.add_argument("--skip-cost", action="store_true", help="skip the cost-quality mixes")
    parser.add_argument("--cost-only", action="store_true", help="only the cost-quality mixes (web, batch, GPU)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args(argv)

    def progress(message: str) -> None:
        print(f"... {message}", file=sys.stderr, flush=True)

    if args.cost_only and args.skip_cost:
        parser.error("--cost-only and --skip-cost exclude each other")
    throughput, costs = run(
        [] if args.cost_only else args.sizes,
        args.repeat,
        memory=not args.no_memory,
        large=not (args.skip_large or args.cost_only),
        cost=not args.skip_cost,
        progress=progress,
    )
    failed = [r for r in (*throughput, *costs) if r["violations"]]
    if args.json:
        print(json.dumps({"machine": machine(), "throughput": throughput, "cost": costs}, indent=2))
    else:
        print(markdown(throughput, costs))
        for r in failed:
            name = r.get("workload") or r.get("mix")
            print(f"\n{name} ({r['pods']} pods): {r['violations']} violation(s), first ones:")
            for line in r["violationSamples"]:
                print(f"  - {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
