"""Existing nodes and NodeClaims still launching (in-flight): the first place pods are tried,
as Karpenter's existing nodes are, before any new NodeClaim.

Must not touch: new NodeClaims (``packing``), topology beyond the hostname limits callers pass, the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from nodeflow.api import labels as wk
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.taints import Taint
from nodeflow.scheduling.types import HostPort, NodeInput, SchedulingInput

if TYPE_CHECKING:
    from nodeflow.scheduling.groups import Group
    from nodeflow.scheduling.topology import HostCaps, Topology

__all__ = ["Node", "make_node", "place_on_nodes", "ports_conflict"]


@dataclass(slots=True)
class Node:
    input: NodeInput
    requirements: Requirements
    taints: tuple[Taint, ...]
    used: dict[str, int]
    ports: set[HostPort]
    placed: list[str] = field(default_factory=list)
    # (namespace, labels, count) of every pod on it, running or placed now: topology counts.
    entries: list[tuple[str, Mapping[str, str], int]] = field(default_factory=list)

    def domain(self, key: str) -> str | None:
        if key == wk.LABEL_HOSTNAME:
            return self.input.labels.get(key) or self.input.name
        return self.input.labels.get(key)


def initializing(node: NodeInput) -> bool:
    """Is the node still coming up: a NodeClaim launching, or a NodePool's node not yet initialized?"""
    return node.in_flight or (node.nodepool is not None and node.labels.get(wk.LABEL_INITIALIZED) != "true")


def node_order(node: NodeInput) -> tuple[bool, bool, str]:
    """The order nodes are offered pods in, as Karpenter's: initialized nodes first, then registered ones
    still initializing, then NodeClaims still launching; by name within each."""
    return (initializing(node), node.in_flight, node.name)


def make_node(node: NodeInput, inp: SchedulingInput) -> Node:
    """A node as the solver sees it: while it initializes, startup and ephemeral taints do not
    keep pods off (they are about to go)."""
    taints = node.taints
    if initializing(node):
        startup = {t.key for p in inp.nodepools if p.name == node.nodepool for t in p.startup_taints}
        taints = tuple(t for t in taints if t.key not in wk.EPHEMERAL_TAINTS and t.key not in startup)
    return Node(
        node, _label_requirements(tuple(node.labels.items())), taints, dict(node.requested), set(node.host_ports)
    )


@lru_cache(maxsize=16384)
def _label_requirements(labels: tuple[tuple[str, str], ...]) -> Requirements:
    """A node's labels as requirements (immutable, so shared): a disruption round solves the same thousands of
    nodes again for every simulation."""
    return Requirements.from_labels(dict(labels))


def place_on_nodes(
    nodes: Iterable[Node],
    topology: Topology,
    group: Group,
    pending: list[str],
    alts: tuple[Requirements, ...],
    caps: HostCaps,
    blocked: set[int],
    allowed: set[int] | None,
    whole: int = 0,
) -> list[str]:
    """Put as many of the group's pending pods as fit on the nodes, in order; the rest is returned.
    ``caps`` are the hostname limits, ``blocked`` / ``allowed`` the node ids that anti-affinity
    rules out / that hostname affinity permits (None: any). ``whole`` > 0: the pods must share one
    node (hostname self-affinity), so only the first node that takes at least that many is used."""
    for node in nodes:
        if not pending:
            break
        nid = id(node)
        if not node.input.schedulable or nid in blocked or (allowed is not None and nid not in allowed):
            continue
        # The cheap room check first (the checks are pure filters, so their order does not change what is
        # placed): at scale most existing nodes are full, and label matching is what costs.
        room = res.max_count(group.requests, node.input.allocatable, node.used)
        if room <= 0:
            continue
        if not group.tolerates(node.taints):
            continue
        if not any(node.requirements.compatible(alt) is None for alt in alts):
            continue
        count = min(room, topology.cap(nid, caps))
        if group.host_ports:
            count = min(count, 0 if ports_conflict(group.host_ports, node.ports) else 1)
        take = min(count, len(pending))
        if take <= 0 or take < whole:
            continue
        node.used = res.add(node.used, group.requests, take)
        node.ports |= group.host_ports
        node.placed.extend(pending[:take])
        topology.record(group, node, take)
        pending = pending[take:]
        if whole:
            break
    return pending


_WILDCARD_IPS = frozenset({"", "0.0.0.0", "::"})


def ports_conflict(wanted: Iterable[HostPort], used: Iterable[HostPort]) -> bool:
    """Do host ports clash? Same protocol and port, and the same IP or either one a wildcard."""
    used_list = list(used)
    for ip, protocol, port in wanted:
        for other_ip, other_protocol, other_port in used_list:
            same_ip = ip == other_ip or ip in _WILDCARD_IPS or other_ip in _WILDCARD_IPS
            if port == other_port and protocol == other_protocol and same_ip:
                return True
    return False
