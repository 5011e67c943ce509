"""Property tests of the solver: random pods, NodePools and nodes; the plan must always be sound.

Inputs come from two "worlds": the hand-made fake catalog and a fixed sample of ~80 real
instance types of the bundled us-east-1 snapshot. Label values are drawn both from values the
world has and from values it does not have, so unschedulable pods are common too.

The checks below are written against the *meaning* of a plan (node labels, allocatable,
offerings), not against the solver's helpers, so that they can catch the solver disagreeing
with itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeflow.api import labels as wk
from nodeflow.catalog.instancetypes import NodeClassSettings, resolve_instance_types
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.catalog.offline import load_offline
from nodeflow.scheduling.nodepools import NO_NODEPOOL
from nodeflow.scheduling.packing import MAX_INSTANCE_TYPES
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.taints import Taint, Toleration
from nodeflow.scheduling.types import (
    HostPort,
    NodeClaimPlan,
    NodeInput,
    NodePoolInput,
    PodInput,
    SchedulingInput,
    SchedulingResult,
)

from .fakes import CATALOG, GI, ZONES
from .fakes import pod as fake_pod
from .fakes import pool as fake_pool
from .kube_rules import after_launch, node_labels

MI = GI // 1024
GPU = wk.RESOURCE_NVIDIA_GPU
TEAM = "example.com/team"  # a custom label: only NodePool template labels / node labels define it

PROPERTY_SETTINGS = settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- worlds --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    name: str
    types: tuple[InstanceType, ...]
    zones: tuple[str, ...]
    archs: tuple[str, ...]
    categories: tuple[str, ...]


def _world(name: str, types: Sequence[InstanceType]) -> World:
    return World(
        name=name,
        types=tuple(types),
        zones=tuple(sorted({o.zone for it in types for o in it.offerings})),
        archs=tuple(sorted({it.labels[wk.LABEL_ARCH] for it in types})),
        categories=tuple(sorted({it.labels[wk.LABEL_INSTANCE_CATEGORY] for it in types})),
    )


# Always in the real sample (GPU, Graviton, burstable, small): the rest is every 17th type by name.
_REAL_PICKS = ("m5.large", "m5.xlarge", "c5.large", "r5.large", "t3.medium", "m6g.large", "c6g.xlarge")
_REAL_PICKS += ("g4dn.xlarge", "g5.xlarge", "m7i.2xlarge", "inf2.xlarge")


@cache
def real_world() -> World:
    everything = resolve_instance_types(load_offline("us-east-1"), NodeClassSettings())
    chosen = {it.name: it for it in everything[::17]}
    chosen.update({it.name: it for it in everything if it.name in _REAL_PICKS})
    assert set(_REAL_PICKS) <= set(chosen), "the offline snapshot lost a type the sample relies on"
    return _world("real", [chosen[name] for name in sorted(chosen)])


FAKE_WORLD = _world("fake", CATALOG)
assert set(FAKE_WORLD.zones) == set(ZONES)


# --- strategies ----------------------------------------------------------------------------------

TAINTS = (
    Taint("dedicated", "NoSchedule", "gpu"),
    Taint("team", "NoExecute", "a"),
    Taint("soft", "PreferNoSchedule", "x"),  # never blocks scheduling
)
TOLERATIONS = (
    Toleration("dedicated", "Equal", "gpu", "NoSchedule"),
    Toleration("dedicated", "Equal", "cpu", "NoSchedule"),  # wrong value: tolerates nothing here
    Toleration("dedicated", "Exists"),
    Toleration("team", "Equal", "a", ""),
    Toleration("team", "Exists", "", "NoSchedule"),  # wrong effect for team:NoExecute
    Toleration("", "Exists"),  # tolerates everything
)
# Wildcard host IPs only: see test_wildcard_host_ip_conflicts_with_a_specific_ip for other IPs.
HOST_PORTS = (("0.0.0.0", "TCP", 80), ("0.0.0.0", "TCP", 443), ("0.0.0.0", "UDP", 80))
CPU_MILLI = (100, 250, 500, 1000, 1500, 2000, 3500, 7000, 15000, 40000)
MEMORY = (128 * MI, 512 * MI, GI, 2 * GI, 4 * GI, 7 * GI, 15 * GI, 30 * GI, 64 * GI)


def _values(existing: Sequence[str], missing: Sequence[str]) -> st.SearchStrategy[list[str]]:
    # Mostly values that exist: one missing value is enough to make a requirement unsatisfiable.
    return st.lists(st.sampled_from(tuple(existing) * 4 + tuple(missing)), min_size=1, max_size=3, unique=True)


def _label_values(world: World) -> dict[str, tuple[str, ...]]:
    """Per constrained key: values the world has, then values it does not have."""
    return {
        wk.LABEL_ARCH: (*world.archs, "s390x"),
        wk.LABEL_ZONE: (*world.zones, "nowhere-1z"),
        wk.LABEL_CAPACITY_TYPE: ("on-demand", "spot", "reserved"),  # nothing is offered as reserved
        wk.LABEL_INSTANCE_CATEGORY: (*world.categories, "zz"),
        TEAM: ("a", "b"),
    }


@st.composite
def requirement(draw: st.DrawFn, world: World, *, custom: bool) -> Requirement:
    """One requirement on arch / zone / capacity type / category / instance-cpu / GPU / team."""
    values = _label_values(world)
    keys = [wk.LABEL_ARCH, wk.LABEL_ZONE, wk.LABEL_CAPACITY_TYPE, wk.LABEL_INSTANCE_CATEGORY]
    keys += [wk.LABEL_INSTANCE_CPU, wk.LABEL_INSTANCE_GPU_COUNT] + ([TEAM] if custom else [])
    key = draw(st.sampled_from(keys))
    if key == wk.LABEL_INSTANCE_CPU:
        op = draw(st.sampled_from(("Gt", "Lt", "Gte", "Lte")))
        return Requirement.create(key, op, [str(draw(st.sampled_from((1, 2, 3, 4, 8, 16, 64))))])
    if key == wk.LABEL_INSTANCE_GPU_COUNT:
        op = draw(st.sampled_from(("Exists", "DoesNotExist", "In")))
        return Requirement.create(key, op, ["1"] if op == "In" else [])
    op = draw(st.sampled_from(("In", "In", "NotIn", "Exists")))
    if op == "Exists":
        return Requirement.create(key, op)
    chosen = draw(_values(values[key][:-1], values[key][-1:]))
    return Requirement.create(key, op, chosen[:1] if op == "NotIn" else chosen)


@st.composite
def pod_alternatives(draw: st.DrawFn, world: World) -> tuple[Requirements, ...]:
    """nodeSelector (In) ANDed into 0-2 ORed node-affinity terms, as ``plan`` builds them."""
    values = _label_values(world)
    selector_keys = draw(st.lists(st.sampled_from(sorted(values)), max_size=2, unique=True))
    if TEAM in selector_keys and draw(st.booleans()):
        selector_keys.remove(TEAM)  # only some NodePools define the team label
    # Mostly values that exist: a missing one makes the pod unschedulable, which is common enough.
    selector = Requirements(
        Requirement.create(k, "In", [draw(st.sampled_from(values[k][:-1] * 3 + values[k][-1:]))]) for k in selector_keys
    )
    terms = draw(st.lists(st.lists(requirement(world, custom=True), min_size=1, max_size=2), max_size=2))
    if not terms or draw(st.booleans()):
        return (selector,)
    return tuple(selector.add(Requirements(term)) for term in terms)


@st.composite
def workloads(draw: st.DrawFn, world: World) -> list[PodInput]:
    """A few workloads of 1-5 identical replicas (the solver groups identical pods)."""
    pods: list[PodInput] = []
    for w in range(draw(st.integers(0, 6))):
        requests = {"cpu": draw(st.sampled_from(CPU_MILLI)), "memory": draw(st.sampled_from(MEMORY)), "pods": 1000}
        if draw(st.integers(0, 9)) == 0:
            requests[GPU] = 1000 * draw(st.sampled_from((1, 2)))
        requirements = draw(pod_alternatives(world))
        tolerations = tuple(draw(st.lists(st.sampled_from(TOLERATIONS), max_size=3, unique=True)))
        ports: frozenset[HostPort] = frozenset()
        if draw(st.integers(0, 4)) == 0:
            ports = frozenset(draw(st.lists(st.sampled_from(HOST_PORTS), min_size=1, max_size=2)))
        for r in range(draw(st.integers(1, 5))):
            # Names interleave across workloads so sorting and grouping orders differ.
            key = f"ns/p{r}-w{w}"
            pods.append(
                PodInput(
                    key=key, requests=requests, requirements=requirements, tolerations=tolerations, host_ports=ports
                )
            )
    return pods


@st.composite
def nodepools(draw: st.DrawFn, world: World) -> list[NodePoolInput]:
    pools = []
    subsets = (world.types, world.types[::2], world.types[1::2])
    for i in range(draw(st.sampled_from((0, 1, 1, 2, 2, 2, 3, 3)))):
        limits = None
        if draw(st.booleans()):
            limits = {"cpu": 1000 * draw(st.sampled_from((0, 2, 4, 16, 64, 256)))}
        pools.append(
            NodePoolInput(
                name=f"pool-{i}",
                requirements=Requirements(draw(st.lists(requirement(world, custom=False), max_size=2))),
                instance_types=draw(st.sampled_from(subsets)),
                weight=draw(st.integers(0, 2)),
                taints=tuple(draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique=True))) * (i % 2),
                labels={TEAM: draw(st.sampled_from(("a", "b")))} if draw(st.booleans()) else {},
                limits=limits,
                error="EC2NodeClass 'gone' was not found" if draw(st.integers(0, 20)) == 0 else None,
            )
        )
    return pools


@st.composite
def existing_nodes(draw: st.DrawFn, world: World, pool_names: Sequence[str]) -> list[NodeInput]:
    values = _label_values(world)
    nodes = []
    for i in range(draw(st.sampled_from((0, 1, 2, 3, 3, 4)))):
        name = f"node-{i}"
        labels = {wk.LABEL_HOSTNAME: name}
        for key in (wk.LABEL_ARCH, wk.LABEL_ZONE, wk.LABEL_CAPACITY_TYPE, wk.LABEL_INSTANCE_CATEGORY, TEAM):
            if draw(st.integers(0, 3)) == 0:
                labels[key] = draw(st.sampled_from(values[key][:-1]))
        nodepool = draw(st.sampled_from((None, *pool_names)))
        if nodepool is not None:
            labels[wk.LABEL_NODEPOOL] = nodepool
            labels[wk.LABEL_INITIALIZED] = "true"
        allocatable = {
            "cpu": 1000 * draw(st.sampled_from((2, 8, 16, 32, 64))),
            "memory": GI * draw(st.sampled_from((4, 32, 64, 256))),
            "pods": 1000 * draw(st.sampled_from((4, 29, 110))),
        }
        if draw(st.integers(0, 4)) == 0:
            allocatable[GPU] = 1000
        # Already requested: a share of each resource (never over-committed to begin with).
        requested = {k: v * draw(st.sampled_from((0, 1, 3, 4))) // 4 for k, v in allocatable.items()}
        nodes.append(
            NodeInput(
                name=name,
                labels=labels,
                allocatable=allocatable,
                capacity={k: v + 100 for k, v in allocatable.items()},
                taints=tuple(draw(st.lists(st.sampled_from(TAINTS), max_size=1))) * (i % 2),
                requested=requested,
                host_ports=frozenset(draw(st.lists(st.sampled_from(HOST_PORTS), max_size=1))),
                nodepool=nodepool,
                in_flight=draw(st.integers(0, 4)) == 0,
                schedulable=draw(st.integers(0, 5)) != 0,
            )
        )
    return nodes


@st.composite
def daemonsets(draw: st.DrawFn, world: World) -> list[PodInput]:
    daemons = []
    for i in range(draw(st.integers(0, 2))):
        arch = draw(st.sampled_from((None, *world.archs)))
        daemons.append(
            PodInput(
                key=f"kube-system/ds-{i}",
                requests={"cpu": draw(st.sampled_from((50, 100, 500))), "memory": draw(st.sampled_from(MEMORY[:3]))},
                requirements=(Requirements.from_labels({wk.LABEL_ARCH: arch} if arch else {}),),
                tolerations=tuple(draw(st.lists(st.sampled_from(TOLERATIONS), max_size=1))),
            )
        )
    return daemons


@st.composite
def scheduling_inputs(draw: st.DrawFn) -> SchedulingInput:
    world = FAKE_WORLD if draw(st.booleans()) else real_world()
    pools = draw(nodepools(world))
    return SchedulingInput(
        pods=tuple(draw(workloads(world))),
        nodepools=tuple(pools),
        nodes=tuple(draw(existing_nodes(world, [p.name for p in pools]))),
        daemon_pods=tuple(draw(daemonsets(world))),
    )


# --- independent oracles -------------------------------------------------------------------------


def satisfied_by(labels: Mapping[str, str], alternative: Requirements) -> bool:
    """Does a node with exactly these labels satisfy one node-affinity alternative?"""
    for key, req in alternative.items():
        value = labels.get(key)
        if value is None:
            if not req.allows_absent():
                return False
        elif not req.has(value):
            return False
    return True


def pod_fits_labels(pod: PodInput, labels: Mapping[str, str]) -> bool:
    return any(satisfied_by(labels, alt) for alt in pod.requirements)


def blocking_taints(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> list[Taint]:
    return [
        t
        for t in taints
        if t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in tolerations)
    ]


def fits(requests: Mapping[str, int], allocatable: Mapping[str, int]) -> bool:
    return all(v <= allocatable.get(k, 0) for k, v in requests.items() if v > 0)


def plus(*resources: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in resources:
        for k, v in item.items():
            out[k] = out.get(k, 0) + v
    return out


def daemon_overhead(inp: SchedulingInput, pool: NodePoolInput) -> dict[str, int]:
    """DaemonSet pods that can run on the pool's nodes (they select on arch only, see above)."""
    arch_req = pool.requirements.get(wk.LABEL_ARCH)
    total: dict[str, int] = {}
    for ds in inp.daemon_pods:
        if blocking_taints(ds.tolerations, pool.taints):
            continue
        wanted = ds.requirements[0].get(wk.LABEL_ARCH)
        if wanted is not None and arch_req is not None and not arch_req.has(next(iter(wanted.values))):
            continue
        total = plus(total, ds.requests)
    return total


