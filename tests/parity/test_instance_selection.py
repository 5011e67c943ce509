"""Parity with Karpenter's instance selection tests: the NodeClaim's cheapest option is the cheapest offering that
satisfies the NodePool's and the pod's requirements (arch, os, zone, capacity type, resources), every instance type
it lists satisfies them too, and minValues keeps enough distinct values among the types of each NodeClaim.

Upstream uses a fake catalog (a few made-up types with chosen prices); here the real offline catalog is the
reference: the expected price is computed from it independently of the solver (tests/parity/_instances.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nodeflow.catalog.model import InstanceType
from tests.parity._instances import Predicate, cheapest, fits, instance_types, offering_price
from tests.parity.harness import (
    ARCH,
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    ZONE,
    ZONES,
    Obj,
    node_class,
    node_pool,
    plan,
    pod,
    requirement,
)
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/controllers/provisioning/scheduling/instance_selection_test.go"
NOT_EXPRESSIBLE: dict[str, str] = {}

_I = "Instance Type Selection / "
_M = _I + "MinValues / "
OS = "kubernetes.io/os"
CPU = "karpenter.k8s.aws/instance-cpu"
BOTH = ("spot", "on-demand")
WINDOWS_CLASS = node_class(amiSelectorTerms=[{"alias": "windows2022@latest"}])
TYPES = instance_types()
WINDOWS_TYPES = instance_types(WINDOWS_CLASS)
ONE_POD = {"pods": 1000}


def pool(*reqs: Obj, base: bool = True) -> Obj:
    """Upstream's NodePool of these tests: spot and on-demand, arm64 and amd64 (``base``), plus ``reqs``."""
    start = [requirement(CAPACITY_TYPE, "In", *BOTH), requirement(ARCH, "In", "arm64", "amd64")] if base else []
    return node_pool(requirements=[*start, *reqs])


def has(key: str, value: str) -> Predicate:
    return lambda it: it.labels.get(key) == value


def check(
    world: list[Any],
    *,
    keep: Iterable[Predicate] = (),
    capacity_types: Iterable[str] = BOTH,
    zones: Iterable[str] = ZONES,
    types: dict[str, InstanceType] = TYPES,
) -> Obj:
    """Plan one default pod: its NodeClaim costs what the cheapest matching offering costs, and every type it
    lists matches."""
    keeps, cts, zs = list(keep), tuple(capacity_types), tuple(zones)
    claim = plan(world).claim_of("p")
    assert claim is not None

    def ok(it: InstanceType) -> bool:
        return fits(it, ONE_POD) and all(k(it) for k in keeps)

    price, name = cheapest(types, ok, cts, zs)
    assert claim["pricePerHour"] == price, name
    assert claim["capacityType"] in cts
    assert set(claim["zones"]) <= set(zs)
    assert all(ok(types[t]) for t in claim["instanceTypes"])
    return claim


def p(**kw: Any) -> Obj:
    return pod("p", cpu=None, **kw)


@mirrors(_I + "should schedule on one of the cheapest instances")
def test_the_cheapest_offering_wins() -> None:
    check([node_class(), pool(), p()])


@mirrors(
    _I + "should schedule on one of the cheapest instances (pod arch = amd64)",
    _I + "should schedule on one of the cheapest instances (pod arch = arm64)",
)
def test_the_cheapest_offering_of_the_pod_arch_wins() -> None:
    for arch in ("amd64", "arm64"):
        check([node_class(), pool(), p(node_affinity=[requirement(ARCH, "In", arch)])], keep=[has(ARCH, arch)])


# A NodePool that does not mention karpenter.sh/capacity-type (``base=False``) allows spot and on-demand, as
# upstream: its NodeClaim's cheapest option is the cheapest offering of either.


@mirrors(
    _I + "should schedule on one of the cheapest instances (prov arch = amd64)",
    _I + "should schedule on one of the cheapest instances (prov arch = arm64)",
)
def test_the_cheapest_offering_of_the_node_pool_arch_wins() -> None:
    for arch in ("amd64", "arm64"):
        world = [node_class(), pool(requirement(ARCH, "In", arch), base=False), p()]
        check(world, keep=[has(ARCH, arch)])


