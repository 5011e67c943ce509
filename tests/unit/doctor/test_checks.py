"""The doctor's decisions (nodeflow.doctor.checks), facts in, verdict out: each check's OK, WARN and FAIL, the one
action of a check that is not OK, the report's shape and exit code; and that the module stays pure."""

from __future__ import annotations

import ast
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from nodeflow.doctor import checks as c
from nodeflow.doctor.checks import Status, Unreadable
from nodeflow.karpenter_presence import KarpenterController

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
STACK = c.StackInfo(
    name="Nodeflow-shop",
    region="eu-west-1",
    cluster_name="shop",
    webhook_url="https://abc.lambda-url.eu-west-1.on.aws/",
    node_role_name="KarpenterNodeRole-shop",
    node_instance_profile="Nodeflow-shop-NodeRoleInstanceProfile",
)
CLUSTER = c.ClusterFacts("ACTIVE", "API_AND_CONFIG_MAP", True, False, ("0.0.0.0/0",), "vpc-1")
OUTSIDE_VPC = c.LambdaFacts(functions=14, vpc_ids=frozenset(), reserved=12)
SUBNETS = tuple(c.SubnetFact(f"subnet-{z}", f"eu-west-1{z}", "vpc-1", 4000) for z in "abc")
GROUPS = (c.GroupFact("sg-1", "vpc-1"),)
DEFAULT_CLASS = c.NodeClassFact("default", SUBNETS, GROUPS, role="KarpenterNodeRole-shop")
ROLE = c.NodeRoleFacts(
    c.RoleFact("KarpenterNodeRole-shop", True, True),
    c.ProfileFact("Nodeflow-shop-NodeRoleInstanceProfile", True, ("KarpenterNodeRole-shop",)),
)
SPOT_POOL = c.NodePoolFact("spot", frozenset({"spot", "on-demand"}), Decimal(100))
OD_POOL = c.NodePoolFact("general", frozenset({"on-demand"}), Decimal(200))
EXPECTED_CRDS = {"nodepools.karpenter.sh": ("v1",), "nodeflowpolicies.nodeflow.io": ("v1alpha1",)}
CRDS = {
    "nodepools.karpenter.sh": c.CrdFact("nodepools.karpenter.sh", ("v1",), True),
    "nodeflowpolicies.nodeflow.io": c.CrdFact("nodeflowpolicies.nodeflow.io", ("v1alpha1",), True),
}
AGENT = c.AgentFacts(True, 1, 1, {"CLUSTER_NAME": "shop", "WEBHOOK_URL": STACK.webhook_url or ""})
NO_KARPENTER = KarpenterController(False, ("no Deployment labelled app.kubernetes.io/name=karpenter",))
DENIED = Unreadable("GetRole: AccessDenied: not authorized to perform iam:GetRole", "AccessDenied")


def healthy() -> c.Facts:
    return c.Facts(
        stack=STACK,
        cluster=CLUSTER,
        lambdas=OUTSIDE_VPC,
        account_concurrency=c.AccountConcurrency(1000, 988),
        node_classes=(DEFAULT_CLASS,),
        node_role=ROLE,
        spot_slr=True,
        node_pools=(OD_POOL, SPOT_POOL),
        on_demand_quota=640.0,
        spot_quota=640.0,
        sfn_quota=c.SfnQuota(1300, 300),
        crds=CRDS,
        expected_crds=EXPECTED_CRDS,
        agent=AGENT,
        forwarding=c.Forwarding(NOW - timedelta(minutes=2)),
        activity=c.ClusterActivity(),
        probe=c.ProbeResult(403),
        dlqs=(c.DlqFact("nodeflow-shop-provisioning-dlq", "https://sqs/1/nodeflow-shop-provisioning-dlq", 0),),
        executions=(),
        node_claims=(),
        karpenter=NO_KARPENTER,
    )


def verdict(facts: c.Facts, check_id: str, now: datetime = NOW) -> c.Check:
    (check,) = [x for x in c.evaluate(facts, now).checks if x.id == check_id]
    if check.status is Status.OK:
        assert check.action is None
    else:
        assert check.action, check  # every check that is not OK says what to do
    return check


