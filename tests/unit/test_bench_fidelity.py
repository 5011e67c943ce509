"""benchmarks.fidelity's miss explanations: each cause judged from a NodeClaim's layout row, in order."""

from __future__ import annotations

from typing import Any

from benchmarks.fidelity import (
    CAUSE_AFFINITY,
    CAUSE_LAUNCH,
    CAUSE_NOT_READY,
    CAUSE_PLAN,
    CAUSE_SPREAD,
    CAUSE_TAKEN,
    CAUSE_UNEXPLAINED,
    cause_counts,
    explain_misses,
    pod_requests,
)

DS = {"cpu": 125, "memory": 128 * 2**20 * 1000, "pods": 2000}  # the demo DaemonSets' overhead, milli-units
GI = 2**30 * 1000


def node(ready: bool = True, taints: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
    }


def pod(cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}], **extra}}


def judge(
    *,
    planned: list[str],
    bound: list[str],
    requests: dict[str, dict[str, int]],
    why: str = "0/3 nodes are available: 3 Insufficient cpu.",
    nodes: dict[str, dict[str, Any]] | None = None,
    failed: frozenset[str] = frozenset(),
    daemonset_pods: frozenset[str] = frozenset({"kube-system/aws-node-x", "kube-system/kube-proxy-x"}),
) -> dict[str, Any]:
    miss = {"pod": "ns/a-0", "plannedFor": "claim-1", "plannedNode": "node-1", "why": why}
    row = {
        "nodeClaim": "claim-1",
        "allocatable": {"cpu": "1930m", "memory": "3Gi", "pods": "8"},
        "planned": planned,
        "bound": bound,
    }
    requests = {
        "kube-system/aws-node-x": {"cpu": 25, "memory": 64 * 2**20 * 1000, "pods": 1000},
        "kube-system/kube-proxy-x": {"cpu": 100, "memory": 64 * 2**20 * 1000, "pods": 1000},
        **requests,
    }
    nodes = {"node-1": node()} if nodes is None else nodes
    [out] = explain_misses([miss], [row], requests, set(daemonset_pods), DS, nodes, set(failed))
    return out


ONE_CPU = {"cpu": 1000, "memory": GI, "pods": 1000}
SYSTEM = ["kube-system/aws-node-x", "kube-system/kube-proxy-x"]


def test_a_pod_whose_room_went_to_a_pod_planned_elsewhere_is_room_taken() -> None:
    out = judge(
        planned=["ns/a-0"],
        bound=[*SYSTEM, "ns/b-0"],
        requests={"ns/a-0": ONE_CPU, "ns/b-0": {"cpu": 1500, "memory": GI, "pods": 1000}},
    )
    assert out["cause"] == CAUSE_TAKEN
    assert out["detail"] == {"takenBy": ["ns/b-0"]}


def test_a_plan_that_overfills_its_nodeclaim_is_the_plans_fault() -> None:
    out = judge(
        planned=["ns/a-0", "ns/a-1"],
        bound=[*SYSTEM, "ns/a-1", "ns/b-0"],
        requests={"ns/a-0": ONE_CPU, "ns/a-1": ONE_CPU, "ns/b-0": ONE_CPU},
    )
    assert out["cause"] == CAUSE_PLAN
    assert out["detail"]["over"] == ["cpu"]
    assert out["detail"]["demand"]["cpu"] == 2125


def test_a_launch_that_failed_or_a_node_that_never_came_is_a_launch_failure() -> None:
    requests = {"ns/a-0": ONE_CPU}
    assert (
        judge(planned=["ns/a-0"], bound=[], requests=requests, failed=frozenset({"claim-1"}))["cause"] == CAUSE_LAUNCH
    )
    assert judge(planned=["ns/a-0"], bound=[], requests=requests, nodes={})["cause"] == CAUSE_LAUNCH


def test_a_node_still_tainted_or_not_ready_is_not_ready() -> None:
    requests = {"ns/a-0": ONE_CPU}
    tainted = {"node-1": node(taints=("karpenter.sh/unregistered",))}
    assert judge(planned=["ns/a-0"], bound=SYSTEM, requests=requests, nodes=tainted)["cause"] == CAUSE_NOT_READY
    not_ready = {"node-1": node(ready=False)}
    assert judge(planned=["ns/a-0"], bound=SYSTEM, requests=requests, nodes=not_ready)["cause"] == CAUSE_NOT_READY


def test_a_pod_refused_where_its_node_still_has_room_takes_kube_schedulers_reason() -> None:
    requests = {"ns/a-0": ONE_CPU, "ns/b-0": {"cpu": 100, "memory": GI, "pods": 1000}}
    # an intruder that left room does not explain the miss
    spread = judge(
        planned=["ns/a-0"],
        bound=[*SYSTEM, "ns/b-0"],
        requests=requests,
        why="0/9 nodes are available: 4 node(s) didn't match pod topology spread constraints.",
    )
    assert spread["cause"] == CAUSE_SPREAD
    affinity = judge(
        planned=["ns/a-0"],
        bound=SYSTEM,
        requests=requests,
        why="0/3 nodes are available: 3 didn't match pod affinity rules.",
    )
    assert affinity["cause"] == CAUSE_AFFINITY
    assert judge(planned=["ns/a-0"], bound=SYSTEM, requests=requests)["cause"] == CAUSE_UNEXPLAINED


def test_cause_counts_keep_the_causes_order_and_leave_out_the_empty_ones() -> None:
    misses = [{"cause": CAUSE_SPREAD}, {"cause": CAUSE_TAKEN}, {"cause": CAUSE_SPREAD}]
    assert list(cause_counts(misses).items()) == [(CAUSE_TAKEN, 1), (CAUSE_SPREAD, 2)]


def test_pod_requests_count_the_largest_init_container_and_the_overhead() -> None:
    p = pod(
        "250m",
        "512Mi",
        initContainers=[{"resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}],
        overhead={"cpu": "10m"},
    )
    assert pod_requests(p) == {"cpu": 1010, "memory": 512 * 2**20 * 1000, "pods": 1000}