def allowed_offerings(it: InstanceType, reqs: Requirements) -> list[Offering]:
    zone, ctype = reqs.get(wk.LABEL_ZONE), reqs.get(wk.LABEL_CAPACITY_TYPE)
    zone_id = reqs.get(wk.LABEL_ZONE_ID)
    return [
        o
        for o in it.offerings
        if o.available
        and (zone is None or zone.has(o.zone))
        and (ctype is None or ctype.has(o.capacity_type))
        and (zone_id is None or zone_id.has(o.zone_id))
    ]


def ports_conflict(a: HostPort, b: HostPort) -> bool:
    """Kubernetes' NodePorts rule: same protocol and port, and the same IP or either is 0.0.0.0."""
    return a[1:] == b[1:] and (a[0] == b[0] or "0.0.0.0" in (a[0], b[0]))


def assert_no_port_conflict(where: str, groups: Sequence[tuple[str, frozenset[HostPort]]]) -> None:
    for (name_a, ports_a), (name_b, ports_b) in combinations(groups, 2):
        clash = [(a, b) for a in ports_a for b in ports_b if ports_conflict(a, b)]
        assert not clash, f"{name_a} and {name_b} both bind {clash[0]} on {where}"


def claim_types(claim: NodeClaimPlan, pool: NodePoolInput) -> list[InstanceType]:
    by_name = {it.name: it for it in pool.instance_types}
    missing = [name for name in claim.instance_types if name not in by_name]
    assert not missing, f"claim lists types its NodePool {pool.name} does not have: {missing}"
    return [by_name[name] for name in claim.instance_types]


