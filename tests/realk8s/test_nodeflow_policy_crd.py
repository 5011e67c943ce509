"""The generated NodeflowPolicy CRD (nodeflow.io/v1alpha1) and the NodeflowPolicy model agree: a policy the API
server admits (OpenAPI schema, list types and CEL rules: the real kube-apiserver's dry run,
tests/realk8s/admission.py) validates in the model, and one it refuses is refused by the model too; each CEL rule
refuses its own bad object with its message."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from nodeflow.api.nodeflow_policy import NodeflowPolicy
from tests.realk8s.admission import NOT_CHECKED, Admission, Issue, crd

CRD = crd("nodeflow.io_nodeflowpolicies.yaml")

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


def test_crd_names_scope_version_and_columns(admission: Admission) -> None:
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
    # every column's JSONPath selects something of the example, in the server's Table (priority ones included)
    table = admission.table(GOOD)
    [row] = table["rows"]
    cells = dict(zip([c["name"] for c in table["columnDefinitions"]], row["cells"], strict=True))
    for name in ("NodePools", "Resources", "Cluster$/h", "Pauses", "Limits", "NodePool$/h", "Namespace$/h"):
        assert name in columns
        assert cells[name] not in (None, "", "<none>"), (name, cells)


def test_the_good_object_is_admitted_by_both(admission: Admission) -> None:
    assert admission.create(GOOD) == []
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
def test_each_cel_rule_refuses_its_bad_object(spec: dict[str, Any], message: str, admission: Admission) -> None:
    obj = with_spec(**spec)
    [issue] = admission.create(obj)  # the rule's, and nothing of the OpenAPI schema
    assert issue.reason == "FieldValueInvalid"
    assert message in issue.detail
    assert not model_valid(obj)


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
def test_model_and_crd_agree(spec: dict[str, Any], admission: Admission) -> None:
    obj = with_spec(**spec)
    issues = admission.create(obj)
    assert model_valid(obj) == (issues == []), (spec, issues)


def test_a_pause_window_longer_than_366_days_is_refused_naming_the_field(admission: Admission) -> None:
    issues = admission.create(with_spec(pauses=[{**WINDOW, "duration": "8785h"}]))
    assert issues == [
        Issue("spec.pauses[0].duration", "FieldValueInvalid", "a pause window lasts at most 8784h (366 days)")
    ]
    # the reviewer's durations: too many digits for the pattern (so CEL never parses past Go's range)
    for duration in ("99999999999h", "20000000h"):
        [issue] = admission.create(with_spec(pauses=[{**WINDOW, "duration": duration}]))
        assert (issue.field, issue.reason) == ("spec.pauses[0].duration", "FieldValueInvalid")
        assert "in body should match" in issue.detail


def test_a_duplicate_in_a_list_is_refused_by_the_list_type(admission: Admission) -> None:
    issues = admission.create(with_spec(nodePoolAccess=[{**POOL, "nodePools": ["gpu", "gpu"]}]))
    assert issues == [Issue("spec.nodePoolAccess[0].nodePools[1]", "FieldValueDuplicate", 'Duplicate value: "gpu"')]
    issues = admission.create(with_spec(pauses=[WINDOW, WINDOW]))
    assert issues == [Issue("spec.pauses[1]", "FieldValueDuplicate", 'Duplicate value: {"name":"w"}')]


def test_only_a_blocking_error_skips_the_cel_rules(admission: Admission) -> None:
    """The server runs the CEL rules with the OpenAPI checks, unless an error is blocking (a missing required field,
    a value outside its enum, a string too long): then it skips them and adds a cause without a field saying so.
    (The old imitation skipped them after any schema error, silently.)"""
    issues = admission.create(with_spec(pauses=[{**WINDOW, "name": "Bad Name", "disruption": False}]))
    assert sorted(issue.field for issue in issues) == ["spec.pauses[0]", "spec.pauses[0].name"]
    assert any("a window must pause provisioning and/or disruption" in issue.detail for issue in issues)
    issues = admission.create(
        with_spec(costCeilings={"namespaces": [{"name": "a"}]}, pauses=[{**WINDOW, "disruption": False}])
    )
    assert issues == [
        Issue("spec.costCeilings.namespaces[0].maxPricePerHour", "FieldValueRequired", "Required value"),
        Issue("", "FieldValueInvalid", NOT_CHECKED),
    ]
