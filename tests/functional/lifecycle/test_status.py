"""Status written by the deployed code, read back through the API server after the demo's scenario: NodePool
``status.resources`` / ``status.nodes`` (Karpenter's counter) and conditions, EC2NodeClass ``status`` (subnets,
security groups, AMIs, instance profile, capacity reservations) and conditions; nothing rewritten when nothing
changed (issue 17, part 1)."""

from __future__ import annotations

from typing import Any

from nodeflow.api.core import resource_milli
from nodeflow.api.quantity import format_milli
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import pending

CLASS_CONDITIONS = (
    "SubnetsReady",
    "SecurityGroupsReady",
    "AMIsReady",
    "InstanceProfileReady",
    "ValidationSucceeded",
    "CapacityReservationsReady",
    "Ready",
)


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def _pool_nodes(kube: KubeClient, pool: str) -> list[dict[str, Any]]:
    return [n for n in kube.list_items(kc.NODES) if n["metadata"]["labels"].get("karpenter.sh/nodepool") == pool]


def _status_patches(local: LocalNodeflow) -> int:
    return sum(
        local.kube_server.count("PATCH", path)
        for path in (
            "/apis/karpenter.sh/v1/nodepools/default/status",
            "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default/status",
        )
    )


def test_status_after_the_demo_scenario_reads_back_through_the_api(local: LocalNodeflow) -> None:
    kube = KubeClient(local.kube_server.api_client())
    pending(local, "web", 5, cpu="1", memory="2Gi")
    local.send_pending(["default/web"])
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert created
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())
    local.collect_garbage()

    # NodePool: the NODES column (status.resources.nodes) and Karpenter's counter over the pool's nodes
    pool = kube.get(kc.NODE_POOLS, "default")
    nodes = _pool_nodes(kube, "default")
    assert len(nodes) == len(created)
    assert pool["status"]["nodes"] == len(nodes)
    assert pool["status"]["resources"]["nodes"] == str(len(nodes))
    for key in ("cpu", "memory", "pods"):
        total = sum(resource_milli(n["status"]["capacity"]).get(key, 0) for n in nodes)
        assert pool["status"]["resources"][key] == format_milli(total, key if key == "memory" else "cpu"), key
    assert "ephemeral-storage" in pool["status"]["resources"]
    assert _conditions(pool) == {"ValidationSucceeded": "True", "NodeClassReady": "True", "Ready": "True"}

    # EC2NodeClass: what it resolved to, as Karpenter's status fields
    node_class = kube.get(kc.EC2_NODE_CLASSES, "default")
    status = node_class["status"]
    ec2 = local.clients.ec2
    subnets = {s["SubnetId"]: s for s in ec2.describe_subnets(SubnetIds=list(local.world.subnets.values()))["Subnets"]}
    assert {s["id"] for s in status["subnets"]} == set(subnets)
    for s in status["subnets"]:
        assert s["zone"] == subnets[s["id"]]["AvailabilityZone"]
        assert s["zoneID"] == subnets[s["id"]]["AvailabilityZoneId"]
    groups = {g["GroupId"]: g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"]}
    assert status["securityGroups"]
    assert all(g["name"] == groups[g["id"]] for g in status["securityGroups"])
    assert status["amis"]
    for ami in status["amis"]:
        assert ami["id"].startswith("ami-")
        assert ami["name"]
        assert [r["key"] for r in ami["requirements"]] == ["kubernetes.io/arch"]
    assert status["instanceProfile"]
    assert status["capacityReservations"] == []
    assert _conditions(node_class) == dict.fromkeys(CLASS_CONDITIONS, "True")
    assert all(c["observedGeneration"] == node_class["metadata"]["generation"] for c in status["conditions"])

    # nothing changed: the next provisioner run and garbage collection write no status
    before = _status_patches(local)
    local.collect_garbage()
    local.send_pending(["default/web"])
    local.provision()
    assert _status_patches(local) == before

    # a node goes: the count follows at the next garbage collection
    local.terminate(created[0])
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_terminations())
    local.collect_garbage()
    pool = kube.get(kc.NODE_POOLS, "default")
    assert pool["status"]["nodes"] == len(created) - 1
    assert pool["status"]["resources"]["nodes"] == str(len(created) - 1)


def test_a_class_whose_subnets_do_not_resolve_is_not_validated(local: LocalNodeflow) -> None:
    kube = KubeClient(local.kube_server.api_client())
    broken = kube.get(kc.EC2_NODE_CLASSES, "default")
    broken["metadata"] = {"name": "broken"}
    broken.pop("status", None)
    broken["spec"]["subnetSelectorTerms"] = [{"tags": {"karpenter.sh/discovery": "no-such-subnets"}}]
    kube.create(kc.EC2_NODE_CLASSES, broken)
    local.collect_garbage()
    node_class = kube.get(kc.EC2_NODE_CLASSES, "broken")
    conditions = {c["type"]: c for c in node_class["status"]["conditions"]}
    assert conditions["SubnetsReady"]["status"] == "False"
    assert (conditions["ValidationSucceeded"]["status"], conditions["ValidationSucceeded"]["reason"]) == (
        "False",
        "DependenciesNotReady",
    )
    assert conditions["Ready"]["status"] == "False"
    assert node_class["status"]["subnets"] == []
    assert node_class["status"]["capacityReservations"] == []
