"""Parity with Karpenter's scheduling suite: custom constraints, preferential fallback, instance type
compatibility, binpacking, in-flight and existing nodes, volumes, deleting nodes, and NodePools whose
requirements leave no instance type.

Upstream's fake cloud provider has zones test-zone-1..3 and a handful of made-up instance types; here
the zones are us-east-1a..c and the types come from the bundled us-east-1 catalog, so each test picks
real types with the property the upstream test relies on (an arm64-only type, a type with a GPU, a
size no other type has...). Node labels are read from ``plan -o json``'s ``labels`` of a NodeClaim.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from nodeflow.catalog.offline import load_offline
from tests.parity._instances import cheapest, fits, instance_types, offering_price
from tests.parity.harness import (
    ARCH,
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_TYPE,
    RID,
    ZONE,
    ZONES,
    Obj,
    Plan,
    affinity_term,
    ago,
    explain,
    managed_node,
    node,
    node_claim,
    node_class,
    node_pool,
    pdb,
    plan,
    pod,
    requirement,
    reservations,
    reserved_class,
    spread,
    taint,
)
from tests.parity.upstream import mirrors

UPSTREAM = "pkg/controllers/provisioning/scheduling/suite_test.go"

Z1, Z2, Z3 = ZONES
OS = "kubernetes.io/os"
CPU_LABEL = "karpenter.k8s.aws/instance-cpu"
SIZE_LABEL = "karpenter.k8s.aws/instance-size"
GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
CATALOG = load_offline("us-east-1").infos

_CC = "Scheduling / Custom Constraints / "
_WK = _CC + "Well Known Labels / "
_CV = _CC + "Constraints Validation / "
_SL = _CC + "Scheduling Logic / "
_PF = "Scheduling / Preferential Fallback / "
_IT = "Scheduling / Instance Type Compatibility / "


def both(spec: str) -> tuple[str, str]:
    """Upstream runs most custom-constraint specs twice (two identical contexts): ``spec`` and ``spec [2]``."""
    return spec, spec + " [2]"


# --- builders -----------------------------------------------------------------------------------------------------


def pool(*reqs: Obj, **kw: Any) -> Obj:
    """Upstream's suite NodePool: spot or on-demand, plus ``reqs``."""
    return node_pool(requirements=[requirement(CAPACITY_TYPE, "In", "spot", "on-demand"), *reqs], **kw)


def world(*objects: Obj | Iterable[Obj]) -> list[Obj | Iterable[Obj]]:
    return [node_class(), *objects]


def required_terms(p: Obj, *terms: list[Obj]) -> Obj:
    """Give ``p`` required node affinity with these ORed nodeSelectorTerms (each a list of expressions)."""
    p["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})[
        "requiredDuringSchedulingIgnoredDuringExecution"
    ] = {"nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]}
    return p


def preferred_terms(p: Obj, *terms: tuple[int, list[Obj]]) -> Obj:
    """Give ``p`` preferred node affinity terms (weight, expressions of one term)."""
    p["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})[
        "preferredDuringSchedulingIgnoredDuringExecution"
    ] = [{"weight": w, "preference": {"matchExpressions": list(exprs)}} for w, exprs in terms]
    return p


def claim(result: Plan, pod_name: str) -> Obj:
    c = result.claim_of(pod_name)
    assert c is not None, f"{pod_name} not scheduled: {result.unschedulable.get(f'default/{pod_name}')}"
    return c


def not_scheduled(result: Plan, *pod_names: str) -> None:
    for name in pod_names:
        assert not result.scheduled(name), f"{name} was scheduled"
        assert f"default/{name}" in result.unschedulable


def labels(result: Plan, pod_name: str) -> dict[str, str]:
    out: dict[str, str] = claim(result, pod_name)["labels"]
    return out


def types_of(result: Plan, pod_name: str) -> list[str]:
    types: list[str] = claim(result, pod_name)["instanceTypes"]
    assert types
    return types


# --- NodePool with labels -----------------------------------------------------------------------------------------

_NL = _CC + "NodePool with Labels / "
LABELLED = {"test-key": "test-value"}


@mirrors(_NL + "should schedule unconstrained pods that don't have matching node selectors")
def test_a_pool_label_is_put_on_the_node_of_an_unconstrained_pod() -> None:
    result = plan(world(pool(labels=LABELLED), pod("web")))
    assert labels(result, "web")["test-key"] == "test-value"


@mirrors(_NL + "should not schedule pods that have conflicting node selectors")
def test_a_node_selector_conflicting_with_a_pool_label_is_not_scheduled() -> None:
    result = plan(world(pool(labels=LABELLED), pod("web", node_selector={"test-key": "different-value"})))
    not_scheduled(result, "web")


@mirrors(_NL + "should not schedule pods that have node selectors with undefined key")
def test_a_node_selector_on_a_label_no_pool_defines_is_not_scheduled() -> None:
    result = plan(world(pool(), pod("web", node_selector={"test-key": "test-value"})))
    not_scheduled(result, "web")


@mirrors(_NL + "should schedule pods that have matching requirements")
def test_a_required_affinity_including_the_pool_label_value_is_scheduled() -> None:
    p = pod("web", node_affinity=[requirement("test-key", "In", "test-value", "another-value")])
    result = plan(world(pool(labels=LABELLED), p))
    assert labels(result, "web")["test-key"] == "test-value"


@mirrors(_NL + "should not schedule pods that have conflicting requirements")
def test_a_required_affinity_excluding_the_pool_label_value_is_not_scheduled() -> None:
    p = pod("web", node_affinity=[requirement("test-key", "In", "another-value")])
    result = plan(world(pool(labels=LABELLED), p))
    not_scheduled(result, "web")


# --- well-known labels --------------------------------------------------------------------------------------------


@mirrors(*both(_WK + "should use NodePool constraints"))
def test_the_pool_zone_requirement_decides_the_zone() -> None:
    result = plan(world(pool(requirement(ZONE, "In", Z2)), pod("web")))
    assert claim(result, "web")["zones"] == [Z2]


@mirrors(*both(_WK + "should use node selectors"))
def test_a_zone_node_selector_narrows_the_pool_zones() -> None:
    result = plan(world(pool(requirement(ZONE, "In", Z1, Z2)), pod("web", node_selector={ZONE: Z2})))
    assert claim(result, "web")["zones"] == [Z2]


@mirrors(*both(_WK + "should not schedule nodes with a hostname selector"))
def test_a_hostname_node_selector_is_not_provisioned_for() -> None:
    result = plan(world(pool(), pod("web", node_selector={HOSTNAME: "red-node"})))
    not_scheduled(result, "web")


@mirrors(*both(_WK + "should not schedule the pod if nodeselector unknown"))
def test_a_zone_node_selector_naming_an_unknown_zone_is_not_scheduled() -> None:
    result = plan(world(pool(requirement(ZONE, "In", Z1)), pod("web", node_selector={ZONE: "unknown"})))
    not_scheduled(result, "web")


@mirrors(*both(_WK + "should not schedule if node selector outside of NodePool constraints"))
def test_a_zone_node_selector_outside_the_pool_zones_is_not_scheduled() -> None:
    result = plan(world(pool(requirement(ZONE, "In", Z1)), pod("web", node_selector={ZONE: Z2})))
    not_scheduled(result, "web")


@mirrors(*both(_WK + "should schedule compatible requirements with Operator=In"))
def test_a_required_zone_in_pins_the_zone() -> None:
    result = plan(world(pool(), pod("web", node_affinity=[requirement(ZONE, "In", Z3)])))
    assert claim(result, "web")["zones"] == [Z3]


@pytest.mark.parametrize(
    ("operator", "bound", "check"),
    [
        ("Gt", "8", lambda cpus: cpus > 8),
        ("Lt", "8", lambda cpus: cpus < 8),
        ("Gte", "16", lambda cpus: cpus >= 16),
        ("Lte", "2", lambda cpus: cpus <= 2),
    ],
)
@mirrors(
    *both(_WK + "should schedule compatible requirements with Operator=Gt"),
    *both(_WK + "should schedule compatible requirements with Operator=Lt"),
    _WK + "should schedule compatible requirements with Operator=Gte",
    _WK + "should schedule compatible requirements with Operator=Lte",
)
def test_numeric_pool_requirements_bound_the_instance_types(operator: str, bound: str, check: Any) -> None:
    """Gt / Lt / Gte / Lte on an integer label (vCPUs here) keep only the types within the bound."""
    result = plan(world(pool(requirement(CPU_LABEL, operator, bound)), pod("web", cpu="100m")))
    types = types_of(result, "web")
    assert all(check(CATALOG[t].vcpus) for t in types), types


@mirrors(*both(_WK + "should not schedule incompatible preferences and requirements with Operator=In"))
def test_a_required_zone_in_an_unknown_zone_is_not_scheduled() -> None:
    result = plan(world(pool(), pod("web", node_affinity=[requirement(ZONE, "In", "unknown")])))
    not_scheduled(result, "web")


@mirrors(*both(_WK + "should schedule compatible requirements with Operator=NotIn"))
def test_a_required_zone_not_in_leaves_the_other_zone() -> None:
    result = plan(world(pool(), pod("web", node_affinity=[requirement(ZONE, "NotIn", Z1, Z2, "unknown")])))
    assert claim(result, "web")["zones"] == [Z3]


@mirrors(*both(_WK + "should not schedule incompatible preferences and requirements with Operator=NotIn"))
def test_a_required_zone_not_in_every_zone_is_not_scheduled() -> None:
    result = plan(world(pool(), pod("web", node_affinity=[requirement(ZONE, "NotIn", *ZONES, "unknown")])))
    not_scheduled(result, "web")


@mirrors(*both(_WK + "should schedule compatible preferences and requirements with Operator=In"))
def test_a_zone_preference_in_within_the_requirement_is_honoured() -> None:
    p = pod(
        "web",
        node_affinity=[requirement(ZONE, "In", *ZONES, "unknown")],
        preferred_node_affinity=[(1, requirement(ZONE, "In", Z2, "unknown"))],
    )
    assert claim(plan(world(pool(), p)), "web")["zones"] == [Z2]


@mirrors(*both(_WK + "should schedule incompatible preferences and requirements with Operator=In"))
def test_a_zone_preference_in_no_possible_zone_is_relaxed() -> None:
    p = pod(
        "web",
        node_affinity=[requirement(ZONE, "In", *ZONES, "unknown")],
        preferred_node_affinity=[(1, requirement(ZONE, "In", "unknown"))],
    )
    assert claim(plan(world(pool(), p)), "web")["zones"]


@mirrors(*both(_WK + "should schedule compatible preferences and requirements with Operator=NotIn"))
def test_a_zone_preference_not_in_within_the_requirement_is_honoured() -> None:
    p = pod(
        "web",
        node_affinity=[requirement(ZONE, "In", *ZONES, "unknown")],
        preferred_node_affinity=[(1, requirement(ZONE, "NotIn", Z1, Z3))],
    )
    assert claim(plan(world(pool(), p)), "web")["zones"] == [Z2]


@mirrors(*both(_WK + "should schedule incompatible preferences and requirements with Operator=NotIn"))
def test_a_zone_preference_not_in_every_zone_is_relaxed() -> None:
    p = pod(
        "web",
        node_affinity=[requirement(ZONE, "In", *ZONES, "unknown")],
        preferred_node_affinity=[(1, requirement(ZONE, "NotIn", *ZONES))],
    )
    assert claim(plan(world(pool(), p)), "web")["zones"]


@mirrors(*both(_WK + "should schedule compatible node selectors, preferences and requirements"))
def test_node_selector_requirement_and_preference_on_one_zone_combine() -> None:
    p = pod(
        "web",
        node_selector={ZONE: Z3},
        node_affinity=[requirement(ZONE, "In", *ZONES)],
        preferred_node_affinity=[(1, requirement(ZONE, "In", *ZONES))],
    )
    assert claim(plan(world(pool(), p)), "web")["zones"] == [Z3]


@mirrors(*both(_WK + "should combine multidimensional node selectors, preferences and requirements"))
def test_node_selector_requirements_and_preferences_on_zone_and_type_combine() -> None:
    p = pod(
        "web",
        node_selector={ZONE: Z3, INSTANCE_TYPE: "c7g.large"},
        node_affinity=[requirement(ZONE, "In", Z1, Z3), requirement(INSTANCE_TYPE, "In", "m5.large", "c7g.large")],
    )
    preferred_terms(p, (1, [requirement(ZONE, "NotIn", "unknown"), requirement(INSTANCE_TYPE, "NotIn", "unknown")]))
    c = claim(plan(world(pool(), p)), "web")
    assert c["zones"] == [Z3]
    assert c["instanceTypes"] == ["c7g.large"]


# --- constraints validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [HOSTNAME, "karpenter.sh/test", "sub.karpenter.sh/test", "karpenter.k8s.aws/test"],
)
@mirrors(
    *both(_CV + "should not schedule pods that have node selectors with restricted labels"),
    *both(_CV + "should not schedule pods that have node selectors with restricted domains"),
)
def test_a_pod_requiring_a_restricted_label_is_not_provisioned_for(key: str) -> None:
    """kubernetes.io/hostname and the karpenter.sh / karpenter.k8s.aws domains (but for their well-known
    labels) are Karpenter's: a pod that selects on them is refused whatever the operator, and explain says why."""
    objects = world(
        pool(labels={"team": "a"}),
        pod("web", node_affinity=[requirement(key, "In", "test")]),
        pod("api", node_affinity=[requirement(key, "NotIn", "test")]),
        pod("job", node_affinity=[requirement(key, "DoesNotExist")]),
    )
    result = plan(objects)
    not_scheduled(result, "web", "api", "job")
    reason = explain(objects, "default/api")["nodePools"]["default"]
    assert f'label "{key}" is restricted' in reason


