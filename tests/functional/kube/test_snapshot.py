"""take_snapshot against the real API server: models, the pending-pod filter, the LIST bound."""

from __future__ import annotations

from typing import Any

from nodeflow.api.core import Pod
from nodeflow.cluster import ClusterState
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.kube.snapshot import KINDS, is_pending, take_snapshot
from nodeflow.kube.writes import delete
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.controlplane.proxy import Fault
from tests.functional.kube.conftest import (
    RUNNING,
    UNSCHEDULABLE,
    create_owned_pod,
    create_pod,
    node,
    node_claim,
    node_class,
    node_pool,
    pod,
)


def _seed_pending_cases(kube: KubeClient) -> None:
    kube.create(kc.NODES, node("node-a"))
    create_pod(kube, pod("pending"), UNSCHEDULABLE)
    _ns(kube, "team-a")
    create_pod(kube, pod("pending-other-ns", "team-a"), UNSCHEDULABLE)
    create_pod(kube, pod("bound", node_name="node-a"), RUNNING)
    create_pod(kube, pod("not-yet-tried"), {"phase": "Pending"})  # no PodScheduled condition yet
    create_pod(
        kube,
        pod("scheduled-false-other-reason"),
        {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]},
    )
    create_owned_pod(kube, pod("daemon"), "DaemonSet", UNSCHEDULABLE)
    create_owned_pod(kube, pod("replica"), "ReplicaSet", UNSCHEDULABLE)
    # a kubelet's mirror pod (always bound: a real API server refuses one without a node)
    create_pod(kube, pod("mirror", node_name="node-a", annotations={"kubernetes.io/config.mirror": "abc"}), RUNNING)
    create_pod(kube, pod("preempting"), {**UNSCHEDULABLE, "nominatedNodeName": "node-a"})
    create_pod(kube, pod("failed"), {**UNSCHEDULABLE, "phase": "Failed"})
    terminating = pod("terminating")
    terminating["metadata"]["finalizers"] = ["example.com/hold"]
    create_pod(kube, terminating, UNSCHEDULABLE)
    delete(kube, kc.PODS, "terminating", "default")  # stays, with a deletionTimestamp


def _ns(kube: KubeClient, name: str) -> bool:
    kube.create(kc.NAMESPACES, {"metadata": {"name": name, "labels": {"team": name}}})
    return True


def test_pending_pods_are_the_unschedulable_ones_karpenter_would_provision_for(kube: KubeClient) -> None:
    _seed_pending_cases(kube)
    snap = take_snapshot(kube)
    assert sorted(p.key for p in snap.pending) == ["default/pending", "default/replica", "team-a/pending-other-ns"]
    assert len(snap.pods) == 11
    terminating = next(p for p in snap.pods if p.name == "terminating")
    assert terminating.metadata.deletion_timestamp is not None
    assert all(isinstance(p, Pod) for p in snap.pods)
    assert all(is_pending(p) for p in snap.pending)


def test_snapshot_holds_every_kind_as_our_models(kube: KubeClient, server: Any) -> None:
    kube.create(kc.EC2_NODE_CLASSES, node_class("default"))
    kube.create(kc.NODE_POOLS, node_pool("default", weight=10))
    kube.create(kc.NODE_CLAIMS, node_claim("default-x1"))
    kube.create(kc.NODES, node("node-a"))
    kube.create(
        kc.DAEMON_SETS,
        {
            "metadata": {"name": "fluentbit", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"app": "fluentbit"}},
                "template": {
                    "metadata": {"labels": {"app": "fluentbit"}},
                    "spec": {
                        "containers": [{"name": "f", "image": "fluentbit", "resources": {"requests": {"cpu": "50m"}}}]
                    },
                },
            },
        },
        namespace="kube-system",
    )
    kube.create(
        kc.STORAGE_CLASSES,
        {"metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"},
    )
    kube.create(
        kc.PVCS,
        {
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "gp3",
                "resources": {"requests": {"storage": "10Gi"}},
            },
        },
        namespace="default",
    )
    kube.create(
        kc.PVS,
        {
            "metadata": {"name": "pv-1"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
            },
        },
    )
    kube.create(
        kc.PDBS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
        namespace="default",
    )
    create_pod(kube, pod("web-1"), UNSCHEDULABLE)

    snap = take_snapshot(kube)
    assert [p.name for p in snap.node_pools] == ["default"]
    assert snap.node_pools[0].spec.weight == 10
    assert [c.name for c in snap.node_classes] == ["default"]
    assert [c.name for c in snap.node_claims] == ["default-x1"]
    assert [n.name for n in snap.nodes] == ["node-a"]
    assert snap.nodes[0].allocatable_milli()["cpu"] == 4000
    assert [d.metadata.name for d in snap.daemon_sets] == ["fluentbit"]
    assert [s.metadata.name for s in snap.storage_classes] == ["gp3"]
    assert [c.key for c in snap.pvcs] == ["default/data"]
    assert [v.metadata.name for v in snap.pvs] == ["pv-1"]
    assert [p.metadata.name for p in snap.pdbs] == ["web"]
    assert {n.name for n in snap.namespaces} >= {"default", "kube-system"}
    assert snap.invalid == ()
    assert snap.missing_kinds == ()
    assert set(snap.resource_versions) >= {"Pod", "Node", "NodePool"}

    state = snap.state
    assert isinstance(state, ClusterState)
    assert state.pods == snap.pods
    assert state.node_pools == snap.node_pools
    provisioning = snap.provisioning_state()
    # the real DaemonSet controller may already have made fluentbit's pod for node-a (bound, so kept: its
    # requests are node-a's load); the only pending pod is web-1
    assert [p.name for p in provisioning.pods if not p.name.startswith("fluentbit-")] == ["web-1"]
    assert all(p.spec.node_name == "node-a" for p in provisioning.pods if p.name.startswith("fluentbit-"))
    assert [p.name for p in snap.pending] == ["web-1"]


