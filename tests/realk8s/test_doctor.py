"""``python -m nodeflow doctor`` against the real control plane (tests/realk8s) and a stack deployed in moto
(tests/functional/doctor/stack.py): each Kubernetes-side check passed once and failed once through the readers of
nodeflow.doctor.kube_facts, then the command end to end (text and JSON, exit codes 0 / 1 / 2), in-process and as
a process of its own against a moto server."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from nodeflow.cli import _parser, main
from nodeflow.doctor import aws_facts, kube_facts
from nodeflow.doctor import checks as c
from nodeflow.doctor.checks import Status
from nodeflow.doctor_cli import run
from nodeflow.kube.client import EC2_NODE_CLASSES, NAMESPACES, NODE_CLAIMS, NODE_POOLS, PODS, KubeClient
from nodeflow.kube.errors import AlreadyExists, NotFound
from sandbox.aws import AwsWorld, Clients, build_world, moto_server
from sandbox.controlplane import KUBELET
from sandbox.kwok import SimulatedKubelets
from tests.functional.doctor.stack import Aws, DoctorStack, accepted, deploy, healthy_answers
from tests.functional.sandbox.test_kubelet import create_claim, launch
from tests.realk8s.fixtures import TestCluster
from tests.realk8s.test_kwok import register_as_nodeflow, wait_for

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:moto.cloudformation.parsing")

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("functions", ".", "agent"))}
DEPLOYMENTS = kube_facts.DEPLOYMENTS
LEASES = kube_facts.LEASES
CRDS = kube_facts.CRDS


@pytest.fixture
def stack(clients: Clients, world: AwsWorld) -> Iterator[DoctorStack]:
    deployed = deploy(clients, world)
    try:
        yield deployed
    finally:
        deployed.webhook.stop()


def agent_deployment(name: str = c.AGENT_DEPLOYMENT, **env: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    # the install labels namespace nodeflow pod-security restricted: the real API server refuses
                    # a pod without these (the ReplicaSet's FailedCreate)
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [
                        {
                            "name": "agent",
                            "image": "python:3.12.8-slim-bookworm",
                            "env": [{"name": k, "value": v} for k, v in env.items()],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


# --- each Kubernetes-side check, passed and failed --------------------------------------------------


def test_crds(cluster: TestCluster) -> None:
    kube = cluster.kube
    stack = c.StackInfo("Nodeflow-demo", "us-east-1", "demo")
    found = kube_facts.crds(kube)
    check = c.crds(found, kube_facts.EXPECTED_CRDS, stack)
    assert (check.status, check.detail) == (
        Status.OK,
        "5 CRDs established, serving karpenter.k8s.aws/v1, karpenter.sh/v1, karpenter.sh/v1alpha1, "
        "nodeflow.io/v1alpha1",
    )
    # A CRD serving a version nodeflow does not read, and one not installed (names of the test's own).
    group = f"{cluster.name('doctor')}.example.com"
    version = {"served": True, "schema": {"openAPIV3Schema": {"type": "object"}}}
    kube.create(
        CRDS,
        {
            "metadata": {"name": f"widgets.{group}"},
            "spec": {
                "group": group,
                "scope": "Cluster",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [
                    {"name": "v1", "storage": True, **version},
                    {"name": "v1beta1", "storage": False, **version},
                ],
            },
        },
    )
    name = f"widgets.{group}"
    wait_for("the CRD Established", lambda: kube_facts.crds(kube, {name: ("v1",)})[name].established)  # type: ignore[index]
    expected = {name: ("v1",), f"gadgets.{group}": ("v1",)}
    check = c.crds(kube_facts.crds(kube, expected), expected, stack)
    assert (check.status, check.detail) == (Status.FAIL, f"not installed: gadgets.{group}")
    expected = {name: ("v1",)}
    check = c.crds(kube_facts.crds(kube, expected), expected, stack)
    assert (check.status, check.detail) == (Status.FAIL, f"{name} serves v1, v1beta1, nodeflow reads v1")


def test_agent_running_fails_missing_unready_or_pointed_elsewhere(cluster: TestCluster) -> None:
    kube, ns = cluster.kube, cluster.namespace
    url = "https://abc.lambda-url.us-east-1.on.aws/"
    stack = c.StackInfo("Nodeflow-demo", "us-east-1", "demo", webhook_url=url)
    check = c.agent_running(kube_facts.agent(kube, namespace=ns), stack)
    assert (check.status, check.detail) == (Status.FAIL, "Deployment nodeflow/nodeflow-agent does not exist")
    kube.create(DEPLOYMENTS, agent_deployment(CLUSTER_NAME="demo", WEBHOOK_URL=url), namespace=ns)
    # No node: the real controllers make its pod, the real scheduler cannot place it.
    wait_for("its pod", lambda: kube.list_items(PODS, namespace=ns))
    facts = kube_facts.agent(kube, namespace=ns)
    assert facts == c.AgentFacts(True, 1, 0, {"CLUSTER_NAME": "demo", "WEBHOOK_URL": url})
    assert c.agent_running(facts, stack).status is Status.FAIL
    other = c.StackInfo("Nodeflow-prod", "us-east-1", "prod", webhook_url=url)
    check = c.agent_running(facts, other)
    assert (check.status, check.detail) == (
        Status.FAIL,
        "Deployment nodeflow/nodeflow-agent points elsewhere: CLUSTER_NAME='demo' (the stack's: 'prod')",
    )


def test_forwarding_is_judged_against_pods_the_agent_must_have_sent(cluster: TestCluster) -> None:
    kube, ns = cluster.kube, cluster.namespace
    kube.create(
        PODS,
        {
            "metadata": {"name": "web-1"},
            "spec": {
                "nodeSelector": {"doctor.example.com/nowhere": "true"},
                "containers": [{"name": "app", "image": "nginx"}],
            },
        },
        namespace=ns,
    )
    # (the earliest pending pod of the cluster: a previous test's namespace may still be emptied)
    activity = wait_for(
        "the scheduler's verdict",
        lambda: (a := kube_facts.activity(kube)).unschedulable_pod == f"{ns}/web-1" and a,  # type: ignore[union-attr]
    )
    assert isinstance(activity, c.ClusterActivity)
    assert activity.unschedulable_pod == f"{ns}/web-1"
    since = activity.unschedulable_since
    assert since is not None
    # Pending 11 minutes with nothing accepted since: the agent's resyncs did not get through.
    later = since + timedelta(minutes=11)
    check = c.agent_forwarding(c.Forwarding(since - timedelta(hours=1)), activity, later)
    assert check.status is Status.FAIL
    assert f"pod {ns}/web-1 unschedulable for 11 min" in check.detail
    check = c.agent_forwarding(c.Forwarding(since + timedelta(minutes=4)), activity, later)
    assert (check.status, check.detail) == (Status.OK, "last request accepted by the webhook 7 min ago")


def test_stuck_node_claims(cluster: TestCluster) -> None:
    kube = cluster.kube
    launching, deleting = cluster.name("general"), cluster.name("general")
    create_claim(kube, launching)
    create_claim(kube, deleting)
    kube.patch(NODE_CLAIMS, deleting, {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    kube.delete(NODE_CLAIMS, deleting)
    now = datetime.now(UTC)
    mine = [f for f in kube_facts.node_claims(kube) if f.name in (launching, deleting)]  # type: ignore[union-attr]
    assert c.stuck_node_claims(mine, now).status is Status.OK
    check = c.stuck_node_claims(mine, now + timedelta(minutes=21))
    assert (check.status, check.action) == (Status.FAIL, f"kubectl describe nodeclaim {launching}")
    assert "Launched not reported" in check.detail
    kube.patch(
        NODE_CLAIMS,
        launching,
        {
            "status": {
                "conditions": [
                    {
                        "type": t,
                        "status": "True",
                        "reason": t,
                        "message": "",
                        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }
                    for t in ("Launched", "Registered", "Initialized", "Ready")
                ]
            }
        },
        subresource="status",
    )
    mine = [f for f in kube_facts.node_claims(kube) if f.name in (launching, deleting)]  # type: ignore[union-attr]
    check = c.stuck_node_claims(mine, now + timedelta(minutes=21))
    assert check.status is Status.WARN  # only the one deleting that long is left
    assert check.action == f"kubectl describe nodeclaim {deleting}"


def test_a_karpenter_controller_holding_its_lease(cluster: TestCluster) -> None:
    kube, ns = cluster.kube, cluster.namespace
    scaled_down = agent_deployment("karpenter")
    scaled_down["spec"]["replicas"] = 0
    kube.create(DEPLOYMENTS, scaled_down, namespace=ns)
    now = datetime.now(UTC)
    found = kube_facts.karpenter(kube, now)
    assert c.karpenter(found).status is Status.OK
    assert found.evidence == (f"Deployment {ns}/karpenter: 0/0 ready",)  # type: ignore[union-attr]
    renewed = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    kube.create(
        LEASES,
        {
            "metadata": {"name": "karpenter-leader-election"},
            "spec": {"holderIdentity": "karpenter-6f8d7c-x2k8q_1b2c", "leaseDurationSeconds": 15, "renewTime": renewed},
        },
        namespace=ns,
    )
    check = c.karpenter(kube_facts.karpenter(kube, now + timedelta(seconds=5)))
    assert check.status is Status.FAIL
    assert f"Lease {ns}/karpenter-leader-election held by karpenter-6f8d7c-x2k8q_1b2c, renewed 5s ago" in check.detail
    # It stopped renewing: after the lease's duration nobody holds it.
    assert c.karpenter(kube_facts.karpenter(kube, now + timedelta(seconds=16))).status is Status.OK


def test_node_classes_and_node_pools_read_from_the_cluster(
    cluster: TestCluster, clients: Clients, stack: DoctorStack
) -> None:
    kube = cluster.kube
    aws = Aws(clients)
    found = aws_facts.read_stack(aws, stack.name, "us-east-1")
    classes, typo = cluster.name("default"), cluster.name("typo")
    for name, value in ((classes, "demo"), (typo, "dmeo")):
        kube.create(
            EC2_NODE_CLASSES,
            {
                "apiVersion": "karpenter.k8s.aws/v1",
                "kind": "EC2NodeClass",
                "metadata": {"name": name},
                "spec": {
                    "role": "KarpenterNodeRole-demo",
                    "amiSelectorTerms": [{"alias": "al2023@latest"}],
                    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": value}}],
                    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                },
            },
        )
    pool = cluster.name("spot")
    kube.create(
        NODE_POOLS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": pool},
            "spec": {
                "limits": {"cpu": "64"},
                "template": {
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": classes},
                        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
                    }
                },
            },
        },
    )
    raw = kube_facts.node_classes(kube)
    assert isinstance(raw, list)
    facts = aws_facts.node_classes(aws, [o for o in raw if o["metadata"]["name"] in (classes, typo)], found)
    check = c.subnets(facts, found.info)
    assert check.status is Status.FAIL
    assert check.detail.endswith(f"EC2NodeClass {typo}: selects no available subnet")
    assert c.node_role(aws_facts.node_role(aws, found, facts), facts, found.info).status is Status.OK
    pools = [p for p in kube_facts.node_pools(kube) if p.name == pool]  # type: ignore[union-attr]
    assert pools == [c.NodePoolFact(pool, frozenset({"spot"}), Decimal(64))]
    assert c.spot_slr(aws_facts.spot_slr(aws), pools).status is Status.FAIL


# --- the command ---------------------------------------------------------------------------------


def doctor(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["doctor", *args], out, err)
    return code, out.getvalue(), err.getvalue()


def test_bad_input_is_exit_2_naming_the_value(cluster: TestCluster, stack: DoctorStack, tmp_path: Path) -> None:
    kubeconfig = str(cluster.plane.kubeconfig)
    assert doctor("--stack", "Nodeflow-nope", "--kubeconfig", kubeconfig) == (
        2,
        "",
        "error: --stack: 'Nodeflow-nope' was not found in us-east-1\n",
    )
    missing = tmp_path / "nope.kubeconfig"
    assert doctor("--stack", stack.name, "--kubeconfig", str(missing)) == (
        2,
        "",
        f"error: --kubeconfig: {missing} does not exist\n",
    )
    unreachable = tmp_path / "closed.kubeconfig"
    with socket_closed() as port:
        text = Path(kubeconfig).read_text()
        unreachable.write_text(text.replace(cluster.plane.url, f"https://127.0.0.1:{port}"))
        code, out, err = doctor("--stack", stack.name, "--kubeconfig", str(unreachable))
    assert (code, out) == (2, "")
    assert err.startswith(f"error: the cluster (--kubeconfig {unreachable}) could not be reached: ")


@contextlib.contextmanager
def socket_closed() -> Iterator[int]:
    """A port nothing listens on."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    yield port


