"""nodeflow adopts what Karpenter v1.14 made, with zero churn (docs/migration/from-karpenter.md).

The cluster is left as Karpenter leaves it (``karpenter_state``: its EC2NodeClass, NodePool, NodeClaims, Nodes,
instances and launch templates, with its labels, annotations, finalizers, tags and status); Karpenter's controller is
gone (scaled to zero); nodeflow is installed (its functions, workflows and RBAC). Then:

- every function runs once (garbage collection, the disruption round, the provisioner): no NodeClaim replaced,
  deleted or marked drifted, no instance terminated, no hash rewritten;
- decisions on an adopted node equal those on a node of nodeflow's own: the two empty ones (one of each) are removed
  by one Empty command, the busy adopted one stays; both terminate with no leak (no instance, Node, NodeClaim left);
- an interruption of an adopted node is handled: its termination runs to the end, nothing leaks.
"""

from __future__ import annotations

from typing import Any

from sandbox.controlplane.facade import wait_for
from sandbox.nodeflow import LocalNodeflow
from tests.functional.migration.karpenter_state import (
    CLASS,
    INSTANCE_PROFILE,
    POOL,
    Adopted,
    install_karpenter_objects,
    interrupt,
    launch_node,
)
from tests.realk8s.workloads import replica_set, running, unschedulable


def claims(local: LocalNodeflow) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")}


