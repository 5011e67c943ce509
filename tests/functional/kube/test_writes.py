"""Writes against the real API server: NodeClaims, node operations, finalizers, evictions, deletes."""

from __future__ import annotations

import time
from typing import Any

import pytest

from nodeflow.api import labels as wk
from nodeflow.api.karpenter import NodeClaim
from nodeflow.api.meta import Taint
from nodeflow.kube import client as kc
from nodeflow.kube import writes
from nodeflow.kube.client import KubeClient
from nodeflow.kube.errors import AlreadyExists, TooManyRequests
from sandbox.controlplane.facade import wait_for
from tests.functional.kube.conftest import RUNNING, create_node, create_pod, node, node_claim, pod
from tests.realk8s.fixtures import NODE_MONITOR_GRACE_PERIOD

DISRUPTED = Taint(key=wk.TAINT_DISRUPTED, effect="NoSchedule")


def test_create_node_claim_is_idempotent(kube: KubeClient, server: Any) -> None:
    claim = NodeClaim.model_validate(node_claim("default-abc12"))
    first = writes.create_node_claim(kube, claim)
    assert first.metadata.uid
    assert first.metadata.resource_version
    again = writes.create_node_claim(kube, claim)  # e.g. the Lambda retried
    assert again.metadata.uid == first.metadata.uid
    assert again.metadata.resource_version == first.metadata.resource_version
    assert server.count("POST", "/apis/karpenter.sh/v1/nodeclaims") == 2


def test_create_node_claim_with_another_spec_under_the_same_name_fails(kube: KubeClient) -> None:
    writes.create_node_claim(kube, node_claim("default-abc12", instance_type="m5.large"))
    with pytest.raises(AlreadyExists, match="different spec"):
        writes.create_node_claim(kube, node_claim("default-abc12", instance_type="c5.xlarge"))


def test_patch_node_claim_status_uses_the_status_subresource(kube: KubeClient, server: Any) -> None:
    writes.create_node_claim(kube, node_claim("default-abc12"))
    status = {
        "providerID": "aws:///us-west-2a/i-0123",
        "capacity": {"cpu": "2", "memory": "8Gi"},
        "conditions": [
            {
                "type": "Launched",
                "status": "True",
                "reason": "Launched",
                "message": "",
                "lastTransitionTime": "2024-01-01T00:00:00Z",
            }
        ],
    }
    updated = writes.patch_node_claim_status(kube, "default-abc12", status)
    assert updated.status is not None
    assert updated.status.provider_id == "aws:///us-west-2a/i-0123"
    assert updated.status.condition("Launched") is not None
    assert server.count("PATCH", "/apis/karpenter.sh/v1/nodeclaims/default-abc12/status") == 1
    # a second identical patch changes nothing
    again = writes.patch_node_claim_status(kube, "default-abc12", status)
    assert again.status == updated.status


def _test_taints(n: Any) -> list[tuple[str, str | None, str]]:
    """The Node's taints but the node lifecycle controller's (``node.kubernetes.io/*``): the test Node has no kubelet,
    so the controller may mark it unreachable at any moment (after the grace period, or at once when it still holds
    the heartbeat of an earlier test's Node of the same name); add_taints and remove_taints must keep those anyway."""
    return [(t.key, t.value, t.effect) for t in n.spec.taints if not t.key.startswith("node.kubernetes.io/")]


