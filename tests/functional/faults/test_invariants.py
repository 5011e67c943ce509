"""The invariant checker fails on a deliberately broken world: each rule is broken once, and each is reported
(a checker that cannot fail would make the fault matrix meaningless)."""

from __future__ import annotations

from nodeflow.api import labels as wk
from nodeflow.kube.client import PODS
from sandbox.nodeflow import LocalNodeflow
from tests.functional.faults.invariants import check_world, history_length, rules, settle
from tests.functional.lifecycle.conftest import pending_pods
from tests.functional.termination.conftest import eventually, kube, launch
from tests.functional.termination.test_long_drain import stop_all


def test_a_sound_world_passes(local: LocalNodeflow) -> None:
    launch(local, "web", 2)
    settle(local)
    assert check_world(local) == []


def test_each_broken_rule_is_reported(local: LocalNodeflow) -> None:
    node = launch(local, "web", 1)
    # a terminate execution held by a do-not-disrupt pod: still running, and over a (tiny) history bound
    kube(local).patch(
        PODS, node.pods[0], {"metadata": {"annotations": {wk.ANNOTATION_DO_NOT_DISRUPT: "true"}}}, namespace="default"
    )
    arn = local.terminate(node.claim, reason="Test")
    eventually(lambda: history_length(local, arn) > 5, what="the held terminate execution to run a few states")
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
    # a pending pod nobody looked at
    local.apply(pending_pods("forgotten", 1))
    # a disruption Lambda that fails
    name = local.function_name("disruption")

    def broken(event: object, context: object) -> object:
        raise RuntimeError("the round cannot run")

    local.dispatch.register(name, broken)
    try:
        violations = check_world(local, max_terminate_events=1)
    finally:
        stop_all(local)
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
    assert subjects["pod-stranded"] == "default/forgotten-7d4b9c-00000"
    assert subjects["terminate-history"] == node.claim
