"""The install on a cluster that runs Karpenter v1: Karpenter's CRDs are kept, not applied over, not pruned, not
removed; a Karpenter CRD that lacks a version nodeflow reads stops the install before anything is applied.

A control plane of the module's own with no CRDs (the install writes cluster-wide names the shared one's tests use):
"Karpenter's CRDs" are created first as its chart leaves them (Helm's labels and annotations, no nodeflow label).
Their schemas are nodeflow's own CRD files (what is judged is ownership and the served versions, not the schema).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from nodeflow.install import NAMESPACE, StackOutputs
from nodeflow.installer import InstallFailed, install, uninstall
from nodeflow.kube.applyset import CRDS
from nodeflow.kube.client import NAMESPACES, KubeClient
from nodeflow.kube.errors import NotFound
from sandbox.controlplane import ADMIN, ControlPlane
from sandbox.controlplane.facade import wait_for
from sandbox.controlplane.isolation import ClusterScope
from sandbox.controlplane.launcher import CRD_DIR

KARPENTER = (
    "ec2nodeclasses.karpenter.k8s.aws",
    "nodeclaims.karpenter.sh",
    "nodeoverlays.karpenter.sh",
    "nodepools.karpenter.sh",
)
HELM_LABELS = {"app.kubernetes.io/managed-by": "Helm"}
HELM_ANNOTATIONS = {"meta.helm.sh/release-name": "karpenter-crd", "meta.helm.sh/release-namespace": "kube-system"}


def outputs() -> StackOutputs:
    return StackOutputs(
        stack="Nodeflow-shop",
        region="eu-west-1",
        cluster_name="shop",
        webhook_url="https://abcdefghij0123456789abcdefghij01.lambda-url.eu-west-1.on.aws/",
        agent_role_arn="arn:aws:iam::123456789012:role/Nodeflow-shop-AgentRole",
        pod_identity=True,
    )


def karpenters(name: str, versions: tuple[str, ...] | None = None) -> dict[str, Any]:
    """CRD ``name`` as Karpenter's chart installs it (optionally serving only ``versions``)."""
    docs: list[dict[str, Any]] = [d for f in sorted(CRD_DIR.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
    [crd] = [d for d in docs if d and d["metadata"]["name"] == name]
    crd["metadata"] = {"name": name, "labels": dict(HELM_LABELS), "annotations": dict(HELM_ANNOTATIONS)}
    if versions is not None:
        template = crd["spec"]["versions"][0]
        crd["spec"]["versions"] = [
            {**template, "name": v, "served": True, "storage": i == 0} for i, v in enumerate(versions)
        ]
    return crd


def established(kube: KubeClient, name: str) -> bool:
    conditions = (kube.get(CRDS, name).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


@pytest.fixture(scope="module")
def plane() -> Iterator[tuple[ControlPlane, ClusterScope]]:
    with ControlPlane(controllers=True, crds=[]) as started:
        kube = started.kube(ADMIN)
        scope = ClusterScope(kube)
        try:
            yield started, scope
        finally:
            scope.close()
            kube.api_client.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def kube(plane: tuple[ControlPlane, ClusterScope]) -> Iterator[KubeClient]:
    """The cluster admin on a cluster without nodeflow (CRDs included: each test makes its own)."""
    started, scope = plane
    mark = scope.mark()
    kube = started.kube(ADMIN)
    try:
        yield kube
    finally:
        scope.reset(mark)
        for name in [*KARPENTER, "nodeflowpolicies.nodeflow.io"]:
            try:
                kube.delete(CRDS, name)
            except NotFound:
                continue
        for name in [*KARPENTER, "nodeflowpolicies.nodeflow.io"]:
            wait_for(f"CRD {name} deleted", lambda name=name: _gone(kube, name), 60)
        kube.api_client.close()  # type: ignore[no-untyped-call]


def _gone(kube: KubeClient, name: str) -> bool:
    try:
        kube.get(CRDS, name)
    except NotFound:
        return True
    return False


def test_karpenters_crds_of_the_same_versions_are_kept_through_install_upgrade_and_removal(kube: KubeClient) -> None:
    for name in KARPENTER:
        kube.create(CRDS, karpenters(name))
    for name in KARPENTER:
        wait_for(f"{name} Established", lambda name=name: established(kube, name))
    before = {name: kube.get(CRDS, name) for name in KARPENTER}

    summary = install(kube, outputs(), time_left=lambda: 300.0)
    again = install(kube, outputs(), time_left=lambda: 300.0)  # an upgrade: the same
    kube.get(CRDS, "nodeflowpolicies.nodeflow.io")  # nodeflow's own CRD is installed
    for name, was in before.items():
        now = kube.get(CRDS, name)
        assert now["metadata"]["resourceVersion"] == was["metadata"]["resourceVersion"], name
        assert now["metadata"].get("labels") == HELM_LABELS, name
        managers = {m.get("manager") for m in now["metadata"].get("managedFields") or []}
        assert "nodeflow-install" not in managers, (name, managers)
    assert sorted(summary["keptCrds"]) == sorted(again["keptCrds"]) == sorted(KARPENTER)

    kube.patch(NAMESPACES, NAMESPACE, {"metadata": {"annotations": {"nodeflow.io/uninstall": "keep-nodeclaims"}}})
    uninstall(kube, cluster_exists=lambda: True)
    for name, was in before.items():  # removal keeps every CRD (Karpenter's untouched)
        assert kube.get(CRDS, name)["metadata"]["resourceVersion"] == was["metadata"]["resourceVersion"], name


def test_a_karpenter_crd_without_the_version_nodeflow_reads_stops_the_install_before_anything_is_applied(
    kube: KubeClient,
) -> None:
    kube.create(CRDS, karpenters("nodepools.karpenter.sh", versions=("v1beta1",)))
    wait_for("nodepools Established", lambda: established(kube, "nodepools.karpenter.sh"))
    before = kube.get(CRDS, "nodepools.karpenter.sh")["metadata"]["resourceVersion"]

    with pytest.raises(InstallFailed) as failed:
        install(kube, outputs(), time_left=lambda: 300.0, undo_on_failure=True)
    message = str(failed.value)
    assert "CRD nodepools.karpenter.sh is installed by Helm release kube-system/karpenter-crd" in message
    assert "serves v1beta1, not v1" in message
    assert "upgrade Karpenter's CRDs to v1" in message
    assert kube.get(CRDS, "nodepools.karpenter.sh")["metadata"]["resourceVersion"] == before
    with pytest.raises(NotFound):  # nothing was applied, not even the namespace
        kube.get(NAMESPACES, NAMESPACE)
