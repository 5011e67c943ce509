"""From Kubernetes and Karpenter objects to a solver input, and a plan. Pure (no I/O).

Used by ``python -m nodeflow plan`` today and by the provisioner Lambda later: both hand
this module the objects they read (files or the API server) and a catalog.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from nodeflow.api import labels as wk
from nodeflow.api.block_devices import ephemeral_volume_bytes
from nodeflow.api.core import (
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PodSpec,
    StorageClass,
    daemon_set_pod,
    resource_milli,
)
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.api.karpenter_overlay import NodeOverlay
from nodeflow.api.meta import Taint as ApiTaint
from nodeflow.api.meta import Toleration as ApiToleration
from nodeflow.api.pool_names import EVERY
from nodeflow.api.quantity import to_milli
from nodeflow.catalog.instancetypes import NodeClassSettings, resolve_instance_types
from nodeflow.catalog.model import CatalogData, InstanceType
from nodeflow.catalog.overlays import OverlayPool, OverlayVerdict, apply_overlays
from nodeflow.catalog.reservations import CapacityReservation
from nodeflow.catalog.reservations import select as select_reservations
from nodeflow.cluster import ClusterState, claim_index, left_behind, nominated_pods
from nodeflow.constraints import (
    affinity_terms,
    namespace_label_map,
    preferred_node_terms,
    running_pod,
    topology_spreads,
    volume_requirements,
)
from nodeflow.podutil import do_not_disrupt_active, fully_blocking_pdbs, is_daemon_or_mirror
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.nodepools import NO_NODEPOOL
from nodeflow.scheduling.pricing import type_matches
from nodeflow.scheduling.requirements import Requirement, Requirements, normalize_key
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.static import is_static, static_plans
from nodeflow.scheduling.taints import Taint, Toleration
from nodeflow.scheduling.types import (
    CeilingInput,
    GroupLimitInput,
    NodeInput,
    NodePoolInput,
    PodInput,
    RunningPod,
    SchedulingInput,
    SchedulingResult,
)

if TYPE_CHECKING:
    from nodeflow.governance.policy import Governance

__all__ = [
    "build_input",
    "convert_pods",
    "node_class_readiness",
    "node_class_settings",
    "overlay_verdicts",
    "plan",
    "plan_warnings",
    "pod_converter",
    "with_denials",
    "with_static",
]

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


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
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        inp = build_input(state, catalog, preference_policy, min_values_policy, unavailable, now)
        return with_static(solve(inp), inp)
    finally:
        if gc_was_enabled:
            gc.enable()


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


def _taint(t: ApiTaint) -> Taint:
    return Taint(t.key, t.effect, t.value or "")


def _toleration(t: ApiToleration) -> Toleration:
    return Toleration(t.key or "", t.operator or "Equal", t.value or "", t.effect or "")


def _pod_requirements(spec: PodSpec) -> tuple[Requirements, ...]:
    """nodeSelector ANDed into each required node-affinity term; the terms are ORed."""
    selector = Requirements(Requirement.create(k, "In", [v]) for k, v in sorted(spec.node_selector.items()))
    affinity = spec.affinity.node_affinity if spec.affinity else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity else None
    if required is None:
        return (selector,)
    alternatives: list[Requirements] = []
    for term in required.node_selector_terms:
        exprs = [Requirement.create(e.key, e.operator, e.values or ()) for e in term.match_expressions or ()]
        # matchFields supports metadata.name only: that names one existing node.
        exprs += [Requirement.create(wk.LABEL_HOSTNAME, f.operator, f.values or ()) for f in term.match_fields or ()]
        alternatives.append(selector.add(Requirements(exprs)))
    return tuple(alternatives) or (selector,)


def _restricted_selector(spec: PodSpec) -> str | None:
    """Why no node is provisioned for a pod whose nodeSelector or required node affinity selects on a
    label reserved for Karpenter (kubernetes.io/hostname, or the karpenter.sh / karpenter.k8s.aws domains
    but for their well-known labels), whatever the operator: Karpenter's pod validation refuses it."""
    keys = list(spec.node_selector)
    affinity = spec.affinity.node_affinity if spec.affinity else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity else None
    if required is not None:
        keys += [e.key for term in required.node_selector_terms for e in term.match_expressions or ()]
    for key in keys:
        if wk.is_restricted_label(normalize_key(key)):
            return (
                f'label "{key}" is restricted: a pod may not select on kubernetes.io/hostname or on a '
                f"{' / '.join(sorted(wk.RESTRICTED_LABEL_DOMAINS))} label other than the well-known ones"
            )
    return None