def test_taints_add_and_remove_idempotently(kube: KubeClient, server: Any) -> None:
    create_node(kube, node("node-a"))
    startup = Taint(key="example.com/startup", value="x", effect="NoExecute")
    writes.add_taints(kube, "node-a", [startup])
    n = writes.add_taints(kube, "node-a", [DISRUPTED])
    assert _test_taints(n) == [("example.com/startup", "x", "NoExecute"), (wk.TAINT_DISRUPTED, None, "NoSchedule")]
    server.requests.clear()
    n = writes.add_taints(kube, "node-a", [DISRUPTED])  # already there: a GET, no write
    assert [m for m, _, _ in server.requests] == ["GET"]
    assert len(_test_taints(n)) == 2
    n = writes.add_taints(kube, "node-a", [Taint(key="example.com/startup", value="y", effect="NoExecute")])
    assert [v for k, v, _ in _test_taints(n) if k == "example.com/startup"] == ["y"]
    n = writes.remove_taints(kube, "node-a", [DISRUPTED])
    assert [k for k, _, _ in _test_taints(n)] == ["example.com/startup"]
    n = writes.remove_taints(kube, "node-a", [DISRUPTED])
    assert [k for k, _, _ in _test_taints(n)] == ["example.com/startup"]
    n = writes.remove_taints(kube, "node-a", ["example.com/startup"])
    assert _test_taints(n) == []


def test_labels_annotations_and_cordon(kube: KubeClient) -> None:
    kube.create(kc.NODES, node("node-a"))
    for _ in range(2):
        writes.set_labels(kube, kc.NODES, "node-a", {wk.LABEL_INITIALIZED: "true"})
        writes.set_annotations(kube, kc.NODES, "node-a", {wk.ANNOTATION_DO_NOT_DISRUPT: "true"})
    got = writes.get_node(kube, "node-a")
    assert got.labels[wk.LABEL_INITIALIZED] == "true"
    assert got.labels[wk.LABEL_NODEPOOL] == "default"  # other labels kept
    assert got.metadata.annotation(wk.ANNOTATION_DO_NOT_DISRUPT) == "true"
    writes.set_annotations(kube, kc.NODES, "node-a", {wk.ANNOTATION_DO_NOT_DISRUPT: None})
    assert writes.get_node(kube, "node-a").metadata.annotation(wk.ANNOTATION_DO_NOT_DISRUPT) is None
    assert writes.cordon(kube, "node-a").spec.unschedulable is True
    assert writes.cordon(kube, "node-a").spec.unschedulable is True
    assert writes.uncordon(kube, "node-a").spec.unschedulable is False
    assert writes.uncordon(kube, "node-a").spec.unschedulable is False


