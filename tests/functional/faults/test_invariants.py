"""The invariant checker fails on a deliberately broken world: each rule is broken once, and each is reported
(a checker that cannot fail would make the fault matrix meaningless)."""

from __future__ import annotations

from nodeflow.api import labels as wk
from sandbox.controlplane.facade import wait_for
from sandbox.nodeflow import LocalNodeflow
from tests.functional.faults.invariants import check_world, history_length, rules, settle
from tests.realk8s.launched import launch_workload
from tests.realk8s.workloads import replica_set, unschedulable


def test_a_sound_world_passes(local: LocalNodeflow) -> None:
    launch_workload(local, "web", 2, "500m", "512Mi")
    settle(local)
    assert check_world(local) == []


def test_each_broken_rule_is_reported(local: LocalNodeflow) -> None:
    (claim,) = launch_workload(local, "web", 1, "500m", "512Mi")
    (pod,) = local.kube_server.objects("v1", "Pod", "default")
    # a terminate execution held by a do-not-disrupt pod: still running, and over a (tiny) history bound
    local.kube_server.patch(
        "v1", "Pod", pod["metadata"]["name"], {"metadata": {"annotations": {wk.ANNOTATION_DO_NOT_DISRUPT: "true"}}}
    )
    arn = local.terminate(claim["metadata"]["name"], reason="Test")
    wait_for("the held terminate execution to run a few states", lambda: history_length(local, arn) > 5)
    # an instance of a NodePool that no NodeClaim names
    leaked = local.run_instance({"kubernetes.io/cluster/demo": "owned", wk.LABEL_NODEPOOL: "default"})
    # a NodeClaim that never got a Node (nothing launched it)
    local.apply(
        [
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": "default-orphan", "labels": {wk.LABEL_NODEPOOL: "default"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
                },
            }
        ]
    )
    # a pending pod nobody but kube-scheduler looked at (too big for the node there is)
    local.apply([replica_set("forgotten", 1, cpu="64")])
    (forgotten,) = unschedulable(local.kube_server, "forgotten", 1)
    # a disruption Lambda that fails
    name = local.function_name("disruption")

    def broken(event: object, context: object) -> object:
        raise RuntimeError("the round cannot run")

    local.dispatch.register(name, broken)
    try:
        violations = check_world(local, max_terminate_events=1)
    finally:
        local.stop_executions()
    assert rules(violations) == {
        "instance-without-nodeclaim",
        "nodeclaim-without-node",
        "pod-stranded",
        "terminate-history",
        "execution-running",
        "disruption-round",
    }, violations
    subjects = {v.rule: v.subject for v in violations}
    assert subjects["instance-without-nodeclaim"] == leaked
    assert subjects["nodeclaim-without-node"] == "default-orphan"
    assert subjects["pod-stranded"] == forgotten
    assert subjects["terminate-history"] == claim["metadata"]["name"]
