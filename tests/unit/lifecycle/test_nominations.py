"""Which nominations of a NodeClaim's nodeflow.io/nominated-pods annotation are still open (lifecycle/nominations.py),
and that stale ones (pods deleted, finished, bound to a node that stays) change no plan (issue 26, item 18)."""

from __future__ import annotations

import json
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.core import Node, Pod
from nodeflow.api.karpenter import NodeClaim
from nodeflow.cluster import ClusterState
from nodeflow.lifecycle.nominations import leaving_nodes, open_nominations
from nodeflow.plan import plan
from tests.unit.lifecycle.test_claims_and_plan import CATALOG, _claim_from_plan, edited, node_class, pending_pod, pool


def _claim(*keys: str, node: str | None = None, deleting: bool = False) -> NodeClaim:
    meta: dict[str, Any] = {"name": "c1", "annotations": {wk.ANNOTATION_NOMINATED_PODS: json.dumps(list(keys))}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return NodeClaim.model_validate(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": meta,
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
            **({"status": {"nodeName": node}} if node else {}),
        }
    )


def _pod(name: str, node: str | None = None, phase: str = "Running", deleting: bool = False) -> Pod:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}], **({"nodeName": node} if node else {})}
    return Pod.model_validate({"metadata": meta, "spec": spec, "status": {"phase": phase}})


def _node(name: str, *, disrupted: bool = False, deleting: bool = False) -> Node:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    taints = [{"key": wk.TAINT_DISRUPTED, "effect": "NoSchedule"}] if disrupted else []
    return Node.model_validate({"metadata": meta, "spec": {"taints": taints}})


def test_a_nomination_is_open_while_its_pod_waits_for_the_node_claim() -> None:
    pods = {
        p.key: p
        for p in (
            _pod("pending", phase="Pending"),
            _pod("landed", node="own"),  # bound to the NodeClaim's own node: fulfilled
            _pod("elsewhere", node="other"),  # the scheduler placed it on a node that stays
            _pod("moving", node="candidate"),  # a replacement's pod, on the tainted candidate
            _pod("draining", node="going"),  # on a node being deleted
            _pod("done", phase="Succeeded"),
            _pod("terminating", phase="Pending", deleting=True),
        )
    }
    keys = [f"default/{n}" for n in ("pending", "landed", "elsewhere", "moving", "draining", "done", "terminating")]
    claim = _claim(*keys, "default/gone", "default/unreadable", node="own")
    nodes = [_node("own"), _node("other"), _node("candidate", disrupted=True), _node("going", deleting=True)]
    leaving = leaving_nodes(nodes, [claim])
    assert leaving == {"candidate", "going"}
    assert open_nominations(claim, pods, leaving, unreadable={"default/unreadable"}) == (
        "default/pending",
        "default/moving",
        "default/draining",
        "default/unreadable",
    )
    # a Node whose NodeClaim is being deleted is going away too
    assert leaving_nodes([_node("own")], [_claim(node="own", deleting=True)]) == {"own"}


def test_stale_nominations_change_no_plan() -> None:
    """The plan reads a nomination only for a pod that still waits: a NodeClaim still launching whose annotation
    also names a deleted pod and a pod bound elsewhere plans exactly as one naming only its waiting pod."""
    pods = [pending_pod("p0")]
    state = ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=pods)
    claim = _claim_from_plan(state)
    assert json.loads((claim.metadata.annotations or {})[wk.ANNOTATION_NOMINATED_PODS]) == ["default/p0"]
    bound = pending_pod("b0").model_copy(update={"spec": pending_pod("b0").spec.model_copy(update={"node_name": "x"})})
    stale = edited(
        claim,
        metadata={"annotations": {wk.ANNOTATION_NOMINATED_PODS: '["default/b0","default/gone","default/p0"]'}},
    )
    more = [*pods, bound, pending_pod("p1", cpu="500m")]
    clean = plan(
        ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=more, node_claims=[claim]), CATALOG
    )
    dirty = plan(
        ClusterState(node_pools=[pool()], node_classes=[node_class()], pods=more, node_claims=[stale]), CATALOG
    )
    assert dirty.to_json() == clean.to_json()
