"""The generated NodeflowPolicy CRD (nodeflow.io/v1alpha1) and the NodeflowPolicy model agree: a policy the API
server admits (OpenAPI schema, list types and CEL rules, as tests/kubeapi evaluates them) validates in the model,
and one it refuses is refused by the model too; each CEL rule refuses its own bad object with its message."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from nodeflow.api.nodeflow_policy import NodeflowPolicy
from tests.kubeapi import cel
from tests.kubeapi.crds import CRD_DIR
from tests.kubeapi.schema import cel_issues, prune_and_validate
from tests.kubeapi.table import jsonpath

CRD = next(d for d in yaml.safe_load_all((CRD_DIR / "nodeflow.io_nodeflowpolicies.yaml").read_text()) if d)
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

GOOD: dict[str, Any] = {
    "apiVersion": "nodeflow.io/v1alpha1",
    "kind": "NodeflowPolicy",
    "metadata": {"name": "gpu-access"},
    "spec": {
        "nodePoolAccess": [
            {"nodePools": ["gpu"], "namespaces": ["ml-prod"], "namespaceSelector": {"matchLabels": {"team": "ml"}}}
        ],
        "resourceAccess": [
            {
                "resources": ["nvidia.com/gpu"],
                "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["ml"]}]},
            }
        ],
        "costCeilings": {
            "cluster": {"maxPricePerHour": "40"},
            "nodePools": [{"name": "gpu", "maxPricePerHour": "20"}],
            "namespaces": [{"name": "ml-exp", "maxPricePerHour": "5.5"}],
        },
        "limits": [{"name": "batch-group", "nodePools": ["batch-a", "batch-b"], "resources": {"cpu": "1000"}}],
        "pauses": [
            {
                "name": "quarter-end-freeze",
                "schedule": "0 18 * * 5",
                "duration": "60h",
                "provisioning": True,
                "nodePools": ["gpu"],
            }
        ],
    },
}


def crd_issues(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    obj = copy.deepcopy(obj)
    issues = prune_and_validate(obj, SCHEMA)
    return issues or cel_issues(obj, SCHEMA, None)  # the API server runs CEL once the schema passed


def model_valid(obj: dict[str, Any]) -> bool:
    try:
        NodeflowPolicy.model_validate(obj)
    except ValidationError:
        return False
    return True


def with_spec(**changes: Any) -> dict[str, Any]:
    obj = copy.deepcopy(GOOD)
    obj["spec"].update(changes)
    obj["spec"] = {k: v for k, v in obj["spec"].items() if v is not None}
    return obj


def test_crd_names_scope_version_and_columns() -> None:
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == "nodeflowpolicies.nodeflow.io"
    assert (spec["group"], spec["scope"], spec["names"]["kind"], spec["names"]["plural"]) == (
        "nodeflow.io",
        "Cluster",
        "NodeflowPolicy",
        "nodeflowpolicies",
    )
    assert spec["names"]["shortNames"] == ["nfp"]
    assert spec["names"]["categories"] == ["nodeflow"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert "subresources" not in version  # no status: a policy is only spec
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")] == [
        "NodePools",
        "Resources",
        "Cluster$/h",
        "Pauses",
        "Age",
    ]
    # every column's JSONPath selects something of the example
    for name in ("NodePools", "Resources", "Cluster$/h", "Pauses", "Limits", "NodePool$/h", "Namespace$/h"):
        assert jsonpath(GOOD, columns[name]["jsonPath"]), name


def test_the_good_object_is_admitted_by_both() -> None:
    assert crd_issues(GOOD) == []
    assert model_valid(GOOD)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"nodePoolAccess": [{"nodePools": ["gpu"]}]}, "set 'namespaces' and/or 'namespaceSelector'"),
        ({"resourceAccess": [{"resources": ["nvidia.com/gpu"]}]}, "set 'namespaces' and/or 'namespaceSelector'"),
        (
            {"resourceAccess": [{"resources": ["memory"], "namespaces": ["a"]}]},
            "only extended resources can be governed",
        ),
        (
            {"pauses": [{"name": "w", "schedule": "@daily", "duration": "1h"}]},
            "a window must pause provisioning and/or disruption",
        ),
        (
            {"pauses": [{"name": "w", "schedule": "@daily", "duration": "1h", "provisioning": False}]},
            "a window must pause provisioning and/or disruption",
        ),
        (
            {
                "nodePoolAccess": [
                    {"nodePools": ["gpu"], "namespaceSelector": {"matchExpressions": [{"key": "t", "operator": "In"}]}}
                ]
            },
            "operators In and NotIn require values",
        ),
        (
            {
                "nodePoolAccess": [
                    {
                        "nodePools": ["gpu"],
                        "namespaceSelector": {
                            "matchExpressions": [{"key": "t", "operator": "Exists", "values": ["x"]}]
                        },
                    }
                ]
            },
            "Exists and DoesNotExist take none",
        ),
    ],
)
def test_each_cel_rule_refuses_its_bad_object(spec: dict[str, Any], message: str) -> None:
    obj = with_spec(**spec)
    assert prune_and_validate(copy.deepcopy(obj), SCHEMA) == []
    violations = cel.validate(SCHEMA, prune_and_validate_copy(obj))
    assert len(violations) == 1, violations
    assert message in violations[0][1]
    assert not model_valid(obj)


def prune_and_validate_copy(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the API server stores it before CEL runs (pruned, defaults applied)."""
    out = copy.deepcopy(obj)
    prune_and_validate(out, SCHEMA)
    return out