def test_a_healthy_cluster_is_all_ok_and_exits_0() -> None:
    report = c.evaluate(healthy(), NOW)
    assert [x.id for x in report.checks] == [s.id for s in c.CHECKS]
    assert {x.id: x.status for x in report.checks if x.status is not Status.OK} == {}
    assert report.exit_code == 0
    doc = report.to_json()
    assert doc["summary"] == {"status": "OK", "ok": len(c.CHECKS), "warn": 0, "fail": 0}
    assert set(doc["checks"][0]) == {"id", "phase", "title", "status", "detail", "action"}
    assert doc["checkedAt"] == "2026-03-01T12:00:00Z"


def test_a_warning_exits_0_and_a_failure_exits_1() -> None:
    warned = c.evaluate(replace(healthy(), spot_slr=DENIED), NOW)
    assert (warned.status, warned.exit_code) == (Status.WARN, 0)
    failed = c.evaluate(replace(healthy(), spot_slr=False, spot_quota=DENIED), NOW)
    assert (failed.status, failed.exit_code) == (Status.FAIL, 1)
    assert failed.to_json()["summary"] == {"status": "FAIL", "ok": len(c.CHECKS) - 2, "warn": 1, "fail": 1}


@pytest.mark.parametrize(
    ("mode", "access_entries", "status"),
    [
        ("API", True, Status.OK),
        ("API_AND_CONFIG_MAP", True, Status.OK),
        ("CONFIG_MAP", True, Status.FAIL),
        ("CONFIG_MAP", False, Status.WARN),
        (None, True, Status.WARN),
    ],
)
def test_auth_mode(mode: str | None, access_entries: bool, status: Status) -> None:
    facts = replace(
        healthy(), cluster=replace(CLUSTER, auth_mode=mode), stack=replace(STACK, access_entries=access_entries)
    )
    check = verdict(facts, "cluster-auth-mode")
    assert check.status is status
    if status is Status.FAIL:
        assert check.action == (
            "aws eks update-cluster-config --name shop --region eu-west-1 --access-config "
            "authenticationMode=API_AND_CONFIG_MAP"
        )


@pytest.mark.parametrize(
    ("public", "private", "cidrs", "vpcs", "status"),
    [
        (True, False, ("0.0.0.0/0",), (), Status.OK),
        (True, False, (), (), Status.OK),  # EKS's default CIDR
        (True, True, ("203.0.113.0/24",), (), Status.FAIL),  # outside a VPC, CIDRs that cannot list Lambda
        (False, True, (), (), Status.FAIL),  # private only, Lambdas outside the VPC
        (False, True, (), ("vpc-1",), Status.OK),  # in the cluster's VPC
        (True, True, ("0.0.0.0/0",), ("vpc-2",), Status.WARN),  # another VPC
        (True, False, ("0.0.0.0/0",), ("vpc-1",), Status.WARN),  # in the VPC, public only: NAT
        (False, False, (), ("vpc-1",), Status.FAIL),
    ],
)
def test_endpoint_access(
    public: bool, private: bool, cidrs: tuple[str, ...], vpcs: tuple[str, ...], status: Status
) -> None:
    facts = replace(
        healthy(),
        cluster=replace(CLUSTER, public_access=public, private_access=private, public_cidrs=cidrs),
        lambdas=replace(OUTSIDE_VPC, vpc_ids=frozenset(vpcs)),
    )
    check = verdict(facts, "endpoint-access")
    assert check.status is status, check.detail
    if status is Status.FAIL and not vpcs:
        assert "-c lambdaVpcId=vpc-1" in (check.action or "")