def test_one_list_per_kind_never_a_get_per_pod(kube: KubeClient, server: Any) -> None:
    kube.create(kc.NODES, node("node-a"))
    for i in range(40):
        create_pod(kube, pod(f"p{i}", node_name="node-a" if i % 2 else None), RUNNING if i % 2 else UNSCHEDULABLE)
    server.requests.clear()
    snap = take_snapshot(kube)
    assert len(snap.pods) == 40
    assert len(snap.pending) == 20
    methods = [m for m, _, _ in server.requests]
    assert methods == ["GET"] * len(KINDS)
    assert len(server.requests) == len(KINDS) == snap.list_calls <= 15
    assert not any("/pods/" in path for _, path, _ in server.requests)


def test_paging_when_asked(kube: KubeClient, server: Any) -> None:
    for i in range(25):
        create_pod(kube, pod(f"p{i:02d}"), UNSCHEDULABLE)
    server.requests.clear()
    snap = take_snapshot(kube, page_size=10, kinds=["pods"])
    assert len(snap.pods) == 25
    assert len(snap.pending) == 25
    assert snap.list_calls == 3
    assert server.count("GET", "/api/v1/pods", "limit=10") == 3


def test_concurrent_listing_gives_the_same_snapshot(kube: KubeClient) -> None:
    _seed_pending_cases(kube)
    serial = take_snapshot(kube)
    parallel = take_snapshot(kube, workers=4)
    assert [p.key for p in parallel.pods] == [p.key for p in serial.pods]
    assert [p.key for p in parallel.pending] == [p.key for p in serial.pending]


def test_an_invalid_object_is_reported_not_fatal(kube: KubeClient, server: RealKubeAPI) -> None:
    kube.create(kc.NODE_POOLS, node_pool("good"))
    bad = node_pool("bad")
    # Karpenter's CEL rule: the nodepool label is restricted. The API server refuses it on create, so it is
    # stored bypassing admission (as one stored before the rule existed).
    bad["spec"]["template"]["metadata"] = {"labels": {"karpenter.sh/nodepool": "x"}}
    server.store_bypassing_admission(bad)
    snap = take_snapshot(kube)
    assert [p.name for p in snap.node_pools] == ["good"]
    (invalid,) = snap.invalid
    assert (invalid.kind, invalid.name) == ("NodePool", "bad")
    assert any("spec.template.metadata.labels" in line for line in invalid.errors), invalid.errors


def test_a_kind_whose_crd_is_missing_lists_empty(kube: KubeClient) -> None:
    class MissingClasses(KubeClient):
        def list_raw(self, resource: kc.Resource, **kw: Any) -> bytes:
            if resource is kc.EC2_NODE_CLASSES:
                return super().list_raw(kc.Resource("nope.example.com", "v1", "things", "Thing", False), **kw)
            return super().list_raw(resource, **kw)

    snap = take_snapshot(MissingClasses(kube.api_client))
    assert snap.node_classes == ()
    assert snap.missing_kinds == ("EC2NodeClass",)


def test_transient_errors_are_retried(kube: KubeClient, server: Any) -> None:
    failures = {"left": 2}

    def flaky(method: str, path: str, query: dict[str, str]) -> None:
        if path == "/api/v1/nodes" and failures["left"]:
            failures["left"] -= 1
            raise Fault(503, "ServiceUnavailable", "etcd is busy")

    kube.create(kc.NODES, node("node-a"))
    server.before_request = flaky
    sleeps: list[float] = []
    snap = take_snapshot(kube, sleep=sleeps.append)
    assert [n.name for n in snap.nodes] == ["node-a"]
    assert len(sleeps) == 2
