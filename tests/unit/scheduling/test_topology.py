"""Topology spread, pod (anti-)affinity, preferences and minValues in the solver."""

from __future__ import annotations

from collections import Counter

from benchmarks.validate import check_result
from nodeflow.api import labels as wk
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.taints import Taint, Toleration
from nodeflow.scheduling.topology import water_fill
from nodeflow.scheduling.types import (
    AffinityTerm,
    NodeInput,
    PodInput,
    RunningPod,
    SchedulingInput,
    SchedulingResult,
    Selector,
    TopologySpread,
)

from .fakes import GI, itype, pod, pool
from .kube_rules import after_launch

APP = Selector(match_labels=(("app", "web"),))
ZONE, HOST = wk.LABEL_ZONE, wk.LABEL_HOSTNAME
AMD = Requirement.create(wk.LABEL_ARCH, "In", ["amd64"])


def web(n: int, cpu: str = "1", **kwargs: object) -> tuple[PodInput, ...]:
    return tuple(pod(f"web-{i}", cpu, "1Gi", labels={"app": "web"}, **kwargs) for i in range(n))


def zone_of(result: SchedulingResult, key: str) -> str:
    for claim in result.node_claims:
        if key in claim.pods:
            (zone,) = claim.zones
            return zone
    raise AssertionError(f"{key} not on a NodeClaim")


def node(name: str, zone: str, running: tuple[RunningPod, ...] = ()) -> NodeInput:
    return NodeInput(
        name=name,
        labels={ZONE: zone, HOST: name, wk.LABEL_ARCH: "amd64"},
        allocatable={"cpu": 1000, "memory": GI, "pods": 110_000},
        requested={"cpu": 1000, "memory": GI, "pods": len(running) * 1000},
        running=running,
    )


def test_water_fill() -> None:
    assert water_fill({"a": 0, "b": 2, "c": 5}, ["a", "b", "c"], 4) == {"a": 3, "b": 1, "c": 0}
    assert water_fill({"a": 1, "b": 1}, ["a", "b"], 3) == {"a": 2, "b": 1}
    assert water_fill({"a": 0}, ["a"], 0) == {"a": 0}


def test_zone_spread_balances_new_pods() -> None:
    spread = (TopologySpread(ZONE, 1, APP),)
    result = solve(SchedulingInput(pods=web(6, spread=spread), nodepools=(pool("p", AMD),)))
    zones = Counter(zone_of(result, f"default/web-{i}") for i in range(6))
    assert zones == {"zone-a": 3, "zone-b": 3}


def test_zone_spread_counts_running_pods() -> None:
    running = tuple(RunningPod("default", {"app": "web"}) for _ in range(2))
    existing = node("old", "zone-a", running)
    spread = (TopologySpread(ZONE, 1, APP),)
    result = solve(SchedulingInput(pods=web(2, spread=spread), nodepools=(pool("p", AMD),), nodes=(existing,)))
    # zone-a already has 2: both new pods go to zone-b (then 2 and 2).
    assert {zone_of(result, f"default/web-{i}") for i in range(2)} == {"zone-b"}


def test_zone_spread_unsatisfiable_reports_domain_counts() -> None:
    only_a = pool("p", AMD, Requirement.create(ZONE, "In", ["zone-a"]))
    # minDomains 2 with one zone: the global minimum counts as 0, so at most maxSkew (1) pod fits.
    spread = (TopologySpread(ZONE, 1, APP, min_domains=2),)
    result = solve(SchedulingInput(pods=web(3, spread=spread), nodepools=(only_a,)))
    assert sum(len(c.pods) for c in result.node_claims) == 1
    assert len(result.unschedulable) == 2
    reason = result.unschedulable[0].reasons["p"]
    assert "topology spread on topology.kubernetes.io/zone" in reason
    assert "zone-a=1" in reason


def test_schedule_anyway_spread_is_relaxed() -> None:
    only_a = pool("p", AMD, Requirement.create(ZONE, "In", ["zone-a"]))
    spread = (TopologySpread(ZONE, 1, APP, schedule_anyway=True, min_domains=2),)
    result = solve(SchedulingInput(pods=web(3, spread=spread), nodepools=(only_a,)))
    assert not result.unschedulable
    assert sum(len(c.pods) for c in result.node_claims) == 3


def test_hostname_spread_one_pod_per_node() -> None:
    spread = (TopologySpread(HOST, 1, APP),)
    result = solve(SchedulingInput(pods=web(4, spread=spread), nodepools=(pool("p", AMD),)))
    assert len(result.node_claims) == 4
    assert all(len(c.pods) == 1 for c in result.node_claims)


