"""take_snapshot reads NodeflowPolicies (nodeflow.io/v1alpha1) over HTTP: valid ones into the plan's state, an
invalid one reported and standing in as its fail-safe pause, and none when the CRD is absent or not granted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodeflow.governance.policy import Governance
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.kube.errors import Forbidden, Invalid
from nodeflow.kube.snapshot import take_snapshot
from sandbox.controlplane.facade import RealKubeAPI

NOW = datetime(2026, 11, 25, 5, 30, tzinfo=UTC)


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nodeflow.io/v1alpha1", "kind": "NodeflowPolicy", "metadata": {"name": name}, "spec": spec}


GPU_ACCESS = policy(
    "gpu-access", nodePoolAccess=[{"nodePools": ["gpu"], "namespaceSelector": {"matchLabels": {"team": "ml"}}}]
)


def test_policies_and_namespace_labels_reach_the_state(kube: KubeClient) -> None:
    kube.create(kc.NODEFLOW_POLICIES, GPU_ACCESS)
    kube.create(kc.NAMESPACES, {"metadata": {"name": "ml-prod", "labels": {"team": "ml"}}})
    snap = take_snapshot(kube)
    assert [p.name for p in snap.policies] == ["gpu-access"]
    state = snap.provisioning_state()
    assert [p.name for p in state.policies] == ["gpu-access"]
    labels = {n.name: n.metadata.labels for n in state.namespaces}
    gov = Governance.from_policies(state.policies)
    assert gov.pool_denial("ml-prod", labels["ml-prod"] or {}, "gpu") is None
    assert gov.pool_denial("default", labels["default"] or {}, "gpu") == (
        "namespace default may not use NodePool gpu: policy gpu-access"
    )


def test_an_invalid_policy_is_reported_and_fails_safe(kube: KubeClient) -> None:
    # The CRD admits it (a cron field out of range is beyond its pattern); the model does not.
    bad = policy(
        "freeze",
        pauses=[{"name": "w", "schedule": "99 18 * * 5", "duration": "1h", "disruption": True, "nodePools": ["gpu"]}],
    )
    kube.create(kc.NODEFLOW_POLICIES, bad)
    snap = take_snapshot(kube)
    assert snap.policies == ()
    (invalid,) = snap.invalid
    assert (invalid.kind, invalid.name) == ("NodeflowPolicy", "freeze")
    assert any("spec.pauses" in line and "minute" in line for line in invalid.errors), invalid.errors
    gov = Governance.from_policies(snap.state.policies)
    why = gov.provisioning_pause("gpu", NOW)
    assert why is not None
    assert "by policy freeze" in why
    assert gov.provisioning_pause("general", NOW) is None


def test_no_crd_or_no_grant_means_no_policies(kube: KubeClient) -> None:
    class Missing(KubeClient):
        def list_raw(self, resource: kc.Resource, **kw: Any) -> bytes:
            if resource is kc.NODEFLOW_POLICIES:
                return super().list_raw(kc.Resource("nope.example.com", "v1", "things", "Thing", False), **kw)
            return super().list_raw(resource, **kw)

    class Denied(KubeClient):
        def list_raw(self, resource: kc.Resource, **kw: Any) -> bytes:
            if resource is kc.NODEFLOW_POLICIES:
                raise Forbidden("nodeflowpolicies.nodeflow.io is forbidden")
            return super().list_raw(resource, **kw)

    kube.create(kc.NODEFLOW_POLICIES, GPU_ACCESS)
    for client in (Missing(kube.api_client), Denied(kube.api_client)):
        snap = take_snapshot(client)
        assert snap.policies == ()
        assert snap.state.policies == ()
        assert snap.missing_kinds == ("NodeflowPolicy",)


def test_the_crd_refuses_what_it_can(kube: KubeClient, server: RealKubeAPI) -> None:
    with pytest.raises(Invalid, match="set 'namespaces' and/or 'namespaceSelector'"):
        kube.create(kc.NODEFLOW_POLICIES, policy("open", nodePoolAccess=[{"nodePools": ["gpu"]}]))
    assert server.objects("nodeflow.io/v1alpha1", "NodeflowPolicy") == []


def test_the_provisioner_reports_an_invalid_policy_and_a_missing_crd_once(
    kube: KubeClient, server: RealKubeAPI
) -> None:
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle import policy_status

    class Missing(KubeClient):
        def list_raw(self, resource: kc.Resource, **kw: Any) -> bytes:
            if resource is kc.NODEFLOW_POLICIES:
                return super().list_raw(kc.Resource("nope.example.com", "v1", "things", "Thing", False), **kw)
            return super().list_raw(resource, **kw)

    logged: list[tuple[str, dict[str, Any]]] = []
    recorder = EventRecorder(kube)
    policy_status._missing_logged.clear()
    for _ in range(2):
        assert (
            policy_status.report_policies(
                recorder, take_snapshot(Missing(kube.api_client)), lambda m, e: logged.append((m, e))
            )
            == 0
        )
    assert [m for m, _ in logged] == [
        "NodeflowPolicies cannot be listed (CRD nodeflowpolicies.nodeflow.io not installed, or not granted to group "
        "nodeflow-snapshot): provisioning without policies"
    ]

    logged.clear()
    bad = {"name": "w", "schedule": "0 25 * * *", "duration": "1h", "provisioning": True}
    kube.create(kc.NODEFLOW_POLICIES, policy("broken", pauses=[bad]))
    assert policy_status.report_policies(recorder, take_snapshot(kube), lambda m, e: logged.append((m, e))) == 1
    ((message, extra),) = logged
    assert message == "NodeflowPolicy invalid"
    assert extra["effect"] == "invalid, so provisioning is paused in every NodePool until it is fixed"
    (event,) = [e for e in server.objects("v1", "Event", "default") if e["involvedObject"]["kind"] == "NodeflowPolicy"]
    assert (event["type"], event["reason"]) == ("Warning", "ValidationFailed")
    assert event["involvedObject"]["apiVersion"] == "nodeflow.io/v1alpha1"
    assert "spec.pauses" in event["message"]
    assert "hour" in event["message"]
