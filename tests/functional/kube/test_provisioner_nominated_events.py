"""The provisioner's Nominated events are rate-limited as Karpenter's are (a token bucket of 5 a second, burst 10,
dropping what does not fit): a burst of pods does not turn into one API write per pod before provision() returns.
Against the real control plane and moto's Step Functions."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from benchmarks.provisioning_scale import node_class, node_pool, pod
from tests.realk8s.workloads import NO_SCHEDULER

if TYPE_CHECKING:
    from nodeflow.lifecycle.provisioner import ProvisionResult
    from sandbox.controlplane.facade import RealKubeAPI

REGION = "us-east-1"
PODS = 40


def _pending_pod(i: int) -> dict[str, Any]:
    """The benchmark's pending pod ``i``, without its made-up ReplicaSet (the garbage collector deletes a pod whose
    owner does not exist) and out of kube-scheduler's hands (its Unschedulable status is seeded)."""
    body = pod(i // 10, i, None)
    del body["metadata"]["ownerReferences"]
    body["spec"]["schedulerName"] = NO_SCHEDULER
    return body


@pytest.fixture
def world(aws_env: None, kube_server: RealKubeAPI) -> Iterator[dict[str, Any]]:
    import boto3
    from moto import mock_aws

    kube_server.create(node_class())
    kube_server.create(node_pool())
    for ns in range(10):
        kube_server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{ns}"}})
    for i in range(PODS):
        kube_server.create(_pending_pod(i))
    with mock_aws():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.create_state_machine(
            name="launch",
            definition='{"StartAt":"A","States":{"A":{"Type":"Pass","End":true}}}',
            roleArn="arn:aws:iam::123456789012:role/sfn",
        )["stateMachineArn"]
        yield {"sfn": sfn, "arn": arn, "kube": kube_server}


def _provision(world: dict[str, Any], timer: Callable[[], float], recorder: Any = None) -> ProvisionResult:
    from nodeflow.aws.sfn import start_launch
    from nodeflow.catalog.offline import load_offline
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle.provisioner import ProvisionDeps, provision

    kube = KubeClient(world["kube"].api_client())
    deps = ProvisionDeps(
        kube=kube,
        catalog=load_offline(REGION),
        unavailable=lambda _now: frozenset(),
        start_launch=lambda name: start_launch(world["sfn"], world["arn"], name),
        recorder=recorder or EventRecorder(kube),
        now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        timer=timer,
    )
    return provision(deps, "batch-1")


def _nominated(world: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e for ns in range(10) for e in world["kube"].objects("v1", "Event", f"team-{ns}") if e["reason"] == "Nominated"
    ]


def test_a_burst_of_pods_gets_ten_nominated_events_and_every_launch(world: dict[str, Any]) -> None:
    result = _provision(world, timer=lambda: 0.0)  # no time passes: the burst only
    claims = {o["metadata"]["name"] for o in world["kube"].objects("karpenter.sh/v1", "NodeClaim")}
    assert len(claims) >= 5
    assert sorted(result.started) == sorted(claims)  # every launch, whatever the events
    events = _nominated(world)
    assert (len(events), result.nominated, result.nominations_dropped) == (10, 10, PODS - 10)
    assert result.to_json()["nominatedEventsDropped"] == PODS - 10
    for event in events:  # each on a pending pod, naming the NodeClaim it was placed on
        assert event["involvedObject"]["kind"] == "Pod"
        assert event["message"].removeprefix("Pod should schedule on: nodeclaim/") in claims
    assert len({e["involvedObject"]["name"] for e in events}) == 10


def test_the_bucket_refills_five_a_second(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeflow.lifecycle import provisioner

    # this clock moves with every reading, on every worker: a write would look slow (the next test's case)
    monkeypatch.setattr(provisioner, "NOMINATED_SLOW_SECONDS", float("inf"))
    ticks = itertools.count()
    result = _provision(world, timer=lambda: next(ticks) * 0.02)  # 0.02 s a reading: a tenth of a token
    events = _nominated(world)
    assert len(events) == result.nominated
    assert 10 < result.nominated < PODS
    assert result.nominated + result.nominations_dropped == PODS


def test_a_slow_api_server_stops_the_nominated_events_not_the_launches(world: dict[str, Any]) -> None:
    """One Nominated write that takes NOMINATED_SLOW_SECONDS (an API server starved by a burst) ends the run's
    events: they are dropped, not written one slow request after another while the run waits (seen: a 5,000-pod
    burst's batch had every launch started at 38 s and returned at 505 s, its workers writing events)."""
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle.provisioner import CLAIM_WORKERS, NOMINATED_SLOW_SECONDS

    clock = [0.0]

    class SlowRecorder(EventRecorder):
        def nominated(self, pod: Any, node_claim: str, node: str | None = None) -> dict[str, Any]:
            clock[0] += NOMINATED_SLOW_SECONDS  # the write took that long
            return super().nominated(pod, node_claim, node)

    result = _provision(world, timer=lambda: clock[0], recorder=SlowRecorder(KubeClient(world["kube"].api_client())))
    claims = {o["metadata"]["name"] for o in world["kube"].objects("karpenter.sh/v1", "NodeClaim")}
    assert sorted(result.started) == sorted(claims)
    assert 1 <= result.nominated <= CLAIM_WORKERS  # those already under way when the first slow one returned
    assert result.nominated + result.nominations_dropped == PODS
    assert len(_nominated(world)) == result.nominated
