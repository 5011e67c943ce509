"""Offerings and instance-type filtering: which types a NodeClaim's requirements allow, and what
each costs there (the cheapest available offering in the allowed zones and capacity types)."""

from __future__ import annotations

from collections.abc import Sequence

from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling.requirements import Requirement, Requirements

__all__ = [
    "ALLOW_UNDEFINED",
    "OFFERING_KEYS",
    "PRICE_EPSILON",
    "TYPE_KEYS",
    "Pricer",
    "cheapest_offering",
    "describe_offering_reqs",
    "offering_rank",
    "type_keys_changed",
    "type_matches",
]

# Well-known labels a new node gets from its instance type and offering: a pod may ask
# for them even when the NodePool does not mention them.
ALLOW_UNDEFINED = wk.WELL_KNOWN_LABELS | {wk.LABEL_ZONE, wk.LABEL_REGION, wk.LABEL_CAPACITY_TYPE}
# Labels that come from the offering (zone, capacity type), not from the instance type.
OFFERING_KEYS = frozenset({wk.LABEL_ZONE, wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE_ID})
# Instance-type labels: a type that lacks one (e.g. no GPU) acts as DoesNotExist for it.
TYPE_KEYS = wk.WELL_KNOWN_LABELS - OFFERING_KEYS - {wk.LABEL_NODEPOOL, wk.LABEL_REGION}
PRICE_EPSILON = 1e-9


class Pricer:
    """Cheapest available offering of each type under a NodeClaim's zone/capacity-type limits."""

    def __init__(self) -> None:
        self._tables: dict[tuple[Requirement | None, ...], dict[int, Offering | None]] = {}

    def table(self, reqs: Requirements) -> dict[int, Offering | None]:
        """A cache of instance type (its ``id``: two NodePools may price one type differently, e.g. under
        NodeOverlays) -> cheapest allowed offering, for these requirements."""
        key = (reqs.get(wk.LABEL_ZONE), reqs.get(wk.LABEL_CAPACITY_TYPE), reqs.get(wk.LABEL_ZONE_ID))
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = {}
        return table

    def cheapest(self, it: InstanceType, reqs: Requirements) -> Offering | None:
        table = self.table(reqs)
        key = id(it)
        if key in table:
            return table[key]
        best = cheapest_offering(it, reqs)
        table[key] = best
        return best

    def price(self, it: InstanceType, reqs: Requirements) -> float:
        offering = self.cheapest(it, reqs)
        return float("inf") if offering is None else offering.price

    def sorted_types(self, types: Sequence[InstanceType], reqs: Requirements) -> tuple[list[InstanceType], list[float]]:
        """The types with an allowed offering, cheapest first (ties by name), and their prices."""
        table = self.table(reqs)
        priced: list[tuple[float, str, InstanceType]] = []
        for it in types:
            key = id(it)
            if key in table:
                offering = table[key]
            else:
                offering = table[key] = cheapest_offering(it, reqs)
            if offering is not None:
                priced.append((offering.price, it.name, it))
        priced.sort(key=lambda p: (p[0], p[1]))
        return [p[2] for p in priced], [p[0] for p in priced]


def cheapest_offering(it: InstanceType, reqs: Requirements) -> Offering | None:
    zone = reqs.get(wk.LABEL_ZONE)
    ctype = reqs.get(wk.LABEL_CAPACITY_TYPE)
    zone_id = reqs.get(wk.LABEL_ZONE_ID)
    best: Offering | None = None
    for offering in it.offerings:
        if not offering.available:
            continue
        if zone is not None and not zone.has(offering.zone):
            continue
        if ctype is not None and not ctype.has(offering.capacity_type):
            continue
        if zone_id is not None and not zone_id.has(offering.zone_id):
            continue
        if best is None or offering_rank(offering) < offering_rank(best):
            best = offering
    return best


def offering_rank(o: Offering) -> tuple[float, int, str]:
    # Cheapest first; on a tie prefer spot (Karpenter prefers spot when both are allowed).
    return (o.price, 0 if o.capacity_type == wk.CAPACITY_TYPE_SPOT else 1, o.zone)


def type_keys_changed(old: Requirements, new: Requirements) -> bool:
    """Could going from ``old`` to ``new`` rule out instance types by their labels (not only
    by offerings)? Zone and capacity-type pins and custom labels cannot."""
    for key, req in new.items():
        if key in OFFERING_KEYS or (key not in wk.WELL_KNOWN_LABELS and key != wk.LABEL_REGION):
            continue
        if old.get(key) != req:
            return True
    return False


def type_matches(it: InstanceType, reqs: Requirements) -> bool:
    """Do an instance type's labels satisfy the requirements (offerings checked separately)?"""
    type_labels = it.labels
    for key, req in reqs.items():
        value = type_labels.get(key)
        if value is not None:
            if not req.has(value):
                return False
        elif key in TYPE_KEYS and not req.allows_absent():
            return False
    return True


def describe_offering_reqs(reqs: Requirements) -> str:
    keys = [k for k in sorted(reqs) if k in TYPE_KEYS or k in OFFERING_KEYS]
    if not keys:
        return ""
    return " (" + ", ".join(f"{k} {reqs[k].describe()}" for k in keys) + ")"
