"""Builders shared by the drift, emptiness and consolidation-timer parity modules (ours, not upstream's)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodeflow.api.karpenter import NodePool
from nodeflow.api.template_hash import nodepool_hash
from tests.parity.harness import Obj, disrupt, managed_node, node_class, node_pool, pod

HASH = "karpenter.sh/nodepool-hash"
HASH_VERSION = "karpenter.sh/nodepool-hash-version"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
ALL = [{"nodes": "100%"}]
# drift is the only voluntary disruption: consolidation off, every node may go at once
DRIFT_ONLY = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never", "budgets": ALL}


def hash_of(pool: Obj) -> str:
    """The karpenter.sh/nodepool-hash a NodeClaim made from ``pool`` carries."""
    return nodepool_hash(NodePool.model_validate(pool))


def hashed(pool: Obj, version: str | None = "v3") -> dict[str, str]:
    out = {HASH: hash_of(pool)}
    if version is not None:
        out[HASH_VERSION] = version
    return out


def busy_node(
    name: str, *, pods: int = 1, cpu: str = "1", pod_kw: Mapping[str, Any] | None = None, **kw: Any
) -> list[Obj]:
    """A managed node (and its NodeClaim) running ``pods`` ReplicaSet pods named ``<name>-p<i>``."""
    return [
        *managed_node(name, **kw),
        *(pod(f"{name}-p{i}", node=name, cpu=cpu, **(pod_kw or {})) for i in range(pods)),
    ]


def world(pools: Iterable[Obj], *nodes: Iterable[Obj]) -> list[Obj]:
    return [node_class(), *pools, *(o for n in nodes for o in n)]


def command(objects: Iterable[Obj], **kw: Any) -> Obj | None:
    result: Obj | None = disrupt(objects, **kw)["command"]
    return result


def drifted(objects: Iterable[Obj]) -> list[str]:
    """The nodes the round disrupts for drift (empty when it does something else or nothing)."""
    cmd = command(objects)
    return list(cmd["candidates"]) if cmd is not None and cmd["reason"] == "Drifted" else []


def drift_pool(name: str = "default", **kw: Any) -> Obj:
    kw.setdefault("disruption", DRIFT_ONLY)
    return node_pool(name, **kw)
