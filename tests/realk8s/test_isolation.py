"""Isolation between tests sharing one control plane (sandbox/controlplane/isolation.py): what a test created is
deleted after it (cluster-scoped objects, its namespaces at once, what it made in namespaces that were there,
workloads before their pods), finalizers and pods on kubelet-less Nodes included; the rest stays."""

from __future__ import annotations

import contextlib
import time

from nodeflow.kube.client import NAMESPACES, NODE_CLAIMS, NODE_OVERLAYS, NODES, PODS, Resource
from nodeflow.kube.errors import AlreadyExists, NotFound
from sandbox.controlplane import ControlPlane
from sandbox.controlplane.facade import wait_for
from sandbox.controlplane.isolation import ClusterScope
from tests.realk8s.fixtures import TestCluster

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)


def test_the_test_gets_a_namespace_of_its_own_ready_for_pods(cluster: TestCluster) -> None:
    assert cluster.namespace.startswith("test-the-test-gets-a-namespace")
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    assert cluster.kube.create(PODS, pod, namespace=cluster.namespace)["spec"]["serviceAccountName"] == "default"


DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)


def test_reset_deletes_what_was_created_since_the_mark_and_nothing_else(
    control_plane: ControlPlane, cluster_scope: ClusterScope
) -> None:
    kube = control_plane.kube()
    mark = cluster_scope.mark()
    suffix = f"{time.monotonic_ns() % 10**6}"
    node, claim, ns, role = f"iso-node-{suffix}", f"iso-claim-{suffix}", f"iso-ns-{suffix}", f"iso-role-{suffix}"
    kube.create(NODES, {"metadata": {"name": node}})
    kube.create(
        NODE_CLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": claim, "finalizers": ["karpenter.sh/termination"]},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["general"]}],
            },
        },
    )
    # karpenter.sh serves NodeOverlays at v1alpha1 only (its preferred version is v1): reset deletes them too.
    overlay = f"iso-overlay-{suffix}"
    kube.create(
        NODE_OVERLAYS,
        {
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": overlay},
            "spec": {"requirements": [], "capacity": {"example.com/device": "1"}},
        },
    )
    kube.create(NAMESPACES, {"metadata": {"name": ns}})
    with contextlib.suppress(AlreadyExists):  # the controller-manager may be first
        kube.create(
            Resource("", "v1", "serviceaccounts", "ServiceAccount", True), {"metadata": {"name": "default"}}, ns
        )
    # A pod bound to a Node without a kubelet: a graceful deletion would never complete.
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}
    kube.create(PODS, pod, ns)
    kube.create(CLUSTER_ROLES, {"metadata": {"name": role}, "rules": []})
    # In a namespace that was there: a bound pod, a budget, and a Deployment whose ReplicaSet makes pods.
    kube.create(PODS, {**pod, "metadata": {"name": f"iso-pod-{suffix}"}}, "default")
    kube.create(PDBS, {"metadata": {"name": f"iso-pdb-{suffix}"}, "spec": {"maxUnavailable": 1}}, "default")
    labels = {"app": f"iso-{suffix}"}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    kube.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": f"iso-web-{suffix}"},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": template},
        },
        "default",
    )
    wait_for(
        "the Deployment's pods",
        lambda: len(kube.list_items(PODS, namespace="default", label_selector=f"app=iso-{suffix}")) == 2,
    )

    created = cluster_scope.created_since(mark)
    assert {k.plural: sorted(v) for k, v in created.items() if not k.namespaced} == {
        "nodes": [node],
        "nodeclaims": [claim],
        "nodeoverlays": [overlay],
        "namespaces": [ns],
        "clusterroles": [role],
    }
    by_kind = {k.plural: v for k, v in created.items() if k.namespaced}
    assert f"default/iso-pod-{suffix}" in by_kind["pods"]
    assert len([p for p in by_kind["pods"] if p.startswith(f"default/iso-web-{suffix}-")]) == 2
    assert by_kind["poddisruptionbudgets"] == [f"default/iso-pdb-{suffix}"]
    assert by_kind["deployments"] == [f"default/iso-web-{suffix}"]
    assert not any(name.startswith(f"{ns}/") for names in by_kind.values() for name in names)  # its namespace is

    cluster_scope.reset(mark)
    for kind, name in (
        (NODES, node),
        (NODE_CLAIMS, claim),
        (NODE_OVERLAYS, overlay),
        (CLUSTER_ROLES, role),
        (NAMESPACES, ns),
    ):
        try:
            kube.get(kind, name)
            raise AssertionError(f"{kind.plural}/{name} survived the reset")
        except NotFound:
            pass
    left = cluster_scope.created_since(mark)  # nothing left, nothing recreated, but what controllers tell of it:
    assert {k.plural for k in left} <= {"events"}  # kube-scheduler's late FailedScheduling about a deleted pod
    assert len(kube.list_items(CRDS)) == 5  # nodeflow's, installed before the mark
    kube.create(NAMESPACES, {"metadata": {"name": ns}})  # its name is free again at once
    cluster_scope.reset(mark)
    kube.api_client.close()  # type: ignore[no-untyped-call]
