"""Before install: a cluster without nodeflow's CRDs (a real control plane of the test's own, started with none:
kube-apiserver answers a resource whose CRD is missing with a 404). The doctor reads no EC2NodeClass and no
NodePool (the discovery tag is checked instead), reports the CRDs missing, and says NodeClaims cannot be listed
yet."""

from __future__ import annotations

from datetime import UTC, datetime

from nodeflow.doctor import checks as c
from nodeflow.doctor import kube_facts
from nodeflow.doctor.checks import Status, Unreadable
from sandbox.controlplane import ADMIN, ControlPlane


def test_before_install_the_cluster_has_no_crds_yet() -> None:
    """A cluster without nodeflow's CRDs (etcd and kube-apiserver, no CRD installed): the EC2NodeClasses and
    NodePools are none (the discovery tag is checked instead), the CRDs are missing, NodeClaims cannot be listed
    yet."""
    with ControlPlane(crds=[]) as plane:
        kube = plane.kube(ADMIN)
        try:
            assert kube_facts.node_classes(kube) == []
            assert kube_facts.node_pools(kube) == ()
            claims = kube_facts.node_claims(kube)
            assert claims == Unreadable("nodeclaims.karpenter.sh is not installed", c.NOT_INSTALLED)
            stack = c.StackInfo("Nodeflow-demo", "us-east-1", "demo")
            check = c.crds(kube_facts.crds(kube), kube_facts.EXPECTED_CRDS, stack)
            assert (check.status, check.detail) == (
                Status.FAIL,
                "not installed: nodepools.karpenter.sh, nodeclaims.karpenter.sh, ec2nodeclasses.karpenter.k8s.aws, "
                "nodeoverlays.karpenter.sh, nodeflowpolicies.nodeflow.io",
            )
            assert (
                c.stuck_node_claims(claims, datetime.now(UTC)).action
                == "install nodeflow's CRDs first (see the crds check)"
            )
        finally:
            kube.api_client.close()  # type: ignore[no-untyped-call]
