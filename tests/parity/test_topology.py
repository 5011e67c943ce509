"""Parity: topology spread, pod affinity and anti-affinity (upstream's scheduling topology suite).

Upstream's suite provisions in several rounds, binding each round's pods to the nodes it made. A
round here is one ``plan``: the pods and nodes earlier rounds would have left are written as bound
pods on existing nodes (made full, so the next round's pods cannot join them unless the test wants
it). Upstream's ``test-zone-1..3`` are ``us-east-1a..c``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from nodeflow.catalog.offline import load_offline
from tests.parity.harness import (
    ARCH,
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_TYPE,
    ZONE,
    Obj,
    Plan,
    affinity_term,
    managed_node,
    namespace,
    node,
    node_class,
    node_pool,
    plan,
    pod,
    requirement,
    run,
    selector,
    spread,
    taint,
    toleration,
)
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/controllers/provisioning/scheduling/topology_test.go"

NOT_EXPRESSIBLE: dict[str, str] = {
    "Taints / should taint nodes with NodePool taints": (
        "asserts the taints written on the launched Node; plan output lists no node taints"
    ),
    "Taints / should not generate taints for OpExists": (
        "asserts the launched Node carries no extra taint; plan output lists no node taints"
    ),
}

A, B, C = "us-east-1a", "us-east-1b", "us-east-1c"
L = {"test": "test"}
S2 = {"security": "s2"}
_INFOS = load_offline("us-east-1").infos


# --- builders -------------------------------------------------------------------------------------------------------


def pool(name: str = "default", *reqs: Obj, **kw: Any) -> Obj:
    """Upstream's NodePool of this suite: any capacity type (spot allowed), plus ``reqs``."""
    return node_pool(name, requirements=[requirement(CAPACITY_TYPE, "Exists"), *reqs], **kw)


def zones_in(*zones: str) -> Obj:
    return requirement(ZONE, "In", *zones)


def world(*objects: Any, pools: Iterable[Obj] | None = None) -> list[Obj]:
    """The default EC2NodeClass, ``pools`` (default: :func:`pool`) and ``objects`` (nested lists flattened)."""
    out: list[Obj] = [node_class(), *(list(pools) if pools is not None else [pool()])]
    for o in objects:
        out.extend([o] if isinstance(o, dict) else world(*o, pools=[])[1:])
    return out


def pods(prefix: str, count: int, **kw: Any) -> list[Obj]:
    kw.setdefault("labels", L)
    return [pod(f"{prefix}-{i}", **kw) for i in range(count)]


