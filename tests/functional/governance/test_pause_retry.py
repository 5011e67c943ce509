"""Pods a NodeflowPolicy provisioning pause holds are provisioned when the window closes, not at the agent's next
resync: the real provisioner Lambda (moto, the real control plane) puts a delayed message on its own queue (DelaySeconds
= seconds to the close, at most 900, naming the held pods), one at a time; the run that message starts re-arms it
while the window is open and, once it closed, gives the pods their NodeClaim. Nothing is sent when no pause holds a
pod."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sqs.models import sqs_backends

from nodeflow.handlers import runtime
from sandbox.nodeflow import LocalNodeflow
from tests.functional.conftest import aws_env
from tests.functional.governance.test_provisioner_policies import (
    claims_of,
    kube_server,
    namespace,
    nominated,
    pods,
    policy,
    trigger,
)
from tests.functional.lifecycle.conftest import make_local

__all__ = ["aws_env", "kube_server", "make_local"]


def delayed(local: LocalNodeflow) -> list[Any]:
    """The provisioning queue's messages still delayed (moto's backend: the API does not show them)."""
    name = local.world.queue_url.rsplit("/", 1)[-1]
    queue = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].queues[name]
    return [m for m in queue._messages if m.delayed]


def delay_seconds(message: Any) -> int:
    return round((message.delayed_until - message.sent_timestamp) / 1000)


def test_a_pause_window_schedules_one_retry_that_provisions_the_held_pods_when_it_closes(
    make_local: Callable[..., LocalNodeflow], monkeypatch: pytest.MonkeyPatch
) -> None:
    local = make_local()
    rt = runtime.runtime()
    monkeypatch.setattr(rt, "clock", lambda: datetime(2026, 11, 27, 19, 0, tzinfo=UTC))  # a Friday
    local.apply([namespace("shop")])
    # unschedulable, but not for a pause (no such NodePool): no retry
    local.apply(pods("lost", "shop", "no-such-pool"))
    first = local.invoke("provisioner", {"Records": trigger(1)})["result"]
    assert first["unschedulablePods"] == 1, first
    assert "pauseRetry" not in first, first
    assert delayed(local) == []

    freeze = {"name": "quarter-end-freeze", "schedule": "0 18 * * 5", "duration": "60h", "provisioning": True}
    local.apply([policy("freeze", pauses=[freeze])])
    local.apply(pods("web", "shop"))
    held = local.provision(trigger(2))["result"]
    assert held["nodeClaimsCreated"] == [], held
    # the window closes Monday 06:00, 59 h away: the longest delay SQS has, re-armed by the run it starts
    assert held["pauseRetry"] == {"until": "2026-11-30T06:00:00Z", "delaySeconds": 900, "heldPods": 2, "sent": True}
    (message,) = delayed(local)
    assert delay_seconds(message) == 900
    detail = json.loads(message.body)["detail"]
    # shop/lost too: its reason for every NodePool is now the pause (whether it would fit one is not known)
    assert detail["pods"] == ["shop/lost-7d4b9c-00000", "shop/web-7d4b9c-00000"]
    assert detail["until"] == "2026-11-30T06:00:00Z"

    # the agent's resync while that retry is pending: no second message (no storm)
    again = local.provision(trigger(3))["result"]
    assert again["pauseRetry"]["sent"] is False, again
    assert len(delayed(local)) == 1

    # Monday 05:58: the retry comes due, the window is still open: re-armed to the close (120 s, +1 past it)
    monkeypatch.setattr(rt, "clock", lambda: datetime(2026, 11, 30, 5, 58, tzinfo=UTC))
    message.delayed_until = 0
    rearmed = local.provision()["result"]
    assert rearmed["nodeClaimsCreated"] == [], rearmed
    assert rearmed["pauseRetry"]["sent"] is True, rearmed
    (message,) = delayed(local)
    assert delay_seconds(message) == 121
    assert json.loads(message.body)["detail"]["pods"] == ["shop/lost-7d4b9c-00000", "shop/web-7d4b9c-00000"]

    # 06:00:01, the window closed: the run that message starts gives the held pod its NodeClaim; no pause retry,
    # the follow-up for a placed pod not bound yet instead (tests/functional/lifecycle/test_pending_retry.py)
    monkeypatch.setattr(rt, "clock", lambda: datetime(2026, 11, 30, 6, 0, 1, tzinfo=UTC))
    message.delayed_until = 0
    (record,) = local.receive_batch()
    assert json.loads(record["body"])["detail-type"] == "Provisioning Pause Ends"
    after = local.provision([record])["result"]
    assert len(after["nodeClaimsCreated"]) == 1, after
    assert "pauseRetry" not in after, after
    assert after["pendingRetry"] == {"delaySeconds": 15, "placedPods": 1, "attempt": 1, "sent": True}, after
    assert nominated(local) == {"shop/web-7d4b9c-00000"}, claims_of(local)
    (follow_up,) = delayed(local)
    assert json.loads(follow_up.body)["detail-type"] == "Pending Pods Retry"
    assert local.queue_messages() == []
