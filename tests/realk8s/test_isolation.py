"""Isolation between tests sharing one control plane (sandbox/controlplane/isolation.py): what a test created
outside its namespace is deleted after it, finalizers and pods on kubelet-less Nodes included; the rest stays."""

from __future__ import annotations

import contextlib
import time

from nodeflow.kube.client import NAMESPACES, NODE_CLAIMS, NODES, PODS, Resource
from nodeflow.kube.errors import AlreadyExists, NotFound
from sandbox.controlplane import ControlPlane
from sandbox.controlplane.isolation import ClusterScope
from tests.realk8s.fixtures import TestCluster

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)


def test_the_test_gets_a_namespace_of_its_own_ready_for_pods(cluster: TestCluster) -> None:
    assert cluster.namespace.startswith("test-the-test-gets-a-namespace")
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    assert cluster.kube.create(PODS, pod, namespace=cluster.namespace)["spec"]["serviceAccountName"] == "default"


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
    kube.create(NAMESPACES, {"metadata": {"name": ns}})
    with contextlib.suppress(AlreadyExists):  # the controller-manager may be first
        kube.create(
            Resource("", "v1", "serviceaccounts", "ServiceAccount", True), {"metadata": {"name": "default"}}, ns
        )
    # A pod bound to a Node without a kubelet: a graceful deletion would never complete.
    kube.create(
        PODS, {"metadata": {"name": "p"}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}, ns
    )
    kube.create(CLUSTER_ROLES, {"metadata": {"name": role}, "rules": []})

    created = cluster_scope.created_since(mark)
    assert {k.plural: sorted(v) for k, v in created.items()} == {
        "nodes": [node],
        "nodeclaims": [claim],
        "namespaces": [ns],
        "clusterroles": [role],
    }
    cluster_scope.reset(mark)
    for kind, name in ((NODES, node), (NODE_CLAIMS, claim), (CLUSTER_ROLES, role)):
        try:
            kube.get(kind, name)
            raise AssertionError(f"{kind.plural}/{name} survived the reset")
        except NotFound:
            pass
    assert kube.list_items(PODS, namespace=ns) == []  # force-deleted
    with contextlib.suppress(NotFound):
        assert kube.get(NAMESPACES, ns)["status"]["phase"] == "Terminating"
    assert set(cluster_scope.created_since(mark)) <= {NAMESPACES}  # the namespace controller may not be done yet
    assert len(kube.list_items(CRDS)) == 5  # nodeflow's, installed before the mark
    kube.api_client.close()  # type: ignore[no-untyped-call]