@mirrors(
    _I + "should schedule on one of the cheapest instances (prov os = windows)",
    _I + "should schedule on one of the cheapest instances (prov os = windows) [2]",
)
def test_the_cheapest_windows_offering_wins_for_a_windows_node_pool() -> None:
    world = [WINDOWS_CLASS, pool(requirement(OS, "In", "windows"), base=False), p()]
    check(world, keep=[has(OS, "windows")], types=WINDOWS_TYPES)


@mirrors(_I + "should schedule on one of the cheapest instances (pod os = windows)")
def test_the_cheapest_windows_offering_wins_for_a_windows_pod() -> None:
    world = [WINDOWS_CLASS, pool(), p(node_affinity=[requirement(OS, "In", "windows")])]
    check(world, keep=[has(OS, "windows")], types=WINDOWS_TYPES)


@mirrors(
    _I + "should schedule on one of the cheapest instances (pod os = linux)",
    _I + "should schedule on one of the cheapest instances (pod os = linux) [2]",
)
def test_the_cheapest_linux_offering_wins_for_a_linux_pod() -> None:
    check([node_class(), pool(), p(node_affinity=[requirement(OS, "In", "linux")])], keep=[has(OS, "linux")])


@mirrors(_I + "should schedule on one of the cheapest instances (prov zone = test-zone-2)")
def test_the_cheapest_offering_in_the_node_pool_zone_wins() -> None:
    world = [node_class(), pool(requirement(ZONE, "In", "us-east-1b"), base=False), p()]
    check(world, zones=["us-east-1b"])


@mirrors(_I + "should schedule on one of the cheapest instances (pod zone = test-zone-2)")
def test_the_cheapest_offering_in_the_pod_zone_wins() -> None:
    check([node_class(), pool(), p(node_affinity=[requirement(ZONE, "In", "us-east-1b")])], zones=["us-east-1b"])


@mirrors(_I + "should schedule on one of the cheapest instances (prov ct = spot)")
def test_the_cheapest_spot_offering_wins_for_a_spot_node_pool() -> None:
    claim = check(
        [node_class(), pool(requirement(CAPACITY_TYPE, "In", "spot"), base=False), p()], capacity_types=["spot"]
    )
    assert claim["capacityType"] == "spot"


@mirrors(_I + "should schedule on one of the cheapest instances (pod ct = spot)")
def test_the_cheapest_spot_offering_wins_for_a_spot_pod() -> None:
    check([node_class(), pool(), p(node_affinity=[requirement(CAPACITY_TYPE, "In", "spot")])], capacity_types=["spot"])


@mirrors(_I + "should schedule on one of the cheapest instances (prov ct = ondemand, prov zone = test-zone-1)")
def test_the_cheapest_on_demand_offering_in_the_node_pool_zone_wins() -> None:
    reqs = [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(ZONE, "In", "us-east-1a")]
    check([node_class(), pool(*reqs, base=False), p()], capacity_types=["on-demand"], zones=["us-east-1a"])


@mirrors(_I + "should schedule on one of the cheapest instances (pod ct = spot, pod zone = test-zone-1)")
def test_the_cheapest_spot_offering_in_the_pod_zone_wins() -> None:
    affinity = [requirement(CAPACITY_TYPE, "In", "spot"), requirement(ZONE, "In", "us-east-1a")]
    check([node_class(), pool(), p(node_affinity=affinity)], capacity_types=["spot"], zones=["us-east-1a"])


@mirrors(_I + "should schedule on one of the cheapest instances (prov ct = spot, pod zone = test-zone-2)")
def test_the_cheapest_spot_offering_of_a_spot_node_pool_in_the_pod_zone_wins() -> None:
    world = [
        node_class(),
        pool(requirement(CAPACITY_TYPE, "In", "spot"), base=False),
        p(node_affinity=[requirement(ZONE, "In", "us-east-1b")]),
    ]
    check(world, capacity_types=["spot"], zones=["us-east-1b"])


