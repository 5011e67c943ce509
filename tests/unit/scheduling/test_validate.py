"""The plan validator (benchmarks/validate.py) on hand-built plans: it must accept valid plans and
name every kind of violation. The plans are written by hand, so this tests the validator, not
the solver."""

from collections.abc import Sequence

from benchmarks.validate import check_result
from nodeflow.api import labels as wk
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.taints import Taint
from nodeflow.scheduling.types import (
    AffinityTerm,
    ExistingPlacement,
    NodeClaimPlan,
    NodeInput,
    NodePoolInput,
    PodInput,
    RunningPod,
    SchedulingInput,
    SchedulingResult,
    Selector,
    TopologySpread,
    UnschedulablePod,
)

from .fakes import GI, pod, pool

WEB = Selector(match_labels=(("app", "web"),))
ZONE_SPREAD = TopologySpread(wk.LABEL_ZONE, 1, WEB)
HOST_SPREAD = TopologySpread(wk.LABEL_HOSTNAME, 1, WEB)
HOST_ANTI = AffinityTerm(wk.LABEL_HOSTNAME, WEB, frozenset({"default"}), anti=True)
ZONE_AFFINITY = AffinityTerm(wk.LABEL_ZONE, WEB, frozenset({"default"}))
POOL = pool("default")
PRICES = {"m.xlarge": 0.20, "m.2xlarge": 0.40, "c.xlarge": 0.17}


def web(name: str, cpu: str = "1", **kwargs: object) -> PodInput:
    return pod(name, cpu, "1Gi", labels={"app": "web"}, **kwargs)  # type: ignore[arg-type]


def claim(
    pods: Sequence[PodInput],
    zone: str | None = "zone-a",
    types: tuple[str, ...] = ("m.xlarge",),
    requirements: Requirements | None = None,
) -> NodeClaimPlan:
    """A NodeClaim of ``POOL`` in one zone (or both with ``zone=None``) holding ``pods``."""
    zones = (zone,) if zone else ("zone-a", "zone-b")
    reqs = requirements or Requirements()
    if zone:
        reqs = reqs.add(Requirements([Requirement.create(wk.LABEL_ZONE, "In", [zone])]))
    requests: dict[str, int] = {}
    for p in pods:
        for k, v in p.requests.items():
            requests[k] = requests.get(k, 0) + v
    return NodeClaimPlan(
        nodepool=POOL.name,
        requirements=reqs,
        instance_types=types,
        capacity_type="on-demand",
        zones=zones,
        pods=tuple(p.key for p in pods),
        requests=requests,
        price=PRICES[types[0]],
    )


def node(name: str, zone: str, running: tuple[RunningPod, ...] = (), **kwargs: object) -> NodeInput:
    return NodeInput(
        name=name,
        labels={wk.LABEL_HOSTNAME: name, wk.LABEL_ZONE: zone, wk.LABEL_ARCH: "amd64"},
        allocatable={"cpu": 4000, "memory": 16 * GI, "pods": 110_000},
        requested={"cpu": 1000 * len(running), "memory": GI * len(running), "pods": 1000 * len(running)},
        running=running,
        **kwargs,  # type: ignore[arg-type]
    )


def check(
    pods: Sequence[PodInput],
    claims: Sequence[NodeClaimPlan] = (),
    existing: Sequence[ExistingPlacement] = (),
    nodes: Sequence[NodeInput] = (),
    unschedulable: Sequence[str] = (),
    pools: Sequence[NodePoolInput] = (POOL,),
) -> list[str]:
    inp = SchedulingInput(pods=tuple(pods), nodepools=tuple(pools), nodes=tuple(nodes))
    result = SchedulingResult(
        node_claims=tuple(claims),
        existing=tuple(existing),
        unschedulable=tuple(UnschedulablePod(k, {"default": "no"}) for k in unschedulable),
    )
    return check_result(inp, result)


def one(violations: list[str], *words: str) -> str:
    """Exactly one violation, containing every word."""
    assert len(violations) == 1, violations
    assert all(w in violations[0] for w in words), violations[0]
    return violations[0]


# --- valid plans: no false alarms ---------------------------------------------------------------


