"""The fault matrix: each scenario injects one fault into the local world (moto with the real workflows, the real
control plane with kube-scheduler, its controllers and simulated kubelets, the webhook behind its Function URL),
lets nodeflow recover the way it would in AWS (SQS redelivery, the scheduled garbage collection, the next batch),
and then ONE shared check (``invariants.check_world``) must find no instance without its NodeClaim, no NodeClaim
without its Node, no stranded pod, no terminate execution over its history bound, no execution still running, and a
disruption round that still runs.

Behaviours 1-9 of issue 15 each have a scenario, and so do: insufficient capacity on the cheapest offerings,
CreateFleet throttling, a step Lambda raising mid-launch, a node that never registers, 500/409/429 from the API
server on NodeClaim create, slow answers and a dropped connection from it, a pod under two PodDisruptionBudgets
(the eviction API answers 500), the same batch three times and concurrently, and a webhook outage. The API
server's faults are injected by the fault proxy in front of the real API server (``sandbox.controlplane.proxy``);
the pods are real ReplicaSets' that kube-scheduler found no node for.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.handlers import runtime
from sandbox.controlplane.facade import wait_for
from sandbox.controlplane.proxy import Delay, Drop, Fault
from sandbox.faults import flaky
from sandbox.nodeflow import LocalNodeflow
from tests.functional.faults.invariants import check_world, settle
from tests.functional.ingress.conftest import event, post
from tests.functional.lifecycle.test_broken_resources import _broken_class, _ghost, _pool
from tests.realk8s.launched import launch_node, pending_workload
from tests.realk8s.workloads import replica_set, unschedulable

Make = Callable[..., LocalNodeflow]
CLAIMS = ("karpenter.sh/v1", "NodeClaim")


def _claims(local: LocalNodeflow) -> list[dict[str, Any]]:
    return local.kube_server.objects(*CLAIMS)


def _later(seconds: float) -> None:
    rt = runtime.runtime()
    rt.clock = lambda: datetime.now(UTC) + timedelta(seconds=seconds)


def _provision_all(local: LocalNodeflow, rounds: int = 5) -> None:
    """Run the provisioner on whatever is queued (requeued pods included) until the queue is empty."""
    for _ in range(rounds):
        batch = local.receive_batch()
        if not batch:
            return
        local.provision(batch)
        settle(local, timeout=30)


def _web(local: LocalNodeflow, replicas: int = 2, app: str = "web") -> list[str]:
    """ReplicaSet ``app``'s pods, unschedulable, reported to the provisioning queue; their keys."""
    return pending_workload(local, app, replicas, "1", "1Gi")


def _unreported(local: LocalNodeflow, app: str) -> str:
    """One pod of ReplicaSet ``app``, unschedulable, not reported yet (the webhook will be told); its name."""
    local.apply([replica_set(app, 1, "1", "1Gi")])
    (key,) = unschedulable(local.kube_server, app, 1)
    return key.split("/", 1)[1]


# --- behaviours 1-9 --------------------------------------------------------------------------------------------


def future_event_time(make: Make) -> LocalNodeflow:
    """1: an agent event dated year 9999 goes through the webhook and the disruption queue."""
    local = make()
    node = launch_node(local, "web")
    claim = node.claim
    url = local.start_webhook()
    e = event("PodBound", name=node.pods[0], nodeName=node.node)
    e["time"] = "9999-12-31T23:59:59Z"
    assert post(url.url, {"cluster": "demo", "events": [e]}).status == 202
    records = [
        {"messageId": m["MessageId"], "body": m["Body"]}
        for m in wait_for("the event on the disruption queue", lambda: local.queue_messages("disruption"))
    ]
    result = local.invoke("disruption", {"Records": records})["result"]
    assert result["podEventTimers"] == [claim]
    stored = local.kube_server.get(*CLAIMS, claim)["status"]["lastPodEventTime"]
    assert datetime.fromisoformat(stored.replace("Z", "+00:00")) <= datetime.now(UTC)
    return local


