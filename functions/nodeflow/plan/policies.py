"""NodeflowPolicies to solver input: paused NodePools, denied NodePools per pod, $/hour ceilings and group limits.
Pure.

Decides which NodePools a pause window makes unusable at a time (``paused``), which NodePools each pending pod's
namespace may not use (``with_denials``, the provisioner's and disruption's one rule) and the ceilings and group
limits with what is in use under them now (``bounds``). What a policy says is ``governance.policy``'s; what is in
use, ``governance.spend``'s.

Must not touch: the solver's choices (a policy arrives as data: ``PodInput.denied``, a NodePool's ``error``,
``SchedulingInput.ceilings`` / ``group_limits``), the clock (``now`` is an input).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from nodeflow.catalog.model import CatalogData
from nodeflow.cluster import ClusterState
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.types import CeilingInput, GroupLimitInput, NodeInput, NodePoolInput, PodInput

if TYPE_CHECKING:
    from nodeflow.governance.policy import Governance

__all__ = ["bounds", "governance", "paused", "with_denials"]


def governance(state: ClusterState) -> Governance | None:
    """The NodeflowPolicies of ``state`` compiled (None without any)."""
    if not state.policies:
        return None
    from nodeflow.governance.policy import Governance  # only with policies (cold imports stay small)

    return Governance.from_policies(state.policies)


def paused(pools: tuple[NodePoolInput, ...], gov: Governance, now: datetime) -> tuple[NodePoolInput, ...]:
    """``pools`` with those a NodeflowPolicy window pauses at ``now`` unusable for new NodeClaims (static top-ups
    included), the pause as the reason (a NodePool already unusable keeps its own reason)."""
    out = []
    for p in pools:
        why = gov.provisioning_pause(p.name, now) if p.error is None else None
        out.append(p if why is None else dataclasses.replace(p, error=why))
    return tuple(out)


def with_denials(
    pods: Sequence[PodInput], gov: Governance, pools: Sequence[str], namespace_labels: Mapping[str, Mapping[str, str]]
) -> list[PodInput]:
    """``pods`` with the NodePools NodeflowPolicies deny them (``PodInput.denied``): NodePool access by namespace,
    and extended resources a namespace may not request (every NodePool is denied then)."""
    cache: dict[tuple[str, frozenset[str]], Mapping[str, str]] = {}
    out: list[PodInput] = []
    for pod in pods:
        namespace = pod.namespace
        names = frozenset(k for k, v in pod.requests.items() if v > 0)
        key = (namespace, names)
        denied = cache.get(key)
        if denied is None:
            labels = namespace_labels.get(namespace, {})
            resource = gov.request_denial(namespace, labels, names)
            denied = {}
            for pool in pools:
                why = gov.pool_denial(namespace, labels, pool) or resource
                if why is not None:
                    denied[pool] = why
            cache[key] = denied
        out.append(dataclasses.replace(pod, denied=denied) if denied else pod)
    return out


# --- what a plan assumes ------------------------------------------------------------------------


def bounds(
    state: ClusterState, catalog: CatalogData, gov: Governance, nodes: Sequence[NodeInput]
) -> tuple[tuple[CeilingInput, ...], tuple[GroupLimitInput, ...]]:
    """The policies' $/hour ceilings with what ``state``'s nodes and NodeClaims cost under each now, and their group
    limits with what ``nodes`` hold against each (as a NodePool's own ``spec.limits`` count them)."""
    ceilings: tuple[CeilingInput, ...] = ()
    if gov.ceilings:
        from nodeflow.governance.spend import cluster_spend

        spend, _ = cluster_spend(state, catalog)
        ceilings = tuple(CeilingInput(c.policy, c.scope, c.name, c.max_per_hour, spend.in_use(c)) for c in gov.ceilings)
    group_limits = tuple(
        GroupLimitInput(
            g.policy,
            g.name,
            g.nodepools,
            g.limits,
            res.total({**(n.capacity or n.allocatable), "nodes": 1000} for n in nodes if n.nodepool in g.nodepools),
        )
        for g in gov.group_limits
    )
    return ceilings, group_limits
