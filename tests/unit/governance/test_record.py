"""The governance record builder (nodeflow.governance.record): pure, from a ClusterState, the catalog, the
permissions data and the time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodeflow.api.core import Namespace, Node, Pod, PodDisruptionBudget
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.api.nodeflow_policy import NodeflowPolicy
from nodeflow.catalog.offline import load_offline
from nodeflow.cluster import ClusterState
from nodeflow.governance.record import Permissions, build_record, render_markdown

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)  # a Wednesday


@pytest.fixture(scope="module")
def catalog() -> Any:
    return load_offline("us-east-1")


def pool(name: str, node_class: str = "default", **spec: Any) -> NodePool:
    return NodePool.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": node_class},
                        **spec.pop("template", {}),
                    }
                },
                **spec,
            },
        }
    )


def node_class(name: str = "default", **spec: Any) -> EC2NodeClass:
    return EC2NodeClass.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "role": "NodeRole",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}],
                **spec,
            },
        }
    )


def labels(pool_name: str, it: str, ct: str, zone: str = "us-east-1a") -> dict[str, str]:
    return {
        "karpenter.sh/nodepool": pool_name,
        "node.kubernetes.io/instance-type": it,
        "karpenter.sh/capacity-type": ct,
        "topology.kubernetes.io/zone": zone,
    }


def claim(name: str, pool_name: str, node: str | None, lbl: dict[str, str] | None, **meta: Any) -> NodeClaim:
    status = {"nodeName": node, "providerID": f"aws:///us-east-1a/i-{name}"} if node else None
    return NodeClaim.model_validate(
        {
            "metadata": {"name": name, "labels": lbl or {"karpenter.sh/nodepool": pool_name}, **meta},
            "spec": {
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.xlarge"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
            **({"status": status} if status else {}),
        }
    )


def node(name: str, lbl: dict[str, str], **meta: Any) -> Node:
    return Node.model_validate({"metadata": {"name": name, "labels": lbl, **meta}, "spec": {}})


def pod(ns: str, name: str, node_name: str | None = None, cpu: str = "1", **meta: Any) -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": name, "namespace": ns, **meta},
            "spec": {
                **({"nodeName": node_name} if node_name else {}),
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            },
            "status": {"phase": "Running" if node_name else "Pending"},
        }
    )


def namespace(name: str, **lbl: str) -> Namespace:
    return Namespace.model_validate({"metadata": {"name": name, "labels": lbl}})


GPU_POLICY = NodeflowPolicy.model_validate(
    {
        "metadata": {"name": "gpu-access"},
        "spec": {
            "nodePoolAccess": [{"nodePools": ["gpu"], "namespaceSelector": {"matchLabels": {"team": "ml"}}}],
            "resourceAccess": [{"resources": ["nvidia.com/gpu"], "namespaces": ["ml-prod"]}],
            "costCeilings": {
                "cluster": {"maxPricePerHour": "40"},
                "nodePools": [{"name": "gpu", "maxPricePerHour": "2"}],
            },
            "limits": [{"name": "all", "nodePools": ["default", "gpu"], "resources": {"cpu": "100", "nodes": "5"}}],
            "pauses": [
                {
                    "name": "midweek",
                    "schedule": "0 10 * * 3",
                    "duration": "4h",
                    "disruption": True,
                    "nodePools": ["gpu"],
                }
            ],
        },
    }
)


def record(state: ClusterState, catalog: Any, perms: Permissions | None = None, now: datetime = NOW) -> dict[str, Any]:
    return build_record(state, catalog, perms or Permissions(), now, {"files": ["x"]})


def test_without_policies_every_namespace_may_use_every_pool_and_accelerator(catalog: Any) -> None:
    state = ClusterState(node_pools=[pool("default"), pool("gpu")], pods=[pod("shop", "web")])
    access = record(state, catalog)["access"]
    assert access["policies"] == []
    [shop] = access["namespaces"]
    assert shop["namespace"] == "shop"
    assert all(r["allowed"] and r["reason"] is None for r in shop["nodePools"] + shop["resources"])
    assert {r["nodePool"] for r in shop["nodePools"]} == {"default", "gpu"}
    assert "nvidia.com/gpu" in {r["resource"] for r in shop["resources"]}


def test_access_per_namespace_names_the_denying_policy(catalog: Any) -> None:
    state = ClusterState(
        node_pools=[pool("default"), pool("gpu")],
        namespaces=[namespace("ml-prod", team="ml"), namespace("ml-exp", team="research")],
        pods=[pod("shop", "web"), pod("ml-exp", "nb")],
        policies=[GPU_POLICY],
    )
    rec = record(state, catalog)
    by_ns = {ns["namespace"]: ns for ns in rec["access"]["namespaces"]}
    assert sorted(by_ns) == ["ml-exp", "ml-prod", "shop"]  # Namespace objects and the namespaces of pods
    pools = {r["nodePool"]: r for r in by_ns["ml-exp"]["nodePools"]}
    assert pools["default"]["allowed"] is True
    assert pools["gpu"] == {
        "nodePool": "gpu",
        "allowed": False,
        "reason": "namespace ml-exp may not use NodePool gpu: policy gpu-access",
    }
    assert {r["nodePool"]: r["allowed"] for r in by_ns["ml-prod"]["nodePools"]} == {"default": True, "gpu": True}
    gpus = {r["resource"]: r for r in by_ns["shop"]["resources"]}["nvidia.com/gpu"]
    assert gpus["reason"] == "namespace shop may not request nvidia.com/gpu: policy gpu-access"
    assert rec["access"]["governedNodePools"] == ["gpu"]
    assert rec["access"]["governedResources"] == ["nvidia.com/gpu"]
    assert rec["groupLimits"] == [
        {"policy": "gpu-access", "name": "all", "nodePools": ["default", "gpu"], "limits": {"cpu": "100", "nodes": "5"}}
    ]
    markdown = render_markdown(rec)
    assert "- namespace ml-exp may not use NodePool gpu: policy gpu-access" in markdown
    assert "| ml-exp | team=research | allowed | denied |" in markdown


def test_pause_windows_say_whether_they_are_open_now(catalog: Any) -> None:
    state = ClusterState(node_pools=[pool("gpu")], policies=[GPU_POLICY])
    [inside] = record(state, catalog, now=datetime(2026, 11, 25, 12, 0, tzinfo=UTC))["pauses"]
    assert inside["openUntil"] == "2026-11-25T14:00:00Z"
    assert (inside["provisioning"], inside["disruption"], inside["nodePools"]) == (False, True, ["gpu"])
    [outside] = record(state, catalog, now=datetime(2026, 11, 25, 14, 0, tzinfo=UTC))["pauses"]
    assert outside["openUntil"] is None


def test_capacity_priced_from_the_catalog_by_pool_and_capacity_type(catalog: Any) -> None:
    spot = labels("default", "m7i.xlarge", "spot")
    on_demand = labels("gpu", "g5.xlarge", "on-demand", "us-east-1b")
    state = ClusterState(
        node_pools=[pool("default"), pool("gpu")],
        node_claims=[
            claim("a", "default", "n-a", spot),
            claim("b", "default", "n-b", spot),
            claim("g", "gpu", "n-g", on_demand),
            claim("gone", "gpu", "n-gone", on_demand, deletionTimestamp="2026-11-25T11:00:00Z", finalizers=["x"]),
            claim("new", "default", None, None),
        ],
        nodes=[
            node("n-a", spot),
            node("n-b", spot),
            node("n-g", on_demand),
            node("n-gone", on_demand),
            node("n-odd", labels("default", "no-such.type", "on-demand")),
        ],
        pods=[pod("ml-prod", "train", "n-g", cpu="3"), pod("ml-exp", "nb", "n-g", cpu="1")],
        policies=[GPU_POLICY],
    )
    rec = record(state, catalog)
    cap = rec["capacity"]
    spot_price = catalog.spot_prices[("m7i.xlarge", "us-east-1a")]
    gpu_price = catalog.on_demand_prices["g5.xlarge"]
    rows = {(m["nodeClaim"], m["node"]): m for m in cap["machines"]}
    assert rows[("a", "n-a")]["pricePerHour"] == pytest.approx(spot_price)
    assert rows[("a", "n-a")]["state"] == "running"
    assert rows[("gone", "n-gone")]["state"] == "deleting"
    assert rows[("new", None)]["state"] == "launching"
    assert rows[("new", None)]["pricePerHour"] == pytest.approx(catalog.on_demand_prices["m7i.xlarge"])
    assert rows[(None, "n-odd")]["pricePerHour"] is None
    assert cap["unpriced"] == ["n-odd"]
    groups = {(g["nodePool"], g["capacityType"]): (g["count"], g["pricePerHour"]) for g in cap["byNodePool"]}
    assert groups[("default", "spot")] == (2, pytest.approx(2 * spot_price))
    assert groups[("gpu", "on-demand")] == (1, pytest.approx(gpu_price))  # the deleting one left out
    assert groups[("default", None)] == (1, pytest.approx(catalog.on_demand_prices["m7i.xlarge"]))
    assert cap["totalPerHour"] == pytest.approx(sum(p for _, p in groups.values()))
    assert {p["name"]: p["pricePerHour"] for p in rec["nodePools"]}["gpu"] == pytest.approx(gpu_price)
    ceilings = {(c["scope"], c["name"]): c for c in rec["ceilings"]}
    assert ceilings[("nodePool", "gpu")]["maxPricePerHour"] == 2.0
    assert ceilings[("nodePool", "gpu")]["inUsePerHour"] == pytest.approx(gpu_price)
    markdown = render_markdown(rec)
    assert "## Capacity and cost" in markdown
    assert "No catalog price (counted $0): n-odd." in markdown


def test_node_pool_and_node_class_fields_and_review_findings(catalog: Any) -> None:
    gpu = pool(
        "gpu",
        node_class="gpu",
        weight=10,
        limits={"cpu": "64"},
        template={
            "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "driver", "effect": "NoSchedule"}],
            "expireAfter": "336h",
            "terminationGracePeriod": "2h",
        },
        disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30m", "budgets": [{"nodes": "1"}]},
    )
    open_imds = node_class(
        "gpu", metadataOptions={"httpTokens": "optional", "httpPutResponseHopLimit": 2}, tags={"team": "ml"}
    )
    rec = record(ClusterState(node_pools=[gpu], node_classes=[open_imds, node_class("unused")]), catalog)
    [p] = rec["nodePools"]
    assert p["nodeClass"]["name"] == "gpu"
    assert (p["weight"], p["limits"], p["expireAfter"], p["terminationGracePeriod"]) == (
        10,
        {"cpu": "64"},
        "336h",
        "2h",
    )
    assert p["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert p["startupTaints"] == [{"key": "driver", "value": None, "effect": "NoSchedule"}]
    assert (p["consolidationPolicy"], p["consolidateAfter"]) == ("WhenEmpty", "30m")
    assert p["budgets"] == [{"nodes": "1", "reasons": None, "schedule": None, "duration": None}]
    classes = {c["name"]: c for c in rec["nodeClasses"]}
    assert classes["gpu"]["role"] == "NodeRole"
    assert classes["gpu"]["usedBy"] == ["gpu"]
    assert classes["unused"]["usedBy"] == []
    assert classes["gpu"]["metadataOptions"]["httpPutResponseHopLimit"] == 2
    review = " ".join(classes["gpu"]["review"])
    assert "IMDSv1" in review
    assert "hop limit 2" in review
    assert classes["unused"]["review"] == []


def test_do_not_disrupt_and_pdb_coverage(catalog: Any) -> None:
    pdb = PodDisruptionBudget.model_validate(
        {
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        }
    )
    state = ClusterState(
        pods=[
            pod("shop", "web-1", "n1", labels={"app": "web"}),
            pod("other", "web-x", "n1", labels={"app": "web"}),  # another namespace: not covered
            pod("ml", "train", "n1", annotations={"karpenter.sh/do-not-disrupt": "true"}),
        ],
        pdbs=[pdb],
        nodes=[node("n1", {}, annotations={"karpenter.sh/do-not-disrupt": "true"})],
    )
    controls = record(state, catalog)["disruptionControls"]
    assert controls["doNotDisrupt"] == [
        {"kind": "Pod", "name": "ml/train", "node": "n1", "value": "true"},
        {"kind": "Node", "name": "n1", "node": "n1", "value": "true"},
    ]
    assert controls["pdbs"] == [
        {
            "namespace": "shop",
            "name": "web",
            "minAvailable": 1,
            "maxUnavailable": None,
            "selector": {"matchLabels": {"app": "web"}, "matchExpressions": []},
            "pods": ["shop/web-1"],
        }
    ]
    assert controls["unprotectedPods"] == 1  # other/web-x


def test_permissions_listed_or_the_reason_they_are_not(catalog: Any) -> None:
    missing = record(ClusterState(), catalog, Permissions(error="infra/ is not next to this nodeflow"))
    assert missing["permissions"]["available"] is False
    assert "Not listed: infra/ is not next to this nodeflow" in render_markdown(missing)
    perms = Permissions(
        lambdas=[
            {
                "function": "launch",
                "description": "",
                "uses": ["fleet"],
                "statements": [
                    {
                        "sid": "Terminate",
                        "actions": ["ec2:TerminateInstances"],
                        "resources": "instances",
                        "condition": "",
                        "when": "",
                    }
                ],
                "unknownUses": [],
            }
        ],
        kubernetes={
            "functionGroups": {"launch": ["nodeflow-launch"]},
            "clusterRoles": [
                {"name": "nodeflow-launch", "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}
            ],
            "roles": [],
            "agent": {"clusterRoles": []},
        },
    )
    markdown = render_markdown(record(ClusterState(), catalog, perms))
    assert "| launch | Terminate | ec2:TerminateInstances | instances | - | always |" in markdown
    assert "| ClusterRole | nodeflow-launch | core | nodes | get |" in markdown


def test_notes_name_what_policies_and_pools_refer_to_but_is_missing(catalog: Any) -> None:
    rec = record(ClusterState(node_pools=[pool("default", node_class="absent")], policies=[GPU_POLICY]), catalog)
    notes = "\n".join(rec["notes"])
    assert "NodePool default uses EC2NodeClass absent, which is not among the manifests" in notes
    assert "a nodePoolAccess rule names NodePool gpu, which does not exist" in notes
    assert "namespace ml-prod is named by a policy" in notes


def test_star_policies_are_rendered_as_every_nodepool(catalog: Any) -> None:
    """The record sees "*" as the solver does: the access table denies every real NodePool (no "*" column), a "*"
    group and window read "all", no note calls "*" a missing NodePool."""
    star = NodeflowPolicy.model_validate(
        {
            "metadata": {"name": "prod-only"},
            "spec": {
                "nodePoolAccess": [{"nodePools": ["*"], "namespaces": ["ml-prod"]}],
                "limits": [{"name": "all", "nodePools": ["*"], "resources": {"nodes": "0"}}],
                "pauses": [
                    {
                        "name": "now",
                        "schedule": "0 10 * * 3",
                        "duration": "4h",
                        "provisioning": True,
                        "nodePools": ["*"],
                    }
                ],
            },
        }
    )
    state = ClusterState(
        node_pools=[pool("default"), pool("gpu")], namespaces=[namespace("ml-prod"), namespace("web")], policies=[star]
    )
    rec = record(state, catalog)
    by_ns = {
        ns["namespace"]: {r["nodePool"]: r["reason"] for r in ns["nodePools"]} for ns in rec["access"]["namespaces"]
    }
    assert by_ns == {
        "ml-prod": {"default": None, "gpu": None},
        "web": {p: f"namespace web may not use NodePool {p}: policy prod-only" for p in ("default", "gpu")},
    }
    assert rec["groupLimits"][0]["nodePools"] is None
    [window] = rec["pauses"]
    assert (window["nodePools"], window["openUntil"]) == (None, "2026-11-25T14:00:00Z")
    assert not [n for n in rec["notes"] if "*" in n]
    markdown = render_markdown(rec)
    assert "| prod-only | all | all | nodes=0 |" in markdown
    assert "| prod-only | now | 0 10 * * 3 | 4h | provisioning | all | until 2026-11-25T14:00:00Z |" in markdown
    assert "| web | - | denied | denied |" in markdown
