"""Static NodePools (spec.replicas) through the real handlers (moto with the launch and terminate workflows, the
real control plane): the provisioner Lambda creates and launches the NodeClaims a static pool lacks with no pending
pod, a second run creates nothing, the disruption Lambda scales the pool down when replicas drop and, on its
periodic run, brings it back up when replicas rise."""

from __future__ import annotations

import json
from typing import Any

import kubernetes

from sandbox.nodeflow import LocalNodeflow

STATIC_POOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "fixed"},
    "spec": {
        "replicas": 2,
        "limits": {"nodes": "5"},
        "template": {
            "metadata": {"labels": {"team": "platform"}},
            "spec": {
                "requirements": [
                    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m6i"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        },
    },
}


def static_claims(local: LocalNodeflow) -> list[dict[str, Any]]:
    return [
        c
        for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")
        if c["metadata"]["labels"].get("karpenter.sh/nodepool") == "fixed"
    ]


def set_replicas(local: LocalNodeflow, replicas: int) -> None:
    api = kubernetes.client.CustomObjectsApi(local.kube_server.api_client())
    api.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", "fixed", {"spec": {"replicas": replicas}})


def trigger() -> list[dict[str, Any]]:
    """A NodePoolChanged message, as the pending-pods rule routes it to the provisioner's queue."""
    return [{"messageId": "np-fixed-1", "body": json.dumps({"detail-type": "NodePoolChanged"})}]


def test_static_pool_is_kept_at_its_replicas(local: LocalNodeflow) -> None:
    local.apply([STATIC_POOL])
    result = local.provision(trigger())["result"]
    assert result["pendingPods"] == 0
    created = result["nodeClaimsCreated"]
    assert len(created) == 2
    assert sorted(result["executionsStarted"]) == sorted(created)
    done = local.wait_for_executions()
    assert [d["status"] for d in done] == ["SUCCEEDED", "SUCCEEDED"]
    claims = static_claims(local)
    assert sorted(c["metadata"]["name"] for c in claims) == sorted(created)
    for claim in claims:
        assert claim["metadata"]["labels"]["team"] == "platform"
        assert json.loads(claim["metadata"]["annotations"].get("karpenter.sh/nominated-pods", "[]")) == []
        assert claim["metadata"]["labels"]["node.kubernetes.io/instance-type"].startswith("m6i.")
    instances = [i for i in local.instances() if {"Key": "karpenter.sh/nodepool", "Value": "fixed"} in i["Tags"]]
    assert len(instances) == 2

    # the count is kept: another run (another batch) creates nothing, nor does the periodic one
    again = local.provision([{"messageId": "np-fixed-2", "body": "{}"}])["result"]
    assert again["nodeClaimsCreated"] == []
    round_ = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert round_["staticCreated"] == []
    assert round_["scaledDown"] == []
    assert round_["command"] is None  # empty static nodes are not emptiness's
    for claim in static_claims(local):  # nor consolidatable
        assert "Consolidatable" not in {c["type"] for c in claim["status"]["conditions"]}

    # replicas 2 -> 1: the disruption Lambda deletes one NodeClaim (both empty: by name)
    set_replicas(local, 1)
    round_ = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert round_["scaledDown"] == [sorted(created)[0]]
    terminations = local.wait_for_terminations()
    assert [t["status"] for t in terminations] == ["SUCCEEDED"]
    assert [c["metadata"]["name"] for c in static_claims(local)] == [sorted(created)[1]]

    # replicas 1 -> 3: the periodic run creates and launches the two missing NodeClaims
    set_replicas(local, 3)
    round_ = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert len(round_["staticCreated"]) == 2
    local.wait_for_executions()
    assert len(static_claims(local)) == 3
    assert local.provision([{"messageId": "np-fixed-3", "body": "{}"}])["result"]["nodeClaimsCreated"] == []