def test_the_pods_of_a_deleting_node_are_not_refused_for_a_restricted_label() -> None:
    """Karpenter validates pending pods only: a deleting node's pod is provisioned for as it is."""
    running = pod("web", node="old", node_affinity=[requirement("karpenter.sh/custom", "DoesNotExist")])
    result = plan(world(pool(), managed_node("old", deleting=ago(minutes=1)), running))
    assert claim(result, "web")["nodePool"] == "default"


@pytest.mark.parametrize("domains", [("kubernetes.io", "k8s.io"), ("subdomain.kubernetes.io", "subdomain.k8s.io")])
@mirrors(
    _CV + "should schedule pods that have node selectors with label in the kubernetes domains",
    _CV + "should schedule pods that have node selectors with label in kubernetes domains",
    *both(_CV + "should schedule pods that have node selectors with label in subdomain from kubernetes domains"),
)
def test_a_pool_may_require_custom_labels_under_the_kubernetes_domains(domains: tuple[str, str]) -> None:
    reqs = [requirement(f"{d}/test", "In", "test-value") for d in domains]
    result = plan(world(pool(*reqs), pod("web")))
    node_labels = labels(result, "web")
    for d in domains:
        assert node_labels[f"{d}/test"] == "test-value"


@mirrors(*both(_CV + "should schedule pods that have node selectors with label in wellknown label list"))
def test_node_selectors_on_well_known_labels_are_scheduled() -> None:
    pods = [
        pod("zone", node_selector={ZONE: Z1}),
        pod("type", node_selector={INSTANCE_TYPE: "m5.large"}),
        pod("arch", node_selector={ARCH: "arm64"}),
        pod("os", node_selector={OS: "linux"}),
        pod("spot", node_selector={CAPACITY_TYPE: "spot"}),
    ]
    result = plan(world(pool(), *pods))
    assert claim(result, "zone")["zones"] == [Z1]
    assert "m5.large" in types_of(result, "type")
    assert all(CATALOG[t].architecture == "arm64" for t in types_of(result, "arch"))
    assert claim(result, "os")["nodePool"] == "default"
    assert claim(result, "spot")["capacityType"] == "spot"


# --- scheduling logic ---------------------------------------------------------------------------------------------

TEST_KEY_POOL = requirement("test-key", "In", "test-value")


@mirrors(
    _SL + "should not schedule pods with nodePool which is not ready ",
    differs="nodeflow derives a NodePool's readiness itself (valid spec, EC2NodeClass Ready) rather than "
    "trusting a stored Ready condition: a pool whose class is not Ready is skipped, a stale Ready=False is not",
)
def test_a_pool_whose_class_is_not_ready_gets_no_pods() -> None:
    not_ready = node_class()
    not_ready["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "SubnetsNotFound",
            "message": "no subnets",
            "observedGeneration": 1,
        }
    ]
    not_ready["metadata"]["generation"] = 1
    result = plan([not_ready, pool(), pod("web")])
    not_scheduled(result, "web")
    assert "not ready" in result.unschedulable["default/web"]["default"]
    # A Ready=False left in the NodePool's status by an earlier round does not hold a pool that is fine now.
    stale = pool()
    stale["status"] = {
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "NodeClassNotReady", "lastTransitionTime": ago(minutes=1)}
        ]
    }
    assert claim(plan(world(stale, pod("web"))), "web")["nodePool"] == "default"


@mirrors(*both(_SL + "should not schedule pods that have node selectors with In operator and undefined key"))
def test_required_in_on_a_label_no_pool_defines_is_not_scheduled() -> None:
    result = plan(world(pool(), pod("web", node_affinity=[requirement("test-key", "In", "test-value")])))
    not_scheduled(result, "web")


@mirrors(*both(_SL + "should schedule pods that have node selectors with NotIn operator and undefined key"))
def test_required_not_in_on_a_label_no_pool_defines_is_scheduled_with_another_value() -> None:
    result = plan(world(pool(), pod("web", node_affinity=[requirement("test-key", "NotIn", "test-value")])))
    # Karpenter gives the node some other value of the key (a number).
    assert labels(result, "web")["test-key"] not in ("", "test-value")


@mirrors(*both(_SL + "should not schedule pods that have node selectors with Exists operator and undefined key"))
def test_required_exists_on_a_label_no_pool_defines_is_not_scheduled() -> None:
    result = plan(world(pool(), pod("web", node_affinity=[requirement("test-key", "Exists")])))
    not_scheduled(result, "web")


@mirrors(*both(_SL + "should schedule pods that with DoesNotExists operator and undefined key"))
def test_required_does_not_exist_on_a_label_no_pool_defines_is_scheduled() -> None:
    result = plan(world(pool(), pod("web", node_affinity=[requirement("test-key", "DoesNotExist")])))
    assert "test-key" not in labels(result, "web")


@mirrors(*both(_SL + "should schedule unconstrained pods that don't have matching node selectors"))
def test_a_pool_requirement_label_is_put_on_the_node_of_an_unconstrained_pod() -> None:
    result = plan(world(pool(TEST_KEY_POOL), pod("web")))
    assert labels(result, "web")["test-key"] == "test-value"


@mirrors(*both(_SL + "should schedule pods that have node selectors with matching value and In operator"))
def test_required_in_the_pool_value_is_scheduled() -> None:
    result = plan(world(pool(TEST_KEY_POOL), pod("web", node_affinity=[requirement("test-key", "In", "test-value")])))
    assert labels(result, "web")["test-key"] == "test-value"


@mirrors(*both(_SL + "should not schedule pods that have node selectors with matching value and NotIn operator"))
def test_required_not_in_the_only_pool_value_is_not_scheduled() -> None:
    result = plan(
        world(pool(TEST_KEY_POOL), pod("web", node_affinity=[requirement("test-key", "NotIn", "test-value")]))
    )
    not_scheduled(result, "web")


@mirrors(*both(_SL + "should schedule the pod with Exists operator and defined key"))
def test_required_exists_on_a_pool_label_is_scheduled() -> None:
    result = plan(world(pool(TEST_KEY_POOL), pod("web", node_affinity=[requirement("test-key", "Exists")])))
    assert labels(result, "web")["test-key"] == "test-value"


@pytest.mark.parametrize("excluded", [(), ("0", "1")])
@mirrors(*both(_SL + "should schedule the pod with Exists operator and defined key"))
def test_a_node_made_for_exists_on_a_custom_key_carries_the_key(excluded: tuple[str, ...]) -> None:
    """A pool that only says the key exists (or which values it may not take) still labels its node with a
    value the requirements allow, so a pod requiring the key to exist can run there."""
    pool_req = requirement("test-key", "NotIn", *excluded) if excluded else requirement("test-key", "Exists")
    result = plan(world(pool(pool_req), pod("web", cpu="100m", node_affinity=[requirement("test-key", "Exists")])))
    assert labels(result, "web")["test-key"] not in ("", *excluded)


@mirrors(*both(_SL + "should not schedule the pod with DoesNotExists operator and defined key"))
def test_required_does_not_exist_on_a_pool_label_is_not_scheduled() -> None:
    result = plan(world(pool(TEST_KEY_POOL), pod("web", node_affinity=[requirement("test-key", "DoesNotExist")])))
    not_scheduled(result, "web")


@mirrors(*both(_SL + "should not schedule pods that have node selectors with different value and In operator"))
def test_required_in_another_value_is_not_scheduled() -> None:
    result = plan(
        world(pool(TEST_KEY_POOL), pod("web", node_affinity=[requirement("test-key", "In", "another-value")]))
    )
    not_scheduled(result, "web")


@mirrors(*both(_SL + "should schedule pods that have node selectors with different value and NotIn operator"))
def test_required_not_in_another_value_is_scheduled_with_the_pool_value() -> None:
    result = plan(
        world(pool(TEST_KEY_POOL), pod("web", node_affinity=[requirement("test-key", "NotIn", "another-value")]))
    )
    assert labels(result, "web")["test-key"] == "test-value"


@mirrors(*both(_SL + "should schedule compatible pods to the same node"))
def test_pods_agreeing_on_a_pool_value_share_a_node() -> None:
    result = plan(
        world(
            pool(requirement("test-key", "In", "test-value", "another-value")),
            pod("one", cpu="100m", node_affinity=[requirement("test-key", "In", "test-value")]),
            pod("two", cpu="100m", node_affinity=[requirement("test-key", "NotIn", "another-value")]),
        )
    )
    assert claim(result, "one") is claim(result, "two")
    assert labels(result, "one")["test-key"] == "test-value"


@mirrors(*both(_SL + "should schedule incompatible pods to the different node"))
def test_pods_requiring_different_pool_values_get_different_nodes() -> None:
    result = plan(
        world(
            pool(requirement("test-key", "In", "test-value", "another-value")),
            pod("one", node_affinity=[requirement("test-key", "In", "test-value")]),
            pod("two", node_affinity=[requirement("test-key", "In", "another-value")]),
        )
    )
    assert claim(result, "one") is not claim(result, "two")
    assert labels(result, "one")["test-key"] == "test-value"
    assert labels(result, "two")["test-key"] == "another-value"


@mirrors(*both(_SL + "Exists operator should not overwrite the existing value"))
def test_exists_does_not_widen_an_in_on_the_same_key() -> None:
    p = pod("web", node_affinity=[requirement(ZONE, "In", "non-existent-zone"), requirement(ZONE, "Exists")])
    not_scheduled(plan(world(pool(), p)), "web")


# --- preferential fallback ----------------------------------------------------------------------------------------


