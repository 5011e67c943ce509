"""Inputs and outputs of the solver: plain frozen data, no Kubernetes or AWS objects.

Must not touch: any decision; these are the shapes only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeflow.api.pool_names import PoolNames
from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import InstanceType
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.taints import Taint, Toleration

HostPort = tuple[str, str, int]  # (hostIP, protocol, port)


class _NoDenials(Mapping[str, str]):
    """The empty, immutable (and hashable, so a dataclass default) ``PodInput.denied`` of almost every pod."""

    __slots__ = ()

    def __getitem__(self, key: str) -> str:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0


NO_DENIALS: Mapping[str, str] = _NoDenials()


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector (matchLabels + matchExpressions with In/NotIn/Exists/DoesNotExist)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()  # (key, operator, values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, operator, values in self.expressions:
            present = key in labels
            if operator == "In":
                if not present or labels[key] not in values:
                    return False
            elif operator == "NotIn":
                if present and labels[key] in values:
                    return False
            elif operator == "Exists":
                if not present:
                    return False
            elif operator == "DoesNotExist" and present:
                return False
        return True

    def anchor(self) -> tuple[str, str] | None:
        """A label every pod it selects carries, if it names one: an index key (see ``topology.Topology``)."""
        return self.match_labels[0] if self.match_labels else None

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels]
        parts += [f"{k} {op} [{', '.join(sorted(vals))}]" if vals else f"{k} {op}" for k, op, vals in self.expressions]
        return ",".join(parts) or "<everything>"


@dataclass(frozen=True, slots=True)
class TopologySpread:
    """A topologySpreadConstraint, with matchLabelKeys already folded into ``selector``."""

    key: str
    max_skew: int
    selector: Selector
    schedule_anyway: bool = False  # whenUnsatisfiable: ScheduleAnyway
    min_domains: int | None = None
    honor_node_affinity: bool = True  # nodeAffinityPolicy (default Honor)
    honor_node_taints: bool = False  # nodeTaintsPolicy (default Ignore)


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A pod (anti-)affinity term; ``weight`` 0 means required."""

    key: str  # topologyKey
    selector: Selector
    namespaces: frozenset[str] | None  # None: every namespace (namespaceSelector: {})
    anti: bool = False
    weight: int = 0

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.namespaces is None or namespace in self.namespaces) and self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class PodInput:
    """What the solver needs to know about one pod."""

    key: str  # "namespace/name"
    requests: Mapping[str, int]  # milli-units, including the "pods" resource
    # Node requirements as ORed alternatives (nodeSelector ANDed into each required
    # node-affinity term). A pod without node constraints has one empty alternative.
    requirements: tuple[Requirements, ...] = (Requirements(),)
    # The pod's own node constraints (nodeSelector and required node affinity) when ``requirements``
    # holds more (its volumes' zones): what limits the domains of its topology spread. None: the same.
    own_requirements: tuple[Requirements, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    host_ports: frozenset[HostPort] = frozenset()
    labels: Mapping[str, str] = field(default_factory=dict)
    # Preferred node-affinity terms (weight, requirements), as written.
    preferred: tuple[tuple[int, Requirements], ...] = ()
    spread: tuple[TopologySpread, ...] = ()
    affinity: tuple[AffinityTerm, ...] = ()  # pod affinity and anti-affinity, required and preferred
    # Why the pod cannot be scheduled whatever the NodePool (e.g. a missing PVC).
    error: str | None = None
    # NodePools in which no NEW NodeClaim may be made for this pod (NodeflowPolicy access rules): NodePool name ->
    # the reason. Existing nodes and NodeClaims still launching stay usable.
    denied: Mapping[str, str] = NO_DENIALS

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class RunningPod:
    """A pod already on a node: counted by topology spread and affinity, and its own required
    anti-affinity keeps matching pods out of its domain."""

    namespace: str
    labels: Mapping[str, str]
    anti_affinity: tuple[AffinityTerm, ...] = ()


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
    # Why the NodePool cannot be used at all (e.g. its EC2NodeClass is missing), or why no NodeClaim of it may be
    # made now (a NodeflowPolicy provisioning pause).
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CeilingInput:
    """A NodeflowPolicy $/hour ceiling and what is in use under it now (existing nodes and NodeClaims still
    launching): new NodeClaims that would take the amount over ``max_per_hour`` are not made."""

    policy: str
    scope: str  # "cluster" | "nodePool" | "namespace"
    name: str  # the NodePool or namespace ("" for the cluster)
    max_per_hour: float
    in_use: float = 0.0

    def describe(self, in_use: float) -> str:
        """ "the $/hour ceiling of NodePool gpu ($20.00/hour, $18.50 in use)"."""
        what = {"cluster": "the cluster", "nodePool": f"NodePool {self.name}", "namespace": f"namespace {self.name}"}
        return (
            f"the $/hour ceiling of {what.get(self.scope, self.name)} (${self.max_per_hour:.2f}/hour, "
            f"${in_use:.2f} in use)"
        )


@dataclass(frozen=True, slots=True)
class GroupLimitInput:
    """NodeflowPolicy limits (milli-units; ``nodes`` counts 1000 a node) shared by a group of NodePools, and what
    the group's nodes already hold (as a NodePool's own ``spec.limits`` count them)."""

    policy: str
    name: str
    nodepools: PoolNames  # ("*": every NodePool)
    limits: Mapping[str, int]
    in_use: Mapping[str, int] = field(default_factory=dict)


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
    running: tuple[RunningPod, ...] = ()  # labels and anti-affinity of the pods on it
    # On its way out (being deleted, or a disruption candidate in a simulation): not schedulable, and its domains
    # hold no topology spread's minimum (Karpenter leaves such nodes out of its state nodes). A node only cordoned
    # still has its domains, as kube-scheduler counts them.
    leaving: bool = False


@dataclass(frozen=True, slots=True)
class SchedulingInput:
    pods: tuple[PodInput, ...]
    nodepools: tuple[NodePoolInput, ...]
    nodes: tuple[NodeInput, ...] = ()
    daemon_pods: tuple[PodInput, ...] = ()  # one representative pod per DaemonSet
    # "Respect": preferred terms are tried as required, then relaxed (Karpenter's default);
    # "Ignore": preferences are dropped up front.
    preference_policy: str = "Respect"
    # "Strict": a NodeClaim must keep minValues distinct values; "BestEffort": relaxed if not.
    min_values_policy: str = "Strict"
    # What static NodePools (spec.replicas) still need, and why some short of replicas get nothing: not the
    # solver's (it never opens a static pool's NodeClaim); ``nodeflow.plan`` adds them to the plan.
    static_claims: tuple[NodeClaimPlan, ...] = ()
    static_problems: tuple[str, ...] = ()
    static_pools: tuple[NodePoolInput, ...] = ()  # the static NodePools, resolved (for drift replacements)
    # NodeflowPolicy ceilings and group limits (empty without policies): see ``CeilingInput``, ``GroupLimitInput``.
    ceilings: tuple[CeilingInput, ...] = ()
    group_limits: tuple[GroupLimitInput, ...] = ()


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
    # Made to reach a static NodePool's spec.replicas (no pods needed; ``nodeflow.scheduling.static_capacity``).
    static: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "nodePool": self.nodepool,
            "instanceTypes": list(self.instance_types),
            "capacityType": self.capacity_type,
            "zones": list(self.zones),
            "pods": list(self.pods),
            "requests": {k: format_milli(v, k) for k, v in sorted(self.requests.items()) if v},
            "pricePerHour": round(self.price, 6),
            # What its requirements fix (single-valued ones, a value of each custom label): the NodeClaim's
            # node carries these; zone, instance type and capacity type come from the launch (listed above).
            "labels": dict(sorted(self.requirements.labels().items())),
        }
        if self.static:
            out["static"] = True
        return out