def test_hostname_anti_affinity_and_running_pods() -> None:
    anti = (AffinityTerm(HOST, APP, frozenset({"default"}), anti=True),)
    roomy = NodeInput(
        name="roomy",
        labels={ZONE: "zone-a", HOST: "roomy", wk.LABEL_ARCH: "amd64"},
        allocatable={"cpu": 16_000, "memory": 64 * GI, "pods": 110_000},
        running=(RunningPod("default", {"app": "web"}),),
    )
    free = NodeInput(
        name="free",
        labels={ZONE: "zone-b", HOST: "free", wk.LABEL_ARCH: "amd64"},
        allocatable={"cpu": 16_000, "memory": 64 * GI, "pods": 110_000},
    )
    inp = SchedulingInput(pods=web(3, affinity=anti), nodepools=(pool("p", AMD),), nodes=(roomy, free))
    result = solve(inp)
    assert [(e.name, len(e.pods)) for e in result.existing] == [("free", 1)]
    assert len(result.node_claims) == 2
    assert all(len(c.pods) == 1 for c in result.node_claims)


def test_running_pods_anti_affinity_keeps_matching_pods_out_of_its_zone() -> None:
    guard = AffinityTerm(ZONE, APP, None, anti=True)
    existing = node("guarded", "zone-a", (RunningPod("other", {"app": "db"}, anti_affinity=(guard,)),))
    result = solve(SchedulingInput(pods=web(2), nodepools=(pool("p", AMD),), nodes=(existing,)))
    for claim in result.node_claims:
        assert "zone-a" not in claim.zones


def test_zone_self_affinity_keeps_pods_together() -> None:
    together = (AffinityTerm(ZONE, APP, frozenset({"default"})),)
    big = tuple(pod(f"web-{i}", "3", "1Gi", labels={"app": "web"}, affinity=together) for i in range(5))
    result = solve(SchedulingInput(pods=big, nodepools=(pool("p", AMD),)))
    assert not result.unschedulable
    assert len({zone_of(result, p.key) for p in big}) == 1


def test_affinity_to_running_pods_follows_their_zone() -> None:
    near_cache = (AffinityTerm(ZONE, Selector(match_labels=(("app", "cache"),)), frozenset({"default"})),)
    existing = node("cache-node", "zone-b", (RunningPod("default", {"app": "cache"}),))
    result = solve(SchedulingInput(pods=web(2, affinity=near_cache), nodepools=(pool("p", AMD),), nodes=(existing,)))
    assert {zone_of(result, f"default/web-{i}") for i in range(2)} == {"zone-b"}


def test_required_affinity_without_targets_is_unschedulable_with_reason() -> None:
    near_cache = (AffinityTerm(ZONE, Selector(match_labels=(("app", "cache"),)), frozenset({"default"})),)
    result = solve(SchedulingInput(pods=web(1, affinity=near_cache), nodepools=(pool("p", AMD),)))
    assert "pod affinity" in result.unschedulable[0].reasons["p"]


def test_affinity_to_pods_placed_in_the_same_solve() -> None:
    cache = pod("cache", "1", "1Gi", labels={"app": "cache"})
    near_cache = (AffinityTerm(HOST, Selector(match_labels=(("app", "cache"),)), frozenset({"default"})),)
    # web is larger, so it is tried first, fails, and is retried after the cache is placed.
    webs = tuple(pod(f"web-{i}", "2", "1Gi", labels={"app": "web"}, affinity=near_cache) for i in range(2))
    result = solve(SchedulingInput(pods=(*webs, cache), nodepools=(pool("p", AMD),)))
    assert not result.unschedulable
    (claim,) = [c for c in result.node_claims if "default/cache" in c.pods]
    assert set(claim.pods) == {"default/cache", "default/web-0", "default/web-1"}


def test_preferred_node_affinity_is_honoured_then_relaxed() -> None:
    prefer_r = ((10, Requirements([Requirement.create(wk.LABEL_INSTANCE_FAMILY, "In", ["r"])])),)
    result = solve(SchedulingInput(pods=(pod("a", preferred=prefer_r),), nodepools=(pool("p", AMD),)))
    assert result.node_claims[0].instance_types[0].startswith("r.")
    prefer_x = ((10, Requirements([Requirement.create(wk.LABEL_INSTANCE_FAMILY, "In", ["x"])])),)
    result = solve(SchedulingInput(pods=(pod("a", preferred=prefer_x),), nodepools=(pool("p", AMD),)))
    assert not result.unschedulable
    ignored = solve(
        SchedulingInput(pods=(pod("a", preferred=prefer_r),), nodepools=(pool("p", AMD),), preference_policy="Ignore")
    )
    assert not ignored.node_claims[0].instance_types[0].startswith("r.")


def test_prefer_no_schedule_taint_is_avoided_then_tolerated() -> None:
    soft = pool("soft", AMD, weight=100, taints=(Taint("dedicated", "PreferNoSchedule", "x"),))
    plain = pool("plain", AMD, weight=1)
    result = solve(SchedulingInput(pods=(pod("a"),), nodepools=(soft, plain)))
    assert result.node_claims[0].nodepool == "plain"
    result = solve(SchedulingInput(pods=(pod("a"),), nodepools=(soft,)))
    assert result.node_claims[0].nodepool == "soft"


