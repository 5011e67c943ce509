"""Offerings and instance-type filtering: which types a NodeClaim's requirements allow, and what
each costs there (the cheapest available offering in the allowed zones and capacity types).

Must not touch: which NodeClaim pods go to (``packing``), bounds (``limits``, ``ceilings``), the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling.requirements import Requirement, Requirements

__all__ = [
    "ALLOW_UNDEFINED",
    "OFFERING_FIELDS",
    "OFFERING_KEYS",
    "PRICE_EPSILON",
    "TYPE_KEYS",
    "Pricer",
    "cheapest_offering",
    "describe_offering_reqs",
    "offering_label",
    "offering_rank",
    "type_keys_changed",
    "type_matches",
]

# Well-known labels a new node gets from its instance type and offering: a pod may ask
# for them even when the NodePool does not mention them.
ALLOW_UNDEFINED = wk.WELL_KNOWN_LABELS | {wk.LABEL_ZONE, wk.LABEL_REGION, wk.LABEL_CAPACITY_TYPE}
# Labels that come from the offering (zone, capacity type, capacity reservation), not from the instance type.
OFFERING_KEYS = frozenset(
    {
        wk.LABEL_ZONE,
        wk.LABEL_CAPACITY_TYPE,
        wk.LABEL_ZONE_ID,
        wk.LABEL_CAPACITY_RESERVATION_ID,
        wk.LABEL_CAPACITY_RESERVATION_TYPE,
        wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    }
)
# The offering field behind each offering label.
OFFERING_FIELDS = {
    wk.LABEL_ZONE: "zone",
    wk.LABEL_CAPACITY_TYPE: "capacity_type",
    wk.LABEL_ZONE_ID: "zone_id",
    wk.LABEL_CAPACITY_RESERVATION_ID: "reservation_id",
    wk.LABEL_CAPACITY_RESERVATION_TYPE: "reservation_type",
    wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: "reservation_interruptible",
}
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
        key: tuple[Requirement | None, ...] = (
            reqs.get(wk.LABEL_ZONE),
            reqs.get(wk.LABEL_CAPACITY_TYPE),
            reqs.get(wk.LABEL_ZONE_ID),
        )
        if _has_reservation_reqs(reqs):
            key += _reservation_reqs(reqs)
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

    def with_capacity_types(self, types: Iterable[InstanceType], reqs: Requirements) -> Requirements:
        """``reqs`` with the capacity types ``types`` offer under them (Karpenter's NodeClaimTemplate.ToNodeClaim
        adds ``karpenter.sh/capacity-type In`` those to every NodeClaim, so a NodePool without the requirement gets
        one, which the AWS provider launches reserved, then spot, then on-demand)."""
        allowed = reqs.get(wk.LABEL_CAPACITY_TYPE)
        listed = list(types)
        offered = []
        for kind in _CAPACITY_TYPES:
            if allowed is not None and not allowed.has(kind):
                continue
            pinned = reqs.add(_only(kind))
            if any(self.cheapest(it, pinned) is not None for it in listed):
                offered.append(kind)
        return reqs.add(_only(*offered)) if offered else reqs

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


_CAPACITY_TYPES = (wk.CAPACITY_TYPE_RESERVED, wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND)


def _only(*capacity_types: str) -> Requirements:
    return Requirements([Requirement(wk.LABEL_CAPACITY_TYPE, False, frozenset(capacity_types))])


def _has_reservation_reqs(reqs: Requirements) -> bool:
    return (
        wk.LABEL_CAPACITY_RESERVATION_ID in reqs
        or wk.LABEL_CAPACITY_RESERVATION_TYPE in reqs
        or wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE in reqs
    )


def _reservation_reqs(reqs: Requirements) -> tuple[Requirement | None, ...]:
    return (
        reqs.get(wk.LABEL_CAPACITY_RESERVATION_ID),
        reqs.get(wk.LABEL_CAPACITY_RESERVATION_TYPE),
        reqs.get(wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE),
    )


def offering_label(o: Offering, key: str) -> str:
    """The value of an offering label (``OFFERING_KEYS``) an offering gives its node ("" when none)."""
    value = getattr(o, OFFERING_FIELDS[key])
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _reservation_allows(o: Offering, reqs: Requirements) -> bool:
    """Reserved offerings are only for NodeClaims that hold their reservation (requirements pinning
    ``karpenter.k8s.aws/capacity-reservation-id``, see ``packing``); such NodeClaims take nothing else."""
    rid, rtype, rint = _reservation_reqs(reqs)
    if not o.reservation_id:
        return all(r is None or r.allows_absent() for r in (rid, rtype, rint))
    if rid is None or rid.complement or not rid.has(o.reservation_id):
        return False
    if rtype is not None and not rtype.has(o.reservation_type):
        return False
    return rint is None or rint.has("true" if o.reservation_interruptible else "false")


def cheapest_offering(it: InstanceType, reqs: Requirements) -> Offering | None:
    zone = reqs.get(wk.LABEL_ZONE)
    ctype = reqs.get(wk.LABEL_CAPACITY_TYPE)
    zone_id = reqs.get(wk.LABEL_ZONE_ID)
    pinned = _has_reservation_reqs(reqs)
    best: Offering | None = None
    for offering in it.offerings:
        if not offering.available:
            continue
        if (pinned or offering.reservation_id) and not _reservation_allows(offering, reqs):
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
