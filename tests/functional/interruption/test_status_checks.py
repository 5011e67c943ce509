"""EC2 status-check failures through the real interruption handler and terminate workflow: the scheduled run
polls DescribeInstanceStatus (moto answers from a table here: it cannot impair an instance), a failed instance
status check replaces the node forcefully (a PodDisruptionBudget that allows nothing does not hold the drain)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses.instances import InstanceResponse

from nodeflow.kube.client import PDBS, PODS, KubeClient
from sandbox.nodeflow import LocalNodeflow
from sandbox.stepfunctions import wait_for_execution
from tests.functional.emf import metric_records
from tests.functional.interruption.test_end_to_end import _execution, _instance, _launch, _state, _wait

SCHEDULED = {"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {}}


class StatusTable:
    """What DescribeInstanceStatus answers: entries (boto3's shape) matched against the request's filters."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.requests: list[dict[str, list[str]]] = []
        self.unauthorized = False

    def answer(self, response: InstanceResponse) -> ActionResult:
        filters = response._filters_from_querystring()
        self.requests.append(filters)
        if self.unauthorized:
            raise EC2ClientError("UnauthorizedOperation", "You are not authorized to perform this operation.")
        out = []
        for e in self.entries:
            ok = all(
                (e.get("InstanceStatus") or {}).get("Status") in values
                if name == "instance-status.status"
                else (e.get("SystemStatus") or {}).get("Status") in values
                if name == "system-status.status"
                else any(ev["Code"] in values for ev in e.get("Events") or [])
                for name, values in filters.items()
            )
            if ok:
                out.append(e)
        return ActionResult({"InstanceStatuses": out})


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> StatusTable:
    t = StatusTable()
    monkeypatch.setattr(InstanceResponse, "describe_instance_status", lambda self: t.answer(self))
    return t


def _impaired(iid: str, minutes: float) -> dict[str, Any]:
    since = datetime.now(UTC) - timedelta(minutes=minutes)
    return {
        "InstanceId": iid,
        "AvailabilityZone": "us-east-1a",
        "InstanceState": {"Code": 16, "Name": "running"},
        "InstanceStatus": {
            "Status": "impaired",
            "Details": [{"Name": "reachability", "Status": "failed", "ImpairedSince": since}],
        },
        "SystemStatus": {"Status": "ok", "Details": [{"Name": "reachability", "Status": "passed"}]},
    }


def _blocking_pdb(local: LocalNodeflow) -> None:
    kube = local.kube_server
    client = KubeClient(kube.api_client())
    for p in kube.objects("v1", "Pod", "default"):
        ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        client.patch(PODS, p["metadata"]["name"], ready, namespace="default", subresource="status")
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}},
    }
    client.create(PDBS, pdb, namespace="default")
    _wait(
        lambda: (
            (kube.get("policy/v1", "PodDisruptionBudget", "web", "default").get("status") or {}).get(
                "disruptionsAllowed"
            )
            == 0
        ),
        what="the PDB status",
    )


def test_a_failed_instance_status_check_replaces_the_node_forcefully(
    make_local: Callable[..., LocalNodeflow], table: StatusTable, capfd: pytest.CaptureFixture[str]
) -> None:
    local = make_local()
    claim = _launch(local, "web")
    name, node, iid = claim["metadata"]["name"], claim["status"]["nodeName"], _instance(claim)
    _blocking_pdb(local)

    table.entries = [_impaired(iid, 1)]  # impaired for one minute: below the two-minute threshold
    quiet = local.invoke("interruption", SCHEDULED)["result"]["statusChecks"]
    assert quiet["messages"] == []
    assert [sorted(r) for r in table.requests] == [["instance-status.status"], ["system-status.status"], ["event.code"]]

    table.entries = [_impaired(iid, 5), _impaired("i-0fedcba9876543210", 5)]  # the second is not ours
    capfd.readouterr()
    result = local.invoke("interruption", SCHEDULED)["result"]["statusChecks"]
    ours, other = result["messages"]
    assert (ours["kind"], ours["terminationsStarted"]) == ("InstanceStatus", [name])
    assert other["ignored"] == ["i-0fedcba9876543210: no NodeClaim of this cluster has it"]
    emf = metric_records(capfd.readouterr().out)
    disrupted = [m for m in emf if "karpenter_nodeclaims_disrupted_total" in m]
    assert [m["reason"] for m in disrupted] == ["instance_status"]
    unhealthy = [m for m in emf if "karpenter_interruption_instance_status_unhealthy_total" in m]
    assert [m["category"] for m in unhealthy] == ["InstanceStatus"]

    done = wait_for_execution(local.clients.sfn, _execution(local, name), timeout=60)
    assert done["status"] == "SUCCEEDED", local.trace(done["executionArn"]).render()
    assert '"InstanceStatusFailed"' in done["input"]
    states = [s.name for s in local.trace(done["executionArn"]).states]
    assert "ContinuedAsNew" not in states  # the PDB did not hold the drain: pods were deleted at once
    assert _state(local, iid) in ("shutting-down", "terminated")
    assert local.kube_server.objects("karpenter.sh/v1", "NodeClaim") == []
    assert node not in {n["metadata"]["name"] for n in local.kube_server.objects("v1", "Node")}
    events = {(e["involvedObject"]["kind"], e.get("reason")) for e in local.kube_server.objects("v1", "Event")}
    assert ("Node", "InstanceUnhealthy") in events


def test_without_the_permission_nothing_happens(make_local: Callable[..., LocalNodeflow], table: StatusTable) -> None:
    local = make_local()
    table.unauthorized = True
    result = local.invoke("interruption", SCHEDULED)["result"]
    assert result == {"statusChecks": "UnauthorizedOperation"}