# --- properties ----------------------------------------------------------------------------------


def check_accounting(inp: SchedulingInput, result: SchedulingResult) -> None:
    """(a) every pending pod exactly once; unschedulable pods say why for every NodePool."""
    placed = [p for nc in result.node_claims for p in nc.pods]
    placed += [p for e in result.existing for p in e.pods]
    placed += [u.pod for u in result.unschedulable]
    assert sorted(placed) == sorted(p.key for p in inp.pods)
    expected_keys = {p.name for p in inp.nodepools} or {NO_NODEPOOL}
    for item in result.unschedulable:
        assert set(item.reasons) == expected_keys, item
        assert all(reason.strip() for reason in item.reasons.values()), item
    for claim in result.node_claims:
        assert claim.pods, f"empty NodeClaim {claim}"


def check_claims(inp: SchedulingInput, result: SchedulingResult) -> None:
    """(b) capacity, (d) constraints, (g) order and price of every NodeClaim."""
    pods = {p.key: p for p in inp.pods}
    pools = {p.name: p for p in inp.nodepools}
    for claim in result.node_claims:
        pool = pools[claim.nodepool]
        assert pool.error is None, f"NodeClaim from a broken NodePool: {claim}"
        types = claim_types(claim, pool)
        assert 1 <= len(types) <= MAX_INSTANCE_TYPES
        assert len(set(claim.instance_types)) == len(claim.instance_types)

        # (b) requests are daemon overhead + the pods, and fit every listed type.
        expected = plus(daemon_overhead(inp, pool), *(pods[k].requests for k in claim.pods))
        assert {k: v for k, v in claim.requests.items() if v} == {k: v for k, v in expected.items() if v}
        for it in types:
            assert fits(claim.requests, it.allocatable), f"{it.name} cannot hold {claim.requests}: {claim}"

        # (d) the claim's own choices are allowed by its requirements ...
        reqs = claim.requirements
        ctype, zone = reqs.get(wk.LABEL_CAPACITY_TYPE), reqs.get(wk.LABEL_ZONE)
        assert ctype is None or ctype.has(claim.capacity_type), claim
        assert claim.zones, f"no zone to launch in: {claim}"
        assert zone is None or all(zone.has(z) for z in claim.zones), claim
        # ... the requirements keep the NodePool's and each pod's (some alternative) ...
        assert reqs.intersects(pool.requirements) is None, (reqs, pool.requirements)
        assert_no_port_conflict(f"NodeClaim {claim.pods}", [(k, pods[k].host_ports) for k in claim.pods])
        for key in claim.pods:
            assert any(reqs.intersects(alt) is None for alt in pods[key].requirements), (key, reqs)
            assert not blocking_taints(pods[key].tolerations, pool.taints), (key, pool.taints)
        # ... and every node the launcher may make from it (a listed type in an offering the
        # requirements allow) satisfies the NodePool and every pod on it.
        launchable = {(o.zone, o.capacity_type) for it in types for o in allowed_offerings(it, reqs)}
        assert all((z, claim.capacity_type) in launchable for z in claim.zones), claim
        for it in types:
            offerings = allowed_offerings(it, reqs)
            assert offerings, f"{it.name} has no offering the claim allows: {claim}"
            for offering in offerings:
                labels = node_labels(it, offering, claim.requirements, pool)
                assert satisfied_by(labels, reqs), (it.name, offering, reqs)
                assert satisfied_by(labels, pool.requirements), (it.name, offering, pool.requirements)
                for key in claim.pods:
                    assert pod_fits_labels(pods[key], labels), (key, it.name, offering)

        # (g) cheapest first, and the price is the first type's cheapest allowed offering.
        prices = [min(o.price for o in allowed_offerings(it, reqs)) for it in types]
        assert prices == sorted(prices), list(zip(claim.instance_types, prices, strict=True))
        cheapest = min(allowed_offerings(types[0], reqs), key=lambda o: o.price)
        assert claim.price == cheapest.price, (claim.price, cheapest)
        assert any(
            o.price == claim.price and o.capacity_type == claim.capacity_type for o in allowed_offerings(types[0], reqs)
        ), claim