@dataclass(frozen=True, slots=True)
class _SpecFacts:
    requests: Mapping[str, int]
    requirements: tuple[Requirements, ...]
    tolerations: tuple[Toleration, ...]
    host_ports: frozenset[tuple[str, str, int]]
    restricted: str | None = None  # Karpenter's pod validation refuses the pod (pending pods only)


@dataclass(slots=True)
class _Converter:
    """Pods to solver input. Replicas of a workload share one PodSpec: converted once."""

    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    pvcs: Mapping[str, PersistentVolumeClaim] = field(default_factory=dict)
    pvs: Mapping[str, PersistentVolume] = field(default_factory=dict)
    classes: Mapping[str, StorageClass] = field(default_factory=dict)
    cache: dict[int, tuple[PodSpec, _SpecFacts]] = field(default_factory=dict)
    # Specs parsed apart (a LIST gives each pod its own PodSpec object) but equal in what the facts are made of:
    # a cheap fingerprint -> (the fields the facts read, facts) of the specs seen with it.
    by_content: dict[tuple[object, ...], list[tuple[tuple[object, ...], _SpecFacts]]] = field(default_factory=dict)

    def facts(self, spec: PodSpec) -> _SpecFacts:
        hit = self.cache.get(id(spec))
        if hit is not None and hit[0] is spec:
            return hit[1]
        # Everything _SpecFacts is computed from (equal fields give equal facts: only then is one reused).
        source = (
            spec.containers,
            spec.init_containers,
            spec.overhead,
            spec.host_network,
            spec.node_selector,
            spec.affinity.node_affinity if spec.affinity else None,
            spec.tolerations,
        )
        fingerprint = (
            tuple(
                (c.name, tuple(c.resources.requests.items()), tuple(c.resources.limits.items()))
                for c in (*spec.containers, *spec.init_containers)
            ),
            tuple(spec.node_selector.items()),
            len(spec.tolerations),
            spec.host_network,
        )
        seen = self.by_content.setdefault(fingerprint, [])
        for other, known in seen:
            if other == source:
                self.cache[id(spec)] = (spec, known)
                return known
        facts = _SpecFacts(
            requests=spec.effective_requests(),
            requirements=_pod_requirements(spec),
            tolerations=tuple(_toleration(t) for t in spec.tolerations),
            host_ports=frozenset((hp[0], hp[1], hp[2]) for hp in spec.host_ports()),
            restricted=_restricted_selector(spec),
        )
        self.cache[id(spec)] = (spec, facts)
        seen.append((source, facts))
        return facts

    def pod(self, pod: Pod, pending: bool = False) -> PodInput:
        """``pending``: a pod waiting to be scheduled, validated as Karpenter validates those (not the pods
        of a deleting node, nor pods simulated elsewhere by disruption)."""
        facts = self.facts(pod.spec)
        requirements = facts.requirements
        error = facts.restricted if pending else None
        if pod.spec.volumes and error is None:
            volumes = volume_requirements(pod, self.pvcs, self.pvs, self.classes)
            if isinstance(volumes, str):
                error = volumes
            elif any(len(v) for v in volumes):
                requirements = tuple(alt.add(v) for alt in requirements for v in volumes)
        return PodInput(
            key=pod.key,
            requests=facts.requests,
            requirements=requirements,
            own_requirements=None if requirements is facts.requirements else facts.requirements,
            tolerations=facts.tolerations,
            host_ports=facts.host_ports,
            labels=pod.labels,
            preferred=preferred_node_terms(pod),
            spread=topology_spreads(pod),
            affinity=affinity_terms(pod, self.namespace_labels),
            error=error,
        )

    def running(self, pod: Pod) -> RunningPod:
        return running_pod(pod, self.namespace_labels)


