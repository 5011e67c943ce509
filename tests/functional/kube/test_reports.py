"""Each object's report (status, conditions, Events) stands on its own (``nodeflow.kube.reports``): a write the API
server refuses (422) or fails (500, 409, 403), injected through the control plane's proxy, is logged and counted, and
every other object's status and Events are still written (issue 26, item 8)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodeflow.catalog.offline import load_offline
from nodeflow.disruption.model import Snapshot as DisruptionSnapshot
from nodeflow.disruption.round import prepare
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.kube.events import EventRecorder
from nodeflow.kube.reports import Reports
from nodeflow.kube.snapshot import take_snapshot
from nodeflow.kube.status import update_node_pool_statuses
from nodeflow.lifecycle.cleanup import CleanupDeps, collect_garbage
from nodeflow.lifecycle.disruption_round import DisruptionDeps, mark_conditions, record_pod_events
from nodeflow.lifecycle.nodeclass import reconcile_status
from sandbox.controlplane.proxy import Fault
from tests.functional.kube.conftest import node, node_claim, node_pool

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
STATUS = "/apis/karpenter.sh/v1/{}/{}/status"


def _conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in (obj.get("status") or {}).get("conditions") or []}


def _events(kube: KubeClient, name: str) -> list[tuple[str, str]]:
    return sorted(
        (e["type"], e["reason"])
        for e in kube.list_items(kc.EVENTS, namespace="default")
        if e["involvedObject"]["name"] == name
    )


def _seed(kube: KubeClient, server: Any) -> None:
    """As the issue: one invalid NodePool (its status write is refused) and one naming a missing EC2NodeClass."""
    bad = node_pool("a-invalid")
    del bad["spec"]["template"]["spec"]["nodeClassRef"]  # required by the CRD: stored before, refused on every write
    server.store_bypassing_admission(bad)
    kube.create(kc.NODE_POOLS, node_pool("b-orphan", node_class="missing"))


def test_an_invalid_node_pool_still_gets_its_status_and_event(kube: KubeClient, server: Any) -> None:
    """A real API server validates only the status on a /status write (the old imitation validated the whole object and
    refused it): the NodePool stored before its CRD's rule gets its ValidationSucceeded=False condition, the
    orphan its NodeClassReady=False, both their Events, and nothing is logged as not written."""
    _seed(kube, server)
    logged: list[tuple[str, dict[str, Any]]] = []
    recorder = EventRecorder(kube, clock=lambda: T0)
    reconcile_status(
        kube, recorder, take_snapshot(kube), T0, log=lambda message, extra: logged.append((message, extra))
    )

    orphan = kube.get(kc.NODE_POOLS, "b-orphan")
    assert _conditions(orphan)["NodeClassReady"] == ("False", "NodeClassNotFound")
    assert _events(kube, "b-orphan") == [("Warning", "NodeClassNotReady")]
    invalid = kube.get(kc.NODE_POOLS, "a-invalid")
    assert _conditions(invalid)["ValidationSucceeded"] == ("False", "ValidationFailed")
    assert "spec.template.spec.nodeClassRef" in next(
        c["message"] for c in invalid["status"]["conditions"] if c["type"] == "ValidationSucceeded"
    )
    assert _events(kube, "a-invalid") == [("Warning", "ValidationFailed")]
    assert logged == []


@pytest.mark.parametrize(
    ("code", "reason"), [(500, "InternalError"), (409, "Conflict"), (403, "Forbidden"), (422, "Invalid")]
)
def test_a_failed_status_write_is_counted_and_the_others_are_written(
    kube: KubeClient, server: Any, code: int, reason: str
) -> None:
    for name in ("a-first", "b-second", "c-third"):
        kube.create(kc.NODE_POOLS, node_pool(name, node_class="missing"))

    def refuse(method: str, path: str, query: dict[str, str]) -> None:
        if method == "PATCH" and path == STATUS.format("nodepools", "b-second"):
            raise Fault(code, reason, f"injected {code}")

    server.before_request = refuse
    reports = Reports()
    reconcile_status(kube, EventRecorder(kube, clock=lambda: T0), take_snapshot(kube), T0, reports=reports)
    assert [f.name for f in reports.failures] == ["NodePool/b-second"]
    for name in ("a-first", "c-third"):
        assert _conditions(kube.get(kc.NODE_POOLS, name))["NodeClassReady"] == ("False", "NodeClassNotFound")
    assert "status" not in kube.get(kc.NODE_POOLS, "b-second")
    for name in ("a-first", "b-second", "c-third"):
        assert _events(kube, name) == [("Warning", "NodeClassNotReady")], name
    # the same on its own, and the next pass writes what was refused
    assert update_node_pool_statuses(kube, take_snapshot(kube), now=T0, reports=reports) == {}
    assert reports.failed == 2
    server.before_request = None
    assert set(update_node_pool_statuses(kube, take_snapshot(kube), now=T0)) == {"b-second"}
    assert _conditions(kube.get(kc.NODE_POOLS, "b-second"))["NodeClassReady"] == ("False", "NodeClassNotFound")


def _claimed_node(kube: KubeClient, name: str) -> None:
    """A launched, initialized NodeClaim of NodePool default and its Node (a disruption candidate)."""
    body = node(name, cpu="2", memory="8Gi")
    body["metadata"]["labels"].update(
        {
            "node.kubernetes.io/instance-type": "m5.large",
            "topology.kubernetes.io/zone": "us-east-1a",
            "karpenter.sh/capacity-type": "on-demand",
            "karpenter.sh/initialized": "true",
            "karpenter.sh/registered": "true",
        }
    )
    kube.create(kc.NODES, body)
    claim = node_claim(f"{name}-claim")
    claim["metadata"]["labels"].update({k: v for k, v in body["metadata"]["labels"].items() if "/" in k})
    kube.create(kc.NODE_CLAIMS, claim)
    status = {
        "providerID": body["spec"]["providerID"],
        "nodeName": name,
        "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": "2026-01-01T11:00:00Z"}
            for t in ("Launched", "Registered", "Initialized")
        ],
    }
    kube.patch(kc.NODE_CLAIMS, f"{name}-claim", {"status": status}, subresource="status")


def _disruption_deps(kube: KubeClient, logged: list[Any]) -> DisruptionDeps:
    return DisruptionDeps(
        kube=kube,
        catalog=load_offline("us-east-1"),
        unavailable=lambda _now: frozenset(),
        start_terminate=lambda _claim, _reason: False,
        recorder=EventRecorder(kube, clock=lambda: T0),
        now=lambda: T0,
        sleep=lambda _s: None,
        log=lambda message, extra: logged.append((message, extra)),
    )


def test_node_claim_conditions_and_timers_are_written_claim_by_claim(kube: KubeClient, server: Any) -> None:
    kube.create(kc.NODE_POOLS, node_pool("default", disruption={"consolidateAfter": "0s"}))
    for name in ("node-a", "node-b", "node-c"):
        _claimed_node(kube, name)

    def refuse(method: str, path: str, query: dict[str, str]) -> None:
        if method == "PATCH" and path == STATUS.format("nodeclaims", "node-b-claim"):
            raise Fault.internal("injected 500")

    server.before_request = refuse
    logged: list[Any] = []
    deps = _disruption_deps(kube, logged)
    snap = take_snapshot(kube)
    prepared = prepare(DisruptionSnapshot(state=snap.state, pdbs=snap.pdbs), deps.catalog, T0)
    assert mark_conditions(deps, prepared) == 2
    for name in ("node-a", "node-c"):
        assert "Consolidatable" in _conditions(kube.get(kc.NODE_CLAIMS, f"{name}-claim")), name
    assert "Consolidatable" not in _conditions(kube.get(kc.NODE_CLAIMS, "node-b-claim"))

    events = dict.fromkeys(("node-a", "node-b", "node-c"), T0)
    reports = Reports(deps.log)
    assert record_pod_events(deps, events, reports) == ["node-a-claim", "node-c-claim"]
    assert [f.name for f in reports.failures] == ["NodeClaim/node-b-claim"]
    assert [m for m, _ in logged] == ["NodeClaim conditions not written", "NodeClaim lastPodEventTime not written"]


def test_garbage_collection_goes_on_past_a_refused_event_or_deletion(
    kube: KubeClient, server: Any, aws_env: None
) -> None:
    """NodeClaims whose instance is gone (EC2 knows none of them): the first InstanceGone Event is refused and the
    deletion of node-b's NodeClaim fails; every other NodeClaim is still recorded and deleted."""
    import boto3
    from moto import mock_aws

    for name in ("node-a", "node-b", "node-c"):
        _claimed_node(kube, name)
    refused: list[str] = []

    def refuse(method: str, path: str, query: dict[str, str]) -> None:
        if method == "POST" and path == "/api/v1/namespaces/default/events" and not refused:
            refused.append(path)
            raise Fault.internal("injected 500")
        if method == "DELETE" and path == "/apis/karpenter.sh/v1/nodeclaims/node-b-claim":
            raise Fault.internal("injected 500")

    server.before_request = refuse
    logged: list[Any] = []
    with mock_aws():
        deps = CleanupDeps(
            kube=kube,
            ec2=boto3.client("ec2", region_name="us-east-1"),
            recorder=EventRecorder(kube, clock=lambda: T0),
            now=lambda: T0,
            cluster_name="demo",
            log=lambda message, extra: logged.append((message, extra)),
        )
        result = collect_garbage(deps, grace_seconds=0)
    assert sorted(result["deletedNodeClaims"]) == ["node-a-claim", "node-c-claim"]
    assert result["reportErrors"] == 2
    assert sorted(m for m, _ in logged) == ["NodeClaim deletion not written", "NodeClaim event not written"]
    recorded = [
        n for n in ("node-a", "node-b", "node-c") if _events(kube, f"{n}-claim") == [("Normal", "InstanceGone")]
    ]
    assert len(recorded) == 2
