"""Launch templates never pile up: garbage collection deletes the templates of a deleted EC2NodeClass (after its
NodeClaims, with Karpenter's ``karpenter.k8s.aws/termination`` finalizer) and those of a live class no instance uses
past the grace period; it never touches another cluster's or an untagged template; a launch whose template is deleted
under it makes the template again (lifecycle/launch_template_gc.py, lifecycle/launch.py)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.aws.ec2.launch_templates import delete_launch_template, list_launch_templates
from nodeflow.handlers import runtime
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.kube.errors import NotFound
from nodeflow.lifecycle.launch_template_gc import TEMPLATE_GRACE
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import demo_node_pools, pending
from tests.realk8s.workloads import TEMPLATE_HASH, running

FINALIZER = "karpenter.k8s.aws/termination"
# Templates gc must never delete: another cluster's (Karpenter's or nodeflow's), untagged, and one named as nodeflow
# names its own but without the NodePool and EC2NodeClass tags.
FOREIGN = {
    "nodeflow/other-cluster": {
        "kubernetes.io/cluster/other": "owned",
        "eks:eks-cluster-name": "other",
        "karpenter.sh/nodepool": "default",
        "karpenter.k8s.aws/ec2nodeclass": "default",
    },
    "karpenter.k8s.aws/111": {
        "kubernetes.io/cluster/other": "owned",
        "eks:eks-cluster-name": "other",
        "karpenter.sh/nodepool": "default",
        "karpenter.k8s.aws/ec2nodeclass": "default",
    },
    "nodeflow/cluster-tags-only": {"kubernetes.io/cluster/demo": "owned", "eks:eks-cluster-name": "demo"},
    "hand-made": {},
}


@pytest.fixture
def foreign(local: LocalNodeflow) -> dict[str, str]:
    """The FOREIGN templates, made before anything else (as old as any): name -> id."""
    out = {}
    for name, tags in FOREIGN.items():
        spec = [{"ResourceType": "launch-template", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
        made = local.clients.ec2.create_launch_template(
            LaunchTemplateName=name,
            LaunchTemplateData={"ImageId": local.world.amis["amd64"]},
            TagSpecifications=spec if tags else [],
        )
        out[name] = made["LaunchTemplate"]["LaunchTemplateId"]
    return out


@pytest.fixture
def later() -> Iterator[Any]:
    """``later(delta)``: the handlers' clock runs ``delta`` ahead of the wall clock (EC2's creation times) from now on."""
    rt = runtime.runtime()
    saved = rt.clock

    def shift(delta: timedelta) -> None:
        rt.clock = lambda: datetime.now(UTC) + delta

    yield shift
    rt.clock = saved


def _templates(local: LocalNodeflow) -> dict[str, dict[str, str]]:
    """Every launch template in the account: name -> tags."""
    out = local.clients.ec2.describe_launch_templates()["LaunchTemplates"]
    return {t["LaunchTemplateName"]: {x["Key"]: x["Value"] for x in t.get("Tags") or []} for t in out}


def _of_class(local: LocalNodeflow, node_class: str) -> set[str]:
    return {
        n
        for n, tags in _templates(local).items()
        if n.startswith("nodeflow/") and tags.get("karpenter.k8s.aws/ec2nodeclass") == node_class and n not in FOREIGN
    }


# Each test pod on a node of its own (else the scheduler may bind one to a node with room before it is provisioned).
ALONE = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                "topologyKey": wk.LABEL_HOSTNAME,
            }
        ]
    }
}


def _launch(local: LocalNodeflow, app: str, **spec: Any) -> str:
    """One pending pod of ``app`` launched on a node of its own; its NodeClaim."""
    pending(local, app, 1, cpu="1", memory="1Gi", affinity=ALONE, **spec)
    local.send_pending([f"default/{app}"])
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert len(created) == 1, created
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())
    running(local.kube_server, app, 1)  # bound there before the next pod comes (or kube-scheduler may bind that one)
    return str(created[0])


def _terminate(local: LocalNodeflow, claim: str, app: str | None = None) -> None:
    """Terminate ``claim``'s node; with ``app``, that workload goes first (its ReplicaSet deleted: on a real cluster
    the evicted pods would come back, and the next provisioning would launch nodes for them too)."""
    if app is not None:
        local.kube_server.delete("apps/v1", "ReplicaSet", f"{app}-{TEMPLATE_HASH}")
    local.terminate(claim)
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_terminations())


def _gc(local: LocalNodeflow) -> dict[str, Any]:
    """One garbage collection run's result (a run that reports no template or class deleted none)."""
    return {"deletedLaunchTemplates": [], "finalizedNodeClasses": [], **local.collect_garbage()}


