"""Upper bounds of a solve (NodePool limits, NodeflowPolicy ceilings and group limits) and the size tables the
solver checks limits with: the bounds a plan could not cross are not bound, those it could cross are, and the
shortcuts (cached sizes, a used-up namespace ceiling's skip) answer exactly what the plain checks answer."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeflow.api.pool_names import PoolNames
from nodeflow.scheduling import bounds, packing
from nodeflow.scheduling.limits import Sizes, capacity
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.types import CeilingInput, GroupLimitInput, PodInput, SchedulingInput

from .fakes import CATALOG, itype, pod, pool


def test_could_cross_counts_each_nodeclaim_at_its_dearest_and_largest_type() -> None:
    inp = SchedulingInput(pods=tuple(pod(f"p{i}", "1500m") for i in range(4)), nodepools=(pool(),))
    result = solve(inp)
    dearest = sum(
        max(o.price for t in CATALOG if t.name in nc.instance_types for o in t.offerings) for nc in result.node_claims
    )
    largest = sum(max(t.capacity["cpu"] for t in CATALOG if t.name in nc.instance_types) for nc in result.node_claims)
    cheapest = result.total_price
    assert cheapest < dearest
    at = CeilingInput("p", "cluster", "", dearest)  # exactly the worst case: cannot be crossed
    under = CeilingInput("p", "cluster", "", (cheapest + dearest) / 2)  # the cheapest fits, a fallback may not
    limited = dataclasses.replace(inp, ceilings=(at, under))
    assert bounds.could_cross(result, limited) == bounds.Bounds(ceilings=(under,))
    group = GroupLimitInput("p", "g", PoolNames.of(["default"]), {"cpu": largest})
    tight = GroupLimitInput("p", "t", PoolNames.of(["default"]), {"cpu": largest - 1})
    other = GroupLimitInput("p", "o", PoolNames.of(["elsewhere"]), {"cpu": 0})
    grouped = dataclasses.replace(inp, group_limits=(group, tight, other))
    assert bounds.could_cross(result, grouped) == bounds.Bounds(group_limits=(tight,))
    pools = dataclasses.replace(inp, nodepools=(pool(limits={"cpu": largest - 1, "memory": 10**18}),))
    assert bounds.could_cross(result, pools) == bounds.Bounds(pools=frozenset({"default"}))
    assert bounds.could_cross(result, pools, skip=bounds.every(pools)) == bounds.Bounds()


def test_without_drops_every_bound_but_those_kept() -> None:
    inp = SchedulingInput(
        pods=(),
        nodepools=(pool("a", limits={"cpu": 1}), pool("b", limits={"cpu": 2}), pool("c")),
        ceilings=(CeilingInput("p", "cluster", "", 1.0),),
        group_limits=(GroupLimitInput("p", "g", PoolNames.of(["a"]), {"cpu": 1}),),
    )
    every = bounds.every(inp)
    assert every.pools == frozenset({"a", "b"})
    assert bounds.without(inp, every) == inp
    kept = bounds.without(inp, bounds.Bounds(pools=frozenset({"b"})))
    assert [p.limits for p in kept.nodepools] == [None, {"cpu": 2}, None]
    assert kept.ceilings == ()
    assert kept.group_limits == ()


SIZE_KEYS = st.lists(st.sampled_from(["cpu", "memory", "nodes", "pods", "nvidia.com/gpu"]), min_size=1, unique=True)


@settings(max_examples=200, deadline=None)
@given(keys=SIZE_KEYS, seed=st.integers(0, 10_000))
def test_sizes_answer_what_a_check_per_type_answers(keys: list[str], seed: int) -> None:
    rng = random.Random(seed)
    types = [
        itype(
            f"t{i}.x",
            rng.choice([1, 2, 4, 8]),
            rng.choice([2, 4, 16]),
            0.1,
            extra={"nvidia.com/gpu": rng.choice([0, 1000])},
        )
        for i in range(rng.randint(1, 12))
    ]
    sizes = Sizes.of(types, tuple(sorted(keys)))
    remaining = {k: rng.choice([0, 1000, 2000, 4000, 16 * 2**30 * 1000, 10**20]) for k in keys}
    assert sizes.within(remaining) == [
        i for i, t in enumerate(types) if all(capacity(t, k) <= v for k, v in remaining.items())
    ]
    subset = sorted(rng.sample(range(len(types)), rng.randint(1, len(types))))
    at = rng.randrange(len(subset))
    chosen = types[subset[at]]
    assert sizes.no_larger_than(at, subset) == [
        i for i, j in enumerate(subset) if all(capacity(types[j], k) <= capacity(chosen, k) for k in keys)
    ]
    assert types[sizes.smallest] == min(types, key=lambda t: tuple(capacity(t, k) for k in sorted(keys)))


@pytest.mark.parametrize("seed", range(6))
def test_a_namespace_short_of_its_ceiling_skips_only_nodeclaims_it_could_not_join(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Namespaces whose ceilings run out mid-solve: the plan is the one the solver makes checking every join."""
    rng = random.Random(seed)
    pods: list[PodInput] = []
    for i in range(rng.randint(20, 60)):
        ns = rng.choice(["a", "b", "c"])
        cpu = rng.choice(["0", "100m", "250m", "500m", "1", "2"])
        pods.append(dataclasses.replace(pod(f"{ns}-{i}", cpu, rng.choice(["256Mi", "1Gi", "4Gi"])), key=f"{ns}/p{i}"))
    ceilings = tuple(CeilingInput("p", "namespace", ns, rng.choice([0.05, 0.2, 0.5])) for ns in ("a", "b"))
    inp = SchedulingInput(pods=tuple(pods), nodepools=(pool(),), ceilings=ceilings)
    fast = solve(inp)
    monkeypatch.setattr(packing, "cannot_pay", lambda *_: False)  # never skip: every join checked
    assert solve(inp) == fast


