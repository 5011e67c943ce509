"""Helpers of the parity tests about disruption candidates, blockers and budgets (see test_disruption_suite,
test_pod_utils, test_pdb_utils, test_nodepool_budgets): what ``disrupt --dry-run`` decided about one node."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from tests.parity.harness import NOW, Obj, disrupt, managed_node, node_class, node_pool, pod

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def base(**pool: Any) -> list[Obj]:
    """One Ready EC2NodeClass and the NodePool ``default`` (``pool``: node_pool keywords)."""
    return [node_class(), node_pool(**pool)]


def blocker(out: Obj, node_name: str) -> str | None:
    """The DisruptionBlocked message ``disrupt`` gave ``node_name``, None when it was not blocked."""
    for b in out["blocked"]:
        if b["node"] == node_name and b["event"] == "DisruptionBlocked":
            return str(b["message"])
    return None


def disrupted(out: Obj) -> list[str]:
    """The nodes of the round's voluntary command (empty when there is none)."""
    return list(out["command"]["candidates"]) if out["command"] else []


def with_start(p: Obj, start: str | None) -> Obj:
    """``p`` with ``status.startTime`` (when the kubelet started it)."""
    if start is not None:
        p["status"]["startTime"] = start
    return p


def node_with(pods: Iterable[Obj], name: str = "n1", **kw: Any) -> list[Obj]:
    """A managed m5.xlarge node ``name`` (and its NodeClaim) holding ``pods`` (bound to it here)."""
    objs = managed_node(name, **kw)
    for p in pods:
        p["spec"]["nodeName"] = name
        objs.append(p)
    return objs


def small(name: str, **kw: Any) -> Obj:
    """A bound, Running 100m pod (the node it is bound to is set by :func:`node_with`)."""
    kw.setdefault("cpu", "100m")
    return pod(name, node="n1", **kw)


def run_round(objs: Iterable[Obj | Iterable[Obj]], now: datetime = NOW) -> Obj:
    return disrupt(objs, now=now)