@mirrors(_PF + "Required / should not relax the final term")
def test_the_last_required_node_selector_term_is_never_relaxed() -> None:
    p = required_terms(pod("web"), [requirement(ZONE, "In", "invalid")])
    result = plan(world(pool(requirement(ZONE, "In", Z1), requirement(INSTANCE_TYPE, "In", "m5.large")), p))
    not_scheduled(result, "web")


@mirrors(_PF + "Required / should relax multiple terms")
def test_required_node_selector_terms_are_tried_in_order() -> None:
    p = required_terms(
        pod("web"),
        [requirement(ZONE, "In", "invalid")],
        [requirement(ZONE, "In", "invalid")],
        [requirement(ZONE, "In", Z1)],
        [requirement(ZONE, "In", Z2)],
    )
    assert claim(plan(world(pool(), p)), "web")["zones"] == [Z1]


@mirrors(_PF + "Required / should relax multiple terms")
def test_required_terms_but_the_last_are_dropped_before_any_preference() -> None:
    """Karpenter relaxes the required OR-terms first: when no term can meet the preferences, it is the last
    term, not the first, that stays when the preferences go."""
    p = required_terms(pod("web"), [requirement(ZONE, "In", Z1)], [requirement(ZONE, "In", Z2)])
    preferred_terms(p, (1, [requirement(ZONE, "In", Z3)]))
    assert claim(plan(world(pool(), p)), "web")["zones"] == [Z2]
    # A preference one of the terms meets is kept, with that term.
    p = required_terms(
        pod("web"), [requirement(ZONE, "In", Z1)], [requirement(ZONE, "In", Z2)], [requirement(ZONE, "In", Z3)]
    )
    preferred_terms(p, (1, [requirement(ZONE, "In", Z2)]))
    assert claim(plan(world(pool(), p)), "web")["zones"] == [Z2]


@mirrors(_PF + "Preferred / should relax all terms")
def test_every_unsatisfiable_preference_is_relaxed() -> None:
    p = preferred_terms(
        pod("web"), (1, [requirement(ZONE, "In", "invalid")]), (1, [requirement(INSTANCE_TYPE, "In", "invalid")])
    )
    assert claim(plan(world(pool(), p)), "web")["zones"]


@mirrors(_PF + "Preferred / should relax to use lighter weights")
def test_the_heaviest_satisfiable_preference_wins() -> None:
    p = preferred_terms(
        pod("web"),
        (100, [requirement(INSTANCE_TYPE, "In", Z3)]),
        (50, [requirement(ZONE, "In", Z2)]),
        (1, [requirement(ZONE, "In", Z1)]),
    )
    assert claim(plan(world(pool(requirement(ZONE, "In", Z1, Z2)), p)), "web")["zones"] == [Z2]


@mirrors(_PF + "Preferred / should schedule even if preference is conflicting with requirement")
def test_a_preference_against_the_requirement_is_relaxed() -> None:
    p = pod(
        "web",
        node_affinity=[requirement(ZONE, "In", Z3)],
        preferred_node_affinity=[(1, requirement(ZONE, "NotIn", Z3))],
    )
    assert claim(plan(world(pool(), p)), "web")["zones"] == [Z3]


@mirrors(_PF + "Preferred / should schedule even if preference requirements are conflicting")
def test_a_self_contradicting_preference_is_relaxed() -> None:
    p = preferred_terms(pod("web"), (1, [requirement(ZONE, "In", "invalid"), requirement(ZONE, "NotIn", "invalid")]))
    assert claim(plan(world(pool(), p)), "web")["zones"]


# --- instance type compatibility ----------------------------------------------------------------------------------


@mirrors(_IT + "should not schedule if requesting more resources than any instance type has")
def test_a_pod_larger_than_every_instance_type_is_not_scheduled() -> None:
    biggest = max(i.vcpus for i in CATALOG.values())
    not_scheduled(plan(world(pool(), pod("web", cpu=str(biggest + 1)))), "web")


@mirrors(_IT + "should launch pods with different archs on different instances")
def test_pods_of_different_architectures_get_different_nodes() -> None:
    result = plan(
        world(
            pool(requirement(ARCH, "In", "arm64", "amd64")),
            pod("intel", node_selector={ARCH: "amd64"}),
            pod("graviton", node_selector={ARCH: "arm64"}),
        )
    )
    assert claim(result, "intel") is not claim(result, "graviton")
    assert all(CATALOG[t].architecture == "amd64" for t in types_of(result, "intel"))
    assert all(CATALOG[t].architecture == "arm64" for t in types_of(result, "graviton"))


@mirrors(
    _IT + "should exclude instance types that are not supported by the pod constraints (node affinity/instance type)"
)
def test_a_required_instance_type_of_an_excluded_architecture_is_not_scheduled() -> None:
    p = pod("web", node_affinity=[requirement(INSTANCE_TYPE, "In", "c7g.large")])
    not_scheduled(plan(world(pool(requirement(ARCH, "In", "amd64")), p)), "web")


@mirrors(
    _IT + "should exclude instance types that are not supported by the pod constraints (node affinity/operating system)"
)
def test_a_required_os_only_types_of_an_excluded_architecture_have_is_not_scheduled() -> None:
    """Windows runs on amd64 types only: a Windows pool limited to arm64 cannot serve a Windows pod."""
    windows = node_class("windows", amiSelectorTerms=[{"alias": "windows2022@latest"}])
    arm = pool(requirement(ARCH, "In", "arm64"), node_class_name="windows")
    amd = pool(requirement(ARCH, "In", "amd64"), node_class_name="windows")
    amd["metadata"]["name"] = "amd"
    windows_pod = pod("web", node_affinity=[requirement(OS, "In", "windows")])
    not_scheduled(plan([windows, arm, windows_pod]), "web")
    assert claim(plan([windows, amd, windows_pod]), "web")["nodePool"] == "amd"


@mirrors(_IT + "should exclude instance types that are not supported by the provider constraints (arch)")
def test_a_pod_only_types_of_an_excluded_architecture_can_hold_is_not_scheduled() -> None:
    """The largest arm64 type has fewer vCPUs than the largest amd64 ones."""
    arm_max = max(i.vcpus for i in CATALOG.values() if i.architecture == "arm64")
    big = pod("web", cpu=str(arm_max + 8))
    not_scheduled(plan(world(pool(requirement(ARCH, "In", "arm64")), big)), "web")
    assert claim(plan(world(pool(requirement(ARCH, "In", "amd64")), big)), "web")


@mirrors(_IT + "should launch pods with different operating systems on different instances")
def test_pods_of_different_operating_systems_get_different_nodes() -> None:
    """In nodeflow (as in Karpenter on AWS) the OS comes from the EC2NodeClass's AMI family, so a Linux
    and a Windows pool serve the two pods; they must not share a node."""
    windows = node_class("windows", amiSelectorTerms=[{"alias": "windows2022@latest"}])
    win_pool = pool(node_class_name="windows")
    win_pool["metadata"]["name"] = "windows"
    result = plan(
        [
            node_class(),
            windows,
            pool(requirement(ARCH, "In", "arm64", "amd64")),
            win_pool,
            pod("linux", node_selector={OS: "linux"}),
            pod("win", node_selector={OS: "windows"}),
        ]
    )
    assert claim(result, "linux") is not claim(result, "win")
    assert (claim(result, "linux")["nodePool"], claim(result, "win")["nodePool"]) == ("default", "windows")


@mirrors(_IT + "should launch pods with different instance type node selectors on different instances")
def test_pods_selecting_different_instance_types_get_different_nodes() -> None:
    result = plan(
        world(
            pool(requirement(ARCH, "In", "arm64", "amd64")),
            pod("small", cpu="100m", node_selector={"beta.kubernetes.io/instance-type": "t3.small"}),
            pod("default", cpu="100m", node_selector={INSTANCE_TYPE: "m5.large"}),
        )
    )
    assert types_of(result, "small") == ["t3.small"]
    assert types_of(result, "default") == ["m5.large"]


@mirrors(_IT + "should launch pods with different zone selectors on different instances")
def test_pods_selecting_different_zones_get_different_nodes() -> None:
    result = plan(
        world(
            pool(requirement(ARCH, "In", "arm64", "amd64")),
            pod("one", node_selector={ZONE: Z1}),
            pod("two", node_selector={ZONE: Z2}),
        )
    )
    assert claim(result, "one")["zones"] == [Z1]
    assert claim(result, "two")["zones"] == [Z2]


GPU = "nvidia.com/gpu"
NEURON = "aws.amazon.com/neuron"


@mirrors(_IT + "should launch pods with resources that aren't on any single instance type on different instances")
def test_pods_needing_devices_no_type_has_together_get_different_nodes() -> None:
    assert not any(i.gpus and i.neuron_devices for i in CATALOG.values())
    result = plan(
        world(
            pool(),
            pod("cuda", cpu="100m", limits={GPU: "1"}, requests={GPU: "1"}),
            pod("inferentia", cpu="100m", limits={NEURON: "1"}, requests={NEURON: "1"}),
        )
    )
    assert claim(result, "cuda") is not claim(result, "inferentia")
    assert all(CATALOG[t].gpus for t in types_of(result, "cuda"))
    assert all(CATALOG[t].neuron_devices for t in types_of(result, "inferentia"))


@mirrors(_IT + "should fail to schedule a pod with resources requests that aren't on a single instance type")
def test_a_pod_needing_devices_no_type_has_together_is_not_scheduled() -> None:
    both_devices = pod("web", cpu="100m", limits={GPU: "1", NEURON: "1"}, requests={GPU: "1", NEURON: "1"})
    not_scheduled(plan(world(pool(), both_devices)), "web")


def _size(instance_type: str) -> str:
    return instance_type.split(".", 1)[1]


@mirrors(_IT + "Provider Specific Labels / should filter instance types that match labels")
def test_a_provider_label_selector_keeps_only_matching_types() -> None:
    result = plan(
        world(
            pool(),
            pod("large", cpu="100m", node_selector={SIZE_LABEL: "large"}),
            pod("small", cpu="100m", node_selector={SIZE_LABEL: "small"}),
        )
    )
    assert {_size(t) for t in types_of(result, "large")} == {"large"}
    assert {_size(t) for t in types_of(result, "small")} == {"small"}
    assert claim(result, "large") is not claim(result, "small")


@mirrors(_IT + "Provider Specific Labels / should not schedule with incompatible labels")
def test_a_provider_label_selector_contradicting_the_type_is_not_scheduled() -> None:
    result = plan(
        world(
            pool(),
            pod("large", cpu="100m", node_selector={SIZE_LABEL: "large", INSTANCE_TYPE: "t3.small"}),
            pod("small", cpu="100m", node_selector={SIZE_LABEL: "small", INSTANCE_TYPE: "m5.large"}),
        )
    )
    not_scheduled(result, "large", "small")


@mirrors(_IT + "Provider Specific Labels / should schedule optional labels")
def test_exists_on_a_label_only_some_types_have_picks_one_of_them() -> None:
    result = plan(world(pool(), pod("web", cpu="100m", node_affinity=[requirement(GPU_NAME, "Exists")])))
    assert all(CATALOG[t].gpus for t in types_of(result, "web"))


@mirrors(_IT + "Provider Specific Labels / should schedule without optional labels if disallowed")
def test_does_not_exist_on_a_label_only_some_types_have_avoids_them() -> None:
    result = plan(world(node_pool(), pod("web", cpu="100m", node_affinity=[requirement(GPU_NAME, "DoesNotExist")])))
    assert not any(CATALOG[t].gpus for t in types_of(result, "web"))


