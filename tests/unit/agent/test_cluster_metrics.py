"""Karpenter's cluster-state gauges computed from LISTed objects (nodeflow_agent.cluster)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from nodeflow_agent.cluster import Snapshot, compute, parse_quantity, pod_requests, render

T0 = 1_790_000_000.0  # 2026-09-21T12:53:20Z


def iso(t: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def node(name: str, *, pool: str | None = "default", pid: str = "", created: float = T0) -> dict[str, Any]:
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": "us-east-1a",
        "topology.kubernetes.io/region": "us-east-1",
        "node.kubernetes.io/instance-type": "m5.large",
        "karpenter.sh/capacity-type": "on-demand",
    }
    if pool:
        labels["karpenter.sh/nodepool"] = pool
    return {
        "metadata": {"name": name, "labels": labels, "creationTimestamp": iso(created)},
        "spec": {"providerID": pid or f"aws:///us-east-1a/i-{name}"},
        "status": {
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
        },
    }


def pod(
    name: str,
    *,
    node_name: str = "",
    cpu: str = "500m",
    limit_cpu: str | None = None,
    daemon: bool = False,
    phase: str = "Running",
    ready: str | None = None,
    created: float = T0,
    ready_at: float | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "256Mi"}}
    if limit_cpu:
        resources["limits"] = {"cpu": limit_cpu}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": f"uid-{name}",
        "creationTimestamp": iso(created),
    }
    if daemon:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent"}]
    else:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d9"}]
    status: dict[str, Any] = {"phase": phase}
    if ready is not None:
        cond: dict[str, Any] = {"type": "Ready", "status": ready}
        if ready_at is not None:
            cond["lastTransitionTime"] = iso(ready_at)
        status["conditions"] = [cond]
    spec: dict[str, Any] = {"containers": [{"name": "app", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": meta, "spec": spec, "status": status}


def values(samples: list[Any], metric: str, **match: str) -> list[float]:
    return [s.value for s in samples if s.name == metric and all(dict(s.labels).get(k) == v for k, v in match.items())]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("500m", "0.5"), ("2", "2"), ("2Gi", str(2 * 2**30)), ("1k", "1000"), ("1e3", "1000"), ("100n", "1E-7")],
)
def test_parse_quantity(text: str, expected: str) -> None:
    assert parse_quantity(text) == Decimal(expected)


@pytest.mark.parametrize("bad", ["", "abc", "1Zi", None, True, "nan"])
def test_parse_quantity_names_the_bad_value(bad: Any) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(bad)


def test_pod_requests_count_sidecars_init_containers_and_overhead() -> None:
    p = {
        "spec": {
            "containers": [{"resources": {"requests": {"cpu": "1"}}}, {"resources": {"requests": {"cpu": "500m"}}}],
            "initContainers": [
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
                {"resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
            ],
            "overhead": {"cpu": "100m"},
        }
    }
    # containers 1.5 + sidecar 0.25 = 1.75 < init 3 + sidecar 0.25 = 3.25; plus overhead 0.1
    assert pod_requests(p) == {"cpu": Decimal("3.35"), "memory": Decimal(2**30)}


def test_node_gauges_with_karpenter_labels_and_values() -> None:
    snap = Snapshot(
        nodes=[node("n1"), node("unmanaged", pool=None)],
        pods=[
            pod("web", node_name="n1", cpu="500m", limit_cpu="1"),
            pod("ds", node_name="n1", cpu="100m", daemon=True),
            pod("done", node_name="n1", cpu="4", phase="Succeeded"),
            pod("pending", cpu="2", phase="Pending"),
        ],
        nodeclaims=[{"metadata": {"name": "nc1"}, "status": {"providerID": "aws:///us-east-1a/i-n1"}}],
    )
    samples, _, _ = compute(snap, T0 + 3600, set())
    alloc = [s for s in samples if s.name == "karpenter_nodes_allocatable" and dict(s.labels)["node_name"] == "n1"]
    assert {dict(s.labels)["resource_type"]: s.value for s in alloc} == {"cpu": 1.93, "memory": 7 * 2**30, "pods": 29}
    labels = dict(alloc[0].labels)
    assert labels == {
        "node_name": "n1",
        "phase": "",
        "managed": "true",
        "nodepool": "default",
        "zone": "us-east-1a",
        "region": "us-east-1",
        "instance_type": "m5.large",
        "arch": "amd64",
        "os": "linux",
        "capacity_type": "on-demand",
        "windows_build": "",
        "resource_type": labels["resource_type"],
    }
    # terminal pods are not counted; daemon pods are in both totals
    assert values(samples, "karpenter_nodes_total_pod_requests", node_name="n1", resource_type="cpu") == [0.6]
    assert values(samples, "karpenter_nodes_total_daemon_requests", node_name="n1", resource_type="cpu") == [0.1]
    assert values(samples, "karpenter_nodes_total_pod_limits", node_name="n1", resource_type="cpu") == [1.0]
    assert values(samples, "karpenter_nodes_system_overhead", node_name="n1", resource_type="cpu") == [0.07]
    assert values(samples, "karpenter_nodes_system_overhead", node_name="n1", resource_type="memory") == [2**30]
    assert values(samples, "karpenter_nodes_current_lifetime_seconds", node_name="n1") == [3600]
    assert values(samples, "karpenter_nodes_allocatable", node_name="unmanaged", resource_type="cpu") == [1.93]
    assert values(samples, "karpenter_nodes_allocatable", node_name="unmanaged", managed="false")
    assert values(samples, "karpenter_cluster_state_node_count") == [2]


def test_nodepool_usage_from_status_else_nodeclaims_and_limits() -> None:
    claim = {
        "metadata": {"name": "nc", "labels": {"karpenter.sh/nodepool": "spot"}},
        "status": {"capacity": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}},  # no node yet
    }
    snap = Snapshot(
        nodepools=[
            {"metadata": {"name": "default"}, "spec": {"limits": {"cpu": "100", "memory": "400Gi"}}, "status": {}},
            {"metadata": {"name": "spot"}, "spec": {}},
            {"metadata": {"name": "written"}, "status": {"resources": {"cpu": "8", "nodes": "2"}}},
        ],
        nodeclaims=[claim],
    )
    samples, _, _ = compute(snap, T0, set())
    assert values(samples, "karpenter_nodepools_limit", nodepool="default", resource_type="cpu") == [100]
    assert values(samples, "karpenter_nodepools_limit", nodepool="default", resource_type="memory") == [400 * 2**30]
    assert values(samples, "karpenter_nodepools_usage", nodepool="default") == []
    assert values(samples, "karpenter_nodepools_usage", nodepool="spot", resource_type="nvidia.com/gpu") == [1]
    assert values(samples, "karpenter_nodepools_usage", nodepool="spot", resource_type="cpu") == [4]
    assert values(samples, "karpenter_nodepools_usage", nodepool="written", resource_type="nodes") == [2]
    assert values(samples, "karpenter_nodepools_limit", nodepool="spot") == []
    assert values(samples, "karpenter_cluster_state_node_count") == [1]  # the launching NodeClaim


def test_pod_state_labels_like_karpenter() -> None:
    snap = Snapshot(
        nodes=[node("n1")],
        pods=[pod("web", node_name="n1", ready="True"), pod("waiting", phase="Pending")],
    )
    samples, _, _ = compute(snap, T0, set())
    states = {dict(s.labels)["name"]: dict(s.labels) for s in samples if s.name == "karpenter_pods_state"}
    assert states["web"] == {
        "name": "web",
        "namespace": "default",
        "owner": "/apis/apps/v1/namespaces/default/replicasets/web-5d9",
        "node": "n1",
        "scheduled": "true",
        "nodepool": "default",
        "zone": "us-east-1a",
        "arch": "amd64",
        "capacity_type": "on-demand",
        "instance_type": "m5.large",
        "phase": "Running",
        "ready": "true",
        "managed": "true",
    }
    assert states["waiting"]["scheduled"] == "false"
    assert states["waiting"]["managed"] == "false"
    assert states["waiting"]["ready"] == "false"


def test_startup_duration_observed_once_for_a_pod_seen_pending_then_ready() -> None:
    pending_pod = pod("web", phase="Pending", created=T0)
    samples, observed, pending = compute(Snapshot(pods=[pending_pod]), T0 + 5, set())
    assert observed == []
    assert pending == {"uid-web"}
    assert values(samples, "karpenter_pods_unstarted_time_seconds", name="web", namespace="default") == [5]
    ready_pod = pod("web", node_name="n1", ready="True", created=T0, ready_at=T0 + 42)
    samples, observed, pending = compute(Snapshot(pods=[ready_pod]), T0 + 60, pending)
    assert observed == [42.0]
    assert pending == set()
    assert values(samples, "karpenter_pods_unstarted_time_seconds") == []
    # seen again: not observed twice; a pod first seen ready (started before the agent) is not observed
    assert compute(Snapshot(pods=[ready_pod]), T0 + 90, pending)[1] == []


def test_render_prometheus_text() -> None:
    snap = Snapshot(nodes=[node("n1")], pods=[pod('we"b', node_name="n1")])
    samples, _, _ = compute(snap, T0, set())
    text = render(samples, True, [1.0, 3.0, 2.0], 3, 6.0)
    assert "# TYPE karpenter_nodes_allocatable gauge" in text
    assert "# TYPE karpenter_pods_startup_duration_seconds summary" in text
    assert 'karpenter_pods_startup_duration_seconds{quantile="0.5"} 2' in text
    assert 'karpenter_pods_startup_duration_seconds{quantile="1"} 3' in text
    assert "karpenter_pods_startup_duration_seconds_count 3" in text
    assert "karpenter_pods_startup_duration_seconds_sum 6" in text
    assert "karpenter_cluster_state_synced 1" in text
    assert 'name="we\\"b"' in text
    sample_line = re.compile(r'^[a-z_]+(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? (-?[0-9.e+]+|NaN)$')
    for line in text.splitlines():
        assert line.startswith("# ") or sample_line.match(line), line
    empty = render([], False, [], 0, 0.0)
    assert 'karpenter_pods_startup_duration_seconds{quantile="0.5"} NaN' in empty
    assert "karpenter_cluster_state_synced 0" in empty