def node_class_not_ready(make: Make) -> LocalNodeflow:
    """2: a weight-100 NodePool on an EC2NodeClass whose subnets resolve to nothing."""
    local = make()
    local.apply([_broken_class(), _pool("preferred", "broken", weight=100)])
    _web(local)
    for _ in range(3):
        local.provision()
        local.send_pending(["default/web"])
    assert {c["metadata"]["labels"][wk.LABEL_NODEPOOL] for c in _claims(local)} == {"default"}
    return local


def launch_and_cleanup_fail(make: Make) -> LocalNodeflow:
    """3: Register fails after the instance launched, and CleanUp fails too; garbage collection finishes it."""
    local = make()
    names = [local.function_name(s) for s in ("register", "cleanup")]
    originals = {n: local.dispatch.handlers[n] for n in names}
    for n, h in originals.items():
        local.dispatch.register(n, flaky(h, times=10_000))
    _web(local)
    local.provision()
    assert [d["status"] for d in local.wait_for_executions()] == ["FAILED"]
    for n, h in originals.items():
        local.dispatch.register(n, h)
    _later(31)
    assert len(local.collect_garbage()["abandonedNodeClaims"]) == 1
    _provision_all(local)
    return local


def node_left_behind(make: Make) -> LocalNodeflow:
    """4: a Node without a NodeClaim, unregistered and Ready=Unknown, its instance gone."""
    local = make()
    _ghost(local, "ip-10-0-9-1.ec2.internal")
    _web(local)
    assert local.provision()["result"]["nodeClaimsCreated"]
    settle(local)
    _later(31)
    assert local.collect_garbage()["deletedNodes"] == ["ip-10-0-9-1.ec2.internal"]
    return local


def malformed_webhook_input(make: Make) -> LocalNodeflow:
    """5: hostile bodies and headers are 4xx with nothing enqueued; a good request still gets through."""
    local = make()
    url = local.start_webhook().url
    good = event("PodUnschedulable", name="web-7d4b9c-00000")
    deep = b"[" * 5000 + b'"x"' + b"]" * 5000  # deeper than the JSON parser's recursion limit
    spec_marker = json.dumps({"cluster": "demo", "events": [{**good, "object": {**good["object"], "spec": "@@"}}]})
    bodies: list[bytes] = [
        spec_marker.encode().replace(b'"@@"', deep),
        json.dumps({"cluster": "demo", "events": [{**good, "object": {**good["object"], "uid": "a\u0000b"}}]}).encode(),
        b'{"cluster": "demo", "events": [{"id": "' + b"a" * 20 + b'", "kind": "PodBound", "time": NaN}]}',
        json.dumps(
            {"cluster": "demo", "events": [{**good, "time": "\uff12\uff10\uff12\uff16-01-01T00:00:00Z"}]}
        ).encode(),
        b'{"cluster": "demo", "events": [{"generation": 1e999}]}',
        b"\xff\xfe not utf-8",
    ]
    for body in bodies:
        assert 400 <= post(url, body).status < 500, body[:80]
    assert post(url, b"{}", timestamp="\u00b2").status in (401, 403)  # type: ignore[arg-type]
    assert local.queue_messages("provisioning") == []
    good = event("PodUnschedulable", name=_unreported(local, "web"))
    assert post(url, {"cluster": "demo", "events": [good]}).status == 202
    _provision_all(local)
    return local


def drain_held_by_a_pdb(make: Make) -> LocalNodeflow:
    """6: a PodDisruptionBudget holds the drain across several execution hand-overs (the real eviction API answers
    429 with a DisruptionBudget cause), then, deleted, allows it."""
    local = make(env={"DRAIN_PASSES_PER_EXECUTION": "2"})
    claim = launch_node(local, "db").claim
    local.apply([_pdb("db", "db", minAvailable=1)])
    # the disruption controller's verdict (until it is computed the eviction API refuses anyway)
    wait_for("the PDB status", lambda: _pdb_allows(local, "db") == 0)
    local.terminate(claim, reason="Expired")
    wait_for(
        "two hand-overs", lambda: any(e["name"] == f"{claim}_c3" for e in local.terminate_executions()), timeout=60
    )
    assert local.instances(("running",))  # never terminated while the PDB holds
    refused = [e for e in local.kube_server.exchanges if e.path.endswith("/eviction") and e.status == 429]
    assert refused, "no eviction was refused"
    assert not any(e.injected for e in refused)
    local.kube_server.delete("policy/v1", "PodDisruptionBudget", "db")
    wait_for("the instance terminated", lambda: not local.instances(("pending", "running")), timeout=60)
    _requeue_evicted(local, "db")
    return local


