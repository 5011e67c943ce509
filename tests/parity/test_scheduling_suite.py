"""Parity: custom constraints, preferential fallback and instance type compatibility of the scheduler.

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
from tests.parity.harness import (
    ARCH,
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_TYPE,
    ZONE,
    ZONES,
    Obj,
    Plan,
    ago,
    explain,
    managed_node,
    node_class,
    node_pool,
    plan,
    pod,
    requirement,
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


NOT_EXPRESSIBLE: dict[str, str] = {}


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