# --- binpacking, in-flight and existing nodes, volumes, deleting nodes, instance filtering ------------------------

_S = "Scheduling / "
_METRICS = _S + "Metrics / "
_EFFECTIVE_ZONE = _METRICS + "Pending Pods by Effective Zone Metric / "
_RESERVED = _S + "Reserved Instance Types / "
_DRA = _S + "Dynamic Resource Allocation (DRA) / "
_CSI_LIMITS = (
    "nodeflow does not read CSINode objects: per-driver volume attach limits are not modelled, so a node is never "
    "full because of its volume count"
)
_UNSUPPORTED = (
    "a switch of Karpenter's scheduler that tests set (UnsupportedProvisioners / UnsupportedTopologyKeys, empty in "
    "core Karpenter); no manifest can set it"
)
_METRIC = "a Prometheus metric of the provisioning controller; plan / explain have no metrics"
_DRA_WHY = (
    "Dynamic Resource Allocation (ResourceClaims, DeviceClasses, ResourceSlices) is not implemented in nodeflow: "
    "no manifest of plan expresses a device request"
)
_OVERRIDE_WHY = (
    "capacity that exists only on some offerings of a type (a cloud provider's per-offering CapacityOverride) cannot "
    "be stated: nodeflow's catalog has none, and a NodeOverlay's capacity applies to the whole instance type (in "
    "upstream's overlay store as in nodeflow), so no override can sit only on unavailable offerings"
)

NOT_EXPRESSIBLE: dict[str, str] = {
    _S + "VolumeUsage / should launch multiple nodes if required due to volume limits": _CSI_LIMITS,
    _S + "VolumeUsage / should launch nodes for pods with ephemeral volume using the specified storage class name": (
        _CSI_LIMITS
    ),
    _S + "VolumeUsage / should launch nodes for pods with ephemeral volume using a default storage class": _CSI_LIMITS,
    _S + "VolumeUsage / should launch nodes for pods with ephemeral volume using the newest storage class": _CSI_LIMITS,
    _S + "VolumeUsage / CSIMigration / should launch nodes for pods with non-dynamic PVC using a migrated PVC/PV": (
        _CSI_LIMITS
    ),
    _S + "VolumeUsage / CSIMigration / should launch nodes for pods with ephemeral volume using a migrated PVC/PV": (
        _CSI_LIMITS
    ),
    _S + "VolumeUsage / should not launch nodes for pod with storageClass that uses an unsupported provisioner": (
        _UNSUPPORTED
    ),
    _S + "VolumeUsage / should not launch nodes for pod with bound persistentVolume that uses an unsupported "
    "provisioner": _UNSUPPORTED,
    _S + "VolumeUsage / should not launch nodes for pod with storageClass that uses an unsupported topology key": (
        _UNSUPPORTED
    ),
    _METRICS + "should surface the queueDepth metric while executing the scheduling loop": _METRIC,
    _METRICS + "should surface the UnschedulablePodsCount metric while executing the scheduling loop": _METRIC,
    _METRICS + "should surface the schedulingDuration metric after executing a scheduling loop": _METRIC,
    _METRICS + "should set the PodSchedulerDecisionSeconds metric after a scheduling loop": _METRIC,
    _EFFECTIVE_ZONE + "should report metric correctly for volume constraints / when PVC does not restrict pod to a "
    "single zone": _METRIC,
    _EFFECTIVE_ZONE
    + "should report metric correctly for volume constraints / when PVC restricts pod to a single zone": (_METRIC),
    _EFFECTIVE_ZONE + "should report metric correctly for volume constraints / when PVC restricts pod to no zone": (
        _METRIC
    ),
    _EFFECTIVE_ZONE + "should report zone of pods corectly / when pods are flexible to zones": _METRIC,
    _EFFECTIVE_ZONE + "should report zone of pods corectly / when pods are flexible to zones [2]": _METRIC,
    _EFFECTIVE_ZONE + "should report zone of pods corectly / when multiple pods have different zone constraints": (
        _METRIC
    ),
    _EFFECTIVE_ZONE + "should report zone of pods corectly / when pod has preffered zone affinity": _METRIC,
    _EFFECTIVE_ZONE + "should report zone of pods corectly / when pods have required pod affinity": _METRIC,
    _EFFECTIVE_ZONE + "should report zone of pods corectly / when pods have required pod anti-affinity": _METRIC,
    _EFFECTIVE_ZONE + "should report zone of pods corectly / when pods have restricting TSCs": _METRIC,
    _EFFECTIVE_ZONE + "should report zone of pods corectly / when TSC is unsatisfiable": _METRIC,
    _EFFECTIVE_ZONE + "should report zone of pods corectly / when pod affinity is unsatisfiable": _METRIC,
    _EFFECTIVE_ZONE + "should report zone of pods corectly / when pod anti-affinity is unsatisfiable": _METRIC,
    _DRA + "should handle DRA pods correctly / container with resource claims": _DRA_WHY,
    _DRA + "should handle DRA pods correctly / init container with resource claims": _DRA_WHY,
    _DRA + "should handle DRA pods correctly / pod with both container and init container resource claims": _DRA_WHY,
    _DRA + "should handle DRA pods correctly / non-DRA pod without resource claims": _DRA_WHY,
    _DRA + "should handle DaemonSet pods with DRA requirements based on IgnoreDRARequests flag value": _DRA_WHY,
    _S + "Offering Overrides / should reject instance type when override allocatable fits but override offerings "
    "are unavailable": _OVERRIDE_WHY,
}

GI = 2**30
TYPES = instance_types()


def only(*types: str, **kw: Any) -> Obj:
    """The default NodePool limited to ``types``."""
    reqs = [requirement(INSTANCE_TYPE, "In", *types), *kw.pop("requirements", ())]
    return node_pool(requirements=reqs, **kw)


def pods(prefix: str, count: int, **kw: Any) -> list[Obj]:
    return [pod(f"{prefix}-{i:02d}", **kw) for i in range(count)]


def in_flight(name: str, **kw: Any) -> list[Obj]:
    """A node of a NodeClaim still launching: registered, not initialized (nor its NodeClaim)."""
    the_node = node(name, initialized=False, **kw)
    return [the_node, node_claim(the_node, initialized="")]


def initialized(name: str, **kw: Any) -> list[Obj]:
    the_node = node(name, **kw)
    return [the_node, node_claim(the_node)]


def bound(name: str, on: str, **kw: Any) -> Obj:
    return pod(name, node=on, **kw)


def daemon_set(name: str, *, cpu: str, memory: str | None = None, **pod_kw: Any) -> Obj:
    template = pod(f"{name}-template", cpu=cpu, memory=memory, owner=None, **pod_kw)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"ds": name}},
            "template": {"metadata": {"labels": {"ds": name}}, "spec": template["spec"]},
        },
    }


def host_port(p: Obj, port: int) -> Obj:
    p["spec"]["containers"][0]["ports"] = [{"containerPort": port, "hostPort": port, "protocol": "TCP"}]
    return p


def single_type(claim: Obj | None) -> str:
    assert claim is not None
    first: str = claim["instanceTypes"][0]
    return first


# --- Binpacking ---------------------------------------------------------------------------------------------------


@mirrors(
    _S + "Binpacking / should schedule a small pod on the smallest instance",
    _S + "Binpacking / should schedule a small pod on the smallest possible instance type",
)
def test_a_small_pod_gets_the_cheapest_type_that_holds_it() -> None:
    for memory, amount in (("100M", 100 * 10**6), ("2000M", 2000 * 10**6)):
        result = plan([node_class(), node_pool(), pod("small", cpu=None, memory=memory)])
        need = {"memory": amount * 1000, "pods": 1000}
        price, name = cheapest(TYPES, lambda it, need=need: fits(it, need))  # type: ignore[misc]
        claim = result.claim_of("small")
        assert claim is not None
        assert claim["pricePerHour"] == price
        assert offering_price(TYPES[single_type(claim)]) == price, name


@mirrors(_S + "Binpacking / should take pod runtime class into consideration")
def test_the_pod_overhead_of_its_runtime_class_counts() -> None:
    # The RuntimeClass admission controller copies the class's overhead into spec.overhead: the pod as stored.
    p = pod("sandboxed", cpu="1", runtimeClassName="kata", overhead={"cpu": "2"})
    result = plan([node_class(), only("m5.large", "m5.xlarge"), p])
    assert single_type(result.claim_of("sandboxed")) == "m5.xlarge"  # 3 cpu do not fit m5.large's 1.93
    plain = plan([node_class(), only("m5.large", "m5.xlarge"), pod("plain", cpu="1")])
    assert single_type(plain.claim_of("plain")) == "m5.large"


@mirrors(
    _S + "Binpacking / should schedule multiple small pods on the smallest possible instance type",
    differs="nodeflow sizes for cost: when two small nodes cost less than the cheapest one that holds every pod "
    "(here four pods on a t3a.nano and one on a t4g.nano, spot, $0.0028/h, against a t4g.small, $0.0054/h), it launches "
    "the two",
)
def test_small_pods_go_on_the_cheapest_nodes_that_hold_them() -> None:
    result = plan([node_class(), node_pool(), *pods("tiny", 5, cpu=None, memory="10M")])
    assert all(result.scheduled(f"tiny-{i:02d}") for i in range(5))
    need = {"memory": 50 * 10**6 * 1000, "pods": 5000}
    one_node, _ = cheapest(TYPES, lambda it: fits(it, need))
    assert result.raw["totalPricePerHour"] <= one_node
    if len(result.node_claims) == 1:
        assert result.node_claims[0]["pricePerHour"] == one_node


@mirrors(_S + "Binpacking / should create new nodes when a node is at capacity")
def test_pods_open_a_new_node_once_one_is_full() -> None:
    # m5.large holds two pods of 3.2G memory: 20 of them take 10 nodes.
    world = [node_class(), only("m5.large"), *pods("big", 20, cpu=None, memory="3.2G", node_selector={ARCH: "amd64"})]
    result = plan(world)
    assert len(result.node_claims) == 10
    assert all(len(c["pods"]) == 2 and c["instanceTypes"] == ["m5.large"] for c in result.node_claims)


@mirrors(_S + "Binpacking / should pack small and large pods together")
def test_small_pods_fill_the_room_large_pods_leave() -> None:
    # Two large pods (3.2G) leave 0.84G on an m5.large: room for one small pod (0.6G), not two.
    big = pods("big", 20, cpu=None, memory="3.2G", node_selector={ARCH: "amd64"})
    small = pods("small", 10, cpu=None, memory="0.6G", node_selector={ARCH: "amd64"})
    result = plan([node_class(), only("m5.large"), *big, *small])
    assert len(result.node_claims) == 10
    assert all(len(c["pods"]) == 3 for c in result.node_claims)
    assert not result.unschedulable


@mirrors(_S + "Binpacking / should pack nodes tightly")
def test_a_pod_that_fills_the_largest_type_leaves_the_next_one_a_smaller_node() -> None:
    result = plan([node_class(), only("m5.large", "m5.xlarge"), pod("huge", cpu="3.5"), pod("little", cpu="1")])
    assert single_type(result.claim_of("huge")) == "m5.xlarge"
    assert single_type(result.claim_of("little")) == "m5.large"
    assert len(result.node_claims) == 2


@mirrors(_S + "Binpacking / should handle zero-quantity resource requests")
def test_a_zero_request_of_a_resource_no_type_has_is_fine() -> None:
    weird = {"example.com/weird": "0"}
    result = plan([node_class(), node_pool(), pod("zero", requests=weird, limits=weird)])
    assert result.scheduled("zero")