def test_valid_plan_with_every_constraint_kind_passes() -> None:
    spread = [web(f"s{i}", spread=(ZONE_SPREAD, HOST_SPREAD), affinity=(HOST_ANTI,)) for i in range(4)]
    group = [
        pod(
            f"g{i}",
            "1",
            "1Gi",
            labels={"app": "db"},
            affinity=(AffinityTerm(wk.LABEL_ZONE, Selector((("app", "db"),)), frozenset({"default"})),),
        )
        for i in range(3)
    ]
    plain = pod("plain", "500m", "1Gi")
    claims = [
        claim([spread[0], group[0], group[1]], "zone-a"),
        claim([spread[1], group[2]], "zone-a"),
        claim([spread[2]], "zone-b"),
        claim([spread[3], plain], "zone-b"),
    ]
    assert check([*spread, *group, plain], claims) == []


def test_unschedulable_and_existing_node_placements_count() -> None:
    a, b, c = pod("a"), pod("b"), pod("c")
    result = check(
        [a, b, c],
        [claim([a])],
        existing=[ExistingPlacement("n1", ("default/b",))],
        nodes=[node("n1", "zone-a")],
        unschedulable=["default/c"],
    )
    assert result == []


# --- accounting -----------------------------------------------------------------------------------


def test_missing_pod_is_reported() -> None:
    a, b = pod("a"), pod("b")
    one(check([a, b], [claim([a])]), "neither placed nor unschedulable", "default/b")


def test_pod_placed_twice_is_reported() -> None:
    a = pod("a")
    one(check([a], [claim([a]), claim([a], "zone-b")]), "appears twice", "default/a")


def test_unknown_pod_is_reported() -> None:
    a = pod("a")
    stranger = pod("stranger")
    one(check([a], [claim([a, stranger])]), "not a pending pod", "default/stranger")


# --- capacity -------------------------------------------------------------------------------------


def test_over_committed_nodeclaim_is_reported() -> None:
    # m.xlarge: 4 CPU - 100m reserved = 3900m allocatable; four 1-CPU pods need 4000m.
    pods = [pod(f"p{i}") for i in range(4)]
    one(check(pods, [claim(pods)]), "over-committed on m.xlarge", "cpu")


def test_every_listed_instance_type_must_fit() -> None:
    # Fits m.2xlarge (8 CPU) but not c.xlarge (4 CPU), which the claim also lists.
    pods = [pod(f"p{i}", "1", "1Gi") for i in range(5)]
    one(check(pods, [claim(pods, types=("m.2xlarge", "c.xlarge"))]), "over-committed on c.xlarge")


def test_daemonset_overhead_counts() -> None:
    pods = [pod(f"p{i}") for i in range(3)]  # 3000m of 3900m
    daemon = pod("ds", "1", "100Mi")
    inp = SchedulingInput(pods=tuple(pods), nodepools=(POOL,), daemon_pods=(daemon,))
    result = SchedulingResult((claim(pods),), (), ())
    one(check_result(inp, result), "over-committed", "pods + daemonsets")


def test_over_committed_existing_node_is_reported() -> None:
    running = tuple(RunningPod("default", {"app": "old"}) for _ in range(3))  # 3 of 4 CPU used
    a, b = pod("a"), pod("b")
    violations = check(
        [a, b], existing=[ExistingPlacement("n1", ("default/a", "default/b"))], nodes=[node("n1", "zone-a", running)]
    )
    one(violations, "node n1", "over-committed", "cpu")


def test_cordoned_node_is_reported() -> None:
    a = pod("a")
    violations = check(
        [a], existing=[ExistingPlacement("n1", ("default/a",))], nodes=[node("n1", "zone-a", schedulable=False)]
    )
    one(violations, "not schedulable")


# --- node requirements and taints -----------------------------------------------------------------


def test_node_requirements_are_checked_against_every_instance_type() -> None:
    arm = pod("arm", requirements=(Requirements([Requirement.create(wk.LABEL_ARCH, "In", ["arm64"])]),))
    one(check([arm], [claim([arm])]), "default/arm", "kubernetes.io/arch", "m.xlarge")


def test_zone_requirement_must_hold_in_every_possible_zone() -> None:
    zoned = pod("z", requirements=(Requirements([Requirement.create(wk.LABEL_ZONE, "In", ["zone-a"])]),))
    assert check([zoned], [claim([zoned], "zone-a")]) == []
    one(check([zoned], [claim([zoned], None)]), "topology.kubernetes.io/zone", "zone-b")


def test_untolerated_nodepool_taint_is_reported() -> None:
    tainted = pool("default", taints=(Taint("gpu", "NoSchedule"),))
    a = pod("a")
    one(check([a], [claim([a])], pools=[tainted]), "does not tolerate", "gpu")


# --- topology spread ------------------------------------------------------------------------------