def _requeue_evicted(local: LocalNodeflow, app: str) -> None:
    """The evicted pod came back from its ReplicaSet and kube-scheduler found no node for it: the agent reports it,
    and the provisioner gives it a node."""
    unschedulable(local.kube_server, app, 1)
    local.send_pending([f"default/{app}"])
    _provision_all(local)


def _pdb(name: str, app: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
    }


def _pdb_allows(local: LocalNodeflow, name: str) -> int | None:
    """The disruption controller's ``disruptionsAllowed`` for PodDisruptionBudget ``name`` (None until computed)."""
    status = local.kube_server.get("policy/v1", "PodDisruptionBudget", name).get("status") or {}
    return status.get("disruptionsAllowed") if status.get("observedGeneration") else None


def drain_held_by_two_pdbs(make: Make) -> LocalNodeflow:
    """A pod two PodDisruptionBudgets select, both allowing a disruption: the real eviction API answers 500 (it does
    not support more than one budget per pod) whatever they allow. The drain waits across hand-overs as for a
    budget that says no (Karpenter: "eviction does not support multiple PDBs"), not as for an outage; once one
    budget is deleted, the pod is evicted and the instance terminated."""
    local = make(env={"DRAIN_PASSES_PER_EXECUTION": "2"})
    claim = launch_node(local, "db").claim
    local.apply([_pdb("db-a", "db", maxUnavailable=1), _pdb("db-b", "db", maxUnavailable=1)])
    wait_for("both PDBs' status", lambda: _pdb_allows(local, "db-a") == 1 == _pdb_allows(local, "db-b"))
    local.terminate(claim, reason="Expired")
    wait_for(
        "two hand-overs", lambda: any(e["name"] == f"{claim}_c3" for e in local.terminate_executions()), timeout=60
    )
    assert local.instances(("running",))  # never terminated while the pod cannot be evicted
    answered = [e for e in local.kube_server.exchanges if e.path.endswith("/eviction")]
    assert {(e.status, e.injected) for e in answered} == {(500, False)}, [e.describe() for e in answered]
    local.kube_server.delete("policy/v1", "PodDisruptionBudget", "db-b")
    wait_for("the instance terminated", lambda: not local.instances(("pending", "running")), timeout=60)
    _requeue_evicted(local, "db")
    return local


def capacity_fallback_tokens(make: Make) -> LocalNodeflow:
    """7 and 'insufficient capacity on the cheapest offerings': the first CreateFleet finds its cheapest types out
    of capacity; the fallback is a new request (its own ClientToken), never IdempotentParameterMismatch."""
    local = make()
    exhausted: list[str] = []

    def before_fleet(asked: list[tuple[str, str]]) -> None:
        if not exhausted:
            exhausted.extend(dict.fromkeys(t for t, _ in asked).keys())
            exhausted[8:] = []
            local.faults.exhaust((t, z) for t in exhausted for z in local.world.subnets)

    local.faults.before = before_fleet
    _web(local, 1)
    local.provision()
    assert [d["status"] for d in local.wait_for_executions()] == ["SUCCEEDED"]
    outcomes = [c["outcome"] for c in local.faults.calls]
    assert "idempotent-mismatch" not in outcomes
    assert outcomes[-1] == "launched"
    assert _claims(local)[0]["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE] not in exhausted
    return local


def duplicate_instance(make: Make) -> LocalNodeflow:
    """8: a second instance tagged with a live NodeClaim whose providerID names another one."""
    local = make()
    _web(local, 1)
    local.provision()
    settle(local)
    (claim,) = _claims(local)
    extra = local.run_instance(
        {
            "kubernetes.io/cluster/demo": "owned",
            wk.LABEL_NODEPOOL: "default",
            wk.LABEL_NODECLAIM: claim["metadata"]["name"],
        }
    )
    _later(31)
    assert local.collect_garbage()["terminatedInstances"] == [extra]
    return local


def invalid_node_pool_and_missing_class(make: Make) -> LocalNodeflow:
    """9: an invalid NodePool and one whose EC2NodeClass is missing, both heavier than the working one."""
    local = make()
    invalid = _pool("invalid", "default", weight=100)
    invalid["spec"]["template"]["spec"]["requirements"].append(
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}
    )
    local.kube_server.store_bypassing_admission(invalid)  # the CRD's CEL rule refuses it on create
    local.apply([_pool("orphan", "missing", weight=90)])
    _web(local)
    local.provision()
    assert {c["metadata"]["labels"][wk.LABEL_NODEPOOL] for c in _claims(local)} == {"default"}
    return local


