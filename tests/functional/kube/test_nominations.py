"""Garbage collection prunes each NodeClaim's nodeflow.io/nominated-pods annotation of the pods deleted or bound to a
node that stays (lifecycle/nominations.py), against the real API server (issue 26, item 18: the kept demo cluster
named deleted pods there)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.kube.events import EventRecorder
from nodeflow.lifecycle.cleanup import CleanupDeps, collect_garbage
from tests.functional.kube.conftest import RUNNING, UNSCHEDULABLE, create_pod, node, node_claim, pod

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def deps(kube: KubeClient, aws_env: None) -> Iterator[CleanupDeps]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        yield CleanupDeps(
            kube=kube,
            ec2=boto3.client("ec2", region_name="us-east-1"),
            recorder=EventRecorder(kube, clock=lambda: T0),
            now=lambda: T0,
            cluster_name="demo",
        )


def _claim(kube: KubeClient, name: str, pods: list[str] | None, node_name: str | None = None) -> None:
    body = node_claim(name)
    if pods is not None:
        body["metadata"]["annotations"] = {wk.ANNOTATION_NOMINATED_PODS: json.dumps([f"default/{p}" for p in pods])}
    kube.create(kc.NODE_CLAIMS, body)
    if node_name:
        kube.patch(kc.NODE_CLAIMS, name, {"status": {"nodeName": node_name}}, subresource="status")


def _nominated(kube: KubeClient, name: str) -> list[str] | None:
    raw = (kube.get(kc.NODE_CLAIMS, name)["metadata"].get("annotations") or {}).get(wk.ANNOTATION_NOMINATED_PODS)
    return None if raw is None else list(json.loads(raw))


def _gc(deps: CleanupDeps) -> dict[str, Any]:
    return collect_garbage(deps, grace_seconds=10**6)  # nothing is old enough to be a leftover here


def test_garbage_collection_prunes_nominations_of_pods_gone_or_bound(
    kube: KubeClient, server: Any, deps: CleanupDeps
) -> None:
    # garbage collection lists the pods only while some NodeClaim carries nominations
    _claim(kube, "plain", None)
    assert _gc(deps)["nominationsPruned"] == []
    assert server.count("GET", "/api/v1/pods") == 0

    for name in ("own", "other"):
        kube.create(kc.NODES, node(name))
    candidate = node("candidate")
    candidate["spec"]["taints"] = [{"key": wk.TAINT_DISRUPTED, "effect": "NoSchedule"}]
    kube.create(kc.NODES, candidate)
    create_pod(kube, pod("waiting"), UNSCHEDULABLE)
    create_pod(kube, pod("landed", node_name="own"), RUNNING)
    create_pod(kube, pod("elsewhere", node_name="other"), RUNNING)
    create_pod(kube, pod("moving", node_name="candidate"), RUNNING)
    _claim(kube, "made-for-four", ["elsewhere", "gone", "landed", "waiting"], node_name="own")
    _claim(kube, "replacement", ["moving"])
    _claim(kube, "all-stale", ["gone", "landed"])

    result = _gc(deps)
    assert result["nominationsPruned"] == ["all-stale", "made-for-four"]
    assert _nominated(kube, "made-for-four") == ["default/waiting"]
    assert _nominated(kube, "replacement") == ["default/moving"]  # still on the node it leaves
    assert _nominated(kube, "all-stale") is None  # none left: the annotation is removed
    assert result["reportErrors"] == 0

    # the waiting pod is deleted (its Deployment scaled down): nothing waits for the NodeClaim any more
    kube.delete(kc.PODS, "waiting", "default")
    assert _gc(deps)["nominationsPruned"] == ["made-for-four"]
    assert _nominated(kube, "made-for-four") is None
    assert _gc(deps)["nominationsPruned"] == []
