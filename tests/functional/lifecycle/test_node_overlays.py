"""NodeOverlays in the cluster (karpenter.sh/v1alpha1, CRD registered in the real control plane) are read by the
provisioner and the disruption round (their snapshot lists them), applied to the instance types before solving,
and get Karpenter's conditions (ValidationSucceeded, Ready; Conflict for the loser of an equal-weight overlap)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodeflow.api import labels as wk
from sandbox.controlplane.facade import wait_for
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import pending
from tests.realk8s.workloads import TEMPLATE_HASH

FUSE = "smarter-devices/fuse"


def overlay(name: str, requirements: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {"requirements": requirements, **spec},
    }


def claims(local: LocalNodeflow) -> list[dict[str, Any]]:
    return local.kube_server.objects("karpenter.sh/v1", "NodeClaim")


def instance_types(claim: dict[str, Any]) -> list[str]:
    (req,) = [r for r in claim["spec"]["requirements"] if r["key"] == wk.LABEL_INSTANCE_TYPE]
    return list(req["values"])


def conditions(local: LocalNodeflow, name: str) -> dict[str, tuple[str, str, str]]:
    obj = local.kube_server.get("karpenter.sh/v1alpha1", "NodeOverlay", name)
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in obj.get("status", {}).get("conditions", [])}


def fuse_pod(local: LocalNodeflow, name: str) -> list[str]:
    """A workload whose pod asks for a FUSE device (kube-scheduler finds no node for it); its pod keys."""
    return pending(local, name, 1, cpu="1", memory="1Gi", requests={FUSE: "1"}, limits={FUSE: "1"})


def test_provisioner_and_disruption_apply_overlays_from_the_cluster_and_write_their_conditions(
    make_local: Callable[..., LocalNodeflow],
) -> None:
    local = make_local()
    # Without an overlay no instance type has the extended resource: nothing is provisioned.
    fuse_pod(local, "fuse")
    local.send_pending(["default/fuse"])
    assert local.provision()["result"]["nodeClaimsCreated"] == []

    local.apply(
        [
            overlay(
                "fuse-on-c",
                [
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c"]},
                    {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                ],
                capacity={FUSE: "2"},
            ),
            # m and r made dearer by $1000/hour
            overlay(
                "dear-m-r",
                [{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["m", "r"]}],
                priceAdjustment="+1000",
            ),
        ]
    )
    local.send_pending(["default/fuse"])
    result = local.provision()["result"]
    (name,) = result["nodeClaimsCreated"]
    (claim,) = [c for c in claims(local) if c["metadata"]["name"] == name]
    types = instance_types(claim)
    assert types
    assert all(t.startswith("c") for t in types), types
    assert claim["spec"]["resources"]["requests"][FUSE] == "1"
    annotations = claim["metadata"]["annotations"]
    assert annotations["karpenter.sh/capacity-overlay-applied"] == "true"
    assert "karpenter.sh/price-overlay-applied" not in annotations
    for applied in ("fuse-on-c", "dear-m-r"):
        assert conditions(local, applied) == {
            "ValidationSucceeded": ("True", "ValidationSucceeded", ""),
            "Ready": ("True", "Ready", ""),
        }

    # The FUSE workload goes: no simulated kubelet reports the device, so its pod would stay pending, and be
    # provisioned for again with the next one.
    local.kube_server.delete("apps/v1", "ReplicaSet", f"fuse-{TEMPLATE_HASH}")
    wait_for(
        "the FUSE pod to go",
        lambda: not local.kube_server.list_items("v1", "Pod", "default", label_selector="app=fuse"),
    )
    # A pod for m types: its NodeClaim's types were priced by the overlay (Karpenter's annotation says so).
    pending(local, "plain", 1, cpu="1", memory="1Gi", nodeSelector={wk.LABEL_INSTANCE_CATEGORY: "m"})
    local.send_pending(["default/plain"])
    (plain,) = local.provision()["result"]["nodeClaimsCreated"]
    (claim,) = [c for c in claims(local) if c["metadata"]["name"] == plain]
    assert all(t.startswith("m") for t in instance_types(claim))
    annotations = claim["metadata"]["annotations"]
    assert annotations["karpenter.sh/price-overlay-applied"] == "true"
    assert "karpenter.sh/capacity-overlay-applied" not in annotations

    # The disruption round keeps the conditions too: an equal-weight overlap is a conflict for the overlay that
    # comes second (the earlier name); a key too long for Karpenter's runtime validation is not applied either.
    same = [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}]
    local.apply(
        [
            overlay("a-first", same, priceAdjustment="+10%", weight=5),
            overlay("b-second", same, priceAdjustment="-10%", weight=5),
            overlay("too-long", [{"key": "example.com/" + "k" * 70, "operator": "Exists"}], price="1"),
        ]
    )
    local.invoke("disruption", {"source": "aws.scheduler", "detail-type": "Scheduled Event"})
    assert conditions(local, "b-second")["ValidationSucceeded"] == ("True", "ValidationSucceeded", "")
    assert conditions(local, "a-first") == {
        "ValidationSucceeded": ("False", "Conflict", "conflict with another overlay"),
        "Ready": ("False", "UnhealthyDependents", "ValidationSucceeded=False"),
    }
    status, reason, message = conditions(local, "too-long")["ValidationSucceeded"]
    assert (status, reason) == ("False", "RuntimeValidation")
    assert "spec.requirements[0]" in message
