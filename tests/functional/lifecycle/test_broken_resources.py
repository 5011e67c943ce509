"""Broken resources never stall provisioning: an EC2NodeClass that is not Ready, an invalid NodePool and a
NodePool whose EC2NodeClass is missing are skipped with a condition and an Event, and the pods go to the
NodePools that work (issue 15, behaviours 2 and 9)."""

from __future__ import annotations

import copy
from typing import Any

from nodeflow.api import labels as wk
from sandbox.controlplane.facade import wait_for
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import demo_node_pools, pending

NODEPOOL = ("karpenter.sh/v1", "NodePool")
NODECLASS = ("karpenter.k8s.aws/v1", "EC2NodeClass")


def _default_pool() -> dict[str, Any]:
    return next(d for d in demo_node_pools() if d["kind"] == "NodePool" and d["metadata"]["name"] == "default")


def _default_class() -> dict[str, Any]:
    return next(d for d in demo_node_pools() if d["kind"] == "EC2NodeClass")


def _pool(name: str, node_class: str, weight: int = 100) -> dict[str, Any]:
    pool = copy.deepcopy(_default_pool())
    pool["metadata"] = {"name": name}
    pool["spec"]["weight"] = weight
    pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] = node_class
    return pool


def _broken_class(name: str = "broken") -> dict[str, Any]:
    nc = copy.deepcopy(_default_class())
    nc["metadata"] = {"name": name}
    nc["spec"]["subnetSelectorTerms"] = [{"tags": {"karpenter.sh/discovery": "no-such-subnets"}}]
    return nc


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _events(local: LocalNodeflow, kind: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in local.kube_server.objects("v1", "Event", "default")
        if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name
    ]


def _claims(local: LocalNodeflow) -> list[dict[str, Any]]:
    return local.kube_server.objects("karpenter.sh/v1", "NodeClaim")


def test_a_node_class_that_is_not_ready_is_never_chosen(local: LocalNodeflow) -> None:
    local.apply([_broken_class(), _pool("preferred", "broken", weight=100)])
    pending(local, "web", 3, cpu="1", memory="1Gi")
    for _ in range(3):  # batch after batch: never a NodeClaim or a launch for the broken class
        local.send_pending(["default/web"])
        local.provision()
    done = local.wait_for_executions()
    assert done
    assert all(d["status"] == "SUCCEEDED" for d in done)
    pools = {c["metadata"]["labels"][wk.LABEL_NODEPOOL] for c in _claims(local)}
    assert pools == {"default"}, pools  # the pods fell back to the working NodePool
    assert not [e["name"] for e in local.executions() if e["name"].startswith("preferred-")]

    broken = local.kube_server.get(*NODECLASS, "broken")
    assert _condition(broken, "Ready")["status"] == "False"
    assert _condition(broken, "SubnetsReady")["status"] == "False"
    assert _condition(broken, "SecurityGroupsReady")["status"] == "True"
    assert _condition(broken, "Ready")["observedGeneration"] == broken["metadata"]["generation"]
    pool = local.kube_server.get(*NODEPOOL, "preferred")
    assert _condition(pool, "NodeClassReady")["status"] == "False"
    assert "subnet" in _condition(pool, "NodeClassReady")["message"]
    assert _condition(pool, "Ready")["status"] == "False"
    assert _condition(local.kube_server.get(*NODEPOOL, "default"), "Ready")["status"] == "True"
    assert [e["reason"] for e in _events(local, "NodePool", "preferred")] == ["NodeClassNotReady"]


