"""Simulated kubelets (sandbox/kwok) against the real control plane: a moto instance becomes a Node the real
kube-scheduler binds pods to and the real node lifecycle controller keeps Ready while the Lease is renewed, and
marks unreachable once the instance is gone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from nodeflow.kube.client import NODE_CLAIMS, NODES, PODS, KubeClient, Resource
from nodeflow.kube.errors import Conflict, NotFound
from sandbox.aws import AwsWorld, Clients
from sandbox.controlplane import KUBELET
from sandbox.controlplane.facade import wait_for
from sandbox.kwok import LEASES, NODE_LEASE_NAMESPACE, SimulatedKubelets
from tests.functional.sandbox.conftest import CLUSTER
from tests.functional.sandbox.test_kubelet import create_claim, launch
from tests.realk8s.fixtures import NODE_MONITOR_GRACE_PERIOD, TestCluster

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
LEASE_SECONDS = 4  # renewed every second: well inside the node lifecycle controller's grace period


def taint_keys(node: dict[str, Any]) -> set[str]:
    return {t["key"] for t in (node.get("spec") or {}).get("taints") or []}


def condition(obj: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def register_as_nodeflow(kube: KubeClient, name: str) -> None:
    """What nodeflow's registration does to a new Node: drop ``karpenter.sh/unregistered`` (read, write guarded by
    the resourceVersion, again on a conflict: the node lifecycle controller writes the new Node's taints too)."""

    def attempt() -> bool:
        node = kube.get(NODES, name)
        kept = [t for t in node["spec"].get("taints") or [] if t["key"] != "karpenter.sh/unregistered"]
        body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}, "spec": {"taints": kept}}
        try:
            kube.patch(NODES, name, body)
        except Conflict:
            return False
        return True

    wait_for("the unregistered taint removed", attempt)


@pytest.fixture
def kubelets(cluster: TestCluster, clients: Clients) -> Iterator[SimulatedKubelets]:
    kubelets = SimulatedKubelets(
        cluster.kube_as(KUBELET), clients.ec2, CLUSTER, lease_duration=LEASE_SECONDS, instance_interval=0.2
    )
    kubelets.start()
    try:
        yield kubelets
    finally:
        kubelets.stop()
    assert kubelets.errors == []


def test_a_deployment_runs_on_a_simulated_node_until_its_instance_is_gone(
    cluster: TestCluster, world: AwsWorld, clients: Clients, kubelets: SimulatedKubelets
) -> None:
    kube, ns = cluster.kube, cluster.namespace
    kube.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 3,
                        "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}],
                    },
                },
            },
        },
        namespace=ns,
    )

    def pods() -> list[dict[str, Any]]:
        return kube.list_items(PODS, namespace=ns)

    # No node: the real ReplicaSet controller's pods stay Pending, the real scheduler says why.
    pending = wait_for(
        "3 unschedulable pods",
        lambda: len(p := pods()) == 3 and all(condition(x, "PodScheduled") == "False" for x in p) and p,
    )
    assert {x["status"]["conditions"][0]["reason"] for x in pending} == {"Unschedulable"}

    claim = cluster.name("general")
    create_claim(kube, claim)
    instance = launch(world, clients, claim)["InstanceId"]
    name = wait_for("the Node", lambda: kubelets.node_name(instance))
    node = kube.get(NODES, name)
    assert node["spec"]["providerID"].endswith(f"/{instance}")
    assert node["metadata"]["labels"]["karpenter.sh/nodepool"] == "general"
    assert node["status"]["allocatable"]["cpu"] == "3920m"
    assert "karpenter.sh/unregistered" in taint_keys(node)
    lease = wait_for(
        "the Lease",
        lambda: next(
            iter(kube.list_items(LEASES, namespace=NODE_LEASE_NAMESPACE, field_selector=f"metadata.name={name}")), None
        ),
    )
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    register_as_nodeflow(kube, name)

    # kube-scheduler binds them; the kubelet runs them.
    def all_running() -> list[dict[str, Any]] | None:
        p = pods()
        return p if len(p) == 3 and all(condition(x, "Ready") == "True" for x in p) else None

    running = wait_for("3 Running and Ready pods", all_running)
    for pod in running:
        assert pod["spec"]["nodeName"] == name
        assert pod["status"]["phase"] == "Running"
        assert pod["status"]["podIP"]
        assert pod["status"]["hostIP"] == node["status"]["addresses"][0]["address"]
        assert pod["status"]["containerStatuses"][0]["ready"] is True
        assert condition(pod, "ContainersReady") == "True"
    assert len({p["status"]["podIP"] for p in running}) == 3

    # The Lease is renewed, so the node lifecycle controller keeps the Node Ready past its grace period.
    renewed = lease["spec"]["renewTime"]
    time.sleep(NODE_MONITOR_GRACE_PERIOD + 1)
    assert kube.get(LEASES, name, NODE_LEASE_NAMESPACE)["spec"]["renewTime"] > renewed
    node = kube.get(NODES, name)
    assert condition(node, "Ready") == "True"
    assert not taint_keys(node) & {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}

    # A deleted pod goes when its grace period ends (not before); the ReplicaSet controller replaces it.
    victim = running[0]["metadata"]["name"]
    kube.delete(PODS, victim, ns)
    time.sleep(1)  # deletionTimestamp is the deletion time + the grace period, in whole seconds: at least 2 s away
    assert kube.get(PODS, victim, ns)["metadata"]["deletionTimestamp"]

    def gone() -> bool:
        try:
            kube.get(PODS, victim, ns)
        except NotFound:
            return True
        return False

    wait_for("the pod's deletion to be confirmed", gone, timeout=10)
    replaced = wait_for("a replacement pod", all_running)
    assert victim not in {p["metadata"]["name"] for p in replaced}

    # The instance goes: the kubelet falls silent, the node lifecycle controller marks the Node unreachable.
    clients.ec2.terminate_instances(InstanceIds=[instance])
    node = wait_for(
        "the unreachable taint",
        lambda: "node.kubernetes.io/unreachable" in taint_keys(n := kube.get(NODES, name)) and n,
        timeout=NODE_MONITOR_GRACE_PERIOD + 15,
        every=0.5,
    )
    assert condition(node, "Ready") == "Unknown"
    assert [e.kind for e in kubelets.events if e.node == name][-1] == "gone"