@mirrors(
    _S + "Binpacking / should not schedule pods that exceed every instance type's capacity",
    _S + "Binpacking / should not schedule pods when initContainer resource requests are greater than available "
    "instance types",
)
def test_a_pod_larger_than_every_type_is_unschedulable() -> None:
    init = [{"name": "init", "image": "init:1", "resources": {"requests": {"cpu": "2", "memory": "100Ti"}}}]
    world = [node_class(), node_pool(), pod("huge", memory="100Ti"), pod("huge-init", init_containers=init)]
    result = plan(world)
    assert set(result.unschedulable) == {"default/huge", "default/huge-init"}
    assert not result.node_claims


@mirrors(_S + "Binpacking / should create new nodes when a node is at capacity due to pod limits per node")
def test_the_pods_limit_of_a_node_opens_new_nodes() -> None:
    world = [
        node_class(kubelet={"maxPods": 5}),
        node_pool(),
        *pods("tiny", 15, cpu="1m", memory="1Mi", node_selector={ARCH: "amd64"}),
    ]
    result = plan(world)
    assert len(result.node_claims) == 3
    assert all(len(c["pods"]) == 5 for c in result.node_claims)


@mirrors(_S + "Binpacking / should take into account initContainer resource requests when binpacking")
def test_init_container_requests_size_the_node() -> None:
    init = [{"name": "init", "image": "init:1", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]
    result = plan(
        [node_class(), only("m5.large", "m5.xlarge"), pod("app", cpu="1", memory="1Gi", init_containers=init)]
    )
    assert single_type(result.claim_of("app")) == "m5.xlarge"


@mirrors(_S + "Binpacking / should select for valid instance types, regardless of price")
def test_every_type_that_fits_is_offered_cheapest_first() -> None:
    # Only limits: requests default to them.
    tiny = pod("tiny", cpu=None, limits={"cpu": "1m", "memory": "1Mi"})
    result = plan([node_class(), only("r5.large", "m5.large", "c5.large"), tiny])
    claim = result.claim_of("tiny")
    assert claim is not None
    assert claim["instanceTypes"] == ["c5.large", "m5.large", "r5.large"]  # 0.085 < 0.096 < 0.126 $/h
    assert claim["requests"]["cpu"] == "1m"


# --- In-flight nodes ----------------------------------------------------------------------------------------------


@mirrors(
    _S + "In-Flight Nodes / should not launch a second node if there is an in-flight node that can support the pod",
    _S + "In-Flight Nodes / Taints / should assume pod will schedule to a tainted node with no taints",
)
def test_a_pod_joins_an_in_flight_node_with_room() -> None:
    result = plan([node_class(), node_pool(), *in_flight("launching"), pod("second", cpu="10m")])
    assert result.existing_of("second") == "launching"
    assert not result.node_claims


@mirrors(
    _S + "In-Flight Nodes / should not launch a second node if there is an in-flight node that can support the pod "
    "(node selectors)"
)
def test_an_in_flight_node_takes_pods_whose_zones_include_its_own() -> None:
    world = [
        node_class(),
        node_pool(),
        *in_flight("launching", zone="us-east-1b"),
        pod("either", cpu="10m", node_affinity=[requirement(ZONE, "In", "us-east-1a", "us-east-1b")]),
        pod("elsewhere", cpu="10m", node_affinity=[requirement(ZONE, "In", "us-east-1a", "us-east-1c")]),
    ]
    result = plan(world)
    assert result.existing_of("either") == "launching"
    claim = result.claim_of("elsewhere")
    assert claim is not None
    assert "us-east-1b" not in claim["zones"]


@mirrors(_S + "In-Flight Nodes / should launch a second node if a pod won't fit on the existingNodes node")
def test_a_pod_that_does_not_fit_an_in_flight_node_gets_a_new_one() -> None:
    world = [
        node_class(),
        node_pool(),
        *in_flight("launching", instance_type="m5.large"),
        bound("first", "launching", cpu="1001m"),
        pod("second", cpu="1"),
    ]
    result = plan(world)
    assert result.existing_of("second") is None
    assert result.claim_of("second") is not None


@mirrors(
    _S + "In-Flight Nodes / should launch a second node if a pod isn't compatible with the existingNodes node (node "
    "selector)"
)
def test_a_pod_incompatible_with_an_in_flight_node_gets_a_new_one() -> None:
    world = [node_class(), node_pool(), *in_flight("launching"), pod("arm", node_selector={ARCH: "arm64"})]
    result = plan(world)
    claim = result.claim_of("arm")
    assert result.existing_of("arm") is None
    assert claim is not None
    assert all(TYPES[t].labels[ARCH] == "arm64" for t in claim["instanceTypes"])


@mirrors(_S + "In-Flight Nodes / should launch a second node if an in-flight node is terminating")
def test_a_terminating_in_flight_node_takes_no_pod() -> None:
    the_node = node("going", initialized=False, deleting=ago(minutes=1))
    claim = node_claim(the_node, initialized="", deleting=ago(minutes=1))
    result = plan([node_class(), node_pool(), the_node, claim, pod("second", cpu="10m")])
    assert result.existing_of("second") is None
    assert result.claim_of("second") is not None


@mirrors(_S + "In-Flight Nodes / Topology / should balance pods across zones with in-flight nodes")
def test_zone_spread_fills_in_flight_nodes_evenly() -> None:
    labels = {"foo": "bar"}
    tsc = [spread(ZONE, labels=labels)]
    world: list[Any] = [node_class(), node_pool()]
    placed = {"us-east-1a": 1, "us-east-1b": 1, "us-east-1c": 2}
    for zone, count in placed.items():
        name = f"inflight-{zone[-1]}"
        world += in_flight(name, zone=zone, instance_type="m5.2xlarge")
        world += [bound(f"old-{zone[-1]}-{i}", name, cpu="100m", labels=labels, spread=tsc) for i in range(count)]
    world += pods("new", 5, cpu="100m", labels=labels, spread=tsc)
    result = plan(world)
    assert not result.node_claims
    per_node: dict[str, int] = {e["name"]: len(e["pods"]) for e in result.raw["existingNodes"]}
    assert per_node == {"inflight-a": 2, "inflight-b": 2, "inflight-c": 1}  # 3 / 3 / 3


@mirrors(_S + "In-Flight Nodes / Topology / should balance pods across hostnames with in-flight nodes")
def test_hostname_spread_opens_new_nodes_beside_in_flight_ones() -> None:
    labels = {"foo": "bar"}
    tsc = [spread(HOSTNAME, labels=labels)]
    world: list[Any] = [node_class(), node_pool()]
    for i in range(4):
        world += in_flight(f"inflight-{i}", instance_type="m5.2xlarge")
        world.append(bound(f"old-{i}", f"inflight-{i}", cpu="100m", labels=labels, spread=tsc))
    world += pods("new", 5, cpu="100m", labels=labels, spread=tsc)
    result = plan(world)
    assert not result.raw["existingNodes"]
    assert sorted(len(c["pods"]) for c in result.node_claims) == [1, 1, 1, 1, 1]


@mirrors(
    _S + "In-Flight Nodes / Taints / should assume pod will schedule to a node with ephemeral taint "
    "node.kubernetes.io/not-ready:NoExecute when the node is uninitialized"
)
def test_the_not_ready_taint_of_an_uninitialized_node_is_ignored() -> None:
    not_ready = [taint("node.kubernetes.io/not-ready", effect="NoExecute")]
    launching = in_flight("launching", taints=not_ready)
    assert plan([node_class(), node_pool(), *launching, pod("p", cpu="10m")]).existing_of("p") == "launching"
    ready = initialized("ready", taints=not_ready)
    result = plan([node_class(), node_pool(), *ready, pod("p", cpu="10m")])
    assert result.existing_of("p") is None
    assert result.claim_of("p") is not None


@mirrors(_S + "In-Flight Nodes / Taints / should not assume pod will schedule to a tainted node")
def test_an_initialized_node_with_a_taint_the_pod_does_not_tolerate_takes_no_pod() -> None:
    tainted = initialized("tainted", taints=[taint("foo.com/taint", "tainted")])
    result = plan([node_class(), node_pool(), *tainted, pod("p", cpu="10m")])
    assert result.existing_of("p") is None
    assert result.claim_of("p") is not None


@mirrors(
    _S + "In-Flight Nodes / Taints / should assume pod will schedule to a tainted node with a custom startup taint"
)
def test_the_startup_taint_of_an_uninitialized_node_is_ignored() -> None:
    startup = taint("foo.com/taint", "tainted")
    launching = in_flight("launching", taints=[startup, taint("node.kubernetes.io/not-ready")])
    result = plan([node_class(), node_pool(startup_taints=[startup]), *launching, pod("p", cpu="10m")])
    assert result.existing_of("p") == "launching"


@mirrors(
    _S + "In-Flight Nodes / Taints / should not assume pod will schedule to a node with startup taints after "
    "initialization"
)
def test_a_startup_taint_back_on_an_initialized_node_keeps_pods_off() -> None:
    startup = taint("ignore-me", "nothing-to-see-here")
    ready = initialized("ready", taints=[startup])
    result = plan([node_class(), node_pool(startup_taints=[startup]), *ready, pod("p", cpu="10m")])
    assert result.existing_of("p") is None
    assert result.claim_of("p") is not None


@mirrors(
    _S + "In-Flight Nodes / Taints / should consider a tainted NotReady node as in-flight even if initialized",
    differs="Karpenter's cluster state calls a node initialized by its karpenter.sh/initialized label "
    "(StateNode.Initialized), and then keeps its taints; upstream's test passes because its cluster state is not "
    "refreshed after the taints are added. nodeflow judges the node as it is: labelled initialized, the NotReady "
    "taints keep pods off it; without the label they are ignored as the node is still starting",
)
def test_a_node_labelled_initialized_keeps_its_not_ready_taints() -> None:
    taints = [
        taint("node.kubernetes.io/not-ready"),
        taint("node.kubernetes.io/unreachable"),
        taint("node.cloudprovider.kubernetes.io/uninitialized", "true"),
    ]
    labelled = node("launching", initialized=True, taints=taints, ready=None)
    world = [node_class(), node_pool(), labelled, node_claim(labelled, initialized=""), pod("p", cpu="10m")]
    assert plan(world).existing_of("p") is None
    starting = node("launching", initialized=False, taints=taints, ready=None)
    world = [node_class(), node_pool(), starting, node_claim(starting, initialized=""), pod("p", cpu="10m")]
    assert plan(world).existing_of("p") == "launching"


@mirrors(
    _S + "In-Flight Nodes / Daemonsets / should track daemonset usage separately so we know how many DS resources are "
    "remaining to be scheduled"
)
def test_a_bound_daemon_pod_is_not_counted_twice_on_an_in_flight_node() -> None:
    ds = daemon_set("agent", cpu="1", memory="1Gi")
    world = [
        node_class(),
        node_pool(),
        ds,
        *in_flight("launching", instance_type="m5.4xlarge"),  # 15.9 cpu allocatable
        bound("agent-x", "launching", cpu="1", memory="2Gi", owner="DaemonSet"),
        pod("fills-the-rest", cpu="14.9"),
    ]
    assert plan(world).existing_of("fills-the-rest") == "launching"


@mirrors(_S + "In-Flight Nodes / Daemonsets / should handle unexpected daemonset pods binding to the node")
def test_a_daemon_pod_bound_because_of_an_unexpected_label_uses_up_room() -> None:
    world = [
        node_class(),
        node_pool(),
        daemon_set("picky", cpu="1", memory="1Gi", node_selector={"my-node-label": "value"}),
        daemon_set("small", cpu="1m"),
        *in_flight("launching", instance_type="m5.4xlarge", labels={"my-node-label": "value"}),
        bound("picky-x", "launching", cpu="1", memory="2Gi", owner="DaemonSet"),
        pod("too-big", cpu="15.5"),
    ]
    result = plan(world)
    assert result.existing_of("too-big") is None
    assert result.claim_of("too-big") is not None


@mirrors(
    _S + "In-Flight Nodes / Daemonsets / Should properly handle DaemonSet resources with Node Affinity for "
    "`karpenter.sh/initialized` and `karpenter.sh/registered`"
)
def test_daemonsets_that_wait_for_registration_or_initialization_count_on_new_nodes() -> None:
    world = [
        node_class(),
        only("m5.large", "m5.xlarge", "m5.2xlarge"),
        daemon_set("after-init", cpu="1", node_affinity=[requirement("karpenter.sh/initialized", "In", "true")]),
        daemon_set("after-reg", cpu="1", node_affinity=[requirement("karpenter.sh/registered", "In", "true")]),
        pod("app", cpu="2"),
    ]
    claim = plan(world).claim_of("app")
    assert claim is not None
    assert claim["requests"]["cpu"] == "4"
    assert single_type(claim) == "m5.2xlarge"  # 4 cpu do not fit m5.xlarge's 3.92


@mirrors(_S + "In-Flight Nodes / should pack in-flight nodes before launching new nodes")
def test_in_flight_nodes_fill_up_before_a_new_node_opens() -> None:
    world: list[Any] = [node_class(), only("m5.xlarge")]
    for i in range(3):
        world += in_flight(f"inflight-{i}")  # 3.92 cpu: one pod of 1 cpu bound, room for two more
        world.append(bound(f"old-{i}", f"inflight-{i}", cpu="1"))
    world += pods("new", 7, cpu="1")
    result = plan(world)
    assert sum(len(e["pods"]) for e in result.raw["existingNodes"]) == 6
    assert len(result.node_claims) == 1
    assert len(result.node_claims[0]["pods"]) == 1


@mirrors(
    _S + "In-Flight Nodes / should not launch a second node if there is an in-flight node that can support the pod "
    "(#2011)",
    _S + "No Pre-Binding / should not bind pods to nodes",
)
def test_a_pod_nominated_to_an_in_flight_node_claim_does_not_get_a_second_node() -> None:
    the_node = node("launching", initialized=False)
    claim = node_claim(the_node, initialized="", annotations={"nodeflow.io/nominated-pods": '["default/first"]'})
    world = [node_class(), node_pool(), the_node, claim, pod("first", cpu="10m"), pod("second", cpu="10m")]
    result = plan(world)
    assert not result.node_claims
    assert not result.unschedulable
    assert result.existing_of("second") == "launching"


@mirrors(
    _S + "In-Flight Nodes / should order initialized nodes for scheduling uninitialized nodes when all other nodes are "
    "inflight"
)
def test_an_initialized_node_is_used_before_node_claims_still_launching() -> None:
    world: list[Any] = [node_class(), node_pool()]
    for i in range(10):
        launching = node(f"a-launching-{i}", initialized=False)
        world.append(node_claim(launching, initialized=""))  # no Node yet
    world += initialized("z-ready")
    world.append(pod("p", cpu="10m"))
    assert plan(world).existing_of("p") == "z-ready"


@mirrors(_S + "In-Flight Nodes / should schedule pods with the same host port to different nodes")
def test_pods_with_the_same_host_port_get_different_nodes() -> None:
    world = [node_class(), node_pool(), host_port(pod("a", cpu="10m"), 8080), host_port(pod("b", cpu="10m"), 8080)]
    result = plan(world)
    a, b = result.claim_of("a"), result.claim_of("b")
    assert a is not None
    assert b is not None
    assert a is not b


# --- Existing nodes -----------------------------------------------------------------------------------------------


def _unowned(name: str = "byo") -> Obj:
    return node(name, pool=None, allocatable={"cpu": "10", "memory": "100Gi", "pods": "110"})


@mirrors(
    _S + "Existing Nodes / should schedule a pod to an existing node unowned by Karpenter",
    _S + "Existing Nodes / should schedule multiple pods to an existing node unowned by Karpenter",
)
def test_pods_go_to_a_node_karpenter_does_not_own() -> None:
    result = plan([node_class(), node_pool(), _unowned(), *pods("p", 40, cpu="10m")])
    assert not result.node_claims
    assert all(result.existing_of(f"p-{i:02d}") == "byo" for i in range(40))


@mirrors(_S + "Existing Nodes / should order initialized nodes for scheduling uninitialized nodes")
def test_an_initialized_node_is_used_before_uninitialized_ones() -> None:
    world: list[Any] = [node_class(), node_pool()]
    for i in range(10):
        world += in_flight(f"a-launching-{i}")
    world += initialized("z-ready")
    world.append(pod("p", cpu="10m"))
    assert plan(world).existing_of("p") == "z-ready"


@mirrors(_S + "Existing Nodes / should consider a pod incompatible with an existing node but compatible with NodePool")
def test_a_pod_the_existing_node_cannot_take_waits_for_a_node_pool() -> None:
    existing = initialized("existing", zone="us-east-1b")
    zonal = pod("zonal", cpu="10m", node_affinity=[requirement(ZONE, "In", "us-east-1a")])
    without = plan([node_class(), *existing, zonal])
    assert "default/zonal" in without.unschedulable
    with_pool = plan([node_class(), node_pool(), *existing, zonal])
    claim = with_pool.claim_of("zonal")
    assert claim is not None
    assert claim["zones"] == ["us-east-1a"]


@mirrors(
    _S + "Existing Nodes / Daemonsets / should not subtract daemonset overhead that is not strictly compatible with an "
    "existing node"
)
def test_daemon_overhead_of_a_daemonset_that_cannot_run_on_an_existing_node_is_not_subtracted() -> None:
    small = node(
        "small", instance_type="m5.large", zone="us-east-1b", allocatable={"cpu": "1", "memory": "1Gi", "pods": "110"}
    )
    ds = daemon_set("zonal-agent", cpu="1000", memory="100Gi", node_affinity=[requirement(ZONE, "In", "us-east-1a")])
    world = [node_class(), node_pool(), ds, small, node_claim(small), pod("first", cpu="1", memory="1Gi")]
    assert plan(world).existing_of("first") == "small"
    # A second pod has no room there, and every new node would be eaten by the daemonset.
    result = plan([*world, pod("second", cpu="1", memory="1Gi")])
    assert sorted(result.unschedulable) == ["default/second"]


# --- No pre-binding -----------------------------------------------------------------------------------------------


@mirrors(_S + "No Pre-Binding / should handle resource zeroing of extended resources by kubelet")
def test_gpus_a_starting_kubelet_has_not_reported_yet_still_count() -> None:
    gpu = {"nvidia.com/gpu": "1"}
    the_node = node(
        "gpu-node",
        instance_type="g4dn.12xlarge",
        initialized=False,
        allocatable={"cpu": "47", "memory": "180Gi", "pods": "234", "nvidia.com/gpu": "0"},
    )
    claim = node_claim(the_node, initialized="", annotations={"nodeflow.io/nominated-pods": '["default/first"]'})
    claim["status"]["capacity"] = {"cpu": "48", "memory": "192Gi", "pods": "234", "nvidia.com/gpu": "4"}
    claim["status"]["allocatable"] = {"cpu": "47", "memory": "180Gi", "pods": "234", "nvidia.com/gpu": "4"}
    world = [
        node_class(),
        node_pool(),
        the_node,
        claim,
        pod("first", cpu="10m", requests=gpu, limits=gpu),
        pod("second", cpu="10m", requests=gpu, limits=gpu),
    ]
    result = plan(world)
    assert not result.node_claims
    assert result.existing_of("second") == "gpu-node"


@mirrors(_S + "No Pre-Binding / should respect self pod affinity without pod binding (zone)")
def test_self_affinity_follows_a_pod_nominated_to_an_in_flight_node() -> None:
    labels = {"security": "s2"}
    term = [affinity_term(ZONE, labels)]
    the_node = node("launching", zone="us-east-1b", initialized=False)
    claim = node_claim(the_node, initialized="", annotations={"nodeflow.io/nominated-pods": '["default/first"]'})
    world = [
        node_class(),
        node_pool(),
        the_node,
        claim,
        pod("first", cpu="10m", labels=labels, pod_affinity=term),
        pod("second", cpu="10m", labels=labels, pod_affinity=term),
    ]
    result = plan(world)
    assert not result.node_claims
    assert result.existing_of("second") == "launching"


# --- Volumes ------------------------------------------------------------------------------------------------------


def storage_class(
    name: str,
    *,
    binding: str = "WaitForFirstConsumer",
    topologies: list[list[tuple[str, list[str]]]] | None = None,
    default: bool = False,
    provisioner: str = "ebs.csi.aws.com",
) -> Obj:
    sc: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": binding,
    }
    if default:
        sc["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    if topologies:
        sc["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": k, "values": v} for k, v in term]} for term in topologies
        ]
    return sc