def test_preferred_anti_affinity_spreads_when_possible() -> None:
    apart = (AffinityTerm(HOST, APP, frozenset({"default"}), anti=True, weight=50),)
    result = solve(SchedulingInput(pods=web(3, affinity=apart), nodepools=(pool("p", AMD),)))
    assert len(result.node_claims) == 3


def test_min_values_strict_and_best_effort() -> None:
    families = Requirement.create(wk.LABEL_INSTANCE_FAMILY, "In", ["m", "c", "r"], min_values=3)
    strict = solve(SchedulingInput(pods=(pod("a", "1", "1Gi"),), nodepools=(pool("p", AMD, families),)))
    (claim,) = strict.node_claims
    assert {t.split(".")[0] for t in claim.instance_types} >= {"m", "c", "r"}
    # Only r.2xlarge and m.8xlarge hold a 40Gi pod: three families cannot be kept.
    big = pod("big", "1", "40Gi")
    strict = solve(SchedulingInput(pods=(big,), nodepools=(pool("p", AMD, families),)))
    assert "minValues" in strict.unschedulable[0].reasons["p"]
    relaxed = solve(SchedulingInput(pods=(big,), nodepools=(pool("p", AMD, families),), min_values_policy="BestEffort"))
    assert relaxed.node_claims[0].instance_types == ("r.2xlarge", "m.8xlarge")


def test_limit_is_charged_for_the_chosen_size_not_the_largest_option() -> None:
    # One pod per node (hostname spread): each NodeClaim is a 2-CPU type, so an 8-CPU limit
    # holds four of them. Charging the largest fallback option (8 CPU) would allow only one.
    spread = (TopologySpread(HOST, 1, APP),)
    limited = pool("p", AMD, limits={"cpu": 8000})
    result = solve(SchedulingInput(pods=web(6, spread=spread), nodepools=(limited,)))
    assert len(result.node_claims) == 4
    assert len(result.unschedulable) == 2
    assert "limit cpu=8" in result.unschedulable[0].reasons["p"]


def test_node_taints_policy_decides_whether_untolerated_pools_hold_domains() -> None:
    zone_a = pool("a", AMD, Requirement.create(ZONE, "In", ["zone-a"]))
    zone_b_tainted = pool(
        "b", AMD, Requirement.create(ZONE, "In", ["zone-b"]), taints=(Taint("team", "NoSchedule", "x"),)
    )
    ignore = (TopologySpread(ZONE, 1, APP),)  # nodeTaintsPolicy Ignore (the default)
    result = solve(SchedulingInput(pods=web(3, spread=ignore), nodepools=(zone_a, zone_b_tainted)))
    # zone-b counts as a domain with 0 pods but cannot take any: only maxSkew pods fit in zone-a.
    assert sum(len(c.pods) for c in result.node_claims) == 1
    honor = (TopologySpread(ZONE, 1, APP, honor_node_taints=True),)
    result = solve(SchedulingInput(pods=web(3, spread=honor), nodepools=(zone_a, zone_b_tainted)))
    assert sum(len(c.pods) for c in result.node_claims) == 3


# --- hostname self-affinity: the whole group on one node (issue 26, item 11) -----------------------------------------

DB = Selector(match_labels=(("app", "db"),))


def db(n: int, cpu: str = "1") -> tuple[PodInput, ...]:
    """Pods whose required pod affinity selects themselves on kubernetes.io/hostname."""
    term = (AffinityTerm(HOST, DB, frozenset({"default"})),)
    return tuple(pod(f"db-{i}", cpu, "1Gi", labels={"app": "db"}, affinity=term) for i in range(n))


def roomy(name: str, free_cpu: int) -> NodeInput:
    return NodeInput(
        name=name,
        labels={ZONE: "zone-a", HOST: name, wk.LABEL_ARCH: "amd64"},
        allocatable={"cpu": 4000, "memory": 16 * GI, "pods": 110_000},
        requested={"cpu": 4000 - free_cpu, "memory": GI, "pods": 1000},
    )


def checked(inp: SchedulingInput) -> SchedulingResult:
    """The plan, which must hold as kube-scheduler sees it after launch (and pass benchmarks/validate.py)."""
    result = solve(inp)
    assert after_launch(inp, result) == []
    assert check_result(inp, result) == []
    return result


def hosts_of(result: SchedulingResult, keys: list[str]) -> Counter[str]:
    where = {k: f"nodeclaim-{i}" for i, c in enumerate(result.node_claims) for k in c.pods}
    where.update({k: e.name for e in result.existing for k in e.pods})
    return Counter(where[k] for k in keys if k in where)