def names(objs: Iterable[Obj]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def full_node(
    name: str,
    zone: str = A,
    *,
    bound: int = 1,
    labels: Mapping[str, str] = L,
    capacity_type: str = "on-demand",
    bound_kw: Mapping[str, Any] | None = None,
    **kw: Any,
) -> list[Obj]:
    """A Karpenter node with ``bound`` pods labelled ``labels`` that leaves no room for a 1-CPU pod."""
    objs = managed_node(
        name,
        zone=zone,
        capacity_type=capacity_type,
        allocatable={"cpu": f"{100 * max(bound, 1)}m", "memory": "16Gi", "pods": "110"},
        **kw,
    )
    objs += [pod(f"{name}-pod-{i}", node=name, cpu="100m", labels=labels, **(bound_kw or {})) for i in range(bound)]
    return objs


def domain_of(result: Plan, pod_name: str, key: str, where: Mapping[str, str]) -> str | None:
    claim = result.claim_of(pod_name)
    if claim is not None:
        if key == ZONE:
            assert len(claim["zones"]) == 1, f"{pod_name}: NodeClaim not pinned to one zone: {claim['zones']}"
            return str(claim["zones"][0])
        if key == CAPACITY_TYPE:
            return str(claim["capacityType"])
        if key == HOSTNAME:
            return f"claim-{result.node_claims.index(claim)}"
        if key == ARCH:
            arches = {_INFOS[t].architecture for t in claim["instanceTypes"]}
            assert len(arches) == 1, arches
            return str(arches.pop())
        return str(claim["nodePool"])
    existing = result.existing_of(pod_name)
    if existing is None:
        return None
    return existing if key == HOSTNAME else where[existing]


def counts(
    result: Plan, pod_names: Iterable[str], key: str, where: Mapping[str, str] = {}, base: Mapping[str, int] = {}
) -> dict[str, int]:
    """Pods per domain of ``key``: ``base`` (pods already there) plus where ``pod_names`` land.

    ``where``: existing node -> its domain; a NodeClaim's domain is its zone, capacity type, arch or
    (other keys) its NodePool."""
    out = dict(base)
    for name in pod_names:
        d = domain_of(result, name, key, where)
        if d is not None:
            out[d] = out.get(d, 0) + 1
    return out


def skew(result: Plan, pod_names: Iterable[str], key: str, **kw: Any) -> list[int]:
    return sorted(counts(result, pod_names, key, **kw).values())


def scheduled(result: Plan, pod_names: Iterable[str]) -> list[str]:
    return [n for n in pod_names if result.scheduled(n)]


def no_selector(constraint: Obj) -> Obj:
    constraint = dict(constraint)
    del constraint["labelSelector"]
    return constraint


# --- general --------------------------------------------------------------------------------------------------------


@mirrors("Topology / should ignore unknown topology keys")
def test_a_spread_on_a_key_no_node_has_leaves_its_pod_pending() -> None:
    result = plan(world(pod("odd", labels=L, spread=[spread("unknown", labels=L)]), pod("plain")))
    assert not result.scheduled("odd")
    assert result.scheduled("plain")


@mirrors(
    "Topology / should not spread an invalid label selector",
    differs="Kubernetes rejects such a selector at admission (upstream skips this spec on every supported "
    "version); nodeflow rejects the manifest, naming the field",
)
def test_an_invalid_selector_value_is_a_manifest_error() -> None:
    bad = spread(ZONE, labels={"app.kubernetes.io/name": "{{ zqfmgb }}"})
    code, _, err = run("plan", world(pods("p", 2, spread=[bad])))
    assert code == 2
    assert "{{ zqfmgb }}" in err or "labelSelector" in err


@mirrors("Topology / should not spread when a nil label selector is defined")
def test_a_spread_without_selector_does_not_spread() -> None:
    group = pods("p", 2, cpu="100m", spread=[no_selector(spread(ZONE))])
    assert skew(plan(world(group)), names(group), ZONE) == [2]


@mirrors(
    "Topology / Zonal / should match all pods when labelSelector is not specified",
    "Topology / CapacityType / should match all pods when labelSelector is not specified",
)
@pytest.mark.parametrize("key", [ZONE, CAPACITY_TYPE])
def test_a_lone_pod_with_a_selectorless_spread_schedules(key: str) -> None:
    assert plan(world(pod("p", spread=[no_selector(spread(key))]))).scheduled("p")


# --- zonal ----------------------------------------------------------------------------------------------------------


@mirrors(
    "Topology / Zonal / should balance pods across zones (match labels)",
    "Topology / Zonal / should balance pods across zones (match expressions)",
    "Topology / Zonal / should respect NodePool zonal constraints",
)
@pytest.mark.parametrize(
    ("constraint", "pools"),
    [
        (spread(ZONE, labels=L), None),
        (spread(ZONE, label_selector=selector(None, requirement("test", "In", "test"))), None),
        (spread(ZONE, labels=L), [pool("default", zones_in(A, B, C))]),
    ],
)
def test_four_pods_spread_over_three_zones(constraint: Obj, pools: list[Obj] | None) -> None:
    group = pods("p", 4, spread=[constraint])
    result = plan(world(group, pools=pools))
    assert skew(result, names(group), ZONE) == [1, 1, 2]


@mirrors(
    "Topology / Zonal / should respect NodePool zonal constraints (subset) with requirements",
    "Topology / Zonal / should respect NodePool zonal constraints (subset) with labels",
    "Topology / Zonal / should respect NodePool zonal constraints (subset) with requirements and labels",
    "Topology / Zonal / should respect NodePool zonal constraints (subset) with labels across NodePools",
)
@pytest.mark.parametrize(
    ("pools", "expected"),
    [
        ([pool("default", zones_in(A, B))], [2, 2]),
        ([pool("default", labels={ZONE: A})], [4]),
        ([pool("default", zones_in(A, B), labels={ZONE: A})], [4]),
        ([pool("default", zones_in(A, B), labels={ZONE: A}), pool("second", labels={ZONE: B})], [2, 2]),
    ],
)
def test_the_nodepools_zones_are_the_domains(pools: list[Obj], expected: list[int]) -> None:
    group = pods("p", 4, spread=[spread(ZONE, labels=L)])
    result = plan(world(group, pools=pools))
    assert scheduled(result, names(group)) == names(group)
    assert skew(result, names(group), ZONE) == expected


@mirrors("Topology / Zonal / should respect NodePool zonal constraints (existing pod)")
def test_a_pod_in_a_zone_the_nodepool_no_longer_offers_still_counts() -> None:
    group = pods("p", 6, cpu="1100m", spread=[spread(ZONE, labels=L)])
    result = plan(world(full_node("old", C), group, pools=[pool("default", zones_in(A, B))]))
    assert skew(result, names(group), ZONE, base={C: 1}) == [1, 2, 2]
    assert len(result.unschedulable) == 2


@mirrors("Topology / Zonal / should schedule to the non-minimum domain if its all that's available")
def test_only_a_non_minimum_zone_left_takes_up_to_max_skew_more() -> None:
    group = pods("p", 10, cpu="1100m", spread=[spread(ZONE, labels=L, max_skew=5)])
    result = plan(world(full_node("a", A), full_node("b", B), group, pools=[pool("default", zones_in(C))]))
    assert counts(result, names(group), ZONE, base={A: 1, B: 1}) == {A: 1, B: 1, C: 6}
    assert len(result.unschedulable) == 4


@mirrors("Topology / Zonal / should only schedule to minimum domains if already violating max skew")
def test_a_skewed_spread_recovers_through_the_emptier_zones() -> None:
    group = pods("p", 3, cpu="1100m", spread=[spread(ZONE, labels=L)])
    result = plan(world(full_node("a", A, bound=3), group))
    assert counts(result, names(group), ZONE, base={A: 3}) in ({A: 3, B: 1, C: 2}, {A: 3, B: 2, C: 1})


@mirrors(
    "Topology / Zonal / should not violate max-skew when unsat = do not schedule",
    "Topology / Zonal / should not violate max-skew when unsat = do not schedule (discover domains)",
)
@pytest.mark.parametrize("existing_spreads", [True, False])
def test_do_not_schedule_caps_the_zones_left_at_max_skew(existing_spreads: bool) -> None:
    constraint = spread(ZONE, labels=L)
    group = pods("p", 10, cpu="1100m", spread=[constraint])
    old = full_node("a", A, bound_kw={"spread": [constraint]} if existing_spreads else None)
    result = plan(world(old, group, pools=[pool("default", zones_in(B, C))]))
    assert counts(result, names(group), ZONE, base={A: 1}) == {A: 1, B: 2, C: 2}
    assert len(result.unschedulable) == 6


@mirrors(
    "Topology / Zonal / should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain"
)
def test_only_bound_live_matching_pods_of_the_namespace_count_per_zone() -> None:
    """Unlabelled, pending, other-namespace, terminal, terminating and domain-less pods do not count."""
    tiny = {"cpu": "100m", "memory": "16Gi", "pods": "110"}
    no_zone = node("third", pool=None, allocatable=tiny)
    del no_zone["metadata"]["labels"][ZONE]
    objects = [
        namespace("elsewhere"),
        node("first", pool=None, zone=A, allocatable=tiny),
        node("second", pool=None, zone=B, allocatable=tiny),
        no_zone,
        node("fourth", pool=None, zone=C, allocatable=tiny),
        pod("unlabelled", node="first", cpu=None, labels={"app": "other"}),
        pod("pending", labels=L, cpu="100", node_selector={"missing": "label"}),
        pod("no-domain", node="third", cpu=None, labels=L),
        pod("other-namespace", namespace="elsewhere", node="first", cpu=None, labels=L),
        pod("failed", node="first", cpu=None, labels=L, phase="Failed"),
        pod("succeeded", node="fourth", cpu=None, labels=L, phase="Succeeded"),
        pod("terminating", node="fourth", cpu=None, labels=L, deleting="2026-11-21T11:59:00Z"),
        pod("counted-1", node="first", cpu=None, labels=L),
        pod("counted-2", node="first", cpu=None, labels=L),
        pod("counted-3", node="second", cpu=None, labels=L),
    ]
    group = pods("p", 2, spread=[spread(ZONE, labels=L)])
    result = plan(world(objects, group))
    assert scheduled(result, names(group)) == names(group)
    placed = counts(result, names(group), ZONE, base={A: 2, B: 1})
    assert placed[A] == 2
    assert placed.get(C)
    assert sorted(placed.values()) == [1, 2, 2]


@mirrors(
    "Topology / Zonal / should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain"
)
@pytest.mark.parametrize("gone", [{"deleting": "2026-11-21T11:59:00Z"}, {"phase": "Succeeded"}, {"phase": "Failed"}])
def test_a_terminating_or_finished_pod_leaves_its_zone_empty(gone: dict[str, Any]) -> None:
    """Us-east-1a and 1b hold one live pod each, 1c only a pod that is going or gone: 1c is the emptiest."""
    tiny = {"cpu": "100m", "memory": "16Gi", "pods": "110"}
    objects = [node(n, pool=None, zone=z, allocatable=tiny) for n, z in (("na", A), ("nb", B), ("nc", C))]
    objects += [pod("live-a", node="na", cpu=None, labels=L), pod("live-b", node="nb", cpu=None, labels=L)]
    objects.append(pod("gone", node="nc", cpu=None, labels=L, **gone))
    result = plan(world(objects, pod("p", labels=L, spread=[spread(ZONE, labels=L)])))
    assert counts(result, ["p"], ZONE) == {C: 1}


@mirrors(
    "Topology / Zonal / should handle interdependent selectors",
    "Topology / CapacityType / should handle interdependent selectors",
    differs="nodeflow sizes nodes by price: five small pods go on two cheap nodes where upstream's fake catalog "
    "gives one; the spread itself changes nothing, which the test checks against the same pods without it",
)
def test_pods_outside_their_own_selector_pack_together() -> None:
    group = pods("p", 5, cpu="100m", labels={"app": "x"}, spread=[spread(HOSTNAME, labels=L)])
    free = pods("p", 5, cpu="100m", labels={"app": "x"})
    result, unconstrained = plan(world(group)), plan(world(free))
    assert scheduled(result, names(group)) == names(group)
    assert sorted(c["pods"] for c in result.node_claims) == sorted(c["pods"] for c in unconstrained.node_claims)
    assert len(result.node_claims) < len(group)


@mirrors("Topology / Zonal / should respect minDomains constraints")
def test_fewer_zones_than_min_domains_hold_one_pod_each() -> None:
    group = pods("p", 3, spread=[spread(ZONE, labels=L, min_domains=3)])
    result = plan(world(group, pools=[pool("default", zones_in(A, B))]))
    assert skew(result, names(group), ZONE) == [1, 1]
    assert len(result.unschedulable) == 1


@mirrors(
    "Topology / Zonal / satisfied minDomains constraints (equal) should allow expected pod scheduling",
    "Topology / Zonal / satisfied minDomains constraints (greater than minimum) should allow expected pod scheduling",
)
@pytest.mark.parametrize("min_domains", [3, 2])
def test_enough_zones_for_min_domains_spread_as_usual(min_domains: int) -> None:
    group = pods("p", 11, spread=[spread(ZONE, labels=L, min_domains=min_domains)])
    result = plan(world(group, pools=[pool("default", zones_in(A, B, C))]))
    assert skew(result, names(group), ZONE) == [3, 4, 4]


# --- hostname -------------------------------------------------------------------------------------------------------


@mirrors("Topology / Hostname / should balance pods across nodes")
def test_max_skew_one_on_hostname_is_one_pod_per_node() -> None:
    group = pods("p", 4, spread=[spread(HOSTNAME, labels=L)])
    assert skew(plan(world(group)), names(group), HOSTNAME) == [1, 1, 1, 1]


@mirrors("Topology / Hostname / should balance pods on the same hostname up to maxskew")
def test_hostname_max_skew_packs_that_many_pods_on_one_new_node() -> None:
    group = pods("p", 4, spread=[spread(HOSTNAME, labels=L, max_skew=4)])
    assert skew(plan(world(group)), names(group), HOSTNAME) == [4]


@mirrors("Topology / Hostname / balance multiple deployments with hostname topology spread")
def test_two_deployments_spread_by_hostname_share_two_nodes() -> None:
    group = [
        pod(f"{app}-{i}", cpu="100m", labels={"app": app}, spread=[spread(HOSTNAME, labels={"app": app})])
        for app in ("app1", "app2")
        for i in range(2)
    ]
    result = plan(world(group))
    assert scheduled(result, names(group)) == names(group)
    assert len(result.node_claims) == 2


@mirrors("Topology / Hostname / balance multiple deployments with hostname topology spread & varying arch")
def test_two_deployments_of_different_arch_need_four_nodes() -> None:
    group = [
        pod(
            f"{app}-{i}",
            cpu="100m",
            labels={"app": app},
            node_affinity=[requirement(ARCH, "In", arch)],
            spread=[spread(HOSTNAME, labels={"app": app})],
        )
        for app, arch in (("app1", "amd64"), ("app2", "arm64"))
        for i in range(2)
    ]
    result = plan(world(group))
    assert scheduled(result, names(group)) == names(group)
    assert len(result.node_claims) == 4


# --- capacity type --------------------------------------------------------------------------------------------------


@mirrors(
    "Topology / CapacityType / should balance pods across capacity types",
    "Topology / CapacityType / should respect NodePool capacity type constraints",
)
@pytest.mark.parametrize(
    "pools", [None, [node_pool(requirements=[requirement(CAPACITY_TYPE, "In", "spot", "on-demand")])]]
)
def test_four_pods_spread_over_two_capacity_types(pools: list[Obj] | None) -> None:
    group = pods("p", 4, spread=[spread(CAPACITY_TYPE, labels=L)])
    assert counts(plan(world(group, pools=pools)), names(group), CAPACITY_TYPE) == {"spot": 2, "on-demand": 2}


@mirrors(
    "Topology / CapacityType / should not violate max-skew when unsat = do not schedule (capacity type)",
    "Topology / CapacityType / should violate max-skew when unsat = schedule anyway (capacity type)",
)
@pytest.mark.parametrize(("when", "expected"), [("DoNotSchedule", 2), ("ScheduleAnyway", 5)])
def test_capacity_type_skew_against_an_existing_spot_pod(when: str, expected: int) -> None:
    group = pods("p", 5, cpu="1100m", spread=[spread(CAPACITY_TYPE, labels=L, when=when)])
    only_on_demand = node_pool(requirements=[requirement(CAPACITY_TYPE, "In", "on-demand")])
    result = plan(world(full_node("spot", capacity_type="spot"), group, pools=[only_on_demand]))
    assert counts(result, names(group), CAPACITY_TYPE) == {"on-demand": expected}
    assert len(result.unschedulable) == 5 - expected


@mirrors(
    "Topology / CapacityType / should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain"
)
def test_only_bound_live_matching_pods_of_the_namespace_count_per_capacity_type() -> None:
    tiny = {"cpu": "100m", "memory": "16Gi", "pods": "110"}
    objects = [
        namespace("elsewhere"),
        node("first", pool=None, labels={CAPACITY_TYPE: "spot"}, allocatable=tiny),
        node("second", pool=None, labels={CAPACITY_TYPE: "on-demand"}, allocatable=tiny),
        node("third", pool=None, allocatable=tiny),
        pod("unlabelled", node="first", cpu=None, labels={"app": "other"}),
        pod("pending", labels=L, cpu="100", node_selector={"missing": "label"}),
        pod("no-domain", node="third", cpu=None, labels=L),
        pod("other-namespace", namespace="elsewhere", node="first", cpu=None, labels=L),
        pod("failed", node="second", cpu=None, labels=L, phase="Failed"),
        pod("succeeded", node="second", cpu=None, labels=L, phase="Succeeded"),
        pod("terminating", node="second", cpu=None, labels=L, deleting="2026-11-21T11:59:00Z"),
        pod("counted-1", node="first", cpu=None, labels=L),
        pod("counted-2", node="first", cpu=None, labels=L),
        pod("counted-3", node="second", cpu=None, labels=L),
    ]
    group = pods("p", 2, spread=[spread(CAPACITY_TYPE, labels=L)])
    result = plan(world(objects, group))
    assert scheduled(result, names(group)) == names(group)
    placed = counts(result, names(group), CAPACITY_TYPE, base={"spot": 2, "on-demand": 1})
    assert placed["on-demand"] >= 2
    assert sorted(placed.values()) == [2, 3]


@mirrors("Topology / CapacityType / should balance pods across capacity-types (node required affinity constrained)")
def test_required_affinity_keeps_other_capacity_types_out_of_the_count() -> None:
    old = full_node("od", A)
    group = pods(
        "p",
        5,
        node_affinity=[zones_in(B), requirement(CAPACITY_TYPE, "In", "spot")],
        spread=[spread(CAPACITY_TYPE, labels=L)],
    )
    result = plan(world(old, group))
    assert counts(result, names(group), CAPACITY_TYPE) == {"spot": 5}


@mirrors(
    "Topology / CapacityType / should balance pods across capacity-types (no constraints)",
    "Topology / CapacityType / should balance pods across arch (no constraints)",
)
@pytest.mark.parametrize(
    ("key", "old_kw", "pool_req", "new_domain"),
    [
        (CAPACITY_TYPE, {"capacity_type": "on-demand"}, requirement(CAPACITY_TYPE, "In", "spot"), "spot"),
        (ARCH, {"instance_type": "m5.xlarge"}, requirement(ARCH, "In", "arm64"), "arm64"),
    ],
)
def test_an_unconstrained_pod_sees_the_existing_domain(
    key: str, old_kw: dict[str, Any], pool_req: Obj, new_domain: str
) -> None:
    group = pods("p", 5, cpu="2", spread=[spread(key, labels=L)])
    result = plan(world(full_node("old", **old_kw), group, pools=[node_pool(requirements=[pool_req])]))
    assert counts(result, names(group), key) == {new_domain: 2}
    assert len(result.unschedulable) == 3


# --- combined -------------------------------------------------------------------------------------------------------


def _per_node_at_most(result: Plan, pod_names: list[str], limit: int) -> None:
    per = counts(result, pod_names, HOSTNAME)
    assert per
    assert max(per.values()) <= limit, per


@mirrors(
    "Topology / Combined Hostname and Zonal Topology / should spread pods while respecting both constraints (hostname and zonal)"
)
def test_zone_and_hostname_spreads_hold_together() -> None:
    both = [spread(ZONE, labels=L), spread(HOSTNAME, labels=L, max_skew=3)]
    first = pods("p", 2, spread=both)
    result = plan(world(first))
    assert skew(result, names(first), ZONE) == [1, 1]
    _per_node_at_most(result, names(first), 3)
    # a later round: 4 / 3 / 3 already bound, 11 more
    old = [full_node("a1", A, bound=3), full_node("a2", A, bound=1), full_node("b1", B, bound=3)]
    old += [full_node("c1", C, bound=3)]
    more = pods("q", 11, spread=both)
    result = plan(world(old, more))
    assert counts(result, names(more), ZONE, base={A: 4, B: 3, C: 3}) == {A: 7, B: 7, C: 7}
    _per_node_at_most(result, names(more), 3)


@mirrors("Topology / Combined Hostname and Zonal Topology / should balance pods across NodePool requirements")
def test_a_spread_over_nodepool_label_values_sets_the_capacity_type_ratio() -> None:
    key = "capacity.spread.4-1"
    spot = node_pool("spot", requirements=[requirement(CAPACITY_TYPE, "In", "spot"), requirement(key, "In", *"2345")])
    on_demand = node_pool(
        "on-demand", requirements=[requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(key, "In", "1")]
    )
    group = pods("p", 20, spread=[spread(key, labels=L)])
    result = plan(world(group, pools=[spot, on_demand]))
    assert scheduled(result, names(group)) == names(group)
    # five domains of four pods: one domain is on-demand, four are spot
    assert counts(result, names(group), CAPACITY_TYPE) == {"spot": 16, "on-demand": 4}


@mirrors("Topology / Combined Hostname and Zonal Topology / should spread pods while respecting both constraints")
def test_a_zone_only_a_nodepool_at_its_limit_offers_still_holds_the_minimum() -> None:
    both = [spread(ZONE, labels=L), spread(HOSTNAME, labels=L, when="ScheduleAnyway")]
    group = pods("p", 10, spread=both)
    pools = [pool("default", zones_in(A, B)), pool("capped", zones_in(C), limits={"cpu": "0"})]
    result = plan(world(group, pools=pools))
    assert counts(result, names(group), ZONE) == {A: 1, B: 1}
    assert skew(result, names(group), HOSTNAME) == [1, 1]


@mirrors("Topology / Combined Hostname and Zonal Topology / should spread pods while respecting both constraints [2]")
def test_capacity_type_and_hostname_spreads_hold_together() -> None:
    both = [spread(CAPACITY_TYPE, labels=L), spread(HOSTNAME, labels=L, max_skew=3)]
    first = pods("p", 2, spread=both)
    result = plan(world(first))
    assert skew(result, names(first), CAPACITY_TYPE) == [1, 1]
    old = [full_node(f"s{i}", capacity_type="spot", bound=n) for i, n in enumerate((3, 2))]
    old += [full_node(f"o{i}", capacity_type="on-demand", bound=n) for i, n in enumerate((3, 2))]
    more = pods("q", 11, spread=both)
    result = plan(world(old, more))
    assert skew(result, names(more), CAPACITY_TYPE, base={"spot": 5, "on-demand": 5}) == [10, 11]
    _per_node_at_most(result, names(more), 3)


@mirrors("Topology / Combined Zonal and Capacity Type Topology / should spread pods while respecting both constraints")
@pytest.mark.parametrize("count", [2, 5, 11])
def test_zone_and_capacity_type_spreads_hold_together(count: int) -> None:
    both = [spread(CAPACITY_TYPE, labels=L), spread(ZONE, labels=L)]
    group = pods("p", count, spread=both)
    result = plan(world(group))
    assert scheduled(result, names(group)) == names(group)
    for key in (CAPACITY_TYPE, ZONE):
        per = counts(result, names(group), key)
        assert max(per.values()) - (min(per.values()) if len(per) == (2 if key == CAPACITY_TYPE else 3) else 0) <= 1


@mirrors(
    "Topology / Combined Hostname, Zonal, and Capacity Type Topology / should spread pods while respecting all constraints"
)
@pytest.mark.parametrize("count", [1, 4, 9, 14])
def test_capacity_type_zone_and_hostname_spreads_hold_together(count: int) -> None:
    constraints = [
        spread(CAPACITY_TYPE, labels=L),
        spread(ZONE, labels=L, max_skew=2),
        spread(HOSTNAME, labels=L, max_skew=3),
    ]
    group = pods("p", count, spread=constraints)
    result = plan(world(group))
    assert scheduled(result, names(group)) == names(group)
    for key, limit, domains in ((CAPACITY_TYPE, 1, 2), (ZONE, 2, 3)):
        per = counts(result, names(group), key)
        floor = min(per.values()) if len(per) == domains else 0
        assert max(per.values()) - floor <= limit, (key, per)
    _per_node_at_most(result, names(group), 3)


# --- matchLabelKeys, nodeTaintsPolicy, nodeAffinityPolicy -----------------------------------------------------------


@mirrors("Topology / MatchLabelKeys / should support matchLabelKeys")
def test_match_label_keys_spread_each_revision_on_its_own() -> None:
    constraint = spread(HOSTNAME, labels=L, match_label_keys=["test-label"])
    group = [
        pod(f"{rev}-{i}", cpu="100m", labels={**L, "test-label": rev}, spread=[constraint])
        for rev in ("value-a", "value-b")
        for i in range(2)
    ]
    result = plan(world(group))
    assert skew(result, names(group), HOSTNAME) == [2, 2]


@mirrors("Topology / MatchLabelKeys / should ignore unknown labels specified in matchLabelKeys")
def test_match_label_keys_the_pod_lacks_are_ignored() -> None:
    group = pods("p", 4, spread=[spread(HOSTNAME, labels=L, match_label_keys=["test-label"])])
    assert skew(plan(world(group)), names(group), HOSTNAME) == [1, 1, 1, 1]


def _tainted_label_nodes(extra: Mapping[str, str] | None = None, tainted: bool = True) -> list[Obj]:
    tiny = {"cpu": "100m", "memory": "16Gi", "pods": "110"}
    taints = [taint("taintname", "taintvalue")] if tainted else []
    return [
        node(name, pool=None, labels={"fake-label": name, **(extra or {})}, taints=taints, allocatable=tiny)
        for name in ("foo", "bar")
    ]


@mirrors(
    "Topology / NodeTaintsPolicy / should balance pods across a label (NodeTaintsPolicy=ignore)",
    "Topology / NodeTaintsPolicy / should balance pods across a label (NodeTaintsPolicy=honor)",
)
@pytest.mark.parametrize(("policy", "expected"), [("Ignore", 1), ("Honor", 5)])
def test_tainted_nodes_domains_count_unless_taints_are_honored(policy: str, expected: int) -> None:
    group = pods("p", 5, spread=[spread("fake-label", labels=L, node_taints_policy=policy)])
    result = plan(world(_tainted_label_nodes(), group, pools=[pool("default", labels={"fake-label": "baz"})]))
    assert len(scheduled(result, names(group))) == expected


@mirrors(
    "Topology / NodeTaintsPolicy / should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=ignore)",
    "Topology / NodeTaintsPolicy / should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=honor)",
)
@pytest.mark.parametrize(("policy", "expected"), [("Ignore", 1), ("Honor", 2)])
def test_a_tainted_nodepools_domains_count_unless_taints_are_honored(policy: str, expected: int) -> None:
    pools = [
        pool("default", requirement("fake-label", "In", "foo")),
        pool("tainted", requirement("fake-label", "In", "bar"), taints=[taint("taint-key", "taint-value")]),
    ]
    group = pods("p", 2, spread=[spread("fake-label", labels=L, node_taints_policy=policy)])
    result = plan(world(group, pools=pools))
    assert counts(result, names(group), "fake-label") == {"default": expected}


@mirrors(
    "Topology / NodeTaintsPolicy / should balance pods across a label when mutually exclusive NodePools (by taints) share domains (NodeTaintsPolicy=honor)"
)
def test_each_deployment_spreads_over_the_domains_its_tolerations_reach() -> None:
    """Upstream's custom label, here the zone (so the plan shows the domain): both NodePools offer
    us-east-1a, only the first us-east-1b, only the second us-east-1c."""
    pools = [
        pool("first", zones_in(A, B), taints=[taint("taint-key", "nodepool-0")]),
        pool("second", zones_in(A, C), taints=[taint("taint-key", "nodepool-1")]),
    ]
    constraint = spread(ZONE, labels=L, node_taints_policy="Honor")
    one = pods("one", 2, spread=[constraint], tolerations=[toleration("taint-key", "nodepool-0", effect="NoSchedule")])
    two = pods("two", 4, spread=[constraint], tolerations=[toleration("taint-key", "nodepool-1", effect="NoSchedule")])
    result = plan(world(one, two, pools=pools))
    assert scheduled(result, names(one + two)) == names(one + two)
    assert skew(result, names(one + two), ZONE) == [1, 2, 3]
    # each deployment is level over its own two zones
    assert sorted(counts(result, names(one), ZONE).values()) == [1, 1]
    assert sorted(counts(result, names(two), ZONE).values()) == [2, 2]


@mirrors(
    "Topology / NodeAffinityPolicy / should balance pods across a label (NodeAffinityPolicy=ignore)",
    "Topology / NodeAffinityPolicy / should balance pods across a label (NodeAffinityPolicy=honor)",
)
@pytest.mark.parametrize(("policy", "expected"), [("Ignore", 1), ("Honor", 5)])
def test_unreachable_nodes_domains_count_unless_affinity_is_honored(policy: str, expected: int) -> None:
    nodes = _tainted_label_nodes({"selector": "mismatch"}, tainted=False)
    group = pods(
        "p",
        5,
        node_selector={"selector": "value"},
        spread=[spread("fake-label", labels=L, node_affinity_policy=policy)],
    )
    result = plan(world(nodes, group, pools=[pool("default", labels={"fake-label": "baz", "selector": "value"})]))
    assert len(scheduled(result, names(group))) == expected


# --- spread and node affinity ---------------------------------------------------------------------------------------


@mirrors("Topology / Combined Zonal Topology and Node Affinity / should limit spread options by nodeSelector")
def test_a_node_selector_narrows_the_zones_of_a_spread() -> None:
    in_a = pods("a", 5, spread=[spread(ZONE, labels=L)], node_selector={ZONE: A})
    in_b = pods("b", 10, spread=[spread(ZONE, labels=L)], node_selector={ZONE: B})
    result = plan(world(in_a, in_b))
    assert counts(result, names(in_a + in_b), ZONE) == {A: 5, B: 10}


@mirrors("Topology / Combined Zonal Topology and Node Affinity / should limit spread options by node requirements")
def test_required_node_affinity_narrows_the_zones_of_a_spread() -> None:
    group = pods("p", 10, spread=[spread(ZONE, labels=L)], node_affinity=[zones_in(A, B)])
    assert counts(plan(world(group)), names(group), ZONE) == {A: 5, B: 5}


@mirrors("Topology / Combined Zonal Topology and Node Affinity / should limit spread options by required node affinity")
def test_required_node_affinity_narrows_the_zones_round_by_round() -> None:
    constraint = spread(ZONE, labels=L)
    group = pods("p", 6, spread=[constraint], node_affinity=[zones_in(A, B)])
    assert counts(plan(world(group)), names(group), ZONE) == {A: 3, B: 3}
    # next round: 3 / 3 / 0 bound; a pod allowed in B and C goes to the empty C
    old = [full_node("a", A, bound=3), full_node("b", B, bound=3)]
    late = pod("late", labels=L, spread=[constraint], node_affinity=[zones_in(B, C)])
    result = plan(world(old, late, pools=[pool("default", zones_in(A, B, C))]))
    assert counts(result, ["late"], ZONE) == {C: 1}
    # and then five unconstrained pods level the zones at 4 / 4 / 4
    old.append(full_node("c", C, bound=1))
    more = pods("q", 5, spread=[constraint])
    result = plan(world(old, more, pools=[pool("default", zones_in(A, B, C))]))
    assert counts(result, names(more), ZONE, base={A: 3, B: 3, C: 1}) == {A: 4, B: 4, C: 4}


@mirrors(
    "Topology / Combined Zonal Topology and Node Affinity / should not limit spread options by preferred node affinity"
)
def test_preferred_node_affinity_does_not_narrow_the_zones_of_a_spread() -> None:
    group = pods("p", 6, spread=[spread(ZONE, labels=L)], preferred_node_affinity=[(1, zones_in(A, B))])
    assert skew(plan(world(group)), names(group), ZONE) == [2, 2, 2]


@mirrors("Topology / Combined Capacity Type Topology and Node Affinity / should limit spread options by nodeSelector")
def test_a_node_selector_narrows_the_capacity_types_of_a_spread() -> None:
    constraint = spread(CAPACITY_TYPE, labels=L, when="ScheduleAnyway")
    spot = pods("s", 5, spread=[constraint], node_selector={CAPACITY_TYPE: "spot"})
    on_demand = pods("o", 5, spread=[constraint], node_selector={CAPACITY_TYPE: "on-demand"})
    result = plan(world(spot, on_demand))
    assert counts(result, names(spot + on_demand), CAPACITY_TYPE) == {"spot": 5, "on-demand": 5}


@mirrors(
    "Topology / Combined Capacity Type Topology and Node Affinity / should limit spread options by node affinity (capacity type)"
)
def test_required_node_affinity_narrows_the_capacity_types_of_a_spread() -> None:
    group = pods(
        "p", 3, spread=[spread(CAPACITY_TYPE, labels=L)], node_affinity=[requirement(CAPACITY_TYPE, "In", "spot")]
    )
    assert counts(plan(world(group)), names(group), CAPACITY_TYPE) == {"spot": 3}


# --- pod affinity and anti-affinity ---------------------------------------------------------------------------------


@mirrors("Topology / Pod Affinity/Anti-Affinity / should schedule a pod with empty pod affinity and anti-affinity")
def test_empty_pod_affinity_blocks_nothing() -> None:
    empty: Obj = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
    }
    assert plan(world(pod("p", affinity=empty))).scheduled("p")