def test_zone_skew_violation_is_reported() -> None:
    pods = [web(f"w{i}", "500m", spread=(ZONE_SPREAD,)) for i in range(3)]
    # 3 pods in zone-a and none in zone-b: skew 3 > 1.
    message = one(check(pods, [claim(pods, "zone-a")]), "topology spread", "violated")
    assert "domain zone-a has 3" in message
    # 2 + 1 is within maxSkew 1.
    assert check(pods, [claim(pods[:2], "zone-a"), claim(pods[2:], "zone-b")]) == []


def test_zone_spread_on_an_unpinned_nodeclaim_is_reported() -> None:
    p = web("w", spread=(ZONE_SPREAD,))
    one(check([p], [claim([p], None)]), "not pinned")


def test_running_pods_count_towards_skew() -> None:
    running = (RunningPod("default", {"app": "web"}), RunningPod("default", {"app": "web"}))
    p = web("w", "500m", spread=(ZONE_SPREAD,))
    nodes = [node("n1", "zone-a", running)]
    # zone-a already has 2, zone-b 0: one more in zone-a makes the skew 3.
    one(check([p], [claim([p], "zone-a")], nodes=nodes), "domain zone-a has 3")
    assert check([p], [claim([p], "zone-b")], nodes=nodes) == []
    # Pods of another namespace do not count.
    others = (RunningPod("other", {"app": "web"}), RunningPod("other", {"app": "web"}))
    assert check([p], [claim([p], "zone-a")], nodes=[node("n1", "zone-a", others)]) == []


def test_hostname_skew_violation_is_reported() -> None:
    pods = [web(f"w{i}", "500m", spread=(HOST_SPREAD,)) for i in range(2)]
    one(check(pods, [claim(pods)]), "kubernetes.io/hostname", "violated")
    assert check(pods, [claim(pods[:1]), claim(pods[1:])]) == []


def test_schedule_anyway_is_not_enforced() -> None:
    soft = TopologySpread(wk.LABEL_ZONE, 1, WEB, schedule_anyway=True)
    pods = [web(f"w{i}", "500m", spread=(soft,)) for i in range(3)]
    assert check(pods, [claim(pods)]) == []


# --- pod anti-affinity ----------------------------------------------------------------------------


def test_anti_affinity_violation_is_reported() -> None:
    pods = [web(f"w{i}", "500m", affinity=(HOST_ANTI,)) for i in range(2)]
    one(check(pods, [claim(pods)]), "anti-affinity", "violated")
    assert check(pods, [claim(pods[:1]), claim(pods[1:])]) == []


def test_anti_affinity_of_a_running_pod_repels_new_pods() -> None:
    repel = RunningPod("default", {"app": "db"}, anti_affinity=(HOST_ANTI,))
    p = web("w")  # no constraint of its own, but the running pod repels app=web
    violations = check([p], existing=[ExistingPlacement("n1", ("default/w",))], nodes=[node("n1", "zone-a", (repel,))])
    one(violations, "anti-affinity", "n1:running[0]", "default/w")


def test_new_pod_anti_affinity_against_running_pods() -> None:
    p = pod("db", affinity=(AffinityTerm(wk.LABEL_ZONE, WEB, frozenset({"default"}), anti=True),))
    nodes = [node("n1", "zone-a", (RunningPod("default", {"app": "web"}),))]
    one(check([p], [claim([p], "zone-a")], nodes=nodes), "anti-affinity", "zone-a")
    assert check([p], [claim([p], "zone-b")], nodes=nodes) == []


# --- pod affinity ---------------------------------------------------------------------------------


def test_self_affinity_group_split_over_zones_is_reported() -> None:
    pods = [web(f"w{i}", "500m", affinity=(ZONE_AFFINITY,)) for i in range(2)]
    one(check(pods, [claim(pods[:1], "zone-a"), claim(pods[1:], "zone-b")]), "affinity", "violated")
    assert check(pods, [claim(pods[:1], "zone-a"), claim(pods[1:], "zone-a")]) == []


def test_affinity_must_join_the_matching_pods_domain() -> None:
    follower = pod("f", affinity=(ZONE_AFFINITY,))  # wants to be near app=web, is not web itself
    nodes = [node("n1", "zone-a", (RunningPod("default", {"app": "web"}),))]
    one(check([follower], [claim([follower], "zone-b")], nodes=nodes), "affinity", "zone-b")
    assert check([follower], [claim([follower], "zone-a")], nodes=nodes) == []


def test_affinity_with_nothing_to_match_is_reported() -> None:
    follower = pod("f", affinity=(ZONE_AFFINITY,))
    one(check([follower], [claim([follower])]), "no pod matches")
