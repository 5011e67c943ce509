"""Property tests: random pods with topology spread and pod (anti-)affinity, random NodePools
and existing nodes with running pods; every plan must pass the independent validator
(benchmarks/validate.py) and be deterministic."""

from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.validate import check_result
from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.taints import Taint, Toleration
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

from .fakes import CATALOG, GI, ZONES, itype
from .kube_rules import after_launch
from .test_solver_properties import real_world

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


# --- kube-scheduler's rules after launch, on richer inputs ---------------------------------------------------------
#
# Every plan must hold as kube-scheduler will see it once each NodeClaim is a node, whichever zone, instance type
# and capacity type its launch picks (``kube_rules.after_launch``). The inputs mix: several NodePools (zones,
# capacity types, taints, limits), existing nodes (zones, taints, running pods with anti-affinity, cordoned, in
# flight), and workloads whose labels other workloads' selectors pick, with zone / hostname / capacity-type spreads
# (maxSkew, minDomains, nodeAffinityPolicy, nodeTaintsPolicy), pod affinity and anti-affinity, node affinity and
# tolerations. NODEFLOW_TOPOLOGY_EXAMPLES raises the example count (several hundred to hunt; the suite runs a few).

CT = wk.LABEL_CAPACITY_TYPE
ZONES3 = ("zone-a", "zone-b", "zone-c")
CATALOG3 = tuple(
    itype(name, cpu, mem, price, spot=price / 2.5, zones=zones)
    for name, cpu, mem, price, zones in (
        ("m.large", 2, 8, 0.10, ZONES3),
        ("m.xlarge", 4, 16, 0.20, ZONES3),
        ("m.2xlarge", 8, 32, 0.40, ZONES3[:2]),
        ("c.large", 2, 4, 0.085, ZONES3[1:]),
        ("c.xlarge", 4, 8, 0.17, ZONES3),
        ("r.large", 2, 16, 0.126, ZONES3[:1] + ZONES3[2:]),
    )
)
TAINT = Taint("dedicated", "NoSchedule", "x")
TOLERATE = (Toleration("dedicated", "Exists"),)
EXAMPLES = int(os.environ.get("NODEFLOW_TOPOLOGY_EXAMPLES", "60"))


def _rule(draw: st.DrawFn, index: int, apps: int, keys: tuple[str, ...]) -> dict[str, tuple[object, ...]]:
    """One inter-pod rule of workload ``index``: on its own app's labels, another app's, or a tier's."""
    target = draw(st.sampled_from((index, index, draw(st.integers(0, apps - 1)))))
    sel = _selector(f"app{target}")
    if draw(st.integers(0, 5)) == 0:
        sel = Selector(expressions=(("tier", "In", frozenset({draw(st.sampled_from(("db", "web")))})),))
    kind = draw(st.sampled_from(("spread", "spread", "affinity", "anti")))
    if kind == "spread":
        spread = TopologySpread(
            draw(st.sampled_from(keys)),
            draw(st.integers(1, 2)),
            sel,
            schedule_anyway=draw(st.integers(0, 5)) == 0,
            min_domains=draw(st.sampled_from((None, None, 2, 3, 4))),
            honor_node_affinity=draw(st.integers(0, 4)) != 0,
            honor_node_taints=draw(st.integers(0, 3)) == 0,
        )
        return {"spread": (spread,)}
    namespaces = draw(st.sampled_from((frozenset({"default"}), frozenset({"default"}), frozenset({"other"}), None)))
    term = AffinityTerm(
        draw(st.sampled_from((ZONE, HOST))),
        sel,
        namespaces,
        anti=kind == "anti",
        weight=draw(st.sampled_from((0, 0, 0, 50))),
    )
    return {"affinity": (term,)}


