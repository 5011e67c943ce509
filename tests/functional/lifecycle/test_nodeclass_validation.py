"""EC2NodeClass ValidationSucceeded as Karpenter's AWS provider computes it: dry runs of the launch calls
(CreateLaunchTemplate, CreateFleet once the class has a launch template, RunInstances per subnet); an
UnauthorizedOperation answer sets ValidationSucceeded=False with the upstream reason, the class is not Ready and
no NodeClaim is made for it; the outcome is cached per class generation and what it resolved to, for 30 minutes
(issue 17, part 1). EC2's denials come from the sandbox's fault injection (``Ec2Faults.deny``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from nodeflow.api.karpenter import EC2NodeClass
from nodeflow.api.karpenter_ec2 import EC2NodeClassStatus
from nodeflow.aws.ec2.amis import AMIImage
from nodeflow.aws.ec2.node_class import ResolvedNodeClass
from nodeflow.aws.ec2.security_groups import SecurityGroup
from nodeflow.aws.ec2.subnets import Subnet
from nodeflow.aws.ec2.validation import AuthorizationDenied
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.lifecycle.nodeclass import VALIDATION_CACHE, ValidationCache, node_class_status
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import ROOT, pending


@pytest.fixture(autouse=True)
def _fresh_validations() -> Iterator[None]:
    VALIDATION_CACHE.clear()
    yield
    VALIDATION_CACHE.clear()


def _conditions(kube: KubeClient, kind: kc.Resource, name: str = "default") -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in kube.get(kind, name)["status"]["conditions"]}


def _validation(kube: KubeClient) -> tuple[str, str, str]:
    c = _conditions(kube, kc.EC2_NODE_CLASSES)["ValidationSucceeded"]
    return c["status"], c["reason"], c.get("message", "")


def test_a_denied_dry_run_makes_the_class_not_ready_until_allowed(local: LocalNodeflow) -> None:
    kube = KubeClient(local.kube_server.api_client())
    faults = local.faults
    faults.deny("CreateLaunchTemplate", "RunInstances")
    local.collect_garbage()
    status, reason, message = _validation(kube)
    assert (status, reason) == ("False", "CreateLaunchTemplateAuthCheckFailed")
    assert "ec2:CreateLaunchTemplate" in message
    assert "UnauthorizedOperation" in message
    ready = _conditions(kube, kc.EC2_NODE_CLASSES)["Ready"]
    assert ready["status"] == "False"
    assert "ec2:CreateLaunchTemplate" in ready["message"]
    assert _conditions(kube, kc.NODE_POOLS)["NodeClassReady"]["status"] == "False"
    assert faults.dry_runs == [("CreateLaunchTemplate", "UnauthorizedOperation")]  # the first denial stops it

    # the class is not used: pending pods get no NodeClaim, no instance is launched
    pending(local, "web", 2, cpu="1", memory="2Gi")
    local.send_pending(["default/web"])
    assert local.provision()["result"]["nodeClaimsCreated"] == []
    assert kube.list_items(kc.NODE_CLAIMS) == []
    assert [c for c in faults.calls if c["outcome"] == "launched"] == []

    # cached: the next runs do not ask EC2 again (the denial stands until the class changes or the entry expires)
    faults.allow("CreateLaunchTemplate")
    local.collect_garbage()
    local.send_pending(["default/web"])
    local.provision()
    assert faults.dry_runs == [("CreateLaunchTemplate", "UnauthorizedOperation")]
    assert _validation(kube)[1] == "CreateLaunchTemplateAuthCheckFailed"

    # expired: asked again; RunInstances, in every subnet, is still denied
    VALIDATION_CACHE.clear()
    local.collect_garbage()
    status, reason, message = _validation(kube)
    assert (status, reason) == ("False", "RunInstancesAuthCheckFailed")
    assert "ec2:RunInstances" in message
    runs = [op for op, _ in faults.dry_runs[1:]]
    assert runs[0] == "CreateLaunchTemplate"
    assert set(runs[1:]) == {"RunInstances"}
    assert len(runs) - 1 == len(kube.get(kc.EC2_NODE_CLASSES, "default")["status"]["subnets"])

    # allowed again: Ready, and the pods get their nodes
    faults.allow("RunInstances")
    VALIDATION_CACHE.clear()
    local.collect_garbage()
    assert _validation(kube) == ("True", "ValidationSucceeded", "")
    assert _conditions(kube, kc.EC2_NODE_CLASSES)["Ready"]["status"] == "True"
    local.send_pending(["default/web"])
    assert local.provision()["result"]["nodeClaimsCreated"]
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())

    # the class has a launch template now: CreateFleet is asked too, and its denial names it
    faults.deny("CreateFleet")
    VALIDATION_CACHE.clear()
    before = len(faults.dry_runs)
    local.collect_garbage()
    assert _validation(kube)[:2] == ("False", "CreateFleetAuthCheckFailed")
    assert faults.dry_runs[before:] == [
        ("CreateLaunchTemplate", "DryRunOperation"),
        ("CreateFleet", "UnauthorizedOperation"),
    ]


def test_the_validation_cache_is_bounded_and_expires() -> None:
    cache = ValidationCache(ttl=timedelta(minutes=30), size=2)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    denied = AuthorizationDenied("CreateFleet", "CreateFleetAuthCheckFailed", "UnauthorizedOperation", "no")
    cache.put("a", denied, t0)
    assert cache.get("a", t0 + timedelta(minutes=29)) == (True, denied)
    assert cache.get("a", t0 + timedelta(minutes=30)) == (False, None)  # expired
    cache.put("a", None, t0)
    cache.put("b", None, t0 + timedelta(minutes=1))
    cache.put("c", None, t0 + timedelta(minutes=2))  # full: the oldest ("a") goes
    assert len(cache) == 2
    assert cache.get("a", t0 + timedelta(minutes=2)) == (False, None)
    assert cache.get("c", t0 + timedelta(minutes=2)) == (True, None)


def _demo_class() -> EC2NodeClass:
    docs = yaml.safe_load_all((ROOT / "examples/demo/nodepools.yaml").read_text())
    raw = next(d for d in docs if d and d["kind"] == "EC2NodeClass")
    return EC2NodeClass.model_validate({**raw, "metadata": {**raw["metadata"], "uid": "u1", "generation": 1}})


def _resolved() -> ResolvedNodeClass:
    return ResolvedNodeClass(
        name="default",
        ami_family="AL2023",
        subnets=(Subnet("subnet-1", "us-east-1a", "use1-az1", 100),),
        security_groups=(SecurityGroup("sg-1", "nodes"),),
        amis=(AMIImage("ami-1", "al2023", "amd64"),),
        instance_profile="profile",
    )


def test_an_inconclusive_dry_run_keeps_the_condition_it_had() -> None:
    """EC2 throttled or unavailable: the class keeps its ValidationSucceeded (a denial stays a denial, an allowed
    class stays allowed); a class never validated before counts as validated."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    node_class, resolved = _demo_class(), _resolved()
    denied = AuthorizationDenied("RunInstances", "RunInstancesAuthCheckFailed", "UnauthorizedOperation", "no")
    first = node_class_status(node_class, resolved, now, denied)
    conditions = {c["type"]: c for c in first["conditions"]}
    assert conditions["ValidationSucceeded"]["reason"] == "RunInstancesAuthCheckFailed"
    assert conditions["Ready"]["status"] == "False"
    was = node_class.model_copy(update={"status": EC2NodeClassStatus.model_validate(first)})
    kept = node_class_status(was, resolved, now + timedelta(minutes=1), None, validated=False)
    assert [c for c in kept["conditions"] if c["type"] in ("ValidationSucceeded", "Ready")] == [
        c for c in first["conditions"] if c["type"] in ("ValidationSucceeded", "Ready")
    ]
    fresh = node_class_status(node_class, resolved, now, None, validated=False)
    assert {c["type"]: c["status"] for c in fresh["conditions"]}["Ready"] == "True"


def test_the_launch_step_makes_no_dry_runs(local: LocalNodeflow) -> None:
    """The provisioner validates the class before it creates a NodeClaim; Launch, on the path to CreateFleet,
    does not ask EC2 again, even with an empty validation cache (a cold Launch container)."""
    faults = local.faults
    local.collect_garbage()
    asked = len(faults.dry_runs)
    assert asked > 0
    pending(local, "web", 2, cpu="1", memory="2Gi")
    local.send_pending(["default/web"])
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert len(created) == 1
    after_provisioner = len(faults.dry_runs)
    VALIDATION_CACHE.clear()  # the Launch step's container has asked nothing yet: it still does not ask
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())
    assert [c for c in faults.calls if c["outcome"] == "launched"]
    assert len(faults.dry_runs) == after_provisioner
