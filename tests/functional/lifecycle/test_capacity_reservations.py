"""Capacity reservations through the deployed path (moto with DescribeCapacityReservations served in-process, the
real launch workflow, the real control plane): garbage collection writes the EC2NodeClass's
status.capacityReservations as Karpenter does (a capacity block within 40 minutes of its end ``expiring``) and
rewrites nothing when nothing changed; a NodeClaim that allows reserved capacity launches into the reservation
(CreateFleet through a launch template that targets it) and gets capacity type ``reserved`` and the reservation
labels, on the NodeClaim and the Node; an exhausted reservation is marked unavailable, the NodeClaim pinned to it
fails and its pods are provisioned again on on-demand; nodes on a capacity block are drained and terminated 40
minutes before its end (the disruption Lambda, the terminate workflow) and their pods provisioned elsewhere."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeflow.handlers import runtime
from sandbox.controlplane.facade import wait_for
from sandbox.nodeflow import LocalNodeflow
from tests.functional.capacity_reservations import reservation, serve_capacity_reservations
from tests.functional.lifecycle.conftest import pending
from tests.realk8s.workloads import running

EC2 = "karpenter.k8s.aws/v1"
KARPENTER = "karpenter.sh/v1"
CR_LABELS = (
    "karpenter.k8s.aws/capacity-reservation-id",
    "karpenter.k8s.aws/capacity-reservation-type",
    "karpenter.k8s.aws/capacity-reservation-interruptible",
)


def _edit(local: LocalNodeflow, api_version: str, kind: str, name: str, edit: Callable[[dict[str, Any]], None]) -> None:
    rt = local.kube_server.resource_for(api_version, kind)
    obj = copy.deepcopy(local.kube_server.get(api_version, kind, name))
    edit(obj)
    local.kube_server.kube.replace(rt, name, obj)


def _select(local: LocalNodeflow, *terms: dict[str, Any]) -> None:
    _edit(
        local, EC2, "EC2NodeClass", "default", lambda o: o["spec"].update(capacityReservationSelectorTerms=list(terms))
    )


def _allow_reserved(local: LocalNodeflow, values: list[str]) -> None:
    def edit(pool: dict[str, Any]) -> None:
        for req in pool["spec"]["template"]["spec"]["requirements"]:
            if req["key"] == "karpenter.sh/capacity-type":
                req["values"] = values

    _edit(local, KARPENTER, "NodePool", "default", edit)


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_gc_writes_status_capacity_reservations(
    make_local: Callable[..., LocalNodeflow], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    ends = {"cr-0b10c": now + timedelta(minutes=30), "cr-0b20c": now + timedelta(hours=5)}
    serve_capacity_reservations(
        monkeypatch,
        [
            reservation("cr-0aaa", "m5.large", "us-east-1a", 2, Tags=[{"Key": "team", "Value": "ml"}]),
            *(
                reservation(
                    rid,
                    "p5.48xlarge",
                    "us-east-1b",
                    1,
                    ReservationType="capacity-block",
                    InstanceMatchCriteria="targeted",
                    EndDateType="limited",
                    EndDate=end,
                )
                for rid, end in ends.items()
            ),
            reservation("cr-0ccc", "m5.large", "us-east-1c", 1, Tags=[{"Key": "team", "Value": "web"}]),
        ],
    )
    local = make_local()
    _select(local, {"tags": {"team": "ml"}}, {"id": "cr-0b10c"}, {"id": "cr-0b20c"})
    local.collect_garbage()
    status = local.kube_server.get(EC2, "EC2NodeClass", "default")["status"]
    assert status["capacityReservations"] == [
        {
            "availabilityZone": "us-east-1a",
            "id": "cr-0aaa",
            "instanceMatchCriteria": "open",
            "instanceType": "m5.large",
            "interruptible": False,
            "ownerID": "123456789012",
            "reservationType": "default",
            "state": "active",
        },
        {
            "availabilityZone": "us-east-1b",
            "endTime": _stamp(ends["cr-0b10c"]),
            "id": "cr-0b10c",
            "instanceMatchCriteria": "targeted",
            "instanceType": "p5.48xlarge",
            "interruptible": False,
            "ownerID": "123456789012",
            "reservationType": "capacity-block",
            "state": "expiring",  # within 40 minutes of its end
        },
        {
            "availabilityZone": "us-east-1b",
            "endTime": _stamp(ends["cr-0b20c"]),
            "id": "cr-0b20c",
            "instanceMatchCriteria": "targeted",
            "instanceType": "p5.48xlarge",
            "interruptible": False,
            "ownerID": "123456789012",
            "reservationType": "capacity-block",
            "state": "active",
        },
    ]
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready["CapacityReservationsReady"] == "True"
    assert ready["Ready"] == "True"
    # nothing changed: the next run writes no status (every field the CRD keeps)
    path = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default/status"
    before = local.kube_server.count("PATCH", path)
    local.collect_garbage()
    assert local.kube_server.count("PATCH", path) == before


def _only_m5_large(local: LocalNodeflow, app: str, replicas: int = 1) -> None:
    pending(local, app, replicas, cpu="1", memory="2Gi", nodeSelector={"node.kubernetes.io/instance-type": "m5.large"})
    local.send_pending([f"default/{app}"])


def _template_data(local: LocalNodeflow, name: str) -> dict[str, Any]:
    versions = local.clients.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
    return versions[0]["LaunchTemplateData"]  # type: ignore[no-any-return]


def _wait_for_node(local: LocalNodeflow, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        for node in local.kube_server.objects("v1", "Node"):
            if node["metadata"]["name"] == name and node["metadata"].get("labels", {}).get("karpenter.sh/registered"):
                return node  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"node {name} did not register"
        time.sleep(0.1)


def test_a_nodeclaim_that_allows_reserved_launches_into_the_reservation(
    make_local: Callable[..., LocalNodeflow], monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_capacity_reservations(monkeypatch, [reservation("cr-0aaa", "m5.large", "us-east-1a", 2)])
    local = make_local()
    _select(local, {"id": "cr-0aaa"})
    _allow_reserved(local, ["reserved", "on-demand"])
    _only_m5_large(local, "train")
    local.provision()
    [done] = local.wait_for_executions()
    assert done["status"] == "SUCCEEDED"

    [claim] = local.kube_server.objects(KARPENTER, "NodeClaim")
    labels = claim["metadata"]["labels"]
    assert labels["karpenter.sh/capacity-type"] == "reserved"
    assert [labels[k] for k in CR_LABELS] == ["cr-0aaa", "default", "false"]
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    node = _wait_for_node(local, claim["status"]["nodeName"])
    assert node["metadata"]["labels"]["karpenter.sh/capacity-type"] == "reserved"
    assert [node["metadata"]["labels"][k] for k in CR_LABELS] == ["cr-0aaa", "default", "false"]

    # CreateFleet used a launch template that targets the reservation, on-demand
    [fleet] = local.clients.ec2.describe_fleets()["Fleets"]
    assert fleet["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    [config] = fleet["LaunchTemplateConfigs"]
    data = _template_data(local, config["LaunchTemplateSpecification"]["LaunchTemplateName"])
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0aaa"},
    }


def test_an_exhausted_reservation_is_marked_unavailable_and_the_launch_falls_back(
    make_local: Callable[..., LocalNodeflow], monkeypatch: pytest.MonkeyPatch
) -> None:
    served = serve_capacity_reservations(monkeypatch, [reservation("cr-0aaa", "m5.large", "us-east-1a", 1)])
    local = make_local()
    _select(local, {"id": "cr-0aaa"})
    _allow_reserved(local, ["reserved", "on-demand"])
    # EC2 has no capacity left for it (another account launched into it since it was described)
    local.faults.exhaust({("m5.large", "us-east-1a")})
    _only_m5_large(local, "train")
    local.provision()
    # the solver put the pod into the reservation (a NodeClaim pinned to it, as Karpenter); EC2 refused: the
    # reservation's offering is marked unavailable and the NodeClaim fails (NoCapacity), its pods go back
    [first] = local.wait_for_executions()
    assert first["status"] == "FAILED"
    assert local.faults.calls[0]["overrides"] == [("m5.large", "us-east-1a")]
    assert [c["outcome"] for c in local.faults.calls] == ["no-capacity"]
    assert ("m5.large", "us-east-1a", "reserved") in runtime.runtime().offerings.current(datetime.now(UTC))
    assert local.kube_server.objects(KARPENTER, "NodeClaim") == []
    # provisioned again: the solver no longer offers the reservation, the pod gets an on-demand node
    local.send_pending(["default/train"])
    local.provision()
    done = [d for d in local.wait_for_executions() if d["executionArn"] != first["executionArn"]]
    assert [d["status"] for d in done] == ["SUCCEEDED"]
    [claim] = local.kube_server.objects(KARPENTER, "NodeClaim")
    labels = claim["metadata"]["labels"]
    assert labels["karpenter.sh/capacity-type"] == "on-demand"
    assert not any(k in labels for k in CR_LABELS)
    assert served.fleet_targets == ["on-demand"]  # moto created only the on-demand fleet


def test_nodes_on_an_ending_capacity_block_are_drained_and_replaced(
    make_local: Callable[..., LocalNodeflow], monkeypatch: pytest.MonkeyPatch
) -> None:
    end = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=3)
    block = reservation(
        "cr-0b10c",
        "m5.large",
        "us-east-1b",
        1,
        ReservationType="capacity-block",
        InstanceMatchCriteria="targeted",
        EndDateType="limited",
        EndDate=end,
    )
    served = serve_capacity_reservations(monkeypatch, [block])
    local = make_local()
    _select(local, {"id": "cr-0b10c"})
    _allow_reserved(local, ["reserved", "on-demand"])
    _only_m5_large(local, "train")
    local.provision()
    [done] = local.wait_for_executions()
    assert done["status"] == "SUCCEEDED"
    [claim] = local.kube_server.objects(KARPENTER, "NodeClaim")
    name = claim["metadata"]["name"]
    assert [claim["metadata"]["labels"][k] for k in CR_LABELS] == ["cr-0b10c", "capacity-block", "false"]
    [fleet] = local.clients.ec2.describe_fleets()["Fleets"]
    assert served.fleet_targets == ["capacity-block"]  # CreateFleet bought it on the capacity-block market
    template = fleet["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
    assert _template_data(local, template)["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    node = claim["status"]["nodeName"]
    _wait_for_node(local, node)
    [pod] = running(local.kube_server, "train", 1)  # kube-scheduler bound it there
    assert pod["spec"]["nodeName"] == node

    # more than 40 minutes before the end: nothing happens
    local.collect_garbage()
    assert local.invoke("disruption", {"source": "aws.scheduler"})["result"]["capacityBlocksExpiring"] == []

    # 39 minutes before the end: the node is drained and terminated through the terminate workflow
    runtime.runtime().clock = lambda: end - timedelta(minutes=39)
    result = local.invoke("disruption", {"source": "aws.scheduler"})["result"]
    assert result["capacityBlocksExpiring"] == [name]
    [terminated] = local.wait_for_terminations()
    assert terminated["status"] == "SUCCEEDED"
    assert '"CapacityBlockExpiring"' in terminated["input"]
    assert json.loads(terminated["output"])["drain"]["passes"] >= 1
    # evicted: the pods still bound there are terminating (with the instance gone no kubelet confirms it; the pod
    # garbage collector deletes them once the Node is gone)
    left = [p for p in local.kube_server.objects("v1", "Pod", "default") if p["spec"].get("nodeName") == node]
    assert all(p["metadata"].get("deletionTimestamp") for p in left), left
    assert not [c for c in local.kube_server.objects(KARPENTER, "NodeClaim") if c["metadata"]["name"] == name]
    assert not local.instances()

    # its pods come back (the ReplicaSet controller) and are provisioned again, not on the ending block: on-demand
    def replaced() -> bool:
        pods = local.kube_server.list_items("v1", "Pod", "default", label_selector="app=train")
        return any(not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp") for p in pods)

    wait_for("the ReplicaSet controller to replace the evicted pod", replaced)
    local.send_pending(["default/train"])
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert len(created) == 1
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())
    replacement = local.kube_server.get(KARPENTER, "NodeClaim", created[0])
    assert replacement["metadata"]["labels"]["karpenter.sh/capacity-type"] == "on-demand"
