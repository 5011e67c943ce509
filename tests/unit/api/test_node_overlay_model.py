"""karpenter.sh/v1alpha1 NodeOverlay validation: the CRD's OpenAPI patterns and CEL rules, and Karpenter's
runtime validation (mirrors upstream's nodeoverlay_validation_test cases)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from nodeflow.api.errors import format_validation_error
from nodeflow.api.karpenter_overlay import NodeOverlay


def overlay(**spec: Any) -> dict[str, Any]:
    spec.setdefault("requirements", [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}])
    return {"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "o"}, "spec": spec}


def errors(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as info:
        NodeOverlay.model_validate(doc)
    return format_validation_error(info.value)


def req(key: str, operator: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


@pytest.mark.parametrize(
    "value", ["+42", ".5", "42.", "42%", "3,14", "1e10", "0x42", "forty-two", "42a", "42 ", " 42", "42.0.0", "-", "."]
)
def test_price_rejects_what_the_crd_pattern_rejects(value: str) -> None:
    (line,) = errors(overlay(price=value))
    assert line.startswith("spec.price: ")
    assert repr(value) in line


@pytest.mark.parametrize("value", ["43", "34.43", "0"])
def test_price_accepts_unsigned_decimals(value: str) -> None:
    assert NodeOverlay.model_validate(overlay(price=value)).spec.price == value


@pytest.mark.parametrize("value", ["1%", "1", "1.3", "-100.0%", "-101.1%", "42%", "+", "+1e3", "-.%", "+10 %", "10%-"])
def test_price_adjustment_must_be_signed_and_not_below_minus_100_percent(value: str) -> None:
    (line,) = errors(overlay(priceAdjustment=value))
    assert line.startswith("spec.priceAdjustment: ")


@pytest.mark.parametrize(
    "value", ["+1%", "-1%", "-100%", "+100.102%", "+298%", "+43", "-43", "+34.43", "-34.43", "-129", "-0.5", "+.5"]
)
def test_price_adjustment_accepts_signed_amounts_and_percentages(value: str) -> None:
    assert NodeOverlay.model_validate(overlay(priceAdjustment=value)).spec.price_adjustment == value


def test_price_and_price_adjustment_are_exclusive() -> None:
    (line,) = errors(overlay(price="0.432", priceAdjustment="+10%"))
    assert line == "spec.price: cannot set both 'price' and 'priceAdjustment'"


@pytest.mark.parametrize("resource", ["cpu", "memory", "ephemeral-storage", "pods"])
def test_capacity_may_not_touch_standard_resources(resource: str) -> None:
    (line,) = errors(overlay(capacity={resource: "1"}))
    assert line.startswith(f"spec.capacity[{resource}]: invalid resource restricted")


def test_capacity_takes_extended_resources_and_quantities() -> None:
    parsed = NodeOverlay.model_validate(overlay(capacity={"smarter-devices/fuse": 1, "example.com/nic": "2"}))
    assert parsed.spec.capacity == {"smarter-devices/fuse": "1", "example.com/nic": "2"}
    (line,) = errors(overlay(capacity={"example.com/nic": "lots"}))
    assert line.startswith(("spec.capacity.example.com/nic", "spec.capacity[example.com/nic]"))


@pytest.mark.parametrize("weight", [0, 10001, -1])
def test_weight_is_1_to_10000(weight: int) -> None:
    (line,) = errors(overlay(weight=weight))
    assert line.startswith("spec.weight: ")


def test_requirements_are_required() -> None:
    doc = overlay()
    del doc["spec"]["requirements"]
    assert errors(doc) == ["spec.requirements: required field is missing"]


@pytest.mark.parametrize(
    ("requirement", "message"),
    [
        (req("Test", "In"), "operator 'In' must have a value defined"),
        (req("Test", "NotIn"), "operator 'NotIn' must have a value defined"),
        (req("topology.kubernetes.io/zone", "Gt"), "must have a single positive integer value"),
        (req("topology.kubernetes.io/zone", "Gt", "1", "2"), "must have a single positive integer value"),
        (req("topology.kubernetes.io/zone", "Lt", "a"), "must have a single positive integer value"),
        (req("topology.kubernetes.io/zone", "Gte", "-1"), "is not a valid label value"),
        (req("topology.kubernetes.io/zone", "Lte", "x"), "must have a single positive integer value"),
        (req("topology.kubernetes.io/zone", "unknown", "test"), "Input should be"),
        (req("test.com.com}", "Exists"), "is not a valid label key"),
        (req("Test.com/test", "Exists"), "is not a valid label key"),
        (req("test/test/test", "Exists"), "is not a valid label key"),
        (req("test/", "Exists"), "is not a valid label key"),
        (req("/test", "Exists"), "is not a valid label key"),
        (req("karpenter.sh/test", "In", "test"), 'label domain "karpenter.sh" is restricted'),
        (req("sub.karpenter.sh/test", "In", "test"), 'label domain "karpenter.sh" is restricted'),
        (req("kubernetes.io/hostname", "In", "test"), 'label "kubernetes.io/hostname" is restricted'),
        (req("example.com/team", "In", "bad value"), "is not a valid label value"),
    ],
)
def test_bad_requirements_name_the_requirement(requirement: dict[str, Any], message: str) -> None:
    (line,) = errors(overlay(requirements=[requirement]))
    assert line.startswith("spec.requirements[0]"), line
    assert message in line


@pytest.mark.parametrize(
    "requirements",
    [
        [req("Test", "Exists"), req("test.com/Test", "Exists"), req("test.com.com/test", "Exists")],
        [req("karpenter.sh/nodepool", "In", "default")],
        [req("karpenter.sh/capacity-type", "In", "spot")],
        [req("kubernetes.io/test", "In", "test"), req("k8s.io/test", "In", "test")],
        [req("subdomain.kubernetes.io/test", "In", "test")],
        [req("karpenter.k8s.aws/instance-cpu", "In", "test"), req("node.kubernetes.io/instance-type", "In", "x")],
        [
            req("topology.kubernetes.io/zone", "In", "test"),
            req("topology.kubernetes.io/zone", "Gt", "1"),
            req("topology.kubernetes.io/zone", "Lt", "1"),
            req("topology.kubernetes.io/zone", "Gte", "1"),
            req("topology.kubernetes.io/zone", "Lte", "1"),
            req("topology.kubernetes.io/zone", "NotIn", "1"),
            req("topology.kubernetes.io/zone", "Exists"),
        ],
        [],
    ],
)
def test_good_requirements_pass_both_validations(requirements: list[dict[str, Any]]) -> None:
    parsed = NodeOverlay.model_validate(overlay(requirements=requirements))
    assert parsed.runtime_errors() == []


def test_runtime_validation_catches_what_the_crd_admits() -> None:
    long_name = NodeOverlay.model_validate(overlay(requirements=[req("test.com.test/test-" + "a" * 250, "Exists")]))
    (problem,) = long_name.runtime_errors()
    assert problem.startswith("spec.requirements[0]: ")
    assert "63 characters" in problem
    aws = NodeOverlay.model_validate(overlay(requirements=[req("karpenter.k8s.aws/custom", "Exists")]))
    assert aws.runtime_errors() == ["spec.requirements[0]: label karpenter.k8s.aws/custom is restricted"]


def test_name_is_required_and_a_dns_subdomain() -> None:
    doc = overlay()
    doc["metadata"] = {"name": "Bad_Name"}
    (line,) = errors(doc)
    assert line.startswith("metadata.name: 'Bad_Name'")
    doc["metadata"] = {}
    assert errors(doc) == ["metadata.name: name is required"]


def test_unknown_fields_are_refused() -> None:
    (line,) = errors(overlay(prices="1"))
    assert line.startswith("spec.prices: unknown field")
