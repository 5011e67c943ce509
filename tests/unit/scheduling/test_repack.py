"""The re-packing pass (nodeflow.scheduling.repack): CPU-heavy and memory-heavy pods share a
balanced node when that is cheaper; otherwise the plan is exactly what it was without the pass."""

from __future__ import annotations

import random

import pytest

from benchmarks.validate import check_result
from nodeflow.api import labels as wk
from nodeflow.scheduling import repack
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.types import SchedulingInput, SchedulingResult

from .fakes import CATALOG, itype, pod, pool

# A compute type and a memory type that each hold two pods of their own shape, and a balanced
# type (pricier than either) that holds two of one shape and one of the other.
PAIRING = (
    itype("cx.4xlarge", 16, 16, 0.60),
    itype("rx.4xlarge", 4, 64, 0.60),
    itype("mx.4xlarge", 16, 64, 0.70),
)


def _mixed(cpu_pods: int = 40, memory_pods: int = 40, **cpu_kwargs: object) -> list:
    pods = [pod(f"cpu-{i:03d}", "7", "2Gi", **cpu_kwargs) for i in range(cpu_pods)]  # type: ignore[arg-type]
    pods += [pod(f"mem-{i:03d}", "1", "30Gi") for i in range(memory_pods)]
    return pods


def _solve(inp: SchedulingInput, monkeypatch: pytest.MonkeyPatch, enabled: bool) -> SchedulingResult:
    with monkeypatch.context() as m:
        if not enabled:
            m.setattr(repack, "MAX_CLAIMS", 0)
        return solve(inp)


def _types(result: SchedulingResult) -> list[str]:
    return sorted(c.instance_types[0] for c in result.node_claims)


def test_cpu_and_memory_heavy_pods_share_balanced_nodes_when_cheaper(monkeypatch: pytest.MonkeyPatch) -> None:
    inp = SchedulingInput(pods=tuple(_mixed()), nodepools=(pool(instance_types=PAIRING),))
    before = _solve(inp, monkeypatch, enabled=False)
    after = _solve(inp, monkeypatch, enabled=True)
    # Without the pass each shape fills its own type: 20 + 20 nodes at $0.60.
    assert _types(before) == ["cx.4xlarge"] * 20 + ["rx.4xlarge"] * 20
    assert before.total_price == pytest.approx(24.0)
    # With it: balanced nodes holding both shapes (27 of them would cost $18.90).
    assert after.total_price < before.total_price - 3
    assert any(
        c.instance_types[0] == "mx.4xlarge"
        and any(p.startswith("default/cpu-") for p in c.pods)
        and any(p.startswith("default/mem-") for p in c.pods)
        for c in after.node_claims
    )
    assert check_result(inp, after) == []
    placed = sorted(p for c in after.node_claims for p in c.pods)
    assert placed == sorted(p.key for p in inp.pods)
    assert not after.unschedulable


def test_plan_is_byte_identical_when_repacking_saves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # One shape that fills its type exactly: nothing to pair, the pass runs and changes nothing.
    pods = tuple(pod(f"cpu-{i:03d}", "7", "2Gi") for i in range(40))
    inp = SchedulingInput(pods=pods, nodepools=(pool(instance_types=PAIRING),))
    before = _solve(inp, monkeypatch, enabled=False)
    after = _solve(inp, monkeypatch, enabled=True)
    assert after == before
    assert repr(after) == repr(before)


def test_pods_with_node_constraints_or_host_ports_are_not_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CPU-heavy pods must run on the compute type (node selector) or use a host port: only the
    # memory-heavy pods are free to move, and they gain nothing alone, so nothing changes.
    on_c = (Requirements([Requirement.create(wk.LABEL_INSTANCE_CATEGORY, "In", ["c"])]),)
    port = frozenset({("0.0.0.0", "TCP", 8080)})
    for kwargs in ({"requirements": on_c}, {"host_ports": port}):
        inp = SchedulingInput(pods=tuple(_mixed(**kwargs)), nodepools=(pool(instance_types=PAIRING),))
        before = _solve(inp, monkeypatch, enabled=False)
        after = _solve(inp, monkeypatch, enabled=True)
        assert after == before
        assert check_result(inp, after) == []


