"""NodeOverlays applied to the instance types of NodePools (Karpenter's node overlay store). Pure.

``apply_overlays(overlays, pools)`` takes the NodeOverlays and, per NodePool, its name, template labels
and resolved instance types, and returns the instance types each NodePool schedules with, plus a verdict
per overlay (its ValidationSucceeded condition).

Semantics (as Karpenter v1.14):

- Overlays are taken in precedence order: higher ``weight`` first (unset counts as 0); on equal weight the
  name later in the alphabet first.
- An overlay selects an instance type of a NodePool when its requirements are compatible with the
  NodePool's name (``karpenter.sh/nodepool``), the NodePool's template labels and the type's labels and
  offerings (zones, capacity types); a key none of those defines is compatible only under NotIn /
  DoesNotExist. Of such a type, it selects the offerings its zone / capacity-type requirements allow.
- ``price`` replaces, ``priceAdjustment`` changes the price of each selected offering: "+0.5" / "-0.5" add,
  "+10%" / "-10%" scale; never below 0. The first (highest-precedence) overlay that sets an offering's price
  wins; later ones leave it.
- ``capacity`` adds extended resources to the selected types (to capacity and allocatable); a resource set
  by a higher-precedence overlay is kept.
- Two overlays of the same weight that both set the price of one offering, or the same resource of one
  type, conflict: the later one (in precedence order) is not applied anywhere (ValidationSucceeded False,
  reason Conflict). An overlay that fails runtime validation is not applied (reason RuntimeValidation).

NodePools without a matching overlay keep their instance type objects unchanged (same objects).

Must not touch: solver input (``nodeflow.plan.overlays`` applies the answer); overlay status
(``nodeflow.lifecycle.overlay_status``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nodeflow.api import labels as wk
from nodeflow.api.karpenter_overlay import CONDITION_VALIDATION_SUCCEEDED, NodeOverlay
from nodeflow.api.quantity import to_milli
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling.pricing import OFFERING_KEYS, TYPE_KEYS, offering_label
from nodeflow.scheduling.requirements import Requirement, RequirementError, Requirements

__all__ = [
    "CONDITION_VALIDATION_SUCCEEDED",
    "OverlayPool",
    "OverlayResult",
    "OverlayVerdict",
    "adjusted_price",
    "apply_overlays",
    "precedence",
]

REASON_CONFLICT = "Conflict"
REASON_RUNTIME_VALIDATION = "RuntimeValidation"
CONFLICT_MESSAGE = "conflict with another overlay"


@dataclass(frozen=True, slots=True)
class OverlayPool:
    """What overlays are matched against: a NodePool's name, template labels and instance types."""

    name: str
    labels: Mapping[str, str]
    instance_types: Sequence[InstanceType]


@dataclass(frozen=True, slots=True)
class OverlayVerdict:
    """An overlay's ValidationSucceeded condition: status "True", or "False" with a reason and message."""

    name: str
    status: str
    reason: str = CONDITION_VALIDATION_SUCCEEDED
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "True"


@dataclass(frozen=True, slots=True)
class OverlayResult:
    """Per NodePool, its instance types with the overlays applied; per overlay, its verdict."""

    instance_types: Mapping[str, tuple[InstanceType, ...]]
    verdicts: tuple[OverlayVerdict, ...] = ()
    # (NodePool, instance type) pairs whose price / capacity an overlay changed.
    price_overlaid: frozenset[tuple[str, str]] = frozenset()
    capacity_overlaid: frozenset[tuple[str, str]] = frozenset()

    def verdict(self, name: str) -> OverlayVerdict | None:
        return next((v for v in self.verdicts if v.name == name), None)


def adjusted_price(price: float, change: str) -> float:
    """``price`` after an overlay's ``price`` ("1.5": the new price) or ``priceAdjustment`` ("+0.5", "-10%")."""
    if not change:
        return price
    if not change.startswith(("+", "-")):
        return float(change)
    if change.endswith("%"):
        adjusted = price * (1 + (float(change[:-1]) / 100))
    else:
        adjusted = price + float(change)
    return adjusted if adjusted >= 0 else 0.0