def pvc(
    name: str,
    *,
    storage_class_name: str | None = None,
    volume_name: str | None = None,
    bind_completed: bool = True,
    phase: str | None = None,
    deleting: str | None = None,
) -> Obj:
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class_name is not None:
        spec["storageClassName"] = storage_class_name
    meta: Obj = {"name": name, "namespace": "default"}
    if volume_name is not None:
        spec["volumeName"] = volume_name
        if bind_completed:
            meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    if deleting:
        meta["deletionTimestamp"] = deleting
        meta["finalizers"] = ["kubernetes.io/pvc-protection"]
    out: Obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}
    out["status"] = {"phase": phase or ("Bound" if volume_name else "Pending")}
    return out


def pv(
    name: str, *, terms: list[list[tuple[str, list[str]]]] | None = None, source: Obj | None = None, **meta: Any
) -> Obj:
    spec: Obj = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}
    spec.update(source or {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": f"vol-{name}"}})
    if terms:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": k, "operator": "In", "values": v} for k, v in term]} for term in terms
                ]
            }
        }
    metadata: Obj = {"name": name, **meta}
    if "deletionTimestamp" in metadata:
        metadata["finalizers"] = ["kubernetes.io/pv-protection"]
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": metadata, "spec": spec}


def with_claims(p: Obj, *claims: str) -> Obj:
    p["spec"]["volumes"] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return p


def with_ephemeral(p: Obj, storage_class_name: str | None) -> Obj:
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class_name is not None:
        spec["storageClassName"] = storage_class_name
    p["spec"]["volumes"] = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": spec}}}]
    return p


@mirrors(_S + "VolumeUsage / should launch a single node if all pods use the same PVC")
def test_pods_sharing_one_claim_share_one_node() -> None:
    world = [
        node_class(),
        only("m5.4xlarge"),
        storage_class("gp3", topologies=[[(ZONE, ["us-east-1a"])]]),
        pv("shared", terms=[[(ZONE, ["us-east-1a"])]]),
        pvc("shared", storage_class_name="gp3", volume_name="shared"),
        *[with_claims(p, "shared") for p in pods("user", 20, cpu="10m")],
    ]
    result = plan(world)
    assert len(result.node_claims) == 1
    assert result.node_claims[0]["zones"] == ["us-east-1a"]
    assert len(result.node_claims[0]["pods"]) == 20


@mirrors(_S + "VolumeUsage / should not fail for NFS volumes")
def test_an_nfs_volume_places_no_constraint() -> None:
    nfs = pv("nfs", source={"nfs": {"server": "fake.server", "path": "/some/path"}}, terms=[[(ZONE, ["us-east-1a"])]])
    world = [
        node_class(),
        only("m5.large"),
        nfs,
        pvc("nfs", storage_class_name="", volume_name="nfs"),
        *[with_claims(p, "nfs", "nfs") for p in pods("user", 5, cpu="10m")],
    ]
    result = plan(world)
    assert len(result.node_claims) == 1
    assert len(result.node_claims[0]["pods"]) == 5