# --- the other faults ------------------------------------------------------------------------------------------


def create_fleet_throttled(make: Make) -> LocalNodeflow:
    local = make(env={"AWS_MAX_ATTEMPTS": "1"})  # no botocore retries: the workflow's Retry acts
    local.faults.throttle_next = 2
    _web(local, 1)
    local.provision()
    assert [d["status"] for d in local.wait_for_executions()] == ["SUCCEEDED"]
    assert [c["outcome"] for c in local.faults.calls][:2] == ["throttled", "throttled"]
    return local


def step_raises_mid_launch(make: Make) -> LocalNodeflow:
    """Initialize raises until the workflow gives up: CleanUp terminates the instance, the pods come back."""
    local = make(kubelet_ready_after=30.0)
    name = local.function_name("initialize")
    original = local.dispatch.handlers[name]
    local.dispatch.register(name, flaky(original, times=10_000))
    _web(local)
    local.provision()
    assert [d["status"] for d in local.wait_for_executions()] == ["FAILED"]
    local.dispatch.register(name, original)
    local.kubelet.ready_after = 0.0
    _provision_all(local)
    return local


def node_never_registers(make: Make) -> LocalNodeflow:
    """The first instance never becomes a Node: RegistrationTimeout, cleaned up, the pods launched again."""
    first: list[str] = []

    def skip(claim: str) -> bool:
        first.append(claim) if not first else None
        return claim == first[0]

    local = make(env={"REGISTRATION_TTL_SECONDS": "1"}, kubelet_skip=skip, wait_scale=0.01)
    _web(local, 1)
    local.provision()
    assert [d.get("error") for d in local.wait_for_executions(timeout=30)] == ["RegistrationTimeout"]
    _provision_all(local)
    return local


def _api_errors_on_create(code: int) -> Callable[[Make], LocalNodeflow]:
    def scenario(make: Make) -> LocalNodeflow:
        """The API server answers the first NodeClaim create with ``code`` (through the fault proxy): the batch
        fails (SQS redelivers it), the retry creates the NodeClaims once. A 429 is retried within the batch (after
        its Retry-After)."""
        local = make()
        hit: list[str] = []
        fault = {500: Fault.internal(), 409: Fault.conflict(), 429: Fault.too_many_requests()}[code]

        def fail_first(method: str, path: str, query: dict[str, str]) -> Fault | None:
            if method == "POST" and path.endswith("/nodeclaims") and not hit:
                hit.append(path)
                return fault
            return None

        local.kube_server.before_request = fail_first
        _web(local)
        batch = local.receive_batch()
        try:
            if code != 429:
                with pytest.raises(RuntimeError):
                    local.invoke("provisioner", {"Records": batch})
            local.provision(batch)  # the redelivery (429: the only delivery)
        finally:
            local.kube_server.before_request = None
        return local

    return scenario


def api_slow_answers(make: Make) -> LocalNodeflow:
    """Every read the provisioner and the launch workflow make answers a quarter of a second late: slower, the
    same NodeClaims."""
    local = make()

    def slow_reads(method: str, path: str, query: dict[str, str]) -> Delay | None:
        return Delay(0.25) if method == "GET" else None

    _web(local)
    since = len(local.kube_server.exchanges)
    local.kube_server.before_request = slow_reads
    try:
        local.provision()
        assert {d["status"] for d in local.wait_for_executions(timeout=120)} == {"SUCCEEDED"}
    finally:
        local.kube_server.before_request = None
    delayed = [e for e in local.kube_server.exchanges[since:] if e.method == "GET"]
    assert delayed, "no read went through the proxy"
    assert min(e.seconds for e in delayed) >= 0.25
    return local


