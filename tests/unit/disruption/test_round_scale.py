"""A disruption round stays linear in the cluster's size, and decides exactly as the slow path did.

- Same decisions: on varied random clusters (several NodePools and budgets, draining and uninitialized
  nodes, pending pods, DaemonSet pods, do-not-disrupt, PodDisruptionBudgets, drift), ``decide`` gives the same
  ``RoundResult`` (command, replacements, moves, blocked events) as the reference path: every bound pod
  converted up front (``convert_pods``) and ``Simulator.hopeless`` scanning every node per check, as before.
- ``PodInputs.requests`` equals the converted pod's requests, and its conversions equal ``convert_pods``'.
- Linear work: on a full cluster (nothing to consolidate) no pod is converted for a simulation, candidates are
  never compared with each other, and the pre-filter reads each node's room a bounded number of times.
"""

from __future__ import annotations

import gc
import random
from typing import Any

import pytest

from nodeflow.disruption import candidates, consolidation, simulation
from nodeflow.disruption import method as method_mod
from nodeflow.disruption.candidates import Candidate, build_candidates
from nodeflow.disruption.model import Settings, Snapshot
from nodeflow.disruption.round import decide
from nodeflow.disruption.simulation import PodInputs, Simulator, _free
from nodeflow.plan import build_input, convert_pods
from nodeflow.podutil import eviction_cost

from .builders import CATALOG, NOW, SIZES, node, pdb, pod, pool, snapshot

TYPES = sorted(SIZES)


def _reference_hopeless(self: Simulator, candidates: Any, before: float) -> str | None:
    """The pre-filter as it was: every node scanned per check (the slow reference)."""
    names = {c.name for c in candidates}
    free = dict(self.free)
    for n in self.base.nodes:
        if n.name in names and n.schedulable and n.name not in self.held:
            for k, v in _free(n).items():
                free[k] = free.get(k, 0) - v
    need: dict[str, int] = {}
    for key in self._leaving(candidates):
        inp = self.pods.get(key)
        for k, v in (inp.requests if inp is not None else {}).items():
            need[k] = need.get(k, 0) + v
    need = {k: v - free.get(k, 0) for k, v in need.items() if v > free.get(k, 0)}
    if not need:
        return None
    for offer in self.offers:
        if offer.price >= before:
            break
        if all(offer.allocatable.get(k, 0) >= v for k, v in need.items()):
            return None
    return "its pods fit neither on the other nodes nor on any cheaper instance type"


def _reference_eviction_cost(c: Candidate) -> float:
    """The reschedule cost as it was: recomputed from the pods for every use."""
    return 1.0 + sum(max(0.0, eviction_cost(p)) for p in c.movable)


def random_cluster(seed: int) -> Snapshot:
    rng = random.Random(seed)
    budgets = ["0", "1", "2", "20%", "50%", "100%"]
    only = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": TYPES}]
    pools = [
        pool("general", budgets=[{"nodes": rng.choice(budgets)}], extra=only),
        pool("batch", budgets=[{"nodes": rng.choice(budgets)}], after=rng.choice(["0s", "30s"]), extra=only),
    ]
    nodes = []
    pods = []
    density = rng.choice([(0.2, 0.4), (0.3, 0.6, 0.9), (0.9, 1.0), (1.0,)])
    for i in range(rng.randint(3, 16)):
        name = f"n{i:02d}"
        it = rng.choice(TYPES)
        nodes.append(
            node(
                name,
                it,
                pool_name=rng.choice(["general", "batch"]),
                zone=rng.choice(["us-east-1a", "us-east-1b"]),
                image="ami-old" if rng.random() < 0.1 else "ami-new",
                initialized=rng.random() > 0.1,
                deleting=rng.random() < 0.08,
            )
        )
        cpu, mem = SIZES[it]
        free_cpu, free_mem = cpu * 1000 - 200, (mem - 1) * 1024
        room_cpu = 0 if rng.random() < 0.04 else int(free_cpu * rng.choice(density))
        for j in range(24):
            want_cpu = rng.choice([100, 250, 500, 1000, 2000]) if j else 100
            want_mem = rng.choice([128, 256, 1024, 4096])
            if want_cpu > room_cpu or want_mem > free_mem:
                continue
            room_cpu -= want_cpu
            free_cpu -= want_cpu
            free_mem -= want_mem
            roll = rng.random()
            pods.append(
                pod(
                    f"p{i}-{j}",
                    name,
                    f"{want_cpu}m",
                    f"{want_mem}Mi",
                    labels={"app": rng.choice(["web", "api", "db"])},
                    owner="DaemonSet" if roll < 0.08 else rng.choice(["ReplicaSet", "StatefulSet", None]),
                    priority=rng.choice([None, 0, 1000, -(2**26)]),
                    annotations=rng.choice([None, {"controller.kubernetes.io/pod-deletion-cost": "-400000000"}])
                    if roll >= 0.12
                    else {"karpenter.sh/do-not-disrupt": "true"}
                    if roll >= 0.08
                    else None,
                )
            )
    for k in range(rng.choice([0, 0, 1, 3])):
        waiting = pod(f"pending-{k}", None, rng.choice(["250m", "1", "3"]), "512Mi")
        if rng.random() < 0.3:  # nominated to a node: that node is blocked
            nominated = {"nominated_node_name": rng.choice(nodes)[0].metadata.name}
            waiting = waiting.model_copy(update={"status": waiting.status.model_copy(update=nominated)})
        pods.append(waiting)
    pdbs = [pdb({"app": "db"}, rng.choice([0, 1]))] if rng.random() < 0.3 else []
    return snapshot(nodes, pods, pools=pools, pdbs=pdbs)


