"""Capacity reservations through the deployed path (moto with DescribeCapacityReservations served in-process, the
real launch workflow, the test API server): garbage collection writes the EC2NodeClass's
status.capacityReservations as Karpenter does (a capacity block within 40 minutes of its end ``expiring``) and
rewrites nothing when nothing changed; a NodeClaim that allows reserved capacity launches into the reservation
(CreateFleet through a launch template that targets it) and gets capacity type ``reserved`` and the reservation
labels, on the NodeClaim and the Node; an exhausted reservation is marked unavailable and the launch falls back to
on-demand."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sandbox.nodeflow import LocalNodeflow
from tests.functional.capacity_reservations import reservation, serve_capacity_reservations

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
    local.kube_server.cluster.update(rt, None, name, obj)


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