def test_a_self_affine_group_is_not_split_over_existing_nodes() -> None:
    # Room for 3 on one node and 2 on the other: kube-scheduler would leave the 2 pending on the second
    # (the first pod bound decides the node), so all five go to one new node.
    group = db(5)
    inp = SchedulingInput(pods=group, nodepools=(pool("p", AMD),), nodes=(roomy("n0", 3000), roomy("n1", 2000)))
    result = solve(inp)
    assert hosts_of(result, [p.key for p in group]) == {"nodeclaim-0": 5}
    assert check_result(inp, result) == []
    assert after_launch(inp, result) == []


def test_a_self_affine_group_joins_an_existing_node_that_holds_it_all() -> None:
    group = db(3)
    inp = SchedulingInput(pods=group, nodepools=(pool("p", AMD),), nodes=(roomy("n0", 2000), roomy("n1", 3000)))
    result = solve(inp)
    assert hosts_of(result, [p.key for p in group]) == {"n1": 3}
    assert not result.node_claims


def test_a_self_affine_group_is_not_split_over_open_node_claims() -> None:
    # Two NodeClaims of m.2xlarge (7.9 CPU allocatable) opened for 5-CPU pods keep room for two 1-CPU pods each.
    only_2xl = pool("p", AMD, Requirement.create(wk.LABEL_INSTANCE_TYPE, "In", ["m.2xlarge"]))
    apart = (AffinityTerm(HOST, Selector(match_labels=(("app", "big"),)), frozenset({"default"}), anti=True),)
    big = tuple(pod(f"big-{i}", "5", "1Gi", labels={"app": "big"}, affinity=apart) for i in range(2))
    group = db(4)
    inp = SchedulingInput(pods=big + group, nodepools=(only_2xl,))
    result = solve(inp)
    assert sorted(hosts_of(result, [p.key for p in group]).values()) == [4]
    assert check_result(inp, result) == []
    assert after_launch(inp, result) == []


def test_a_self_affine_group_too_big_for_one_node_leaves_the_rest_pending_saying_why() -> None:
    # No NodePool can add a node: the first existing node with room takes what it holds, the rest stay pending.
    group = db(5)
    full = pool("p", AMD, limits={"cpu": 0})
    inp = SchedulingInput(pods=group, nodepools=(full,), nodes=(roomy("n0", 3000), roomy("n1", 2000)))
    result = solve(inp)
    assert hosts_of(result, [p.key for p in group]) == {"n0": 3}
    assert len(result.unschedulable) == 2
    for item in result.unschedulable:
        assert "all must share one node" in item.reasons["p"], item.reasons
    assert check_result(inp, result) == []
    assert after_launch(inp, result) == []


# --- pods a zone spread counts without carrying it (issue 26, item 12) -------------------------------------------------


def test_pods_a_zone_spread_counts_are_pinned_to_zones_so_it_holds_after_launch() -> None:
    # Two pods that only match the spread's selector go first (larger); on NodeClaims free to land in either zone
    # they could both land in zone-a after launch: 3 against 1, skew 2 where maxSkew is 1.
    spread = (TopologySpread(ZONE, 1, APP),)
    loose = tuple(pod(f"loose-{i}", "3", "1Gi", labels={"app": "web"}) for i in range(2))
    inp = SchedulingInput(pods=web(2, spread=spread) + loose, nodepools=(pool("p", AMD),))
    result = checked(inp)
    for claim in result.node_claims:
        assert len(claim.zones) == 1, claim
    assert Counter(zone_of(result, p.key) for p in inp.pods) == {"zone-a": 2, "zone-b": 2}