def _spread_ten() -> list[Obj]:
    return pods("spread", 10, spread=[spread(HOSTNAME, labels=L)])


@mirrors("Topology / Pod Affinity/Anti-Affinity / should respect pod affinity (hostname)")
def test_hostname_affinity_joins_the_target_pods_node() -> None:
    target = pod("target", labels=S2)
    follower = pod("follower", labels={"app": "f"}, pod_affinity=[affinity_term(HOSTNAME, S2)])
    result = plan(world(_spread_ten(), target, follower))
    claim = result.claim_of("target")
    assert claim is not None
    assert result.claim_of("follower") is claim


def _arch_of(result: Plan, pod_name: str) -> str:
    return domain_of(result, pod_name, ARCH, {}) or ""


@mirrors("Topology / Pod Affinity/Anti-Affinity / should respect pod affinity (arch)")
def test_arch_affinity_shares_the_arch_not_the_node() -> None:
    tsc = [spread(HOSTNAME, labels=S2)]
    first = pod("first", labels=S2, cpu="2", spread=tsc, node_selector={ARCH: "arm64"})
    second = pod("second", labels=S2, cpu="1", spread=tsc, pod_affinity=[affinity_term(ARCH, S2)])
    result = plan(world(first, second))
    assert result.scheduled("first")
    assert result.scheduled("second")
    assert _arch_of(result, "second") == _arch_of(result, "first") == "arm64"
    assert result.claim_of("first") is not result.claim_of("second")