SEEDS = range(60)


@pytest.mark.parametrize("seed", SEEDS)
def test_decide_matches_the_slow_reference_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = random_cluster(seed)
    for multi in (100, 3):
        settings = Settings(multi_node_candidates=multi)
        fast = decide(snap, CATALOG, NOW, settings=settings)
        with monkeypatch.context() as m:
            m.setattr(method_mod, "PodInputs", lambda state, pods: convert_pods(state, list(pods)))
            m.setattr(Simulator, "hopeless", _reference_hopeless)
            m.setattr(consolidation, "_eviction_cost", _reference_eviction_cost)
            slow = decide(snap, CATALOG, NOW, settings=settings)
        assert fast.to_json() == slow.to_json()
        assert fast == slow


@pytest.mark.parametrize("seed", SEEDS)
def test_the_replace_bars_bound_before_simulating_changes_no_decision(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replace bar refuses a candidate set before simulating when even the cheapest type holding what the
    other nodes cannot take would save too little (``consolidation.replace_bar(..., at_most=True)``): the same
    commands and the same blocked nodes as asking the bar only of the simulated commands."""
    snap = random_cluster(seed)
    fast = decide(snap, CATALOG, NOW)
    real = consolidation.replace_bar

    def after_simulation_only(*args: Any, at_most: bool = False, **kwargs: Any) -> str | None:
        return None if at_most else real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(consolidation, "replace_bar", after_simulation_only)
        slow = decide(snap, CATALOG, NOW)
    assert fast.command == slow.command
    assert [(b.node, b.kind) for b in fast.blocked] == [(b.node, b.kind) for b in slow.blocked]


def test_the_reference_cases_cover_every_kind_of_decision() -> None:
    """The random clusters above exercise every path the speed-ups touch (guards the test's own value)."""
    methods = set()
    blocked_kinds = set()
    for seed in SEEDS:
        result = decide(random_cluster(seed), CATALOG, NOW)
        methods.add(result.command.method if result.command else None)
        blocked_kinds |= {b.message.split(" ")[0] for b in result.blocked}
        blocked_kinds |= {"budget" for b in result.blocked if "disruption budget" in b.message}
        blocked_kinds |= {"replace bar bound" for b in result.blocked if "(saving at most $" in b.message}
    assert {None, "emptiness", "drift", "single-node consolidation", "multi-node consolidation"} <= methods
    assert {"budget", "pod", "node", "its", "replace bar bound"} <= blocked_kinds


@pytest.mark.parametrize("seed", range(20))
def test_pod_inputs_convert_as_convert_pods(seed: int) -> None:
    snap = random_cluster(seed)
    bound = [p for c in build_candidates(snap, CATALOG, NOW) for p in c.movable]
    eager = convert_pods(snap.state, bound)
    lazy = PodInputs(snap.state, bound)
    assert set(lazy) == set(eager)
    assert len(lazy) == len(eager)
    for key, inp in eager.items():
        assert lazy.requests(key) == inp.requests  # before conversion: from the pod's spec
    half = list(eager)[::2]
    lazy.load(half)
    for key, inp in eager.items():
        assert lazy[key] == inp
        assert lazy.requests(key) == inp.requests
    assert lazy.get("default/nope") is None
    assert lazy.requests("default/nope") is None


def _full_cluster(count: int) -> Snapshot:
    """``count`` m5.xlarge nodes, each full of CPU, in a NodePool of that type only: nothing can be consolidated."""
    only = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}]
    one = snapshot([node("n000", "m5.xlarge")], [])
    quarter = build_input(one.state, CATALOG).nodes[0].allocatable["cpu"] // 4
    nodes = [node(f"n{i:03d}", "m5.xlarge") for i in range(count)]
    pods = [pod(f"p{i}-{j}", f"n{i:03d}", f"{quarter}m", "1Gi") for i in range(count) for j in range(4)]
    for i in range(0, count, 2):  # every other node is nominated for a pending pod (a blocker)
        waiting = pod(f"w{i}", None, "100m", "128Mi")
        nominated = {"nominated_node_name": f"n{i:03d}"}
        pods.append(waiting.model_copy(update={"status": waiting.status.model_copy(update=nominated)}))
    return snapshot(nodes, pods, pools=[pool(budgets=[{"nodes": "10%"}], extra=only)])


