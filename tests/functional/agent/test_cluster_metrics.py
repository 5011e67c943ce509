"""The agent's /metrics over HTTP carries Karpenter's cluster-state gauges for what is in the API server."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import kubernetes

from sandbox.controlplane.facade import RealKubeAPI
from tests.functional.agent.conftest import Agent, Webhook, wait_for
from tests.functional.agent.objects import node, node_claim, node_pool, pod
from tests.functional.kube.conftest import create_node


def samples(text: str, name: str) -> dict[str, float]:
    """``{'label="v",...': value}`` for every sample of ``name``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1 :].rsplit("} ", 1)
            out[labels] = float(value)
        elif line.startswith(name + " "):
            out[""] = float(line.rsplit(" ", 1)[1])
    return out


def one(text: str, name: str, *parts: str) -> float:
    found = [v for labels, v in samples(text, name).items() if all(p in labels for p in parts)]
    assert len(found) == 1, (name, parts, samples(text, name))
    return found[0]


def test_metrics_expose_karpenter_cluster_state(
    kube: RealKubeAPI, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    managed = node("node-a", pool="default")
    managed["metadata"]["labels"].update(
        {"node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-east-1a"}
    )
    managed["status"].update(
        capacity={"cpu": "2", "memory": "8Gi", "pods": "29"},
        allocatable={"cpu": "1930m", "memory": "7Gi", "pods": "29"},
    )
    create_node(kube.kube, managed)  # once the node lifecycle controller lifted the not-ready taint
    kube.create(node_pool("default", cpu_limit="100"))
    claim = node_claim("default-abc")
    claim["status"] = {"providerID": managed["spec"]["providerID"], "capacity": {"cpu": "2", "memory": "8Gi"}}
    kube.create(claim)
    # a real DaemonSet: its controller makes the pod for node-a, kube-scheduler binds it there
    template = pod("ds", cpu="100m", scheduler=True)
    template["metadata"]["labels"] = {"app": "ds"}
    del template["spec"]["nodeSelector"]  # arm64: node-a is not
    kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "ds", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "ds"}}, "template": template},
        }
    )
    wait_for(
        lambda: [
            p for p in kube.list_items("v1", "Pod", "default", label_selector="app=ds") if p["spec"].get("nodeName")
        ],
        what="the DaemonSet's pod bound to node-a",
    )
    kube.create(pod("web-1", cpu="500m", node_name="node-a"))
    kube.create({**pod("web-2", cpu="1"), "status": {"phase": "Pending"}})

    agent = start_agent(kube.url, CLUSTER_METRICS_SECONDS="0")
    agent.wait_ready()
    status, text = agent.get("/metrics")
    assert status == 200
    node_a = ('node_name="node-a"', 'nodepool="default"', 'instance_type="m5.large"', 'zone="us-east-1a"')
    assert one(text, "karpenter_nodes_allocatable", *node_a, 'resource_type="cpu"', 'managed="true"') == 1.93
    assert one(text, "karpenter_nodes_allocatable", *node_a, 'resource_type="memory"') == 7 * 2**30
    assert one(text, "karpenter_nodes_total_pod_requests", *node_a, 'resource_type="cpu"') == 0.6
    assert one(text, "karpenter_nodes_total_daemon_requests", *node_a, 'resource_type="cpu"') == 0.1
    assert one(text, "karpenter_nodepools_limit", 'nodepool="default"', 'resource_type="cpu"') == 100
    assert one(text, "karpenter_nodepools_usage", 'nodepool="default"', 'resource_type="cpu"') == 2
    assert one(text, "karpenter_cluster_state_node_count") == 1
    assert one(text, "karpenter_cluster_state_synced") == 1
    # node-a's allocatable carries 600m cpu and 2 x 256Mi of pod requests (the pending web-2 is on no node)
    assert abs(one(text, "karpenter_cluster_utilization_percent", 'resource_type="cpu"') - 100 * 0.6 / 1.93) < 1e-9
    assert abs(one(text, "karpenter_cluster_utilization_percent", 'resource_type="memory"') - 100 * 0.5 / 7) < 1e-9
    assert one(text, "karpenter_cluster_utilization_percent", 'resource_type="pods"') == 0
    assert "# TYPE karpenter_pods_bound_duration_seconds histogram" in text
    assert one(text, "karpenter_pods_bound_duration_seconds_count") == 0
    assert one(text, "karpenter_pods_state", 'name="web-1"', 'node="node-a"', 'scheduled="true"') == 1
    assert one(text, "karpenter_pods_state", 'name="web-2"', 'scheduled="false"', 'phase="Pending"') == 1
    assert one(text, "karpenter_pods_unstarted_time_seconds", 'name="web-2"') >= 0
    assert "# TYPE nodeflow_agent_ready gauge" in text  # the agent's own metrics are still there

    # web-2 is bound and becomes ready: its startup duration is observed once, from creation to Ready
    core = kubernetes.client.CoreV1Api(kube.api_client())
    meta = core.read_namespaced_pod("web-2", "default").metadata
    assert meta is not None
    assert isinstance(meta.creation_timestamp, datetime.datetime)
    created = meta.creation_timestamp
    ready_at = (created + datetime.timedelta(seconds=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    bound_at = (created + datetime.timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body: dict[str, Any] = {
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": bound_at},
                {"type": "Ready", "status": "True", "lastTransitionTime": ready_at},
            ],
        }
    }
    core.patch_namespaced_pod_status("web-2", "default", body)

    def observed() -> str | None:
        text = agent.get("/metrics")[1]
        return text if samples(text, "karpenter_pods_startup_duration_seconds_count").get("") == 1 else None

    text = wait_for(observed, what="a startup duration observation")
    assert one(text, "karpenter_pods_startup_duration_seconds_sum") == 7
    assert not any('name="web-2"' in labels for labels in samples(text, "karpenter_pods_unstarted_time_seconds"))
    # ... and its bound duration (creation -> PodScheduled) once, in Karpenter's duration buckets
    assert one(text, "karpenter_pods_bound_duration_seconds_count") == 1
    assert one(text, "karpenter_pods_bound_duration_seconds_sum") == 3
    assert one(text, "karpenter_pods_bound_duration_seconds_bucket", 'le="2.5"') == 0
    assert one(text, "karpenter_pods_bound_duration_seconds_bucket", 'le="3"') == 1
    assert one(text, "karpenter_pods_bound_duration_seconds_bucket", 'le="+Inf"') == 1