POOL = {"nodePools": ["gpu"], "namespaces": ["ml"]}
WINDOW = {"name": "w", "schedule": "@daily", "duration": "1h", "disruption": True}


@pytest.mark.parametrize(
    "spec",
    [{"nodePoolAccess": [{**POOL, "nodePools": pools}]} for pools in (["gpu", "gpu"], [], ["GPU"], ["*"], ["a.b-c"])]
    + [{"nodePoolAccess": [{**POOL, "namespaces": ns}]} for ns in (["a", "a"], ["Bad_ns"], ["*"], [])]
    + [{"nodePoolAccess": [{**POOL, "namespaceSelector": {}}]}]
    + [
        {"nodePoolAccess": [{**POOL, "namespaceSelector": {"matchLabels": {k: v}}}]}
        for k, v in (("team", "ml"), ("-bad", "x"), ("team", "-bad"), ("example.com/team", "a" * 64))
    ]
    + [
        {"nodePoolAccess": [{**POOL, "namespaceSelector": {"matchExpressions": [{"key": "t", "operator": op}]}}]}
        for op in ("Exists", "DoesNotExist", "Gt")
    ]
    + [
        {"resourceAccess": [{"namespaces": ["a"], "resources": r}]}
        for r in (["nvidia.com/gpu", "nvidia.com/gpu"], ["pods"], ["cpu"], ["bad key"], ["aws.amazon.com/neuron"], [])
    ]
    + [{"costCeilings": {"cluster": {"maxPricePerHour": p}}} for p in ("40", "12.5", "-1", "1e3", "", "1.", 40)]
    + [
        {"costCeilings": {"nodePools": [{"name": "gpu", "maxPricePerHour": "1"}, {"name": n, "maxPricePerHour": "2"}]}}
        for n in ("gpu", "cpu", "CPU")
    ]
    + [
        {"costCeilings": {"namespaces": [{"name": "a", "maxPricePerHour": "1"}, {"name": n, "maxPricePerHour": "2"}]}}
        for n in ("a", "b")
    ]
    + [{"costCeilings": {"namespaces": [{"name": "a"}]}}]
    + [
        {"limits": [{"name": "g", "nodePools": ["a"], "resources": r}]}
        for r in ({}, {"cpu": "10"}, {"memory": "4000Gi", "nodes": 50}, {"cpu": "ten"})
    ]
    + [{"limits": [{"name": "g", "nodePools": [], "resources": {"cpu": "1"}}]}]
    + [{"limits": [{"name": n, "nodePools": ["a"], "resources": {"cpu": "1"}} for n in ("g", "g")]}]
    + [{"pauses": [{**WINDOW, "schedule": s}]} for s in ("@daily", "0 18 * * 5", "0 18 * *", "@often", "*/15 * * * *")]
    + [
        {"pauses": [{**WINDOW, "duration": d}]}
        for d in (
            *("60h", "90m", "1h30m", "1d", "30s", "", "8784h", "8783h60m", "527040m"),
            *("8785h", "8784h1m", "527041m", "20000000h", "99999999999h", "999999h9999999m", "0000001h"),
        )
    ]
    + [{"pauses": [{**WINDOW, "nodePools": ["*"]}]}]
    + [{"limits": [{"name": "g", "nodePools": ["*", "a"], "resources": {"cpu": "1"}}]}]
    + [{"limits": [{"name": "*", "nodePools": ["a"], "resources": {"cpu": "1"}}]}]
    + [{"costCeilings": {scope: [{"name": "*", "maxPricePerHour": "1"}]}} for scope in ("nodePools", "namespaces")]
    + [{"resourceAccess": [{"namespaces": ["*"], "resources": ["*"]}]}]
    + [{"pauses": [{**WINDOW, "provisioning": True, "disruption": False}]}]
    + [{"pauses": [WINDOW, WINDOW]}]
    + [{"pauses": [{**WINDOW, "nodePools": ["a", "a"]}]}]
    + [{"pauses": [{**WINDOW, "name": "Bad Name"}]}],
)
def test_model_and_crd_agree(spec: dict[str, Any]) -> None:
    obj = with_spec(**spec)
    admitted = crd_issues(obj) == []
    assert model_valid(obj) == admitted, (spec, crd_issues(obj))


def test_a_pause_window_longer_than_366_days_is_refused_naming_the_field() -> None:
    issues = crd_issues(with_spec(pauses=[{**WINDOW, "duration": "8785h"}]))
    assert issues == [
        ("spec.pauses[0].duration", "FieldValueInvalid", '"string": a pause window lasts at most 8784h (366 days)')
    ]
    # the reviewer's durations: too many digits for the pattern (so CEL never parses past Go's range)
    for duration in ("99999999999h", "20000000h"):
        ((path, kind, _),) = crd_issues(with_spec(pauses=[{**WINDOW, "duration": duration}]))
        assert (path, kind) == ("spec.pauses[0].duration", "FieldValueInvalid")


def test_a_duplicate_in_a_list_is_refused_by_the_list_type() -> None:
    issues = crd_issues(with_spec(nodePoolAccess=[{**POOL, "nodePools": ["gpu", "gpu"]}]))
    assert issues == [("spec.nodePoolAccess[0].nodePools[1]", "FieldValueDuplicate", 'Duplicate value: "gpu"')]
    issues = crd_issues(with_spec(pauses=[WINDOW, WINDOW]))
    assert issues == [("spec.pauses[1]", "FieldValueDuplicate", 'Duplicate value: {"name":"w"}')]