@mirrors(
    _I + "should schedule on one of the cheapest instances (prov ct = ondemand/test-zone-1/arm64/windows)",
    differs="AWS sells no arm64 Windows instance (upstream's fake catalog has one): for that NodePool nodeflow "
    "finds no instance type and says so; the same NodePool with amd64 gets the cheapest on-demand Windows "
    "type in the zone",
)
def test_an_arm64_windows_node_pool_finds_no_type_on_aws() -> None:
    reqs = [
        requirement(OS, "In", "windows"),
        requirement(CAPACITY_TYPE, "In", "on-demand"),
        requirement(ZONE, "In", "us-east-1a"),
    ]
    arm = plan([WINDOWS_CLASS, pool(requirement(ARCH, "In", "arm64"), *reqs, base=False), p()])
    assert "default/p" in arm.unschedulable
    world = [WINDOWS_CLASS, pool(requirement(ARCH, "In", "amd64"), *reqs, base=False), p()]
    keep = [has(OS, "windows"), has(ARCH, "amd64")]
    check(world, keep=keep, capacity_types=["on-demand"], zones=["us-east-1a"], types=WINDOWS_TYPES)


@mirrors(_I + "should schedule on one of the cheapest instances (prov = spot/test-zone-2, pod = amd64/linux)")
def test_node_pool_and_pod_requirements_combine() -> None:
    linux_amd64 = [requirement(ARCH, "In", "amd64"), requirement(OS, "In", "linux")]
    spot_pod = p(node_affinity=[requirement(CAPACITY_TYPE, "In", "spot"), requirement(ZONE, "In", "us-east-1b")])
    world = [node_class(), pool(*linux_amd64, base=False), spot_pod]
    claim = check(world, keep=[has(ARCH, "amd64"), has(OS, "linux")], capacity_types=["spot"], zones=["us-east-1b"])
    assert claim["capacityType"] == "spot"


@mirrors(_I + "should schedule on one of the cheapest instances (pod ct = spot/test-zone-2/amd64/linux)")
def test_four_pod_requirements_combine() -> None:
    affinity = [
        requirement(ARCH, "In", "amd64"),
        requirement(OS, "In", "linux"),
        requirement(CAPACITY_TYPE, "In", "spot"),
        requirement(ZONE, "In", "us-east-1b"),
    ]
    world = [node_class(), pool(), p(node_affinity=affinity)]
    check(world, keep=[has(ARCH, "amd64"), has(OS, "linux")], capacity_types=["spot"], zones=["us-east-1b"])


# hpc7g.4xlarge (arm64) is offered in us-east-1c only among the class's zones; m5.large (amd64) everywhere.
_NO_ARM_IN_A = (requirement(INSTANCE_TYPE, "In", "hpc7g.4xlarge", "m5.large"),)


@mirrors(_I + "should not schedule if no instance type matches selector (pod arch = arm)")
def test_no_arm_type_in_the_node_pool_leaves_an_arm_pod_unschedulable() -> None:
    world = [
        node_class(),
        pool(requirement(INSTANCE_TYPE, "In", "m5.large", "c5.large")),
        p(node_selector={ARCH: "arm64"}),
    ]
    result = plan(world)
    assert not result.node_claims
    assert "default/p" in result.unschedulable


@mirrors(
    _I + "should not schedule if no instance type matches selector (pod arch = arm zone=test-zone-2)",
    _I + "should not schedule if no instance type matches selector (prov arch = arm / pod zone=test-zone-2)",
)
def test_no_arm_type_in_the_zone_leaves_the_pod_unschedulable() -> None:
    pod_arch = p(node_affinity=[requirement(ARCH, "In", "arm64"), requirement(ZONE, "In", "us-east-1a")])
    result = plan([node_class(), pool(*_NO_ARM_IN_A), pod_arch])
    assert not result.node_claims
    assert "default/p" in result.unschedulable
    arm_pool = pool(*_NO_ARM_IN_A, requirement(ARCH, "In", "arm64"), base=False)
    result = plan([node_class(), arm_pool, p(node_affinity=[requirement(ZONE, "In", "us-east-1a")])])
    assert not result.node_claims
    assert "default/p" in result.unschedulable
    # In us-east-1c the arm64 type is there.
    in_c = plan([node_class(), arm_pool, p(node_affinity=[requirement(ZONE, "In", "us-east-1c")])]).claim_of("p")
    assert in_c is not None
    assert in_c["instanceTypes"] == ["hpc7g.4xlarge"]