def precedence(overlays: Iterable[NodeOverlay]) -> list[NodeOverlay]:
    """The overlays in the order they are applied: higher weight first, then the later name first."""
    by_name = sorted(overlays, key=lambda o: o.name, reverse=True)
    return sorted(by_name, key=lambda o: -o.weight)


@dataclass(slots=True)
class _PriceUpdate:
    change: str
    lowest_weight: int


@dataclass(slots=True)
class _CapacityUpdate:
    resources: dict[str, str] = field(default_factory=dict)
    lowest_weight: int = 0
    lowest_resources: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _TypeUpdate:
    prices: dict[int, _PriceUpdate] = field(default_factory=dict)  # offering index -> update
    capacity: _CapacityUpdate | None = None


_RESERVATION_KEYS = frozenset(
    {wk.LABEL_CAPACITY_RESERVATION_ID, wk.LABEL_CAPACITY_RESERVATION_TYPE, wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE}
)


def _offering_values(offering: Offering) -> tuple[tuple[str, str], ...]:
    """The labels an offering gives its node (zone, zone id, capacity type; a reserved one's reservation labels)."""
    return tuple(
        (key, value)
        for key in OFFERING_KEYS
        if (key not in _RESERVATION_KEYS or offering.reservation_id) and (value := offering_label(offering, key))
    )


class _Matcher:
    """Which instance types and offerings of a NodePool an overlay's requirements select."""

    def __init__(self, requirements: Requirements) -> None:
        self.requirements = requirements
        self.keys = tuple(requirements)

    def _defined(self, pool: OverlayPool, it: InstanceType) -> Requirements:
        """The requirements the NodePool and type define, on the overlay's keys only."""
        out: list[Requirement] = []
        for key in self.keys:
            reqs: list[Requirement] = []
            if key == wk.LABEL_NODEPOOL:
                reqs.append(Requirement(key, False, frozenset((pool.name,))))
            if key in pool.labels:
                reqs.append(Requirement(key, False, frozenset((pool.labels[key],))))
            if key in OFFERING_KEYS:
                values = {v for o in it.offerings for k, v in _offering_values(o) if k == key}
                if values:
                    reqs.append(Requirement(key, False, frozenset(values)))
            elif key in it.labels:
                reqs.append(Requirement(key, False, frozenset((it.labels[key],))))
            elif key in TYPE_KEYS:
                reqs.append(Requirement(key, False))  # the type lacks the label: DoesNotExist
            out.extend(reqs)
        return Requirements(out)

    def offerings(self, pool: OverlayPool, it: InstanceType) -> list[int]:
        """Indexes of the offerings of ``it`` in ``pool`` the overlay selects (empty: not the type)."""
        if self._defined(pool, it).compatible(self.requirements) is not None:
            return []
        # An offering label the overlay requires but the offering does not carry (the reservation id of an
        # on-demand offering) leaves the offering out, unless the requirement allows it absent (NotIn, DoesNotExist).
        wanted = [(key, req) for key, req in self.requirements.items() if key in OFFERING_KEYS]
        selected = []
        for i, offering in enumerate(it.offerings):
            values = dict(_offering_values(offering))
            if all(req.has(values[key]) if key in values else req.allows_absent() for key, req in wanted):
                selected.append(i)
        return selected


def _requirements(overlay: NodeOverlay) -> Requirements:
    return Requirements(Requirement.create(r.key, r.operator, r.values or ()) for r in overlay.spec.requirements)