def test_a_node_class_recovers_when_garbage_collection_resolves_it_again(local: LocalNodeflow) -> None:
    local.apply([_broken_class(), _pool("preferred", "broken", weight=100)])
    pending(local, "web", 1, cpu="1", memory="1Gi")
    local.send_pending(["default/web"])
    local.provision()
    local.wait_for_executions()
    assert {c["metadata"]["labels"][wk.LABEL_NODEPOOL] for c in _claims(local)} == {"default"}
    # The subnets the class selects appear (tagged), without any edit of the class: the scheduled
    # garbage collection resolves every class again, and the pool is used from then on.
    ec2 = local.clients.ec2
    for subnet in local.world.subnets.values():
        ec2.create_tags(Resources=[subnet], Tags=[{"Key": "karpenter.sh/discovery", "Value": "no-such-subnets"}])
    local.collect_garbage()
    assert _condition(local.kube_server.get(*NODECLASS, "broken"), "Ready")["status"] == "True"
    assert _condition(local.kube_server.get(*NODEPOOL, "preferred"), "Ready")["status"] == "True"
    # larger than the first node (2 vCPU), whether or not web is bound to it yet
    pending(local, "api", 1, cpu="3", memory="1Gi")
    local.send_pending(["default/api"])
    local.provision()
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())
    assert "preferred" in {c["metadata"]["labels"][wk.LABEL_NODEPOOL] for c in _claims(local)}


def test_an_invalid_node_pool_or_a_missing_class_leaves_the_others_working(local: LocalNodeflow) -> None:
    invalid = _pool("invalid", "default", weight=100)
    # refused by Karpenter's validation (a restricted label): the CRD's CEL rule refuses it on create, so it is
    # written straight into storage, as one stored before the rule existed (or by an etcd-level write) would be
    invalid["spec"]["template"]["spec"]["requirements"].append(
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}
    )
    local.kube_server.store_bypassing_admission(invalid)
    local.apply([_pool("orphan", "does-not-exist", weight=90)])
    pending(local, "web", 2, cpu="1", memory="1Gi")
    local.send_pending(["default/web"])
    result = local.provision()["result"]
    assert result["nodeClaimsCreated"]
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())
    assert {c["metadata"]["labels"][wk.LABEL_NODEPOOL] for c in _claims(local)} == {"default"}

    bad = local.kube_server.get(*NODEPOOL, "invalid")
    valid = _condition(bad, "ValidationSucceeded")
    assert valid["status"] == "False"
    assert "spec.template.spec.requirements" in valid["message"]
    assert "kubernetes.io/hostname" in valid["message"]
    assert _condition(bad, "Ready")["status"] == "False"
    assert [e["reason"] for e in _events(local, "NodePool", "invalid")] == ["ValidationFailed"]
    assert "kubernetes.io/hostname" in _events(local, "NodePool", "invalid")[0]["message"]

    orphan = local.kube_server.get(*NODEPOOL, "orphan")
    assert _condition(orphan, "ValidationSucceeded")["status"] == "True"
    assert _condition(orphan, "NodeClassReady")["status"] == "False"
    assert "does-not-exist" in _condition(orphan, "NodeClassReady")["message"]
    assert [e["reason"] for e in _events(local, "NodePool", "orphan")] == ["NodeClassNotReady"]
    # the pods' FailedScheduling never happened: they were placed; the reasons are per NodePool in `explain`


# --- leftovers of failed launches (behaviours 3 and 4) ---------------------------------------------------


def _later(seconds: float) -> None:
    from datetime import timedelta

    from nodeflow.handlers import runtime

    rt = runtime.runtime()
    real = rt.clock
    rt.clock = lambda: real() + timedelta(seconds=seconds)


def _live_instances(local: LocalNodeflow) -> list[dict[str, Any]]:
    return local.instances(("pending", "running"))