def check_existing(inp: SchedulingInput, result: SchedulingResult) -> None:
    """(c) existing nodes are not over-committed; (d) their labels and taints admit the pods."""
    pods = {p.key: p for p in inp.pods}
    nodes = {n.name: n for n in inp.nodes}
    assert len({e.name for e in result.existing}) == len(result.existing)
    for placement in result.existing:
        node = nodes[placement.name]
        assert node.schedulable, f"pods placed on cordoned node {node.name}"
        assert placement.in_flight == node.in_flight
        used = plus(node.requested, *(pods[k].requests for k in placement.pods))
        assert fits(used, node.allocatable), f"{node.name} over-committed: {used} > {node.allocatable}"
        bound = [(f"pods already on {node.name}", node.host_ports)]
        assert_no_port_conflict(node.name, bound + [(k, pods[k].host_ports) for k in placement.pods])
        for key in placement.pods:
            assert pod_fits_labels(pods[key], node.labels), (key, node.labels)
            assert not blocking_taints(pods[key].tolerations, node.taints), (key, node.taints)


def check_limits(inp: SchedulingInput, result: SchedulingResult) -> None:
    """(e) new capacity (the largest listed type of each claim) stays within limit - in use."""
    for pool in inp.nodepools:
        if pool.limits is None:
            continue
        in_use = sum((n.capacity or n.allocatable).get("cpu", 0) for n in inp.nodes if n.nodepool == pool.name)
        new = sum(
            max(it.capacity.get("cpu", 0) for it in claim_types(claim, pool))
            for claim in result.node_claims
            if claim.nodepool == pool.name
        )
        assert new <= pool.limits["cpu"] - in_use or new == 0, (pool.name, pool.limits, in_use, new)