def test_a_full_cluster_round_does_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = {"eq": 0, "free": 0, "converted": 0, "evicted": 0, "nominated": 0}
    real_evicted = candidates._evicted
    real_eq = Candidate.__eq__
    real_convert = convert_pods

    def counting_eq(self: Candidate, other: object) -> bool:
        counts["eq"] += 1
        return bool(real_eq(self, other))

    def counting_free(n: Any) -> dict[str, int]:
        counts["free"] += 1
        return {k: max(0, v - n.requested.get(k, 0)) for k, v in n.allocatable.items()}

    def counting_convert(state: Any, pods: Any) -> Any:
        pods = list(pods)
        counts["converted"] += len(pods)
        return real_convert(state, pods)

    def counting_evicted(p: Any, now: Any) -> bool:
        counts["evicted"] += 1
        return real_evicted(p, now)

    def counting_frozenset(items: Any = ()) -> frozenset[Any]:
        if isinstance(items, set):  # the nominated nodes
            counts["nominated"] += len(items)
        return frozenset(items)

    monkeypatch.setattr(candidates, "_evicted", counting_evicted)
    monkeypatch.setattr(candidates, "frozenset", counting_frozenset, raising=False)
    monkeypatch.setattr(Candidate, "__eq__", counting_eq)
    monkeypatch.setattr(simulation, "_free", counting_free)
    monkeypatch.setattr(simulation, "pod_converter", lambda state: lambda pods: counting_convert(state, pods))
    monkeypatch.setattr(method_mod, "convert_pods", counting_convert, raising=False)  # an eager conversion there
    count = 60
    snap = _full_cluster(count)
    assert len(build_input(snap.state, CATALOG).nodes) == count
    result = decide(snap, CATALOG, NOW)
    assert result.command is None
    assert sum(b.kind.value == "Unconsolidatable" for b in result.blocked) == count // 2
    assert sum("nominated" in b.message for b in result.blocked) == count // 2
    assert counts["eq"] == 0  # was count * (count - 1) / 2: candidates compared pairwise
    assert counts["free"] <= 2 * count  # was count * count: every node's room per candidate
    assert counts["converted"] == 0  # was 4 * count: every pod converted before any simulation
    assert counts["evicted"] == 0  # no PodDisruptionBudget: was every pod, to find the PDBs selecting it
    assert counts["nominated"] <= count  # was (count / 2) per node: the nominated nodes' set copied per node


def test_decide_pauses_the_garbage_collector_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    real = build_candidates

    def spying(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr("nodeflow.disruption.round.build_candidates", spying)
    snap = random_cluster(1)
    try:
        assert gc.isenabled()
        decide(snap, CATALOG, NOW)
        assert gc.isenabled()  # restored
        gc.disable()
        decide(snap, CATALOG, NOW)
        assert not gc.isenabled()  # left as it was
        gc.enable()

        def failing(*args: Any) -> Any:
            seen.append(gc.isenabled())
            raise ValueError("boom")

        monkeypatch.setattr("nodeflow.disruption.round.build_candidates", failing)
        with pytest.raises(ValueError, match="boom"):
            decide(snap, CATALOG, NOW)
        assert gc.isenabled()  # restored after an error too
    finally:
        gc.enable()
    assert seen == [False, False, False]  # paused while deciding
