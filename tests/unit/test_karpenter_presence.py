"""Is a Karpenter controller running (nodeflow.karpenter_presence)? A Deployment with ready replicas, or its
leader-election Lease held and renewed within its duration; objects as the API server returns them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nodeflow.karpenter_presence import LEASE_NAME, karpenter_controller

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def deployment(ready: int | None, replicas: int = 2, namespace: str = "kube-system") -> dict[str, Any]:
    status = {} if ready is None else {"readyReplicas": ready}
    return {"metadata": {"namespace": namespace, "name": "karpenter"}, "spec": {"replicas": replicas}, "status": status}


def lease(
    holder: str | None, renewed: timedelta | None, *, seconds: int | None = 15, name: str = LEASE_NAME
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renewed is not None:
        spec["renewTime"] = (NOW - renewed).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if seconds is not None:
        spec["leaseDurationSeconds"] = seconds
    return {"metadata": {"namespace": "kube-system", "name": name}, "spec": spec}


def test_nothing_there_is_not_running() -> None:
    found = karpenter_controller([], [], NOW)
    assert not found.running
    assert found.evidence == (
        "no Deployment labelled app.kubernetes.io/name=karpenter, no Lease karpenter-leader-election",
    )


def test_a_deployment_with_ready_replicas_is_running() -> None:
    found = karpenter_controller([deployment(2)], [], NOW)
    assert (found.running, found.deployment) == (True, "kube-system/karpenter")
    assert found.evidence == ("Deployment kube-system/karpenter: 2/2 ready",)


def test_a_deployment_scaled_to_zero_or_not_ready_is_not() -> None:
    assert not karpenter_controller([deployment(None, replicas=0)], [], NOW).running
    assert not karpenter_controller([deployment(0)], [], NOW).running


def test_a_held_lease_renewed_within_its_duration_is_running() -> None:
    found = karpenter_controller([], [lease("karpenter-7d9c_abc", timedelta(seconds=3))], NOW)
    assert (found.running, found.lease) == (True, "kube-system/karpenter-leader-election")
    assert found.evidence == ("Lease kube-system/karpenter-leader-election held by karpenter-7d9c_abc, renewed 3s ago",)


def test_an_expired_released_or_other_lease_is_not() -> None:
    expired = lease("karpenter-7d9c_abc", timedelta(seconds=16))
    assert not karpenter_controller([], [expired], NOW).running
    assert "expired after 15s" in karpenter_controller([], [expired], NOW).evidence[0]
    released = lease("", timedelta(seconds=1), seconds=1)  # LeaderElectionReleaseOnCancel clears the holder
    assert not karpenter_controller([], [released], NOW).running
    never_renewed = lease("x", None)
    assert not karpenter_controller([], [never_renewed], NOW).running
    other = lease("kube-scheduler-1", timedelta(0), name="kube-scheduler")
    assert not karpenter_controller([], [other], NOW).running
    # no leaseDurationSeconds: controller-runtime's 15 s
    assert karpenter_controller([], [lease("x", timedelta(seconds=10), seconds=None)], NOW).running
    assert not karpenter_controller([], [lease("x", timedelta(seconds=20), seconds=None)], NOW).running