@mirrors("Topology / Pod Affinity/Anti-Affinity / should respect self pod affinity (hostname)")
def test_self_affinity_on_hostname_shares_one_node() -> None:
    group = pods("p", 3, labels=S2, pod_affinity=[affinity_term(HOSTNAME, S2)])
    assert skew(plan(world(group)), names(group), HOSTNAME) == [3]


# m5.xlarge holds five of these pods (3.92 CPU allocatable after kube-reserved), not six.
_FIVE_PER_NODE = node_pool(requirements=[requirement(INSTANCE_TYPE, "In", "m5.xlarge")])


@mirrors(
    "Topology / Pod Affinity/Anti-Affinity / should respect self pod affinity for first empty topology domain only (hostname)"
)
def test_self_affinity_on_hostname_opens_one_node_only() -> None:
    group = pods("p", 10, labels=S2, cpu="700m", pod_affinity=[affinity_term(HOSTNAME, S2)])
    result = plan(world(group, pools=[_FIVE_PER_NODE]))
    assert skew(result, names(group), HOSTNAME) == [5]
    assert len(result.unschedulable) == 5
    # the next batch: that node (launched, holding the five) is full; no second node is opened
    old = managed_node("host", allocatable={"cpu": "3500m", "memory": "16Gi", "pods": "110"}, claim_initialized="")
    bound = [pod(f"bound-{i}", node="host", labels=S2, cpu="700m") for i in range(5)]
    later = pods("q", 10, labels=S2, cpu="700m", pod_affinity=[affinity_term(HOSTNAME, S2)])
    result = plan(world(old, bound, later, pools=[_FIVE_PER_NODE]))
    assert scheduled(result, names(later)) == []


