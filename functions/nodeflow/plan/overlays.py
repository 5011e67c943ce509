"""NodeOverlays applied to the NodePools' instance types (prices, extended resources). Pure.

Decides nothing of its own: ``catalog.overlays`` decides which overlays match, conflict and win; this applies its
answer to solver input (``overlaid``) and reports each overlay's ValidationSucceeded verdict (``overlay_verdicts``).

Must not touch: pods, nodes, policies, or the NodePools' other fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nodeflow.api.karpenter_overlay import NodeOverlay
from nodeflow.catalog.overlays import OverlayPool, OverlayVerdict, apply_overlays
from nodeflow.cluster import ClusterState
from nodeflow.scheduling.types import NodePoolInput, SchedulingInput

__all__ = ["overlaid", "overlay_verdicts"]


def overlaid(pools: tuple[NodePoolInput, ...], overlays: Sequence[NodeOverlay]) -> tuple[NodePoolInput, ...]:
    """``pools`` with the NodeOverlays applied to their instance types (prices, extended resources)."""
    applied = apply_overlays(overlays, [OverlayPool(p.name, p.labels, p.instance_types) for p in pools])
    return tuple(
        p
        if applied.instance_types[p.name] is p.instance_types
        else dataclasses.replace(p, instance_types=applied.instance_types[p.name])
        for p in pools
    )


def overlay_verdicts(state: ClusterState, inp: SchedulingInput) -> list[OverlayVerdict]:
    """The ValidationSucceeded verdict of each NodeOverlay of ``state`` (by name) as applied to ``inp``'s
    NodePools (which overlays match and conflict does not depend on prices or capacities)."""
    if not state.node_overlays:
        return []
    pools = [OverlayPool(p.name, p.labels, p.instance_types) for p in inp.nodepools]
    return list(apply_overlays(state.node_overlays, pools).verdicts)
