"""A NodeflowPolicy pause window through the real disruption Lambda (moto, the real workflows, the real control plane):
it stops voluntary disruption but not expiration. An empty node of the paused NodePool (nodePools ["*"]: every
NodePool) stays and gets a DisruptionBlocked event naming the policy; an expired node of the same NodePool is still
terminated; once the window has closed, the empty node goes. Policies whose windows nodeflow cannot evaluate (stored
past the CRD) do not fail the round."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from nodeflow.handlers import runtime
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution

from .test_disruption_lambda import AWAY_FROM_WEB, _execution, _later, _launch, _scale_down, _settle


def _expire_after(local: LocalNodeflow, value: str) -> None:
    """The default NodePool's template expireAfter (new NodeClaims take it)."""
    api = client.CustomObjectsApi(local.kube_server.api_client())
    api.patch_cluster_custom_object(
        "karpenter.sh", "v1", "nodepools", "default", {"spec": {"template": {"spec": {"expireAfter": value}}}}
    )


def _clock(at: datetime) -> None:
    runtime.runtime().clock = lambda: at


def test_a_pause_window_stops_disruption_but_not_expiration(local: LocalNodeflow) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0)
    _expire_after(local, "1h")
    expiring = _launch(local, "web", 2)  # expireAfter 1h
    _expire_after(local, "720h")
    empty = _launch(local, "batch", 2, affinity=AWAY_FROM_WEB)
    _scale_down(local, "batch")
    opens = start + timedelta(hours=1)  # open from start + 1h to start + 3h (daily, UTC)
    freeze: dict[str, Any] = {
        "apiVersion": "nodeflow.io/v1alpha1",
        "kind": "NodeflowPolicy",
        "metadata": {"name": "freeze"},
        "spec": {
            "pauses": [
                {
                    "name": "release",
                    "schedule": f"{opens.minute} {opens.hour} * * *",
                    "duration": "2h",
                    "disruption": True,
                    "nodePools": ["*"],
                }
            ]
        },
    }
    local.apply([freeze])
    for i, duration in enumerate(("99999999999h", "20000000h")):  # an OverflowError for the whole round before
        # invalid: they fail safe (disruption paused) in the NodePool they name only, not in default
        window = {"name": "w", "schedule": "0 0 30 2 *", "duration": duration, "disruption": True, "nodePools": ["gpu"]}
        local.kube_server.store_bypassing_admission(
            {**freeze, "metadata": {"name": f"long-{i}"}, "spec": {"pauses": [window]}}
        )

    _clock(start + timedelta(minutes=90))  # inside the window: the first node expired, the empty one settled
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    # The expired node's drain runs on the real clock: 90 minutes ahead its evicted pods (deletionTimestamp 30 s from
    # now) would look stuck terminating, the node would go before they did, and they would wait for the pod garbage
    # collector's 40 s quarantine of pods on a deleted Node.
    _later(0)
    assert result["expired"] == [expiring["metadata"]["name"]], result
    assert result["command"] is None
    assert result["executed"] == []
    node = empty["status"]["nodeName"]
    until = (opens + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    message = (
        f"disruption paused for NodePool default by policy freeze: window release "
        f"({opens.minute} {opens.hour} * * * for 2h) until {until}"
    )
    assert {"node": node, "event": "DisruptionBlocked", "message": message} in result["blocked"]
    events = [
        e
        for e in local.kube_server.objects("v1", "Event", "default")
        if e.get("reason") == "DisruptionBlocked" and e["involvedObject"]["name"] == node
    ]
    assert [e["message"] for e in events] == [message]
    done = wait_for_execution(local.clients.sfn, _execution(local, expiring["metadata"]["name"]), timeout=60)
    assert done["status"] == "SUCCEEDED"
    assert '"Expired"' in done["input"]
    assert all(e["name"] != empty["metadata"]["name"] for e in local.terminate_executions())
    # the expired node's pods came back from their ReplicaSet and kube-scheduler put them on the empty node: the
    # Deployment scaled to zero, so the node is empty again when the window closes
    _scale_down(local, "web")

    _clock(start + timedelta(hours=3, minutes=10))  # the window has closed
    after = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert after["command"] is not None, after
    assert after["command"]["reason"] == "Empty"
    assert after["executed"] == [empty["metadata"]["name"]]
    _settle(local)
