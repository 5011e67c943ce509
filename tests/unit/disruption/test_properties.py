"""Invariants of a disruption round on random small clusters:

- a consolidation or emptiness command never raises the cluster's $/hour;
- no NodePool loses more nodes than its budgets allow (checked with ``allowed`` per pool);
- a blocked node (do-not-disrupt pod, not initialized, deleting) is never a candidate;
- every moved pod fits where it moves: the moves, read back as a solver result, pass the
  independent checker ``benchmarks.validate.check_result`` (resources, requirements, taints, ports);
- the cheap pre-filter never rules out a candidate the simulation would consolidate.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.validate import check_result
from nodeflow.disruption.budgets import allowed
from nodeflow.disruption.candidates import build_candidates
from nodeflow.disruption.model import Reason
from nodeflow.disruption.round import decide
from nodeflow.disruption.simulation import Simulator
from nodeflow.plan import build_input, convert_pods
from nodeflow.scheduling.types import ExistingPlacement, SchedulingResult

from .builders import CATALOG, NOW, SIZES, node, pod, pool, snapshot

TYPES = sorted(SIZES)


@st.composite
def clusters(draw: Any) -> tuple[Any, set[str]]:
    count = draw(st.integers(2, 6))
    budget = draw(st.sampled_from(["0", "1", "2", "34%", "100%", "100%"]))
    nodes = []
    pods = []
    blocked: set[str] = set()
    for i in range(count):
        name = f"n{i}"
        it = draw(st.sampled_from(TYPES))
        initialized = draw(st.booleans()) or draw(st.booleans())
        drifted = draw(st.integers(0, 5)) == 0
        nodes.append(node(name, it, initialized=initialized, image="ami-old" if drifted else "ami-new"))
        if not initialized:
            blocked.add(name)
        cpu, mem = SIZES[it]
        free_cpu, free_mem = cpu * 1000 - 200, (mem - 1) * 1024
        for j in range(0 if draw(st.integers(0, 5)) == 0 else draw(st.integers(1, 3))):
            want_cpu = draw(st.sampled_from([250, 500, 1000, 2000]))
            want_mem = draw(st.sampled_from([256, 1024, 4096]))
            if want_cpu > free_cpu or want_mem > free_mem:
                break
            free_cpu -= want_cpu
            free_mem -= want_mem
            protect = draw(st.integers(0, 6)) == 0
            if protect:
                blocked.add(name)
            annotations = {"karpenter.sh/do-not-disrupt": "true"} if protect else None
            pods.append(pod(f"p{i}-{j}", name, f"{want_cpu}m", f"{want_mem}Mi", annotations=annotations))
    return snapshot(nodes, pods, pools=[pool(budgets=[{"nodes": budget}])]), blocked


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_round_invariants(case: tuple[Any, set[str]]) -> None:
    snap, blocked = case
    result = decide(snap, CATALOG, NOW)
    command = result.command
    if command is None:
        return
    # never a blocked node
    assert not set(command.candidates) & blocked
    # never raises cost (drift may replace with a dearer node: it is not a saving decision)
    if command.reason is not Reason.DRIFTED:
        assert command.price_after < command.price_before
    # budgets
    pools = {p.name: p for p in snap.state.node_pools}
    per_pool: dict[str, int] = defaultdict(int)
    for n in snap.state.nodes:
        per_pool[(n.metadata.labels or {})["karpenter.sh/nodepool"]] += 1
    for name, total in per_pool.items():
        limit = allowed(pools[name].spec.disruption.budgets, command.reason.value, total, 0, NOW)
        assert len(command.candidates) <= limit
    # every moved pod fits where it goes (independent checker)
    base = build_input(snap.state, CATALOG)
    moving = [p for p in snap.state.pods if p.spec.node_name in command.candidates]
    inputs = convert_pods(snap.state, moving)
    inp = dataclasses.replace(
        base,
        pods=tuple(inputs.values()),
        nodes=tuple(n for n in base.nodes if n.name not in command.candidates),
    )
    assert {m.pod for m in command.moves} == set(inputs)
    existing: dict[str, list[str]] = defaultdict(list)
    for m in command.moves:
        if m.node is not None:
            existing[m.node].append(m.pod)
    as_result = SchedulingResult(
        node_claims=command.replacements,
        existing=tuple(ExistingPlacement(k, tuple(v)) for k, v in sorted(existing.items())),
        unschedulable=(),
    )
    assert check_result(inp, as_result) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_cheap_prefilter_never_rules_out_a_real_consolidation(case: tuple[Any, set[str]]) -> None:
    snap, _ = case
    candidates = [c for c in build_candidates(snap, CATALOG, NOW) if c.price is not None and c.movable]
    sim = Simulator(
        build_input(snap.state, CATALOG), convert_pods(snap.state, [p for c in candidates for p in c.movable])
    )
    for c in candidates:
        result = sim.run([c])
        if result.unschedulable or len(result.node_claims) > 1:
            continue
        if result.node_claims and result.node_claims[0].price >= (c.price or 0):
            continue
        assert sim.hopeless([c], c.price or 0.0) is None, c.name