def test_subnets() -> None:
    assert verdict(healthy(), "subnets").detail == (
        "EC2NodeClass default: 3 subnet(s) in 3 zone(s) (eu-west-1a, eu-west-1b, eu-west-1c), 12000 free IPs"
    )
    none = replace(DEFAULT_CLASS, subnets=())
    check = verdict(replace(healthy(), node_classes=(none,)), "subnets")
    assert check.status is Status.FAIL
    assert "spec.subnetSelectorTerms of EC2NodeClass default" in (check.action or "")
    # No EC2NodeClass yet: the discovery tag is what one would select; nothing tagged is a warning.
    untagged = c.NodeClassFact("", (), ())
    check = verdict(replace(healthy(), node_classes=(untagged,)), "subnets")
    assert check.status is Status.WARN
    assert "Key=karpenter.sh/discovery,Value=shop" in (check.action or "")
    small = replace(DEFAULT_CLASS, subnets=(replace(SUBNETS[0], free_ips=100), replace(SUBNETS[1], free_ips=0)))
    check = verdict(replace(healthy(), node_classes=(small,)), "subnets")
    assert check.status is Status.WARN
    assert "100 free IPs" in check.detail
    assert "no free IP in subnet-b" in check.detail
    split = replace(DEFAULT_CLASS, subnets=(SUBNETS[0], replace(SUBNETS[1], vpc_id="vpc-2")))
    assert verdict(replace(healthy(), node_classes=(split,)), "subnets").status is Status.FAIL
    assert verdict(replace(healthy(), node_classes=DENIED), "subnets").status is Status.WARN


def test_security_groups() -> None:
    assert verdict(healthy(), "security-groups").detail == "EC2NodeClass default: sg-1"
    check = verdict(replace(healthy(), node_classes=(replace(DEFAULT_CLASS, groups=()),)), "security-groups")
    assert check.status is Status.FAIL
    other_vpc = replace(DEFAULT_CLASS, groups=(c.GroupFact("sg-9", "vpc-9"),))
    check = verdict(replace(healthy(), node_classes=(other_vpc,)), "security-groups")
    assert (check.status, check.detail) == (Status.FAIL, "EC2NodeClass default: sg-9 in vpc-9, the subnets in vpc-1")
    untagged = c.NodeClassFact("", SUBNETS, ())
    assert verdict(replace(healthy(), node_classes=(untagged,)), "security-groups").status is Status.WARN


def test_node_role() -> None:
    assert verdict(healthy(), "node-role").status is Status.OK
    cases = {
        "missing": replace(ROLE, role=c.RoleFact("KarpenterNodeRole-shop", False)),
        "untrusted": replace(ROLE, role=c.RoleFact("KarpenterNodeRole-shop", True, False)),
        "no profile": replace(ROLE, stack_profile=c.ProfileFact("Nodeflow-shop-NodeRoleInstanceProfile", False)),
        "empty profile": replace(ROLE, stack_profile=c.ProfileFact("Nodeflow-shop-NodeRoleInstanceProfile", True)),
    }
    for what, facts in cases.items():
        assert verdict(replace(healthy(), node_role=facts), "node-role").status is Status.FAIL, what
    other = replace(DEFAULT_CLASS, role="arn:aws:iam::123456789012:role/SomeoneElse")
    check = verdict(replace(healthy(), node_classes=(other,)), "node-role")
    assert (check.status, check.action) == (
        Status.FAIL,
        "set spec.role: KarpenterNodeRole-shop in EC2NodeClass default",
    )
    by_profile = replace(DEFAULT_CLASS, role=None, instance_profile="custom")
    with_profile = replace(ROLE, class_profiles={"custom": c.ProfileFact("custom", True, ("KarpenterNodeRole-shop",))})
    assert verdict(replace(healthy(), node_classes=(by_profile,), node_role=with_profile), "node-role").status is (
        Status.OK
    )
    wrong = replace(ROLE, class_profiles={"custom": c.ProfileFact("custom", True, ("Other",))})
    assert verdict(replace(healthy(), node_classes=(by_profile,), node_role=wrong), "node-role").status is Status.FAIL
    no_output = replace(ROLE, role=None)
    assert verdict(replace(healthy(), node_role=no_output), "node-role").status is Status.WARN