def test_topology_pods_and_limited_nodepools_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeflow.scheduling.types import Selector, TopologySpread

    spread = (TopologySpread(wk.LABEL_ZONE, 1, Selector(match_labels=(("app", "cpu"),))),)
    inp = SchedulingInput(
        pods=tuple(_mixed(labels={"app": "cpu"}, spread=spread)), nodepools=(pool(instance_types=PAIRING),)
    )
    assert _solve(inp, monkeypatch, enabled=True) == _solve(inp, monkeypatch, enabled=False)
    # A limit the re-packed plan could cross (27 balanced nodes could hold 432 CPUs): bound, the pass leaves the
    # NodePool's NodeClaims alone (20 + 20 nodes, 400 CPUs: all 80 pods placed within it).
    limited = pool(instance_types=PAIRING, limits={"cpu": 400_000})
    inp = SchedulingInput(pods=tuple(_mixed()), nodepools=(limited,))
    bound = _solve(inp, monkeypatch, enabled=True)
    assert bound == _solve(inp, monkeypatch, enabled=False)
    assert not bound.unschedulable
    assert _types(bound) == ["cx.4xlarge"] * 20 + ["rx.4xlarge"] * 20


def test_a_limit_the_plan_cannot_cross_leaves_it_as_it_is_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    free = SchedulingInput(pods=tuple(_mixed()), nodepools=(pool(instance_types=PAIRING),))
    roomy = SchedulingInput(pods=free.pods, nodepools=(pool(instance_types=PAIRING, limits={"cpu": 1_000_000}),))
    assert _solve(roomy, monkeypatch, enabled=True) == _solve(free, monkeypatch, enabled=True)


@pytest.mark.parametrize("seed", range(12))
def test_random_mixes_are_identical_or_cheaper_and_valid(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    pods = []
    for group in range(rng.randint(2, 8)):
        cpu = rng.choice(("500m", "1", "2", "3", "7"))
        memory = rng.choice(("1Gi", "2Gi", "6Gi", "14Gi", "30Gi"))
        pods += [pod(f"g{group}-{i:03d}", cpu, memory) for i in range(rng.randint(1, 30))]
    spot = Requirement.create(wk.LABEL_CAPACITY_TYPE, "In", [wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND])
    catalog = tuple(it for it in CATALOG if wk.RESOURCE_NVIDIA_GPU not in it.capacity) + PAIRING
    nodepool = pool("default", spot, instance_types=catalog) if seed % 2 else pool(instance_types=catalog)
    inp = SchedulingInput(pods=tuple(pods), nodepools=(nodepool,))
    before = _solve(inp, monkeypatch, enabled=False)
    after = _solve(inp, monkeypatch, enabled=True)
    assert check_result(inp, after) == []
    assert after == before or after.total_price < before.total_price
    assert sorted(p for c in after.node_claims for p in c.pods) == sorted(p.key for p in inp.pods)
    assert solve(inp) == after  # deterministic


def test_frontier_drops_dominated_types_and_duals_price_no_type_above_its_cost() -> None:
    shapes = repack.frontier(
        [PAIRING[0], PAIRING[1], PAIRING[2], itype("cx.2xlarge", 8, 8, 0.61)], [0.60, 0.60, 0.70, 0.61], {}
    )
    assert [s.name for s in shapes] == ["cx.4xlarge", "rx.4xlarge", "mx.4xlarge"]
    y = repack.dual_prices({"cpu": 100_000, "memory": 100 * 64 * 2**30 * 1000}, shapes)
    for s in shapes:
        assert y["cpu"] * s.room["cpu"] + y["memory"] * s.room["memory"] <= s.price * (1 + 1e-9)