def _is_pending(pod: Pod) -> bool:
    if pod.spec.node_name or (pod.status is not None and pod.status.phase in _TERMINAL_PHASES):
        return False
    if pod.metadata.deletion_timestamp is not None:
        return False
    owner = pod.owner()
    return not (owner is not None and owner.kind == "DaemonSet")


def _reschedulable(pod: Pod, pdbs: Sequence[PodDisruptionBudget]) -> bool:
    """Does a pod bound to a deleting node need capacity elsewhere now (Karpenter's currently reschedulable
    pod): not finished; not terminating unless a StatefulSet owns it (its replacement needs the same name, so
    it is provisioned for early); not a DaemonSet or mirror pod; not held by do-not-disrupt; and not one no
    PodDisruptionBudget will ever let go."""
    if pod.status is not None and pod.status.phase in _TERMINAL_PHASES:
        return False
    owner = pod.owner()
    kind = owner.kind if owner is not None else None
    if pod.metadata.deletion_timestamp is not None and kind != "StatefulSet":
        return False
    if is_daemon_or_mirror(pod):
        return False
    # A plan has no clock: a do-not-disrupt duration counts as still running.
    started = pod.status.start_time if pod.status is not None else None
    return do_not_disrupt_active(pod.metadata.annotations, started, None) is None and not fully_blocking_pdbs(pod, pdbs)


# --- node pools and classes --------------------------------------------------------------------


def node_class_settings(node_class: EC2NodeClass) -> NodeClassSettings:
    """What of an EC2NodeClass shapes instance types: AMI family, kubelet, the volume its nodes' ephemeral storage
    lives on (the one the launch template gets: ``nodeflow.api.block_devices``), RAID0."""
    family = node_class.resolved_ami_family
    kubelet = node_class.kubelet
    return NodeClassSettings.create(
        ami_family=family,
        max_pods=kubelet.max_pods,
        pods_per_core=kubelet.pods_per_core,
        kube_reserved=kubelet.kube_reserved,
        system_reserved=kubelet.system_reserved,
        eviction_hard=kubelet.eviction_hard,
        eviction_soft=kubelet.eviction_soft,
        root_volume_bytes=ephemeral_volume_bytes(family, node_class.spec.block_device_mappings),
        instance_store_policy=node_class.spec.instance_store_policy,
    )


def node_class_readiness(node_class: EC2NodeClass) -> tuple[str, str]:
    """("True" | "False" | "Unknown", message) of the EC2NodeClass's Ready condition. A condition written
    for an older generation of the object (it was edited since) says nothing: "Unknown". A class being deleted is
    not ready, whatever its condition says (as Karpenter, which launches nothing from a terminating class)."""
    if node_class.metadata.deletion_timestamp is not None:
        return "False", f"EC2NodeClass {node_class.name!r} is being deleted"
    conditions = node_class.status.conditions if node_class.status is not None else None
    ready = next((c for c in conditions or () if c.type == "Ready"), None)
    if ready is None:
        return "Unknown", f"EC2NodeClass {node_class.name!r} has not been resolved yet"
    observed, generation = ready.observed_generation, node_class.metadata.generation
    if observed is not None and generation is not None and observed != generation:
        return "Unknown", f"EC2NodeClass {node_class.name!r} changed since it was last resolved"
    return ready.status, ready.message or ("" if ready.status == "True" else "not ready")


def _pool_requirements(pool: NodePool, node_class: EC2NodeClass | None = None) -> Requirements:
    reqs = Requirements(
        Requirement.create(r.key, r.operator, r.values or (), r.min_values)
        for r in pool.spec.template.spec.requirements
    )
    # A resolved EC2NodeClass limits the zones to those of its subnets (Karpenter does the same).
    subnets = node_class.status.subnets if node_class is not None and node_class.status is not None else None
    zones = sorted({s.zone for s in subnets or () if s.zone})
    if zones:
        reqs = reqs.add(Requirements([Requirement.create(wk.LABEL_ZONE, "In", zones)]))
    return reqs


