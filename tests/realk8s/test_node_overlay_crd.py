"""The generated NodeOverlay CRD (karpenter.sh/v1alpha1) and the NodeOverlay model agree: an object the API
server admits (OpenAPI schema + CEL rules: the real kube-apiserver's dry run, tests/realk8s/admission.py) validates
in the model, and one it refuses is refused by the model too; each CEL rule refuses its own bad object with
upstream's message."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from nodeflow.api.karpenter_overlay import NodeOverlay
from tests.realk8s.admission import Admission, crd

CRD = crd("karpenter.sh_nodeoverlays.yaml")

GOOD: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "good"},
    "spec": {
        "requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": "karpenter.sh/nodepool", "operator": "NotIn", "values": ["gpu"]},
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["4"]},
            {"key": "example.com/team", "operator": "Exists"},
        ],
        "priceAdjustment": "-10%",
        "capacity": {"smarter-devices/fuse": "1"},
        "weight": 10,
    },
}


def with_spec(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(GOOD)
    obj["spec"].update(changes)
    return obj


def test_crd_names_version_and_columns() -> None:
    spec = CRD["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"], spec["names"]["plural"]) == (
        "karpenter.sh",
        "Cluster",
        "NodeOverlay",
        "nodeoverlays",
    )
    assert spec["names"]["shortNames"] == ["overlays"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Ready", "Age", "Weight"]


def test_the_good_object_is_admitted_by_both(admission: Admission) -> None:
    assert admission.create(GOOD) == []
    NodeOverlay.model_validate(GOOD)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"price": "1", "priceAdjustment": "+1"}, "cannot set both 'price' and 'priceAdjustment'"),
        ({"capacity": {"memory": "1Gi"}}, "invalid resource restricted"),
        (
            {"requirements": [{"key": "a", "operator": "In", "values": []}]},
            "requirements with operator 'In' must have a value defined",
        ),
        (
            {"requirements": [{"key": "a", "operator": "NotIn", "values": []}]},
            "operator 'NotIn' must have a value defined",
        ),
        ({"requirements": [{"key": "a", "operator": "Lt", "values": ["1", "2"]}]}, "single positive integer value"),
        ({"requirements": [{"key": "karpenter.sh/foo", "operator": "Exists"}]}, 'label domain "karpenter.sh"'),
        ({"requirements": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]}, "kubernetes.io/hostname"),
    ],
)
def test_each_cel_rule_refuses_its_bad_object(spec: dict[str, Any], message: str, admission: Admission) -> None:
    [issue] = admission.create(with_spec(**spec))
    assert issue.reason == "FieldValueInvalid"
    assert message in issue.detail
    with pytest.raises(ValidationError):
        NodeOverlay.model_validate(with_spec(**spec))


@pytest.mark.parametrize(
    "spec",
    [
        {"priceAdjustment": value}
        for value in ("+1%", "-100%", "-101%", "1%", "+43", "-129", "1.3", "+.5", "-", "42.", "+100.102%", "-99.5%")
    ]
    + [{"priceAdjustment": None, "price": value} for value in ("43", "34.43", "+42", ".5", "42.", "1e10", " 42")]
    + [{"weight": w} for w in (0, 1, 10000, 10001)]
    + [{"capacity": {"example.com/x": q}} for q in ("1", "2Gi", 3)]
    + [{"requirements": [{"key": k, "operator": "Exists"}]} for k in ("Test", "test/", "Test.com/x", "a/b/c")]
    + [{"requirements": [{"key": "k", "operator": op, "values": ["1"]}]} for op in ("Gt", "Gte", "In", "Unknown")]
    + [{"requirements": [{"key": "k", "operator": "In", "values": [v]}]} for v in ("ok", "-bad", "a" * 64)],
)
def test_model_and_crd_agree(spec: dict[str, Any], admission: Admission) -> None:
    obj = with_spec(**spec)
    obj["spec"] = {k: v for k, v in obj["spec"].items() if v is not None}
    issues = admission.create(obj)
    admitted = issues == []
    try:
        NodeOverlay.model_validate(obj)
        valid = True
    except ValidationError:
        valid = False
    assert valid == admitted, (spec, issues)
