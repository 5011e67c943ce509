"""NodeOverlays applied to instance types (nodeflow.catalog.overlays): mirrors Karpenter v1.14's node overlay
controller and store tests (price maths, precedence by weight, conflicts, requirements, capacity)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.api.karpenter_overlay import NodeOverlay
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.catalog.overlays import OverlayPool, adjusted_price, apply_overlays, precedence
from nodeflow.plan.overlays import overlaid
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.types import SchedulingInput
from tests.unit.scheduling.fakes import CATALOG, itype, pod, pool

GPU = wk.RESOURCE_NVIDIA_GPU
# The solver tests below compare on-demand prices (without the requirement spot is allowed too).
ON_DEMAND = Requirement.create(wk.LABEL_CAPACITY_TYPE, "In", [wk.CAPACITY_TYPE_ON_DEMAND])


def overlay(name: str, *requirements: tuple[str, str, list[str]], **spec: Any) -> NodeOverlay:
    reqs = [{"key": k, "operator": op, **({"values": v} if v else {})} for k, op, v in requirements]
    return NodeOverlay.model_validate(
        {"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name},
         "spec": {"requirements": reqs, **spec}}
    )  # fmt: skip


def nodepool(name: str, labels: dict[str, str] | None = None, types: tuple[InstanceType, ...] = CATALOG) -> OverlayPool:
    return OverlayPool(name, labels or {}, types)


def by_name(types: tuple[InstanceType, ...]) -> dict[str, InstanceType]:
    return {it.name: it for it in types}


def prices(it: InstanceType) -> dict[tuple[str, str], float]:
    return {(o.zone, o.capacity_type): o.price for o in it.offerings}


IN_POOL = (wk.LABEL_NODEPOOL, "In", ["a"])


# --- price maths --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("price", "change", "expected"),
    [
        (1.02, "13234.223", 13234.223),
        (1.02, "+1000", 1001.02),
        (1.02, "-0.5", 1.02 - 0.5),
        (1.02, "-2", 0.0),
        (2.0, "+10%", 2.2),
        (2.0, "-10%", 1.8),
        (2.0, "-100%", 0.0),
        (2.0, "+298%", 7.96),
        (2.0, "", 2.0),
        (2.0, "0", 0.0),
    ],
)
def test_adjusted_price(price: float, change: str, expected: float) -> None:
    assert adjusted_price(price, change) == pytest.approx(expected)


def test_no_overlays_keeps_the_same_objects() -> None:
    types = CATALOG
    result = apply_overlays([], [nodepool("a", types=types)])
    assert result.instance_types["a"] is types or result.instance_types["a"] == types
    assert all(x is y for x, y in zip(result.instance_types["a"], types, strict=True))
    unmatched = apply_overlays([overlay("o", (wk.LABEL_NODEPOOL, "In", ["zzz"]), price="9")], [nodepool("a")])
    assert all(x is y for x, y in zip(unmatched.instance_types["a"], CATALOG, strict=True))
    assert unmatched.verdict("o") is not None
    assert unmatched.verdict("o").ok  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [("price", "13234.223", (13234.223, 13234.223)), ("priceAdjustment", "+1000", (1000.1, 1000.04))],
)
def test_price_applies_only_to_the_selected_nodepool(field: str, value: str, expected: tuple[float, float]) -> None:
    result = apply_overlays([overlay("o", IN_POOL, weight=10, **{field: value})], [nodepool("a"), nodepool("b")])
    a, b = by_name(result.instance_types["a"]), by_name(result.instance_types["b"])
    assert prices(a["m.large"])[("zone-a", "on-demand")] == pytest.approx(expected[0])
    assert prices(a["m.large"])[("zone-b", "spot")] == pytest.approx(expected[1])
    assert prices(b["m.large"]) == prices(by_name(CATALOG)["m.large"])
    assert ("a", "m.large") in result.price_overlaid
    assert ("b", "m.large") not in result.price_overlaid


def test_percentage_adjusts_every_offering_of_matching_types() -> None:
    result = apply_overlays(
        [overlay("o", (wk.LABEL_INSTANCE_FAMILY, "In", ["m"]), priceAdjustment="-50%")], [nodepool("a")]
    )
    types = by_name(result.instance_types["a"])
    assert prices(types["m.xlarge"]) == {
        ("zone-a", "on-demand"): pytest.approx(0.10),
        ("zone-b", "on-demand"): pytest.approx(0.10),
        ("zone-a", "spot"): pytest.approx(0.04),
        ("zone-b", "spot"): pytest.approx(0.04),
    }
    assert types["c.large"] is by_name(CATALOG)["c.large"]


def test_offering_requirements_select_offerings_not_types() -> None:
    result = apply_overlays(
        [
            overlay(
                "spot-zone-a",
                (wk.LABEL_CAPACITY_TYPE, "In", ["spot"]),
                (wk.LABEL_ZONE, "In", ["zone-a"]),
                priceAdjustment="+1",
            )
        ],
        [nodepool("a")],
    )
    m = prices(by_name(result.instance_types["a"])["m.large"])
    assert m[("zone-a", "spot")] == pytest.approx(1.04)
    assert m[("zone-b", "spot")] == pytest.approx(0.04)
    assert m[("zone-a", "on-demand")] == pytest.approx(0.10)
    # g.xlarge has no spot offering: not selected at all.
    assert by_name(result.instance_types["a"])["g.xlarge"] is by_name(CATALOG)["g.xlarge"]


@pytest.mark.parametrize(
    ("requirement", "selected"),
    [
        ((wk.LABEL_INSTANCE_CPU, "Gt", ["4"]), {"m.2xlarge", "m.8xlarge", "c.4xlarge", "r.2xlarge"}),
        ((wk.LABEL_INSTANCE_CPU, "Gte", ["8"]), {"m.2xlarge", "m.8xlarge", "c.4xlarge", "r.2xlarge"}),
        ((wk.LABEL_INSTANCE_CPU, "Lt", ["4"]), {"m.large", "c.large", "r.large", "a.large"}),
        ((wk.LABEL_INSTANCE_CPU, "Lte", ["2"]), {"m.large", "c.large", "r.large", "a.large"}),
        ((wk.LABEL_INSTANCE_FAMILY, "NotIn", ["m", "c", "r"]), {"g.xlarge", "a.large"}),
        ((wk.LABEL_INSTANCE_GPU_NAME, "Exists", []), {"g.xlarge"}),
        ((wk.LABEL_INSTANCE_GPU_NAME, "DoesNotExist", []), {it.name for it in CATALOG} - {"g.xlarge"}),
        ((wk.LABEL_ARCH, "In", ["arm64"]), {"a.large"}),
        (("example.com/team", "In", ["x"]), set()),  # a custom label the NodePool does not define
        (("example.com/team", "DoesNotExist", []), {it.name for it in CATALOG}),
        (("team", "In", ["ml"]), {it.name for it in CATALOG}),  # the NodePool's template label
        (("team", "In", ["web"]), set()),
    ],
)
def test_requirements_with_operators(requirement: tuple[str, str, list[str]], selected: set[str]) -> None:
    result = apply_overlays([overlay("o", requirement, price="9")], [nodepool("a", {"team": "ml"})])
    changed = {it.name for it in result.instance_types["a"] if it is not by_name(CATALOG)[it.name]}
    assert changed == selected
    assert all(o.price == 9.0 for it in result.instance_types["a"] if it.name in selected for o in it.offerings)


# --- precedence and conflicts --------------------------------------------------------------------


def test_precedence_is_weight_then_later_name_first() -> None:
    ordered = precedence([overlay("a", weight=5), overlay("c"), overlay("b", weight=5), overlay("z", weight=100)])
    assert [o.name for o in ordered] == ["z", "b", "a", "c"]


def test_higher_weight_price_wins() -> None:
    result = apply_overlays(
        [overlay("low", IN_POOL, weight=1, price="5"), overlay("high", IN_POOL, weight=10, price="7")],
        [nodepool("a")],
    )
    assert {o.price for it in result.instance_types["a"] for o in it.offerings} == {7.0}
    assert all(v.ok for v in result.verdicts)


def test_equal_weights_on_one_offering_conflict_and_the_loser_is_not_applied_anywhere() -> None:
    result = apply_overlays(
        [
            overlay("a-first", IN_POOL, weight=10, price="1"),
            overlay("b-second", IN_POOL, (wk.LABEL_INSTANCE_FAMILY, "In", ["m"]), weight=10, price="2"),
        ],
        [nodepool("a")],
    )
    # b-second comes first (later name) and is applied; a-first conflicts on the m types and is applied nowhere.
    types = by_name(result.instance_types["a"])
    assert {o.price for o in types["m.large"].offerings} == {2.0}
    assert types["c.large"] is by_name(CATALOG)["c.large"]
    verdict = result.verdict("a-first")
    assert verdict is not None
    assert (verdict.status, verdict.reason, verdict.message) == ("False", "Conflict", "conflict with another overlay")
    assert result.verdict("b-second").ok  # type: ignore[union-attr]


def test_equal_weights_on_disjoint_offerings_do_not_conflict() -> None:
    result = apply_overlays(
        [
            overlay("spot", (wk.LABEL_CAPACITY_TYPE, "In", ["spot"]), weight=3, priceAdjustment="-10%"),
            overlay("od", (wk.LABEL_CAPACITY_TYPE, "In", ["on-demand"]), weight=3, priceAdjustment="+10%"),
        ],
        [nodepool("a")],
    )
    m = prices(by_name(result.instance_types["a"])["m.large"])
    assert m[("zone-a", "spot")] == pytest.approx(0.036)
    assert m[("zone-a", "on-demand")] == pytest.approx(0.11)
    assert all(v.ok for v in result.verdicts)


def test_equal_weights_in_different_nodepools_do_not_conflict() -> None:
    result = apply_overlays(
        [
            overlay("a", (wk.LABEL_NODEPOOL, "In", ["a"]), weight=10, priceAdjustment="+1000"),
            overlay("b", (wk.LABEL_NODEPOOL, "In", ["b"]), weight=10, priceAdjustment="+2500"),
        ],
        [nodepool("a", types=(itype("m.large", 2, 8, 1.02, zones=("z",)),)),
         nodepool("b", types=(itype("m.large", 2, 8, 1.02, zones=("z",)),))],
    )  # fmt: skip
    assert result.instance_types["a"][0].offerings[0].price == 1001.02
    assert result.instance_types["b"][0].offerings[0].price == 2501.02


def test_a_lower_weight_between_blocks_a_later_equal_weight() -> None:
    # high (10) sets the price; mid (5) leaves it but is now the lowest weight there; low-b (5) conflicts with it.
    result = apply_overlays(
        [
            overlay("high", IN_POOL, weight=10, price="1"),
            overlay("mid", IN_POOL, weight=5, price="2"),
            overlay("low", IN_POOL, weight=5, price="3"),
        ],
        [nodepool("a")],
    )
    assert {o.price for it in result.instance_types["a"] for o in it.offerings} == {1.0}
    assert result.verdict("mid").ok  # type: ignore[union-attr]
    assert result.verdict("low").reason == "Conflict"  # type: ignore[union-attr]


def test_runtime_invalid_overlay_is_not_applied() -> None:
    bad = overlay("bad", ("test.com.test/test-" + "a" * 250, "Exists", []), weight=10, price="13234.223")
    result = apply_overlays([bad], [nodepool("a")])
    assert all(x is y for x, y in zip(result.instance_types["a"], CATALOG, strict=True))
    verdict = result.verdict("bad")
    assert verdict is not None
    assert (verdict.status, verdict.reason) == ("False", "RuntimeValidation")
    assert "spec.requirements[0]" in verdict.message


def test_no_partial_application_across_nodepools() -> None:
    # "wide" conflicts with "z-pool-b" (applied first: later name) in NodePool b only: it is applied in neither NodePool.
    result = apply_overlays(
        [
            overlay("wide", weight=10, price="4"),
            overlay("z-pool-b", (wk.LABEL_NODEPOOL, "In", ["b"]), weight=10, price="6"),
        ],
        [nodepool("a"), nodepool("b")],
    )
    assert all(x is y for x, y in zip(result.instance_types["a"], CATALOG, strict=True))
    assert {o.price for it in result.instance_types["b"] for o in it.offerings} == {6.0}
    assert result.verdict("wide").reason == "Conflict"  # type: ignore[union-attr]


# --- capacity ------------------------------------------------------------------------------------


def test_capacity_adds_extended_resources_to_capacity_and_allocatable() -> None:
    result = apply_overlays(
        [overlay("fuse", (wk.LABEL_INSTANCE_FAMILY, "In", ["m"]), capacity={"smarter-devices/fuse": "2"})],
        [nodepool("a")],
    )
    types = by_name(result.instance_types["a"])
    assert types["m.large"].capacity["smarter-devices/fuse"] == 2000
    assert types["m.large"].allocatable["smarter-devices/fuse"] == 2000
    assert types["m.large"].capacity["cpu"] == by_name(CATALOG)["m.large"].capacity["cpu"]
    assert "smarter-devices/fuse" not in types["c.large"].capacity
    assert ("a", "m.large") in result.capacity_overlaid


def test_capacity_from_several_overlays_merges_higher_weight_first() -> None:
    result = apply_overlays(
        [
            overlay("one", weight=20, capacity={"example.com/a": "1", "example.com/b": "1"}),
            overlay("two", weight=10, capacity={"example.com/b": "5", "example.com/c": "3"}),
        ],
        [nodepool("a")],
    )
    capacity = result.instance_types["a"][0].capacity
    assert (capacity["example.com/a"], capacity["example.com/b"], capacity["example.com/c"]) == (1000, 1000, 3000)
    assert all(v.ok for v in result.verdicts)


def test_capacity_conflict_on_the_same_resource_with_equal_weights() -> None:
    result = apply_overlays(
        [
            overlay("x", weight=10, capacity={"example.com/a": "1"}),
            overlay("y", weight=10, capacity={"example.com/a": "2"}),
        ],
        [nodepool("a")],
    )
    assert result.instance_types["a"][0].capacity["example.com/a"] == 2000  # y (later name) first
    assert result.verdict("x").reason == "Conflict"  # type: ignore[union-attr]
    other = apply_overlays(
        [
            overlay("x", weight=10, capacity={"example.com/a": "1"}),
            overlay("y", weight=10, capacity={"example.com/b": "2"}),
        ],
        [nodepool("a")],
    )
    assert all(v.ok for v in other.verdicts)


def test_price_and_capacity_from_two_overlays_on_one_type() -> None:
    result = apply_overlays(
        [overlay("p", weight=1, price="3"), overlay("c", weight=1, capacity={"example.com/a": "1"})], [nodepool("a")]
    )
    it = result.instance_types["a"][0]
    assert {o.price for o in it.offerings} == {3.0}
    assert it.capacity["example.com/a"] == 1000
    assert all(v.ok for v in result.verdicts)


# --- through the solver ---------------------------------------------------------------------------


def _solve(overlays: list[NodeOverlay], pods: list[Any], pools: list[Any]) -> Any:
    return solve(SchedulingInput(pods=tuple(pods), nodepools=overlaid(tuple(pools), overlays)))


def test_a_pod_requesting_an_overlaid_extended_resource_schedules() -> None:
    wants = pod("fuse", extra={"smarter-devices/fuse": 1000})
    assert _solve([], [wants], [pool("a")]).unschedulable
    result = _solve(
        [overlay("fuse", (wk.LABEL_INSTANCE_FAMILY, "In", ["c"]), capacity={"smarter-devices/fuse": "1"})],
        [wants],
        [pool("a")],
    )
    assert not result.unschedulable
    (claim,) = result.node_claims
    assert all(name.startswith("c.") for name in claim.instance_types)


def test_price_overlay_changes_the_cheapest_choice() -> None:
    # a.large (0.08 on-demand) is the cheapest type for one CPU; make it dearer than c.large (0.085).
    cheap = _solve([], [pod("p", cpu="1")], [pool("a", ON_DEMAND)])
    assert cheap.node_claims[0].instance_types[0] == "a.large"
    result = _solve(
        [overlay("dear-a", (wk.LABEL_INSTANCE_TYPE, "In", ["a.large"]), priceAdjustment="+1")],
        [pod("p", cpu="1")],
        [pool("a", ON_DEMAND)],
    )
    (claim,) = result.node_claims
    assert claim.instance_types[0] == "c.large"
    assert claim.price == pytest.approx(0.085)


def test_two_nodepools_get_their_own_overlaid_prices() -> None:
    # The solver's price cache must not mix the same type's prices of two NodePools.
    overlays = [overlay("b-cheap", (wk.LABEL_NODEPOOL, "In", ["b"]), priceAdjustment="-50%")]
    a_pod = pod("in-a", requirements=(Requirements([Requirement.create(wk.LABEL_NODEPOOL, "In", ["a"])]),))
    b_pod = pod("in-b", requirements=(Requirements([Requirement.create(wk.LABEL_NODEPOOL, "In", ["b"])]),))
    result = _solve(overlays, [a_pod, b_pod], [pool("a", ON_DEMAND, weight=10), pool("b", ON_DEMAND)])
    by_pool = {c.nodepool: c for c in result.node_claims}
    assert by_pool["a"].price == pytest.approx(0.08)
    assert by_pool["b"].price == pytest.approx(0.04)


def test_reserved_offerings_are_selected_by_capacity_type_and_reservation_labels() -> None:
    base = itype("m.large", 2, 8, 0.10, spot=0.04, zones=("zone-a",))
    reserved = Offering("zone-a", wk.CAPACITY_TYPE_RESERVED, 0.00001, reservation_id="cr-1", reservation_type="default")
    it = dataclasses.replace(base, offerings=(*base.offerings, reserved))
    by_type = apply_overlays(
        [overlay("r", (wk.LABEL_CAPACITY_TYPE, "In", ["reserved"]), price="0.5")], [nodepool("a", types=(it,))]
    )
    assert {o.capacity_type: o.price for o in by_type.instance_types["a"][0].offerings} == {
        "on-demand": 0.10,
        "spot": 0.04,
        "reserved": 0.5,
    }
    by_id = apply_overlays(
        [overlay("id", (wk.LABEL_CAPACITY_RESERVATION_ID, "In", ["cr-1"]), priceAdjustment="+1")],
        [nodepool("a", types=(it,))],
    )
    assert [o.price for o in by_id.instance_types["a"][0].offerings] == [0.10, 0.04, pytest.approx(1.00001)]
    other = apply_overlays(
        [overlay("id", (wk.LABEL_CAPACITY_RESERVATION_ID, "In", ["cr-2"]), priceAdjustment="+1")],
        [nodepool("a", types=(it,))],
    )
    assert other.instance_types["a"][0] is it