def _pool_input(
    pool: NodePool,
    classes: Mapping[str, EC2NodeClass],
    catalog: CatalogData,
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
    reservations: Mapping[str, tuple[CapacityReservation, ...]] | None = None,
) -> NodePoolInput:
    spec = pool.spec.template.spec
    ref = spec.node_class_ref
    error: str | None = None
    types: tuple[InstanceType, ...] = ()
    if ref.group != wk.AWS_GROUP or ref.kind != "EC2NodeClass":
        error = f"nodeClassRef {ref.group}/{ref.kind} is not supported (expected {wk.AWS_GROUP}/EC2NodeClass)"
    elif ref.name not in classes:
        error = f"EC2NodeClass {ref.name!r} (spec.template.spec.nodeClassRef) was not found"
    elif (readiness := node_class_readiness(classes[ref.name]))[0] == "False":
        # Karpenter skips a NodePool whose class is not Ready: its launches could only fail.
        error = f"EC2NodeClass {ref.name!r} is not ready: {readiness[1]}"
    else:
        types = tuple(
            resolve_instance_types(
                catalog, node_class_settings(classes[ref.name]), unavailable, (reservations or {}).get(ref.name, ())
            )
        )
    limits = pool.spec.limits
    return NodePoolInput(
        name=pool.name,
        requirements=_pool_requirements(pool, classes.get(ref.name)),
        instance_types=types,
        weight=pool.spec.weight or 0,
        taints=tuple(_taint(t) for t in spec.taints or ()),
        startup_taints=tuple(_taint(t) for t in spec.startup_taints or ()),
        labels=dict(pool.spec.template.metadata.labels or {}),
        limits={k: to_milli(v) for k, v in limits.items()} if limits is not None else None,
        error=error,
    )


def _overlaid(pools: tuple[NodePoolInput, ...], overlays: Sequence[NodeOverlay]) -> tuple[NodePoolInput, ...]:
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


# --- nodes and in-flight NodeClaims ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Placed:
    """A pod on a node (or nominated to its NodeClaim), as its node's input needs it: key and requests
    (``PodInput.requests``: ``PodSpec.effective_requests``)."""

    key: str
    requests: Mapping[str, int]


def _node_input(
    node: Node,
    pods: Sequence[_Placed],
    ports: Iterable[tuple[str, str, int]],
    running: tuple[RunningPod, ...],
    claim: NodeClaim | None = None,
    deleting: bool = False,
) -> NodeInput:
    """A registered node. Until it carries karpenter.sh/initialized "true" (what Karpenter's cluster state
    reads: the Node's label, not the NodeClaim's condition), a resource its kubelet reports as zero or not
    yet (e.g. GPUs before the device plugin runs) is taken from the NodeClaim, as Karpenter does."""
    labels = dict(node.metadata.labels or {})
    allocatable, capacity = node.allocatable_milli(), node.capacity_milli()
    if claim is not None and labels.get(wk.LABEL_INITIALIZED) != "true":
        status = claim.status
        if status is not None:
            allocatable = _fill_zeros(allocatable, resource_milli(status.allocatable or {}))
            capacity = _fill_zeros(capacity, resource_milli(status.capacity or {}))
    return NodeInput(
        name=node.metadata.name or "",
        labels=labels,
        allocatable=allocatable,
        capacity=capacity,
        taints=tuple(_taint(t) for t in node.spec.taints or ()),
        pods=tuple(p.key for p in pods),
        requested=res.total(p.requests for p in pods),
        host_ports=frozenset(ports),
        nodepool=labels.get(wk.LABEL_NODEPOOL),
        schedulable=not node.spec.unschedulable and node.metadata.deletion_timestamp is None and not deleting,
        running=running,
        leaving=node.metadata.deletion_timestamp is not None or deleting,
    )


def _fill_zeros(reported: Mapping[str, int], expected: Mapping[str, int]) -> dict[str, int]:
    """``reported`` with the resources it lacks or has at zero taken from ``expected``."""
    out = dict(reported)
    for key, value in expected.items():
        if not out.get(key):
            out[key] = value
    return out