def test_templates_of_a_live_class_go_once_unused_past_the_grace(
    local: LocalNodeflow, foreign: dict[str, str], later: Any
) -> None:
    kube = KubeClient(local.kube_server.api_client())
    first = _launch(local, "web")
    (old,) = _of_class(local, "default")
    # An edit of the class (its tags are the template's): the next launch makes a new template, the old one stays
    kube.patch(kc.EC2_NODE_CLASSES, "default", {"spec": {"tags": {"team": "payments"}}})
    _launch(local, "api")
    (new,) = _of_class(local, "default") - {old}

    assert _gc(local)["deletedLaunchTemplates"] == []  # all younger than the grace
    later(TEMPLATE_GRACE + timedelta(minutes=1))
    assert _gc(local)["deletedLaunchTemplates"] == []  # each used by a running instance
    _terminate(local, first, "web")  # the old template's only instance goes (as a consolidation would)
    result = _gc(local)
    assert result["deletedLaunchTemplates"] == [old]
    assert _of_class(local, "default") == {new}
    assert set(FOREIGN) <= set(_templates(local))  # never touched
    # an idle class loses its current template too, and the next launch makes it again
    _terminate(
        local, next(c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")), "api"
    )
    assert _gc(local)["deletedLaunchTemplates"] == [new]
    later(timedelta(0))
    _launch(local, "batch")
    assert _of_class(local, "default") == {new}
    assert set(FOREIGN) <= set(_templates(local))


def _second_class(local: LocalNodeflow) -> None:
    """EC2NodeClass ``batch`` (as ``default``) and NodePool ``batch`` using it, tainted for the pods of ``BATCH``."""
    docs = demo_node_pools()
    node_class = copy.deepcopy(next(d for d in docs if d["kind"] == "EC2NodeClass"))
    node_class["metadata"] = {"name": "batch"}
    pool = copy.deepcopy(next(d for d in docs if d["kind"] == "NodePool" and d["metadata"]["name"] == "default"))
    pool["metadata"] = {"name": "batch"}
    pool["spec"]["template"]["metadata"] = {"labels": {"workload": "batch"}}
    pool["spec"]["template"]["spec"]["taints"] = [{"key": "workload", "value": "batch", "effect": "NoSchedule"}]
    pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "batch"
    local.apply([node_class, pool])


BATCH = {
    "nodeSelector": {"workload": "batch"},
    "tolerations": [{"key": "workload", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}],
}


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def test_a_deleted_class_waits_for_its_node_claims_then_its_templates_go(
    local: LocalNodeflow, foreign: dict[str, str]
) -> None:
    kube = KubeClient(local.kube_server.api_client())
    _second_class(local)
    _launch(local, "web")
    doomed = _launch(local, "jobs", **BATCH)
    doomed_templates, kept = _of_class(local, "batch"), _of_class(local, "default")
    assert len(doomed_templates) == len(kept) == 1

    assert _gc(local)["finalizedNodeClasses"] == []
    for name in ("default", "batch"):  # gc puts Karpenter's finalizer on every class
        assert kube.get(kc.EC2_NODE_CLASSES, name)["metadata"]["finalizers"] == [FINALIZER]

    kube.delete(kc.EC2_NODE_CLASSES, "batch")
    result = _gc(local)
    assert result["finalizedNodeClasses"] == []
    assert result["deletedLaunchTemplates"] == []
    assert kube.get(kc.EC2_NODE_CLASSES, "batch")["metadata"]["deletionTimestamp"]  # kept while its NodeClaim lives
    waiting = [
        e
        for e in local.kube_server.objects("v1", "Event", "default")
        if e["involvedObject"]["kind"] == "EC2NodeClass" and e["involvedObject"]["name"] == "batch"
    ]
    assert [(e["reason"], e["message"]) for e in waiting] == [
        ("WaitingOnNodeClaimTermination", f"Waiting on NodeClaim termination for {doomed}")
    ]
    ready = _condition(kube.get(kc.NODE_POOLS, "batch"), "NodeClassReady")
    assert (ready["status"], ready["reason"]) == ("False", "NodeClassTerminating")  # nothing launches from it

    _terminate(local, doomed)
    result = _gc(local)  # no grace: the class's NodeClaims are gone, so are its templates
    assert result["finalizedNodeClasses"] == ["batch"]
    assert result["deletedLaunchTemplates"] == sorted(doomed_templates)
    assert _of_class(local, "batch") == set()
    with pytest.raises(NotFound):
        kube.get(kc.EC2_NODE_CLASSES, "batch")
    assert _of_class(local, "default") == kept
    assert set(FOREIGN) <= set(_templates(local))


def test_a_launch_whose_template_gc_deletes_before_create_fleet_makes_it_again(local: LocalNodeflow) -> None:
    deleted: list[str] = []

    def gc_meanwhile(_asked: list[tuple[str, str]]) -> None:
        """Runs inside the first CreateFleet call, before EC2 reads the template: deletes it as gc would."""
        if deleted:
            return
        for template in list_launch_templates(local.clients.ec2, local.cluster_name):
            assert delete_launch_template(local.clients.ec2, template)
            deleted.append(template.name)

    local.faults.before = gc_meanwhile
    claim = _launch(local, "web")
    assert len(deleted) == 1
    assert _of_class(local, "default") == set(deleted)  # made again under the same name
    (instance,) = local.instances()
    assert {t["Key"]: t["Value"] for t in instance["Tags"]}["karpenter.sh/nodeclaim"] == claim