def test_spot_service_linked_role() -> None:
    assert verdict(replace(healthy(), spot_slr=False, node_pools=(OD_POOL,)), "spot-service-linked-role").status is (
        Status.OK
    )
    check = verdict(replace(healthy(), spot_slr=False), "spot-service-linked-role")
    assert (check.status, check.action) == (
        Status.FAIL,
        "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com",
    )
    assert verdict(replace(healthy(), spot_slr=False, node_pools=()), "spot-service-linked-role").status is Status.WARN
    assert verdict(replace(healthy(), spot_slr=DENIED), "spot-service-linked-role").status is Status.WARN


def test_vcpu_quotas() -> None:
    assert verdict(replace(healthy(), spot_quota=0.0), "quota-spot-vcpus").status is Status.FAIL
    assert verdict(replace(healthy(), spot_quota=0.0, node_pools=(OD_POOL,)), "quota-spot-vcpus").status is Status.OK
    assert verdict(replace(healthy(), spot_quota=0.0, node_pools=()), "quota-spot-vcpus").status is Status.WARN
    assert verdict(replace(healthy(), on_demand_quota=0.0, node_pools=()), "quota-on-demand-vcpus").status is (
        Status.FAIL  # Karpenter's default capacity type
    )
    assert verdict(replace(healthy(), on_demand_quota=32.0), "quota-on-demand-vcpus").status is Status.WARN
    below_limits = verdict(replace(healthy(), on_demand_quota=256.0), "quota-on-demand-vcpus")
    assert below_limits.status is Status.WARN
    assert "cpu limits (300 for general, spot)" in below_limits.detail
    assert "--quota-code L-1216C47A" in (below_limits.action or "")
    unlimited = replace(OD_POOL, cpu_limit=None)
    assert verdict(replace(healthy(), node_pools=(unlimited,)), "quota-on-demand-vcpus").status is Status.OK


def test_step_functions_and_lambda_quotas() -> None:
    assert verdict(replace(healthy(), sfn_quota=c.SfnQuota(50, 10)), "quota-sfn-start-execution").status is (
        Status.WARN
    )
    assert verdict(replace(healthy(), sfn_quota=c.SfnQuota(None, None)), "quota-sfn-start-execution").status is (
        Status.WARN
    )
    tight = c.AccountConcurrency(150, 50)
    assert verdict(replace(healthy(), account_concurrency=tight), "quota-lambda-concurrency").status is Status.WARN
    new_account = c.AccountConcurrency(10, 10)
    check = verdict(replace(healthy(), account_concurrency=new_account), "quota-lambda-concurrency")
    assert check.status is Status.FAIL
    assert "--quota-code L-B99A9384" in (check.action or "")


def test_crds() -> None:
    assert verdict(healthy(), "crds").detail == "2 CRDs established, serving karpenter.sh/v1, nodeflow.io/v1alpha1"
    missing = {k: v for k, v in CRDS.items() if k != "nodeflowpolicies.nodeflow.io"}
    check = verdict(replace(healthy(), crds=missing), "crds")
    assert (check.status, check.detail) == (Status.FAIL, "not installed: nodeflowpolicies.nodeflow.io")
    assert check.action == (
        "python -m nodeflow install-manifests --stack Nodeflow-shop, then kubectl apply -k cdk.out/install/Nodeflow-shop"
    )
    older = {**CRDS, "nodepools.karpenter.sh": c.CrdFact("nodepools.karpenter.sh", ("v1", "v1beta1"), True)}
    check = verdict(replace(healthy(), crds=older), "crds")
    assert (check.status, check.detail) == (
        Status.FAIL,
        "nodepools.karpenter.sh serves v1, v1beta1, nodeflow reads v1",
    )


def test_agent_running() -> None:
    assert verdict(healthy(), "agent-running").detail == "Deployment nodeflow/nodeflow-agent: 1/1 ready"
    assert verdict(replace(healthy(), agent=c.AgentFacts(False)), "agent-running").status is Status.FAIL
    down = replace(AGENT, ready=0, waiting=("nodeflow-agent-1: ImagePullBackOff",))
    check = verdict(replace(healthy(), agent=down), "agent-running")
    assert (check.status, check.detail) == (
        Status.FAIL,
        "Deployment nodeflow/nodeflow-agent: 0/1 ready (nodeflow-agent-1: ImagePullBackOff)",
    )
    elsewhere = replace(AGENT, env={"CLUSTER_NAME": "other"})
    check = verdict(replace(healthy(), agent=elsewhere), "agent-running")
    assert check.status is Status.FAIL
    assert "CLUSTER_NAME='other'" in check.detail


