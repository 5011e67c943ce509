"""The provisioner under rate limits, for real: the real API server's fault proxy answering 429 to NodeClaim creates
(pending pods: real ReplicaSets' that kube-scheduler has no node for), and
moto's Step Functions answering ThrottlingException to StartExecution. Nothing may be dropped: every NodeClaim
is created once and every launch execution is started, now or by the next run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from benchmarks.provisioning_scale import node_class, node_pool, pod
from sandbox.controlplane.proxy import Fault
from tests.functional.faults.throttle import Throttle
from tests.realk8s.workloads import unschedulable

if TYPE_CHECKING:
    from nodeflow.lifecycle.provisioner import ProvisionDeps, ProvisionResult
    from sandbox.controlplane.facade import RealKubeAPI

REGION = "us-east-1"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def world(aws_env: None, kube_server: RealKubeAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    import boto3
    from botocore.config import Config
    from moto import mock_aws
    from moto.core.exceptions import AWSError
    from moto.stepfunctions.responses import StepFunctionResponse

    class ThrottlingException(AWSError):
        TYPE = "ThrottlingException"
        STATUS = 400

    throttle = Throttle()
    real = StepFunctionResponse.start_execution

    def start_execution(self: Any) -> Any:
        if throttle.take():
            raise ThrottlingException("Rate exceeded")
        return real(self)

    monkeypatch.setattr(StepFunctionResponse, "start_execution", start_execution)
    kube_server.create(node_class())
    kube_server.create(node_pool())
    for ns in range(3):
        kube_server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{ns}"}})
    for app in range(3):  # ~6 NodeClaims of 4-vCPU types: 3 ReplicaSets of 8 pods kube-scheduler has no node for
        kube_server.create(_replica_set(app, 8))
    for app in range(3):
        unschedulable(kube_server, f"app-{app:03d}", 8, namespace=f"team-{app}")
    with mock_aws():
        # botocore's own retries off: what is measured is the provisioner's backoff.
        sfn = boto3.client("stepfunctions", region_name=REGION, config=Config(retries={"total_max_attempts": 1}))
        arn = sfn.create_state_machine(
            name="launch",
            definition='{"StartAt":"A","States":{"A":{"Type":"Pass","End":true}}}',
            roleArn="arn:aws:iam::123456789012:role/sfn",
        )["stateMachineArn"]
        try:
            yield {"sfn": sfn, "arn": arn, "throttle": throttle, "kube": kube_server}
        finally:
            kube_server.before_request = None


def _replica_set(app: int, replicas: int) -> dict[str, Any]:
    """The benchmark's Deployment ``app`` as the ReplicaSet it runs (its pod template: the benchmark's pod)."""
    template = pod(app, 0, None)
    meta = template["metadata"]
    labels = meta["labels"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": meta["ownerReferences"][0]["name"], "namespace": meta["namespace"], "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": template["spec"]},
        },
    }


def _deps(world: dict[str, Any], sleeps: list[float], **options: Any) -> ProvisionDeps:
    from nodeflow.aws.sfn import start_launch
    from nodeflow.catalog.offline import load_offline
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle.provisioner import ProvisionDeps

    kube = KubeClient(world["kube"].api_client())
    return ProvisionDeps(
        kube=kube,
        catalog=load_offline(REGION),
        unavailable=lambda _now: frozenset(),
        start_launch=lambda name: start_launch(world["sfn"], world["arn"], name),
        recorder=EventRecorder(kube),
        now=lambda: NOW,
        sleep=sleeps.append,
        jitter=lambda: 1.0,
        **options,
    )


def _provision(world: dict[str, Any], sleeps: list[float], batch: str, **options: Any) -> ProvisionResult:
    from nodeflow.lifecycle.provisioner import provision

    return provision(_deps(world, sleeps, **options), batch)


def _executions(world: dict[str, Any]) -> list[str]:
    pages = world["sfn"].get_paginator("list_executions").paginate(stateMachineArn=world["arn"])
    return sorted(e["name"] for page in pages for e in page["executions"])


def _claims(world: dict[str, Any]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in world["kube"].objects("karpenter.sh/v1", "NodeClaim"))


def _fail_creates(world: dict[str, Any], times: int, details: dict[str, Any] | None) -> list[str]:
    """The next ``times`` NodeClaim POSTs are answered 429 (with ``details``); returns the POSTs seen."""
    seen: list[str] = []
    lock = threading.Lock()

    def hook(method: str, path: str, _query: dict[str, str]) -> Fault | None:
        if method == "POST" and path.endswith("/nodeclaims"):
            with lock:
                seen.append("429" if len(seen) < times else "ok")
                refuse = seen[-1] == "429"
            if refuse:
                retry = (details or {}).get("retryAfterSeconds")
                message = "Too many requests, please try again later."
                return Fault(429, "TooManyRequests", message, details=details, retry_after=retry)
        return None

    world["kube"].before_request = hook
    return seen


def test_nodeclaim_creates_answered_429_wait_for_retry_after_and_are_retried(world: dict[str, Any]) -> None:
    seen = _fail_creates(world, 3, {"retryAfterSeconds": 2})
    sleeps: list[float] = []
    result = _provision(world, sleeps, "b429")

    assert seen.count("429") == 3
    assert len(result.created) >= 3
    assert result.created == sorted(set(result.created), key=result.created.index)
    assert _claims(world) == sorted(result.created)  # each created once, none lost
    assert _executions(world) == sorted(result.started) == sorted(result.created)
    assert result.deferred == []
    assert sleeps.count(2.0) == 3, sleeps  # the server's Retry-After, not the short default backoff


def test_nodeclaim_creates_still_429_after_every_attempt_fail_the_batch(world: dict[str, Any]) -> None:
    from nodeflow.kube.errors import TooManyRequests

    _fail_creates(world, 1000, None)
    with pytest.raises(TooManyRequests):
        _provision(world, [], "b429x", kube_attempts=2)
    world["kube"].before_request = None
    result = _provision(world, [], "b429x")  # the redelivered batch
    assert _claims(world) == sorted(result.created)
    assert _executions(world) == sorted(result.started)


def test_throttled_start_executions_back_off_and_all_start(world: dict[str, Any]) -> None:
    world["throttle"].left = 5
    sleeps: list[float] = []
    result = _provision(world, sleeps, "bthrottle")

    assert world["throttle"].throttled == 5
    assert result.deferred == []
    assert _executions(world) == sorted(result.started) == sorted(result.created) == _claims(world)
    assert len(sleeps) == 5
    assert all(s > 0 for s in sleeps)


def test_start_executions_throttled_past_the_backoff_are_deferred_then_started_by_the_next_run(
    world: dict[str, Any],
) -> None:
    world["throttle"].left = -1  # throttled until further notice
    sleeps: list[float] = []
    first = _provision(world, sleeps, "bdefer", start_attempts=3)
    assert first.created
    assert first.started == []
    assert sorted(first.deferred) == sorted(first.created) == _claims(world)  # created, not started, not lost
    assert _executions(world) == []
    # Backoff doubles (jitter 1.0): 0.1, 0.2 per NodeClaim.
    assert sorted(set(sleeps)) == [0.1, 0.2]

    world["throttle"].left = 0
    second = _provision(world, [], "bnext")  # any later run (another batch): no new NodeClaim, all started
    assert second.created == []
    assert second.deferred == []
    assert sorted(second.resumed) == sorted(first.created)
    assert _executions(world) == _claims(world)


def test_the_handler_fails_the_batch_while_launches_are_deferred(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQS delivers the batch again (the handler raises after logging the result)."""
    from nodeflow.handlers import provisioner as handler

    sleeps: list[float] = []
    world["throttle"].left = -1
    monkeypatch.setattr(handler, "deps", lambda _context=None: _deps(world, sleeps, start_attempts=2))
    record = {"messageId": "m-1", "body": "{}"}
    with pytest.raises(RuntimeError, match="could not be started"):
        handler.handler({"Records": [record]}, _Context())
    world["throttle"].left = 0
    out = handler.handler({"Records": [record]}, _Context())
    assert out["batchItemFailures"] == []
    assert _executions(world) == _claims(world) != []


class _Context:
    function_name = "provisioner"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:provisioner"
    aws_request_id = "req-1"
