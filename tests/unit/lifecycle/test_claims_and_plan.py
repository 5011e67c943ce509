"""NodeClaim names and manifests from plans, and how planning treats NodeClaims already made."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.api.core import Node, Pod
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.catalog.offline import load_offline
from nodeflow.cluster import ClusterState, nominated_pods
from nodeflow.lifecycle.claims import (
    batch_id,
    node_claim_manifest,
    node_claim_name,
    nodepool_hash,
    requirement_dicts,
)
from nodeflow.plan import plan
from nodeflow.scheduling.requirements import Requirement, Requirements

CATALOG = load_offline("us-east-1")


def pool(name: str = "default", **template_spec: Any) -> NodePool:
    return NodePool.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name, "uid": "pool-uid"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"team": "web"}, "annotations": {"note": "x"}},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
                        ],
                        **template_spec,
                    },
                }
            },
        }
    )


def node_class(subnet_zones: list[str] | None = None) -> EC2NodeClass:
    doc: dict[str, Any] = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "NodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"k": "v"}}],
            "securityGroupSelectorTerms": [{"tags": {"k": "v"}}],
        },
    }
    if subnet_zones:
        doc["status"] = {"subnets": [{"id": f"subnet-{z}", "zone": z} for z in subnet_zones]}
    return EC2NodeClass.model_validate(doc)


def pending_pod(name: str, cpu: str = "1", memory: str = "1Gi") -> Pod:
    return Pod.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {
                "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
            },
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        }
    )


def test_batch_id_ignores_order_and_duplicates() -> None:
    assert batch_id(["b", "a", "a"]) == batch_id(["a", "b"])
    assert batch_id(["a"]) != batch_id(["b"])


def test_names_are_karpenter_shaped_and_deterministic() -> None:
    name = node_claim_name("default", "batch1", ["ns/b", "ns/a"])
    assert name.startswith("default-")
    assert len(name) == len("default-") + 5
    assert name == node_claim_name("default", "batch1", ["ns/a", "ns/b"])
    assert name != node_claim_name("default", "batch2", ["ns/a", "ns/b"])
    assert name != node_claim_name("default", "batch1", ["ns/a"])
    assert len(node_claim_name("default", "batch1", ["ns/a"], length=10)) == len("default-") + 10


def test_requirement_dicts_round_trip_every_operator() -> None:
    reqs = Requirements(
        [
            Requirement.create("a", "In", ["x", "y"], min_values=2),
            Requirement.create("b", "NotIn", ["z"]),
            Requirement.create("c", "Exists"),
            Requirement.create("d", "DoesNotExist"),
            Requirement.create("e", "Gt", ["3"]).intersection(Requirement.create("e", "Lt", ["9"])),
        ]
    )
    dicts = requirement_dicts(reqs)
    assert {"key": "a", "operator": "In", "values": ["x", "y"], "minValues": 2} in dicts
    assert {"key": "e", "operator": "Gt", "values": ["3"]} in dicts
    assert {"key": "e", "operator": "Lt", "values": ["9"]} in dicts
    back = Requirements(
        Requirement.create(d["key"], d["operator"], d.get("values", ()), d.get("minValues")) for d in dicts
    )
    assert back == reqs


def test_manifest_carries_template_requirements_and_nominations() -> None:
    np = pool(expireAfter="24h")
    state = ClusterState(node_pools=[np], node_classes=[node_class()], pods=[pending_pod("a"), pending_pod("b")])
    nc = plan(state, CATALOG).node_claims[0]
    doc = node_claim_manifest(nc, np, "default-abcde", batch="b1")
    claim = NodeClaim.model_validate(doc)  # a valid NodeClaim
    assert claim.metadata.labels == {"team": "web", wk.LABEL_NODEPOOL: "default"}
    annotations = claim.metadata.annotations or {}
    assert annotations[wk.ANNOTATION_NODEPOOL_HASH] == nodepool_hash(np)
    assert json.loads(annotations[wk.ANNOTATION_NOMINATED_PODS]) == ["default/a", "default/b"]
    assert claim.metadata.finalizers == [wk.FINALIZER_TERMINATION]
    assert claim.metadata.owner_references
    assert claim.metadata.owner_references[0].name == "default"
    assert claim.spec.expire_after == "24h"
    keys = {r.key: r for r in claim.spec.requirements}
    assert keys[wk.LABEL_INSTANCE_TYPE].values
    assert len(keys[wk.LABEL_INSTANCE_TYPE].values) <= 60
    assert keys[wk.LABEL_INSTANCE_TYPE].values[0] in nc.instance_types
    assert keys["karpenter.k8s.aws/instance-category"].values == ["c", "m"]
    assert claim.spec.resources
    assert claim.spec.resources.requests
    assert nominated_pods(claim) == ("default/a", "default/b")
    tainted = pool(
        expireAfter="24h",
        taints=[{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
        startupTaints=[{"key": "cni", "effect": "NoSchedule"}],
    )
    claim = NodeClaim.model_validate(node_claim_manifest(nc, tainted, "default-abcde", batch="b1"))
    assert [t.key for t in claim.spec.taints or ()] == ["dedicated"]
    assert [t.key for t in claim.spec.startup_taints or ()] == ["cni"]


def test_a_taints_time_stays_in_the_manifest_as_json() -> None:
    """A template taint's timeAdded (a metav1.Time) is copied to the NodeClaim as the API server takes it."""
    timed = {"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
    np = pool(taints=[timed], startupTaints=[{**timed, "key": "s"}])
    nc = plan(ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=[pending_pod("a")]), CATALOG)
    doc = json.loads(json.dumps(node_claim_manifest(nc.node_claims[0], np, "default-abcde", batch="b1")))
    assert doc["spec"]["taints"] == [timed]
    assert doc["spec"]["startupTaints"] == [{**timed, "key": "s"}]