def test_agent_forwarding() -> None:
    assert verdict(healthy(), "agent-forwarding").detail == "last request accepted by the webhook 2 min ago"
    idle = replace(healthy(), forwarding=c.Forwarding(NOW - timedelta(hours=2)))
    check = verdict(idle, "agent-forwarding")
    assert (check.status, check.detail) == (
        Status.OK,
        "last request accepted by the webhook 2 h ago; nothing in the cluster has required one since (idle)",
    )
    # A pod unschedulable for 30 minutes is re-sent every resync: nothing accepted for 2 hours means it was not.
    pending = c.ClusterActivity(unschedulable_since=NOW - timedelta(minutes=30), unschedulable_pod="shop/web-1")
    check = verdict(replace(idle, activity=pending), "agent-forwarding")
    assert check.status is Status.FAIL
    assert "pod shop/web-1 unschedulable for 30 min" in check.detail
    assert check.action
    assert "kubectl -n nodeflow logs deploy/nodeflow-agent" in check.action
    # ... and so is a Node created after the last accepted request.
    node = c.ClusterActivity(newest_node_created=NOW - timedelta(minutes=30), newest_node="ip-10-0-1-1")
    assert verdict(replace(idle, activity=node), "agent-forwarding").status is Status.FAIL
    # ... unless a request was accepted in the minute it was created (the metric's datapoint starts the minute).
    same_minute = replace(healthy(), forwarding=c.Forwarding(NOW - timedelta(minutes=30, seconds=40)))
    assert verdict(replace(same_minute, activity=node), "agent-forwarding").status is Status.OK
    # A Node older than the metric's window was announced before the window: not evidence of anything.
    old_node = c.ClusterActivity(newest_node_created=NOW - timedelta(days=2), newest_node="ip-10-0-1-1")
    assert verdict(replace(healthy(), forwarding=c.Forwarding(None), activity=old_node), "agent-forwarding").status is (
        Status.WARN
    )
    just_pending = c.ClusterActivity(unschedulable_since=NOW - timedelta(minutes=3), unschedulable_pod="shop/web-1")
    assert verdict(replace(idle, activity=just_pending), "agent-forwarding").status is Status.OK
    never = replace(healthy(), forwarding=c.Forwarding(None))
    assert verdict(never, "agent-forwarding").status is Status.WARN
    assert verdict(replace(never, activity=pending), "agent-forwarding").status is Status.FAIL


@pytest.mark.parametrize(
    ("auth", "answer", "status"),
    [
        ("iam", c.ProbeResult(403), Status.OK),
        ("hmac", c.ProbeResult(401), Status.OK),
        ("iam", c.ProbeResult(202), Status.FAIL),
        ("iam", c.ProbeResult(404), Status.FAIL),
        ("iam", c.ProbeResult(502), Status.FAIL),
        ("iam", c.ProbeResult(None, "URLError: connection refused"), Status.FAIL),
        ("hmac", c.ProbeResult(403), Status.WARN),
    ],
)
def test_webhook(auth: str, answer: c.ProbeResult, status: Status) -> None:
    facts = replace(healthy(), stack=replace(STACK, webhook_auth=auth), probe=answer)
    assert verdict(facts, "webhook").status is status


def test_dlqs() -> None:
    full = (
        c.DlqFact("nodeflow-shop-events-dlq", "https://sqs/1/nodeflow-shop-events-dlq", 0),
        c.DlqFact("nodeflow-shop-provisioning-dlq", "https://sqs/1/nodeflow-shop-provisioning-dlq", 3),
    )
    check = verdict(replace(healthy(), dlqs=full), "dlqs")
    assert (check.status, check.detail) == (
        Status.FAIL,
        "messages nodeflow gave up on: nodeflow-shop-provisioning-dlq 3",
    )
    assert check.action == (
        "read them to find the cause: aws sqs receive-message --queue-url "
        "https://sqs/1/nodeflow-shop-provisioning-dlq --max-number-of-messages 10"
    )
    assert verdict(replace(healthy(), dlqs=()), "dlqs").status is Status.WARN


