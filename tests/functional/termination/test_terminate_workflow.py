"""Nodes launched through the provisioning path are terminated by the real terminate workflow: taint, drain
(group order, skips, PodDisruptionBudgets, do-not-disrupt with and without a terminationGracePeriod,
VolumeAttachments), terminate, finalizers removed; started twice, or with the instance gone already."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.kube.client import NODE_POOLS, PODS
from nodeflow.lifecycle.drain_plan import parse_time
from sandbox.nodeflow import LocalNodeflow
from tests.functional.termination.conftest import (
    bound_pod,
    eventually,
    fast_clock,
    kube,
    launch,
    replacement,
    replacement_for_evicted,
    seed,
    volume_agent,
)
from tests.realk8s.workloads import running

DS = "DaemonSet"


def budget(app: str, min_available: int = 1) -> dict[str, Any]:
    """A PodDisruptionBudget for ``app``'s pods."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    }


def claim_of(local: LocalNodeflow, name: str) -> dict[str, Any] | None:
    return next(
        (c for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim") if c["metadata"]["name"] == name), None
    )


def node_of(local: LocalNodeflow, name: str) -> dict[str, Any] | None:
    return next((n for n in local.kube_server.objects("v1", "Node") if n["metadata"]["name"] == name), None)


def pod_names(local: LocalNodeflow, node: str | None = None) -> set[str]:
    """The pods in namespace default (on ``node``)."""
    pods = local.kube_server.objects("v1", "Pod", "default")
    return {p["metadata"]["name"] for p in pods if node is None or p["spec"].get("nodeName") == node}


def condition(obj: dict[str, Any] | None, kind: str) -> tuple[str, str] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c["status"], c.get("reason", "")
    return None


def events(local: LocalNodeflow, reason: str, namespace: str = "default") -> list[dict[str, Any]]:
    return [e for e in local.kube_server.objects("v1", "Event", namespace) if e.get("reason") == reason]


def evictions(local: LocalNodeflow) -> list[str]:
    """Pod names evicted (eviction requests, in order)."""
    return [
        path.split("/")[-2]
        for method, path, _ in local.kube_server.requests
        if method == "POST" and path.endswith("/eviction")
    ]


def instance_state(local: LocalNodeflow, instance_id: str) -> str:
    out = local.clients.ec2.describe_instances(InstanceIds=[instance_id])
    return str(out["Reservations"][0]["Instances"][0]["State"]["Name"])


def visits(local: LocalNodeflow, arn: str, state: str) -> int:
    return len(local.trace(arn).visits(state))


def snapshot_before(local: LocalNodeflow, suffix: str, take: Callable[[], Any]) -> list[Any]:
    """Run ``take()`` each time function ``suffix`` is invoked, before it runs; the results in order. ``take`` runs
    in a context of its own: the invocation's impersonation (its function's identity) is not the test's."""
    seen: list[Any] = []
    name = local.function_name(suffix)
    original = local.dispatch.handlers[name]

    def wrapped(event: Any, context: Any) -> Any:
        seen.append(contextvars.Context().run(take))
        return original(event, context)

    local.dispatch.register(name, wrapped)
    return seen


def finished(local: LocalNodeflow, arn: str, timeout: float = 60.0) -> dict[str, Any]:
    from sandbox.stepfunctions import wait_for_execution

    return wait_for_execution(local.clients.sfn, arn, timeout=timeout)


# ---------------------------------------------------------------------------------------------------------


def test_terminate_drains_group_by_group_and_removes_the_node(local: LocalNodeflow) -> None:
    node = launch(local, "web", 2)
    seeded = seed(
        local,
        bound_pod("logs", node.node, owner=DS),
        bound_pod("dns", node.node, priorityClassName="system-cluster-critical"),
        bound_pod("cni", node.node, owner=DS, priorityClassName="system-node-critical"),
        bound_pod("kube-proxy-static", node.node, owner="Node"),
        bound_pod("mirror", node.node, owner=None, annotations={"kubernetes.io/config.mirror": "abc"}),
        bound_pod("tolerant", node.node, tolerations=[{"key": "karpenter.sh/disrupted", "operator": "Exists"}]),
        bound_pod("job-done", node.node, owner=None, phase="Succeeded"),
    )
    at_terminate = snapshot_before(
        local,
        "terminate",
        lambda: (node_of(local, node.node), claim_of(local, node.claim), pod_names(local, node.node)),
    )
    local.kube_server.requests.clear()

    arn = local.terminate(node.claim, reason="Expired")
    desc = finished(local, arn, timeout=90)
    assert desc["status"] == "SUCCEEDED", desc

    # group by group: ordinary, DaemonSet, critical, critical DaemonSet; skipped pods stay
    evicted = evictions(local)
    assert sorted(evicted[:2]) == sorted(node.pods)
    assert [seeded[name] for name in evicted[2:]] == ["logs", "dns", "cni"]

    # while draining: tainted, labelled, both being deleted; drained before the instance went, the skipped pods left
    ((seen_node, seen_claim, seen_pods),) = at_terminate
    assert {seeded.get(p, p) for p in seen_pods} == {"kube-proxy-static", "mirror", "tolerant", "job-done"}
    assert {"key": wk.TAINT_DISRUPTED, "effect": "NoSchedule"} in seen_node["spec"]["taints"]
    assert seen_node["metadata"]["labels"][wk.LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS] == "karpenter"
    assert seen_node["metadata"].get("deletionTimestamp")
    assert seen_claim["metadata"].get("deletionTimestamp")
    assert condition(seen_claim, "Drained") == ("True", "Drained")
    assert condition(seen_claim, "VolumesDetached") == ("True", "VolumesDetached")
    assert instance_state(local, node.instance_id) in ("shutting-down", "terminated")

    # gone: Node, NodeClaim (finalizers removed), and no live instance left for the claim
    assert node_of(local, node.node) is None
    assert claim_of(local, node.claim) is None
    assert local.instances() == []

    # events: why, evictions, draining
    assert [
        e["message"] for e in events(local, "DisruptionTerminating") if e["involvedObject"]["kind"] == "NodeClaim"
    ] == ["Disrupting NodeClaim: Expired"]
    assert {e["involvedObject"]["name"] for e in events(local, "Evicted")} == {*node.pods, *evicted[2:]}
    draining = events(local, "FailedDraining")
    assert draining
    assert all(e["type"] == "Warning" and e["involvedObject"]["kind"] == "Node" for e in draining)
    assert any("pods are waiting to be evicted" in e["message"] for e in draining)

    trace = local.trace(arn)
    assert trace.names[:3] == ["Taint", "Drain", "Drained?"]
    assert trace.names[-4:] == ["Terminate", "Terminating?", "RemoveFinalizer", "Terminated"]
    # one pass per group, then done (more while the evicted pods are still terminating)
    assert len(trace.visits("Drain")) >= 5
    output = json.loads(desc["output"])
    assert output["termination"]["terminated"] is True
    assert output["finalized"] == {"node": node.node, "nodeFinalized": True, "nodeClaimFinalized": True}


def test_plain_termination_stays_within_the_control_plane_budget(make_local: Callable[..., LocalNodeflow]) -> None:
    # waits at a tenth: the evicted pods' 30 s grace period is 3 s, more than their containers take to stop
    local = make_local(wait_scale=0.1)
    node = launch(local, "web", 3)
    seed(
        local,
        bound_pod(
            "kube-proxy",
            node.node,
            owner=DS,
            priorityClassName="system-node-critical",
            tolerations=[{"operator": "Exists"}],
        ),
        bound_pod("static", node.node, owner="Node"),
    )
    arn = local.terminate(node.claim)
    assert finished(local, arn)["status"] == "SUCCEEDED"
    trace = local.trace(arn)
    print(f"\n{trace}")
    assert trace.names == [
        "Taint",
        "Drain",
        "Drained?",
        "WaitForDrain",
        "Drain",
        "Drained?",
        "Terminate",
        "Terminating?",
        "RemoveFinalizer",
        "Terminated",
    ]
    assert (trace.transitions, trace.task_invocations) == (10, 5)
    # DESIGN: <= 25 transitions and <= 10 Lambda invocations per node lifecycle; the launch takes 11 / 4 with a
    # real boot (README, benchmarks/provisioning.py), so termination has 14 / 6
    assert trace.transitions <= 25 - 11
    assert trace.task_invocations <= 10 - 4


def test_a_pod_disruption_budget_holds_the_drain_until_a_replacement_is_ready(local: LocalNodeflow) -> None:
    node = launch(local, "db", 1)
    (db,) = node.pods
    local.apply([budget("db")])
    arn = local.terminate(node.claim)
    eventually(lambda: visits(local, arn, "Drain") >= 3, what="the drain to poll while blocked")
    assert db in pod_names(local)
    assert instance_state(local, node.instance_id) == "running"
    claim = claim_of(local, node.claim)
    assert condition(claim, "Drained") == ("False", "Draining")
    blocked = [e for e in events(local, "FailedDraining") if "PodDisruptionBudget" in e["message"]]
    assert blocked
    assert blocked[0]["message"] == (
        "Failed to drain node, 1 pods are waiting to be evicted (1 blocked by a PodDisruptionBudget)"
    )
    assert json.loads(local.clients.sfn.describe_execution(executionArn=arn)["input"])["nodeClaim"] == node.claim

    # the workload scales up: its new pod has no node (this one is tainted), so one is provisioned for it; once
    # the pod runs there the disruption controller's status allows one disruption and the eviction goes through
    other = replacement(local, "db")
    assert visits(local, arn, "Terminate") == 0
    desc = finished(local, arn, timeout=60)
    assert desc["status"] == "SUCCEEDED"
    assert db not in pod_names(local)
    assert evictions(local).count(db) >= 2  # refused (429) first, then let through
    assert claim_of(local, node.claim) is None
    # the ReplicaSet controller replaced the evicted pod; kube-scheduler bound it to the other node
    assert {p["spec"]["nodeName"] for p in running(local.kube_server, "db", 2)} == {other}


def test_do_not_disrupt_without_a_grace_period_blocks_the_termination(local: LocalNodeflow) -> None:
    node = launch(local, "batch", 1)
    (batch,) = node.pods
    kube(local).patch(
        PODS, batch, {"metadata": {"annotations": {wk.ANNOTATION_DO_NOT_DISRUPT: "true"}}}, namespace="default"
    )
    arn = local.terminate(node.claim)
    eventually(lambda: visits(local, arn, "Drain") >= 4, what="several drain passes")
    assert local.clients.sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"
    assert instance_state(local, node.instance_id) == "running"  # never terminated under a do-not-disrupt pod
    assert batch in pod_names(local)
    assert batch not in evictions(local)
    claim = claim_of(local, node.claim)
    assert claim is not None
    assert condition(claim, "Drained") == ("False", "Draining")
    assert wk.FINALIZER_TERMINATION in claim["metadata"]["finalizers"]
    assert claim["metadata"]["deletionTimestamp"]
    assert any("annotated karpenter.sh/do-not-disrupt" in e["message"] for e in events(local, "FailedDraining"))
    assert visits(local, arn, "Terminate") == 0
    # held only by do-not-disrupt: each pass waits longer (10, 20, 40, ... s, up to 300 s)
    passes = [
        (i.result["heldPasses"], i.result["waitSeconds"])
        for i in local.dispatch.invocations
        if i.function_name == local.function_name("drain") and isinstance(i.result, dict) and "heldPasses" in i.result
    ]
    assert passes[:3] == [(1, 10), (2, 20), (3, 40)], passes

    local.clients.sfn.stop_execution(executionArn=arn)
    assert finished(local, arn)["status"] == "ABORTED"
    assert instance_state(local, node.instance_id) == "running"
    assert node_of(local, node.node) is not None  # nothing lost: a later start picks it up again


def test_do_not_disrupt_with_a_grace_period_is_deleted_at_deadline_minus_its_grace(
    make_local: Callable[..., LocalNodeflow],
) -> None:
    # 20x: 2 minutes take ~6 s, and 45 handler-seconds of tolerance are ~2 s of harness latency (CI load)
    local = make_local(wait_scale=0.05)
    # a NodeClaim's spec is immutable (CEL): it gets its terminationGracePeriod from its NodePool's template
    for pool in local.kube_server.objects("karpenter.sh/v1", "NodePool"):
        kube(local).patch(
            NODE_POOLS, pool["metadata"]["name"], {"spec": {"template": {"spec": {"terminationGracePeriod": "2m"}}}}
        )
    node = launch(local, "batch", 1, terminationGracePeriodSeconds=60)
    assert local.kube_server.get("karpenter.sh/v1", "NodeClaim", node.claim)["spec"]["terminationGracePeriod"] == "2m"
    (batch,) = node.pods
    kube(local).patch(
        PODS, batch, {"metadata": {"annotations": {wk.ANNOTATION_DO_NOT_DISRUPT: "true"}}}, namespace="default"
    )
    fast_clock(local)  # the handlers' clock runs as fast as the scaled waits
    local.kube_server.requests.clear()

    arn = local.terminate(node.claim)
    desc = finished(local, arn)
    assert desc["status"] == "SUCCEEDED", desc
    output = json.loads(desc["output"])
    deadline = parse_time(output["taint"]["deadline"])
    assert deadline is not None

    assert batch not in evictions(local)  # deleted, not evicted
    deletes = [q for m, p, q in local.kube_server.requests if m == "DELETE" and p.endswith(f"/pods/{batch}")]
    assert len(deletes) == 1
    (expiring,) = [e for e in events(local, "TerminationGracePeriodExpiring") if e["involvedObject"]["kind"] == "Pod"]
    assert expiring["involvedObject"]["name"] == batch
    assert expiring["type"] == "Warning"
    deleted_at = parse_time(expiring["firstTimestamp"])
    assert deleted_at is not None
    due = deadline - timedelta(seconds=60)
    # never early; late only by the harness's latency, which the fast clock multiplies by 20 (a few
    # handler-seconds when idle), and well before the deadline so the pod keeps most of its grace period
    assert due - timedelta(seconds=1) <= deleted_at <= due + timedelta(seconds=45), (deleted_at, due)
    granted = int(expiring["message"].split("granted ")[1].split(" ")[0])
    assert 15 <= granted <= 60
    claim_events = [
        e for e in events(local, "TerminationGracePeriodExpiring") if e["involvedObject"]["kind"] == "NodeClaim"
    ]
    assert claim_events
    assert claim_events[0]["message"] == f"All pods will be deleted by {output['taint']['deadline']}"
    assert claim_of(local, node.claim) is None
    assert instance_state(local, node.instance_id) in ("shutting-down", "terminated")


def test_the_termination_waits_for_volume_attachments(local: LocalNodeflow) -> None:
    node = launch(local, "web", 1)
    volume_agent(local, node.node, ("pv-data", "pv-logs"))
    arn = local.terminate(node.claim)
    eventually(lambda: visits(local, arn, "WaitForVolumes") >= 2, what="the workflow to wait for the volume")
    assert condition(claim_of(local, node.claim), "VolumesDetached") == ("False", "AwaitingVolumeDetachment")
    assert condition(claim_of(local, node.claim), "Drained") == ("True", "Drained")
    assert instance_state(local, node.instance_id) == "running"
    assert (
        events(local, "AwaitingVolumeDetachment")[0]["message"]
        == "Awaiting deletion of 1 VolumeAttachments bound to node"
    )

    kube(local).request("DELETE", "/apis/storage.k8s.io/v1/volumeattachments/csi-pv-data")  # detached
    assert finished(local, arn)["status"] == "SUCCEEDED"
    assert claim_of(local, node.claim) is None
    # the attachment of the log agent's volume (a pod that is not drained) did not hold the termination
    assert [a["metadata"]["name"] for a in local.kube_server.objects("storage.k8s.io/v1", "VolumeAttachment")] == [
        "csi-pv-logs"
    ]


def test_starting_twice_runs_one_execution_and_terminates_once(
    local: LocalNodeflow, count_ec2: Callable[[str], Callable[[], int]]
) -> None:
    node = launch(local, "web", 1)
    terminations = count_ec2("TerminateInstances")
    first = local.terminate(node.claim, reason="Drifted")
    second = local.terminate(node.claim, reason="Drifted")
    assert first == second
    done = local.wait_for_terminations()
    assert [d["status"] for d in done] == ["SUCCEEDED"]
    assert len(local.terminate_executions()) == 1
    assert terminations() == 1
    assert local.terminate(node.claim) == first  # after success: still a no-op
    assert len(local.terminate_executions()) == 1


def test_an_instance_gone_already_skips_the_drain(local: LocalNodeflow) -> None:
    node = launch(local, "web", 2)
    local.clients.ec2.terminate_instances(InstanceIds=[node.instance_id])
    local.kube_server.requests.clear()
    arn = local.terminate(node.claim, reason="SpotInterrupted")
    desc = finished(local, arn)
    print(local.trace(arn))
    assert desc["status"] == "SUCCEEDED"
    assert evictions(local) == []
    assert json.loads(desc["output"])["drain"]["instanceGone"] is True
    assert node_of(local, node.node) is None
    assert claim_of(local, node.claim) is None


def test_a_node_claim_gone_already_succeeds_at_once(local: LocalNodeflow) -> None:
    arn = local.terminate("default-gone1")
    assert finished(local, arn)["status"] == "SUCCEEDED"
    assert local.trace(arn).names == ["Taint", "Drain", "Drained?", "Terminated"]


def test_a_failed_step_keeps_the_node_for_a_later_start(local: LocalNodeflow) -> None:
    from sandbox.faults import flaky

    node = launch(local, "web", 1)
    name = local.function_name("terminate")
    local.dispatch.register(name, flaky(local.dispatch.handlers[name], times=1))
    first = local.terminate(node.claim)
    desc = finished(local, first)
    assert desc["status"] == "FAILED"
    assert desc.get("error") == "RuntimeError"
    assert local.trace(first).names[-1] == "TerminationFailed"
    claim = claim_of(local, node.claim)
    assert claim is not None
    assert wk.FINALIZER_TERMINATION in claim["metadata"]["finalizers"]
    seen = node_of(local, node.node)
    assert seen is not None
    assert {"key": wk.TAINT_DISRUPTED, "effect": "NoSchedule"} in seen["spec"]["taints"]

    second = local.terminate(node.claim)  # the next start is named <claim>-2
    assert second.endswith(f":{node.claim}-2")
    assert finished(local, second)["status"] == "SUCCEEDED"
    assert claim_of(local, node.claim) is None
    assert node_of(local, node.node) is None


def test_every_step_is_idempotent(local: LocalNodeflow) -> None:
    """Every step runs twice each time (as after a lost response and a retry): same outcome, one instance
    terminated, both objects gone."""
    node = launch(local, "web", 2)
    for step in ("taint", "drain", "terminate", "finalize"):
        name = local.function_name(step)
        original = local.dispatch.handlers[name]

        def twice(event: Any, context: Any, original: Any = original) -> Any:
            original(event, context)
            return original(event, context)

        local.dispatch.register(name, twice)
    arn = local.terminate(node.claim)
    assert finished(local, arn)["status"] == "SUCCEEDED"
    assert claim_of(local, node.claim) is None
    assert node_of(local, node.node) is None
    assert instance_state(local, node.instance_id) in ("shutting-down", "terminated")
    assert sorted(evictions(local)) == sorted(node.pods)


def test_evicted_pods_come_back_through_their_replica_set_and_run_on_a_new_node(local: LocalNodeflow) -> None:
    """End to end on the real control plane: the Node is tainted and drained through the real eviction API under
    a PodDisruptionBudget the disruption controller keeps the status of; the first eviction is let through, the
    second refused (429, a DisruptionBudget cause) while the first pod's replacement, made by the ReplicaSet
    controller, has no node; nodeflow provisions one for it, kube-scheduler binds it there, the budget allows the
    second eviction; the instance is terminated in moto, its kubelet stops, the Node and NodeClaim go."""
    node = launch(local, "web", 2)
    local.apply([budget("web")])
    eventually(
        lambda: (
            (local.kube_server.get("policy/v1", "PodDisruptionBudget", "web").get("status") or {}).get(
                "disruptionsAllowed"
            )
            == 1
        ),
        what="the disruption controller's status of the budget",
    )
    arn = local.terminate(node.claim, reason="Drifted")
    eventually(
        lambda: any(e.status == 429 for e in local.kube_server.exchanges if e.path.endswith("/eviction")),
        what="an eviction refused",
    )
    refused = next(e for e in local.kube_server.exchanges if e.path.endswith("/eviction") and e.status == 429)
    assert "disruption budget" in refused.message
    assert visits(local, arn, "Terminate") == 0

    other = replacement_for_evicted(local, "web")
    desc = finished(local, arn, timeout=60)
    assert desc["status"] == "SUCCEEDED", desc
    assert set(evictions(local)) == set(node.pods)
    assert node_of(local, node.node) is None
    assert claim_of(local, node.claim) is None
    assert instance_state(local, node.instance_id) in ("shutting-down", "terminated")
    eventually(lambda: node.node not in local.kubelet.running(), what="the kubelet to stop")
    # both pods run again, on the new node (each made again by the ReplicaSet controller, bound by kube-scheduler)
    pods = running(local.kube_server, "web", 2, timeout=60)
    assert {p["spec"]["nodeName"] for p in pods} == {other}
    assert not {p["metadata"]["name"] for p in pods} & set(node.pods)


def test_a_pod_two_budgets_select_holds_the_drain_until_one_goes(local: LocalNodeflow) -> None:
    """The real eviction API never evicts a pod that two PodDisruptionBudgets select: it answers 500 ("more than one
    PodDisruptionBudget"), whatever the budgets allow. The drain holds on it as on a budget (as Karpenter does),
    instead of failing the Drain step; once one budget goes, the pod is evicted and the termination ends."""
    node = launch(local, "web", 1)
    for name in ("web", "web-too"):
        local.apply(
            [
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
                }
            ]
        )
    arn = local.terminate(node.claim)
    eventually(lambda: visits(local, arn, "Drain") >= 3, what="the drain to poll while held")
    answers = {e.status for e in local.kube_server.exchanges if e.path.endswith("/eviction")}
    assert answers == {500}, answers
    assert local.clients.sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"
    assert visits(local, arn, "Terminate") == 0
    assert instance_state(local, node.instance_id) == "running"
    assert condition(claim_of(local, node.claim), "Drained") == ("False", "Draining")
    assert any("1 blocked by a PodDisruptionBudget" in e["message"] for e in events(local, "FailedDraining"))

    local.kube_server.delete("policy/v1", "PodDisruptionBudget", "web-too")
    desc = finished(local, arn, timeout=60)
    assert desc["status"] == "SUCCEEDED", desc
    assert evictions(local).count(node.pods[0]) >= 2
    assert claim_of(local, node.claim) is None