def test_a_launch_whose_clean_up_fails_too_is_finished_by_garbage_collection(local: LocalNodeflow) -> None:
    """Register fails (the Node registered, but status.nodeName was never written) and CleanUp crashes: the
    execution fails with a running instance, a Node and the NodeClaim left. Garbage collection finishes the
    cleanup (the Node found by providerID) and the pods are provisioned again."""
    from sandbox.faults import flaky

    originals = {
        local.function_name(s): local.dispatch.handlers[local.function_name(s)] for s in ("register", "cleanup")
    }
    for name, handler in originals.items():
        local.dispatch.register(name, flaky(handler, times=10_000))
    pending(local, "web", 2, cpu="1", memory="1Gi")
    local.send_pending(["default/web"])
    (claim,) = local.provision()["result"]["nodeClaimsCreated"]
    assert [d["status"] for d in local.wait_for_executions()] == ["FAILED"]
    assert [c["metadata"]["name"] for c in _claims(local)] == [claim]
    assert len(_live_instances(local)) == 1
    left = local.kube_server.objects("v1", "Node")
    assert len(left) == 1
    assert not (local.kube_server.get("karpenter.sh/v1", "NodeClaim", claim)["status"].get("nodeName"))

    for name, handler in originals.items():  # the functions work again
        local.dispatch.register(name, handler)
    _later(31)
    result = local.collect_garbage()
    assert result["abandonedNodeClaims"] == [claim]
    assert _claims(local) == []
    assert _live_instances(local) == []
    assert local.kube_server.objects("v1", "Node") == []
    assert [e["reason"] for e in _events(local, "NodeClaim", claim)][-1:] == ["LaunchFailed"]
    # the pods come back through the provisioning queue
    again = local.provision()["result"]
    assert again["nodeClaimsCreated"]
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions() if d["name"] != claim)
    assert len(_live_instances(local)) == len(again["nodeClaimsCreated"])