def test_failed_executions() -> None:
    launch = c.ExecutionFact(
        "launch", "shop-abc", "arn:launch:shop-abc", "FAILED", NOW - timedelta(minutes=5), "NoCapacity", "ICE"
    )
    check = verdict(replace(healthy(), executions=(launch,)), "failed-executions")
    assert check.status is Status.WARN  # a launch without capacity fails; CleanUp ran
    assert check.detail == "1 launch FAILED in the last 60 min; latest shop-abc: NoCapacity (ICE)"
    terminate = c.ExecutionFact("terminate", "node-1", "arn:terminate:node-1", "TIMED_OUT", NOW - timedelta(minutes=9))
    check = verdict(replace(healthy(), executions=(launch, terminate)), "failed-executions")
    assert check.status is Status.FAIL
    assert check.action == (
        "aws stepfunctions get-execution-history --execution-arn arn:terminate:node-1 --reverse-order --max-items 5"
    )


def test_stuck_node_claims() -> None:
    young = c.NodeClaimFact("a", NOW - timedelta(minutes=5), initialized=False)
    up = c.NodeClaimFact("b", NOW - timedelta(hours=5), initialized=True)
    assert verdict(replace(healthy(), node_claims=(young, up)), "stuck-nodeclaims").status is Status.OK
    stuck = c.NodeClaimFact("c", NOW - timedelta(minutes=25), initialized=False, why="Registered=False (NotFound)")
    check = verdict(replace(healthy(), node_claims=(young, up, stuck)), "stuck-nodeclaims")
    assert (check.status, check.action) == (Status.FAIL, "kubectl describe nodeclaim c")
    assert "c, 25 min old: Registered=False (NotFound)" in check.detail
    draining = replace(up, deleting_since=NOW - timedelta(hours=1))
    assert verdict(replace(healthy(), node_claims=(draining,)), "stuck-nodeclaims").status is Status.WARN


def test_karpenter_controller() -> None:
    running = KarpenterController(
        True, ("Deployment kube-system/karpenter: 2/2 ready",), deployment="kube-system/karpenter"
    )
    check = verdict(replace(healthy(), karpenter=running), "karpenter-controller")
    assert (check.status, check.action) == (
        Status.FAIL,
        "scale it to zero before nodeflow acts: kubectl -n kube-system scale deployment karpenter --replicas=0",
    )
    assert check.detail.startswith("a Karpenter controller is running, so nodeflow holds still (launches and disrupts")
    by_lease = KarpenterController(True, ("Lease karpenter/karpenter-leader-election held",), lease="karpenter/x")
    assert verdict(replace(healthy(), karpenter=by_lease), "karpenter-controller").status is Status.FAIL


def test_unreadable_facts_are_warnings_that_say_why() -> None:
    facts = replace(
        healthy(),
        cluster=DENIED,
        lambdas=DENIED,
        account_concurrency=DENIED,
        node_classes=DENIED,
        node_role=DENIED,
        spot_slr=DENIED,
        on_demand_quota=DENIED,
        spot_quota=DENIED,
        sfn_quota=DENIED,
        crds=DENIED,
        agent=DENIED,
        forwarding=DENIED,
        dlqs=DENIED,
        executions=DENIED,
        node_claims=DENIED,
        karpenter=DENIED,
    )
    report = c.evaluate(facts, NOW)
    unread = [x for x in report.checks if x.detail.startswith("could not be checked")]
    assert {x.status for x in unread} == {Status.WARN}
    assert len(unread) == len(c.CHECKS) - 1  # all but the webhook's probe (it answers or says why not)
    assert all(x.action for x in unread)
    assert report.exit_code == 0