def test_the_command_reports_every_check_and_exits_1_on_a_failure(cluster: TestCluster, stack: DoctorStack) -> None:
    """Plain moto under the command (no stubs): what moto lacks is a WARN that says so; no agent is a FAIL."""
    code, out, err = doctor("--stack", stack.name, "--kubeconfig", str(cluster.plane.kubeconfig), "-o", "json")
    assert (code, err) == (1, "")
    report = json.loads(out)
    assert set(report) == {"stack", "cluster", "region", "checkedAt", "checks", "summary"}
    assert [x["id"] for x in report["checks"]] == [s.id for s in c.CHECKS]
    by_id = {x["id"]: x for x in report["checks"]}
    assert by_id["agent-running"]["status"] == "FAIL"
    assert by_id["agent-running"]["detail"] == "Deployment nodeflow/nodeflow-agent does not exist"
    assert by_id["agent-running"]["action"].startswith("python -m nodeflow install-manifests --stack Nodeflow-demo")
    assert by_id["cluster-auth-mode"]["status"] == "WARN"  # moto has no EKS cluster "demo"
    assert by_id["cluster-auth-mode"]["detail"] == (
        "could not be checked: no EKS cluster demo in us-east-1 (stack output ClusterName)"
    )
    # Service Quotas for ec2 / states: not in moto; named as what could not be checked, not guessed.
    assert by_id["quota-on-demand-vcpus"]["status"] == "WARN"
    assert by_id["quota-on-demand-vcpus"]["detail"].startswith("could not be checked: ")
    for ok in ("subnets", "security-groups", "node-role", "crds", "webhook", "dlqs", "failed-executions"):
        assert by_id[ok]["status"] == "OK", by_id[ok]
    assert all((x["action"] is None) == (x["status"] == "OK") for x in report["checks"])
    assert report["summary"]["status"] == "FAIL"
    assert report["summary"]["fail"] == sum(x["status"] == "FAIL" for x in report["checks"])

    code, text, _ = doctor("--stack", stack.name, "--kubeconfig", str(cluster.plane.kubeconfig))
    assert code == 1
    assert "  FAIL  agent-running" in text
    assert "        -> python -m nodeflow install-manifests --stack Nodeflow-demo" in text
    assert text.rstrip().splitlines()[-1].startswith("FAIL: ")