@mirrors(
    "Topology / Pod Affinity/Anti-Affinity / should respect self pod affinity for first empty topology domain only (hostname/constrained zones)"
)
def test_self_affinity_on_hostname_cannot_open_a_node_when_a_match_exists_elsewhere() -> None:
    old = managed_node("host", zone=A)
    first = pod("first", node="host", labels=S2, pod_affinity=[affinity_term(HOSTNAME, S2)], node_selector={ZONE: A})
    group = pods("p", 10, labels=S2, node_affinity=[zones_in(B, C)], pod_affinity=[affinity_term(HOSTNAME, S2)])
    result = plan(world(old, first, group))
    assert scheduled(result, names(group)) == []


@mirrors("Topology / Pod Affinity/Anti-Affinity / should respect self pod affinity (zone)")
def test_self_affinity_on_zone_keeps_one_zone() -> None:
    group = pods("p", 3, labels=S2, pod_affinity=[affinity_term(ZONE, S2)])
    result = plan(world(group))
    assert scheduled(result, names(group)) == names(group)
    assert len(counts(result, names(group), ZONE)) == 1


@mirrors("Topology / Pod Affinity/Anti-Affinity / should respect self pod affinity (zone w/ constraint)")
def test_self_affinity_on_zone_within_the_pods_own_zone() -> None:
    group = pods("p", 3, labels=S2, pod_affinity=[affinity_term(ZONE, S2)], node_affinity=[zones_in(C)])
    assert counts(plan(world(group)), names(group), ZONE) == {C: 3}


