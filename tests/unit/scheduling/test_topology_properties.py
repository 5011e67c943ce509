"""Property tests: random pods with topology spread and pod (anti-)affinity, random NodePools
and existing nodes with running pods; every plan must pass the independent validator
(benchmarks/validate.py) and be deterministic."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.validate import check_result
from nodeflow.api import labels as wk
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.types import (
    AffinityTerm,
    NodeInput,
    NodePoolInput,
    PodInput,
    RunningPod,
    SchedulingInput,
    Selector,
    TopologySpread,
)

from .fakes import CATALOG, GI, ZONES

ZONE, HOST = wk.LABEL_ZONE, wk.LABEL_HOSTNAME
KINDS = ("plain", "zone-spread", "host-spread", "zone-affinity", "host-anti", "zone-anti", "near-app0", "spread-anyway")
CPUS = (100, 250, 500, 1000, 1500)
MEMS = (128, 512, 1024, 2048)


def _selector(app: str) -> Selector:
    return Selector(match_labels=(("app", app),))


def _constraints(kind: str, app: str, skew: int) -> dict[str, object]:
    sel = _selector(app)
    own = frozenset({"default"})
    if kind == "zone-spread":
        return {"spread": (TopologySpread(ZONE, skew, sel),)}
    if kind == "host-spread":
        return {"spread": (TopologySpread(HOST, skew, sel),)}
    if kind == "spread-anyway":
        return {"spread": (TopologySpread(ZONE, 1, sel, schedule_anyway=True),)}
    if kind == "zone-affinity":
        return {"affinity": (AffinityTerm(ZONE, sel, own),)}
    if kind == "host-anti":
        return {"affinity": (AffinityTerm(HOST, sel, own, anti=True),)}
    if kind == "zone-anti":
        return {"affinity": (AffinityTerm(ZONE, sel, own, anti=True),)}
    if kind == "near-app0":
        return {"affinity": (AffinityTerm(ZONE, _selector("app0"), own),)}
    return {}


@st.composite
def inputs(draw: st.DrawFn) -> SchedulingInput:
    pods: list[PodInput] = []
    for index in range(draw(st.integers(1, 4))):
        app = f"app{index}"
        kind = draw(st.sampled_from(KINDS))
        skew = draw(st.integers(1, 2))
        requests = {
            "cpu": draw(st.sampled_from(CPUS)),
            "memory": draw(st.sampled_from(MEMS)) * 2**20 * 1000,
            "pods": 1000,
        }
        for replica in range(draw(st.integers(1, 6))):
            pods.append(
                PodInput(
                    key=f"default/{app}-{replica}",
                    requests=requests,
                    labels={"app": app},
                    **_constraints(kind, app, skew),  # type: ignore[arg-type]
                )
            )
    zones = draw(st.sets(st.sampled_from(ZONES), min_size=1))
    pool = NodePoolInput(
        name="pool",
        requirements=Requirements([Requirement.create(ZONE, "In", sorted(zones))]),
        instance_types=CATALOG,
        limits={"cpu": draw(st.sampled_from((8_000, 64_000, 1_000_000)))},
    )
    nodes = []
    for n in range(draw(st.integers(0, 3))):
        running = tuple(
            RunningPod(
                "default",
                {"app": draw(st.sampled_from(("app0", "app1", "other")))},
                anti_affinity=(AffinityTerm(ZONE, _selector("app2"), None, anti=True),) if draw(st.booleans()) else (),
            )
            for _ in range(draw(st.integers(0, 2)))
        )
        zone = draw(st.sampled_from(ZONES))
        nodes.append(
            NodeInput(
                name=f"node-{n}",
                labels={ZONE: zone, HOST: f"node-{n}", wk.LABEL_ARCH: "amd64", wk.LABEL_OS: "linux"},
                allocatable={"cpu": draw(st.sampled_from((1000, 4000))), "memory": 8 * GI, "pods": 110_000},
                requested={"cpu": 500, "memory": GI, "pods": 1000 * len(running)},
                running=running,
            )
        )
    return SchedulingInput(pods=tuple(pods), nodepools=(pool,), nodes=tuple(nodes))


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(inputs())
def test_every_plan_is_valid(inp: SchedulingInput) -> None:
    result = solve(inp)
    assert check_result(inp, result) == []


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(inputs())
def test_plans_are_deterministic(inp: SchedulingInput) -> None:
    first = json.dumps(solve(inp).to_json(), sort_keys=True)
    shuffled = SchedulingInput(pods=tuple(reversed(inp.pods)), nodepools=inp.nodepools, nodes=inp.nodes)
    assert json.dumps(solve(shuffled).to_json(), sort_keys=True) == first
