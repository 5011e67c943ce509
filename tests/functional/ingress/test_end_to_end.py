"""The whole ingress path: the agent as a subprocess watching the real API server, forwarding to the
webhook at its Function URL on 127.0.0.1 (SigV4), the moto bus and rules, the provisioning queue, the
SQS event-source mapping, and the provisioner creating NodeClaims."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandbox.agent import AgentProcess
from sandbox.esm import unschedulable_pods
from sandbox.nodeflow import LocalNodeflow
from tests.functional.ingress.conftest import event, post
from tests.realk8s.workloads import replica_set, unschedulable

# Pod events go out within 50 ms; the provisioning mapping keeps its real 1 s window.
AGENT_ENV = {"BATCH_MAX_WAIT": "0.05", "BACKOFF_BASE_SECONDS": "0.05", "BACKOFF_MAX_SECONDS": "0.5"}


def _wait(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _unschedulable(local: LocalNodeflow, name: str, replicas: int, cpu: str = "1") -> list[str]:
    """A ReplicaSet's pods, which kube-scheduler marks unschedulable (no node fits): their names."""
    local.apply([replica_set(name, replicas, cpu)])
    return [key.split("/", 1)[1] for key in unschedulable(local.kube_server, name, replicas)]


def _claims(local: LocalNodeflow) -> list[dict[str, Any]]:
    return local.kube_server.objects("karpenter.sh/v1", "NodeClaim")


@pytest.fixture
def wired(make_local: Callable[..., LocalNodeflow]) -> Iterator[tuple[LocalNodeflow, AgentProcess]]:
    local = make_local()
    local.start_webhook()
    local.start_event_source()
    with AgentProcess(local.agent_env(**AGENT_ENV)) as agent:
        agent.wait_ready()
        yield local, agent


def test_unschedulable_pods_reach_the_provisioner_and_get_a_node(wired: tuple[LocalNodeflow, AgentProcess]) -> None:
    local, agent = wired
    names = _unschedulable(local, "web", 3)
    source = local.event_source
    assert source is not None
    batches = source.wait_for(lambda bs: set(names) <= set(unschedulable_pods(bs)), timeout=60)
    assert all(b.ok for b in batches), [b.result for b in batches]
    claims = _wait(lambda: _claims(local), what="a NodeClaim")
    nominated = set(json.loads(claims[0]["metadata"]["annotations"]["nodeflow.io/nominated-pods"]))
    assert {f"default/{n}" for n in names} <= nominated
    # the node comes up, kube-scheduler binds the pods: the disruption queue hears about it. Each look receives the
    # messages (SQS has no peek), and the fifth receive moves one to the dead-letter queue (maxReceiveCount 5, as
    # the stack has it): what was seen is kept across looks, as the node takes seconds to come up on a real cluster.
    seen: set[str] = set()

    def heard() -> bool:
        seen.update(json.loads(m["Body"])["detail-type"] for m in local.queue_messages("disruption"))
        return {"Node Ready", "Pod Bound", "NodeClaim Changed"} <= seen

    _wait(heard, timeout=60, what="node and pod events on the disruption queue")
    assert agent.healthy()
    assert agent.stop() == 0


def test_the_same_event_three_times_provisions_once(make_local: Callable[..., LocalNodeflow]) -> None:
    local = make_local()
    local.start_webhook()
    first = _unschedulable(local, "api", 2)[0]
    e = event("PodUnschedulable", name=first)
    replies = [post(local.function_url.url, {"cluster": "demo", "events": [e]}) for _ in range(3)]  # type: ignore[union-attr]
    assert [r.body["accepted"] for r in replies] == [1, 0, 0]
    source = local.start_event_source(window_seconds=0.3)
    source.wait_for(lambda bs: len(bs) >= 1)
    time.sleep(1.0)  # anything else would have been delivered by now
    batches = source.snapshot()
    assert len(batches) == 1
    assert len(batches[0].records) == 1
    assert local.dispatch.count("nodeflow-demo-provisioner") == 1
    assert len(_claims(local)) == 1
    # a new event id for the same pods (a resync) is forwarded, but provisions nothing more
    post(local.function_url.url, {"cluster": "demo", "events": [event("PodUnschedulable", name=first)]})  # type: ignore[union-attr]
    source.wait_for(lambda bs: len(bs) >= 2)
    assert len(_claims(local)) == 1


def test_a_webhook_outage_is_buffered_then_delivered(wired: tuple[LocalNodeflow, AgentProcess]) -> None:
    local, agent = wired
    url = local.function_url
    assert url is not None
    url.outage(503)
    names = _unschedulable(local, "batch", 4, cpu="500m")
    _wait(lambda: url.statuses().count(503) >= 3, what="the agent retrying against the outage")
    assert local.queue_messages("provisioning") == []
    url.recover()
    source = local.event_source
    assert source is not None
    source.wait_for(lambda bs: set(names) <= set(unschedulable_pods(bs)), timeout=60)
    _wait(lambda: _claims(local), what="a NodeClaim")
    assert agent.stop() == 0