@mirrors(
    "Topology / Pod Affinity/Anti-Affinity / should allow two nodes to be created when two pods with matching affinities have incompatible selectors",
    differs="kube-scheduler lets a pod with self-affinity start a domain only while no pod in the cluster matches "
    "its terms: once the first is bound in one zone, the second stays pending on a node upstream makes for it in "
    "another; nodeflow makes no such node and reports the second pod unschedulable, saying why",
)
def test_a_self_affine_pod_opens_no_zone_while_a_match_is_elsewhere() -> None:
    term = affinity_term(ZONE, {"security": "s1"})
    one = pod("one", labels={"security": "s1"}, pod_affinity=[term], node_affinity=[zones_in(B)])
    two = pod("two", labels={"security": "s1"}, pod_affinity=[term], node_affinity=[zones_in(C)])
    result = plan(world(one, two))
    assert counts(result, ["one"], ZONE) == {B: 1}
    assert not result.scheduled("two")
    assert "only in us-east-1b, which its node affinity excludes" in result.unschedulable["default/two"]["default"]


@mirrors("Topology / Pod Affinity/Anti-Affinity / should allow violation of preferred pod affinity")
def test_a_preferred_affinity_to_no_pod_is_dropped() -> None:
    wants = pod("wants", labels={"app": "w"}, pod_affinity=[affinity_term(HOSTNAME, S2, weight=50)])
    assert plan(world(_spread_ten(), wants)).scheduled("wants")