def test_a_spent_namespace_still_fills_its_own_nodeclaims() -> None:
    """Namespace a's first pod opens a NodeClaim that spends its whole ceiling; a's smaller pods still join it (no
    dearer: their share costs nothing more), b's pods do not (a share of it would cross b's spent ceiling)."""
    big = dataclasses.replace(pod("big", "3", "2Gi"), key="a/big")
    small = tuple(dataclasses.replace(pod(f"s{i}", "200m", "256Mi"), key=f"a/s{i}") for i in range(2))
    other = dataclasses.replace(pod("o", "200m", "256Mi"), key="b/o")
    types = (itype("m.xlarge", 4, 16, 0.20), itype("m.2xlarge", 8, 32, 0.40))  # a's ceiling binds (the fallback)
    inp = SchedulingInput(
        pods=(big, *small, other),
        nodepools=(pool(instance_types=types),),
        ceilings=(CeilingInput("p", "namespace", "a", 0.20), CeilingInput("p", "namespace", "b", 0.0)),
    )
    result = solve(inp)
    (claim,) = result.node_claims
    assert claim.instance_types == ("m.xlarge",)  # trimmed to what a's ceiling leaves
    assert sorted(claim.pods) == ["a/big", "a/s0", "a/s1"]
    assert [u.pod for u in result.unschedulable] == ["b/o"]


def test_empty_limits_limit_nothing() -> None:
    """``spec.limits: {}`` (allowed by the CRD) bound to the solver: every type fits (the size table of no key once
    answered "none", and the limit message then failed on an empty key list)."""
    sizes = Sizes.of(CATALOG, ())
    assert sizes.within({}) == list(range(len(CATALOG)))
    assert sizes.no_larger_than(2, [1, 2, 3]) == [0, 1, 2]
    inp = SchedulingInput(pods=(pod("a"),), nodepools=(pool(limits={}),))
    bound = bounds.without(inp, bounds.every(inp))
    assert bound.nodepools[0].limits == {}
    assert solve(bound).node_claims == solve(dataclasses.replace(inp, nodepools=(pool(),))).node_claims


def test_a_spent_bound_is_bound_from_the_first_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NodePool at its limit, a ceiling already reached: the solver does not first plan without them (a plan
    that would cross them for sure), it solves once, bound."""
    from nodeflow.scheduling import solver

    runs: list[SchedulingInput] = []
    real = solver._Solver.__init__

    def counting(self: solver._Solver, inp: SchedulingInput, **options: Any) -> None:
        runs.append(inp)
        real(self, inp, **options)

    monkeypatch.setattr(solver._Solver, "__init__", counting)
    full = pool("full", limits={"cpu": 0}, weight=10)
    capped = CeilingInput("p", "nodePool", "other", 0.5, in_use=0.5)
    inp = SchedulingInput(
        pods=tuple(pod(f"p{i}") for i in range(3)), nodepools=(full, pool("other"), pool("open")), ceilings=(capped,)
    )
    assert bounds.spent(inp) == bounds.Bounds(ceilings=(capped,), pools=frozenset({"full"}))
    result = solve(inp)
    assert len(runs) == 1
    assert {nc.nodepool for nc in result.node_claims} == {"open"}
