"""Pending pods become initialized nodes through the real launch workflow; every fault ends with
the right NodeClaims, no duplicate instance and no leaked instance. On the real control plane: the pods are a
ReplicaSet's that kube-scheduler found no node for, and the pods it binds to the new nodes run."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.handlers import runtime
from sandbox.controlplane.proxy import Fault
from sandbox.faults import flaky
from sandbox.nodeflow import LocalNodeflow
from tests.functional.emf import metric_records
from tests.functional.lifecycle.conftest import demo_node_pools, pending
from tests.realk8s.workloads import running


def claims(local: LocalNodeflow) -> list[dict[str, Any]]:
    return local.kube_server.objects("karpenter.sh/v1", "NodeClaim")


def nodes(local: LocalNodeflow) -> list[dict[str, Any]]:
    return local.kube_server.objects("v1", "Node")


def events(local: LocalNodeflow, reason: str) -> list[dict[str, Any]]:
    return [e for e in local.kube_server.objects("v1", "Event", "default") if e.get("reason") == reason]


def condition(obj: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), None)


def live_instances(local: LocalNodeflow) -> list[dict[str, Any]]:
    return local.instances(("pending", "running"))


def test_pending_pods_become_initialized_nodes(local: LocalNodeflow, capfd: pytest.CaptureFixture[str]) -> None:
    pending(local, "web", 6, cpu="1", memory="2Gi")
    local.send_pending(["default/web"])
    result = local.provision()["result"]
    assert result["pendingPods"] == 6
    # Karpenter's scheduling-duration metric, an EMF record labelled with the controller
    out = capfd.readouterr().out
    [emf] = metric_records(out, "karpenter_scheduler_scheduling_duration_seconds")
    assert emf["controller"] == "provisioner"
    assert emf["karpenter_scheduler_scheduling_duration_seconds"] == [
        pytest.approx(result["timings"]["solve"], abs=1e-3)
    ]
    created = metric_records(out, "karpenter_nodeclaims_created_total")
    assert [(m["reason"], m["nodepool"], m["min_values_relaxed"]) for m in created] == [
        ("provisioned", "default", "false")
    ]
    assert created[0]["karpenter_nodeclaims_created_total"] == [float(len(result["nodeClaimsCreated"]))]
    assert result["executionsStarted"] == result["nodeClaimsCreated"]

    done = local.wait_for_executions()
    assert [d["status"] for d in done] == ["SUCCEEDED"] * len(result["nodeClaimsCreated"])
    assert {d["name"] for d in done} == set(result["nodeClaimsCreated"])

    by_name = {c["metadata"]["name"]: c for c in claims(local)}
    instances = {i["InstanceId"]: i for i in live_instances(local)}
    assert len(instances) == len(by_name)
    for name, claim in by_name.items():
        status = claim["status"]
        for kind in ("Launched", "Registered", "Initialized", "Ready"):
            assert condition(claim, kind) == "True", (name, kind)
        instance_id = status["providerID"].rsplit("/", 1)[-1]
        inst = instances[instance_id]
        tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
        assert tags[wk.LABEL_NODECLAIM] == name
        assert tags["karpenter.sh/nodepool"] == "default"
        assert tags["karpenter.k8s.aws/ec2nodeclass"] == "default"
        assert tags["kubernetes.io/cluster/demo"] == "owned"
        assert tags["eks:eks-cluster-name"] == "demo"
        assert status["imageID"].startswith("ami-")
        assert status["capacity"]["cpu"]
        assert status["allocatable"]["memory"]
        labels = claim["metadata"]["labels"]
        assert labels[wk.LABEL_INSTANCE_TYPE] == inst["InstanceType"]
        assert labels[wk.LABEL_ZONE] == inst["Placement"]["AvailabilityZone"]
        # where it was launched, for subnet and security-group drift
        annotations = claim["metadata"]["annotations"]
        assert annotations["nodeflow.io/subnet-id"] == local.world.subnets[inst["Placement"]["AvailabilityZone"]]
        assert annotations["nodeflow.io/security-group-ids"] == local.world.security_group_id

    node_by_name = {n["metadata"]["name"]: n for n in nodes(local)}
    for claim in by_name.values():
        node = node_by_name[claim["status"]["nodeName"]]
        assert node["spec"]["providerID"] == claim["status"]["providerID"]
        assert wk.FINALIZER_TERMINATION in node["metadata"]["finalizers"]
        assert node["metadata"]["labels"][wk.LABEL_REGISTERED] == "true"
        assert node["metadata"]["labels"][wk.LABEL_INITIALIZED] == "true"
        assert node["metadata"]["labels"][wk.LABEL_NODEPOOL] == "default"
        assert wk.TAINT_UNREGISTERED not in {t["key"] for t in node["spec"].get("taints") or []}
        assert node["metadata"]["ownerReferences"][0]["kind"] == "NodeClaim"

    nominated = events(local, "Nominated")
    assert len(nominated) == 6
    node_class = local.kube_server.get("karpenter.k8s.aws/v1", "EC2NodeClass", "default")
    assert {s["zone"] for s in node_class["status"]["subnets"]} == set(local.world.subnets)
    assert condition(node_class, "Ready") == "True"

    # kube-scheduler binds the pods to the new nodes, where they run
    pods = running(local.kube_server, "web", 6)
    assert {p["spec"]["nodeName"] for p in pods} <= {c["status"]["nodeName"] for c in by_name.values()}

    # what the console shows: one readable trace per NodeClaim
    trace = local.trace(done[0]["executionArn"])
    names = [v.name for v in trace.states]
    assert names[0] == "Launch"
    assert "Register" in names
    assert names[-1] == "Initialized"


def test_same_batch_twice_provisions_once(local: LocalNodeflow) -> None:
    pending(local, "api", 4, cpu="2", memory="4Gi")
    local.send_pending(["default/api"], event_id="e-1")
    batch = local.receive_batch()
    first = local.provision(batch)["result"]
    second = local.provision(batch)["result"]  # SQS redelivers the same messages
    assert first["nodeClaimsCreated"]
    assert second["nodeClaimsCreated"] == []
    assert second["executionsStarted"] == []
    local.wait_for_executions()
    assert len(claims(local)) == len(first["nodeClaimsCreated"])
    assert len(live_instances(local)) == len(first["nodeClaimsCreated"])


def test_new_batch_does_not_reprovision_nominated_pods(local: LocalNodeflow) -> None:
    pending(local, "api", 3, cpu="1", memory="1Gi")
    local.send_pending(["default/api"])
    first = local.provision()["result"]
    local.send_pending(["default/api"])  # the agent reports the same pods again, a new event id
    second = local.provision()["result"]
    assert second["nodeClaimsCreated"] == []
    local.wait_for_executions()
    assert len(live_instances(local)) == len(first["nodeClaimsCreated"])


def test_capacity_errors_mark_offerings_unavailable_and_launch_elsewhere(
    make_local: Callable[..., LocalNodeflow],
) -> None:
    local = make_local()
    pending(local, "batch", 1, cpu="1", memory="1Gi")
    # The first CreateFleet finds its 8 cheapest instance types out of capacity in every zone.
    local.send_pending(["default/batch"])
    batch = local.receive_batch()
    exhausted: list[str] = []

    def before_fleet(asked: list[tuple[str, str]]) -> None:
        if not exhausted:
            for itype, _ in asked:
                if itype not in exhausted and len(exhausted) < 8:
                    exhausted.append(itype)
            local.faults.exhaust((t, z) for t in exhausted for z in local.world.subnets)

    local.faults.before = before_fleet
    result = local.provision(batch)["result"]
    done = local.wait_for_executions()
    assert [d["status"] for d in done] == ["SUCCEEDED"]
    (claim,) = claims(local)
    launched = claim["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE]
    assert launched not in exhausted
    assert len(live_instances(local)) == 1
    ice_calls = [c for c in local.faults.calls if c.get("errors") or c["outcome"] == "no-capacity"]
    assert ice_calls, local.faults.calls
    # each fallback is a new request with its own ClientToken: EC2 (emulated) never answers a mismatch
    assert "idempotent-mismatch" not in [c["outcome"] for c in local.faults.calls]
    assert len(local.faults.tokens) == len([c for c in local.faults.calls if c["outcome"] != "throttled"])
    unavailable = runtime.runtime().offerings.current(runtime.runtime().now())
    assert {(t, z) for t, z, _ in unavailable} >= {(t, z) for t in exhausted for z in local.world.subnets}
    assert result["nodeClaimsCreated"] == [claim["metadata"]["name"]]


def _without_capacity_type(pool: dict[str, Any]) -> dict[str, Any]:
    """The demo's default NodePool as ``plain`` (weight 100), without a capacity-type requirement or limits, and
    of two instance types (so one CreateFleet asks for all their spot offerings)."""
    spec = pool["spec"]
    requirements = [r for r in spec["template"]["spec"]["requirements"] if r["key"] != wk.LABEL_CAPACITY_TYPE]
    requirements.append({"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": ["c6a.large", "c7a.large"]})
    template = {**spec["template"], "spec": {**spec["template"]["spec"], "requirements": requirements}}
    body = {k: v for k, v in spec.items() if k != "limits"}
    return {**pool, "metadata": {"name": "plain"}, "spec": {**body, "weight": 100, "template": template}}


@pytest.mark.parametrize("spot_exhausted", [False, True])
def test_a_nodepool_without_capacity_type_launches_spot_then_on_demand(
    make_local: Callable[..., LocalNodeflow], spot_exhausted: bool
) -> None:
    # As Karpenter v1.14: the NodeClaim requires the capacity types its instance types offer
    # (NodeClaimTemplate.ToNodeClaim) and the AWS provider launches spot before on-demand (getCapacityType);
    # once every spot offering is out of capacity the launch falls back to on-demand.
    local = make_local()
    local.apply([_without_capacity_type(next(p for p in demo_node_pools() if p["metadata"]["name"] == "default"))])
    pending(local, "batch", 1, cpu="1", memory="1Gi")
    local.send_pending(["default/batch"])
    if spot_exhausted:
        local.faults.exhaust(
            ((t, z) for t in ("c6a.large", "c7a.large") for z in local.world.subnets), lifecycle="spot"
        )
    local.provision()
    done = local.wait_for_executions()
    assert [d["status"] for d in done] == ["SUCCEEDED"]
    (claim,) = claims(local)
    assert claim["metadata"]["labels"][wk.LABEL_NODEPOOL] == "plain"
    (ct,) = [r for r in claim["spec"]["requirements"] if r["key"] == wk.LABEL_CAPACITY_TYPE]
    assert (ct["operator"], sorted(ct["values"])) == ("In", ["on-demand", "spot"])
    expected = "on-demand" if spot_exhausted else "spot"
    assert claim["metadata"]["labels"][wk.LABEL_CAPACITY_TYPE] == expected
    (node,) = nodes(local)
    assert node["metadata"]["labels"][wk.LABEL_CAPACITY_TYPE] == expected
    (instance,) = live_instances(local)
    assert (instance.get("InstanceLifecycle") == "spot") == (not spot_exhausted)
    # one Launch step: (the spot request found no capacity, then) the request launched
    calls = [c["outcome"] for c in local.faults.calls]
    assert calls == (["no-capacity", "launched"] if spot_exhausted else ["launched"])


def test_no_capacity_anywhere_deletes_the_claim_and_requeues_its_pods(local: LocalNodeflow) -> None:
    keys = pending(local, "batch", 2, cpu="1", memory="1Gi")
    local.send_pending(["default/batch"])
    original = local.dispatch.handlers[local.function_name("launch")]

    def everything_exhausted(event: Any, context: Any) -> Any:
        claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", event["nodeClaim"])
        types = next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == wk.LABEL_INSTANCE_TYPE)
        local.faults.exhaust((t, z) for t in types for z in local.world.subnets)
        return original(event, context)

    local.dispatch.register(local.function_name("launch"), everything_exhausted)
    result = local.provision()["result"]
    done = local.wait_for_executions()
    assert [d["status"] for d in done] == ["FAILED"] * len(result["nodeClaimsCreated"])
    assert claims(local) == []
    assert live_instances(local) == []
    assert events(local, "InsufficientCapacityError")
    requeued = local.receive_batch()
    assert requeued
    body = json.loads(requeued[0]["body"])
    assert body["detail-type"] == "NodeClaim Deleted"
    assert sorted(body["detail"]["pods"]) == keys
    trace = local.trace(done[0]["executionArn"])
    assert [v.name for v in trace.states][-2:] == ["CleanUp", "LaunchFailed"]


def test_ec2_throttling_is_retried_without_a_second_instance(make_local: Callable[..., LocalNodeflow]) -> None:
    local = make_local(env={"AWS_MAX_ATTEMPTS": "1"})  # no botocore retries: the workflow's Retry must act
    pending(local, "web", 1)
    local.faults.throttle_next = 2
    local.send_pending(["default/web"])
    local.provision()
    done = local.wait_for_executions()
    assert [d["status"] for d in done] == ["SUCCEEDED"]
    assert len(live_instances(local)) == 1
    assert [c["outcome"] for c in local.faults.calls] == ["throttled", "throttled", "launched"]
    trace = local.trace(done[0]["executionArn"])
    launch = next(v for v in trace.states if v.name == "Launch")
    assert [a.error for a in launch.attempts][:2] == ["Transient", "Transient"]


def test_node_that_never_registers_is_terminated_after_the_ttl(make_local: Callable[..., LocalNodeflow]) -> None:
    local = make_local(env={"REGISTRATION_TTL_SECONDS": "1"}, kubelet_skip=lambda claim: True, wait_scale=0.01)
    pending(local, "web", 1)
    local.send_pending(["default/web"])
    local.provision()
    done = local.wait_for_executions(timeout=30)
    assert [d["status"] for d in done] == ["FAILED"]
    assert done[0].get("error") == "RegistrationTimeout"
    assert claims(local) == []
    assert live_instances(local) == []
    assert nodes(local) == []
    assert events(local, "RegistrationTimeout")


@pytest.mark.parametrize("step", ["register", "initialize"])
def test_a_handler_raising_mid_flow_cleans_up(make_local: Callable[..., LocalNodeflow], step: str) -> None:
    # The node stays not Ready for a while, so Register (which initializes a node already Ready) cannot skip the
    # Initialize step on a slow machine.
    local = make_local(kubelet_ready_after=60.0)
    name = local.function_name(step)
    local.dispatch.register(name, flaky(local.dispatch.handlers[name], times=100))
    pending(local, "web", 1)
    local.send_pending(["default/web"])
    local.provision()
    done = local.wait_for_executions()
    assert [d["status"] for d in done] == ["FAILED"]
    assert claims(local) == []
    assert live_instances(local) == []
    assert nodes(local) == []  # the Node goes too, found by providerID when status.nodeName was never written
    assert events(local, "LaunchFailed")


def test_a_transient_handler_error_is_retried(make_local: Callable[..., LocalNodeflow]) -> None:
    from nodeflow.lifecycle.errors import Transient

    local = make_local()
    name = local.function_name("register")
    local.dispatch.register(name, flaky(local.dispatch.handlers[name], times=1, error=lambda: Transient("api 503")))
    pending(local, "web", 1)
    local.send_pending(["default/web"])
    local.provision()
    done = local.wait_for_executions()
    assert [d["status"] for d in done] == ["SUCCEEDED"]
    assert len(live_instances(local)) == 1


def test_garbage_collection(local: LocalNodeflow) -> None:
    from datetime import timedelta

    pending(local, "web", 1)
    local.send_pending(["default/web"])
    local.provision()
    local.wait_for_executions()
    (claim,) = claims(local)
    claimed = claim["status"]["providerID"].rsplit("/", 1)[-1]
    # a leaked instance: tagged for the cluster, no NodeClaim
    ec2 = local.clients.ec2
    leaked = local.run_instance(
        {
            "kubernetes.io/cluster/demo": "owned",
            "karpenter.sh/nodepool": "default",
            "karpenter.sh/nodeclaim": "default-gone1",
        }
    )
    rt = runtime.runtime()
    young = local.collect_garbage()
    assert young["terminatedInstances"] == []  # within the 30 s grace
    real_clock = rt.clock
    rt.clock = lambda: real_clock() + timedelta(seconds=31)
    old = local.collect_garbage()
    assert old["terminatedInstances"] == [leaked]
    assert {i["InstanceId"] for i in live_instances(local)} == {claimed}
    # the claimed instance disappears under the NodeClaim
    ec2.terminate_instances(InstanceIds=[claimed])
    gone = local.collect_garbage()
    assert gone["deletedNodeClaims"] == [claim["metadata"]["name"]]
    assert claims(local) == []
    assert nodes(local) == []


def test_unreadable_messages_are_dropped_and_the_rest_provisions(local: LocalNodeflow) -> None:
    pending(local, "web", 2)
    bad = [{"messageId": "m-bad-1", "body": "not json"}, {"messageId": "m-bad-2", "body": "[1, 2]"}]
    only_bad = local.provision(bad)
    assert only_bad["batchItemFailures"] == []
    assert "result" not in only_bad  # nothing provisioned from garbage
    assert claims(local) == []
    local.send_pending(["default/web"])
    mixed = local.provision([*bad, *local.receive_batch()])
    assert mixed["batchItemFailures"] == []
    assert mixed["result"]["nodeClaimsCreated"]
    local.wait_for_executions()
    assert len(live_instances(local)) == len(mixed["result"]["nodeClaimsCreated"])


def test_a_bad_step_input_fails_the_execution_with_the_field_named(local: LocalNodeflow) -> None:
    with pytest.raises(RuntimeError, match="nodeClaim"):
        local.invoke("launch", {"nodeClaim": "Bad_Name"})
    assert live_instances(local) == []


def test_a_500_on_nodeclaim_create_is_redelivered_and_provisions_once(local: LocalNodeflow) -> None:
    """Through the control plane's fault proxy: the API server 'fails' the first NodeClaim create with a 500; the
    batch fails, SQS redelivers it, and the second run creates each NodeClaim once; the pods end up Running."""
    pending(local, "web", 2)
    local.send_pending(["default/web"])
    batch = local.receive_batch()
    injected: list[str] = []

    def first_create_fails(method: str, path: str, query: dict[str, str]) -> Fault | None:
        if method == "POST" and path == "/apis/karpenter.sh/v1/nodeclaims" and not injected:
            injected.append(path)
            return Fault.internal()
        return None

    local.kube_server.before_request = first_create_fails
    with pytest.raises(RuntimeError, match="etcdserver: request timed out"):
        local.provision(batch)
    assert claims(local) == []
    result = local.provision(batch)["result"]  # the redelivery
    done = local.wait_for_executions()
    assert [d["status"] for d in done] == ["SUCCEEDED"] * len(result["nodeClaimsCreated"])
    assert len(claims(local)) == len(result["nodeClaimsCreated"]) == len(live_instances(local))
    creates = [e for e in local.kube_server.exchanges if e.method == "POST" and e.path == injected[0]]
    assert [(e.status, e.injected) for e in creates] == [(500, True)] + [(201, False)] * len(claims(local))
    running(local.kube_server, "web", 2)