def condition(obj: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def live_instances(local: LocalNodeflow) -> set[str]:
    return {i["InstanceId"] for i in local.instances(("pending", "running"))}


def pinned(name: str, node: str, replicas: int = 1, cpu: str = "500m") -> dict[str, Any]:
    """A ReplicaSet whose pods kube-scheduler must place on ``node``."""
    return replica_set(name, replicas, cpu, "256Mi", nodeSelector={"kubernetes.io/hostname": node})


def snapshot_of_adoption(local: LocalNodeflow) -> dict[str, Any]:
    """What must not change through the move: each NodeClaim's uid, hashes and finalizers, each Node's uid, the
    NodePool's and EC2NodeClass's hash annotations."""
    out: dict[str, Any] = {}
    for name, c in claims(local).items():
        meta = c["metadata"]
        notes = {k: v for k, v in (meta.get("annotations") or {}).items() if "hash" in k}
        out[f"NodeClaim/{name}"] = (meta["uid"], notes, meta.get("finalizers"), meta.get("deletionTimestamp"))
    for n in local.kube_server.objects("v1", "Node"):
        out[f"Node/{n['metadata']['name']}"] = (n["metadata"]["uid"], n["metadata"].get("deletionTimestamp"))
    for api, kind, name in (("karpenter.sh/v1", "NodePool", POOL), ("karpenter.k8s.aws/v1", "EC2NodeClass", CLASS)):
        notes = local.kube_server.get(api, kind, name)["metadata"].get("annotations") or {}
        out[f"{kind}/{name}"] = {k: v for k, v in notes.items() if "hash" in k}
    return out


def _pods(local: LocalNodeflow, apps: tuple[str, ...]) -> list[dict[str, Any]]:
    return [p for p in local.kube_server.objects("v1", "Pod", "default") if p["metadata"]["labels"].get("app") in apps]


def karpenter_cluster(local: LocalNodeflow) -> tuple[Adopted, Adopted]:
    """Karpenter's objects and two nodes of its, each running a pod (Karpenter's controller already gone)."""
    install_karpenter_objects(local)
    busy, idle = launch_node(local, "k7x2q"), launch_node(local, "p9m4d", zone="us-east-1b")
    local.apply([pinned("busy", busy.node), pinned("idle", idle.node)])
    running(local.kube_server, "busy", 1)
    running(local.kube_server, "idle", 1)
    return busy, idle


def test_nothing_karpenter_made_is_replaced_and_adopted_nodes_are_disrupted_as_nodeflows_own(
    local: LocalNodeflow,
) -> None:
    busy, idle = karpenter_cluster(local)
    before = snapshot_of_adoption(local)
    instances = live_instances(local)
    assert instances == {busy.instance_id, idle.instance_id}

    # nodeflow takes over: each function runs once
    gc = local.collect_garbage()
    done_by_gc = ("terminatedInstances", "deletedNodeClaims", "abandonedNodeClaims", "deletedNodes")
    assert [gc[k] for k in (*done_by_gc, "deletedLaunchTemplates")] == [[]] * 5
    round_ = local.invoke("disruption", {})["result"]
    assert round_["paused"] is None
    assert (round_["command"], round_["executed"], round_["expired"]) == (None, [], [])
    provisioned = local.provision([{"messageId": "resync", "body": "{}"}])["result"]
    assert (provisioned["nodeClaimsCreated"], provisioned["executionsResumed"]) == ([], [])
    assert snapshot_of_adoption(local) == before  # zero churn: same objects, same hashes, nothing deleting
    assert live_instances(local) == instances
    assert (local.terminate_executions(), local.executions()) == ([], [])
    for c in claims(local).values():
        assert condition(c, "Drifted") == "False", c["status"]["conditions"]
    node_class = local.kube_server.get("karpenter.k8s.aws/v1", "EC2NodeClass", CLASS)
    assert node_class["status"]["instanceProfile"] == INSTANCE_PROFILE  # Karpenter's profile, not a new one
    assert [p["InstanceProfileName"] for p in local.clients.iam.list_instance_profiles()["InstanceProfiles"]] == [
        INSTANCE_PROFILE
    ]
    assert condition(node_class, "Ready") == "True"

    # a node of nodeflow's own next to them, for a workload that fits on neither adopted node
    local.apply([replica_set("own", 1, "1500m", "1Gi")])
    pending = unschedulable(local.kube_server, "own", 1)
    local.send_pending(pending)
    made = local.provision()["result"]["nodeClaimsCreated"]
    assert len(made) == 1
    assert [e["status"] for e in local.wait_for_executions()] == ["SUCCEEDED"]
    [own_pod] = running(local.kube_server, "own", 1)
    own_node = own_pod["spec"]["nodeName"]

    # the adopted idle node and nodeflow's own both empty: one decision for both, the busy adopted node stays
    local.kube_server.delete("apps/v1", "ReplicaSet", "idle-7d4b9c", "default")
    local.kube_server.delete("apps/v1", "ReplicaSet", "own-7d4b9c", "default")
    wait_for("the two nodes empty", lambda: not _pods(local, ("idle", "own")), 30)
    round_ = local.invoke("disruption", {})["result"]
    assert round_["command"] is not None, round_
    assert round_["command"]["reason"] == "Empty"
    assert sorted(round_["command"]["candidates"]) == sorted([idle.node, own_node])
    assert sorted(round_["executed"]) == sorted([idle.claim, made[0]])
    by_name = claims(local)
    assert condition(by_name[idle.claim], "Consolidatable") == condition(by_name[made[0]], "Consolidatable") == "True"
    done = local.wait_for_terminations()
    assert [d["status"] for d in done] == ["SUCCEEDED", "SUCCEEDED"]
    wait_for("both NodeClaims gone", lambda: set(claims(local)) == {busy.claim}, 30)
    nodes = {n["metadata"]["name"] for n in local.kube_server.objects("v1", "Node")}
    assert nodes == {busy.node}
    assert live_instances(local) == {busy.instance_id}

    # an interruption of the busy adopted node: handled as any node's
    message = interrupt(
        local, busy.instance_id, "EC2 Spot Instance Interruption Warning", **{"instance-action": "terminate"}
    )
    assert message["terminationsStarted"] == [busy.claim], message
    done = local.wait_for_terminations()
    assert all(d["status"] == "SUCCEEDED" for d in done), done
    wait_for("the adopted NodeClaim gone", lambda: claims(local) == {}, 30)
    assert live_instances(local) == set()
    assert [n["metadata"]["name"] for n in local.kube_server.objects("v1", "Node")] == []

    # nothing leaked: garbage collection finds nothing to terminate or delete
    gc = local.collect_garbage()
    assert [gc[k] for k in done_by_gc] == [[]] * 4
