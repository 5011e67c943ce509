"""sandbox.kwok: moto instances become Nodes on the real API server, their simulated kubelets driven step by step
(a fake clock) or in the background; the real node lifecycle controller does the rest (the not-ready taint lifted
once Ready, the Node Unknown once its kubelet is silent)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nodeflow.kube.client import NODE_CLAIMS, NODES, KubeClient
from sandbox.aws import AwsWorld, Clients
from sandbox.controlplane.facade import RealKubeAPI, wait_for
from sandbox.controlplane.proxy import Fault
from sandbox.kubelet import mark_ready
from sandbox.kwok import SimulatedKubelets
from tests.functional.sandbox.conftest import CLUSTER

NOT_READY = "node.kubernetes.io/not-ready"  # the API server's taint on every new Node, until the controller lifts it


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def create_claim(kube: KubeClient, name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {"karpenter.sh/nodepool": "general", "team": "infra", **(labels or {})},
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["general"]}],
            **spec,
        },
    }
    kube.create(NODE_CLAIMS, body)
    status = {
        "capacity": {"cpu": "4", "memory": "15Gi", "pods": "58"},
        "allocatable": {"cpu": "3920m", "memory": "14Gi", "pods": "58"},
    }
    return kube.patch(NODE_CLAIMS, name, {"status": status}, subresource="status")


def launch(
    world: AwsWorld, clients: Clients, claim: str, *, zone: str = "us-east-1b", spot: bool = False
) -> dict[str, Any]:
    tags = [
        {"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"},
        {"Key": "karpenter.sh/nodeclaim", "Value": claim},
        {"Key": "karpenter.sh/nodepool", "Value": "general"},
    ]
    kwargs: dict[str, Any] = {
        "ImageId": world.amis["arm64"],
        "InstanceType": "m7g.xlarge",
        "MinCount": 1,
        "MaxCount": 1,
        "SubnetId": world.subnets[zone],
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
    }
    if spot:
        kwargs["InstanceMarketOptions"] = {"MarketType": "spot"}
    instance: dict[str, Any] = clients.ec2.run_instances(**kwargs)["Instances"][0]
    return instance


def ready(node: dict[str, Any]) -> str:
    return str(next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"))


def taints(node: dict[str, Any]) -> list[str]:
    return [t["key"] for t in node["spec"].get("taints") or []]


@contextmanager
def kubelets(kube: KubeClient, clients: Clients, **options: Any) -> Iterator[SimulatedKubelets]:
    """Simulated kubelets, stepped by the test (``start()`` runs them in the background); stopped after."""
    kwok = SimulatedKubelets(kube, clients.ec2, CLUSTER, instance_interval=0.0, **options)
    try:
        yield kwok
    finally:
        kwok.stop()


def test_kubelet_registers_then_becomes_ready(world: AwsWorld, clients: Clients, kube: KubeClient) -> None:
    create_claim(
        kube,
        "general-abcde",
        labels={"kubernetes.io/arch": "arm64"},
        taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}],
        startupTaints=[{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}],
    )
    instance = launch(world, clients, "general-abcde", spot=True)
    iid = instance["InstanceId"]
    # An instance of another cluster and one without a NodeClaim tag are ignored.
    clients.ec2.run_instances(ImageId=world.amis["amd64"], MinCount=1, MaxCount=1, InstanceType="m5.large")

    clock = FakeClock()
    with kubelets(kube, clients, register_after=1.0, ready_after=2.0, clock=clock) as kubelet:
        kubelet.step()
        assert kube.list_items(NODES) == []

        clock.now += 1.0
        kubelet.step()
        [node] = kube.list_items(NODES)
        name = instance["PrivateDnsName"]
        assert node["metadata"]["name"] == name == kubelet.node_name(iid)
        assert node["spec"]["providerID"] == f"aws:///us-east-1b/{iid}"
        # (the node lifecycle controller copies kubernetes.io/os and arch to their beta.kubernetes.io labels, soon)
        labels = {k: v for k, v in node["metadata"]["labels"].items() if not k.startswith("beta.kubernetes.io/")}
        assert labels == {
            "karpenter.sh/nodepool": "general",
            "team": "infra",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "arm64",
            "node.kubernetes.io/instance-type": "m7g.xlarge",
            "topology.kubernetes.io/zone": "us-east-1b",
            "topology.kubernetes.io/region": "us-east-1",
            "karpenter.sh/capacity-type": "spot",
        }
        registered = [t for t in node["spec"]["taints"] if t["key"] != NOT_READY]
        assert registered == [
            {"key": "dedicated", "value": "infra", "effect": "NoSchedule"},
            {"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"},
            {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
        ]
        assert NOT_READY in taints(node)  # added by the API server (TaintNodesByCondition) to every new Node
        assert node["status"]["capacity"] == {"cpu": "4", "memory": "15Gi", "pods": "58"}
        assert node["status"]["allocatable"]["cpu"] == "3920m"
        assert ready(node) == "False"
        assert [e.kind for e in kubelet.events] == ["registered"]

        clock.now += 1.5
        kubelet.step()
        assert ready(kube.get(NODES, name)) == "False"

        clock.now += 0.5
        kubelet.step()
        assert ready(kube.get(NODES, name)) == "True"
        # the startup taint is gone (its daemon's work); the node lifecycle controller lifts not-ready
        node = wait_for(
            "the not-ready taint lifted", lambda: None if NOT_READY in taints(n := kube.get(NODES, name)) else n
        )
        assert taints(node) == ["dedicated", "karpenter.sh/unregistered"]
        assert [(e.kind, e.node, e.instance_id, e.node_claim, e.at) for e in kubelet.events] == [
            ("registered", name, iid, "general-abcde", 101.0),
            ("ready", name, iid, "general-abcde", 103.0),
        ]
        kubelet.step()  # nothing more to do
        assert len(kubelet.events) == 2

        # The instance goes away: the kubelet goes silent, the Node stays, and the node lifecycle controller marks
        # its Ready condition Unknown once the Lease is older than its grace period.
        clients.ec2.terminate_instances(InstanceIds=[iid])
        kubelet.step()
        assert [e.kind for e in kubelet.events] == ["registered", "ready", "gone"]
        wait_for("the Node Unknown", lambda: ready(kube.get(NODES, name)) == "Unknown", timeout=60)
        assert kubelet.errors == []


def test_skipped_claim_and_missing_claim_never_register(world: AwsWorld, clients: Clients, kube: KubeClient) -> None:
    create_claim(kube, "general-good")
    create_claim(kube, "general-stuck")
    good = launch(world, clients, "general-good", zone="us-east-1a")
    launch(world, clients, "general-stuck", zone="us-east-1c")
    launch(world, clients, "general-nosuchclaim")
    with kubelets(kube, clients, skip=lambda claim: claim == "general-stuck") as kubelet:
        for _ in range(3):
            kubelet.step()
    nodes = kube.list_items(NODES)
    assert [n["spec"]["providerID"] for n in nodes] == [f"aws:///us-east-1a/{good['InstanceId']}"]
    assert ready(nodes[0]) == "True"
    # Without the label on the claim, the architecture comes from the instance (launched from the arm64 image).
    assert nodes[0]["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"
    assert nodes[0]["metadata"]["labels"]["karpenter.sh/capacity-type"] == "on-demand"
    assert nodes[0]["status"]["capacity"]["pods"] == "58"


def test_kubelet_in_background(world: AwsWorld, clients: Clients, kube: KubeClient) -> None:
    create_claim(kube, "general-bg")
    iid = launch(world, clients, "general-bg")["InstanceId"]
    with kubelets(kube, clients, ready_after=0.05) as kubelet:
        kubelet.start()
        wait_for("the kubelet ready", lambda: kubelet.events_of("ready"), timeout=10)
    assert [e.kind for e in kubelet.events] == ["registered", "ready"]
    assert kubelet.events[1].at - kubelet.events[0].at >= 0.05
    assert ready(kube.get(NODES, kubelet.node_name(iid) or "")) == "True"
    assert kubelet.errors == []


def test_a_conflict_on_the_startup_taints_patch_is_read_again_and_retried(
    kube_server: RealKubeAPI, kube: KubeClient
) -> None:
    """The node lifecycle controller rewrites a Node's taints when it turns Ready (it lifts not-ready), so the
    guarded patch that removes the startup taints can meet a 409: the taints are read again and the patch retried
    at once, not left for a later pass (which a driven kubelet may never get)."""
    name = "ip-10-0-0-9.ec2.internal"
    kube.create(
        NODES,
        {
            "metadata": {"name": name},
            "spec": {"taints": [{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}]},
        },
    )
    conflicts: list[str] = []

    def conflict_once(method: str, path: str, query: dict[str, str]) -> Fault | None:
        if method == "PATCH" and path.endswith(f"/nodes/{name}") and not conflicts:
            conflicts.append(path)
            return Fault.conflict()
        return None

    kube_server.before_request = conflict_once
    try:
        startup = [{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}]
        assert mark_ready(kube, name, startup)
    finally:
        kube_server.before_request = None
    assert conflicts  # the 409 was met
    assert "node.cilium.io/agent-not-ready" not in taints(kube.get(NODES, name))
    assert ready(kube.get(NODES, name)) == "True"