@mirrors(_I + "should schedule on an instance with enough resources")
def test_three_pods_share_a_node_every_listed_type_of_which_holds_them() -> None:
    for cpu, memory in (("0.1", "16Gi"), ("8", "32Gi")):
        pods = [pod(f"p{i}", cpu=cpu, memory=memory) for i in range(3)]
        result = plan([node_class(), pool(), *pods])
        assert len(result.node_claims) == 1, (cpu, memory)
        claim = result.node_claims[0]
        total = {
            k: 3 * v for k, v in {"cpu": int(float(cpu) * 1000), "memory": int(memory[:-2]) * 2**30 * 1000}.items()
        }
        assert all(fits(TYPES[t], total) for t in claim["instanceTypes"])


@mirrors(
    _I + "should schedule on cheaper on-demand instance even when spot price ordering would place other instance "
    "types first"
)
def test_an_on_demand_node_pool_orders_types_by_on_demand_price() -> None:
    world = [node_class(), pool(requirement(CAPACITY_TYPE, "In", "on-demand"), base=False), p()]
    claim = check(world, capacity_types=["on-demand"])
    prices = [offering_price(TYPES[n], ["on-demand"]) or 0.0 for n in claim["instanceTypes"]]
    assert prices == sorted(prices)


# --- minValues ----------------------------------------------------------------------------------------------------


def two_pods(cpu: str = "1.5") -> list[Obj]:
    return [pod("a", cpu=cpu), pod("b", cpu=cpu)]


def apart_with_both(result: Any, expected: set[str]) -> None:
    """The two pods fit together only on one type, which alone would break minValues: they get a NodeClaim each,
    and each NodeClaim lists (at least) the types that keep minValues."""
    a, b = result.claim_of("a"), result.claim_of("b")
    assert a is not None
    assert b is not None
    assert a is not b
    for claim in (a, b):
        assert expected <= set(claim["instanceTypes"])


@mirrors(
    _M + "should schedule respecting the minValues from instance-type requirements",
    _M + "should schedule and pick the max of minValues of InstanceTypes if multiple operators are used for the same "
    "requirement.",
)
def test_min_values_on_instance_types_keeps_pods_apart_when_together_they_fit_one_type() -> None:
    types = requirement(INSTANCE_TYPE, "In", "m5.large", "m5.xlarge", min_values=2)
    apart_with_both(plan([node_class(), node_pool(requirements=[types]), *two_pods()]), {"m5.large", "m5.xlarge"})
    exists = requirement(INSTANCE_TYPE, "Exists", min_values=1)
    world = [node_class(), node_pool(requirements=[exists, types]), *two_pods()]
    apart_with_both(plan(world), {"m5.large", "m5.xlarge"})


@mirrors(_M + "should schedule respecting the minValues in Gt operator")
def test_min_values_with_gt() -> None:
    reqs = [
        requirement(INSTANCE_TYPE, "In", "m5.large", "m5.xlarge", "m5.2xlarge"),
        requirement(CPU, "Gt", "2", min_values=2),
    ]
    apart_with_both(plan([node_class(), node_pool(requirements=reqs), *two_pods("3")]), {"m5.xlarge", "m5.2xlarge"})


@mirrors(_M + "scheduler should fail if the minValues in Gt operator is not satisfied")
def test_a_pod_gt_that_leaves_too_few_values_fails() -> None:
    reqs = [requirement(INSTANCE_TYPE, "In", "m5.large", "m5.xlarge"), requirement(CPU, "Exists", min_values=2)]
    pods = [pod(n, cpu="1", node_affinity=[requirement(CPU, "Gt", "2")]) for n in ("a", "b")]
    result = plan([node_class(), node_pool(requirements=reqs), *pods])
    assert not result.node_claims
    assert "minValues" in result.unschedulable["default/a"]["default"]