def _initialized(claim: NodeClaim) -> bool:
    cond = claim.status.condition("Initialized") if claim.status is not None else None
    return cond is not None and cond.status == "True"


def _claim_input(
    claim: NodeClaim, pools: Mapping[str, NodePoolInput], nominated: Sequence[PodInput] = ()
) -> NodeInput | None:
    """A NodeClaim still launching, as capacity pods can join (None when nothing is known of it).

    What it already holds is its ``spec.resources.requests`` (its pods and daemons, as planned),
    or else the requests of the ``nominated`` pods still pending.
    """
    reqs = Requirements(
        Requirement.create(r.key, r.operator, r.values or (), r.min_values) for r in claim.spec.requirements
    )
    labels = {**reqs.labels(), **(claim.metadata.labels or {})}
    pool_name = labels.get(wk.LABEL_NODEPOOL)
    status = claim.status
    allocatable = resource_milli(status.allocatable) if status and status.allocatable else {}
    capacity = resource_milli(status.capacity) if status and status.capacity else {}
    if not allocatable:
        pool = pools.get(pool_name or "")
        matching = [it for it in (pool.instance_types if pool else ()) if type_matches(it, reqs)]
        if not matching:
            return None
        allocatable = {k: min(it.allocatable.get(k, 0) for it in matching) for k in matching[0].allocatable}
        capacity = capacity or {k: max(it.capacity.get(k, 0) for it in matching) for k in matching[0].capacity}
    planned = claim.spec.resources.requests if claim.spec.resources is not None else None
    requested = resource_milli(planned) if planned else res.total(p.requests for p in nominated)
    return NodeInput(
        name=claim.name,
        labels=labels,
        allocatable=allocatable,
        capacity=capacity,
        taints=tuple(_taint(t) for t in claim.spec.taints or ()),
        pods=tuple(p.key for p in nominated),
        requested=requested,
        host_ports=frozenset(hp for p in nominated for hp in p.host_ports),
        nodepool=pool_name,
        in_flight=True,
    )


_LIFECYCLE_LABELS = (wk.LABEL_REGISTERED, wk.LABEL_INITIALIZED)


def _on_new_nodes(daemon: PodInput) -> PodInput | None:
    """A DaemonSet's pod as it meets a new node: every node gets karpenter.sh/registered and
    karpenter.sh/initialized "true" in time, so node affinity on them is settled here (a daemon that waits
    for them still runs there, and counts in the node's overhead); None when it never runs on new nodes."""
    if not any(k in alt for alt in daemon.requirements for k in _LIFECYCLE_LABELS):
        return daemon
    kept = []
    for alt in daemon.requirements:
        if all(alt[k].has("true") for k in _LIFECYCLE_LABELS if k in alt):
            kept.append(Requirements(r for k, r in alt.items() if k not in _LIFECYCLE_LABELS))
    return dataclasses.replace(daemon, requirements=tuple(kept)) if kept else None


def pod_converter(state: ClusterState) -> Callable[[Iterable[Pod]], dict[str, PodInput]]:
    """``convert_pods`` for ``state``, its per-cluster maps (namespaces' labels, volumes) built once: call it
    for each batch of pods instead of ``convert_pods`` (which scans every pod's namespace per call)."""
    pod_namespaces = {p.metadata.namespace or "default" for p in state.pods}
    convert = _Converter(
        namespace_labels=namespace_label_map(state.namespaces, pod_namespaces),
        pvcs={c.key: c for c in state.pvcs},
        pvs={v.metadata.name or "": v for v in state.pvs},
        classes={c.metadata.name or "": c for c in state.storage_classes},
    )
    return lambda pods: {p.key: convert.pod(p) for p in pods}


def convert_pods(state: ClusterState, pods: Iterable[Pod]) -> dict[str, PodInput]:
    """``pods`` (bound or not) as solver input, keyed "namespace/name", converted as ``build_input``
    converts pending pods (used by disruption to simulate moving the pods of a node)."""
    return pod_converter(state)(pods)


