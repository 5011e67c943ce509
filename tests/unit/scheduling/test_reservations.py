"""The solver and capacity reservations: reserved offerings first, never beyond their count, then fallback."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.solver import explain, solve
from nodeflow.scheduling.types import NodePoolInput, SchedulingInput, SchedulingResult

from .fakes import CATALOG, pod, pool

CT = wk.LABEL_CAPACITY_TYPE
RID = wk.LABEL_CAPACITY_RESERVATION_ID
ALL_CT = Requirement.create(CT, "In", ["reserved", "spot", "on-demand"])
OD_RESERVED = Requirement.create(CT, "In", ["reserved", "on-demand"])


def reserved(it: InstanceType, *held: tuple[str, str, int], kind: str = "default") -> InstanceType:
    """``it`` with one reserved offering per (reservation id, zone, instances left)."""
    od = min(o.price for o in it.offerings if o.capacity_type == "on-demand")
    extra = tuple(
        Offering(
            zone,
            "reserved",
            od / 1e10,
            available=left > 0,
            reservation_id=rid,
            reservation_type=kind,
            reservation_capacity=left,
        )
        for rid, zone, left in held
    )
    return dataclasses.replace(it, offerings=it.offerings + extra)


def catalog(*held: tuple[str, str, str, int]) -> tuple[InstanceType, ...]:
    """CATALOG with reservations (type name, reservation id, zone, instances left)."""
    out = []
    for it in CATALOG:
        mine = [(rid, zone, left) for name, rid, zone, left in held if name == it.name]
        out.append(reserved(it, *mine) if mine else it)
    return tuple(out)


def run(pods: int, *pools: NodePoolInput, cpu: str = "3", mem: str = "10Gi") -> SchedulingResult:
    return solve(SchedulingInput(pods=tuple(pod(f"p-{i:02d}", cpu, mem) for i in range(pods)), nodepools=pools))


def by_reservation(result: SchedulingResult) -> Counter[str]:
    return Counter(nc.requirements.labels().get(RID, nc.capacity_type) for nc in result.node_claims)


def test_reserved_first_never_beyond_count_then_fallback() -> None:
    types = catalog(("m.xlarge", "cr-a", "zone-a", 2), ("m.xlarge", "cr-b", "zone-b", 1))
    result = run(6, pool("p", ALL_CT, instance_types=types))
    used = by_reservation(result)
    assert (used["cr-a"], used["cr-b"], set(used)) == (2, 1, {"cr-a", "cr-b", "spot"})
    for nc in result.node_claims:
        labels = nc.requirements.labels()
        if nc.capacity_type == "reserved":
            assert nc.price == pytest.approx(0.0, abs=1e-6)
            assert nc.instance_types == ("m.xlarge",)
            assert nc.zones == ({"cr-a": "zone-a", "cr-b": "zone-b"}[labels[RID]],)
            assert labels[CT] == "reserved"
            assert labels[wk.LABEL_CAPACITY_RESERVATION_TYPE] == "default"
        else:
            # a NodeClaim holding no reservation may not launch into one
            assert not nc.requirements[CT].has("reserved")
            assert RID not in labels
    assert sorted(p for nc in result.node_claims for p in nc.pods) == [f"default/p-{i:02d}" for i in range(6)]
    assert not result.unschedulable


def test_no_reservations_plan_unchanged_and_pools_without_reserved_ignore_them() -> None:
    plain = run(5, pool("p", ALL_CT))
    types = catalog(("m.xlarge", "cr-a", "zone-a", 3))
    # a NodePool that does not allow reserved plans exactly as without the reservation
    excluded = run(5, pool("p", Requirement.create(CT, "In", ["spot", "on-demand"]), instance_types=types))
    assert excluded.to_json() == plain.to_json()
    not_in = run(5, pool("p", Requirement.create(CT, "NotIn", ["reserved"]), instance_types=types))
    assert by_reservation(not_in) == by_reservation(plain)
    # no capacity-type requirement: reserved is allowed (as Karpenter), the rest launches spot (then on-demand)
    default = run(5, pool("p", instance_types=types))
    assert by_reservation(default) == {"cr-a": 3, "spot": 1}


def test_exhausted_reservation_is_skipped_and_explained() -> None:
    types = catalog(("m.xlarge", "cr-zero", "zone-a", 0), ("m.xlarge", "cr-one", "zone-b", 1))
    inp = SchedulingInput(
        pods=tuple(pod(f"p-{i}", "3", "10Gi") for i in range(3)),
        nodepools=(pool("p", OD_RESERVED, instance_types=types),),
    )
    result, why = explain(inp, "default/p-2")
    assert by_reservation(result) == {"cr-one": 1, "on-demand": 1}
    _, first = explain(inp, "default/p-0")
    assert "launched into capacity reservation cr-one" in first.per_pool["p"]
    assert "capacity reservations used up: cr-one (m.xlarge, zone-b), cr-zero (m.xlarge, zone-a)" in why.per_pool["p"]


def test_pod_requiring_reserved_is_unschedulable_once_used_up() -> None:
    types = catalog(("m.xlarge", "cr-a", "zone-a", 1))
    wants = (Requirements([Requirement.create(CT, "In", ["reserved"])]),)
    pods = tuple(pod(f"p-{i}", "3", "10Gi", requirements=wants) for i in range(2))
    result = solve(SchedulingInput(pods=pods, nodepools=(pool("p", instance_types=types),)))
    assert by_reservation(result) == {"cr-a": 1}
    (stuck,) = result.unschedulable
    assert "capacity reservations used up: cr-a (m.xlarge, zone-a)" in stuck.reasons["p"]


def test_zone_pinned_pods_use_the_reservation_of_their_zone() -> None:
    types = catalog(("m.xlarge", "cr-a", "zone-a", 5), ("m.xlarge", "cr-b", "zone-b", 5))
    in_b = (Requirements([Requirement.create(wk.LABEL_ZONE, "In", ["zone-b"])]),)
    pods = tuple(pod(f"p-{i}", "3", "10Gi", requirements=in_b) for i in range(2))
    result = solve(SchedulingInput(pods=pods, nodepools=(pool("p", ALL_CT, instance_types=types),)))
    assert by_reservation(result) == {"cr-b": 2}
    assert {nc.zones for nc in result.node_claims} == {("zone-b",)}
    # a pod may ask for one reservation by id
    by_id = (Requirements([Requirement.create(RID, "In", ["cr-a"])]),)
    result = solve(
        SchedulingInput(pods=(pod("x", "3", "10Gi", requirements=by_id),), nodepools=(pool("p", instance_types=types),))
    )
    assert by_reservation(result) == {"cr-a": 1}


def test_small_pods_share_a_reserved_node_and_the_count_is_per_node() -> None:
    types = catalog(("m.8xlarge", "cr-big", "zone-a", 1))
    result = run(20, pool("p", ALL_CT, instance_types=types), cpu="1", mem="2Gi")
    reserved_claims = [nc for nc in result.node_claims if nc.capacity_type == "reserved"]
    assert len(reserved_claims) == 1
    assert len(reserved_claims[0].pods) == 20  # 31.9 allocatable CPUs hold all 20 pods on the one free node
    assert len(result.node_claims) == 1


def test_reservation_shared_by_two_nodepools_is_counted_once() -> None:
    types = catalog(("m.xlarge", "cr-a", "zone-a", 2))
    first = pool("first", ALL_CT, instance_types=types, weight=10)
    team = (Requirements([Requirement.create("team", "In", ["x"])]),)
    second = pool("second", ALL_CT, instance_types=types, labels={"team": "x"})
    pods = (
        *(pod(f"a-{i}", "3", "10Gi") for i in range(2)),
        *(pod(f"b-{i}", "3", "10Gi", requirements=team) for i in range(2)),
    )
    result = solve(SchedulingInput(pods=pods, nodepools=(first, second)))
    assert sum(1 for nc in result.node_claims if nc.capacity_type == "reserved") == 2


def test_nodepool_limits_apply_to_reserved_node_claims() -> None:
    types = catalog(("m.xlarge", "cr-a", "zone-a", 5))
    limited = pool("p", ALL_CT, instance_types=types, limits={"cpu": 8000})
    result = run(4, limited)
    assert by_reservation(result) == {"cr-a": 2}
    assert len(result.unschedulable) == 2


@settings(max_examples=25, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=3),
    pods=st.integers(min_value=1, max_value=12),
    cpu=st.sampled_from(["1", "3", "7"]),
)
def test_never_more_node_claims_than_a_reservation_holds(counts: list[int], pods: int, cpu: str) -> None:
    held = [("m.2xlarge", f"cr-{i}", ("zone-a", "zone-b")[i % 2], n) for i, n in enumerate(counts)]
    result = run(pods, pool("p", ALL_CT, instance_types=catalog(*held)), cpu=cpu, mem="4Gi")
    used = by_reservation(result)
    for _, rid, _, n in held:
        assert used.get(rid, 0) <= n
    assert not result.unschedulable
    # reserved capacity is used first: the spot / on-demand NodeClaims exist only once reservations are used up
    if any(nc.capacity_type != "reserved" for nc in result.node_claims):
        assert all(used.get(rid, 0) == n for _, rid, _, n in held)


def test_reserved_only_nodepool_never_goes_beyond_the_count() -> None:
    types = catalog(("m.xlarge", "cr-a", "zone-a", 1))
    only = pool("p", Requirement.create(CT, "In", ["reserved"]), instance_types=types)
    result = run(2, only)
    assert by_reservation(result) == {"cr-a": 1}
    (stuck,) = result.unschedulable
    assert "capacity reservations used up: cr-a (m.xlarge, zone-a)" in stuck.reasons["p"]