@PROPERTY_SETTINGS
@given(scheduling_inputs())
def test_every_pod_accounted_for_and_nothing_overcommitted(inp: SchedulingInput) -> None:
    result = solve(inp)
    check_accounting(inp, result)
    check_existing(inp, result)
    check_limits(inp, result)


@PROPERTY_SETTINGS
@given(scheduling_inputs())
def test_every_node_claim_is_sound_and_priced_cheapest_first(inp: SchedulingInput) -> None:
    check_claims(inp, solve(inp))


@settings(PROPERTY_SETTINGS, max_examples=100)
@given(scheduling_inputs())
def test_every_plan_holds_after_launch(inp: SchedulingInput) -> None:
    """kube-scheduler's rules in every launch outcome of every NodeClaim (``kube_rules``): node affinity, taints,
    resources with the DaemonSets each outcome runs, host ports (these inputs carry no inter-pod rules; see
    test_topology_properties for those)."""
    assert after_launch(inp, solve(inp)) == []


@settings(PROPERTY_SETTINGS, max_examples=150)
@given(scheduling_inputs())
def test_solve_is_deterministic_and_order_independent(inp: SchedulingInput) -> None:
    first = solve(inp).to_json()
    assert solve(inp).to_json() == first
    assert solve(replace(inp, pods=inp.pods[::-1])).to_json() == first
    shuffled = replace(
        inp,
        pods=inp.pods[1::2] + inp.pods[::2],
        nodepools=inp.nodepools[::-1],
        nodes=inp.nodes[::-1],
        daemon_pods=inp.daemon_pods[::-1],
    )
    assert solve(shuffled).to_json() == first


