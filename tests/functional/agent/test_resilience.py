"""The agent process survives webhook outages, API server restarts, expired resourceVersions and missing CRDs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from sandbox.controlplane import ControlPlane
from sandbox.controlplane.facade import SERVICE_ACCOUNTS, RealKubeAPI
from sandbox.controlplane.launcher import CRD_DIR
from sandbox.controlplane.proxy import Fault
from tests.functional.agent.conftest import AGENT_ACCOUNT, Agent, Proxy, Webhook, wait_for
from tests.functional.agent.objects import node, node_pool, unschedulable_pod


def test_webhook_outage_loses_nothing(
    kube: RealKubeAPI, core: Any, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    agent = start_agent(kube.url, READY_FAILURE_SECONDS="0.5")
    agent.wait_ready()
    webhook.fail(503)
    for i in range(20):
        kube.create(unschedulable_pod(f"burst-{i}"))
    kube.create(node("node-outage"))
    wait_for(lambda: webhook.statuses.count(503) >= 3, what="retries against the failing webhook")
    # failing for longer than READY_FAILURE_SECONDS: not ready, but alive
    wait_for(lambda: agent.get("/readyz")[0] == 503, what="/readyz 503 during the outage")
    assert "webhook requests failing" in agent.get("/readyz")[1]
    assert agent.get("/healthz")[0] == 200
    assert webhook.events == []
    webhook.recover()
    wait_for(lambda: len(webhook.of("PodUnschedulable")) == 20, what="all pods after the outage")
    webhook.wait("NodeReady", "node-outage")
    assert sorted(e["object"]["name"] for e in webhook.of("PodUnschedulable")) == sorted(
        f"burst-{i}" for i in range(20)
    )
    agent.wait_ready()
    assert agent.metric("nodeflow_agent_send_failures_total") >= 3
    assert agent.metric("nodeflow_agent_events_sent_total") >= 21


def test_api_server_restart_and_expired_version_reconcile_missed_changes(
    kube: RealKubeAPI, core: Any, proxy: Proxy, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    kube.create(node("node-a"))
    kube.create(unschedulable_pod("bound-before", node_name=None))
    core.create_namespaced_pod_binding(
        "bound-before",
        "default",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "bound-before"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
        },
        _preload_content=False,
    )
    agent = start_agent(proxy.url)
    agent.wait_ready()
    kube.create(unschedulable_pod("before"))
    webhook.wait("PodUnschedulable", "before")
    lists_before = kube.count("GET", "/api/v1/pods", "limit=")

    proxy.stop()  # the API server goes away: every connection drops, nothing listens
    core.delete_namespaced_pod("bound-before", "default")  # missed by the agent: graceful, then the kubelet confirms
    uid = kube.get("v1", "Pod", "bound-before", "default")["metadata"]["uid"]
    kube.delete("v1", "Pod", "bound-before", "default", grace_period_seconds=0, uid=uid)
    kube.create(unschedulable_pod("during"))
    kube.compact()  # and by the time it is back, the agent's resourceVersion is too old: 410
    wait_for(lambda: agent.metric("nodeflow_agent_watch_errors_total") >= 5, what="failing watches while down")
    proxy.start()  # same port

    deleted = webhook.wait("PodDeleted", "bound-before")
    assert deleted["reason"] == "relist"
    assert deleted["object"]["nodeName"] == "node-a"
    assert webhook.wait("PodUnschedulable", "during")["reason"] == "relist"
    assert kube.count("GET", "/api/v1/pods", "limit=") > lists_before  # relisted after the 410
    kube.create(unschedulable_pod("after"))
    assert webhook.wait("PodUnschedulable", "after")["reason"] == "watch"
    assert len(webhook.of("PodUnschedulable", "before")) == 1  # nothing re-sent twice
    agent.wait_ready()


def test_api_errors_are_retried(kube: RealKubeAPI, webhook: Webhook, start_agent: Callable[..., Agent]) -> None:
    failures = {"left": 6}

    def flaky(method: str, path: str, query: dict[str, str]) -> None:
        if path == "/api/v1/nodes" and failures["left"] > 0:
            failures["left"] -= 1
            raise Fault(503, "ServiceUnavailable", "injected: etcd leader changed")

    kube.before_request = flaky
    agent = start_agent(kube.url)
    agent.wait_ready()
    assert failures["left"] == 0
    kube.create(node("node-b"))
    webhook.wait("NodeReady", "node-b")


def test_missing_crds_keep_the_agent_unready_until_installed(
    webhook: Webhook, tmp_path: Path, start_agent: Callable[..., Agent]
) -> None:
    """A control plane of its own, without Karpenter's CRDs (the shared one has them, and removing CRDs there would
    take every test's custom resources with them); no controllers: nothing here needs them."""
    with ControlPlane(crds=[]) as plane, RealKubeAPI(plane) as bare:
        bare.kube.create(SERVICE_ACCOUNTS, {"metadata": {"name": "default"}}, namespace="default")
        token = tmp_path / "bare-agent-token"
        token.write_text(bare.service_account_token(*AGENT_ACCOUNT))
        bare.create(unschedulable_pod("early"))
        agent = start_agent(bare.url, KUBE_TOKEN_FILE=str(token))
        webhook.wait("PodUnschedulable", "early")  # core kinds work meanwhile
        status, body = agent.get("/readyz")
        assert status == 503
        assert "nodepools: not listed yet" in body
        assert "nodeclaims: not listed yet" in body
        assert "ec2nodeclasses: not listed yet" in body
        assert agent.get("/healthz")[0] == 200
        for path in sorted(CRD_DIR.glob("*.yaml")):
            for crd in yaml.safe_load_all(path.read_text()):
                if crd:
                    bare.register_crd(crd)
        agent.wait_ready()
        bare.create(node_pool("late"))
        webhook.wait("NodePoolChanged", "late")
        assert bare.proxy.denied() == []  # RealKubeAPI.start applied the install's RBAC here too


def test_buffer_overflow_triggers_a_full_resync(
    kube: RealKubeAPI, webhook: Webhook, start_agent: Callable[..., Agent]
) -> None:
    agent = start_agent(kube.url, BUFFER_MAX_EVENTS="10", BATCH_MAX_EVENTS="5")
    agent.wait_ready()
    webhook.fail(503)
    for i in range(25):
        kube.create(unschedulable_pod(f"flood-{i:02d}"))
    wait_for(lambda: agent.metric("nodeflow_agent_events_observed_total") >= 25, what="pods observed")
    assert agent.metric("nodeflow_agent_events_dropped_total") >= 10  # (in-flight batch + 10 buffered) of 25
    webhook.recover()
    # the full resync re-sends the current state of every object: no pod is lost for good
    wait_for(
        lambda: {e["object"]["name"] for e in webhook.of("PodUnschedulable")} == {f"flood-{i:02d}" for i in range(25)},
        what="every pod after the full resync",
    )
    assert agent.metric("nodeflow_agent_full_resyncs_total") == 1
