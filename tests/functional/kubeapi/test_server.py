"""The test API server, driven through the official kubernetes client."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from tests.kubeapi import KubeAPIServer

NODECLAIM_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "nodeclaims.karpenter.sh"},
    "spec": {
        "group": "karpenter.sh",
        "names": {"kind": "NodeClaim", "listKind": "NodeClaimList", "plural": "nodeclaims", "singular": "nodeclaim"},
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["nodeClassRef"],
                                "properties": {
                                    "nodeClassRef": {
                                        "type": "object",
                                        "properties": {
                                            "group": {"type": "string"},
                                            "kind": {"type": "string"},
                                            "name": {"type": "string", "minLength": 1},
                                        },
                                    },
                                    "requirements": {
                                        "type": "array",
                                        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                    },
                                    "expireAfter": {"x-kubernetes-int-or-string": True},
                                },
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "selectableFields": [{"jsonPath": ".spec.color"}],
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            }
        ],
    },
}


@pytest.fixture
def api(kubeapi: KubeAPIServer) -> Iterator[client.ApiClient]:
    api_client = kubeapi.api_client()
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def custom(kubeapi: KubeAPIServer, api: client.ApiClient) -> client.CustomObjectsApi:
    kubeapi.register_crd(NODECLAIM_CRD)
    kubeapi.register_crd(WIDGET_CRD)
    return client.CustomObjectsApi(api)


def pod(name: str, labels: dict[str, str] | None = None, node: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "app", "image": "nginx"}], **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def node(name: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": {"taints": taints or []}}


def nodeclaim(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, **extra},
    }


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body = json.loads(exc.value.body)
    assert body["kind"] == "Status"
    assert body["code"] == exc.value.status
    return body


def make_running(core: client.CoreV1Api, name: str, ready: bool = True, namespace: str = "default") -> None:
    core.patch_namespaced_pod_status(
        name,
        namespace,
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            }
        },
    )


# ---------------------------------------------------------------------------- CRUD


def test_crud_and_errors(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod("web", {"app": "web"}))
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert created.metadata.generation == 1
    assert created.status.phase == "Pending"  # status is reset on create, like the real server
    assert created.status.qos_class == "BestEffort"

    got = core.read_namespaced_pod("web", "default")
    assert got.metadata.resource_version == created.metadata.resource_version

    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("default", pod("web"))
    assert exc.value.status == 409
    assert status_of(exc)["reason"] == "AlreadyExists"
    assert status_of(exc)["message"] == 'pods "web" already exists'

    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod("missing", "default")
    assert exc.value.status == 404
    assert status_of(exc)["details"] == {"name": "missing", "kind": "pods"}

    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("default", {"metadata": {}, "spec": {"containers": [{"name": "a", "image": "b"}]}})
    assert exc.value.status == 422
    body = status_of(exc)
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"

    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("default", {"metadata": {"name": "nocontainers"}, "spec": {"containers": []}})
    assert exc.value.status == 422
    assert status_of(exc)["details"]["causes"][0]["field"] == "spec.containers"

    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("default", pod("Bad_Name"))
    assert exc.value.status == 422

    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("nowhere", pod("p"))
    assert exc.value.status == 404
    assert status_of(exc)["message"] == 'namespaces "nowhere" not found'

    deleted = core.delete_namespaced_pod("web", "default")
    assert deleted.metadata.name == "web"
    with pytest.raises(ApiException) as exc:
        core.delete_namespaced_pod("web", "default")
    assert exc.value.status == 404


def test_generate_name_and_global_resource_version(core: client.CoreV1Api, api: client.ApiClient) -> None:
    a = core.create_namespaced_config_map("default", {"metadata": {"generateName": "cfg-"}, "data": {"k": "v"}})
    b = core.create_namespaced_config_map("default", {"metadata": {"generateName": "cfg-"}})
    assert a.metadata.name.startswith("cfg-")
    assert len(a.metadata.name) == len("cfg-") + 5
    assert a.metadata.name != b.metadata.name
    n = core.create_node(node("n1"))
    d = client.AppsV1Api(api).create_namespaced_deployment("default", deployment("d"))
    rvs = [int(x.metadata.resource_version) for x in (a, b, n, d)]
    assert rvs == sorted(rvs)
    assert len(set(rvs)) == 4
    listed = core.list_namespaced_config_map("default")
    assert int(listed.metadata.resource_version) >= rvs[-1]


def deployment(name: str, replicas: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1"}, {"name": "side", "image": "busybox"}]},
            },
        },
    }


def test_update_conflict_generation_and_status_isolation(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    d = apps.create_namespaced_deployment("default", deployment("web"))
    stale = d.metadata.resource_version

    body = apps.read_namespaced_deployment("web", "default").to_dict()
    body["metadata"]["labels"] = {"tier": "front"}
    updated = apps.replace_namespaced_deployment("web", "default", _camel(api, body))
    assert updated.metadata.generation == 1  # metadata-only change
    assert int(updated.metadata.resource_version) > int(stale)

    body["metadata"]["resource_version"] = stale
    body["spec"]["replicas"] = 5
    with pytest.raises(ApiException) as exc:
        apps.replace_namespaced_deployment("web", "default", _camel(api, body))
    assert exc.value.status == 409
    assert status_of(exc)["reason"] == "Conflict"
    assert "the object has been modified" in status_of(exc)["message"]

    patched = apps.patch_namespaced_deployment("web", "default", {"spec": {"replicas": 5}, "status": {"replicas": 9}})
    assert patched.metadata.generation == 2
    assert patched.status is None or patched.status.replicas is None  # main resource ignores status

    st = apps.patch_namespaced_deployment_status("web", "default", {"status": {"replicas": 5}, "spec": {"replicas": 1}})
    assert st.status.replicas == 5
    assert st.spec.replicas == 5  # status subresource ignores spec
    assert st.metadata.generation == 2

    # a no-op write does not bump the resourceVersion
    again = apps.patch_namespaced_deployment("web", "default", {"spec": {"replicas": 5}})
    assert again.metadata.resource_version == st.metadata.resource_version

    with pytest.raises(ApiException) as exc:
        apps.replace_namespaced_deployment("other", "default", _camel(api, body))
    assert exc.value.status == 400


def _camel(api: client.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    """A to_dict() (snake_case) model back into API JSON."""
    model = client.V1Deployment.from_dict(body)
    result: dict[str, Any] = api.sanitize_for_serialization(model)
    return result


# ---------------------------------------------------------------------------- patch


def test_strategic_merge_node_taints_by_key(core: client.CoreV1Api) -> None:
    core.create_node(
        node("n1", [{"key": "a", "value": "1", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}])
    )
    n = core.patch_node("n1", {"spec": {"taints": [{"key": "c", "effect": "NoSchedule"}]}})
    assert [t.key for t in n.spec.taints] == ["a", "b", "c"]
    n = core.patch_node("n1", {"spec": {"taints": [{"key": "a", "value": "2", "effect": "NoSchedule"}]}})
    assert [(t.key, t.value) for t in n.spec.taints] == [("a", "2"), ("b", None), ("c", None)]
    n = core.patch_node("n1", {"spec": {"taints": [{"key": "b", "$patch": "delete"}]}})
    assert [t.key for t in n.spec.taints] == ["a", "c"]
    n = core.patch_node("n1", {"metadata": {"labels": {"x": "y", "kubernetes.io/hostname": None}}})
    assert n.metadata.labels == {"x": "y"}
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", {"spec": {"taints": [{"key": "bad", "effect": "Sometimes"}]}})
    assert exc.value.status == 422


def test_strategic_merge_pod_conditions_containers_finalizers(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("p", tolerations=[{"key": "a", "operator": "Exists"}]))
    make_running(core, "p", ready=False)
    p = core.patch_namespaced_pod_status(
        "p", "default", {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    )
    assert sorted((c.type, c.status) for c in p.status.conditions) == [("PodScheduled", "True"), ("Ready", "False")]
    p = core.patch_namespaced_pod_status(
        "p", "default", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert {c.type: c.status for c in p.status.conditions} == {"PodScheduled": "True", "Ready": "True"}
    assert p.status.phase == "Running"

    # containers merge by name (image is mutable on a pod)
    p = core.patch_namespaced_pod("p", "default", {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}})
    assert [(c.name, c.image) for c in p.spec.containers] == [("app", "nginx:2")]
    # finalizers merge as a set, tolerations are replaced wholesale
    core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": ["a/x"]}})
    p = core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": ["a/y", "a/x"]}})
    assert p.metadata.finalizers == ["a/x", "a/y"]
    p = core.patch_namespaced_pod("p", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"]}})
    assert p.metadata.finalizers == ["a/y"]
    p = core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": None}})
    assert p.metadata.finalizers is None

    # changing an immutable pod field is rejected
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", "default", {"spec": {"nodeName": "elsewhere"}})
    assert exc.value.status == 422


def test_strategic_merge_deployment_containers_by_name(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", deployment("web"))
    d = apps.patch_namespaced_deployment(
        "web", "default", {"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "busybox:2"}]}}}}
    )
    assert [(c.name, c.image) for c in d.spec.template.spec.containers] == [("app", "nginx:1"), ("side", "busybox:2")]
    assert d.metadata.generation == 2
    d = apps.patch_namespaced_deployment(
        "web", "default", {"spec": {"template": {"spec": {"containers": [{"name": "app", "$patch": "delete"}]}}}}
    )
    assert [c.name for c in d.spec.template.spec.containers] == ["side"]


def test_json_patch_and_test_op(core: client.CoreV1Api) -> None:
    core.create_node(node("n1", [{"key": "a", "effect": "NoSchedule"}]))
    n = core.patch_node(
        "n1",
        [
            {"op": "test", "path": "/spec/taints/0/key", "value": "a"},
            {"op": "add", "path": "/spec/taints/-", "value": {"key": "b", "effect": "NoExecute"}},
            {"op": "add", "path": "/metadata/labels/topology.kubernetes.io~1zone", "value": "us-east-1a"},
            {"op": "add", "path": "/spec/unschedulable", "value": True},
        ],
    )
    assert [t.key for t in n.spec.taints] == ["a", "b"]
    assert n.metadata.labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert n.spec.unschedulable is True
    n = core.patch_node("n1", [{"op": "remove", "path": "/spec/taints/0"}])
    assert [t.key for t in n.spec.taints] == ["b"]

    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", [{"op": "test", "path": "/spec/taints/0/key", "value": "a"}])
    assert exc.value.status == 422
    assert status_of(exc)["reason"] == "Invalid"
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", [{"op": "remove", "path": "/spec/nothing"}])
    assert exc.value.status == 422
    # stale resourceVersion through a patch
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", {"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": False}})
    assert exc.value.status == 409


def test_custom_resource_merge_patch_and_415(custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object(
        "karpenter.sh", "v1", "nodeclaims", nodeclaim("nc-1", requirements=[{"key": "a"}])
    )
    patched = custom.patch_cluster_custom_object(
        "karpenter.sh",
        "v1",
        "nodeclaims",
        "nc-1",
        {"metadata": {"labels": {"karpenter.sh/nodepool": "default"}}, "spec": {"requirements": [{"key": "b"}]}},
    )
    assert patched["metadata"]["labels"] == {"karpenter.sh/nodepool": "default"}
    assert patched["spec"]["requirements"] == [{"key": "b"}]  # merge patch replaces lists
    assert patched["metadata"]["generation"] == 2

    with pytest.raises(ApiException) as exc:
        custom.patch_cluster_custom_object(
            "karpenter.sh",
            "v1",
            "nodeclaims",
            "nc-1",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert exc.value.status == 415
    assert status_of(exc)["reason"] == "UnsupportedMediaType"

    patched = custom.patch_cluster_custom_object(
        "karpenter.sh",
        "v1",
        "nodeclaims",
        "nc-1",
        [{"op": "add", "path": "/spec/expireAfter", "value": "720h"}],
        _content_type="application/json-patch+json",  # CustomObjectsApi defaults to merge patch, even for lists
    )
    assert patched["spec"]["expireAfter"] == "720h"


def test_custom_resource_status_subresource_schema_and_put(custom: client.CustomObjectsApi) -> None:
    created = custom.create_cluster_custom_object(
        "karpenter.sh", "v1", "nodeclaims", {**nodeclaim("nc"), "status": {"providerID": "aws:///x"}, "junk": 1}
    )
    assert "status" not in created  # status is dropped on create with a status subresource
    assert "junk" not in created  # unknown fields are pruned
    st = custom.patch_cluster_custom_object_status(
        "karpenter.sh",
        "v1",
        "nodeclaims",
        "nc",
        {
            "status": {"providerID": "aws:///i-1", "conditions": [{"type": "Launched", "status": "True"}]},
            "spec": {"nodeClassRef": {"name": "changed"}},
        },
    )
    assert st["status"]["providerID"] == "aws:///i-1"
    assert st["spec"]["nodeClassRef"]["name"] == "default"
    assert st["metadata"]["generation"] == 1

    obj = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "nc")
    obj["status"] = {"providerID": "overwritten"}
    obj["spec"]["expireAfter"] = "Never"
    replaced = custom.replace_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "nc", obj)
    assert replaced["status"]["providerID"] == "aws:///i-1"  # main resource ignores status
    assert replaced["metadata"]["generation"] == 2

    obj = dict(replaced)
    obj["metadata"] = {k: v for k, v in replaced["metadata"].items() if k != "resourceVersion"}
    with pytest.raises(ApiException) as exc:
        custom.replace_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "nc", obj)
    assert exc.value.status == 422  # custom resources need metadata.resourceVersion on update

    with pytest.raises(ApiException) as exc:
        custom.create_cluster_custom_object(
            "karpenter.sh", "v1", "nodeclaims", {**nodeclaim("bad"), "spec": {"expireAfter": 1.5}}
        )
    assert exc.value.status == 422
    fields = {c["field"] for c in status_of(exc)["details"]["causes"]}
    assert fields == {"spec.nodeClassRef", "spec.expireAfter"}


def test_finalizers_and_deletion_timestamp(custom: client.CustomObjectsApi) -> None:
    body = nodeclaim("nc")
    body["metadata"]["finalizers"] = ["karpenter.sh/termination"]
    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", body)
    deleting = custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "nc")
    assert deleting["metadata"]["deletionTimestamp"]
    got = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "nc")
    assert got["metadata"]["deletionTimestamp"] == deleting["metadata"]["deletionTimestamp"]
    # deleting again is idempotent
    custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "nc")

    with pytest.raises(ApiException) as exc:
        custom.patch_cluster_custom_object(
            "karpenter.sh",
            "v1",
            "nodeclaims",
            "nc",
            {"metadata": {"finalizers": ["karpenter.sh/termination", "other/x"]}},
        )
    assert exc.value.status == 422
    # deletionTimestamp cannot be cleared by an update
    cleared = custom.patch_cluster_custom_object(
        "karpenter.sh", "v1", "nodeclaims", "nc", {"metadata": {"deletionTimestamp": None, "labels": {"a": "b"}}}
    )
    assert cleared["metadata"]["deletionTimestamp"]

    gone = custom.patch_cluster_custom_object(
        "karpenter.sh", "v1", "nodeclaims", "nc", {"metadata": {"finalizers": None}}
    )
    assert gone["metadata"]["name"] == "nc"
    with pytest.raises(ApiException) as exc:
        custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "nc")
    assert exc.value.status == 404


def test_delete_preconditions_and_status_body(core: client.CoreV1Api) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    with pytest.raises(ApiException) as exc:
        core.delete_namespaced_config_map("c", "default", body={"preconditions": {"uid": "nope"}})
    assert exc.value.status == 409
    result = core.delete_namespaced_config_map("c", "default", body={"preconditions": {"uid": cm.metadata.uid}})
    assert result["kind"] == "Status"
    assert result["status"] == "Success"


def test_namespace_deletion_cascades(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_pod("team", pod("a"))
    core.create_namespaced_config_map("team", {"metadata": {"name": "c"}})
    ns = core.delete_namespace("team")
    assert ns["metadata"]["name"] == "team"
    assert core.list_namespaced_pod("team").items == []
    with pytest.raises(ApiException) as exc:
        core.read_namespace("team")
    assert exc.value.status == 404


# ---------------------------------------------------------------------------- selectors and paging


def test_label_and_field_selectors(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "other"}})
    core.create_namespaced_pod("default", pod("a", {"app": "web", "tier": "front"}, node="n1"))
    core.create_namespaced_pod("default", pod("b", {"app": "web", "tier": "back"}))
    core.create_namespaced_pod("default", pod("c", {"app": "db"}, node="n2"))
    core.create_namespaced_pod("other", pod("d", {"app": "web"}, node="n1"))
    make_running(core, "a")

    def names(**kw: Any) -> list[str]:
        return sorted(p.metadata.name for p in core.list_pod_for_all_namespaces(**kw).items)

    assert names(label_selector="app=web") == ["a", "b", "d"]
    assert names(label_selector="app==web,tier!=front") == ["b", "d"]
    assert names(label_selector="tier in (front,back)") == ["a", "b"]
    assert names(label_selector="app notin (web)") == ["c"]
    assert names(label_selector="tier") == ["a", "b"]
    assert names(label_selector="!tier") == ["c", "d"]
    assert names(field_selector="spec.nodeName=n1") == ["a", "d"]
    assert names(field_selector="spec.nodeName=") == ["b"]
    assert names(field_selector="status.phase=Running") == ["a"]
    assert names(field_selector="status.phase!=Running,metadata.namespace=default") == ["b", "c"]
    assert names(field_selector="metadata.name=c") == ["c"]
    assert [p.metadata.name for p in core.list_namespaced_pod("other").items] == ["d"]

    with pytest.raises(ApiException) as exc:
        core.list_pod_for_all_namespaces(field_selector="spec.unknown=x")
    assert exc.value.status == 400
    assert status_of(exc)["message"] == "field label not supported: spec.unknown"
    with pytest.raises(ApiException) as exc:
        core.list_pod_for_all_namespaces(label_selector="a in (b")
    assert exc.value.status == 400

    core.create_node(node("n1"))
    core.create_node({"metadata": {"name": "n2"}, "spec": {"unschedulable": True}})
    assert [n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=true").items] == ["n2"]


def test_custom_resource_selectable_fields(custom: client.CustomObjectsApi) -> None:
    for name, color in (("w1", "red"), ("w2", "blue")):
        custom.create_namespaced_custom_object(
            "example.com",
            "v1",
            "default",
            "widgets",
            {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"color": color}},
        )
    listed = custom.list_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", field_selector="spec.color=red"
    )
    assert [w["metadata"]["name"] for w in listed["items"]] == ["w1"]
    with pytest.raises(ApiException) as exc:
        custom.list_cluster_custom_object("example.com", "v1", "widgets", field_selector="spec.size=1")
    assert exc.value.status == 400


def test_list_paging(kubeapi: KubeAPIServer, core: client.CoreV1Api) -> None:
    for i in range(7):
        core.create_node(node(f"n{i}"))
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = core.list_node(limit=3, _continue=token) if token else core.list_node(limit=3)
        pages += 1
        seen.extend(n.metadata.name for n in page.items)
        if pages == 1:
            assert page.metadata.remaining_item_count == 4
        token = page.metadata._continue
        if not token:
            break
    assert seen == [f"n{i}" for i in range(7)]
    assert pages == 3
    assert kubeapi.count("GET", "/api/v1/nodes", "limit=3") == 3
    with pytest.raises(ApiException) as exc:
        core.list_node(limit=1, _continue="garbage!")
    assert exc.value.status == 400


# ---------------------------------------------------------------------------- watch


def test_watch_initial_then_live_events(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("a", {"app": "web"}))
    events: list[tuple[str, str]] = []
    done = threading.Event()

    def consume() -> None:
        w = watch.Watch()
        for ev in w.stream(core.list_namespaced_pod, "default", label_selector="app=web", timeout_seconds=5):
            events.append((ev["type"], ev["object"].metadata.name))
            if len(events) == 4:
                w.stop()
        done.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    time.sleep(0.3)
    core.create_namespaced_pod("default", pod("b", {"app": "web"}))
    core.create_namespaced_pod("default", pod("ignored", {"app": "db"}))
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"app": "moved"}}})  # leaves the selection
    core.delete_namespaced_pod("b", "default")
    assert done.wait(5)
    assert events == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("DELETED", "b")]


def test_watch_resume_from_resource_version_and_410(kubeapi: KubeAPIServer, core: client.CoreV1Api) -> None:
    listed = core.list_node()
    rv = listed.metadata.resource_version
    core.create_node(node("n1"))
    core.patch_node("n1", {"metadata": {"labels": {"x": "y"}}})
    w = watch.Watch()
    seen = []
    for ev in w.stream(core.list_node, resource_version=rv, timeout_seconds=1):
        seen.append((ev["type"], ev["object"].metadata.name, ev["object"].metadata.labels.get("x")))
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "n1", None), ("MODIFIED", "n1", "y")]

    kubeapi.compact()
    with pytest.raises(ApiException) as exc:
        for _ in watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=1):
            pass
    assert exc.value.status == 410


def test_watch_raw_error_event_and_timeout(kubeapi: KubeAPIServer, core: client.CoreV1Api) -> None:
    import urllib.request

    core.create_node(node("n1"))
    kubeapi.compact()
    with urllib.request.urlopen(f"{kubeapi.url}/api/v1/nodes?watch=true&resourceVersion=1&timeoutSeconds=1") as r:
        assert r.headers["Connection"] == "close"
        line = json.loads(r.readline())
    assert line["type"] == "ERROR"
    assert line["object"]["code"] == 410
    assert line["object"]["reason"] == "Expired"

    start = time.monotonic()
    events = list(watch.Watch().stream(core.list_node, timeout_seconds=1))
    assert [e["type"] for e in events] == ["ADDED"]
    assert time.monotonic() - start < 3


# ---------------------------------------------------------------------------- eviction and binding


def pdb(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}


def eviction(name: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}}


def test_eviction_respects_pdb(core: client.CoreV1Api, api: client.ApiClient) -> None:
    policy = client.PolicyV1Api(api)
    for name in ("a", "b"):
        core.create_namespaced_pod("default", pod(name, {"app": "web"}, node="n1"))
        make_running(core, name)
    policy.create_namespaced_pod_disruption_budget("default", pdb("web", minAvailable=2))

    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("a", "default", eviction("a"))
    assert exc.value.status == 429
    body = status_of(exc)
    assert body["reason"] == "TooManyRequests"
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs 2 healthy pods and has 2 currently" in body["details"]["causes"][0]["message"]
    core.read_namespaced_pod("a", "default")  # still there

    core.create_namespaced_pod("default", pod("c", {"app": "web"}, node="n1"))
    make_running(core, "c")
    core.create_namespaced_pod_eviction("a", "default", eviction("a"))
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod("a", "default")
    assert exc.value.status == 404
    # now 2 healthy of minAvailable 2 again
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("b", "default", eviction("b"))
    assert exc.value.status == 429

    # pods without a PDB, pending pods and missing pods
    core.create_namespaced_pod("default", pod("lonely", {"app": "other"}, node="n1"))
    make_running(core, "lonely")
    core.create_namespaced_pod_eviction("lonely", "default", eviction("lonely"))
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("lonely", "default", eviction("lonely"))
    assert exc.value.status == 404


def test_eviction_max_unavailable_percent_and_finalizers(core: client.CoreV1Api, api: client.ApiClient) -> None:
    policy = client.PolicyV1Api(api)
    for name in ("a", "b", "c", "d"):
        core.create_namespaced_pod("default", pod(name, {"app": "web"}, node="n1"))
        make_running(core, name)
    core.patch_namespaced_pod("a", "default", {"metadata": {"finalizers": ["example.com/hold"]}})
    policy.create_namespaced_pod_disruption_budget("default", pdb("web", maxUnavailable="25%"))
    core.create_namespaced_pod_eviction("a", "default", eviction("a"))
    terminating = core.read_namespaced_pod("a", "default")  # finalizer keeps it, marked for deletion
    assert terminating.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as exc:  # a terminating pod is not healthy: budget used up
        core.create_namespaced_pod_eviction("b", "default", eviction("b"))
    assert exc.value.status == 429
    # an unhealthy pod may be evicted while the budget is healthy? (3 healthy < desired 3 is false -> healthy)
    make_running(core, "b", ready=False)
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("c", "default", eviction("c"))
    assert exc.value.status == 429


def test_binding(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("p"))
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
    # Like the real server, binding answers 201 with a Status, which the client cannot turn into a V1Binding
    # (kubernetes-client/python#547): read it raw.
    resp = core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data)["status"] == "Success"
    p = core.read_namespaced_pod("p", "default")
    assert p.spec.node_name == "n1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in p.status.conditions)
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    assert exc.value.status == 409
    assert 'is already assigned to node "n1"' in status_of(exc)["message"]


# ---------------------------------------------------------------------------- misc API surface


def test_discovery(kubeapi: KubeAPIServer, api: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    groups = client.ApisApi(api).get_api_versions()
    names = {g.name for g in groups.groups}
    assert {
        "apps",
        "policy",
        "storage.k8s.io",
        "batch",
        "coordination.k8s.io",
        "events.k8s.io",
        "karpenter.sh",
    } <= names
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    core_resources = {r.name: r for r in client.CoreV1Api(api).get_api_resources().resources}
    assert core_resources["pods"].namespaced is True
    assert core_resources["nodes"].namespaced is False
    assert {"pods/status", "pods/eviction", "pods/binding", "nodes/status"} <= set(core_resources)
    karpenter = client.CustomObjectsApi(api).get_api_resources("karpenter.sh", "v1")
    assert [r.name for r in karpenter.resources] == ["nodeclaims", "nodeclaims/status"]
    assert client.PolicyV1Api(api).get_api_resources().resources[0].kind == "PodDisruptionBudget"
    assert client.VersionApi(api).get_code().major == "1"
    assert client.AppsApi(api).get_api_group().preferred_version.version == "v1"


def test_errors_for_bad_routes_and_methods(kubeapi: KubeAPIServer, api: client.ApiClient) -> None:
    import urllib.error
    import urllib.request

    def call(method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(
            f"{kubeapi.url}{path}", data=body, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    code, body = call("GET", "/apis/nope.example.com/v1/things")
    assert (code, body["reason"]) == (404, "NotFound")
    code, body = call("POST", "/api/v1/pods", b'{"metadata": {"name": "x"}}')
    assert (code, body["reason"]) == (405, "MethodNotAllowed")
    code, body = call("POST", "/api/v1/namespaces/default/pods", b"{not json")
    assert (code, body["reason"]) == (400, "BadRequest")
    code, body = call("PUT", "/api/v1/nodes", b"{}")
    assert (code, body["reason"]) == (405, "MethodNotAllowed")
    code, body = call("POST", "/api/v1/namespaces/default/configmaps", b'{"kind": "Secret", "metadata": {"name": "x"}}')
    assert code == 400


def test_events_core_and_events_k8s_io_share_storage(core: client.CoreV1Api, api: client.ApiClient) -> None:
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "ev1"},
            "eventTime": "2026-01-01T00:00:00.000000Z",  # EventsV1Event requires it client-side
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "FailedScheduling",
            "message": "no nodes",
            "type": "Warning",
        },
    )
    events_api = client.EventsV1Api(api)
    ev = events_api.read_namespaced_event("ev1", "default")
    assert ev.regarding.name == "p"
    assert ev.note == "no nodes"
    listed = core.list_namespaced_event("default", field_selector="involvedObject.name=p,reason=FailedScheduling")
    assert [e.metadata.name for e in listed.items] == ["ev1"]
    assert core.list_namespaced_event("default", field_selector="involvedObject.name=q").items == []
    events_api.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "ev2"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "nodeflow",
            "reportingInstance": "x",
            "action": "Launch",
            "reason": "Launched",
            "type": "Normal",
            "regarding": {"kind": "NodeClaim", "name": "nc"},
        },
    )
    assert core.read_namespaced_event("ev2", "default").involved_object.name == "nc"


def test_crd_created_through_the_api(kubeapi: KubeAPIServer, api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    crd = json.loads(json.dumps(WIDGET_CRD))
    crd["metadata"]["name"] = "gadgets.example.org"
    crd["spec"]["group"] = "example.org"
    crd["spec"]["names"] = {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"}
    crd["spec"]["scope"] = "Cluster"
    created = ext.create_custom_resource_definition(crd)
    assert any(c.type == "Established" and c.status == "True" for c in created.status.conditions)
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(
        "example.org", "v1", "gadgets", {"apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    )
    assert [
        g["metadata"]["name"] for g in custom.list_cluster_custom_object("example.org", "v1", "gadgets")["items"]
    ] == ["g"]

    bad = json.loads(json.dumps(crd))
    bad["metadata"]["name"] = "wrong.example.org"
    with pytest.raises(ApiException) as exc:
        ext.create_custom_resource_definition(bad)
    assert exc.value.status == 422

    ext.delete_custom_resource_definition("gadgets.example.org")
    with pytest.raises(ApiException) as exc:
        custom.list_cluster_custom_object("example.org", "v1", "gadgets")
    assert exc.value.status == 404


def test_builtin_kinds_roundtrip(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    storage = client.StorageV1Api(api)
    batch = client.BatchV1Api(api)
    coord = client.CoordinationV1Api(api)
    core.create_persistent_volume({"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "1Gi"}}})
    core.create_namespaced_persistent_volume_claim("default", {"metadata": {"name": "pvc"}, "spec": {}})
    core.create_namespaced_service("default", {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}})
    apps.create_namespaced_replica_set(
        "default", {"metadata": {"name": "rs"}, "spec": {"selector": {}, "template": {}}}
    )
    apps.create_namespaced_stateful_set(
        "default", {"metadata": {"name": "sts"}, "spec": {"selector": {}, "serviceName": "s", "template": {}}}
    )
    apps.create_namespaced_daemon_set("default", {"metadata": {"name": "ds"}, "spec": {"selector": {}, "template": {}}})
    storage.create_storage_class({"metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com"})
    storage.create_volume_attachment(
        {
            "metadata": {"name": "va"},
            "spec": {"attacher": "x", "nodeName": "n1", "source": {"persistentVolumeName": "pv"}},
        }
    )
    batch.create_namespaced_job(
        "default", {"metadata": {"name": "job"}, "spec": {"template": {"spec": {"containers": []}}}}
    )
    lease = coord.create_namespaced_lease(
        "kube-node-lease", {"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}}
    )
    assert lease.spec.holder_identity == "n1"
    assert core.list_persistent_volume().items[0].metadata.name == "pv"
    assert core.list_persistent_volume_claim_for_all_namespaces().items[0].metadata.name == "pvc"
    assert [s.metadata.name for s in core.list_namespaced_service("default").items] == ["svc"]
    assert apps.list_replica_set_for_all_namespaces().items[0].metadata.name == "rs"
    assert apps.list_stateful_set_for_all_namespaces().items[0].metadata.name == "sts"
    assert apps.list_daemon_set_for_all_namespaces().items[0].metadata.name == "ds"
    assert storage.list_storage_class().items[0].provisioner == "ebs.csi.aws.com"
    assert storage.list_volume_attachment().items[0].spec.node_name == "n1"
    assert batch.list_job_for_all_namespaces().items[0].metadata.name == "job"
    assert storage.delete_storage_class("gp3").metadata.name == "gp3"
    assert core.delete_persistent_volume("pv").metadata.name == "pv"


def test_reset_keeps_crds_and_request_log(
    kubeapi: KubeAPIServer, core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", nodeclaim("nc"))
    core.list_node()
    core.list_node()
    assert kubeapi.count("GET", "/api/v1/nodes") == 2
    assert ("GET", "/api/v1/nodes", "") in kubeapi.requests
    kubeapi.reset()
    assert kubeapi.requests == []
    assert custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"] == []
    assert sorted(n.metadata.name for n in core.list_namespace().items) == [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
    ]


def test_subprocess_uses_written_kubeconfig(kubeapi: KubeAPIServer, core: client.CoreV1Api, tmp_path: Path) -> None:
    core.create_node(node("from-parent"))
    path = kubeapi.write_kubeconfig(tmp_path / "kubeconfig")
    script = """