@mirrors(_M + "should schedule respecting the minValues in Lt operator")
def test_min_values_with_lt() -> None:
    reqs = [
        requirement(INSTANCE_TYPE, "In", "m5.large", "m5.xlarge", "m5.2xlarge"),
        requirement(CPU, "Lt", "8", min_values=2),
    ]
    apart_with_both(plan([node_class(), node_pool(requirements=reqs), *two_pods()]), {"m5.large", "m5.xlarge"})


@mirrors(_M + "scheduler should fail if the minValues in Lt operator is not satisfied")
def test_an_lt_that_leaves_too_few_values_fails() -> None:
    reqs = [requirement(INSTANCE_TYPE, "In", "m5.xlarge", "m5.2xlarge"), requirement(CPU, "Lt", "8", min_values=2)]
    result = plan([node_class(), node_pool(requirements=reqs), *two_pods("1")])
    assert not result.node_claims
    assert set(result.unschedulable) == {"default/a", "default/b"}


@mirrors(
    _M
    + "should schedule considering the max of the minValues of In and NotIn operators in the instance-type requirements"
)
def test_the_larger_min_values_of_in_and_not_in_applies() -> None:
    reqs = [
        requirement(INSTANCE_TYPE, "In", "m5.large", "m5.xlarge", "m5.2xlarge", min_values=1),
        requirement(INSTANCE_TYPE, "NotIn", "m5.2xlarge", min_values=2),
    ]
    apart_with_both(plan([node_class(), node_pool(requirements=reqs), *two_pods()]), {"m5.large", "m5.xlarge"})


@mirrors(_M + "should schedule considering the max of the minValues of Gt and Lt operators.")
def test_the_larger_min_values_of_gt_and_lt_applies() -> None:
    reqs = [
        requirement(INSTANCE_TYPE, "In", "m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge"),
        requirement(CPU, "Gt", "2", min_values=1),
        requirement(CPU, "Lt", "16", min_values=2),
    ]
    apart_with_both(plan([node_class(), node_pool(requirements=reqs), *two_pods("3")]), {"m5.xlarge", "m5.2xlarge"})


@mirrors(
    _M + "schedule should fail if minimum number of InstanceTypes is not met as per the minValues in the requirement"
)
def test_min_values_above_the_number_of_types_fails() -> None:
    ten = sorted(TYPES)[:200:20]
    reqs = [requirement(INSTANCE_TYPE, "In", *ten), requirement(INSTANCE_TYPE, "Exists", min_values=11)]
    result = plan([node_class(), node_pool(requirements=reqs), pod("p", cpu=None)])
    assert not result.node_claims
    assert "minValues" in result.unschedulable["default/p"]["default"]


@mirrors(
    _M + "schedule should fail if minimum number of InstanceTypes is not met as per the minValues in the requirement "
    "after truncation"
)
def test_min_values_above_the_types_a_node_claim_may_carry_fails() -> None:
    # A NodeClaim carries at most the 60 cheapest instance types (as Karpenter's): the catalog has well over 50
    # instance families, but the 60 cheapest types that fit the pod span fewer.
    family = "karpenter.k8s.aws/instance-family"
    assert len({it.labels.get(family) for it in TYPES.values()}) > 50
    reqs = [requirement(family, "Exists", min_values=50)]
    result = plan([node_class(), node_pool(requirements=reqs), pod("p", cpu=None)])
    assert not result.node_claims
    assert "minValues" in result.unschedulable["default/p"]["default"]


@mirrors(_M + "should schedule and respect multiple requirement keys with minValues")
def test_min_values_on_two_keys() -> None:
    reqs = [
        requirement(ARCH, "Exists", min_values=2),
        requirement(INSTANCE_TYPE, "In", "m6g.large", "m5.xlarge", min_values=1),
    ]
    apart_with_both(plan([node_class(), node_pool(requirements=reqs), *two_pods()]), {"m6g.large", "m5.xlarge"})