def test_startup_taints_go_when_ready_a_node_that_fails_to_join_never_registers_and_a_deleted_node_stays_deleted(
    cluster: TestCluster, world: AwsWorld, clients: Clients, kubelets: SimulatedKubelets
) -> None:
    kube = cluster.kube
    joins, fails = cluster.name("general"), cluster.name("general")
    kubelets.skip = lambda claim: claim == fails
    create_claim(
        kube, joins, startupTaints=[{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}]
    )
    create_claim(kube, fails)
    good, bad = launch(world, clients, joins)["InstanceId"], launch(world, clients, fails)["InstanceId"]
    name = wait_for("the Node", lambda: kubelets.node_name(good))
    node = wait_for(  # reported Ready by the kubelet, then the daemon owning the startup taint removes it
        "Ready without the startup taint",
        lambda: (
            condition(n := kube.get(NODES, name), "Ready") == "True"
            and "node.cilium.io/agent-not-ready" not in taint_keys(n)
            and n
        ),
    )
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]} == {
        "Ready": "True",
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
    }
    assert kubelets.node_name(bad) is None

    kube.delete(NODES, name)
    wait_for("the kubelet to notice", lambda: name not in kubelets.running())
    time.sleep(1)  # several EC2 polls: a running kubelet does not register its Node again
    with pytest.raises(NotFound):
        kube.get(NODES, name)
    assert [e.kind for e in kubelets.events if e.node == name] == ["registered", "ready", "deleted"]


def test_a_node_registers_with_the_capacity_launch_computed_never_a_default(
    cluster: TestCluster, world: AwsWorld, clients: Clients, kubelets: SimulatedKubelets
) -> None:
    """The instance is up before the Launch step wrote its NodeClaim's capacity: its kubelet registers only then,
    with that capacity (a Node of the sandbox's 2-CPU default made kube-scheduler leave pods nodeflow had planned
    onto it Pending: 'Insufficient cpu')."""
    kube = cluster.kube
    claim = cluster.name("general")
    kube.create(
        NODE_CLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": claim, "labels": {"karpenter.sh/nodepool": "general"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["general"]}],
            },
        },
    )
    instance = launch(world, clients, claim)["InstanceId"]
    time.sleep(1)  # several EC2 polls
    assert kubelets.node_name(instance) is None
    status = {
        "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
        "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"},
    }
    kube.patch(NODE_CLAIMS, claim, {"status": status}, subresource="status")
    name = wait_for("the Node", lambda: kubelets.node_name(instance))
    assert kube.get(NODES, name)["status"]["allocatable"]["cpu"] == "3920m"
