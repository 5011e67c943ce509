"""``nodeflow.lifecycle.provisioner.pause_retry``: which pending pods a NodeflowPolicy provisioning pause holds, and
when the provisioner should run again for them (the earliest close among their paused NodePools, at most 900 s)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodeflow.api.karpenter import NodePool
from nodeflow.api.nodeflow_policy import NodeflowPolicy
from nodeflow.cluster import ClusterState
from nodeflow.governance.invalid import stand_in
from nodeflow.governance.policy import Governance
from nodeflow.lifecycle.provisioner import RETRY_MAX_DELAY_SECONDS, pause_retry
from nodeflow.scheduling.types import SchedulingResult, UnschedulablePod

NOW = datetime(2026, 11, 27, 19, 0, tzinfo=UTC)  # a Friday


def pool(name: str) -> NodePool:
    ref = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    return NodePool.model_validate(
        {"metadata": {"name": name}, "spec": {"template": {"spec": {"nodeClassRef": ref, "requirements": []}}}}
    )


def policy(name: str, **spec: Any) -> NodeflowPolicy:
    return NodeflowPolicy.model_validate({"metadata": {"name": name}, "spec": spec})


def window(name: str, schedule: str, duration: str, pools: list[str]) -> dict[str, Any]:
    return {"name": name, "schedule": schedule, "duration": duration, "provisioning": True, "nodePools": pools}


def state(*policies: NodeflowPolicy) -> ClusterState:
    return ClusterState(node_pools=[pool("gpu"), pool("batch"), pool("web")], policies=policies)


def held(pods: dict[str, dict[str, str]]) -> SchedulingResult:
    return SchedulingResult((), (), tuple(UnschedulablePod(k, v) for k, v in pods.items()))


def test_the_earliest_close_of_the_paused_nodepools_holding_pods_at_most_900_s() -> None:
    st = state(
        policy("freeze", pauses=[window("long", "0 18 * * 5", "60h", ["gpu"])]),
        policy("short", pauses=[window("deploy", "55 18 * * 5", "10m", ["batch"])]),  # closes 19:05
    )
    gov = Governance.from_policies(st.policies)
    gpu, batch = gov.provisioning_pause("gpu", NOW), gov.provisioning_pause("batch", NOW)
    assert gpu is not None
    assert batch is not None
    result = held(
        {
            "ml/train": {"gpu": gpu, "web": "incompatible requirements"},
            "etl/job": {"batch": batch},
            "shop/web": {"web": "no instance type fits"},  # not held by a pause
            "ml/denied": {"gpu": "namespace ml may not use NodePool gpu: policy access"},  # a denial, not the pause
        },
    )
    retry = pause_retry(st, result, NOW)
    assert retry is not None
    assert retry.until == datetime(2026, 11, 27, 19, 5, tzinfo=UTC)
    assert retry.delay_seconds == 301  # to the close, +1 s past it
    assert retry.pods == ("etl/job", "ml/train")
    assert retry.held == 2
    assert retry.message()["detail"] == {
        "until": "2026-11-27T19:05:00Z",
        "pods": ["etl/job", "ml/train"],
        "heldPods": 2,
    }

    only_gpu = pause_retry(st, held({"ml/train": {"gpu": gpu}}), NOW)
    assert only_gpu is not None
    assert only_gpu.until == datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    assert only_gpu.delay_seconds == RETRY_MAX_DELAY_SECONDS


def test_nothing_when_no_pause_holds_a_pod_or_the_pause_is_an_invalid_policys() -> None:
    st = state(policy("freeze", pauses=[window("long", "0 18 * * 5", "60h", ["gpu"])]))
    assert pause_retry(st, held({"shop/web": {"web": "no instance type fits"}}), NOW) is None
    assert pause_retry(state(), held({"shop/web": {"web": "no instance type fits"}}), NOW) is None
    # after the window: nothing paused
    gov = Governance.from_policies(st.policies)
    why = gov.provisioning_pause("gpu", NOW)
    assert why is not None
    assert pause_retry(st, held({"ml/train": {"gpu": why}}), datetime(2026, 11, 30, 6, 0, tzinfo=UTC)) is None

    # an invalid policy's fail-safe pause has no end (fixing the policy lifts it): no retry
    broken = stand_in({"metadata": {"name": "broken"}, "spec": {"pauses": [{"nodePools": ["gpu"], "x": 1}]}})
    assert broken is not None
    bad = state(broken)
    why = Governance.from_policies(bad.policies).provisioning_pause("gpu", NOW)
    assert why is not None
    assert pause_retry(bad, held({"ml/train": {"gpu": why}}), NOW) is None