def _anti_zone_pods(prefix: str, claims: list[str]) -> list[Obj]:
    labels = {"app": prefix}
    return [
        with_claims(pod(f"{prefix}-{i}", cpu="10m", labels=labels, pod_anti_affinity=[affinity_term(ZONE, labels)]), c)
        for i, c in enumerate(claims)
    ]


@mirrors(_S + "VolumeUsage / should schedule pods using a PV with multiple zones")
def test_a_volume_in_two_zones_lets_anti_affine_pods_use_both() -> None:
    two = [[(ZONE, ["us-east-1a"])], [(ZONE, ["us-east-1b"])]]
    world = [
        node_class(),
        node_pool(),
        pv("pv-0", terms=two),
        pv("pv-1", terms=two),
        pvc("pvc-0", volume_name="pv-0"),
        pvc("pvc-1", volume_name="pv-1"),
        *_anti_zone_pods("multi", ["pvc-0", "pvc-1"]),
    ]
    result = plan(world)
    zones = result.zones_of(["multi-0", "multi-1"])
    assert sorted(z for (z,) in zones) == ["us-east-1a", "us-east-1b"]


@mirrors(_S + "VolumeUsage / should schedule pods using a StorageClass with multiple zones in AllowedTopologies")
def test_a_class_with_two_zones_lets_anti_affine_pods_use_both() -> None:
    world = [
        node_class(),
        node_pool(),
        storage_class("two-zones", topologies=[[(ZONE, ["us-east-1a"])], [(ZONE, ["us-east-1b"])]]),
        pvc("pvc-0", storage_class_name="two-zones"),
        pvc("pvc-1", storage_class_name="two-zones"),
        *_anti_zone_pods("sc", ["pvc-0", "pvc-1"]),
    ]
    result = plan(world)
    zones = result.zones_of(["sc-0", "sc-1"])
    assert sorted(z for (z,) in zones) == ["us-east-1a", "us-east-1b"]


def _hostname_or_zone(source: Obj) -> list[Obj]:
    terms = [[(HOSTNAME, ["existing-host"])], [(ZONE, ["invalid-zone"])]]
    return [
        node_class(),
        node_pool(),
        pv("local", terms=terms, source=source),
        pvc("local", volume_name="local"),
        with_claims(pod("user", cpu="10m"), "local"),
    ]


@mirrors(
    _S
    + "VolumeUsage / should preserve unconstrained PV alternatives after ignoring hostname affinity / for local volumes"
)
def test_a_local_volume_hostname_term_does_not_block_scheduling() -> None:
    assert plan(_hostname_or_zone({"local": {"path": "/mnt/disk"}})).scheduled("user")


@mirrors(
    _S + "VolumeUsage / should preserve unconstrained PV alternatives after ignoring hostname affinity / for hostpath "
    "volumes"
)
def test_a_host_path_volume_hostname_term_does_not_block_scheduling() -> None:
    assert plan(_hostname_or_zone({"hostPath": {"path": "/mnt/disk"}})).scheduled("user")


@mirrors(
    _S + "VolumeUsage / should schedule pods when a valid multi-volume topology alternative remains after pruning "
    "disjoint branches"
)
def test_two_volumes_keep_the_one_alternative_both_allow() -> None:
    family = "karpenter.k8s.aws/instance-family"
    world = [
        node_class(),
        node_pool(),
        storage_class("a", topologies=[[(family, ["m5"])], [(family, ["c5"])]]),
        storage_class(
            "b", topologies=[[(ZONE, ["us-east-1a"]), (family, ["c5"])], [(ZONE, ["us-east-1b"]), (family, ["r5"])]]
        ),
        pvc("a", storage_class_name="a"),
        pvc("b", storage_class_name="b"),
        with_claims(pod("user", cpu="10m"), "a", "b"),
    ]
    claim = plan(world).claim_of("user")
    assert claim is not None
    assert claim["zones"] == ["us-east-1a"]
    assert all(t.startswith("c5.") for t in claim["instanceTypes"])


def _unschedulable(world: list[Obj], name: str = "user") -> str:
    result = plan(world)
    assert not result.node_claims
    reasons = result.unschedulable[f"default/{name}"]
    return "; ".join(reasons.values())


@mirrors(_S + "VolumeUsage / should not launch nodes for pod with unbound volume for volumeBindingMode immediate")
def test_an_unbound_claim_of_an_immediate_class_waits_for_its_volume() -> None:
    world = [
        node_class(),
        node_pool(),
        storage_class("now", binding="Immediate", topologies=[[(ZONE, ["us-east-1a"])]]),
        pvc("data", storage_class_name="now"),
        with_claims(pod("user", cpu="10m"), "data"),
    ]
    assert "Immediate" in _unschedulable(world)


@mirrors(_S + "VolumeUsage / should not launch nodes for pod with deleting persistentVolumeClaim")
def test_a_deleting_claim_keeps_its_pod_unschedulable() -> None:
    world = [
        node_class(),
        node_pool(),
        storage_class("gp3", topologies=[[(ZONE, ["us-east-1a"])]]),
        pvc("data", storage_class_name="gp3", deleting=ago(minutes=1)),
        with_claims(pod("user", cpu="10m"), "data"),
    ]
    assert "being deleted" in _unschedulable(world)


@mirrors(_S + "VolumeUsage / should not launch nodes for pod with bound persistentVolume that is marked for deletion")
def test_a_deleting_volume_keeps_its_pod_unschedulable() -> None:
    world = [
        node_class(),
        node_pool(),
        pv("doomed", deletionTimestamp=ago(minutes=1)),
        pvc("user-scratch", volume_name="doomed"),
        with_ephemeral(pod("user", cpu="10m"), None),
    ]
    assert "being deleted" in _unschedulable(world)


@mirrors(_S + "VolumeUsage / should not launch nodes for pod with Lost persistentVolumeClaim")
def test_a_lost_claim_keeps_its_pod_unschedulable() -> None:
    world = [
        node_class(),
        node_pool(),
        storage_class("gp3", topologies=[[(ZONE, ["us-east-1a"])]]),
        pvc("data", storage_class_name="gp3", phase="Lost"),
        with_claims(pod("user", cpu="10m"), "data"),
    ]
    assert "Lost" in _unschedulable(world)


@mirrors(
    _S
    + "VolumeUsage / should handle pods with PVCs with defined volumeName / when pv.kubernetes.io/bind-completed is missing"
)
def test_a_claim_naming_a_volume_without_the_bind_completed_annotation_is_not_bound_yet() -> None:
    world = [
        node_class(),
        node_pool(),
        storage_class("gp3", topologies=[[(ZONE, ["us-east-1a"])]]),
        pv("vol"),
        pvc("data", storage_class_name="gp3", volume_name="vol", bind_completed=False),
        with_claims(pod("user", cpu="10m"), "data"),
    ]
    assert "bind-completed" in _unschedulable(world)


@mirrors(
    _S
    + "VolumeUsage / should handle pods with PVCs with defined volumeName / when pv.kubernetes.io/bind-completed is present"
)
def test_a_claim_bound_to_a_volume_schedules() -> None:
    world = [
        node_class(),
        node_pool(),
        storage_class("gp3", topologies=[[(ZONE, ["us-east-1a"])]]),
        pv("vol"),
        pvc("data", storage_class_name="gp3", volume_name="vol"),
        with_claims(pod("user", cpu="10m"), "data"),
    ]
    assert plan(world).scheduled("user")


@mirrors(
    _S + "VolumeUsage / non-existent storage class",
    _S + "VolumeUsage / explicitly disabled storage class (empty string)",
)
def test_a_bound_ephemeral_claim_schedules_whatever_its_class() -> None:
    for class_name in ("non-existent", ""):
        world = [
            node_class(),
            node_pool(),
            pv("test-pv"),
            pvc("user-scratch", storage_class_name=class_name, volume_name="test-pv"),
            with_ephemeral(pod("user", cpu="10m"), class_name),
        ]
        result = plan(world)
        assert result.scheduled("user"), class_name
        assert len(result.node_claims) == 1


@mirrors(
    _S + "VolumeUsage / non-existent storage class [2]",
    _S + "VolumeUsage / explicitly disabled storage class (empty string) [2]",
)
def test_an_unbound_ephemeral_claim_without_a_usable_class_is_unschedulable() -> None:
    for class_name in ("non-existent", ""):
        world = [node_class(), node_pool(), with_ephemeral(pod("user", cpu="10m"), class_name)]
        assert _unschedulable(world), class_name


# --- Deleting nodes -----------------------------------------------------------------------------------------------


def _deleting_node(*on_it: Obj, pdbs: list[Obj] | None = None) -> list[Any]:
    the_node = node("going", instance_type="t3.micro", deleting=ago(minutes=1))
    claim = node_claim(the_node, deleting=ago(minutes=1))
    return [node_class(), node_pool(), the_node, claim, *on_it, *(pdbs or [])]


@mirrors(_S + "Deleting Nodes / should re-schedule pods from a deleting node when pods are active")
def test_active_pods_of_a_deleting_node_get_a_new_node() -> None:
    result = plan(_deleting_node(bound("web", "going", cpu=None, memory="100M")))
    claim = result.claim_of("web")
    assert claim is not None
    need = {"memory": 100 * 10**6 * 1000, "pods": 1000}
    assert claim["pricePerHour"] == cheapest(TYPES, lambda it: fits(it, need))[0]


@mirrors(
    _S + "Deleting Nodes / should not re-schedule pods from a deleting node when pods are not active",
    _S + "Deleting Nodes / should not reschedule pods from a deleting node when pods are not active and they are owned "
    "by a ReplicaSet",
)
def test_terminating_pods_of_a_deleting_node_get_no_new_node() -> None:
    result = plan(_deleting_node(bound("web", "going", cpu=None, memory="100M", deleting=ago(seconds=10))))
    assert not result.node_claims


@mirrors(_S + "Deleting Nodes / should not re-schedule pods from a deleting node when pods are owned by a DaemonSet")
def test_daemon_pods_of_a_deleting_node_get_no_new_node() -> None:
    result = plan(_deleting_node(bound("agent", "going", cpu=None, memory="100M", owner="DaemonSet")))
    assert not result.node_claims


@mirrors(
    _S + "Deleting Nodes / should reschedule pods from a deleting node when pods are not active and they are owned by "
    "a StatefulSet"
)
def test_terminating_stateful_set_pods_of_a_deleting_node_get_a_new_node() -> None:
    db = bound("db-0", "going", cpu=None, memory="100M", owner="StatefulSet", deleting=ago(seconds=10))
    result = plan(_deleting_node(db))
    assert result.claim_of("db-0") is not None


_PDB_LABELS = {"pdb-test": "value"}


@mirrors(
    _S + "Deleting Nodes / should not reschedule pods from a deleting node when pods are blocked due to fully blocking "
    "PDBs / 0 max unavailable",
    _S + "Deleting Nodes / should not reschedule pods from a deleting node when pods are blocked due to fully blocking "
    "PDBs / 0% max unavailable",
    _S + "Deleting Nodes / should not reschedule pods from a deleting node when pods are blocked due to fully blocking "
    "PDBs / 100% min available",
)
def test_pods_a_pdb_never_lets_go_get_no_new_node() -> None:
    for budget in ({"max_unavailable": 0}, {"max_unavailable": "0%"}, {"min_available": "100%"}):
        blocked = bound("web", "going", cpu=None, memory="100M", labels=_PDB_LABELS)
        result = plan(_deleting_node(blocked, pdbs=[pdb("guard", _PDB_LABELS, **budget)]))
        assert not result.node_claims, budget
    # A budget that allows one eviction does not hold the pod back.
    free = bound("web", "going", cpu=None, memory="100M", labels=_PDB_LABELS)
    assert plan(_deleting_node(free, pdbs=[pdb("guard", _PDB_LABELS, max_unavailable=1)])).claim_of("web")


