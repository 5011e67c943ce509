"""infra/cluster/controller-rbac.yaml against what the handlers really call.

The sandbox (``LocalNodeflow``, RBAC on by default) runs every handler in-process against the real control plane
(kube-apiserver with RBAC, the install's ClusterRoles applied; the controllers and kube-scheduler running): each
invocation impersonates its function's groups (``infra.cluster_rbac``) through real impersonation headers, and the
handlers' own token may only impersonate, so a request made outside an invocation (a thread that did not copy
the context, code outside any handler) is denied by the real authorizer as well. Any denial fails the test
(``LocalNodeflow.stop``). What each request was authorized as is read from the API server's audit log
(``sandbox.controlplane.audit``).

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

from infra.cluster_rbac import CONTROLLER_RBAC, FUNCTION_GROUPS
from nodeflow.api import labels as wk
from nodeflow.handlers import runtime
from nodeflow.kube.client import NODES, PODS, KubeClient, Resource
from nodeflow.kube.errors import Forbidden
from sandbox.controlplane.audit import AuditedRequest, AuditLog, Grant, unused_grants
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.faults import flaky
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution
from tests.fixtures.aws_events import REBALANCE, SPOT, variant
from tests.functional.conftest import aws_env, control_plane, real_kube, real_kube_server, shared_clients
from tests.functional.ingress.conftest import event as agent_event
from tests.functional.ingress.conftest import post
from tests.functional.lifecycle.conftest import make_local
from tests.functional.termination.conftest import Launched
from tests.realk8s.fixtures import audit_log
from tests.realk8s.workloads import replica_set, running, unschedulable

__all__ = ["audit_log", "aws_env", "control_plane", "make_local", "real_kube", "real_kube_server", "shared_clients"]

REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)

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


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


def _admin(local: LocalNodeflow) -> KubeClient:
    return KubeClient(local.kube_server.api_client())


def _launch(local: LocalNodeflow, app: str, replicas: int = 1, **spec: Any) -> Launched:
    """A ReplicaSet of ``replicas`` pods of ``app`` that kube-scheduler found no node for, provisioned through the
    normal path; waits until kube-scheduler bound them to the one new node and they run."""
    local.apply([replica_set(app, replicas, cpu="500m", memory="512Mi", **spec)])
    keys = unschedulable(local.kube_server, app, replicas)
    local.send_pending(keys)
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert len(created) == 1, created
    done = local.wait_for_executions()
    assert [d["status"] for d in done if d["name"] == created[0]] == ["SUCCEEDED"]
    claim = local.kube_server.get("karpenter.sh/v1", "NodeClaim", created[0])
    node = claim["status"]["nodeName"]
    pods = running(local.kube_server, app, replicas, timeout=60)
    assert {p["spec"]["nodeName"] for p in pods} == {node}
    return Launched(
        created[0], node, claim["status"]["providerID"].rsplit("/", 1)[-1], [p["metadata"]["name"] for p in pods]
    )


def _remove(local: LocalNodeflow, app: str) -> None:
    """The workload ``app`` goes: its ReplicaSet, then its pods at once (a kubelet may be gone to confirm)."""
    admin = local.kube_server.kube
    admin.delete(REPLICA_SETS, replica_set(app, 1)["metadata"]["name"], "default", propagation_policy="Orphan")
    for p in local.kube_server.list_items("v1", "Pod", "default", label_selector=f"app={app}"):
        admin.delete(PODS, p["metadata"]["name"], "default", grace_period_seconds=0)


def _volume_agent(node: str) -> list[dict[str, Any]]:
    """A DaemonSet's pod on ``node`` (it tolerates every taint) using the PVC ``logs`` bound to ``pv-logs``, and a
    CSI VolumeAttachment of it to the node."""
    labels = {"app": "log-agent"}
    container = {"name": "agent", "image": "agent:1", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "pv-logs"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123456789abcdef0"},
                "claimRef": {"namespace": "default", "name": "logs"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "logs", "namespace": "default"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": "pv-logs",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "log-agent", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [container],
                        "volumes": [{"name": "logs", "persistentVolumeClaim": {"claimName": "logs"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "VolumeAttachment",
            "metadata": {"name": "csi-pv-logs"},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": {"persistentVolumeName": "pv-logs"}},
        },
    ]


def _settle(local: LocalNodeflow, timeout: float = 90.0) -> list[dict[str, Any]]:
    """Wait for every execution of every workflow; their final descriptions."""
    out = []
    for arn in (local.launch_arn, local.replace_arn, local.terminate_arn):
        for e in local.clients.sfn.list_executions(stateMachineArn=arn)["executions"]:
            out.append(wait_for_execution(local.clients.sfn, e["executionArn"], timeout=timeout))
    return out


def _key(grant: Grant) -> tuple[str, str, str, str]:
    """(group, API group, resource, verb) of a grant to a Group."""
    return (grant.subject.split("/", 1)[1], grant.api_group, grant.resource, grant.verb)


def _handler_requests(audit: AuditLog, since: int, local: LocalNodeflow) -> list[AuditedRequest]:
    prefix = local.function_name("")
    return [r for r in audit.requests(since) if r.user.startswith(prefix)]


# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def local(make_local: Callable[..., LocalNodeflow]) -> Iterator[LocalNodeflow]:
    local = make_local()
    yield local
    _settle(local)


def test_the_rbac_grants_what_a_whole_scenario_uses_and_nothing_more(local: LocalNodeflow, audit_log: AuditLog) -> None:
    assert local.rbac  # the sandbox enforces RBAC by default
    since = audit_log.mark()
    admin = _admin(local)

    # --- a launch that fails after registration: the CleanUp step deletes the NodeClaim and its Node --------------
    # The Node stays not Ready meanwhile, so Register (which initializes a node already Ready) cannot skip the
    # Initialize step (the simulated kubelets report Ready at once otherwise).
    local.kubelet.ready_after = 60.0
    initialize = local.function_name("initialize")
    original = local.dispatch.handlers[initialize]
    local.dispatch.register(initialize, flaky(original, times=100))
    local.apply([replica_set("fail", 1, cpu="500m", memory="512Mi")])
    local.send_pending(unschedulable(local.kube_server, "fail", 1))
    local.provision()
    (failed,) = local.wait_for_executions()
    assert failed["status"] == "FAILED"
    assert local.kube_server.objects("karpenter.sh/v1", "NodeClaim") == []
    assert local.kube_server.objects("v1", "Node") == []
    local.dispatch.register(initialize, original)
    _remove(local, "fail")

    # --- provisioning, launch, registration, initialization; then gc finds the instance gone -----------------------
    local.kubelet.ready_after = 3.0  # this time the Initialize step runs, and waits for Ready
    gone = _launch(local, "gone", 1)
    local.kubelet.ready_after = 0.0
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
    _remove(local, "gone")

    # --- interruptions: a kubectl-deleted Node (the agent's Node Deleting) and a spot interruption -----------------
    web = _launch(local, "web", 1)
    # gc lists the pods (a NodeClaim carries nominations) and prunes the one of the pod now bound to its node
    assert local.collect_garbage()["nominationsPruned"] == [web.claim]
    # a DaemonSet pod that stays (it tolerates the disrupted taint) with a volume: its attachment is not waited for
    local.apply(_volume_agent(web.node))
    running(local.kube_server, "log-agent", 1)
    # a do-not-disrupt pod on a NodeClaim whose terminationGracePeriod is over at once: deleted, not evicted
    batch = _launch(local, "batch", 1, affinity=_away_from("web"))
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
    for app in ("web", "batch"):
        _remove(local, app)

    # --- a disruption round: an underused node is replaced by a cheaper one ----------------------------------------
    _launch(local, "web2", 4, affinity=WEB2_TOGETHER, nodeSelector={"karpenter.sh/capacity-type": "on-demand"})
    admin.patch(
        REPLICA_SETS, replica_set("web2", 1)["metadata"]["name"], {"spec": {"replicas": 1}}, namespace="default"
    )
    running(local.kube_server, "web2", 1)  # scaled down to one replica: the ReplicaSet controller deleted three
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
    assert local.kube_server.denied() == []
    requests = _handler_requests(audit_log, since, local)
    assert {r.user for r in requests} == {local.function_name(f) for f in FUNCTION_GROUPS}  # every function took part
    granted = {_key(g): g.role for g in unused_grants([CONTROLLER_RBAC], [])}
    never = {_key(g) for g in unused_grants([CONTROLLER_RBAC], requests)}
    unused = {k: granted[k] for k in never if k not in NOT_IN_THE_SCENARIO}
    assert unused == {}, "granted but never used (remove them, or say why in NOT_IN_THE_SCENARIO):\n" + "\n".join(
        f"  {k} ({role})" for k, role in sorted(unused.items())
    )
    used = set(granted) - never
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
    assert denied.impersonated == ""  # the handlers' own token, which may only impersonate
    assert 'User "nodeflow-test-impersonator" cannot list resource "nodes"' in denied.message
    local.kube_server.enable_rbac()  # seen: do not fail the test at teardown


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
    assert [d.impersonated for d in local.kube_server.denied()] == [""]
    local.kube_server.enable_rbac()


def test_a_function_calling_outside_its_rbac_fails_the_test(make_local: Callable[..., LocalNodeflow]) -> None:
    """The initialize step has no business deleting pods: the API server says 403 (a real Status), and even if
    the handler swallowed the error, stopping the sandbox fails."""
    local = make_local()
    victim = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "victim", "namespace": "default"},
        "spec": {"nodeName": "some-node", "containers": [{"name": "app", "image": "app:1"}]},
    }
    local.apply([victim])
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
    with pytest.raises(
        PermissionError, match=r"DELETE /api/v1/namespaces/default/pods/victim as nodeflow-demo-initialize"
    ):
        local.stop()
    local.kube_server.enable_rbac()  # the fixture stops it again


def test_rbac_can_be_turned_off_for_a_sandbox(make_local: Callable[..., LocalNodeflow]) -> None:
    local = make_local(rbac=False)
    _handlers_client().list_items(NODES)  # the admin's token: no identity needed, nothing denied
    assert local.kube_server.denied() == []