def test_nodepool_hash_changes_with_the_template_not_with_requirements() -> None:
    base = nodepool_hash(pool())
    assert base == nodepool_hash(pool())
    assert base != nodepool_hash(pool(taints=[{"key": "k", "effect": "NoSchedule"}]))
    other = pool()
    other.spec.template.spec.requirements.pop()
    assert nodepool_hash(other) == base


def edited(claim: NodeClaim, **changes: Any) -> NodeClaim:
    """A copy of ``claim`` with top-level ``metadata``/``status`` keys changed (models are frozen)."""
    doc = claim.model_dump(by_alias=True, exclude_none=True, mode="json")
    for part, values in changes.items():
        doc.setdefault(part, {}).update(values)
    return NodeClaim.model_validate(doc)


def _claim_from_plan(state: ClusterState, name: str = "default-aaaaa") -> NodeClaim:
    nc = plan(state, CATALOG).node_claims[0]
    return NodeClaim.model_validate(node_claim_manifest(nc, state.node_pools[0], name, batch="b1"))


def test_nominated_pods_are_not_provisioned_twice() -> None:
    pods = [pending_pod(f"p{i}") for i in range(3)]
    state = ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=pods)
    claim = _claim_from_plan(state)
    again = plan(
        ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=pods, node_claims=[claim]), CATALOG
    )
    assert again.node_claims == ()
    assert {e.name for e in again.existing} <= {claim.name}


def test_new_pods_do_not_fill_the_room_nominated_pods_took() -> None:
    pods = [pending_pod(f"p{i}", cpu="1") for i in range(4)]
    state = ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=pods)
    claim = _claim_from_plan(state)
    # pretend the claim's instance type has exactly the room of the planned requests
    bigger = [*pods, *(pending_pod(f"q{i}", cpu="1") for i in range(4))]
    again = plan(
        ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=bigger, node_claims=[claim]), CATALOG
    )
    placed_new = {p for nc in again.node_claims for p in nc.pods} | {p for e in again.existing for p in e.pods}
    assert {f"default/q{i}" for i in range(4)} <= placed_new
    nominated = set(nominated_pods(claim))
    assert nominated
    assert not (nominated & {p for nc in again.node_claims for p in nc.pods})
    assert not (nominated & {p for e in again.existing for p in e.pods})