# --- the generators reach the interesting cases -------------------------------------------------


def test_generated_inputs_cover_every_outcome() -> None:
    """Guard against strategies that silently stop exercising claims, nodes or failures."""
    seen = {"claim": 0, "existing": 0, "unschedulable": 0, "limited": 0, "real": 0, "multi-type": 0}

    @settings(PROPERTY_SETTINGS, max_examples=120)
    @given(scheduling_inputs())
    def collect(inp: SchedulingInput) -> None:
        result = solve(inp)
        seen["claim"] += bool(result.node_claims)
        seen["existing"] += bool(result.existing)
        seen["unschedulable"] += bool(result.unschedulable)
        seen["limited"] += any("limit" in r for u in result.unschedulable for r in u.reasons.values())
        seen["real"] += any(it.name == "m5.large" for p in inp.nodepools for it in p.instance_types)
        seen["multi-type"] += any(len(nc.instance_types) > 5 for nc in result.node_claims)

    collect()
    assert all(count >= 3 for count in seen.values()), seen


# --- regressions the properties found ------------------------------------------------------------


def test_wildcard_host_ip_conflicts_with_a_specific_ip() -> None:
    wildcard = fake_pod("a", "1", "1Gi", host_ports=frozenset({("0.0.0.0", "TCP", 8080)}))
    specific = fake_pod("b", "500m", "1Gi", host_ports=frozenset({("10.0.0.1", "TCP", 8080)}))
    result = solve(SchedulingInput(pods=(wildcard, specific), nodepools=(fake_pool(),)))
    check_accounting(SchedulingInput(pods=(wildcard, specific), nodepools=(fake_pool(),)), result)
    assert all(len(claim.pods) == 1 for claim in result.node_claims), result.node_claims


