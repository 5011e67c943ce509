"""NodeOverlay status: Karpenter's node overlay controller's conditions, written by the Lambdas that read overlays.

``overlay_statuses`` (pure) gives each NodeOverlay of a snapshot its new ``status``: ValidationSucceeded True, or
False with reason RuntimeValidation (what Karpenter checks only at runtime, e.g. a requirement key too long) or
Conflict ("conflict with another overlay": an overlay of the same weight already changes one of the same
offering prices or extended resources); Ready summarises it. ``write_overlay_statuses`` patches the status
subresource of the overlays whose conditions changed (best effort: an overlay deleted meanwhile is skipped).

Must not touch: which overlays win (``nodeflow.catalog.overlays``); objects other than NodeOverlays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from nodeflow.api.karpenter_overlay import CONDITION_VALIDATION_SUCCEEDED, NodeOverlay
from nodeflow.catalog.model import CatalogData
from nodeflow.catalog.overlays import OverlayPool, OverlayResult, apply_overlays
from nodeflow.cluster import ClusterState
from nodeflow.kube import client as kc
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import KubeClient
from nodeflow.kube.status import CONDITION_READY, set_condition
from nodeflow.plan import build_input

__all__ = [
    "ANNOTATION_CAPACITY_OVERLAY_APPLIED",
    "ANNOTATION_PRICE_OVERLAY_APPLIED",
    "claim_annotations",
    "evaluate_overlays",
    "overlay_statuses",
    "write_overlay_statuses",
]

ANNOTATION_PRICE_OVERLAY_APPLIED = "karpenter.sh/price-overlay-applied"
ANNOTATION_CAPACITY_OVERLAY_APPLIED = "karpenter.sh/capacity-overlay-applied"


def _conditions(overlay: NodeOverlay) -> list[dict[str, Any]]:
    status = overlay.status
    if status is None or not status.conditions:
        return []
    return [c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in status.conditions]


def _comparable(conditions: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    keys = ("type", "status", "reason", "message", "lastTransitionTime", "observedGeneration")
    return sorted((tuple(str(c.get(k)) for k in keys) for c in conditions), key=str)


def evaluate_overlays(
    state: ClusterState,
    catalog: CatalogData,
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
) -> OverlayResult:
    """``state``'s NodeOverlays applied to its NodePools' instance types (pure; no pods needed: which overlays
    apply and conflict depends on the NodePools and their instance types only)."""
    pools_only = dataclasses.replace(state, pods=(), nodes=(), node_claims=(), daemon_sets=(), node_overlays=())
    inp = build_input(pools_only, catalog, unavailable=unavailable)
    return apply_overlays(state.node_overlays, [OverlayPool(p.name, p.labels, p.instance_types) for p in inp.nodepools])


def overlay_statuses(state: ClusterState, result: OverlayResult, now: datetime) -> dict[str, dict[str, Any]]:
    """NodeOverlay name -> its new ``status``, for the overlays whose conditions change (pure)."""
    verdicts = {v.name: v for v in result.verdicts}
    out: dict[str, dict[str, Any]] = {}
    for overlay in state.node_overlays:
        verdict = verdicts.get(overlay.name)
        if verdict is None:
            continue
        generation = overlay.metadata.generation
        before = _conditions(overlay)
        valid = (verdict.status, verdict.reason, verdict.message)
        ready = ("True", CONDITION_READY, "") if verdict.ok else (
            "False", "UnhealthyDependents", f"{CONDITION_VALIDATION_SUCCEEDED}=False"
        )  # fmt: skip
        after = set_condition(before, CONDITION_VALIDATION_SUCCEEDED, *valid, now=now, generation=generation)
        after = set_condition(after, CONDITION_READY, *ready, now=now, generation=generation)
        if _comparable(after) != _comparable(before):
            out[overlay.name] = {"conditions": after}
    return out


def claim_annotations(result: OverlayResult | None, nodepool: str, instance_types: Sequence[str]) -> dict[str, str]:
    """Karpenter's annotations of a NodeClaim some of whose instance types an overlay changed:
    karpenter.sh/price-overlay-applied and karpenter.sh/capacity-overlay-applied, "true"."""
    if result is None:
        return {}
    out: dict[str, str] = {}
    if any((nodepool, t) in result.price_overlaid for t in instance_types):
        out[ANNOTATION_PRICE_OVERLAY_APPLIED] = "true"
    if any((nodepool, t) in result.capacity_overlaid for t in instance_types):
        out[ANNOTATION_CAPACITY_OVERLAY_APPLIED] = "true"
    return out


def write_overlay_statuses(
    kube: KubeClient,
    state: ClusterState,
    catalog: CatalogData,
    now: datetime,
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
) -> OverlayResult:
    """Evaluate ``state``'s NodeOverlays and write the statuses that changed (best effort); returns the evaluation."""
    result = evaluate_overlays(state, catalog, unavailable)
    for name, status in overlay_statuses(state, result, now).items():
        try:
            kube.patch(kc.NODE_OVERLAYS, name, {"status": status}, subresource="status")
        except kerr.KubeError:  # gone meanwhile, or not writable here: the conditions are informational
            continue
    return result
