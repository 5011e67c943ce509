"""NodePool ``status.resources`` / ``status.nodes`` follow a node's registration and termination without a
provisioner or gc run: the Register and RemoveFinalizer steps recount the NodePool from its own Nodes and
NodeClaims (a LIST by the ``karpenter.sh/nodepool`` label, not the whole cluster) and patch its status only when
it changed (issue 17, part 1)."""

from __future__ import annotations

from typing import Any

from nodeflow.api.core import resource_milli
from nodeflow.api.quantity import format_milli
from nodeflow.kube import client as kc
from nodeflow.kube.client import KubeClient
from nodeflow.kube.errors import Forbidden
from nodeflow.kube.status import recount_node_pool
from sandbox.nodeflow import LocalNodeflow
from tests.functional.lifecycle.conftest import pending

POOL_STATUS = "/apis/karpenter.sh/v1/nodepools/default/status"


def _pool_nodes(kube: KubeClient) -> list[dict[str, Any]]:
    return [n for n in kube.list_items(kc.NODES) if n["metadata"]["labels"].get("karpenter.sh/nodepool") == "default"]


def _expected(nodes: list[dict[str, Any]]) -> dict[str, str]:
    out = {"nodes": str(len(nodes))}
    for key in ("cpu", "memory", "pods"):
        total = sum(resource_milli(n["status"]["capacity"]).get(key, 0) for n in nodes)
        out[key] = format_milli(total, key if key == "memory" else "cpu")
    return out


def test_registration_and_termination_recount_the_node_pool(local: LocalNodeflow) -> None:
    kube = KubeClient(local.kube_server.api_client())
    pending(local, "web", 5, cpu="1", memory="2Gi")
    local.send_pending(["default/web"])
    created = local.provision()["result"]["nodeClaimsCreated"]
    assert len(created) >= 2
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_executions())

    # registered: the count and the nodes' capacity are there, with no provisioner or gc run since
    nodes = _pool_nodes(kube)
    assert len(nodes) == len(created)
    status = kube.get(kc.NODE_POOLS, "default")["status"]
    assert status["nodes"] == len(nodes)
    assert {k: status["resources"][k] for k in ("nodes", "cpu", "memory", "pods")} == _expected(nodes)
    assert {c["type"] for c in status["conditions"]} >= {"Ready", "NodeClassReady", "ValidationSucceeded"}

    # terminated: the count drops when its finalizers go, again without gc
    local.terminate(created[0])
    assert all(d["status"] == "SUCCEEDED" for d in local.wait_for_terminations())
    nodes = _pool_nodes(kube)
    assert len(nodes) == len(created) - 1
    status = kube.get(kc.NODE_POOLS, "default")["status"]
    assert status["nodes"] == len(nodes)
    assert {k: status["resources"][k] for k in ("nodes", "cpu", "memory", "pods")} == _expected(nodes)

    # unchanged: a recount writes nothing
    before = local.kube_server.count("PATCH", POOL_STATUS)
    assert recount_node_pool(kube, "default") is False
    assert local.kube_server.count("PATCH", POOL_STATUS) == before


def test_a_recount_racing_another_write_counts_again(local: LocalNodeflow) -> None:
    """The status patch carries the NodePool's resourceVersion: a write in between (409) is read and recounted,
    so a slower recount never overwrites a newer count with an older one."""
    kube = KubeClient(local.kube_server.api_client())
    kube.patch(
        kc.NODE_POOLS,
        "default",
        {"status": {"nodes": 7, "resources": {"nodes": "7", "gpu": "1"}}},
        subresource="status",
    )
    real_get = kube.get
    calls = [0]

    def get_then_bump(resource: kc.Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = real_get(resource, name, namespace)
        calls[0] += 1
        if calls[0] == 1:  # another writer lands between this read and the patch
            kube.patch(kc.NODE_POOLS, "default", {"metadata": {"labels": {"touched": "yes"}}})
        return obj

    kube.get = get_then_bump  # type: ignore[method-assign]
    assert recount_node_pool(kube, "default") is True
    assert calls[0] == 2
    status = real_get(kc.NODE_POOLS, "default")["status"]
    assert status["nodes"] == 0
    assert status["resources"]["nodes"] == "0"
    assert "gpu" not in status["resources"]  # a resource no node has any more is removed
    assert recount_node_pool(kube, "no-such-pool") is False


def test_a_refused_recount_does_not_fail_the_step(local: LocalNodeflow) -> None:
    """Status is for people: an API server that refuses the write (an RBAC file not re-applied after an upgrade)
    leaves the counts to gc instead of failing the Register or RemoveFinalizer step."""
    kube = KubeClient(local.kube_server.api_client())
    kube.patch(kc.NODE_POOLS, "default", {"status": {"nodes": 7}}, subresource="status")
    real_patch = kube.patch

    def refuse(resource: kc.Resource, name: str, patch: Any, **kw: Any) -> dict[str, Any]:
        raise Forbidden(f"nodepools/status {name} is forbidden", status=403, reason="Forbidden")

    kube.patch = refuse  # type: ignore[method-assign]
    assert recount_node_pool(kube, "default") is False
    kube.patch = real_patch  # type: ignore[method-assign]
    assert kube.get(kc.NODE_POOLS, "default")["status"]["nodes"] == 7
    assert recount_node_pool(kube, "default") is True


def test_a_recount_beaten_twice_stops(local: LocalNodeflow) -> None:
    """A burst of registrations of one pool: between this recount's read of the NodePool and its write, another
    Node registers and its step's recount lands. The second 409 proves a count that includes this step's change
    landed (the write that beat it read the NodePool after the first one that did), so the step stops after two
    counts (two LISTs of Nodes and NodeClaims each), not three, and the status is right."""
    kube = KubeClient(local.kube_server.api_client())
    other = KubeClient(local.kube_server.api_client())  # the other Register steps
    real_get = kube.get
    gets = [0]

    def get_then_race(resource: kc.Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = real_get(resource, name, namespace)
        if resource == kc.NODE_POOLS:
            gets[0] += 1
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"burst-{gets[0]}", "labels": {"karpenter.sh/nodepool": "default"}},
                "status": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "29"}},
            }
            other.create(kc.NODES, node)
            assert recount_node_pool(other, "default") is True
        return obj

    kube.get = get_then_race  # type: ignore[method-assign]
    assert recount_node_pool(kube, "default") is False
    assert gets[0] == 2
    status = real_get(kc.NODE_POOLS, "default")["status"]
    assert status["nodes"] == 2
    assert status["resources"]["nodes"] == "2"
    assert status["resources"]["cpu"] == "4"