import sys
from kubernetes import client, config
config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
print(",".join(n.metadata.name for n in core.list_node().items))
core.create_namespaced_config_map("default", {"metadata": {"name": "from-child"}, "data": {"k": "v"}})
"""
    result = subprocess.run(
        [sys.executable, "-c", script, path], capture_output=True, text=True, timeout=20, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "from-parent"
    assert core.read_namespaced_config_map("from-child", "default").data == {"k": "v"}


def test_pdb_status_kept_current(core: client.CoreV1Api, api: client.ApiClient) -> None:
    policy = client.PolicyV1Api(api)
    policy.create_namespaced_pod_disruption_budget("default", pdb("web", maxUnavailable=1))
    for name in ("a", "b", "c"):
        core.create_namespaced_pod("default", pod(name, {"app": "web"}, node="n1"))
    st = policy.read_namespaced_pod_disruption_budget("web", "default").status
    assert (st.expected_pods, st.current_healthy, st.desired_healthy, st.disruptions_allowed) == (3, 0, 2, 0)
    for name in ("a", "b", "c"):
        make_running(core, name)
    st = policy.read_namespaced_pod_disruption_budget("web", "default").status
    assert (st.current_healthy, st.disruptions_allowed) == (3, 1)
    assert {c.type: c.status for c in st.conditions} == {"DisruptionAllowed": "True"}


def test_watch_custom_objects_and_bookmarks(kubeapi: KubeAPIServer, custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", nodeclaim("nc-1"))
    w = watch.Watch()
    events = list(
        w.stream(
            custom.list_cluster_custom_object,
            "karpenter.sh",
            "v1",
            "nodeclaims",
            timeout_seconds=1,
            allow_watch_bookmarks=True,
        )
    )
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[0]["object"]["metadata"]["name"] == "nc-1"
    assert w.resource_version == events[1]["object"]["metadata"]["resourceVersion"]
    assert kubeapi.count("GET", "/apis/karpenter.sh/v1/nodeclaims", "watch=true") == 1


def test_watch_list_initial_events_end(core: client.CoreV1Api) -> None:
    core.create_node(node("n1"))
    events = list(
        watch.Watch().stream(
            core.list_node,
            timeout_seconds=1,
            allow_watch_bookmarks=True,
            send_initial_events=True,
            resource_version_match="NotOlderThan",
        )
    )
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK", "BOOKMARK"]
    assert events[1]["raw_object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_dynamic_client_discovers_and_lists(api: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    from kubernetes.dynamic import DynamicClient

    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", nodeclaim("nc-1"))
    dyn = DynamicClient(api)
    nodeclaims = dyn.resources.get(api_version="karpenter.sh/v1", kind="NodeClaim")
    assert [i.metadata.name for i in nodeclaims.get().items] == ["nc-1"]
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    pods.create(body=pod("p"), namespace="default")
    assert pods.get(name="p", namespace="default").spec.containers[0].image == "nginx"


def test_seed_helpers_keep_status(kubeapi: KubeAPIServer, core: client.CoreV1Api) -> None:
    seeded = kubeapi.create({**pod("seeded", node="n1"), "status": {"phase": "Running"}})
    assert seeded["metadata"]["namespace"] == "default"
    assert core.read_namespaced_pod("seeded", "default").status.phase == "Running"
    assert kubeapi.get("v1", "Pod", "seeded", "default")["spec"]["nodeName"] == "n1"
    assert [p["metadata"]["name"] for p in kubeapi.objects("v1", "Pod")] == ["seeded"]


def test_karpenter_crds_default_and_prune(kubeapi: KubeAPIServer, api: client.ApiClient) -> None:
    import yaml

    crd_dir = Path(__file__).resolve().parents[3] / "agent" / "manifests" / "crds"
    crds = [d for f in sorted(crd_dir.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    if not any(c["spec"]["names"]["kind"] == "NodePool" for c in crds):
        pytest.skip("generated Karpenter CRDs not present")
    for crd in crds:
        kubeapi.register_crd(crd)
    custom = client.CustomObjectsApi(api)
    nodepool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                    "unknownField": True,
                }
            }
        },
    }
    created = custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", nodepool)
    assert created["spec"]["disruption"]["consolidationPolicy"] == "WhenEmptyOrUnderutilized"
    assert created["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}]
    assert created["spec"]["template"]["spec"]["expireAfter"] == "720h"
    assert "unknownField" not in created["spec"]["template"]["spec"]
    patched = custom.patch_cluster_custom_object(
        "karpenter.sh", "v1", "nodepools", "default", {"spec": {"disruption": {"consolidationPolicy": None}}}
    )
    assert patched["spec"]["disruption"]["consolidationPolicy"] == "WhenEmptyOrUnderutilized"  # defaulted again
    assert patched["metadata"]["generation"] == 1  # no effective spec change
    with pytest.raises(ApiException) as exc:
        custom.patch_cluster_custom_object(
            "karpenter.sh", "v1", "nodepools", "default", {"spec": {"disruption": {"consolidationPolicy": "Sometimes"}}}
        )
    assert exc.value.status == 422
    assert status_of(exc)["details"]["causes"][0]["field"] == "spec.disruption.consolidationPolicy"


def test_dry_run_persists_nothing(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "c"}, "data": {"a": "1"}}, dry_run="All"
    )
    assert created.metadata.name == "c"
    assert core.list_namespaced_config_map("default").items == []
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    assert core.patch_namespaced_config_map("c", "default", {"data": {"a": "2"}}, dry_run="All").data == {"a": "2"}
    core.delete_namespaced_config_map("c", "default", dry_run="All")
    assert core.read_namespaced_config_map("c", "default").data == {"a": "1"}


def test_create_defaults_status_reset_and_priority_admission(core: client.CoreV1Api, api: client.ApiClient) -> None:
    p = core.create_namespaced_pod(
        "default",
        pod(
            "p",
            priorityClassName="system-node-critical",
            containers=[{"name": "app", "image": "nginx:1.27", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
        ),
    )
    assert p.spec.priority == 2000001000
    assert p.spec.scheduler_name == "default-scheduler"
    assert p.spec.containers[0].resources.requests == {"cpu": "1", "memory": "1Gi"}
    assert p.status.qos_class == "Guaranteed"
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("default", pod("q", priorityClassName="nope"))
    assert exc.value.status == 403
    client.SchedulingV1Api(api).create_priority_class(
        {"metadata": {"name": "normal"}, "value": 1000, "globalDefault": True}
    )
    assert core.create_namespaced_pod("default", pod("r")).spec.priority == 1000

    d = client.AppsV1Api(api).create_namespaced_deployment("default", {**deployment("web"), "status": {"replicas": 7}})
    assert d.status is None or d.status.replicas is None  # status is not settable on create
    n = core.create_node({**node("n1"), "status": {"allocatable": {"cpu": "4"}}})
    assert n.status.allocatable == {"cpu": "4"}  # except for nodes


def test_concurrent_read_modify_write_with_conflict_retries(kubeapi: KubeAPIServer, core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "counter"}, "data": {"n": "0"}})
    conflicts = 0
    lock = threading.Lock()

    def bump(times: int) -> None:
        nonlocal conflicts
        api_client = kubeapi.api_client()
        local = client.CoreV1Api(api_client)
        try:
            for _ in range(times):
                while True:
                    cm = local.read_namespaced_config_map("counter", "default")
                    cm.data["n"] = str(int(cm.data["n"]) + 1)
                    try:
                        local.replace_namespaced_config_map("counter", "default", cm)
                        break
                    except ApiException as e:
                        if e.status != 409:
                            raise
                        with lock:
                            conflicts += 1
        finally:
            api_client.close()

    threads = [threading.Thread(target=bump, args=(10,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert core.read_namespaced_config_map("counter", "default").data == {"n": "40"}


def test_abandoned_watch_is_released(kubeapi: KubeAPIServer, core: client.CoreV1Api) -> None:
    before = threading.active_count()
    w = watch.Watch()
    for _ in w.stream(core.list_namespace):
        w.stop()  # close after the first initial event; the server must notice without a timeout
        break
    deadline = time.monotonic() + 3
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


def test_garbage_collection_of_dependents(core: client.CoreV1Api, custom: client.CustomObjectsApi) -> None:
    owner = custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", nodeclaim("nc"))
    ref = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "nc", "uid": owner["metadata"]["uid"]}
    core.create_node({**node("n1"), "metadata": {"name": "n1", "ownerReferences": [ref]}})
    other = core.create_node(node("n2"))
    two_owners = [ref, {"apiVersion": "v1", "kind": "Node", "name": "n2", "uid": other.metadata.uid}]
    core.create_namespaced_config_map("default", {"metadata": {"name": "shared", "ownerReferences": two_owners}})
    custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "nc")
    assert [n.metadata.name for n in core.list_node().items] == ["n2"]
    shared = core.read_namespaced_config_map("shared", "default")
    assert [r.name for r in shared.metadata.owner_references] == ["n2"]
    core.delete_node("n2", propagation_policy="Orphan")
    assert core.read_namespaced_config_map("shared", "default").metadata.owner_references is None  # orphaned


def test_fault_injection_hook(kubeapi: KubeAPIServer, core: client.CoreV1Api) -> None:
    from tests.kubeapi import APIError

    def throttle(method: str, path: str, query: dict[str, str]) -> None:
        if method == "GET" and path == "/api/v1/nodes":
            raise APIError(429, "TooManyRequests", "slow down", {"retryAfterSeconds": 1})

    kubeapi.before_request = throttle
    with pytest.raises(ApiException) as exc:
        core.list_node()
    assert exc.value.status == 429
    assert status_of(exc)["details"] == {"retryAfterSeconds": 1}
    assert core.list_namespace().items  # other requests pass


def test_more_validation(core: client.CoreV1Api, api: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    core.create_node({**node("n1"), "spec": {"providerID": "aws:///us-east-1a/i-1"}})
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", {"spec": {"providerID": "aws:///us-east-1a/i-2"}})
    assert exc.value.status == 422
    with pytest.raises(ApiException) as exc:
        client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
            "default", pdb("both", minAvailable=1, maxUnavailable=1)
        )
    assert exc.value.status == 422
    # a custom resource without a status subresource: status is an ordinary field and counts for generation
    w = custom.create_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"a": 1}},
    )
    assert w["status"] == {"a": 1}
    w = custom.patch_namespaced_custom_object("example.com", "v1", "default", "widgets", "w", {"status": {"a": 2}})
    assert w["metadata"]["generation"] == 2


def test_stop_ends_open_watches() -> None:
    server = KubeAPIServer().start()
    api_client = server.api_client()
    ended = threading.Event()

    def consume() -> None:
        try:
            for _ in watch.Watch().stream(client.CoreV1Api(api_client).list_node, timeout_seconds=60):
                pass
        except Exception:
            pass
        ended.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    time.sleep(0.2)
    start = time.monotonic()
    server.stop()
    assert time.monotonic() - start < 3
    assert ended.wait(3)
    api_client.close()