def _ghost(local: LocalNodeflow, name: str, **labels: str) -> dict[str, Any]:
    """A Node left behind by a failed launch: a NodePool's labels, no NodeClaim, its instance gone."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                wk.LABEL_NODEPOOL: "default",
                wk.LABEL_INSTANCE_TYPE: "m5.4xlarge",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                wk.LABEL_CAPACITY_TYPE: "on-demand",
                "topology.kubernetes.io/zone": "us-east-1a",
                "kubernetes.io/hostname": name,
                **labels,
            },
        },
        "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
        "status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "allocatable": {"cpu": "15", "memory": "60Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}],
        },
    }
    if not labels:
        node["spec"]["taints"] = [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
    local.apply([node])

    def unreachable() -> bool:
        taints = local.kube_server.get("v1", "Node", name)["spec"].get("taints") or []
        return {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"} in [
            {"key": t["key"], "effect": t["effect"]} for t in taints
        ]

    # As it has been since its kubelet went: the node lifecycle controller tainted it unreachable (until then, a
    # Node without taints, kube-scheduler would bind pending pods to it: it looks at taints, not at Ready)
    wait_for(f"the node lifecycle controller to taint {name} unreachable", unreachable)
    return node


def test_a_node_left_behind_never_absorbs_pending_pods_and_is_deleted(local: LocalNodeflow) -> None:
    _ghost(local, "ip-10-0-9-1.ec2.internal")  # unregistered, Ready=Unknown
    _ghost(local, "ip-10-0-9-2.ec2.internal", **{wk.LABEL_INITIALIZED: "true"})  # initialized once, now Unknown
    pending(local, "web", 3, cpu="1", memory="1Gi")
    local.send_pending(["default/web"])
    result = local.provision()["result"]
    assert result["nodeClaimsCreated"], result  # not "placed" on a Node that will never run them
    nominated = [
        e["message"] for e in local.kube_server.objects("v1", "Event", "default") if e["reason"] == "Nominated"
    ]
    assert nominated
    assert not [m for m in nominated if "node/" in m], nominated
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())
    _later(31)
    gc = local.collect_garbage()
    assert sorted(gc["deletedNodes"]) == ["ip-10-0-9-1.ec2.internal", "ip-10-0-9-2.ec2.internal"]
    names = {n["metadata"]["name"] for n in local.kube_server.objects("v1", "Node")}
    assert not names & {"ip-10-0-9-1.ec2.internal", "ip-10-0-9-2.ec2.internal"}
    assert len(names) == len(result["nodeClaimsCreated"])  # the real nodes stay


def test_an_instance_tagged_for_a_node_claim_that_names_another_is_a_leak(local: LocalNodeflow) -> None:
    """Behaviour 8: a NodeClaim owns the instance its providerID names; a second instance carrying its tag
    (a duplicate launch) is terminated once older than the grace period. One still launching is kept."""
    pending(local, "web", 1, cpu="1", memory="1Gi")
    local.send_pending(["default/web"])
    (claim,) = local.provision()["result"]["nodeClaimsCreated"]
    assert [d["status"] for d in local.wait_for_executions()] == ["SUCCEEDED"]
    owned = local.kube_server.get("karpenter.sh/v1", "NodeClaim", claim)["status"]["providerID"].rsplit("/", 1)[-1]

    def tagged(node_claim: str) -> str:
        return local.run_instance(
            {"kubernetes.io/cluster/demo": "owned", wk.LABEL_NODEPOOL: "default", wk.LABEL_NODECLAIM: node_claim}
        )

    duplicate = tagged(claim)
    launching = {**_claims(local)[0]}  # a NodeClaim still launching (no providerID yet) keeps its instance
    launching["metadata"] = {"name": "default-launching", "labels": launching["metadata"]["labels"]}
    launching.pop("status")
    local.apply([launching])
    in_flight = tagged("default-launching")
    _later(31)
    gc = local.collect_garbage()
    assert gc["terminatedInstances"] == [duplicate]
    assert {i["InstanceId"] for i in _live_instances(local)} == {owned, in_flight}


def test_a_node_pool_whose_name_cannot_be_a_label_value_is_invalid_and_the_others_work(
    local: LocalNodeflow,
) -> None:
    """Its name would be the karpenter.sh/nodepool label value of its nodes (at most 63 characters): before, the
    provisioner raised on the NodeClaim it made for it and failed every batch."""
    long_name = "team-" + "x" * 120
    local.apply([_pool(long_name, "default", weight=100)])
    pending(local, "web", 1, cpu="1", memory="1Gi")
    local.send_pending(["default/web"])
    (claim,) = local.provision()["result"]["nodeClaimsCreated"]
    assert claim.startswith("default-")
    assert [d["status"] for d in local.wait_for_executions()] == ["SUCCEEDED"]
    valid = _condition(local.kube_server.get(*NODEPOOL, long_name), "ValidationSucceeded")
    assert valid["status"] == "False"
    assert "karpenter.sh/nodepool label" in valid["message"]


def test_a_node_claim_the_api_server_refuses_does_not_fail_the_other_node_pools(local: LocalNodeflow) -> None:
    """The API server refuses (422) the first NodeClaim of a batch: its pods get FailedScheduling with the
    reason, the other NodePool's NodeClaim is created and launched, and the batch does not fail (retrying a
    refused object would fail the same way for ever)."""
    from sandbox.controlplane.proxy import Fault

    gpu = {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "app",
                "image": "app:1",
                "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    }
    pending(local, "web", 1, cpu="1", memory="1Gi")
    pending(local, "train", 1, **gpu)
    refused: list[str] = []

    def refuse_first(method: str, path: str, query: dict[str, str]) -> Fault | None:
        if method == "POST" and path.endswith("/nodeclaims") and not refused:
            refused.append(path)
            return Fault(422, "Invalid", "NodeClaim is invalid: spec: refused by an admission policy")
        return None

    local.kube_server.before_request = refuse_first
    try:
        local.send_pending(["default/web", "default/train"])
        result = local.provision()["result"]
    finally:
        local.kube_server.before_request = None
    assert len(result["nodeClaimsRefused"]) == 1, result
    assert len(result["nodeClaimsCreated"]) == 1, result
    (pool,) = result["nodeClaimsRefused"]
    assert "admission policy" in result["nodeClaimsRefused"][pool]
    assert [d["status"] for d in local.wait_for_executions()] == ["SUCCEEDED"]
    failed = [
        e["message"] for e in local.kube_server.objects("v1", "Event", "default") if e["reason"] == "FailedScheduling"
    ]
    assert any("refused" in m and pool in m for m in failed), failed
