"""The solver input for a cluster: ``build_input``. Pure (no I/O, no clock: ``now`` is an input).

Decides which pods the solver places (pending ones, those nominated to a NodeClaim that is gone, and those of
deleting nodes that need capacity elsewhere), which capacity it sees (live nodes with their pods, NodeClaims still
launching with the pods nominated to them), which NodePools are the solver's (static ones are not: their top-ups
are planned here first, within the policies' bounds) and what the NodeflowPolicies bind. Each step has its own
function; what each kind of object becomes is decided in ``pods``, ``pools``, ``overlays``, ``nodes`` and
``policies``.

Must not touch: the solver's choices, or any object of the cluster (the input is built from copies of what was
read).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from nodeflow.api.core import Pod, daemon_set_pod
from nodeflow.api.karpenter import NodeClaim
from nodeflow.catalog.model import CatalogData
from nodeflow.catalog.reservations import select as select_reservations
from nodeflow.cluster import ClusterState
from nodeflow.plan.nodes import Placed, claim_index, claim_input, initialized, left_behind, node_input, nominated_pods
from nodeflow.plan.overlays import overlaid
from nodeflow.plan.pods import (
    TERMINAL_PHASES,
    _Converter,
    converter,
    needs_placement,
    on_new_nodes,
    reschedulable,
)
from nodeflow.plan.policies import bounds, governance, paused, with_denials
from nodeflow.plan.pools import pool_input
from nodeflow.scheduling.static_capacity import is_static, static_plans
from nodeflow.scheduling.types import (
    CeilingInput,
    GroupLimitInput,
    NodeInput,
    NodePoolInput,
    PodInput,
    SchedulingInput,
)

__all__ = ["build_input", "gc_paused"]


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
    with gc_paused():
        return _build_input(state, catalog, preference_policy, min_values_policy, unavailable, now)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block (as it was after it)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(slots=True)
class _Pods:
    """The pods of a cluster as the input is being built: those the solver places (``pending``, in the order they
    are found), those bound to a node (by node name), and those nominated to a NodeClaim not yet initialized."""

    convert: _Converter
    pending: list[PodInput] = field(default_factory=list)
    bound: dict[str, list[Pod]] = field(default_factory=dict)
    nominated_to: dict[str, NodeClaim] = field(default_factory=dict)  # pod key -> the NodeClaim it waits for
    waiting: dict[str, list[Pod]] = field(default_factory=dict)  # NodeClaim name -> its nominated pods still pending


def _build_input(
    state: ClusterState,
    catalog: CatalogData,
    preference_policy: str,
    min_values_policy: str,
    unavailable: frozenset[tuple[str, str, str]],
    now: datetime | None = None,
) -> SchedulingInput:
    pods = _sorted_pods(state, converter(state))
    pools = _pools(state, catalog, unavailable)
    gov = governance(state)
    if gov is not None and gov.windows and now is not None:
        pools = paused(pools, gov, now)
    by_name = {p.name: p for p in pools}
    nodes, names, providers = _nodes(state, pods)
    nodes += _in_flight(state, pods, by_name, names, providers)
    for waiting in pods.waiting.values():  # nominated to a claim that is gone or unusable: provision again
        pods.pending.extend(pods.convert.pod(p, pending=True) for p in waiting)
    daemons = tuple(
        d for ds in state.daemon_sets if (d := on_new_nodes(pods.convert.pod(daemon_set_pod(ds)))) is not None
    )
    # Static NodePools (spec.replicas) are not the solver's: their nodes are only existing capacity to it.
    static = {p.name for p in state.node_pools if is_static(p)}
    pending = pods.pending
    ceilings: tuple[CeilingInput, ...] = ()
    group_limits: tuple[GroupLimitInput, ...] = ()
    if gov is not None:
        if gov.pool_rules or gov.resource_rules:
            dynamic = [p.name for p in pools if p.name not in static]
            pending = with_denials(pending, gov, dynamic, pods.convert.namespace_labels)
        ceilings, group_limits = bounds(state, catalog, gov, nodes)
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


def _pools(
    state: ClusterState, catalog: CatalogData, unavailable: frozenset[tuple[str, str, str]]
) -> tuple[NodePoolInput, ...]:
    """Every NodePool of ``state`` resolved to its instance types (with the capacity reservations its class selects),
    the NodeOverlays applied."""
    classes = {nc.name: nc for nc in state.node_classes}
    reserved = {
        nc.name: tuple(select_reservations(state.capacity_reservations, nc.spec.capacity_reservation_selector_terms))
        for nc in state.node_classes
        if state.capacity_reservations and nc.spec.capacity_reservation_selector_terms
    }
    pools = tuple(pool_input(p, classes, catalog, unavailable, reserved) for p in state.node_pools)
    if state.node_overlays:
        pools = overlaid(pools, state.node_overlays)
    return pools


def _sorted_pods(state: ClusterState, convert: _Converter) -> _Pods:
    """The pods of ``state`` sorted: bound to a node (unless finished), nominated to a NodeClaim not yet initialized
    (they count as placed on it), or pending (converted; Karpenter's pod validation applies)."""
    pods = _Pods(convert)
    for claim in state.node_claims:
        if claim.metadata.deletion_timestamp is None and not initialized(claim):
            for key in nominated_pods(claim):
                pods.nominated_to.setdefault(key, claim)
    for pod in state.pods:
        if pod.spec.node_name:
            if pod.status is None or pod.status.phase not in TERMINAL_PHASES:
                pods.bound.setdefault(pod.spec.node_name, []).append(pod)
        elif needs_placement(pod):
            claim_of = pods.nominated_to.get(pod.key)
            if claim_of is not None:
                pods.waiting.setdefault(claim_of.name, []).append(pod)
            else:
                pods.pending.append(convert.pod(pod, pending=True))
    return pods


def _nodes(state: ClusterState, pods: _Pods) -> tuple[list[NodeInput], set[str], set[str]]:
    """The registered nodes (but those a failed launch left behind), with their pods and those nominated to their
    NodeClaim, and their names and provider ids; the pods of deleting nodes that need capacity elsewhere join
    ``pods.pending``."""
    claim_of_node, claim_of_provider, going = claim_index(state.node_claims)
    convert = pods.convert
    nodes: list[NodeInput] = []
    names: set[str] = set()
    providers: set[str] = set()
    for node in state.nodes:
        name = node.metadata.name or ""
        node_claim = claim_of_node.get(name) or claim_of_provider.get(node.spec.provider_id or "")
        if node_claim is None and left_behind(node):
            continue  # a failed or terminated launch's Node: no pod may be planned onto it
        names.add(name)
        if node.spec.provider_id:
            providers.add(node.spec.provider_id)
        on_node = pods.bound.get(name, [])
        extra = pods.waiting.pop(node_claim.name, []) if node_claim is not None else []
        ports = [(hp[0], hp[1], hp[2]) for p in (*on_node, *extra) for hp in p.host_ports()]
        # Only their keys and requests count here: no solver input is built for pods already placed.
        inputs = [Placed(p.key, p.spec.effective_requests()) for p in (*on_node, *extra)]
        # Topology counts live pods only: a terminating pod keeps its resources but no longer counts.
        running = tuple(convert.running(p) for p in (*on_node, *extra) if p.metadata.deletion_timestamp is None)
        deleting = node.metadata.deletion_timestamp is not None or bool({name, node.spec.provider_id} & going)
        if deleting:
            # Its pods need capacity elsewhere now (they keep counting where they run until they go); those a
            # NodeClaim still launching was made for already have it (its planned requests hold them).
            pods.pending.extend(
                convert.pod(p) for p in on_node if p.key not in pods.nominated_to and reschedulable(p, state.pdbs)
            )
        # (A node not yet initialized is judged without its start-up taints: the solver does that.)
        nodes.append(node_input(node, inputs, ports, running, node_claim, deleting))
    return nodes, names, providers


def _in_flight(
    state: ClusterState, pods: _Pods, pools: dict[str, NodePoolInput], names: set[str], providers: set[str]
) -> list[NodeInput]:
    """The NodeClaims still launching (not registered as one of the nodes ``names`` / ``providers``, not being
    deleted), with the pods nominated to them; the pods nominated to one nothing is known of join ``pods.pending``."""
    out: list[NodeInput] = []
    for claim in state.node_claims:
        registered = claim.status is not None and (
            claim.status.node_name in names or claim.status.provider_id in providers
        )
        if registered or claim.metadata.deletion_timestamp is not None:
            continue
        mine = pods.waiting.pop(claim.name, [])
        in_flight = claim_input(claim, pools, [pods.convert.pod(p) for p in mine])
        if in_flight is not None:
            out.append(in_flight)
        else:
            pods.pending.extend(pods.convert.pod(p, pending=True) for p in mine)
    return out