def ensure_namespace(kube: KubeClient, name: str) -> None:
    """``name`` exists and is Active (a previous test's, being deleted, is waited out)."""

    def ready() -> bool:
        try:
            phase = (kube.get(NAMESPACES, name).get("status") or {}).get("phase")
        except NotFound:
            with contextlib.suppress(AlreadyExists):
                kube.create(NAMESPACES, {"metadata": {"name": name}})
            return False
        return phase == "Active"

    wait_for(f"namespace {name}", ready, timeout=60)


def test_a_working_install_is_all_ok_and_exits_0(
    cluster: TestCluster, clients: Clients, world: AwsWorld, stack: DoctorStack
) -> None:
    kube = cluster.kube
    ensure_namespace(kube, c.AGENT_NAMESPACE)
    kube.create(
        DEPLOYMENTS,
        agent_deployment(CLUSTER_NAME="demo", WEBHOOK_URL=stack.webhook.url, AUTH_MODE="iam"),
        namespace=c.AGENT_NAMESPACE,
    )
    kubelets = SimulatedKubelets(cluster.kube_as(KUBELET), clients.ec2, "demo", lease_duration=4, instance_interval=0.2)
    kubelets.start()
    try:
        claim = cluster.name("system")
        create_claim(kube, claim)
        instance = launch(world, clients, claim)["InstanceId"]
        register_as_nodeflow(kube, wait_for("the Node", lambda: kubelets.node_name(instance)))
        wait_for(
            "the agent ready",
            lambda: (kube.get(DEPLOYMENTS, c.AGENT_DEPLOYMENT, c.AGENT_NAMESPACE).get("status") or {}).get(
                "readyReplicas"
            ),
            timeout=60,
        )
        clients.iam.create_role(
            RoleName="AWSServiceRoleForEC2Spot",
            Path="/aws-service-role/spot.amazonaws.com/",
            AssumeRolePolicyDocument='{"Version": "2012-10-17", "Statement": []}',
        )
        now = datetime.now(UTC)
        accepted(clients, "demo", now - timedelta(minutes=1))
        aws = Aws(clients)
        healthy_answers(aws, stack)
        out, err = io.StringIO(), io.StringIO()
        args = _parser().parse_args(["doctor", "--stack", stack.name, "--kubeconfig", str(cluster.plane.kubeconfig)])
        code = run(args, out, err, clients=aws, now=now)
        aws.assert_answered()
    finally:
        kubelets.stop()
        with contextlib.suppress(NotFound):
            kube.delete(DEPLOYMENTS, c.AGENT_DEPLOYMENT, c.AGENT_NAMESPACE)
    text = out.getvalue()
    assert (code, err.getvalue()) == (0, ""), text
    assert text.rstrip().splitlines()[-1] == f"OK: {len(c.CHECKS)} OK, 0 WARN, 0 FAIL"
    assert "  OK    agent-running" in text
    assert "        Deployment nodeflow/nodeflow-agent: 1/1 ready" in text
    assert "->" not in text


