"""The catalog as the parity tests see it: instance types resolved for an EC2NodeClass, and the
cheapest offering that satisfies some requirements (an independent reference for "the cheapest")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodeflow.api.karpenter import EC2NodeClass
from nodeflow.catalog.instancetypes import resolve_instance_types
from nodeflow.catalog.model import InstanceType
from nodeflow.catalog.offline import load_offline
from nodeflow.plan import node_class_settings
from tests.parity.harness import ZONES, node_class

Predicate = Callable[[InstanceType], bool]


def instance_types(the_node_class: Mapping[str, Any] | None = None) -> dict[str, InstanceType]:
    """Every instance type of the offline us-east-1 catalog, resolved for ``the_node_class`` (default AL2023)."""
    model = EC2NodeClass.model_validate(dict(the_node_class or node_class()))
    resolved = resolve_instance_types(load_offline("us-east-1"), node_class_settings(model))
    return {it.name: it for it in resolved}


def fits(it: InstanceType, requests: Mapping[str, int]) -> bool:
    """Do ``requests`` (milli-units) fit the type's allocatable?"""
    return all(it.allocatable.get(k, 0) >= v for k, v in requests.items() if v)


# What a NodePool without a karpenter.sh/capacity-type requirement allows (as Karpenter: every capacity type; a
# reserved offering only through a capacity reservation, which these tests do not have).
DEFAULT_CAPACITY_TYPES = ("spot", "on-demand")


def offering_price(
    it: InstanceType, capacity_types: Iterable[str] = DEFAULT_CAPACITY_TYPES, zones: Iterable[str] = ZONES
) -> float | None:
    """The cheapest available offering of ``it`` in ``zones`` and ``capacity_types`` (None: none)."""
    cts, zs = set(capacity_types), set(zones)
    prices = [o.price for o in it.offerings if o.available and o.capacity_type in cts and o.zone in zs]
    return min(prices) if prices else None


def cheapest(
    types: Mapping[str, InstanceType],
    keep: Predicate = lambda it: True,
    capacity_types: Iterable[str] = DEFAULT_CAPACITY_TYPES,
    zones: Iterable[str] = ZONES,
) -> tuple[float, str]:
    """(price, name) of the cheapest type that ``keep`` accepts, over the given offerings."""
    cts, zs = tuple(capacity_types), tuple(zones)
    priced = [(p, it.name) for it in types.values() if keep(it) and (p := offering_price(it, cts, zs)) is not None]
    assert priced, "no instance type matches"
    return min(priced)


def label(it: InstanceType, key: str) -> str | None:
    return it.labels.get(key)