def test_pods_of_a_deleted_claim_are_provisioned_again() -> None:
    pods = [pending_pod("p0")]
    state = ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=pods)
    claim = _claim_from_plan(state)
    deleting = edited(claim, metadata={"deletionTimestamp": "2026-01-01T00:00:00Z"})
    again = plan(
        ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=pods, node_claims=[deleting]), CATALOG
    )
    assert [p for nc in again.node_claims for p in nc.pods] == ["default/p0"]


def test_registered_uninitialized_node_keeps_its_nominations_and_ignores_startup_taints() -> None:
    pods = [pending_pod("p0")]
    np = pool(startupTaints=[{"key": "cni", "effect": "NoSchedule"}])
    state = ClusterState(node_pools=[np], node_classes=[node_class()], pods=pods)
    claim = _claim_from_plan(state)
    claim = edited(claim, status={"nodeName": "n1", "providerID": "aws:///us-east-1a/i-1"})
    node = Node.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {wk.LABEL_NODEPOOL: "default", **(claim.metadata.labels or {})}},
            "spec": {
                "providerID": "aws:///us-east-1a/i-1",
                "taints": [
                    {"key": "cni", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                ],
            },
            "status": {
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            },
        }
    )
    more = [*pods, pending_pod("p1", cpu="500m")]
    again = plan(
        ClusterState(node_pools=[np], node_classes=[node_class()], pods=more, node_claims=[claim], nodes=[node]),
        CATALOG,
    )
    assert again.node_claims == ()
    assert [(e.name, e.pods) for e in again.existing] == [("n1", ("default/p1",))]


def test_node_class_subnets_limit_zones() -> None:
    state = ClusterState(node_pools=[pool()], node_classes=[node_class(["us-east-1b"])], pods=[pending_pod("a")])
    nc = plan(state, CATALOG).node_claims[0]
    assert nc.zones == ("us-east-1b",)


def test_unavailable_offerings_are_avoided() -> None:
    state = ClusterState(node_pools=[pool()], node_classes=[node_class(["us-east-1a"])], pods=[pending_pod("a")])
    first = plan(state, CATALOG).node_claims[0]
    cheapest = first.instance_types[0]
    unavailable = frozenset({(cheapest, "us-east-1a", "on-demand")})
    second = plan(state, CATALOG, unavailable=unavailable).node_claims[0]
    assert cheapest not in second.instance_types


@pytest.mark.parametrize("raw", ["not json", "{}", '[1, "ns/a"]'])
def test_nominated_pods_tolerates_bad_annotations(raw: str) -> None:
    claim = NodeClaim.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "c", "annotations": {wk.ANNOTATION_NOMINATED_PODS: raw}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
        }
    )
    assert nominated_pods(claim) in ((), ("ns/a",))


def test_pods_of_a_deleting_node_are_provisioned_for_once() -> None:
    """A pod still running on a deleting node gets a NodeClaim; once that NodeClaim (nominated for it) is
    launching, the next plan does not launch another for the same pod."""
    node = Node.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "old",
                "labels": {wk.LABEL_NODEPOOL: "default", wk.LABEL_INITIALIZED: "true"},
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "finalizers": ["karpenter.sh/termination"],
            },
            "spec": {"providerID": "aws:///us-east-1a/i-old"},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
        }
    )
    doc = pending_pod("web").model_dump(by_alias=True, exclude_none=True, mode="json")
    doc["spec"]["nodeName"] = "old"
    doc["status"] = {"phase": "Running"}
    running = Pod.model_validate(doc)
    state = ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=[running], nodes=[node])
    assert [nc.pods for nc in plan(state, CATALOG).node_claims] == [("default/web",)]
    claim = _claim_from_plan(state)
    again = plan(
        ClusterState(
            node_pools=[pool()], node_classes=[node_class()], pods=[running], nodes=[node], node_claims=[claim]
        ),
        CATALOG,
    )
    assert again.node_claims == ()
