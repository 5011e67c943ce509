"""infra/cluster/controller-rbac.yaml against what the handlers really call.

The sandbox (``LocalNodeflow``, RBAC on by default) runs every handler in-process against the test API server,
which enforces the file: each invocation impersonates its function's groups (``infra.cluster_rbac``), and the
handlers' own token may only impersonate, so a request made outside an invocation (a thread that did not copy
the context, code outside any handler) is denied as well. Any denial fails the test (``LocalNodeflow.stop``).

The scenario below runs the whole life of nodes once - provisioning, launch, registration, initialization, a
failed launch and its cleanup, garbage collection, interruptions and a kubectl-deleted Node through the terminate
workflow with its drain (evictions, a pod deleted at the terminationGracePeriod deadline, volumes), a disruption
round that replaces a node, Events recorded twice by two containers - and then every (group, resource, verb) the
file grants must have been used by a function in that group, or be in ``NOT_IN_THE_SCENARIO`` with the reason it
is needed anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import yaml

from infra.cluster_rbac import CONTROLLER_RBAC, FUNCTION_GROUPS
from nodeflow.api import labels as wk
from nodeflow.handlers import runtime
from nodeflow.kube.client import NODES, PODS, KubeClient
from nodeflow.kube.errors import Forbidden
from sandbox.faults import flaky
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution
from tests.fixtures.aws_events import REBALANCE, SPOT, variant
from tests.functional.conftest import aws_env, kube_server
from tests.functional.ingress.conftest import event as agent_event
from tests.functional.ingress.conftest import post
from tests.functional.lifecycle.conftest import make_local, pending_pods
from tests.functional.termination.conftest import bound_pod, launch, volume_agent
from tests.kubeapi.rbac import Decision

__all__ = ["aws_env", "kube_server", "make_local"]

# (group, API group, resource, verb) granted but not used by the scenario -> why it is needed anyway.
NOT_IN_THE_SCENARIO: dict[tuple[str, str, str, str], str] = {
    ("nodeflow-provisioner", "karpenter.sh", "nodeclaims", "get"): (
        "create_node_claim reads a NodeClaim whose name is taken (a redelivered batch racing its first delivery) "
        "to tell the same claim from a clash"
    ),
    ("nodeflow-disruption", "karpenter.sh", "nodeclaims", "get"): (
        "create_node_claim reads a replacement whose name is taken (a retried round proposes the same names)"
    ),
    ("nodeflow-provisioner", "karpenter.sh", "nodeclaims", "patch"): (
        "when an EC2NodeClass's ec2nodeclass-hash-version changes (a new hash algorithm, or a class nodeflow had not "
        "hashed yet), its NodeClaims are re-stamped with the new hash; in the scenario the provisioner hashes the "
        "class before any NodeClaim exists"
    ),
    ("nodeflow-launch", "karpenter.k8s.aws", "ec2nodeclasses/status", "patch"): (
        "the Launch step writes what it resolved when it differs from the status the provisioner or gc wrote "
        "(the class changed between them); in the scenario the provisioner resolved it first"
    ),
    ("nodeflow-nodeclasses", "karpenter.sh", "nodepools/status", "patch"): (
        "gc writes a NodePool's status when it differs from what was last written (a class turning not Ready, a "
        "node gone outside the workflows); in the scenario the register and finalize steps usually kept the counts "
        "current, but a gc snapshot taken while a step is between its change and its recount sees them stale"
    ),
    ("nodeflow-snapshot", "karpenter.sh", "nodeoverlays/status", "patch"): (
        "the provisioner and the disruption round write NodeOverlay conditions; the scenario has no NodeOverlay"
    ),
    ("nodeflow-drain", "", "nodes", "list"): (
        "the drain finds the Node by providerID when the NodeClaim has no nodeName or names another Node"
    ),
    ("nodeflow-replace", "", "nodes", "get"): "a rollback un-taints the candidates (a replacement never initialized)",
    ("nodeflow-replace", "", "nodes", "patch"): "a rollback un-taints the candidates (a replacement never initialized)",
}

# Entries above that the scenario may also use, depending on timing (not stale when used).
SOMETIMES_USED = {("nodeflow-nodeclasses", "karpenter.sh", "nodepools/status", "patch")}

WEB2_TOGETHER = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web2"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def _away_from(*apps: str) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": list(apps)}]},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


def _admin(local: LocalNodeflow) -> KubeClient:
    return KubeClient(local.kube_server.api_client())


def _remove_pods(local: LocalNodeflow, prefix: str) -> None:
    for p in local.kube_server.objects("v1", "Pod", "default"):
        if p["metadata"]["name"].startswith(prefix):
            local.kube_server.cluster.delete(
                local.kube_server.resource_for("v1", "Pod"), "default", p["metadata"]["name"]
            )


def _settle(local: LocalNodeflow, timeout: float = 90.0) -> list[dict[str, Any]]:
    """Wait for every execution of every workflow; their final descriptions."""
    out = []
    for arn in (local.launch_arn, local.replace_arn, local.terminate_arn):
        for e in local.clients.sfn.list_executions(stateMachineArn=arn)["executions"]:
            out.append(wait_for_execution(local.clients.sfn, e["executionArn"], timeout=timeout))
    return out


def _granted() -> dict[tuple[str, str, str, str], tuple[str, int]]:
    """(group, API group, resource, verb) -> (role, rule index), for every rule of the file."""
    docs = [d for d in yaml.safe_load_all(CONTROLLER_RBAC.read_text()) if d]
    roles = {}
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role"):
            ns = d["metadata"].get("namespace")
            key = f"{d['kind']}/{ns + '/' if ns else ''}{d['metadata']['name']}"
            roles[key] = d.get("rules") or []
    out: dict[tuple[str, str, str, str], tuple[str, int]] = {}
    for d in docs:
        if d["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        ns = d["metadata"].get("namespace")
        ref = d["roleRef"]
        role = f"{ref['kind']}/{ns + '/' if ref['kind'] == 'Role' else ''}{ref['name']}"
        for subject in d["subjects"]:
            for i, rule in enumerate(roles[role]):
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        for v in rule["verbs"]:
                            out[(subject["name"], g, r, v)] = (role, i)
    return out


def _used(decisions: list[Decision]) -> set[tuple[str, str, str, str]]:
    """(group, API group, resource, verb) that allowed a request."""
    out = set()
    for d in decisions:
        if not d.allowed:
            continue
        for grant in d.grants:
            group = grant.subject.split("/", 1)[1]
            out.add((group, d.attrs.api_group, d.attrs.full_resource, d.attrs.verb))
    return out


# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def local(make_local: Callable[..., LocalNodeflow]) -> Iterator[LocalNodeflow]:
    local = make_local()
    yield local
    _settle(local)


def test_the_rbac_grants_what_a_whole_scenario_uses_and_nothing_more(local: LocalNodeflow) -> None:
    assert local.kube_server.rbac is not None  # the sandbox enforces RBAC by default
    admin = _admin(local)

    # --- a launch that fails after registration: the CleanUp step deletes the NodeClaim and its Node --------------
    initialize = local.function_name("initialize")
    original = local.dispatch.handlers[initialize]
    local.dispatch.register(initialize, flaky(original, times=100))
    local.apply(pending_pods("fail", 1, cpu="500m", memory="512Mi"))
    local.send_pending(["default/fail"])
    local.provision()
    (failed,) = local.wait_for_executions()
    assert failed["status"] == "FAILED"
    assert local.kube_server.objects("karpenter.sh/v1", "NodeClaim") == []
    assert local.kube_server.objects("v1", "Node") == []
    local.dispatch.register(initialize, original)
    _remove_pods(local, "fail")

    # --- provisioning, launch, registration, initialization; then gc finds the instance gone -----------------------
    gone = launch(local, "gone", 1)
    rt = runtime.runtime()
    real_clock = rt.clock
    rt.clock = lambda: real_clock() + timedelta(seconds=31)  # past gc's grace period
    local.clients.ec2.terminate_instances(InstanceIds=[gone.instance_id])
    # ... and resolves the EC2NodeClass again: a security group it selects appeared, so its status changes
    vpc = local.clients.ec2.describe_subnets(SubnetIds=[next(iter(local.world.subnets.values()))])["Subnets"][0]
    local.clients.ec2.create_security_group(
        GroupName="nodes-extra",
        Description="selected by the EC2NodeClass",
        VpcId=vpc["VpcId"],
        TagSpecifications=[
            {"ResourceType": "security-group", "Tags": [{"Key": "karpenter.sh/discovery", "Value": "demo"}]}
        ],
    )
    assert local.collect_garbage()["deletedNodeClaims"] == [gone.claim]
    rt.clock = real_clock
    assert local.kube_server.objects("v1", "Node") == []
    _remove_pods(local, "gone")

    # --- interruptions: a kubectl-deleted Node (the agent's Node Deleting) and a spot interruption -----------------
    web = launch(local, "web", 1)
    # gc lists the pods (a NodeClaim carries nominations) and prunes the one of the pod now bound to its node
    assert local.collect_garbage()["nominationsPruned"] == [web.claim]
    # a DaemonSet pod that stays (it tolerates the disrupted taint) with a volume: its attachment is not waited for
    local.apply(volume_agent(web.node))
    # a do-not-disrupt pod on a NodeClaim whose terminationGracePeriod is over at once: deleted, not evicted
    batch = launch(local, "batch", 1, affinity=_away_from("web"))
    admin.patch(
        PODS, batch.pods[0], {"metadata": {"annotations": {wk.ANNOTATION_DO_NOT_DISRUPT: "true"}}}, namespace="default"
    )
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", batch.claim)
    claim["spec"]["terminationGracePeriod"] = "1s"
    local.kube_server.store_bypassing_admission(claim)  # a NodeClaim's spec is immutable (CEL): written as etcd would

    admin.delete(NODES, web.node)  # kubectl delete node: its finalizer keeps it
    reply = post(
        local.start_webhook().url,
        {"cluster": "demo", "events": [agent_event("NodeDeleting", name=web.node, nodePool="default")]},
    )
    assert reply.status == 202, reply
    local.send_aws_event(variant(SPOT, instance_id=batch.instance_id, detail={"instance-action": "terminate"}))
    handled = local.drain_interruption_queue()
    assert handled["batchItemFailures"] == []
    assert sorted(m["kind"] for m in handled["result"]["messages"]) == ["Deletion", "SpotInterruption"], handled
    done = local.wait_for_terminations()
    assert [d["status"] for d in done] == ["SUCCEEDED", "SUCCEEDED"], done
    assert local.kube_server.objects("karpenter.sh/v1", "NodeClaim") == []
    evicted = [p.split("/")[-2] for m, p, _ in local.kube_server.requests if m == "POST" and p.endswith("/eviction")]
    assert web.pods[0] in evicted
    assert batch.pods[0] not in evicted
    _remove_pods(local, "")

    # --- a disruption round: an underused node is replaced by a cheaper one ----------------------------------------
    old = launch(local, "web2", 4, affinity=WEB2_TOGETHER, nodeSelector={"karpenter.sh/capacity-type": "on-demand"})
    for name in sorted(old.pods)[1:]:  # scaled down to one replica
        local.kube_server.cluster.delete(local.kube_server.resource_for("v1", "Pod"), "default", name)
    rt = runtime.runtime()
    rt.clock = lambda: real_clock() + timedelta(minutes=5)  # consolidateAfter has passed
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["command"] is not None, result
    assert result["replacing"] is not None, result
    (replacement,) = result["replacing"]["replacements"]
    finished = _settle(local)
    assert {d["name"] for d in finished if d["status"] != "SUCCEEDED"} == {failed["name"]}, finished
    assert [c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")] == [replacement]

    # --- the same Event recorded by two containers: the second reads the first's and bumps it ---------------------
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", replacement)
    iid = claim["status"]["providerID"].rsplit("/", 1)[-1]
    for _ in range(2):
        runtime.reset()  # a new container: a new EventRecorder, which has not seen the Event
        local.send_aws_event(variant(REBALANCE, instance_id=iid))
        assert local.drain_interruption_queue()["batchItemFailures"] == []
    rebalance = [
        e for e in local.kube_server.objects("v1", "Event", "default") if e["reason"] == "RebalanceRecommendation"
    ]
    assert {e["count"] for e in rebalance} == {2}, rebalance

    # --- what was asked, and what the file grants -----------------------------------------------------------------
    decisions = local.kube_server.decisions.items()
    assert local.kube_server.denied() == []
    handlers = {d.user.name for d in decisions if d.user.name.startswith("nodeflow-demo-")}
    assert handlers == {local.function_name(f) for f in FUNCTION_GROUPS}, handlers  # every function took part
    granted = _granted()
    used = _used(decisions)
    unused = {k: role for k, role in granted.items() if k not in used and k not in NOT_IN_THE_SCENARIO}
    assert unused == {}, "granted but never used (remove them, or say why in NOT_IN_THE_SCENARIO):\n" + "\n".join(
        f"  {k} ({role} rule {i})" for k, (role, i) in sorted(unused.items())
    )
    stale = {k for k in NOT_IN_THE_SCENARIO if k not in granted or (k in used and k not in SOMETIMES_USED)}
    assert stale == set(), f"NOT_IN_THE_SCENARIO entries that are not granted, or are used now: {sorted(stale)}"


# ---------------------------------------------------------------------------------------------------------------
# Unattributed requests and requests outside a function's RBAC fail.


def _handlers_client() -> KubeClient:
    """The client the handlers use (the sandbox's kubeconfig: a token that may only impersonate)."""
    return runtime.runtime().kube


def test_a_request_made_outside_any_invocation_is_forbidden(local: LocalNodeflow) -> None:
    with pytest.raises(Forbidden) as caught:
        _handlers_client().list_items(NODES)
    assert caught.value.status == 403
    (denied,) = local.kube_server.denied()
    assert denied.user.name == "nodeflow-sandbox-lambda"
    assert denied.user.groups == ("system:authenticated",)
    local.kube_server.decisions.clear()  # seen: do not fail the test at teardown


def test_a_thread_started_by_a_handler_needs_the_invocations_context(local: LocalNodeflow) -> None:
    """A worker thread does not inherit the invocation's identity: its requests are denied, unless the work is
    run in a copy of the context (as the provisioner's Event writers do)."""
    import contextvars

    outcome: dict[str, Any] = {}
    register = local.function_name("register")

    def handler(event: Any, context: Any) -> Any:
        def plain() -> None:
            try:
                _handlers_client().list_items(NODES)
                outcome["plain"] = "allowed"
            except Forbidden:
                outcome["plain"] = "forbidden"

        def copied() -> None:
            _handlers_client().list_items(NODES)
            outcome["copied"] = "allowed"

        for target in (plain, contextvars.copy_context().run):
            args = (copied,) if target is not plain else ()
            t = threading.Thread(target=target, args=args)
            t.start()
            t.join()
        return {}

    local.dispatch.register(register, handler)
    local.invoke("register", {"nodeClaim": "x"})
    assert outcome == {"plain": "forbidden", "copied": "allowed"}
    assert [d.user.name for d in local.kube_server.denied()] == ["nodeflow-sandbox-lambda"]
    local.kube_server.decisions.clear()


def test_a_function_calling_outside_its_rbac_fails_the_test(make_local: Callable[..., LocalNodeflow]) -> None:
    """The initialize step has no business deleting pods: the API server says 403 (a real Status), and even if
    the handler swallowed the error, stopping the sandbox fails."""
    local = make_local()
    local.apply([bound_pod("victim", "some-node")])
    initialize = local.function_name("initialize")
    seen: dict[str, Any] = {}

    def overreaching(event: Any, context: Any) -> Any:
        try:
            _handlers_client().delete(PODS, "victim", "default")
        except Forbidden as exc:
            seen["error"] = exc
        return {}

    local.dispatch.register(initialize, overreaching)
    local.invoke("initialize", {"nodeClaim": "x"})
    error = seen["error"]
    assert error.status == 403
    assert error.reason == "Forbidden"
    assert str(error).startswith(
        'pods "victim" is forbidden: User "nodeflow-demo-initialize" cannot delete resource "pods" in API group "" '
        'in the namespace "default"'
    )
    assert local.kube_server.get("v1", "Pod", "victim", "default")  # still there
    with pytest.raises(PermissionError, match=r"DENIED: nodeflow-demo-initialize .*delete core/pods victim"):
        local.stop()
    local.kube_server.decisions.clear()  # the fixture stops it again


def test_rbac_can_be_turned_off_for_a_sandbox(make_local: Callable[..., LocalNodeflow]) -> None:
    local = make_local(rbac=False)
    assert local.kube_server.rbac is None
    _handlers_client().list_items(NODES)  # no identity needed, nothing recorded
    assert local.kube_server.decisions.items() == []