def apply_overlays(overlays: Sequence[NodeOverlay], pools: Sequence[OverlayPool]) -> OverlayResult:
    """Apply ``overlays`` to the instance types of ``pools`` (see the module docstring)."""
    if not overlays:
        return OverlayResult({p.name: tuple(p.instance_types) for p in pools})
    updates: dict[str, dict[str, _TypeUpdate]] = {}  # pool -> type -> updates
    verdicts: dict[str, OverlayVerdict] = {}
    for overlay in precedence(overlays):
        errors = overlay.runtime_errors()
        matcher: _Matcher | None = None
        if not errors:
            try:
                matcher = _Matcher(_requirements(overlay))
            except RequirementError as exc:
                errors = [f"spec.requirements: {exc}"]
        if matcher is None:
            verdicts[overlay.name] = OverlayVerdict(overlay.name, "False", REASON_RUNTIME_VALIDATION, "; ".join(errors))
            continue
        selected = [
            (pool.name, it.name, chosen)
            for pool in pools
            for it in pool.instance_types
            if (chosen := matcher.offerings(pool, it))
        ]
        if any(_conflicts(updates, pool_name, name, chosen, overlay) for pool_name, name, chosen in selected):
            verdicts[overlay.name] = OverlayVerdict(overlay.name, "False", REASON_CONFLICT, CONFLICT_MESSAGE)
            continue
        for pool_name, name, chosen in selected:
            _store(updates.setdefault(pool_name, {}).setdefault(name, _TypeUpdate()), chosen, overlay)
        verdicts[overlay.name] = OverlayVerdict(overlay.name, "True")

    result: dict[str, tuple[InstanceType, ...]] = {}
    priced: set[tuple[str, str]] = set()
    sized: set[tuple[str, str]] = set()
    for pool in pools:
        mine = updates.get(pool.name)
        if not mine:
            result[pool.name] = tuple(pool.instance_types)
            continue
        types: list[InstanceType] = []
        for it in pool.instance_types:
            update = mine.get(it.name)
            if update is None:
                types.append(it)
                continue
            types.append(_applied(it, update))
            if update.prices:
                priced.add((pool.name, it.name))
            if update.capacity is not None and update.capacity.resources:
                sized.add((pool.name, it.name))
        result[pool.name] = tuple(types)
    ordered = tuple(verdicts[o.name] for o in sorted(overlays, key=lambda o: o.name) if o.name in verdicts)
    return OverlayResult(result, ordered, frozenset(priced), frozenset(sized))


def _conflicts(
    updates: Mapping[str, Mapping[str, _TypeUpdate]], pool: str, name: str, chosen: list[int], overlay: NodeOverlay
) -> bool:
    update = updates.get(pool, {}).get(name)
    if update is None:
        return False
    spec = overlay.spec
    if spec.price is not None or spec.price_adjustment is not None:
        for index in chosen:
            existing = update.prices.get(index)
            if existing is not None and existing.lowest_weight == overlay.weight:
                return True
    capacity = update.capacity
    if spec.capacity is not None and capacity is not None and capacity.lowest_weight == overlay.weight:
        return any(resource in capacity.lowest_resources for resource in spec.capacity)
    return False


def _store(update: _TypeUpdate, chosen: list[int], overlay: NodeOverlay) -> None:
    spec = overlay.spec
    change = spec.price if spec.price is not None else spec.price_adjustment
    if change is not None:
        for index in chosen:
            existing = update.prices.get(index)
            if existing is None:
                update.prices[index] = _PriceUpdate(change, overlay.weight)
            else:
                existing.lowest_weight = overlay.weight
    if spec.capacity is not None:
        if update.capacity is None:
            update.capacity = _CapacityUpdate()
        capacity = update.capacity
        for resource, quantity in spec.capacity.items():
            capacity.resources.setdefault(resource, quantity)
        capacity.lowest_weight = overlay.weight
        capacity.lowest_resources = dict(spec.capacity)


def _applied(it: InstanceType, update: _TypeUpdate) -> InstanceType:
    offerings = it.offerings
    if update.prices:
        offerings = tuple(
            dataclasses.replace(o, price=adjusted_price(o.price, update.prices[i].change)) if i in update.prices else o
            for i, o in enumerate(it.offerings)
        )
    capacity, allocatable = it.capacity, it.allocatable
    if update.capacity is not None and update.capacity.resources:
        added = {name: to_milli(quantity) for name, quantity in update.capacity.resources.items()}
        overhead = it.overhead.total()
        capacity = {**it.capacity, **added}
        allocatable = {**it.allocatable, **{k: max(0, v - overhead.get(k, 0)) for k, v in added.items()}}
    return dataclasses.replace(it, offerings=offerings, capacity=capacity, allocatable=allocatable)