@mirrors(
    _S + "Deleting Nodes / should not reschedule pods from a deleting node when pods are blocked due to fully blocking "
    "PDBs / multiple PDBs on the same pod"
)
def test_a_pod_under_two_pdbs_gets_no_new_node() -> None:
    blocked = bound("web", "going", cpu=None, memory="100M", labels=_PDB_LABELS)
    budgets = [pdb("one", _PDB_LABELS, max_unavailable=1), pdb("two", _PDB_LABELS, max_unavailable=1)]
    assert not plan(_deleting_node(blocked, pdbs=budgets)).node_claims


# --- NodePool requirements that leave no instance type ------------------------------------------------------------


def _no_type_reason(result: Any, key: str) -> str:
    reason: str = result.unschedulable[key]["default"]
    return reason


@mirrors(
    _S + "NodePool requirements instance filtering / should return appropriate pod error when no available instance "
    "types exist",
    _S + "NodePool requirements instance filtering / should handle multiple pods when requirements filter out all "
    "instance types",
)
def test_a_node_pool_whose_requirements_match_no_type_says_so() -> None:
    assert plan([node_class(), node_pool(), pod("normal")]).scheduled("normal")
    pool = node_pool(requirements=[requirement(INSTANCE_TYPE, "In", "non-existent-instance-type")])
    result = plan([node_class(), pool, pod("big", cpu="32", memory="256Gi")])
    assert "no instance type" in _no_type_reason(result, "default/big")
    arch_pool = node_pool(requirements=[requirement(ARCH, "In", "non-existent-arch")])
    result = plan([node_class(), arch_pool, *pods("p", 3)])
    assert len(result.unschedulable) == 3
    assert all("no instance type" in _no_type_reason(result, f"default/p-{i:02d}") for i in range(3))


@mirrors(
    _S + "NodePool requirements instance filtering / should handle conflicting requirements that eliminate all "
    "instance types"
)
def test_contradictory_node_pool_requirements_leave_no_type() -> None:
    pool = node_pool(requirements=[requirement(ARCH, "In", "amd64"), requirement(ARCH, "In", "arm64")])
    result = plan([node_class(), pool, pod("p")])
    assert not result.node_claims
    assert "default/p" in result.unschedulable


@mirrors(
    _S + "NodePool requirements instance filtering / should handle zone requirements that filter out all instance types"
)
def test_node_pool_zones_no_subnet_offers_leave_no_type() -> None:
    pool = node_pool(requirements=[requirement(ZONE, "In", "non-existent-zone-1", "non-existent-zone-2")])
    result = plan([node_class(), pool, pod("p")])
    assert not result.node_claims
    assert "default/p" in result.unschedulable


# --- reserved capacity (capacity reservations) ----------------------------------------------------------------------

SMALL, MEDIUM = "m5.large", "m5.xlarge"
_ONE_PLAN = (
    "nodeflow plans a batch at once: when the plan has used up the compatible reservations, the remaining pods fall "
    "back to spot / on-demand in the same plan (upstream reserves pessimistically and defers them to its next "
    "scheduling loop, which then makes the same decision)"
)


def reserved_pool(name: str = "default", **kw: Any) -> Obj:
    return node_pool(name, requirements=[requirement(CAPACITY_TYPE, "In", "reserved", "spot", "on-demand")], **kw)


def spread_pods(count: int, *reqs: Obj, **kw: Any) -> list[Obj]:
    """``count`` pods that each need a node of their own (hostname anti-affinity), with these node requirements."""
    anti = affinity_term(HOSTNAME, {"app": "test"})
    return [
        pod(f"p{i}", cpu="500m", labels={"app": "test"}, node_affinity=list(reqs), pod_anti_affinity=[anti], **kw)
        for i in range(count)
    ]


def reserved_ids(result: Plan) -> list[str]:
    """The reservation of each NodeClaim ("" for spot / on-demand), checking the capacity-type label agrees."""
    out = []
    for nc in result.node_claims:
        rid = nc["labels"].get(RID, "")
        assert (nc["capacityType"] == "reserved") == bool(rid)
        assert (nc["labels"].get(CAPACITY_TYPE) == "reserved") == bool(rid)
        out.append(rid)
    return sorted(out)


@mirrors(
    _RESERVED + "shouldn't fallback to on-demand or spot when compatible reserved offerings are available",
    differs=_ONE_PLAN,
)
def test_reserved_offerings_are_used_before_spot_or_on_demand() -> None:
    its = requirement(INSTANCE_TYPE, "In", SMALL, MEDIUM)
    objs = [reserved_class(ids=["cr-small", "cr-medium"]), reserved_pool(), *spread_pods(3, its)]
    result = plan([*objs, reservations(("cr-small", SMALL, 1), ("cr-medium", MEDIUM, 1))])
    assert reserved_ids(result) == ["", "cr-medium", "cr-small"]
    (fallback,) = [nc for nc in result.node_claims if nc["capacityType"] != "reserved"]
    assert fallback["instanceTypes"][0] == SMALL


@mirrors(_RESERVED + "should correctly track reservations shared across nodepools", differs=_ONE_PLAN)
def test_a_reservation_shared_by_two_node_pools_is_counted_once() -> None:
    pools = [reserved_pool("np-1"), reserved_pool("np-2")]
    pods = [
        required_terms(
            p, [requirement(INSTANCE_TYPE, "In", SMALL), requirement("karpenter.sh/nodepool", "In", f"np-{i + 1}")]
        )
        for i, p in enumerate(spread_pods(2))
    ]
    result = plan([reserved_class(ids=["cr-small"]), *pools, *pods, reservations(("cr-small", SMALL, 1))])
    assert reserved_ids(result) == ["", "cr-small"]
    assert {nc["instanceTypes"][0] for nc in result.node_claims} == {SMALL}


@mirrors(
    _RESERVED + "should correctly track reservations for multiple nodepools with distinct reservations for the same "
    "instance pool"
)
def test_distinct_reservations_of_one_type_in_two_node_pools_are_both_used() -> None:
    classes = [reserved_class("a", ids=["cr-a"]), reserved_class("b", ids=["cr-b"])]
    pools = [reserved_pool("np-1", node_class_name="a"), reserved_pool("np-2", node_class_name="b")]
    pods = [
        required_terms(
            p, [requirement(INSTANCE_TYPE, "In", SMALL), requirement("karpenter.sh/nodepool", "In", f"np-{i + 1}")]
        )
        for i, p in enumerate(spread_pods(2))
    ]
    result = plan([*classes, *pools, *pods, reservations(("cr-a", SMALL, 1), ("cr-b", SMALL, 1))])
    assert reserved_ids(result) == ["cr-a", "cr-b"]


@mirrors(_RESERVED + "should correctly track multiple reservations for the same instance pool", differs=_ONE_PLAN)
def test_two_reservations_of_one_type_hold_their_counts() -> None:
    objs = [
        reserved_class(ids=["cr-1", "cr-2"]),
        reserved_pool(),
        *spread_pods(4, requirement(INSTANCE_TYPE, "In", SMALL)),
    ]
    result = plan([*objs, reservations(("cr-1", SMALL, 1), ("cr-2", SMALL, 2))])
    assert reserved_ids(result) == ["", "cr-1", "cr-2", "cr-2"]
    assert {nc["instanceTypes"][0] for nc in result.node_claims} == {SMALL}


@mirrors(
    _RESERVED + "shouldn't fallback to a lower weight NodePool if a reserved offering is available", differs=_ONE_PLAN
)
def test_a_used_up_reservation_does_not_send_pods_to_a_lower_weight_pool() -> None:
    classes = [reserved_class("a", ids=["cr-primary"]), reserved_class("b", ids=["cr-fallback"])]
    pools = [
        reserved_pool("np-primary", node_class_name="a", weight=100),
        reserved_pool("np-fallback", node_class_name="b", weight=50),
    ]
    pods = spread_pods(2, requirement(INSTANCE_TYPE, "In", SMALL))
    result = plan([*classes, *pools, *pods, reservations(("cr-primary", SMALL, 1), ("cr-fallback", SMALL, 1))])
    assert reserved_ids(result) == ["", "cr-primary"]
    assert {nc["nodePool"] for nc in result.node_claims} == {"np-primary"}


@mirrors(
    _RESERVED + "shouldn't relax preferences when a pod fails to schedule due to a reserved offering error",
    differs=_ONE_PLAN,
)
def test_a_used_up_reservation_does_not_relax_a_node_pool_preference() -> None:
    pools = [reserved_pool("np-1"), reserved_pool("np-2")]
    pods = [
        preferred_terms(p, (1, [requirement("karpenter.sh/nodepool", "In", "np-1")]))
        for p in spread_pods(2, requirement(INSTANCE_TYPE, "In", SMALL))
    ]
    result = plan([reserved_class(ids=["cr-small"]), *pools, *pods, reservations(("cr-small", SMALL, 1))])
    assert reserved_ids(result) == ["", "cr-small"]
    assert {nc["nodePool"] for nc in result.node_claims} == {"np-1"}


@mirrors(_RESERVED + "should handle multiple pods on reserved nodes")
def test_pods_requiring_reserved_capacity_share_a_reserved_node() -> None:
    reqs = [
        requirement(INSTANCE_TYPE, "In", SMALL),
        requirement("karpenter.sh/nodepool", "In", "np-1"),
        requirement(CAPACITY_TYPE, "In", "reserved"),
        requirement(ZONE, "In", Z1),
    ]
    together = affinity_term(ZONE, {"app": "test"})
    pods = [
        pod(f"p{i}", cpu="100m", labels={"app": "test"}, node_affinity=reqs, pod_affinity=[together]) for i in range(2)
    ]
    result = plan(
        [reserved_class(ids=["cr-small"]), reserved_pool("np-1"), *pods, reservations(("cr-small", SMALL, 1))]
    )
    assert reserved_ids(result) == ["cr-small"]
    assert result.claim_of("p0") is result.claim_of("p1")
    assert claim(result, "p0")["instanceTypes"] == [SMALL]


# --- offering overrides: an extended resource only some instance types carry (here from a NodeOverlay) -------------


@mirrors(
    _S + "Offering Overrides / should only select instance types whose offerings have CapacityOverride when pod "
    "requests an override resource"
)
def test_a_pod_requesting_an_overlaid_resource_gets_only_the_types_that_carry_it() -> None:
    """The extra resource comes from a NodeOverlay's capacity on one of the NodePool's two types (upstream's
    test puts it on that type's offerings): the NodeClaim may use that type only."""
    slots = "test.com/extended-slots"
    pool = node_pool(requirements=[requirement(INSTANCE_TYPE, "In", "m5.xlarge", "c5.xlarge")])
    overlay = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "slots"},
        "spec": {"requirements": [requirement(INSTANCE_TYPE, "In", "m5.xlarge")], "capacity": {slots: "4"}},
    }
    wants = pod("p", cpu="1", requests={slots: "1"}, limits={slots: "1"})
    assert claim(plan([node_class(), pool, overlay, wants]), "p")["instanceTypes"] == ["m5.xlarge"]
    without = plan([node_class(), pool, wants])  # no overlay: no type has the resource
    assert not without.node_claims
    assert "default/p" in without.unschedulable
