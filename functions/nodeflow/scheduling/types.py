"""Inputs and outputs of the solver: plain frozen data, no Kubernetes or AWS objects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.taints import Taint, Toleration

HostPort = tuple[str, str, int]  # (hostIP, protocol, port)


@dataclass(frozen=True, slots=True)
class PodInput:
    """What the solver needs to know about one pod."""

    key: str  # "namespace/name"
    requests: Mapping[str, int]  # milli-units, including the "pods" resource
    # Node requirements as ORed alternatives (nodeSelector ANDed into each required
    # node-affinity term). A pod without node constraints has one empty alternative.
    requirements: tuple[Requirements, ...] = (Requirements(),)
    tolerations: tuple[Toleration, ...] = ()
    host_ports: frozenset[HostPort] = frozenset()
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodePoolInput:
    """A NodePool with its EC2NodeClass already resolved into instance types."""

    name: str
    requirements: Requirements  # spec requirements + template labels (+ defaults)
    instance_types: tuple[InstanceType, ...]
    weight: int = 0
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, int] | None = None  # milli-units
    # Why the NodePool cannot be used at all (e.g. its EC2NodeClass is missing).
    error: str | None = None


@dataclass(frozen=True, slots=True)
class NodeInput:
    """An existing node, or a NodeClaim still launching (``in_flight``)."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    capacity: Mapping[str, int] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    pods: tuple[str, ...] = ()  # pods already bound or nominated to it
    requested: Mapping[str, int] = field(default_factory=dict)  # sum of those pods' requests
    host_ports: frozenset[HostPort] = frozenset()
    nodepool: str | None = None
    in_flight: bool = False
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class SchedulingInput:
    pods: tuple[PodInput, ...]
    nodepools: tuple[NodePoolInput, ...]
    nodes: tuple[NodeInput, ...] = ()
    daemon_pods: tuple[PodInput, ...] = ()  # one representative pod per DaemonSet


@dataclass(frozen=True, slots=True)
class NodeClaimPlan:
    """A node to launch: its NodePool, requirements, options and pods."""

    nodepool: str
    requirements: Requirements
    instance_types: tuple[str, ...]  # compatible types, cheapest first
    capacity_type: str
    zones: tuple[str, ...]
    pods: tuple[str, ...]
    requests: Mapping[str, int]  # pods + daemon overhead, milli-units
    price: float  # $/hour of the cheapest option

    def to_json(self) -> dict[str, Any]:
        return {
            "nodePool": self.nodepool,
            "instanceTypes": list(self.instance_types),
            "capacityType": self.capacity_type,
            "zones": list(self.zones),
            "pods": list(self.pods),
            "requests": {k: format_milli(v, k) for k, v in sorted(self.requests.items()) if v},
            "pricePerHour": round(self.price, 6),
        }


@dataclass(frozen=True, slots=True)
class ExistingPlacement:
    name: str
    pods: tuple[str, ...]
    in_flight: bool = False


@dataclass(frozen=True, slots=True)
class UnschedulablePod:
    pod: str
    reasons: Mapping[str, str]  # NodePool name -> why not ("" key when there is no NodePool)


@dataclass(frozen=True, slots=True)
class SchedulingResult:
    node_claims: tuple[NodeClaimPlan, ...]
    existing: tuple[ExistingPlacement, ...]
    unschedulable: tuple[UnschedulablePod, ...]

    @property
    def total_price(self) -> float:
        return sum(nc.price for nc in self.node_claims)

    def to_json(self) -> dict[str, Any]:
        """The stable JSON shape of ``plan -o json`` (documented in the README)."""
        return {
            "nodeClaims": [nc.to_json() for nc in self.node_claims],
            "existingNodes": [{"name": e.name, "pods": list(e.pods)} for e in self.existing],
            "unschedulable": [{"pod": u.pod, "reasons": dict(sorted(u.reasons.items()))} for u in self.unschedulable],
            "totalPricePerHour": round(self.total_price, 6),
        }