def api_connection_dropped_on_create(make: Make) -> LocalNodeflow:
    """The connection of the first NodeClaim create is closed without an answer (a load balancer, a restarting
    server): the batch fails, SQS redelivers it, the NodeClaims are created once."""
    local = make()
    dropped: list[str] = []

    def drop_first(method: str, path: str, query: dict[str, str]) -> Drop | None:
        if method == "POST" and path.endswith("/nodeclaims") and not dropped:
            dropped.append(path)
            return Drop()
        return None

    _web(local)
    batch = local.receive_batch()
    local.kube_server.before_request = drop_first
    try:
        with pytest.raises(RuntimeError):
            local.invoke("provisioner", {"Records": batch})
        assert dropped
        local.provision(batch)  # the redelivery
    finally:
        local.kube_server.before_request = None
    return local


def same_batch_three_times_concurrently(make: Make) -> LocalNodeflow:
    local = make()
    _web(local, 4)
    batch = local.receive_batch()
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(local.invoke("provisioner", {"Records": batch})))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    local.provision(batch)  # and a third time, after
    settle(local)
    claims = _claims(local)
    assert len(local.instances()) == len(claims)
    return local


def webhook_outage(make: Make) -> LocalNodeflow:
    """The webhook answers 503 for a while (the agent retries): nothing is enqueued or lost."""
    local = make()
    url = local.start_webhook()
    e = event("PodUnschedulable", name=_unreported(local, "web"))
    url.outage(503)
    assert post(url.url, {"cluster": "demo", "events": [e]}).status == 503
    assert local.queue_messages("provisioning") == []
    url.recover()
    assert post(url.url, {"cluster": "demo", "events": [e]}).body["accepted"] == 1  # the agent's retry
    _provision_all(local)
    assert len(_claims(local)) == 1
    return local


SCENARIOS: dict[str, Callable[[Make], LocalNodeflow]] = {
    "1-future-event-time": future_event_time,
    "2-node-class-not-ready": node_class_not_ready,
    "3-launch-and-cleanup-fail": launch_and_cleanup_fail,
    "4-node-left-behind": node_left_behind,
    "5-malformed-webhook-input": malformed_webhook_input,
    "6-drain-held-by-a-pdb": drain_held_by_a_pdb,
    "drain-held-by-two-pdbs": drain_held_by_two_pdbs,
    "7-capacity-fallback-client-tokens": capacity_fallback_tokens,
    "8-duplicate-instance": duplicate_instance,
    "9-invalid-node-pool-missing-class": invalid_node_pool_and_missing_class,
    "create-fleet-throttled": create_fleet_throttled,
    "step-raises-mid-launch": step_raises_mid_launch,
    "node-never-registers": node_never_registers,
    "api-500-on-create": _api_errors_on_create(500),
    "api-409-on-create": _api_errors_on_create(409),
    "api-429-on-create": _api_errors_on_create(429),
    "api-slow-answers": api_slow_answers,
    "api-connection-dropped-on-create": api_connection_dropped_on_create,
    "same-batch-three-times-concurrently": same_batch_three_times_concurrently,
    "webhook-outage": webhook_outage,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fault_leaves_the_world_sound(make_local: Make, name: str) -> None:
    local = SCENARIOS[name](make_local)
    settle(local)
    runtime.runtime().clock = lambda: datetime.now(UTC)  # the round runs at the real time
    violations = check_world(local)
    settle(local)  # whatever the round started ends within the test
    assert violations == [], "\n".join(str(v) for v in violations)


def test_the_matrix_covers_every_behaviour_that_runs() -> None:
    """Behaviours 1-9 of issue 15 each have a scenario (10 is the deployment: tests/infra)."""
    numbered = sorted(int(n.split("-", 1)[0]) for n in SCENARIOS if n[0].isdigit())
    assert numbered == list(range(1, 10))