@dataclass(frozen=True, slots=True)
class ExistingPlacement:
    name: str
    pods: tuple[str, ...]
    in_flight: bool = False


NO_NODEPOOL = "-"  # the reasons' key when there is no NodePool: the reason is the cluster's, not a NodePool's


@dataclass(frozen=True, slots=True)
class UnschedulablePod:
    pod: str
    reasons: Mapping[str, str]  # NodePool name -> why not (``NO_NODEPOOL`` when there is no NodePool)


@dataclass(frozen=True, slots=True)
class UnschedulableGroup:
    """Unschedulable pods that have the same reasons, NodePool by NodePool (said once for all of them)."""

    pods: tuple[str, ...]
    reasons: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"pods": list(self.pods), "reasons": dict(sorted(self.reasons.items()))}


def group_unschedulable(items: Iterable[UnschedulablePod]) -> tuple[UnschedulableGroup, ...]:
    """``items`` grouped by identical reasons, the groups in the order of their first pod, pods in input order."""
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for u in items:
        groups.setdefault(tuple(sorted(u.reasons.items())), []).append(u.pod)
    return tuple(UnschedulableGroup(tuple(pods), dict(reasons)) for reasons, pods in groups.items())


def pod_list(pods: Sequence[str], shown: int = 5) -> str:
    """One pod's name; or how many, with the first ``shown`` names and how many more ("21 pods (a, b, c, d, e and
    16 more)")."""
    if len(pods) == 1:
        return pods[0]
    more = f" and {len(pods) - shown} more" if len(pods) > shown else ""
    return f"{len(pods)} pods ({', '.join(pods[:shown])}{more})"


def reason_lines(reasons: Mapping[str, str]) -> list[str]:
    """``reasons`` (NodePool -> why) as lines to read: the NodePools that have the same reason share one line
    ("default, spot: why"), in NodePool order; a reason that is not a NodePool's (``NO_NODEPOOL``: there is none)
    is said alone."""
    pools: dict[str, list[str]] = {}
    for pool, why in sorted(reasons.items()):
        pools.setdefault(why, []).append(pool)
    return [why if names == [NO_NODEPOOL] else f"{', '.join(names)}: {why}" for why, names in pools.items()]


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
            "unschedulable": [g.to_json() for g in group_unschedulable(self.unschedulable)],
            "totalPricePerHour": round(self.total_price, 6),
        }


@dataclass(frozen=True, slots=True)
class PodExplanation:
    """Where one pod goes (``placement``, None when nowhere) and, per NodePool, why or why not."""

    pod: str
    placement: str | None
    per_pool: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "placement": self.placement, "nodePools": dict(sorted(self.per_pool.items()))}
