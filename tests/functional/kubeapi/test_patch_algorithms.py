"""The patch and selector algorithms on their own (RFC examples and Kubernetes merge-key rules)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kubeapi.patch import PatchError, json_merge_patch, json_patch, strategic_merge_patch
from tests.kubeapi.selectors import SelectorError, labels_match, parse_label_selector

# RFC 7386 appendix A
RFC7386_CASES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC7386_CASES)
def test_json_merge_patch_rfc7386(target: Any, patch: Any, expected: Any) -> None:
    assert json_merge_patch(target, patch) == expected


def test_json_patch_move_copy_and_errors() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "x"}
    out = json_patch(
        doc,
        [
            {"op": "copy", "from": "/a/b/0", "path": "/a/b/-"},
            {"op": "move", "from": "/c", "path": "/d"},
            {"op": "add", "path": "/a/b/0", "value": 0},
            {"op": "test", "path": "/a/b", "value": [0, 1, 2, 1]},
        ],
    )
    assert out == {"a": {"b": [0, 1, 2, 1]}, "d": "x"}
    assert doc == {"a": {"b": [1, 2]}, "c": "x"}  # the input is not mutated
    with pytest.raises(PatchError) as exc:
        json_patch(doc, [{"op": "replace", "path": "/missing", "value": 1}])
    assert exc.value.code == 422
    with pytest.raises(PatchError) as exc:
        json_patch(doc, {"op": "add"})
    assert exc.value.code == 400


def test_strategic_merge_rules() -> None:
    pod = {
        "metadata": {"finalizers": ["a"], "labels": {"x": "1"}},
        "spec": {
            "containers": [{"name": "app", "image": "a:1", "ports": [{"containerPort": 80}]}],
            "tolerations": [{"key": "t1"}],
        },
    }
    out = strategic_merge_patch(
        pod,
        {
            "metadata": {"finalizers": ["b"], "labels": {"x": None, "y": "2"}},
            "spec": {
                "containers": [{"name": "app", "ports": [{"containerPort": 443}]}, {"name": "side", "image": "s"}],
                "tolerations": [{"key": "t2"}],
            },
        },
    )
    assert out["metadata"] == {"finalizers": ["a", "b"], "labels": {"y": "2"}}
    assert out["spec"]["containers"] == [
        {"name": "app", "image": "a:1", "ports": [{"containerPort": 80}, {"containerPort": 443}]},
        {"name": "side", "image": "s"},
    ]
    assert out["spec"]["tolerations"] == [{"key": "t2"}]  # no patch strategy: replaced
    replaced = strategic_merge_patch(pod, {"spec": {"containers": [{"$patch": "replace"}, {"name": "only"}]}})
    assert replaced["spec"]["containers"] == [{"name": "only"}]
    whole = strategic_merge_patch(pod, {"metadata": {"$patch": "replace", "name": "n"}})
    assert whole["metadata"] == {"name": "n"}
    with pytest.raises(PatchError):
        strategic_merge_patch(pod, {"spec": {"containers": [{"image": "no-name"}]}})


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("a=b", {"a": "b"}, True),
        ("a=b", {}, False),
        ("a!=b", {}, True),
        ("a in (b, c)", {"a": "c"}, True),
        ("a notin (b,c)", {"a": "d"}, True),
        ("a notin (b,c)", {}, True),
        ("a,!b", {"a": "1"}, True),
        ("a,!b", {"a": "1", "b": "2"}, False),
        ("x.io/k==v,a in (1)", {"x.io/k": "v", "a": "1"}, True),
        ("", {"anything": "x"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert labels_match(parse_label_selector(selector), {"metadata": {"labels": labels}}) is matches


@pytest.mark.parametrize("selector", ["a in (b", "=b", "a=b,", "a b", "a=%"])
def test_bad_label_selectors(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(selector)
