"""translate: Kubernetes object + known compact state -> PROTOCOL.md events, per kind."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nodeflow_agent.translate import (
    FAMILY,
    RESOURCES,
    NodeClaimState,
    NodeState,
    PodState,
    delete_ec2nodeclass,
    delete_node,
    delete_nodeclaim,
    delete_nodepool,
    delete_pod,
    event_id,
    pod_spec,
    pod_unschedulable,
    translate_ec2nodeclass,
    translate_node,
    translate_nodeclaim,
    translate_nodepool,
    translate_pod,
)

NOW = "2026-11-21T10:00:00.000Z"
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}


def pod(
    name: str = "web-1",
    *,
    rv: str = "10",
    node: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
    phase: str = "Pending",
    owner: dict[str, Any] | None = None,
    deleting: bool = False,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": f"uid-{name}",
        "resourceVersion": rv,
        "labels": {"app": "web"},
    }
    if owner:
        meta["ownerReferences"] = [owner]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-21T09:00:00Z"
    body: dict[str, Any] = {
        "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}],
        "schedulerName": "default-scheduler",
        "priority": 0,
        **(spec or {}),
    }
    if node:
        body["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": body,
        "status": {"phase": phase, "conditions": [UNSCHEDULABLE] if conditions is None else conditions},
    }


def kinds(events: list[Any]) -> list[str]:
    return [e.kind for e in events]


# ------------------------------------------------------------------------------------------ pods


def test_unschedulable_rule_follows_karpenter() -> None:
    assert pod_unschedulable(pod())
    assert not pod_unschedulable(pod(node="n1"))
    assert not pod_unschedulable(pod(deleting=True))
    assert not pod_unschedulable(pod(phase="Succeeded"))
    assert not pod_unschedulable(pod(phase="Failed"))
    assert not pod_unschedulable(pod(conditions=[]))
    assert not pod_unschedulable(pod(conditions=[{**UNSCHEDULABLE, "status": "True"}]))
    assert not pod_unschedulable(pod(conditions=[{**UNSCHEDULABLE, "reason": "SchedulingGated"}]))
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d", "controller": True}
    assert not pod_unschedulable(pod(owner=daemonset))
    replicaset = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9c", "uid": "r", "controller": True}
    assert pod_unschedulable(pod(owner=replicaset))


def test_pod_becoming_unschedulable_is_forwarded_with_spec() -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9c", "uid": "r", "controller": True}
    spec = {
        "priorityClassName": "high",
        "priority": 1000,
        "nodeSelector": {"kubernetes.io/arch": "arm64"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "initContainers": [
            {"name": "init", "image": "x", "resources": {"requests": {"memory": "1Gi"}}, "restartPolicy": "Always"}
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        ],
        "serviceAccountName": "web",
    }
    pending = pod(conditions=[], owner=owner, spec=spec)
    state, events = translate_pod(pending, None, "watch", NOW)
    assert (state, events) == (None, [])

    state, events = translate_pod(pod(owner=owner, spec=spec, rv="11"), None, "watch", NOW)
    assert state == PodState("default", "web-1", True, "")
    [event] = events
    assert event.kind == "PodUnschedulable"
    assert event.reason == "watch"
    assert event.time == NOW
    assert event.id == event_id("PodUnschedulable", "uid-web-1", "11")
    obj = event.object
    assert obj["namespace"] == "default"
    assert obj["name"] == "web-1"
    assert obj["uid"] == "uid-web-1"
    assert obj["resourceVersion"] == "11"
    assert obj["labels"] == {"app": "web"}
    assert (obj["ownerKind"], obj["ownerName"]) == ("ReplicaSet", "web-7d9c")
    assert (obj["priority"], obj["priorityClassName"], obj["schedulerName"]) == (1000, "high", "default-scheduler")
    assert obj["message"] == "0/3 nodes"
    assert obj["spec"] == {
        "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}],
        "initContainers": [{"name": "init", "resources": {"requests": {"memory": "1Gi"}}, "restartPolicy": "Always"}],
        "nodeSelector": {"kubernetes.io/arch": "arm64"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "priorityClassName": "high",
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        ],
    }
    assert event.key == ("Pod", "uid-web-1")


def test_still_unschedulable_pod_is_not_resent_except_on_resync() -> None:
    prev = PodState("default", "web-1", True, "")
    state, events = translate_pod(pod(rv="12"), prev, "watch", NOW)
    assert (state, events) == (prev, [])
    state, events = translate_pod(pod(rv="12"), prev, "relist", NOW)
    assert events == []
    _, events = translate_pod(pod(rv="12"), prev, "resync", NOW, "1700000000")
    [event] = events
    assert (event.kind, event.reason) == ("PodUnschedulable", "resync")
    assert event.id == event_id("PodUnschedulable", "uid-web-1", "12", "1700000000")
    assert event.id != event_id("PodUnschedulable", "uid-web-1", "12")
    _, again = translate_pod(pod(rv="12"), prev, "resync", NOW, "1700000300")
    assert again[0].id != event.id  # every resync round re-sends


@pytest.mark.parametrize(
    "excluded",
    [
        pod(owner={"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d", "controller": True}),
        pod(owner={"apiVersion": "v1", "kind": "Node", "name": "ip-10-0-0-1", "uid": "n", "controller": True}),
        pod(phase="Failed"),
        pod(deleting=True),
        {**pod(), "status": {**pod()["status"], "nominatedNodeName": "ip-10-0-0-1"}},
    ],
    ids=["daemonset", "mirror", "terminal", "terminating", "preempting"],
)
def test_excluded_pods_produce_no_unschedulable_event(excluded: dict[str, Any]) -> None:
    state, events = translate_pod(excluded, None, "watch", NOW)
    assert (state, events) == (None, [])


def test_terminating_unschedulable_pod_is_forgotten_silently() -> None:
    state, events = translate_pod(pod(deleting=True), PodState("default", "web-1", True, ""), "watch", NOW)
    assert (state, events) == (None, [])


def test_pod_bound_when_node_name_becomes_set() -> None:
    prev = PodState("default", "web-1", True, "")
    bound = pod(node="node-a", rv="13", conditions=[{"type": "PodScheduled", "status": "True"}])
    state, events = translate_pod(bound, prev, "watch", NOW)
    assert state == PodState("default", "web-1", False, "node-a")
    [event] = events
    assert event.kind == "PodBound"
    assert event.object == {
        "namespace": "default",
        "name": "web-1",
        "uid": "uid-web-1",
        "resourceVersion": "13",
        "nodeName": "node-a",
    }
    # once bound, later changes do not repeat it
    assert translate_pod(bound, state, "watch", NOW)[1] == []
    # a pod created bound and seen by the watch counts; already-bound pods found by a LIST are not announced
    assert kinds(translate_pod(bound, None, "watch", NOW)[1]) == ["PodBound"]
    state, events = translate_pod(bound, None, "relist", NOW)
    assert (state, events) == (PodState("default", "web-1", False, "node-a"), [])
    # but a LIST finding a pod known unbound reports the binding it missed
    assert kinds(translate_pod(bound, prev, "relist", NOW)[1]) == ["PodBound"]


def test_pod_deleted_only_when_it_was_bound() -> None:
    bound = pod(node="node-a", rv="20", conditions=[])
    [event] = delete_pod("uid-web-1", PodState("default", "web-1", False, "node-a"), bound, "watch", NOW, "21")
    assert event.kind == "PodDeleted"
    assert event.object["nodeName"] == "node-a"
    assert event.id == event_id("PodDeleted", "uid-web-1", "21")
    assert delete_pod("uid-web-1", PodState("default", "web-1", True, ""), pod(), "watch", NOW, "21") == []
    assert delete_pod("uid-web-1", None, pod(conditions=[]), "watch", NOW, "21") == []
    # reconciled deletion (the object is gone: only the known state is left)
    [event] = delete_pod("uid-web-1", PodState("default", "web-1", False, "node-a"), None, "relist", NOW, "30")
    assert event.object == {"namespace": "default", "name": "web-1", "uid": "uid-web-1", "nodeName": "node-a"}
    assert event.reason == "relist"


def test_pod_spec_omits_absent_fields() -> None:
    assert pod_spec({"spec": {"containers": [{"name": "a", "image": "x"}]}}) == {
        "containers": [{"name": "a", "resources": {}}]
    }
    assert pod_spec({}) == {"containers": []}


# ----------------------------------------------------------------------------------------- nodes


def node(name: str = "node-a", *, ready: str | None = "True", rv: str = "5", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": rv,
        "labels": {"karpenter.sh/nodepool": "default"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-21T09:00:00Z"
    conditions = [{"type": "Ready", "status": ready}] if ready is not None else []
    return {
        "metadata": meta,
        "spec": {"providerID": "aws:///us-east-1a/i-0123"},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, *conditions]},
    }


def test_node_appearance_and_ready_transitions() -> None:
    state, events = translate_node(node(ready=None), None, "relist", NOW)
    assert state == NodeState("node-a", "Unknown", False, "aws:///us-east-1a/i-0123", "default")
    [event] = events
    assert event.kind == "NodeNotReady"
    assert event.object == {
        "name": "node-a",
        "uid": "uid-node-a",
        "resourceVersion": "5",
        "providerID": "aws:///us-east-1a/i-0123",
        "nodePool": "default",
        "ready": "Unknown",
        "unschedulable": False,
    }
    state, events = translate_node(node(rv="6"), state, "watch", NOW)
    assert kinds(events) == ["NodeReady"]
    assert events[0].object["ready"] == "True"
    # other status updates (heartbeats, labels) are not events
    assert translate_node(node(rv="7"), state, "watch", NOW)[1] == []
    state, events = translate_node(node(ready="False", rv="8"), state, "watch", NOW)
    assert kinds(events) == ["NodeNotReady"]
    state, events = translate_node(node(ready="Unknown", rv="9"), state, "watch", NOW)
    assert kinds(events) == ["NodeNotReady"]
    assert events[0].object["ready"] == "Unknown"


def test_node_deleting_once_and_deleted() -> None:
    state, _ = translate_node(node(), None, "relist", NOW)
    state, events = translate_node(node(deleting=True, rv="6"), state, "watch", NOW)
    assert kinds(events) == ["NodeDeleting"]
    assert events[0].object == {
        "name": "node-a",
        "uid": "uid-node-a",
        "resourceVersion": "6",
        "providerID": "aws:///us-east-1a/i-0123",
        "nodePool": "default",
    }
    assert translate_node(node(deleting=True, rv="7"), state, "watch", NOW)[1] == []
    [event] = delete_node("uid-node-a", state, None, "relist", NOW, "99")
    assert event.kind == "NodeDeleted"
    assert event.object == {
        "name": "node-a",
        "uid": "uid-node-a",
        "providerID": "aws:///us-east-1a/i-0123",
        "nodePool": "default",
    }
    assert kinds(delete_node("uid-node-a", None, node(rv="8"), "watch", NOW, "8")) == ["NodeDeleted"]
    assert delete_node("uid-x", None, None, "relist", NOW, "8") == []


# ------------------------------------------------------------------------- NodePools, EC2NodeClasses


@pytest.mark.parametrize(
    ("translate", "delete", "prefix"),
    [
        (translate_nodepool, delete_nodepool, "NodePool"),
        (translate_ec2nodeclass, delete_ec2nodeclass, "EC2NodeClass"),
    ],
)
def test_generation_only(translate: Any, delete: Any, prefix: str) -> None:
    obj = {"metadata": {"name": "default", "uid": "u1", "resourceVersion": "3", "generation": 1}, "status": {}}
    state, events = translate(obj, None, "relist", NOW)
    assert kinds(events) == [f"{prefix}Changed"]
    assert events[0].object == {"name": "default", "uid": "u1", "resourceVersion": "3", "generation": 1}
    status_write = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "4"}, "status": {"conditions": []}}
    assert translate(status_write, state, "watch", NOW) == (state, [])
    spec_write = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "5", "generation": 2}}
    state, events = translate(spec_write, state, "watch", NOW)
    assert kinds(events) == [f"{prefix}Changed"]
    assert events[0].object["generation"] == 2
    [event] = delete("u1", state, None, "relist", NOW, "9")
    assert event.kind == f"{prefix}Deleted"
    assert event.object == {"name": "default", "uid": "u1", "generation": 2}


# ------------------------------------------------------------------------------------- NodeClaims


def nodeclaim(rv: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "default-abcde",
            "uid": "nc1",
            "resourceVersion": rv,
            "labels": {"karpenter.sh/nodepool": "default"},
            **({"deletionTimestamp": "2026-11-21T09:00:00Z"} if status.pop("deleting", False) else {}),
        },
        "spec": {"requirements": []},
        "status": status,
    }


def test_nodeclaim_compact_field_changes() -> None:
    state, events = translate_nodeclaim(nodeclaim("1"), None, "watch", NOW)
    assert state == NodeClaimState("default-abcde", "default", "", "", (), False)
    assert kinds(events) == ["NodeClaimChanged"]
    assert events[0].object == {
        "name": "default-abcde",
        "uid": "nc1",
        "resourceVersion": "1",
        "nodePool": "default",
        "providerID": None,
        "nodeName": None,
        "conditions": {},
    }
    launched = nodeclaim(
        "2",
        providerID="aws:///us-east-1a/i-1",
        conditions=[{"type": "Launched", "status": "True", "lastTransitionTime": "t1"}],
    )
    state, events = translate_nodeclaim(launched, state, "watch", NOW)
    assert kinds(events) == ["NodeClaimChanged"]
    assert events[0].object["conditions"] == {"Launched": "True"}
    assert events[0].object["providerID"] == "aws:///us-east-1a/i-1"
    # a condition's message or transition time changing is not a compact change
    same = nodeclaim(
        "3",
        providerID="aws:///us-east-1a/i-1",
        conditions=[{"type": "Launched", "status": "True", "lastTransitionTime": "t2", "message": "m"}],
        allocatable={"cpu": "2"},
    )
    assert translate_nodeclaim(same, state, "watch", NOW) == (state, [])
    registered = nodeclaim(
        "4",
        providerID="aws:///us-east-1a/i-1",
        nodeName="ip-10-0-0-1",
        conditions=[{"type": "Launched", "status": "True"}, {"type": "Registered", "status": "True"}],
    )
    state, events = translate_nodeclaim(registered, state, "watch", NOW)
    assert events[0].object["nodeName"] == "ip-10-0-0-1"
    deleting = nodeclaim("5", deleting=True, **registered["status"])
    state, events = translate_nodeclaim(deleting, state, "watch", NOW)
    assert kinds(events) == ["NodeClaimDeleting"]
    assert events[0].object == {
        "name": "default-abcde",
        "uid": "nc1",
        "resourceVersion": "5",
        "nodePool": "default",
        "providerID": "aws:///us-east-1a/i-1",
        "nodeName": "ip-10-0-0-1",
    }
    assert translate_nodeclaim(deleting, state, "watch", NOW)[1] == []
    [event] = delete_nodeclaim("nc1", state, None, "relist", NOW, "9")
    assert event.kind == "NodeClaimDeleted"
    assert event.object == {
        "name": "default-abcde",
        "uid": "nc1",
        "nodePool": "default",
        "providerID": "aws:///us-east-1a/i-1",
        "nodeName": "ip-10-0-0-1",
    }


# ------------------------------------------------------------------------------------------- ids


def test_event_ids_are_deterministic_and_valid() -> None:
    a = translate_pod(pod(rv="11"), None, "watch", NOW)[1][0]
    b = translate_pod(pod(rv="11"), None, "relist", "2030-01-01T00:00:00.000Z")[1][0]
    assert a.id == b.id  # same (kind, uid, resourceVersion): the webhook de-duplicates
    c = translate_pod(pod(rv="12"), None, "watch", NOW)[1][0]
    assert c.id != a.id
    assert re.fullmatch(r"[A-Za-z0-9_-]{16,64}", a.id)
    assert event_id("PodBound", "u", "1") != event_id("PodUnschedulable", "u", "1")
    assert event_id("PodBound", "u", "1") == event_id("PodBound", "u", "1")


def test_every_resource_and_kind_is_registered() -> None:
    assert [r.name for r in RESOURCES] == ["pods", "nodes", "nodepools", "nodeclaims", "ec2nodeclasses"]
    assert len(FAMILY) == 14


def test_encoded_event_is_compact_json() -> None:
    event = translate_pod(pod(), None, "watch", NOW)[1][0]
    data = event.encode()
    assert b" " not in data.replace(b"0/3 nodes", b"")
    assert data.startswith(b'{"id":"')
