"""cluster_spend: the $/hour in use that cost ceilings compare against (nodes not going away + NodeClaims still
launching, priced from the catalog, shared among namespaces by CPU requests)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeflow.api.core import Node, Pod
from nodeflow.api.karpenter import NodeClaim
from nodeflow.catalog.model import CatalogData
from nodeflow.cluster import ClusterState
from nodeflow.governance.spend import cluster_spend

CATALOG = CatalogData(
    region="us-east-1",
    infos={},
    zones={"us-east-1a": "use1-az1", "us-east-1b": "use1-az2"},
    offerings={"m6i.large": ("us-east-1a", "us-east-1b"), "m6i.xlarge": ("us-east-1a", "us-east-1b")},
    on_demand_prices={"m6i.large": 0.096, "m6i.xlarge": 0.192},
    spot_prices={("m6i.large", "us-east-1a"): 0.04, ("m6i.large", "us-east-1b"): 0.03},
)


def node(name: str, pool: str | None = "a", it: str = "m6i.large", ct: str = "on-demand", **meta: Any) -> Node:
    labels = {"node.kubernetes.io/instance-type": it, "topology.kubernetes.io/zone": "us-east-1a"}
    labels["karpenter.sh/capacity-type"] = ct
    if pool:
        labels["karpenter.sh/nodepool"] = pool
    return Node.model_validate(
        {"metadata": {"name": name, "labels": labels, **meta}, "spec": {"providerID": f"aws:///us-east-1a/i-{name}"}}
    )


def claim(name: str, pool: str = "a", reqs: list[dict[str, Any]] | None = None, **extra: Any) -> NodeClaim:
    body: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}, **extra.get("meta", {})},
        "spec": {
            "requirements": reqs or [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        },
    }
    if "status" in extra:
        body["status"] = extra["status"]
    return NodeClaim.model_validate(body)


def pod(name: str, ns: str, cpu: str | None, node_name: str = "", owner: str = "") -> Pod:
    requests = {"cpu": cpu} if cpu else {}
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "x", "uid": "u"}]
    return Pod.model_validate(
        {
            "metadata": meta,
            "spec": {"nodeName": node_name or None, "containers": [{"name": "c", "resources": {"requests": requests}}]},
        }
    )


def test_nodes_are_priced_by_offering_and_shared_by_cpu() -> None:
    state = ClusterState(
        nodes=(node("n1"), node("n2", ct="spot"), node("n3", pool=None, it="m6i.xlarge"), node("n4", ct="reserved")),
        pods=(
            pod("a", "ml", "300m", "n1"),
            pod("b", "web", "100m", "n1"),
            pod("ds", "kube-system", "1", "n1", owner="DaemonSet"),
        ),
    )
    spend, costs = cluster_spend(state, CATALOG)
    assert [(c.name, c.nodepool) for c in costs] == [("n1", "a"), ("n2", "a"), ("n3", None), ("n4", "a")]
    assert costs[1].price == 0.04
    assert costs[3].price == pytest.approx(0.096 / 1e10)
    assert spend.cluster == pytest.approx(0.096 + 0.04 + 0.192 + 0.096 / 1e10)
    assert spend.by_pool["a"] == pytest.approx(0.136, abs=1e-6)
    assert spend.by_namespace == pytest.approx({"ml": 0.072, "web": 0.024})  # DaemonSet pods do not share


def test_deleting_nodes_and_claims_do_not_count_launching_claims_do() -> None:
    gone = {"deletionTimestamp": "2026-11-25T00:00:00Z", "finalizers": ["x"]}
    state = ClusterState(
        nodes=(node("n1", **gone), node("n2")),
        node_claims=(
            claim("c-n2", status={"nodeName": "n2"}, meta=gone),  # its node n2 goes with it
            claim(
                "c-launching",
                reqs=[
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": ["m6i.large", "m6i.xlarge"],
                    },
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]},
                ],
                meta={"annotations": {"nodeflow.io/nominated-pods": '["ml/p"]'}},
            ),
            claim(
                "c-od",
                pool="b",
                reqs=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            ),
        ),
        pods=(pod("p", "ml", None),),
    )
    spend, costs = cluster_spend(state, CATALOG)
    assert [(c.name, c.price) for c in costs] == [("c-launching", 0.03), ("c-od", 0.096)]
    assert spend.by_pool == pytest.approx({"a": 0.03, "b": 0.096})
    assert spend.by_namespace == pytest.approx({"ml": 0.03})


def test_a_launching_claim_without_capacity_type_is_priced_as_it_launches_spot_first() -> None:
    # no capacity-type requirement allows every capacity type, and the launch takes spot first (as the AWS
    # provider's getCapacityType): priced at its cheapest spot offering, not on-demand
    types = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m6i.large"]}
    state = ClusterState(node_claims=(claim("c-any", reqs=[types]),))
    _, costs = cluster_spend(state, CATALOG)
    assert [(c.name, c.price) for c in costs] == [("c-any", 0.03)]
