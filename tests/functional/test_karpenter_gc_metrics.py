"""Karpenter's metrics from garbage collection and the terminate step, run for real (moto with the real workflows,
handlers in-process, the real control plane), read back as CloudWatch EMF records: a NodeClaim whose instance is gone
is counted as disrupted with Karpenter v1.14.1's reason ``garbage_collected``; a TerminateInstances call that fails
counts a cloud provider ``Delete`` error of the node termination controller."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.handlers import runtime
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import local, make_local
from tests.functional.test_karpenter_event_metrics import every
from tests.realk8s.launched import launch_node

__all__ = ["kube_server", "local", "make_local"]


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


def test_a_nodeclaim_whose_instance_is_gone_is_counted_as_garbage_collected(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str]
) -> None:
    node = launch_node(local, "web")
    labels = local.kube_server.get("karpenter.sh/v1", "NodeClaim", node.claim)["metadata"]["labels"]
    local.clients.ec2.terminate_instances(InstanceIds=[node.instance_id])  # gone under its NodeClaim
    rt = runtime.runtime()
    real_clock = rt.clock
    rt.clock = lambda: real_clock() + timedelta(seconds=31)  # past the 30 s grace
    capfd.readouterr()
    gone = local.collect_garbage()
    assert gone["deletedNodeClaims"] == [node.claim]
    assert "disrupted" not in gone  # the metric labels are not the result's
    (disrupted,) = every(capfd)["karpenter_nodeclaims_disrupted_total"]
    assert (disrupted["reason"], disrupted["nodepool"], disrupted["capacity_type"], disrupted["_value"]) == (
        "garbage_collected",
        labels[wk.LABEL_NODEPOOL],
        labels[wk.LABEL_CAPACITY_TYPE],
        1.0,
    )
    assert disrupted["_dimensions"] == ["capacity_type", "cluster", "nodepool", "reason", "service"]
    # nothing left to collect: nothing counted again
    assert local.collect_garbage()["deletedNodeClaims"] == []
    assert "karpenter_nodeclaims_disrupted_total" not in every(capfd)


def test_a_failed_terminate_call_counts_a_cloud_provider_delete_error(
    local: LocalNodeflow, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models.instances import InstanceBackend

    node = launch_node(local, "web")

    def refuse(self: Any, instance_ids: Any) -> Any:
        raise EC2ClientError("UnauthorizedOperation", "You are not authorized to perform this operation.")

    monkeypatch.setattr(InstanceBackend, "terminate_instances", refuse)
    capfd.readouterr()
    with pytest.raises(RuntimeError, match="failed"):
        local.invoke("terminate", {"nodeClaim": node.claim})
    errors = every(capfd)["karpenter_cloudprovider_errors_total"]
    assert [(s["controller"], s["method"], s["provider"], s.get("error"), s["_value"]) for s in errors] == [
        ("node.termination", "Delete", "aws", None, 1.0)  # unclassified: Karpenter's empty error label, no dimension
    ]
    assert errors[0]["_dimensions"] == ["cluster", "controller", "method", "provider", "service"]
    monkeypatch.undo()
    local.invoke("terminate", {"nodeClaim": node.claim})  # succeeds now: no error counted
    assert "karpenter_cloudprovider_errors_total" not in every(capfd)