def test_the_command_as_a_process(cluster: TestCluster, tmp_path: Path) -> None:
    """``python -m nodeflow doctor`` in a process of its own, against a moto server: the exit code and JSON."""
    with moto_server() as server:
        server_clients = server.clients()
        world = build_world(server_clients, cluster_name="demo")
        deployed = deploy(server_clients, world)
        try:
            env = {
                **ENV,
                "AWS_ENDPOINT_URL": server.url,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1",
                "KUBECONFIG": "",
            }
            command = [sys.executable, "-m", "nodeflow", "doctor", "--kubeconfig", str(cluster.plane.kubeconfig)]
            done = subprocess.run(
                [*command, "--stack", deployed.name, "-o", "json"], env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 1, done.stderr
            report = json.loads(done.stdout)
            assert report["summary"]["status"] == "FAIL"
            assert {x["id"] for x in report["checks"] if x["status"] == "FAIL"} >= {"agent-running"}
            unknown = subprocess.run(
                [*command, "--stack", "Nodeflow-nope"], env=env, capture_output=True, text=True, timeout=120
            )
            assert (unknown.returncode, unknown.stdout) == (2, "")
            assert unknown.stderr == "error: --stack: 'Nodeflow-nope' was not found in us-east-1\n"
        finally:
            deployed.webhook.stop()