def test_zone_id_requirement_limits_the_claim_zones() -> None:
    world = real_world()
    only_az6 = Requirements([Requirement.create(wk.LABEL_ZONE_ID, "In", ["use1-az6"])])
    inp = SchedulingInput(
        pods=(fake_pod("z", "1", "1Gi", requirements=(only_az6,)),),
        nodepools=(NodePoolInput("p", Requirements(), world.types),),
    )
    (claim,) = solve(inp).node_claims
    assert claim.zones == ("us-east-1a",), claim.zones  # use1-az6 is us-east-1a in the snapshot


def test_custom_label_in_is_not_satisfied_through_another_pods_not_in() -> None:
    team_not_a = (Requirements([Requirement.create(TEAM, "NotIn", ["a"])]),)
    team_b_or_c = (Requirements([Requirement.create(TEAM, "In", ["b", "c"])]),)
    small = fake_pod("small", "1", "1Gi", requirements=team_b_or_c)
    alone = solve(SchedulingInput(pods=(small,), nodepools=(fake_pool(),)))
    assert [u.pod for u in alone.unschedulable] == ["default/small"]  # no NodePool defines the label
    big = fake_pod("big", "2", "1Gi", requirements=team_not_a)
    both = solve(SchedulingInput(pods=(big, small), nodepools=(fake_pool(),)))
    for claim in both.node_claims:
        if "default/small" in claim.pods:
            # The only labels a NodeClaim's requirements give its node are single-valued ones.
            assert claim.requirements.labels().get(TEAM) in ("b", "c"), claim.requirements
