"""A NodePool template taint with timeAdded (a metav1.Time) reaches the Node: the Register step copies the
NodeClaim's taints the Node registered without, timeAdded included, as JSON the API server accepts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.lifecycle.registration import StepDeps, register

if TYPE_CHECKING:
    from sandbox.controlplane.facade import RealKubeAPI

TAINT = {"key": "example.com/dedicated", "value": "web", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
PROVIDER = "aws:///us-east-1a/i-0123456789abcdef0"


def test_register_copies_a_timed_taint_onto_the_node(kube_server: RealKubeAPI) -> None:
    kube = KubeClient(kube_server.api_client())
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abcde", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
            "taints": [TAINT],
        },
    }
    kube.create(kc.NODE_CLAIMS, claim)
    kube.patch(kc.NODE_CLAIMS, "default-abcde", {"status": {"providerID": PROVIDER}}, subresource="status")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-0-1"}, "spec": {"providerID": PROVIDER}}
    kube.create(kc.NODES, node)
    out = register(StepDeps(kube, lambda: datetime(2026, 11, 21, 12, tzinfo=UTC)), "default-abcde")
    assert out["registered"] is True
    # the node lifecycle controller's taints (not-ready, then unreachable: no kubelet reports) come and go meanwhile
    taints = kube.get(kc.NODES, "ip-10-0-0-1")["spec"]["taints"]
    assert [t for t in taints if not t["key"].startswith("node.kubernetes.io/")] == [TAINT]
