"""Karpenter's minValues: how many distinct values a NodeClaim's instance types must span.

Decides whether a NodeClaim's types meet its requirements' minValues (``min_values_violation``: why not) and the most
pods a new NodeClaim can hold while they still do (``min_values_take``). Whether minValues are strict or best effort
(minValuesPolicy) is the caller's.

Must not touch: the NodeClaims themselves, bounds, topology, the clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.groups import Group
from nodeflow.scheduling.nodeclaim import fitting_types
from nodeflow.scheduling.pricing import OFFERING_KEYS, offering_label
from nodeflow.scheduling.requirements import Requirements

__all__ = ["min_values_take", "min_values_violation"]


def min_values_violation(reqs: Requirements, types: Sequence[InstanceType]) -> str | None:
    """Karpenter's minValues: a NodeClaim's instance types must span that many distinct values."""
    for key, req in sorted(reqs.items()):
        if not req.min_values:
            continue
        if key in OFFERING_KEYS:
            seen = {offering_label(o, key) for it in types for o in it.offerings if o.available}
            seen = {v for v in seen if req.has(v)}
        else:
            seen = {it.labels[key] for it in types if key in it.labels}
        if len(seen) < req.min_values:
            shown = ", ".join(sorted(seen)[:8]) or "none"
            return (
                f"minValues: {key} needs {req.min_values} distinct values among the instance types that fit, "
                f"only {len(seen)} ({shown})"
            )
    return None


def min_values_take(
    reqs: Requirements,
    types: list[InstanceType],
    caps: list[int],
    daemon: Mapping[str, int],
    group: Group,
    take: int,
) -> int:
    """The most pods (at most ``take``) a NodeClaim can hold while its instance types keep
    minValues distinct values; 0 when even one pod cannot."""
    for candidate in sorted({c for c in caps if c < take} | {take}, reverse=True):
        used = res.add(daemon, group.requests, candidate)
        if min_values_violation(reqs, fitting_types(types, 0, used)) is None:
            return candidate
    return 0