class _RacingClient(KubeClient):
    """After each of the first ``races`` GETs of the object, another writer updates it (stale resourceVersion)."""

    def __init__(self, inner: KubeClient, other: KubeClient, races: int) -> None:
        super().__init__(inner.api_client)
        self.other = other
        self.races = races
        self.gets = 0

    def get(self, resource: kc.Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = super().get(resource, name, namespace)
        self.gets += 1
        if self.races > 0:
            self.races -= 1
            self.other.patch(resource, name, {"metadata": {"labels": {"racer": str(self.gets)}}}, namespace=namespace)
        return obj


@pytest.mark.parametrize("resource", ["node", "nodeclaim"])
def test_finalizer_add_remove_survives_a_concurrent_update(
    kube: KubeClient, server: Any, api: Any, resource: str
) -> None:
    if resource == "node":
        rt, name = kc.NODES, "node-a"
        kube.create(kc.NODES, node("node-a"))
    else:
        rt, name = kc.NODE_CLAIMS, "default-abc12"
        writes.create_node_claim(kube, node_claim(name))
    racing = _RacingClient(kube, KubeClient(server.api_client()), races=2)
    sleeps: list[float] = []
    assert writes.add_finalizer(racing, rt, name, sleep=sleeps.append) is True
    assert racing.gets == 3
    assert len(sleeps) == 2
    obj = kube.get(rt, name)
    assert obj["metadata"]["finalizers"] == [wk.FINALIZER_TERMINATION]
    assert obj["metadata"]["labels"]["racer"] == "2"  # the other writer's change is kept
    assert writes.add_finalizer(kube, rt, name) is False  # idempotent
    assert kube.get(rt, name)["metadata"]["finalizers"] == [wk.FINALIZER_TERMINATION]

    writes.add_finalizer(kube, rt, name, "example.com/other")
    racing = _RacingClient(kube, KubeClient(server.api_client()), races=1)
    assert writes.remove_finalizer(racing, rt, name, sleep=sleeps.append) is True
    assert kube.get(rt, name)["metadata"]["finalizers"] == ["example.com/other"]
    assert writes.remove_finalizer(kube, rt, name) is False


def test_removing_the_last_finalizer_lets_a_deleting_object_go(kube: KubeClient) -> None:
    kube.create(kc.NODES, node("node-a"))
    writes.add_finalizer(kube, kc.NODES, "node-a")
    assert writes.delete(kube, kc.NODES, "node-a") is True
    assert kube.get(kc.NODES, "node-a")["metadata"]["deletionTimestamp"]
    assert writes.remove_finalizer(kube, kc.NODES, "node-a") is True
    assert writes.delete(kube, kc.NODES, "node-a") is False  # gone
    assert writes.remove_finalizer(kube, kc.NODES, "node-a") is False


def _web_pods(kube: KubeClient, count: int) -> None:
    kube.create(kc.NODES, node("node-a"))
    for i in range(count):
        create_pod(kube, pod(f"web-{i}", node_name="node-a", labels={"app": "web"}), RUNNING)


def test_evict_without_a_budget_and_when_gone(kube: KubeClient) -> None:
    _web_pods(kube, 1)
    assert writes.evict(kube, "default", "web-0") is True
    assert writes.evict(kube, "default", "web-0", grace_period_seconds=0) in (
        True,
        False,
    )  # terminating or gone: not an error
    assert writes.evict(kube, "default", "never-existed") is False


def test_eviction_blocked_by_a_pdb_is_too_many_requests(kube: KubeClient) -> None:
    _web_pods(kube, 2)
    kube.create(
        kc.PDBS,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
        namespace="default",
    )
    # the disruption controller computes the budget's status a moment later; until then nothing may be evicted
    wait_for(
        "the budget's status",
        lambda: (kube.get(kc.PDBS, "web", "default").get("status") or {}).get("disruptionsAllowed") == 1,
    )
    assert writes.evict(kube, "default", "web-0") is True  # 2 healthy, 1 needed: allowed
    with pytest.raises(TooManyRequests) as blocked:
        writes.evict(kube, "default", "web-1")
    assert blocked.value.status == 429
    assert "disruption budget" in blocked.value.message
    causes = blocked.value.details.get("causes") or []
    assert any(c.get("reason") == "DisruptionBudget" for c in causes)


def test_delete_is_idempotent(kube: KubeClient) -> None:
    writes.create_node_claim(kube, node_claim("default-abc12"))
    assert writes.delete(kube, kc.NODE_CLAIMS, "default-abc12") is True
    assert writes.delete(kube, kc.NODE_CLAIMS, "default-abc12") is False
    _web_pods(kube, 1)
    assert writes.delete(kube, kc.PODS, "web-0", "default", grace_period_seconds=0) is True
    assert writes.delete(kube, kc.PODS, "web-0", "default") is False


def test_a_node_recreated_under_an_earlier_name_stays_reachable(kube: KubeClient) -> None:
    """Tests reuse Node names and isolation deletes Nodes between them. The node lifecycle controller keeps a Node's
    health record while a Node of that name exists at each of its passes (every second here), so a Node recreated
    at once is judged by the first one's heartbeat: without one stamped at creation (the test builders' Ready
    condition), it is marked unreachable once the grace period has passed since the first (measured: the third
    to sixth recreations were tainted 1.3, 0.5, 0.2 and 0.0 s after creation). That taint and its writes made the
    exact-taint and conflict-count tests above flaky."""
    first = time.monotonic()
    while time.monotonic() - first < NODE_MONITOR_GRACE_PERIOD + 1.0:
        create_node(kube, node("node-a"))
        time.sleep(1.0)
        writes.delete(kube, kc.NODES, "node-a")
        wait_for(
            "node-a gone", lambda: not any(n["metadata"]["name"] == "node-a" for n in kube.list_items(kc.NODES)) or None
        )
    create_node(kube, node("node-a"))
    time.sleep(1.5)  # the controller looks every NODE_MONITOR_PERIOD
    assert [t.key for t in writes.get_node(kube, "node-a").spec.taints] == []
