"""Solver throughput: simple pods over the full offline catalog, one core.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/solver.py [--sizes 1000 10000]``).
Each size is solved ``--repeat`` times; the best wall time is reported with pods/second,
NodeClaims, $/hour, and a check that every pod was placed without over-committing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "functions"))

from nodeflow.api import labels as wk
from nodeflow.api.quantity import to_milli
from nodeflow.catalog.instancetypes import NodeClassSettings, resolve_instance_types
from nodeflow.catalog.offline import load_offline
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.types import NodePoolInput, PodInput, SchedulingInput, SchedulingResult

CPUS = ("100m", "250m", "500m", "1", "1.5")
MEMORY_MI = (100, 256, 512, 1024, 2048, 4096)


def simple_pods(count: int, seed: int = 42) -> tuple[PodInput, ...]:
    """Pods with requests only (no constraints), CPU and memory drawn from fixed sets."""
    rng = random.Random(seed)
    pods = []
    for i in range(count):
        requests = {
            "cpu": to_milli(rng.choice(CPUS)),
            "memory": to_milli(f"{rng.choice(MEMORY_MI)}Mi"),
            "pods": 1000,
        }
        pods.append(PodInput(key=f"bench/pod-{i:06d}", requests=requests))
    return tuple(pods)


def check(result: SchedulingResult, pods: tuple[PodInput, ...], pool: NodePoolInput) -> None:
    placed = [p for nc in result.node_claims for p in nc.pods]
    assert sorted(placed) == sorted(p.key for p in pods), "every pod placed exactly once"
    types = {it.name: it for it in pool.instance_types}
    for claim in result.node_claims:
        cheapest = types[claim.instance_types[0]]
        for name, value in claim.requests.items():
            assert value <= cheapest.allocatable.get(name, 0), f"{claim.instance_types[0]} over-committed on {name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args(argv)

    data = load_offline("us-east-1")
    types = tuple(resolve_instance_types(data, NodeClassSettings()))
    pools = {
        # Every priced type in the catalog, on-demand.
        "full catalog": NodePoolInput(
            name="all",
            requirements=Requirements([Requirement.create(wk.LABEL_CAPACITY_TYPE, "In", ["on-demand"])]),
            instance_types=types,
        ),
        # The shape of Karpenter's default NodePool: c/m/r, generation > 2, spot and on-demand.
        "c/m/r gen>2, spot": NodePoolInput(
            name="general",
            requirements=Requirements(
                [
                    Requirement.create(wk.LABEL_INSTANCE_CATEGORY, "In", ["c", "m", "r"]),
                    Requirement.create(wk.LABEL_INSTANCE_GENERATION, "Gt", ["2"]),
                    Requirement.create(wk.LABEL_CAPACITY_TYPE, "In", ["spot", "on-demand"]),
                ]
            ),
            instance_types=types,
        ),
    }
    rows = []
    for (label, pool), size in itertools.product(pools.items(), args.sizes):
        pods = simple_pods(size)
        best = float("inf")
        result = None
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = solve(SchedulingInput(pods=pods, nodepools=(pool,)))
            best = min(best, time.perf_counter() - start)
        assert result is not None
        check(result, pods, pool)
        rows.append(
            {
                "pool": label,
                "pods": size,
                "instanceTypes": len(types),
                "seconds": round(best, 4),
                "podsPerSecond": round(size / best),
                "nodeClaims": len(result.node_claims),
                "pricePerHour": round(result.total_price, 4),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        machine = platform.processor() or platform.machine()
        print(f"# solver benchmark on {machine}, Python {platform.python_version()}, one core")
        print(f"{'nodepool':<18} {'pods':>8} {'types':>6} {'seconds':>8} {'pods/s':>9} {'nodes':>6} {'$/hour':>9}")
        for r in rows:
            print(
                f"{r['pool']:<18} {r['pods']:>8} {r['instanceTypes']:>6} {r['seconds']:>8} {r['podsPerSecond']:>9} "
                f"{r['nodeClaims']:>6} {r['pricePerHour']:>9}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