def build_input(
    state: ClusterState,
    catalog: CatalogData,
    preference_policy: str = "Respect",
    min_values_policy: str = "Strict",
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
    now: datetime | None = None,
) -> SchedulingInput:
    """The solver input for ``state``: pending pods, pools resolved to instance types, nodes, and what the
    NodeflowPolicies of ``state`` allow (``now``: the time pause windows are judged at; None: none is open)."""
    # Tens of thousands of acyclic objects (one PodInput per pod): cyclic GC passes would only add time.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _build_input(state, catalog, preference_policy, min_values_policy, unavailable, now)
    finally:
        if gc_was_enabled:
            gc.enable()


def _build_input(
    state: ClusterState,
    catalog: CatalogData,
    preference_policy: str,
    min_values_policy: str,
    unavailable: frozenset[tuple[str, str, str]],
    now: datetime | None = None,
) -> SchedulingInput:
    pod_namespaces = {p.metadata.namespace or "default" for p in state.pods}
    convert = _Converter(
        namespace_labels=namespace_label_map(state.namespaces, pod_namespaces),
        pvcs={c.key: c for c in state.pvcs},
        pvs={v.metadata.name or "": v for v in state.pvs},
        classes={c.metadata.name or "": c for c in state.storage_classes},
    )
    classes = {nc.name: nc for nc in state.node_classes}
    reserved = {
        nc.name: tuple(select_reservations(state.capacity_reservations, nc.spec.capacity_reservation_selector_terms))
        for nc in state.node_classes
        if state.capacity_reservations and nc.spec.capacity_reservation_selector_terms
    }
    pools = tuple(_pool_input(p, classes, catalog, unavailable, reserved) for p in state.node_pools)
    if state.node_overlays:
        pools = _overlaid(pools, state.node_overlays)
    gov = None
    if state.policies:
        from nodeflow.governance.policy import Governance  # only with policies (cold imports stay small)

        gov = Governance.from_policies(state.policies)
    if gov is not None and gov.windows and now is not None:
        pools = _paused(pools, gov, now)
    by_name = {p.name: p for p in pools}

    # Pods nominated to a NodeClaim that is not yet initialized count as placed on it.
    nominated_to: dict[str, NodeClaim] = {}
    for claim in state.node_claims:
        if claim.metadata.deletion_timestamp is None and not _initialized(claim):
            for key in nominated_pods(claim):
                nominated_to.setdefault(key, claim)

    pending: list[PodInput] = []
    bound: dict[str, list[Pod]] = {}
    waiting: dict[str, list[Pod]] = {}  # claim name -> its nominated pods still pending
    for pod in state.pods:
        if pod.spec.node_name:
            if pod.status is None or pod.status.phase not in _TERMINAL_PHASES:
                bound.setdefault(pod.spec.node_name, []).append(pod)
        elif _is_pending(pod):
            claim_of = nominated_to.get(pod.key)
            if claim_of is not None:
                waiting.setdefault(claim_of.name, []).append(pod)
            else:
                pending.append(convert.pod(pod, pending=True))

    claim_of_node, claim_of_provider, going = claim_index(state.node_claims)
    nodes: list[NodeInput] = []
    node_names = set()
    node_providers = set()
    for node in state.nodes:
        name = node.metadata.name or ""
        node_claim = claim_of_node.get(name) or claim_of_provider.get(node.spec.provider_id or "")
        if node_claim is None and left_behind(node):
            continue  # a failed or terminated launch's Node: no pod may be planned onto it
        node_names.add(name)
        if node.spec.provider_id:
            node_providers.add(node.spec.provider_id)
        on_node = bound.get(name, [])
        extra = waiting.pop(node_claim.name, []) if node_claim is not None else []
        ports = [(hp[0], hp[1], hp[2]) for p in (*on_node, *extra) for hp in p.host_ports()]
        # Only their keys and requests count here: no solver input is built for pods already placed.
        inputs = [_Placed(p.key, p.spec.effective_requests()) for p in (*on_node, *extra)]
        # Topology counts live pods only: a terminating pod keeps its resources but no longer counts.
        running = tuple(convert.running(p) for p in (*on_node, *extra) if p.metadata.deletion_timestamp is None)
        deleting = node.metadata.deletion_timestamp is not None or bool({name, node.spec.provider_id} & going)
        if deleting:
            # Its pods need capacity elsewhere now (they keep counting where they run until they go); those a
            # NodeClaim still launching was made for already have it (its planned requests hold them).
            pending.extend(
                convert.pod(p) for p in on_node if p.key not in nominated_to and _reschedulable(p, state.pdbs)
            )
        # (A node not yet initialized is judged without its start-up taints: the solver does that.)
        nodes.append(_node_input(node, inputs, ports, running, node_claim, deleting))
    for claim in state.node_claims:
        registered = claim.status is not None and (
            claim.status.node_name in node_names or claim.status.provider_id in node_providers
        )
        if registered or claim.metadata.deletion_timestamp is not None:
            continue
        mine = waiting.pop(claim.name, [])
        in_flight = _claim_input(claim, by_name, [convert.pod(p) for p in mine])
        if in_flight is not None:
            nodes.append(in_flight)
        else:
            pending.extend(convert.pod(p, pending=True) for p in mine)
    for pods in waiting.values():  # nominated to a claim that is gone or unusable: provision again
        pending.extend(convert.pod(p, pending=True) for p in pods)

    daemons = tuple(d for ds in state.daemon_sets if (d := _on_new_nodes(convert.pod(daemon_set_pod(ds)))) is not None)
    # Static NodePools (spec.replicas) are not the solver's: their nodes are only existing capacity to it.
    static = {p.name for p in state.node_pools if is_static(p)}
    ceilings: tuple[CeilingInput, ...] = ()
    group_limits: tuple[GroupLimitInput, ...] = ()
    if gov is not None:
        dynamic = [p.name for p in pools if p.name not in static]
        if gov.pool_rules or gov.resource_rules:
            pending = with_denials(pending, gov, dynamic, convert.namespace_labels)
        if gov.ceilings:
            from nodeflow.governance.spend import cluster_spend

            spend, _ = cluster_spend(state, catalog)
            ceilings = tuple(
                CeilingInput(c.policy, c.scope, c.name, c.max_per_hour, spend.in_use(c)) for c in gov.ceilings
            )
        group_limits = tuple(
            GroupLimitInput(
                g.policy,
                g.name,
                g.nodepools,
                g.limits,
                res.total({**(n.capacity or n.allocatable), "nodes": 1000} for n in nodes if n.nodepool in g.nodepools),
            )
            for g in gov.group_limits
        )
    # Static top-ups first, within the policies' ceilings and group limits; the solver gets what they leave.
    wanted = (
        static_plans(state.node_pools, by_name, state.node_claims, state.nodes, daemons, ceilings, group_limits)
        if static
        else None
    )
    if wanted is not None and (ceilings or group_limits):
        ceilings, group_limits = wanted.ceilings, wanted.group_limits
    return SchedulingInput(
        pods=tuple(pending),
        nodepools=tuple(p for p in pools if p.name not in static) if static else pools,
        nodes=tuple(nodes),
        daemon_pods=daemons,
        preference_policy=preference_policy,
        min_values_policy=min_values_policy,
        static_claims=wanted.node_claims if wanted else (),
        static_problems=wanted.problems if wanted else (),
        static_pools=tuple(p for p in pools if p.name in static),
        ceilings=ceilings,
        group_limits=group_limits,
    )


