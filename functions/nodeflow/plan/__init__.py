"""From Kubernetes and Karpenter objects to a solver input, and a plan. Pure (no I/O).

Used by ``python -m nodeflow plan`` and by the provisioner Lambda: both hand this package the objects they read
(files or the API server, as a ``ClusterState``) and a catalog. One concern per module:

* ``state``: ``ClusterState``, the objects a plan is made from;
* ``pods``: pods to solver input (pending or not, what each asks of a node);
* ``pools``: NodePools and EC2NodeClasses to solver input (requirements, instance types, readiness);
* ``overlays``: NodeOverlays applied to the NodePools' instance types;
* ``nodes``: nodes and NodeClaims still launching to solver input;
* ``policies``: NodeflowPolicies to solver input (pauses, denials, ceilings, group limits);
* ``build``: ``build_input``, the steps above in order, and static NodePools' top-ups;
* ``assumptions``: ``plan_warnings``, what a plan assumes;
* here: ``plan`` (build, solve, add the static top-ups: ``with_static``).

Must not touch: the cluster or AWS (no I/O), the clock (``now`` is an input), the solver's decisions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime

from nodeflow.catalog.model import CatalogData
from nodeflow.cluster import ClusterState
from nodeflow.plan.assumptions import plan_warnings
from nodeflow.plan.build import build_input, gc_paused
from nodeflow.plan.nodes import claim_index, left_behind, nominated_pods
from nodeflow.plan.overlays import overlay_verdicts
from nodeflow.plan.pods import convert_pods, pod_converter
from nodeflow.plan.policies import with_denials
from nodeflow.plan.pools import node_class_readiness, node_class_settings
from nodeflow.scheduling.nodepools import NO_NODEPOOL
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.types import SchedulingInput, SchedulingResult

__all__ = [
    "STATIC_REASON",
    "ClusterState",
    "build_input",
    "claim_index",
    "convert_pods",
    "left_behind",
    "node_class_readiness",
    "node_class_settings",
    "nominated_pods",
    "overlay_verdicts",
    "plan",
    "plan_warnings",
    "pod_converter",
    "with_denials",
    "with_static",
]


def plan(
    state: ClusterState,
    catalog: CatalogData,
    preference_policy: str = "Respect",
    min_values_policy: str = "Strict",
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
    now: datetime | None = None,
) -> SchedulingResult:
    """Which NodeClaims to launch for the pending pods of ``state``.

    ``unavailable`` holds (instance type, zone, capacity type) offerings not to use (recent
    capacity errors). ``now``: the time NodeflowPolicy pause windows are judged at (None: no window is open).
    """
    # The solver allocates much and frees little while it runs; with a large cluster's objects alive (a snapshot
    # of tens of thousands of pods) each cyclic GC pass rescans all of them: paused for the plan, as for the input.
    with gc_paused():
        inp = build_input(state, catalog, preference_policy, min_values_policy, unavailable, now)
        return with_static(solve(inp), inp)


STATIC_REASON = "static NodePool (spec.replicas): it launches no node for pending pods, only its replicas"


def with_static(result: SchedulingResult, inp: SchedulingInput) -> SchedulingResult:
    """``result`` (the solver's, for ``inp``) with the NodeClaims static NodePools still need added, and the
    static NodePools named among the reasons of each unschedulable pod."""
    if not inp.static_pools:
        return result
    static = {p.name: STATIC_REASON for p in inp.static_pools}
    unschedulable = tuple(
        dataclasses.replace(u, reasons={**_without_no_pool(u.reasons), **static}) for u in result.unschedulable
    )
    return dataclasses.replace(
        result, node_claims=(*result.node_claims, *inp.static_claims), unschedulable=unschedulable
    )


def _without_no_pool(reasons: Mapping[str, str]) -> dict[str, str]:
    """``reasons`` but the solver's "no NodePool is defined" (there are static ones)."""
    return {k: v for k, v in reasons.items() if not (k == NO_NODEPOOL and v == "no NodePool is defined")}


# --- pods --------------------------------------------------------------------------------------
