"""Pods the plan placed but kube-scheduler has not bound get another provisioner run a few seconds later, not only at
the agent's next resync (minutes): kube-scheduler places pods by its own scores as nodes come up, so another pod may
take the room planned for one (docs/benchmarks/fidelity.md), and Karpenter requeues such pods every 10 s. The real
provisioner Lambda (moto, the real control plane) puts one delayed message on its own queue while placed pods are
pending; the run it starts re-arms it (the attempt counted while no NodeClaim is created, reset when one is), and
the chain stops after PENDING_RETRY_ATTEMPTS. Pods no NodePool can take arm nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from nodeflow.lifecycle.provisioner import PENDING_RETRY_ATTEMPTS, PENDING_RETRY_SECONDS, PENDING_RETRY_TYPE
from sandbox.nodeflow import LocalNodeflow
from tests.functional.conftest import aws_env
from tests.functional.governance.test_pause_retry import delay_seconds, delayed
from tests.functional.governance.test_provisioner_policies import kube_server, namespace, pods, trigger
from tests.functional.lifecycle.conftest import make_local

__all__ = ["aws_env", "kube_server", "make_local"]


def retry_record(attempt: int) -> list[dict[str, Any]]:
    body = {"source": "nodeflow", "detail-type": PENDING_RETRY_TYPE, "detail": {"attempt": attempt, "pods": []}}
    return [{"messageId": f"retry-{attempt}", "body": json.dumps(body)}]


def test_a_placed_pod_not_bound_gets_one_follow_up_run_that_re_arms_itself_until_its_attempts_run_out(
    make_local: Callable[..., LocalNodeflow],
) -> None:
    local = make_local()
    local.apply([namespace("shop")])
    local.apply(pods("web", "shop"))
    first = local.provision(trigger(1))["result"]
    assert len(first["nodeClaimsCreated"]) == 1, first
    assert first["pendingRetry"] == {"delaySeconds": PENDING_RETRY_SECONDS, "placedPods": 1, "attempt": 1, "sent": True}
    (message,) = delayed(local)
    assert delay_seconds(message) == PENDING_RETRY_SECONDS
    body = json.loads(message.body)
    assert body["detail-type"] == PENDING_RETRY_TYPE
    assert body["detail"] == {"attempt": 1, "pods": ["shop/web-7d4b9c-00000"], "placedPods": 1}

    # a pod event while that retry is delayed: no second message
    again = local.provision(trigger(2))["result"]
    assert again["pendingRetry"]["sent"] is False, again
    assert len(delayed(local)) == 1

    # the retry comes due, the pod is still pending (its NodeClaim in flight): nothing created, re-armed, attempt 2
    message.delayed_until = 0
    (record,) = local.receive_batch()
    due = local.provision([record])["result"]
    assert due["nodeClaimsCreated"] == [], due
    assert due["pendingRetry"] == {"delaySeconds": PENDING_RETRY_SECONDS, "placedPods": 1, "attempt": 2, "sent": True}

    # the last attempt creates nothing: the chain ends (the agent's resync re-sends the pod)
    (message,) = delayed(local)
    message.delayed_until = 0
    (record,) = local.receive_batch()
    assert json.loads(record["body"])["detail"]["attempt"] == 2
    local.clients.sqs.delete_message(QueueUrl=local.world.queue_url, ReceiptHandle=record["receiptHandle"])
    last = local.provision(retry_record(PENDING_RETRY_ATTEMPTS))["result"]
    assert last["nodeClaimsCreated"] == [], last
    assert "pendingRetry" not in last, last
    assert delayed(local) == []


def test_pods_no_nodepool_can_take_arm_no_follow_up(make_local: Callable[..., LocalNodeflow]) -> None:
    local = make_local()
    local.apply([namespace("shop")])
    local.apply(pods("lost", "shop", "no-such-pool"))
    out = local.provision(trigger(1))["result"]
    assert out["unschedulablePods"] == 1, out
    assert "pendingRetry" not in out, out
    assert delayed(local) == []