def _paused(pools: tuple[NodePoolInput, ...], gov: Governance, now: datetime) -> tuple[NodePoolInput, ...]:
    """``pools`` with those a NodeflowPolicy window pauses at ``now`` unusable for new NodeClaims (static top-ups
    included), the pause as the reason (a NodePool already unusable keeps its own reason)."""
    out = []
    for p in pools:
        why = gov.provisioning_pause(p.name, now) if p.error is None else None
        out.append(p if why is None else dataclasses.replace(p, error=why))
    return tuple(out)


def with_denials(
    pods: Sequence[PodInput], gov: Governance, pools: Sequence[str], namespace_labels: Mapping[str, Mapping[str, str]]
) -> list[PodInput]:
    """``pods`` with the NodePools NodeflowPolicies deny them (``PodInput.denied``): NodePool access by namespace,
    and extended resources a namespace may not request (every NodePool is denied then)."""
    cache: dict[tuple[str, frozenset[str]], Mapping[str, str]] = {}
    out: list[PodInput] = []
    for pod in pods:
        namespace = pod.namespace
        names = frozenset(k for k, v in pod.requests.items() if v > 0)
        key = (namespace, names)
        denied = cache.get(key)
        if denied is None:
            labels = namespace_labels.get(namespace, {})
            resource = gov.request_denial(namespace, labels, names)
            denied = {}
            for pool in pools:
                why = gov.pool_denial(namespace, labels, pool) or resource
                if why is not None:
                    denied[pool] = why
            cache[key] = denied
        out.append(dataclasses.replace(pod, denied=denied) if denied else pod)
    return out