def test_an_unreadable_fact_says_what_to_do_by_why() -> None:
    denied = verdict(replace(healthy(), spot_slr=DENIED), "spot-service-linked-role")
    assert denied.action == "allow iam:GetRole on AWSServiceRoleForEC2Spot"
    throttled = Unreadable("GetRole: Throttling: Rate exceeded", "Throttling")
    check = verdict(replace(healthy(), spot_slr=throttled), "spot-service-linked-role")
    assert (check.detail, check.action) == (
        "could not be checked: GetRole: Throttling: Rate exceeded",
        "resolve Throttling (above), then run doctor again",
    )
    before_install = Unreadable("nodeclaims.karpenter.sh is not installed", c.NOT_INSTALLED)
    check = verdict(replace(healthy(), node_claims=before_install), "stuck-nodeclaims")
    assert (check.status, check.action) == (Status.WARN, "install nodeflow's CRDs first (see the crds check)")
    gone = Unreadable("DescribeCluster: ResourceNotFoundException: No cluster found", "ResourceNotFoundException")
    check = verdict(replace(healthy(), cluster=gone), "cluster-auth-mode")
    assert (check.status, check.detail, check.action) == (
        Status.WARN,
        "could not be checked: no EKS cluster shop in eu-west-1 (stack output ClusterName)",
        "check that the stack was deployed for this cluster and region: aws eks describe-cluster --name shop "
        "--region eu-west-1",
    )


def test_node_pool_facts() -> None:
    def pool(*requirements: dict[str, object], cpu: object = None) -> c.NodePoolFact:
        spec: dict[str, object] = {"template": {"spec": {"requirements": list(requirements)}}}
        if cpu is not None:
            spec["limits"] = {"cpu": cpu}
        return c.node_pool_fact({"metadata": {"name": "p"}, "spec": spec})

    key = "karpenter.sh/capacity-type"
    assert pool().capacity_types == {"on-demand"}  # Karpenter's default
    assert pool({"key": key, "operator": "In", "values": ["spot"]}).capacity_types == {"spot"}
    assert pool({"key": key, "operator": "NotIn", "values": ["spot"]}).capacity_types == {"on-demand", "reserved"}
    assert pool({"key": key, "operator": "Exists"}).capacity_types == {"on-demand", "spot", "reserved"}
    assert pool({"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}).capacity_types == {"on-demand"}
    assert pool(cpu="1000").cpu_limit == Decimal(1000)
    assert pool(cpu="1500m").cpu_limit == Decimal("1.5")
    assert pool(cpu="lots").cpu_limit is None


def test_node_claim_facts() -> None:
    fact = c.node_claim_fact(
        {
            "metadata": {"name": "n", "creationTimestamp": "2026-03-01T11:00:00Z"},
            "status": {
                "conditions": [
                    {"type": "Launched", "status": "True"},
                    {"type": "Registered", "status": "False", "reason": "NodeNotFound", "message": "no node yet"},
                ]
            },
        }
    )
    assert fact == c.NodeClaimFact(
        "n", datetime(2026, 3, 1, 11, tzinfo=UTC), False, None, "Registered=False (NodeNotFound: no node yet)"
    )
    assert c.node_claim_fact({"metadata": {"name": "x"}}) is None


def test_the_agent_names_match_its_manifests() -> None:
    deployment = yaml.safe_load((ROOT / "agent" / "manifests" / "30-deployment.yaml").read_text())
    assert (deployment["metadata"]["namespace"], deployment["metadata"]["name"]) == (
        c.AGENT_NAMESPACE,
        c.AGENT_DEPLOYMENT,
    )


@pytest.mark.parametrize("module", ["nodeflow/doctor/checks.py", "nodeflow/karpenter_presence.py"])
def test_the_decisions_are_pure(module: str) -> None:
    """No AWS SDK, no Kubernetes client, no clock: facts and the time come in as arguments."""
    tree = ast.parse((ROOT / "functions" / module).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names} | {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    }
    assert not {m for m in imported if m.split(".")[0] in ("boto3", "botocore", "kubernetes", "urllib", "time")}
    assert not [m for m in imported if m.startswith("nodeflow.") and m.split(".")[1] in ("aws", "kube", "handlers")]
    source = (ROOT / "functions" / module).read_text()
    assert ".now(" not in source
    assert "utcnow" not in source