def test_a_pinned_counted_pod_is_where_the_spread_sees_it() -> None:
    # A counted pod restricted to zone-a by its own node affinity: the carriers balance around it.
    spread = (TopologySpread(ZONE, 1, APP),)
    only_a = (Requirements([Requirement.create(ZONE, "In", ["zone-a"])]),)
    loose = (pod("loose", "3", "1Gi", labels={"app": "web"}, requirements=only_a),)
    inp = SchedulingInput(pods=web(3, spread=spread) + loose, nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert Counter(zone_of(result, p.key) for p in inp.pods) == {"zone-a": 2, "zone-b": 2}


def test_self_affine_zone_pods_wait_for_a_matching_pod_whose_zone_the_launch_decides() -> None:
    # The target matches the followers' zone affinity but lands wherever its launch puts it: kube-scheduler would
    # hold the followers to that zone, so they must not open a zone of their own now (they follow next round).
    db_sel = Selector(match_labels=(("app", "db"),))
    term = (AffinityTerm(ZONE, db_sel, frozenset({"default"})),)
    target = pod("target", "3", "1Gi", labels={"app": "db"})
    followers = tuple(pod(f"f-{i}", "1", "1Gi", labels={"app": "db"}, affinity=term) for i in range(2))
    inp = SchedulingInput(pods=(target, *followers), nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert sorted(u.pod for u in result.unschedulable) == ["default/f-0", "default/f-1"]
    assert "the launch decides" in result.unschedulable[0].reasons["p"]


# --- found by checking plans against kube-scheduler after launch (tests/unit/scheduling/kube_rules.py) ---------------

WEB_IN = frozenset({"default"})
TOLERATE_ALL = Toleration("", "Exists")


def empty(name: str, zone: str | None, cpu: int = 4000, **kwargs: object) -> NodeInput:
    """A node with room (nothing requested yet), in ``zone`` (None: no zone label)."""
    labels = {HOST: name, wk.LABEL_ARCH: "amd64", **({ZONE: zone} if zone else {})}
    allocatable = {"cpu": cpu, "memory": 16 * GI, "pods": 110_000}
    return NodeInput(name=name, labels=labels, allocatable=allocatable, **kwargs)  # type: ignore[arg-type]


def labelless(name: str) -> NodeInput:
    return empty(name, None)


def test_contradicting_zone_rules_never_send_a_pod_to_a_node_without_a_zone() -> None:
    # Affinity pins zone-b, where a running pod it repels is: the pin and the exclusion leave no zone. (Their
    # intersection reads as "zone DoesNotExist", which a node without a zone label met.)
    x_sel = Selector(match_labels=(("app", "x"),))
    running = (RunningPod("default", {"app": "web"}), RunningPod("default", {"app": "x"}))
    terms = (AffinityTerm(ZONE, APP, WEB_IN), AffinityTerm(ZONE, x_sel, WEB_IN, anti=True))
    x = pod("x", "500m", "1Gi", labels={"app": "x"}, affinity=terms)
    nodes = (node("a", "zone-a"), node("b", "zone-b", running), labelless("bare"))
    inp = SchedulingInput(pods=(x,), nodepools=(pool("p", AMD),), nodes=nodes)
    result = checked(inp)
    assert [u.pod for u in result.unschedulable] == ["default/x"]


def test_a_zone_selector_and_anti_affinity_that_exclude_each_other_leave_the_pod_pending() -> None:
    guard = RunningPod("default", {"app": "guard"}, anti_affinity=(AffinityTerm(ZONE, APP, WEB_IN, anti=True),))
    only_a = (Requirements([Requirement.create(ZONE, "In", ["zone-a"])]),)
    inp = SchedulingInput(
        pods=web(1, requirements=only_a),
        nodepools=(pool("p", AMD),),
        nodes=(node("a", "zone-a", (guard,)), labelless("bare")),
    )
    result = checked(inp)
    assert [u.pod for u in result.unschedulable] == ["default/web-0"]


def test_a_spread_counts_every_zone_its_pods_allow_not_only_the_one_another_rule_pins() -> None:
    # "db" opens zone-a for its zone self-affinity; "more" (db's labels, a zone spread on them) must join it
    # there, and zone-b (empty) still holds the spread's minimum: more pods in zone-a would make the skew 3.
    db_term = (AffinityTerm(ZONE, DB, WEB_IN),)
    opener = tuple(pod(f"db-{i}", "2", "1Gi", labels={"app": "db"}, affinity=db_term) for i in range(2))
    spread = (TopologySpread(ZONE, 1, DB),)
    more = tuple(pod(f"more-{i}", "1", "1Gi", labels={"app": "db"}, spread=spread) for i in range(2))
    inp = SchedulingInput(pods=opener + more, nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert sorted(u.pod for u in result.unschedulable) == ["default/more-0", "default/more-1"]


def test_self_affinity_does_not_open_a_zone_another_rule_picked_while_a_match_runs_elsewhere() -> None:
    # A db pod runs in zone-a: the spread's pick (zone-b, emptier) may not become a zone of their own.
    db_term = (AffinityTerm(ZONE, DB, WEB_IN),)
    spread = (TopologySpread(ZONE, 1, DB),)
    group = tuple(pod(f"db-{i}", "1", "1Gi", labels={"app": "db"}, affinity=db_term, spread=spread) for i in range(2))
    existing = node("a", "zone-a", (RunningPod("default", {"app": "db"}),))
    inp = SchedulingInput(pods=group, nodepools=(pool("p", AMD),), nodes=(existing,))
    result = checked(inp)
    assert all(zone_of(result, p.key) == "zone-a" for p in group if p.key not in {u.pod for u in result.unschedulable})


def test_required_hostname_affinity_terms_need_one_pod_matching_them_all() -> None:
    # kube-scheduler counts the pods that match every required term: a node with one pod for each term is no home.
    a_sel, db_sel = Selector(match_labels=(("app", "a"),)), Selector(match_labels=(("tier", "db"),))
    terms = (AffinityTerm(HOST, a_sel, WEB_IN), AffinityTerm(HOST, db_sel, WEB_IN))
    both = empty("n1", "zone-a", running=(RunningPod("default", {"app": "a"}), RunningPod("default", {"tier": "db"})))
    inp = SchedulingInput(pods=(pod("x", "1", "1Gi", affinity=terms),), nodepools=(pool("p", AMD),), nodes=(both,))
    result = checked(inp)
    assert [u.pod for u in result.unschedulable] == ["default/x"]


def test_pods_a_self_affine_group_selects_join_the_zone_it_opened() -> None:
    # "db" opens a zone for itself; "extra" (same labels, no rules) placed anywhere else could bind first and
    # leave db pending (kube-scheduler lets db open a zone only while no pod matches).
    db_term = (AffinityTerm(ZONE, DB, WEB_IN),)
    opener = tuple(pod(f"db-{i}", "2", "1Gi", labels={"app": "db"}, affinity=db_term) for i in range(2))
    extra = tuple(pod(f"extra-{i}", "1", "1Gi", labels={"app": "db"}) for i in range(3))
    inp = SchedulingInput(pods=opener + extra, nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert len({zone_of(result, p.key) for p in opener + extra}) == 1


def test_pods_a_self_affine_group_selects_join_the_node_it_opened() -> None:
    # (The opener's m.xlarge has no room left for it at its price: it grows the node rather than open another.)
    host_term = (AffinityTerm(HOST, DB, WEB_IN),)
    opener = tuple(pod(f"db-{i}", "1900m", "1Gi", labels={"app": "db"}, affinity=host_term) for i in range(2))
    extra = (pod("extra", "1", "1Gi", labels={"app": "db"}),)
    inp = SchedulingInput(pods=opener + extra, nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert hosts_of(result, [p.key for p in opener + extra]) == {"nodeclaim-0": 3}


def test_self_affinity_and_self_anti_affinity_on_hostname_put_one_pod_per_node() -> None:
    terms = (AffinityTerm(HOST, DB, WEB_IN), AffinityTerm(HOST, DB, WEB_IN, anti=True))
    group = tuple(pod(f"db-{i}", "1", "1Gi", labels={"app": "db"}, affinity=terms) for i in range(2))
    inp = SchedulingInput(pods=group, nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert len(result.unschedulable) == 1


def test_pods_another_hostname_spread_counts_do_not_pile_onto_its_nodes() -> None:
    # Both groups carry a hostname spread on the same labels (maxSkew 1 and 2): the second may not take the first's
    # node to 2 while a new node (0) is the minimum.
    tight = tuple(
        pod(f"tight-{i}", "2", "1Gi", labels={"app": "db"}, spread=(TopologySpread(HOST, 1, DB),)) for i in range(1)
    )
    loose = tuple(
        pod(f"loose-{i}", "1", "1Gi", labels={"app": "db"}, spread=(TopologySpread(HOST, 2, DB),)) for i in range(1)
    )
    inp = SchedulingInput(pods=tight + loose, nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert hosts_of(result, ["default/tight-0", "default/loose-0"]) == {"nodeclaim-0": 1, "nodeclaim-1": 1}


def test_pods_a_spread_counts_are_placed_before_its_carriers() -> None:
    # The carrier (larger) went first, to zone-a (all empty); the two web pods pinned to zone-a by their own
    # selector then made it 2 against 0. Placed first, they leave the carrier zone-b.
    carrier = pod("carrier", "2", "1Gi", labels={"app": "c"}, spread=(TopologySpread(ZONE, 1, APP),))
    only_a = (Requirements([Requirement.create(ZONE, "In", ["zone-a"])]),)
    inp = SchedulingInput(pods=(carrier, *web(2, requirements=only_a)), nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert zone_of(result, "default/carrier") == "zone-b"


def test_a_cordoned_nodes_zone_still_holds_a_spreads_minimum() -> None:
    # kube-scheduler (and Karpenter) count the zone of a cordoned node: with zone-b at 0, zone-a takes one pod.
    only_a = pool("p", AMD, Requirement.create(ZONE, "In", ["zone-a"]))
    cordoned = empty("old", "zone-b", schedulable=False)
    inp = SchedulingInput(pods=web(3, spread=(TopologySpread(ZONE, 1, APP),)), nodepools=(only_a,), nodes=(cordoned,))
    result = checked(inp)
    assert len(result.unschedulable) == 2


def test_a_preferred_hostname_affinity_does_not_replace_the_required_one() -> None:
    # Only the last hostname term counted: the preferred one (to a running web pod) hid the required one (to a pod
    # that does not exist).
    missing = Selector(match_labels=(("app", "missing"),))
    terms = (AffinityTerm(HOST, missing, WEB_IN), AffinityTerm(HOST, APP, None, weight=50))
    roomy_web = empty("w", "zone-a", running=(RunningPod("default", {"app": "web"}),))
    inp = SchedulingInput(pods=(pod("x", "1", "1Gi", affinity=terms),), nodepools=(pool("p", AMD),), nodes=(roomy_web,))
    result = checked(inp)
    assert [u.pod for u in result.unschedulable] == ["default/x"]


def test_a_spreads_carriers_wait_for_the_pods_it_counts_that_are_tried_again() -> None:
    # The web pods first fail (a preferred affinity to nothing) and are placed, relaxed, on a later pass: the
    # carrier waits for them, else it takes zone-a (all empty) and they land there after it (2 against 0).
    nothing = Selector(match_labels=(("app", "nothing"),))
    only_a = (Requirements([Requirement.create(ZONE, "In", ["zone-a"])]),)
    wanting = (AffinityTerm(HOST, nothing, WEB_IN, weight=50),)
    carrier = pod("carrier", "2", "1Gi", labels={"app": "c"}, spread=(TopologySpread(ZONE, 1, APP),))
    inp = SchedulingInput(pods=(carrier, *web(2, requirements=only_a, affinity=wanting)), nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert zone_of(result, "default/carrier") == "zone-b"


def test_spreads_that_count_each_other_go_before_a_third_that_counts_both() -> None:
    # Two web groups' capacity-type spreads count each other (a cycle); the zone spread of a larger carrier (few
    # domains for minDomains 4: minimum 0) counts both. The cycle is broken inside, not by placing the carrier first.
    only_a = pool("p", AMD, Requirement.create(ZONE, "In", ["zone-a"]))
    ct = (TopologySpread(wk.LABEL_CAPACITY_TYPE, 1, APP),)
    tolerating = tuple(
        pod(f"t-{i}", "250m", "1Gi", labels={"app": "web"}, spread=ct, tolerations=(TOLERATE_ALL,)) for i in range(2)
    )
    plain = tuple(pod(f"u-{i}", "250m", "1Gi", labels={"app": "web"}, spread=ct) for i in range(2))
    carrier = pod("carrier", "1", "1Gi", labels={"app": "c"}, spread=(TopologySpread(ZONE, 2, APP, min_domains=4),))
    inp = SchedulingInput(pods=(carrier, *tolerating, *plain), nodepools=(only_a,))
    result = checked(inp)
    assert [u.pod for u in result.unschedulable] == ["default/carrier"]


def test_pods_a_placed_spread_counts_keep_its_domains_within_max_skew() -> None:
    # Two web groups carry the same zone spread but see different zones (taints honored: only one tolerates the
    # tainted NodePool of zone-b, where another pod opens a node). The second may not take zone-a to 2 while zone-b
    # holds the first's minimum at 0.
    spread = (TopologySpread(ZONE, 1, APP, honor_node_taints=True),)
    tainted = pool("b", AMD, taints=(Taint("dedicated", "NoSchedule", "x"),))
    only_a = pool("a", AMD, Requirement.create(ZONE, "In", ["zone-a"]))
    first = pod("first", "2", "1Gi", labels={"app": "web"}, spread=spread, tolerations=(TOLERATE_ALL,))
    second = pod("second", "1", "1Gi", labels={"app": "web"}, spread=spread)
    in_b = (Requirements([Requirement.create(ZONE, "In", ["zone-b"])]),)
    other = pod("other", "3", "1Gi", requirements=in_b, tolerations=(TOLERATE_ALL,))
    inp = SchedulingInput(pods=(first, second, other), nodepools=(only_a, tainted))
    result = checked(inp)
    assert zone_of(result, "default/first") == "zone-a"
    assert [u.pod for u in result.unschedulable] == ["default/second"]


def test_a_zone_only_existing_nodes_serve_counts_as_it_stands() -> None:
    # zone-c has room for one pod on an existing node and no NodePool: zone-a may then hold two, not three (the
    # share zone-c could not take counted as if it would come).
    only_a = pool("p", AMD, Requirement.create(ZONE, "In", ["zone-a"]))
    c_node = empty("c", "zone-c", cpu=1000)
    inp = SchedulingInput(pods=web(5, spread=(TopologySpread(ZONE, 1, APP),)), nodepools=(only_a,), nodes=(c_node,))
    result = checked(inp)
    on_claims = Counter(zone for c in result.node_claims for zone in c.zones for _ in c.pods)
    assert on_claims == {"zone-a": 2}
    assert [(e.name, len(e.pods)) for e in result.existing] == [("c", 1)]


def test_pods_held_to_one_node_count_its_zone_as_it_stands() -> None:
    # "web" opens the existing node in zone-a for its hostname self-affinity; the spread's pods (same labels) must
    # join that node, so zone-b (a NodePool's) will get none of their share: zone-a already holds 2 = maxSkew.
    host_term = (AffinityTerm(HOST, APP, WEB_IN),)
    opener = pod("web-open", "100m", "1Gi", labels={"app": "web"}, affinity=host_term)
    joiner = pod("web-join", "100m", "1Gi", labels={"app": "web"})
    spread = (TopologySpread(ZONE, 2, APP),)
    spreading = tuple(pod(f"s-{i}", "100m", "2Gi", labels={"app": "web"}, spread=spread) for i in range(3))
    in_b = pool("p", AMD, Requirement.create(ZONE, "In", ["zone-b"]))
    a_node = empty("a", "zone-a")
    inp = SchedulingInput(pods=(opener, joiner, *spreading), nodepools=(in_b,), nodes=(a_node,))
    result = checked(inp)
    assert sorted(u.pod for u in result.unschedulable) == [p.key for p in spreading]


def test_a_groups_own_anti_affinity_does_not_exempt_it_from_joining_the_node_a_self_affine_group_opened() -> None:
    # The second group repels its own labels by zone; that term is not the opener's hostname term, so it must still
    # join the opener's node (it cannot: it stays pending) rather than open a node elsewhere.
    only_a = (Requirements([Requirement.create(ZONE, "In", ["zone-a"])]),)
    opener = pod(
        "open", "1", "1Gi", labels={"app": "web"}, affinity=(AffinityTerm(HOST, APP, WEB_IN),), requirements=only_a
    )
    apart = (AffinityTerm(ZONE, APP, WEB_IN, anti=True),)
    other = pod("other", "500m", "1Gi", labels={"app": "web"}, affinity=apart)
    inp = SchedulingInput(pods=(opener, other), nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert [u.pod for u in result.unschedulable] == ["default/other"]


def test_an_anti_affinity_that_does_not_select_its_own_pods_leaves_them_to_the_spread_that_counts_them() -> None:
    # The db pod's zone anti-affinity (to pods of another namespace) pins no zone: the spread counting it must
    # still pin it, else its NodeClaim lands anywhere and the spread's pod may share zone-a with it.
    db_sel = Selector(expressions=(("tier", "In", frozenset({"db"})),))
    elsewhere = (AffinityTerm(ZONE, DB, frozenset({"other"}), anti=True),)
    db_pod = pod("db", "250m", "2Gi", labels={"app": "db", "tier": "db"}, affinity=elsewhere)
    spread = (TopologySpread(ZONE, 1, db_sel, min_domains=4),)
    carrier = pod("carrier", "250m", "512Mi", labels={"app": "c", "tier": "db"}, spread=spread)
    inp = SchedulingInput(pods=(db_pod, carrier), nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert zone_of(result, "default/db") != zone_of(result, "default/carrier")


def test_a_self_affine_group_opens_a_zone_the_pods_it_selects_can_follow_it_to() -> None:
    # The other pod (same labels, no rules) can only run in zone-b: the group opens zone-b, not zone-a.
    db_term = (AffinityTerm(ZONE, DB, None),)
    opener = pod("db", "1", "2Gi", labels={"app": "db"}, affinity=db_term)
    in_b = (Requirements([Requirement.create(ZONE, "In", ["zone-b"])]),)
    follower = PodInput(
        key="other/db", requests={"cpu": 1000, "memory": GI, "pods": 1000}, requirements=in_b, labels={"app": "db"}
    )
    inp = SchedulingInput(pods=(opener, follower), nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert zone_of(result, "default/db") == zone_of(result, "other/db") == "zone-b"


def test_a_pod_that_cannot_follow_a_self_affine_group_into_its_zone_waits() -> None:
    # The group opens zone-a (only there may it run); the other pod (same labels) can only run in zone-b: bound
    # first there, it would leave the group pending, so it waits for the next round (the group bound by then).
    db_term = (AffinityTerm(ZONE, DB, None),)
    in_a = (Requirements([Requirement.create(ZONE, "In", ["zone-a"])]),)
    opener = pod("db", "1", "2Gi", labels={"app": "db"}, affinity=db_term, requirements=in_a)
    in_b = (Requirements([Requirement.create(ZONE, "In", ["zone-b"])]),)
    follower = PodInput(
        key="other/db", requests={"cpu": 1000, "memory": GI, "pods": 1000}, requirements=in_b, labels={"app": "db"}
    )
    inp = SchedulingInput(pods=(opener, follower), nodepools=(pool("p", AMD),))
    result = checked(inp)
    assert [u.pod for u in result.unschedulable] == ["other/db"]
    assert "must join them there" in result.unschedulable[0].reasons["p"]


def test_pods_allowed_several_zones_join_open_node_claims_in_any_of_them() -> None:
    # The quick pre-check of open NodeClaims took one of the pods' zones (whichever a set iteration gave first)
    # as if it were their only zone: NodeClaims in the others were passed over, and the plan followed the hash seed.
    zones3 = ("zone-a", "zone-b", "zone-c")
    types = (itype("m.large", 2, 8, 0.10, zones=zones3), itype("m.xlarge", 4, 16, 0.20, zones=zones3))
    three = pool("p", AMD, Requirement.create(ZONE, "In", list(zones3)), instance_types=types)
    big = web(3, spread=(TopologySpread(ZONE, 1, APP),), cpu="1500m")
    anywhere = (Requirements([Requirement.create(ZONE, "In", list(zones3))]),)
    small = tuple(pod(f"small-{i}", "250m", "1Gi", requirements=anywhere) for i in range(3))
    inp = SchedulingInput(pods=big + small, nodepools=(three,))
    result = checked(inp)
    assert sorted(len(c.pods) for c in result.node_claims) == [2, 2, 2]