# --- what a plan assumes ------------------------------------------------------------------------

# At most this many pods are named in one warning; more are counted.
_NAMED_PODS = 5


def plan_warnings(state: ClusterState, inp: SchedulingInput, region: str) -> list[str]:
    """What a plan of ``inp`` (built from ``state``) assumes, one sentence each, in a stable order:
    an EC2NodeClass a NodePool uses that has no resolved subnets (every zone of ``region`` is assumed),
    no pending pods at all, pending pods that request nothing (planned as needing no CPU or memory)."""
    warnings: list[str] = []
    used = {p.spec.template.spec.node_class_ref.name for p in state.node_pools}
    for node_class in sorted(state.node_classes, key=lambda c: c.name):
        if node_class.name not in used:
            continue
        subnets = node_class.status.subnets if node_class.status is not None else None
        if not any(s.zone for s in subnets or ()):
            what = "no status" if node_class.status is None else "no subnets in its status"
            warnings.append(
                f"EC2NodeClass {node_class.name!r} has {what} (it was not resolved against AWS): "
                f"all zones of {region} are assumed"
            )
    warnings.extend(inp.static_problems)
    if not inp.pods and not inp.static_claims:
        warnings.append(
            "no pending pods found (pods without spec.nodeName that are not finished, deleted or DaemonSet-owned, "
            "and pods of deleting nodes): nothing to plan"
        )
    bare = sorted(p.key for p in inp.pods if not any(v for k, v in p.requests.items() if k != "pods"))
    if bare:
        named = ", ".join(bare[:_NAMED_PODS])
        more = f" and {len(bare) - _NAMED_PODS} more" if len(bare) > _NAMED_PODS else ""
        warnings.append(
            f"{len(bare)} pending pod(s) request no resources (no cpu or memory requests or limits): {named}{more}; "
            "they are planned as needing only a pod slot"
        )
    for verdict in overlay_verdicts(state, inp):
        if not verdict.ok:
            warnings.append(f"NodeOverlay {verdict.name!r} is not applied ({verdict.reason}): {verdict.message}")
    warnings.extend(_policy_warnings(state))
    return warnings


def _policy_warnings(state: ClusterState) -> list[str]:
    """A NodeflowPolicy naming a NodePool the manifests do not hold (a typo, or a NodePool not given)."""
    known = {p.name for p in state.node_pools}
    out: list[str] = []
    for policy in sorted(state.policies, key=lambda p: p.name):
        spec = policy.spec
        named: dict[str, str] = {}
        for rule in spec.node_pool_access or ():
            named.update((n, "nodePoolAccess") for n in rule.node_pools if n not in named)
        ceilings = spec.cost_ceilings
        for c in (ceilings.node_pools if ceilings is not None else None) or ():
            named.setdefault(c.name, "costCeilings.nodePools")
        for g in spec.limits or ():
            named.update((n, f"limits {g.name}") for n in g.node_pools if n not in named)
        for w in spec.pauses or ():
            named.update((n, f"pauses {w.name}") for n in w.node_pools or () if n not in named)
        for name, where in sorted(named.items()):
            if name != EVERY and name not in known:
                out.append(f"NodeflowPolicy {policy.name!r} names NodePool {name!r} ({where}), which does not exist")
    return out