@mirrors("Topology / Pod Affinity/Anti-Affinity / should allow violation of preferred pod anti-affinity")
def test_a_preferred_anti_affinity_is_dropped_when_every_zone_has_a_match() -> None:
    spreaders = pods("s", 3, spread=[spread(ZONE, labels=L)])
    avoiders = pods("a", 10, labels={"app": "a"}, pod_anti_affinity=[affinity_term(ZONE, L, weight=50)])
    result = plan(world(spreaders, avoiders))
    assert scheduled(result, names(avoiders)) == names(avoiders)


@mirrors("Topology / Pod Affinity/Anti-Affinity / should separate nodes using simple pod anti-affinity on hostname")
@pytest.mark.parametrize("avoider_first", [True, False])
def test_hostname_anti_affinity_keeps_two_pods_apart(avoider_first: bool) -> None:
    target = pod("target", labels=S2)
    avoider = pod("avoider", labels={"app": "a"}, pod_anti_affinity=[affinity_term(HOSTNAME, S2)])
    result = plan(world(*([avoider, target] if avoider_first else [target, avoider])))
    assert result.claim_of("target") is not None
    assert result.claim_of("avoider") is not None
    assert result.claim_of("target") is not result.claim_of("avoider")


@mirrors("Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity on zone")
def test_zone_anti_affinity_with_a_match_in_every_zone_is_unschedulable() -> None:
    targets = [pod(f"t-{z}", labels=S2, cpu="2", node_selector={ZONE: z}) for z in (A, B, C)]
    avoider = pod("avoider", labels={"app": "a"}, pod_anti_affinity=[affinity_term(ZONE, S2)])
    result = plan(world(targets, avoider))
    assert scheduled(result, names(targets)) == names(targets)
    assert not result.scheduled("avoider")


@mirrors("Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity on zone (other schedules first)")
def test_zone_anti_affinity_against_a_pod_of_undecided_zone_is_unschedulable() -> None:
    target = pod("target", labels=S2, cpu="2")
    avoider = pod("avoider", labels={"app": "a"}, pod_anti_affinity=[affinity_term(ZONE, S2)])
    result = plan(world(target, avoider))
    assert result.scheduled("target")
    assert not result.scheduled("avoider")


@mirrors("Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity (arch)")
def test_arch_anti_affinity_picks_the_other_arch() -> None:
    tsc = [spread(HOSTNAME, labels=S2)]
    first = pod("first", labels=S2, cpu="2", spread=tsc, node_selector={ARCH: "arm64"})
    second = pod("second", labels=S2, cpu="1", spread=tsc, pod_anti_affinity=[affinity_term(ARCH, S2)])
    result = plan(world(first, second))
    assert _arch_of(result, "first") == "arm64"
    assert _arch_of(result, "second") == "amd64"


def _zone_guards(anti: Obj, prefix: str = "guard") -> list[Obj]:
    return [
        pod(f"{prefix}-{z[-1]}", labels={"app": "guard"}, cpu="2", node_selector={ZONE: z}, pod_anti_affinity=[anti])
        for z in (A, B, C)
    ]


@mirrors(
    "Topology / Pod Affinity/Anti-Affinity / should violate preferred pod anti-affinity on zone (inverse)",
    "Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity on zone (inverse)",
)
@pytest.mark.parametrize(("weight", "target_schedules"), [(10, True), (None, False)])
def test_other_pods_zone_anti_affinity_in_every_zone(weight: int | None, target_schedules: bool) -> None:
    guards = _zone_guards(affinity_term(ZONE, S2, weight=weight))
    result = plan(world(guards, pod("target", labels=S2)))
    assert scheduled(result, names(guards)) == names(guards)
    assert result.scheduled("target") is target_schedules


@mirrors(
    "Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity on zone (inverse w/existing nodes)",
    "Topology / Pod Affinity/Anti-Affinity / should violate preferred pod anti-affinity on zone (inverse w/existing nodes)",
)
@pytest.mark.parametrize(("weight", "target_schedules"), [(None, False), (10, True)])
def test_bound_pods_zone_anti_affinity_in_every_zone(weight: int | None, target_schedules: bool) -> None:
    anti = affinity_term(ZONE, S2, weight=weight)
    old: list[Obj] = []
    for z in (A, B, C):
        old += managed_node(f"node-{z[-1]}", zone=z)
        old.append(pod(f"guard-{z[-1]}", node=f"node-{z[-1]}", labels={"app": "guard"}, pod_anti_affinity=[anti]))
    result = plan(world(old, pod("target", labels=S2)))
    assert result.scheduled("target") is target_schedules


@mirrors("Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity on zone (Schrödinger)")
def test_anti_affinity_of_a_pod_of_undecided_zone_blocks_every_zone_it_may_land_in() -> None:
    anywhere = pod("anywhere", labels={"app": "x"}, cpu="2", pod_anti_affinity=[affinity_term(ZONE, S2)])
    result = plan(world(anywhere, pod("target", labels=S2)))
    assert result.scheduled("anywhere")
    assert not result.scheduled("target")
    # once the first pod's node exists (in us-east-1a), the target schedules in another zone
    old = managed_node("first", zone=A)
    bound = pod("anywhere", node="first", labels={"app": "x"}, cpu="2", pod_anti_affinity=[affinity_term(ZONE, S2)])
    result = plan(world(old, bound, pod("target", labels=S2)))
    claim = result.claim_of("target")
    assert claim is not None
    assert A not in claim["zones"]


@mirrors(
    "Topology / Pod Affinity/Anti-Affinity / should allow violation of a pod affinity preference with a conflicting required constraint"
)
def test_a_preferred_affinity_yields_to_a_required_spread() -> None:
    target = pod("target", labels=S2)
    group = pods("p", 3, spread=[spread(HOSTNAME, labels=L)], pod_affinity=[affinity_term(HOSTNAME, S2, weight=50)])
    result = plan(world(group, target))
    assert scheduled(result, [*names(group), "target"]) == [*names(group), "target"]
    assert skew(result, names(group), HOSTNAME) == [1, 1, 1]