@st.composite
def rich_inputs(draw: st.DrawFn) -> SchedulingInput:
    catalog = CATALOG3 if draw(st.integers(0, 3)) else _real_sample()
    all_zones = tuple(sorted({o.zone for it in catalog for o in it.offerings}))
    zones = draw(st.sampled_from((all_zones, all_zones[:2])))
    keys = (ZONE, ZONE, HOST, CT)
    apps = draw(st.integers(1, 5))
    pods: list[PodInput] = []
    for index in range(apps):
        constraints: dict[str, tuple[object, ...]] = {"spread": (), "affinity": ()}
        for _ in range(draw(st.integers(0, 2))):
            for name, rules in _rule(draw, index, apps, keys).items():
                constraints[name] += rules
        # Some workloads wear another's labels (counted by its rules without carrying them).
        labels = {"app": f"app{draw(st.integers(0, index))}" if draw(st.integers(0, 3)) == 0 else f"app{index}"}
        if draw(st.booleans()):
            labels["tier"] = draw(st.sampled_from(("db", "web")))
        namespace = "other" if draw(st.integers(0, 5)) == 0 else "default"
        requirements = (Requirements(),)
        if draw(st.integers(0, 3)) == 0:
            requirements = (Requirements([Requirement.create(ZONE, "In", draw(_subset(zones)))]),)
        elif draw(st.integers(0, 5)) == 0:
            requirements = (
                Requirements([Requirement.create(CT, "In", [draw(st.sampled_from(("spot", "on-demand")))])]),
            )
        requests = {"cpu": draw(st.sampled_from(CPUS)), "memory": draw(st.sampled_from(MEMS)) * 2**20 * 1000}
        for replica in range(draw(st.integers(1, 8))):
            pods.append(
                PodInput(
                    key=f"{namespace}/app{index}-{replica}",
                    requests={**requests, "pods": 1000},
                    requirements=requirements,
                    tolerations=TOLERATE if (draw(st.integers(0, 3)) == 0 and replica == 0) or index % 3 == 2 else (),
                    labels=labels,
                    **constraints,  # type: ignore[arg-type]
                )
            )
    pools = []
    for p in range(draw(st.integers(1, 3))):
        reqs = [Requirement.create(ZONE, "In", draw(_subset(zones)))]
        if draw(st.booleans()):
            reqs.append(Requirement.create(CT, "In", draw(_subset(("spot", "on-demand")))))
        pools.append(
            NodePoolInput(
                name=f"pool-{p}",
                requirements=Requirements(reqs),
                instance_types=catalog,
                weight=draw(st.integers(0, 1)),
                taints=(TAINT,) if p > 0 and draw(st.booleans()) else (),
                limits={"cpu": draw(st.sampled_from((8_000, 1_000_000)))} if draw(st.integers(0, 3)) == 0 else None,
            )
        )
    nodes = []
    for n in range(draw(st.integers(0, 4))):
        running = tuple(
            RunningPod(
                draw(st.sampled_from(("default", "default", "other"))),
                {"app": f"app{draw(st.integers(0, apps))}"},
                anti_affinity=(AffinityTerm(draw(st.sampled_from((ZONE, HOST))), _selector("app1"), None, anti=True),)
                if draw(st.integers(0, 4)) == 0
                else (),
            )
            for _ in range(draw(st.integers(0, 3)))
        )
        labels = {HOST: f"node-{n}", wk.LABEL_ARCH: "amd64", wk.LABEL_OS: "linux", CT: "on-demand"}
        if draw(st.integers(0, 5)) != 0:
            labels[ZONE] = draw(st.sampled_from(zones))
        nodes.append(
            NodeInput(
                name=f"node-{n}",
                labels=labels,
                allocatable={"cpu": draw(st.sampled_from((1000, 4000))), "memory": 8 * GI, "pods": 110_000},
                requested={"cpu": 500, "memory": GI, "pods": 1000 * len(running)},
                taints=(TAINT,) if draw(st.integers(0, 3)) == 0 else (),
                running=running,
                schedulable=draw(st.integers(0, 6)) != 0,
                in_flight=draw(st.integers(0, 6)) == 0,
            )
        )
    return SchedulingInput(pods=tuple(pods), nodepools=tuple(pools), nodes=tuple(nodes))


def _real_sample() -> tuple[InstanceType, ...]:
    """Some real instance types of the bundled us-east-1 snapshot: six zones, types not sold in all of them."""
    return real_world().types[::4]


def _subset(values: tuple[str, ...]) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(values), min_size=1, max_size=len(values), unique=True).map(sorted)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(rich_inputs())
def test_every_plan_holds_after_launch(inp: SchedulingInput) -> None:
    result = solve(inp)
    assert after_launch(inp, result) == []