@mirrors(
    "Topology / Pod Affinity/Anti-Affinity / should support pod anti-affinity with a zone topology",
    differs="nodeflow pins each NodeClaim of a zonal anti-affinity to one zone, so the three pods land in three "
    "zones in one plan; upstream commits zones late and needs one provisioning round per pod",
)
def test_zone_self_anti_affinity_places_one_pod_per_zone() -> None:
    group = pods("p", 4, labels=S2, pod_anti_affinity=[affinity_term(ZONE, S2)])
    result = plan(world(group))
    placed = counts(result, names(group), ZONE)
    assert placed == {A: 1, B: 1, C: 1}
    assert len(result.unschedulable) == 1


@mirrors("Topology / Pod Affinity/Anti-Affinity / should not schedule pods with affinity to a non-existent pod")
def test_zone_affinity_to_no_pod_is_unschedulable() -> None:
    group = pods("p", 10, labels={"app": "x"}, pod_affinity=[affinity_term(ZONE, S2)])
    assert scheduled(plan(world(group)), names(group)) == []


@mirrors(
    "Topology / Pod Affinity/Anti-Affinity / should support pod affinity with zone topology (unconstrained target)"
)
def test_zone_affinity_waits_for_the_targets_zone_to_be_known() -> None:
    followers = pods("f", 10, labels={"app": "f"}, pod_affinity=[affinity_term(ZONE, S2)])
    result = plan(world(pod("target", labels=S2), followers))
    assert result.scheduled("target")
    assert scheduled(result, names(followers)) == []
    # the target is now bound to a node in us-east-1b: all follow it there
    old = managed_node("target-node", zone=B)
    result = plan(world(old, pod("target", labels=S2, node="target-node"), followers))
    assert counts(result, names(followers), ZONE, where={"target-node": B}) == {B: 10}


@mirrors("Topology / Pod Affinity/Anti-Affinity / should support pod affinity with zone topology (constrained target)")
def test_zone_affinity_follows_a_target_of_known_zone_in_the_same_plan() -> None:
    followers = pods("f", 10, labels={"app": "f"}, pod_affinity=[affinity_term(ZONE, S2)])
    result = plan(world(pod("target", labels=S2, node_affinity=[zones_in(A)]), followers))
    assert counts(result, [*names(followers), "target"], ZONE) == {A: 11}


@mirrors("Topology / Pod Affinity/Anti-Affinity / should handle multiple dependent affinities")
@pytest.mark.parametrize("reverse", [False, True])
def test_a_chain_of_hostname_affinities_lands_on_one_node(reverse: bool) -> None:
    chain = ["db", "web", "cache", "ui"]
    group = [
        pod(
            kind,
            labels={"type": kind, "spread": "spread"},
            pod_affinity=[affinity_term(HOSTNAME, {"type": chain[i - 1], "spread": "spread"})] if i else (),
        )
        for i, kind in enumerate(chain)
    ]
    result = plan(world(*(reversed(group) if reverse else group)))
    assert scheduled(result, chain) == chain
    assert len({id(result.claim_of(k)) for k in chain}) == 1


@mirrors("Topology / Pod Affinity/Anti-Affinity / should fail to schedule pods with unsatisfiable dependencies")
def test_hostname_affinity_to_no_pod_is_unschedulable() -> None:
    db = pod("db", labels={"type": "db"}, pod_affinity=[affinity_term(HOSTNAME, {"type": "web"})])
    assert not plan(world(db)).scheduled("db")


@mirrors(
    "Topology / Pod Affinity/Anti-Affinity / should filter pod affinity topologies by namespace, no matching pods",
    "Topology / Pod Affinity/Anti-Affinity / should filter pod affinity topologies by namespace, matching pods namespace list",
    "Topology / Pod Affinity/Anti-Affinity / should filter pod affinity topologies by namespace, empty namespace selector",
)
@pytest.mark.parametrize(
    ("term_kw", "follows"),
    [({}, False), ({"namespaces": ["other"]}, True), ({"namespace_selector": {}}, True)],
)
def test_affinity_terms_look_in_their_namespaces(term_kw: dict[str, Any], follows: bool) -> None:
    target = pod("target", namespace="other", labels=S2)
    follower = pod("follower", labels={"app": "f"}, pod_affinity=[affinity_term(HOSTNAME, S2, **term_kw)])
    result = plan(world(namespace("other"), _spread_ten(), target, follower))
    assert result.scheduled("other/target")
    if follows:
        assert result.claim_of("follower") is result.claim_of("other/target")
    else:
        assert not result.scheduled("follower")


# --- taints and volumes ---------------------------------------------------------------------------------------------


@mirrors("Taints / should schedule pods that tolerate NodePool constraints")
def test_only_pods_tolerating_the_nodepools_taint_schedule() -> None:
    tainted = pool("default", taints=[taint("test-key", "test-value")])
    good = [
        pod("exists", tolerations=[toleration("test-key", effect="NoSchedule")]),
        pod("equal", tolerations=[toleration("test-key", "test-value", effect="NoSchedule")]),
    ]
    bad = [
        pod("none"),
        pod("other-key", tolerations=[toleration("invalid")]),
        pod("empty-value", tolerations=[toleration("test-key", "", effect="NoSchedule")]),
    ]
    result = plan(world(good, bad, pools=[tainted]))
    assert scheduled(result, names(good + bad)) == names(good)


@mirrors("Taints / should provision nodes with taints and schedule pods if the taint is only a startup taint")
def test_a_startup_taint_needs_no_toleration() -> None:
    startup = pool("default", startup_taints=[taint("ignore-me", "nothing-to-see-here")])
    assert plan(world(pod("p"), pools=[startup])).scheduled("p")


@mirrors(
    "Topology with Volume Requirements / should schedule pod with PVC and TSC minDomains=3 when pods are spread across 3 zones"
)
def test_a_volumes_zone_narrows_placement_not_the_spreads_domains() -> None:
    labels = {"app": "test"}
    constraint = spread(ZONE, labels=labels, min_domains=3)
    old = [full_node(f"n-{z[-1]}", z, labels=labels) for z in (A, B, C)]
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "test-pv"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "claimRef": {"namespace": "default", "name": "test-pvc"},
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [zones_in(A)]}]}},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "test-pvc",
            "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeName": "test-pv",
            "resources": {"requests": {"storage": "1Gi"}},
        },
        "status": {"phase": "Bound"},
    }
    with_volume = pod(
        "with-volume",
        labels=labels,
        spread=[constraint],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "test-pvc"}}],
    )
    only_on_demand = node_pool(requirements=[requirement(CAPACITY_TYPE, "In", "on-demand")])
    result = plan(world(old, pv, pvc, with_volume, pools=[only_on_demand]))
    assert counts(result, ["with-volume"], ZONE) == {A: 1}
