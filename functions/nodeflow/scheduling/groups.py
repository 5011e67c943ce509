"""Pending pods grouped: identical pods (a Deployment's replicas, say) are placed together, and
groups are tried largest first, as Karpenter's queue orders pods.

Must not touch: where a group goes (``solver``, ``packing``, ``topology``), the clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nodeflow.scheduling.preferences import Constraints, Preferences, initial_preferences
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.taints import Taint, Toleration, untolerated
from nodeflow.scheduling.types import NO_DENIALS, AffinityTerm, HostPort, PodInput, SchedulingInput, Selector

__all__ = ["Group", "group_pods", "regroup"]

_NOSCHEDULE = frozenset({"NoSchedule", "NoExecute"})
_ALL_EFFECTS = frozenset({"NoSchedule", "NoExecute", "PreferNoSchedule"})
_GROUP_SERIAL = itertools.count()
_BASIC_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


@dataclass(slots=True)
class Group:
    """Identical pods (same requests, constraints, tolerations, namespace and relevant labels)."""

    pods: list[PodInput]
    requests: Mapping[str, int]
    constraints: Constraints
    preferences: Preferences
    tolerations: tuple[Toleration, ...]
    host_ports: frozenset[HostPort]
    namespace: str
    labels: Mapping[str, str]
    error: str | None
    # NodePool -> why no new NodeClaim of it may be made for these pods (NodeflowPolicy access; usually empty).
    denied: Mapping[str, str] = NO_DENIALS
    # A serial number: caches key on it (ids of dead groups get reused).
    uid: int = field(default_factory=lambda: next(_GROUP_SERIAL))

    @property
    def first(self) -> PodInput:
        return self.pods[0]

    @property
    def requirements(self) -> tuple[Requirements, ...]:
        return self.constraints.requirements

    @property
    def own_requirements(self) -> tuple[Requirements, ...]:
        """The pods' own nodeSelector and required node affinity: what narrows the domains of
        their topology spread (never their preferences or their volumes' zones)."""
        first = self.first
        return first.requirements if first.own_requirements is None else first.own_requirements

    @property
    def effects(self) -> frozenset[str]:
        """Taint effects the group must tolerate (PreferNoSchedule until relaxed)."""
        return _NOSCHEDULE if self.constraints.tolerate_prefer_no_schedule else _ALL_EFFECTS

    def required_anti_affinity(self) -> tuple[AffinityTerm, ...]:
        return tuple(t for t in self.first.affinity if t.anti and t.weight == 0)

    def required_affinity(self) -> tuple[AffinityTerm, ...]:
        return tuple(t for t in self.first.affinity if not t.anti and t.weight == 0)

    def tolerates(self, taints: Iterable[Taint]) -> bool:
        """Do the group's pods tolerate these taints (for the effects they must tolerate now)?"""
        return untolerated(self.tolerations, taints, self.effects) is None


def _relevant_label_keys(inp: SchedulingInput) -> frozenset[str]:
    """Label keys some selector looks at: only these separate otherwise identical pods."""
    selectors: list[Selector] = []
    for pod in inp.pods:
        selectors += [s.selector for s in pod.spread] + [t.selector for t in pod.affinity]
    for node in inp.nodes:
        for running in node.running:
            selectors += [t.selector for t in running.anti_affinity]
    keys: set[str] = set()
    for selector in set(selectors):
        keys |= {k for k, _ in selector.match_labels} | {k for k, _, _ in selector.expressions}
    return frozenset(keys)


def group_pods(pods: Sequence[PodInput], ignore_preferences: bool, inp: SchedulingInput) -> list[Group]:
    """Identical pods grouped; groups ordered largest first (cpu, then memory), then by key."""
    relevant = _relevant_label_keys(inp)
    # Under a namespace $/hour ceiling pods of different namespaces are charged apart: never one group.
    by_namespace = bool(relevant) or any(c.scope == "namespace" for c in inp.ceilings)
    groups: dict[tuple[object, ...], Group] = {}
    for pod in pods:
        labels = tuple(sorted((k, v) for k, v in pod.labels.items() if k in relevant)) if relevant else ()
        signature = (
            tuple(sorted(pod.requests.items())),
            pod.requirements,
            pod.own_requirements,
            pod.tolerations,
            pod.host_ports,
            pod.preferred,
            pod.spread,
            pod.affinity,
            pod.error,
            pod.namespace if by_namespace else "",
            labels,
            tuple(sorted(pod.denied.items())) if pod.denied else (),
        )
        group = groups.get(signature)
        if group is None:
            prefs = initial_preferences(pod, ignore_preferences)
            groups[signature] = Group(
                pods=[pod],
                requests=pod.requests,
                constraints=prefs.constraints(pod),
                preferences=prefs,
                tolerations=pod.tolerations,
                host_ports=pod.host_ports,
                namespace=pod.namespace,
                labels=pod.labels,
                error=pod.error,
                denied=pod.denied,
            )
        else:
            group.pods.append(pod)
    ordered = list(groups.values())
    for group in ordered:
        group.pods.sort(key=lambda p: p.key)
    ordered.sort(key=_size_order)
    return _counted_first(ordered)


def _counted_first(ordered: list[Group]) -> list[Group]:
    """Groups whose pods other groups' required topology spreads count go before those groups, largest first
    otherwise (in a cycle, the group waiting for the fewest others goes first). A spread is checked, after launch,
    against where its selector's pods end up, and kube-scheduler binds pods wherever they were put: a group placed
    after the carriers could push a carrier's domain beyond maxSkew (Karpenter, ordering by size alone, can)."""
    counting = [(i, g) for i, g in enumerate(ordered) if any(not s.schedule_anyway for s in g.constraints.spread)]
    if not counting:
        return ordered
    waits = [0] * len(ordered)  # how many other groups each group's spreads count, not yet placed
    counted_by: list[list[int]] = [[] for _ in ordered]
    by_label: dict[tuple[str, str], list[int]] = {}  # (key, value) -> the groups carrying that label
    for j, other in enumerate(ordered):
        for pair in other.labels.items():
            by_label.setdefault(pair, []).append(j)
    everyone = range(len(ordered))
    for i, carrier in counting:
        selectors = {s.selector for s in carrier.constraints.spread if not s.schedule_anyway}
        candidates: set[int] = set()
        for sel in selectors:
            anchor = sel.anchor()
            candidates.update(everyone if anchor is None else by_label.get(anchor, ()))
        for j in sorted(candidates):
            other = ordered[j]
            if j != i and other.namespace == carrier.namespace and any(sel.matches(other.labels) for sel in selectors):
                waits[i] += 1
                counted_by[j].append(i)
    if not any(waits):
        return ordered
    ready = [i for i in range(len(ordered)) if waits[i] == 0]
    heapq.heapify(ready)
    done = [False] * len(ordered)
    out: list[Group] = []
    while len(out) < len(ordered):
        if ready:
            i = heapq.heappop(ready)
        else:  # a cycle: the group left waiting for the fewest others goes next (the largest of them)
            i = min((k for k in range(len(ordered)) if not done[k]), key=lambda k: (waits[k], k))
        if done[i]:
            continue
        done[i] = True
        out.append(ordered[i])
        for k in counted_by[i]:
            waits[k] -= 1
            if waits[k] == 0 and not done[k]:
                heapq.heappush(ready, k)
    return out


def _size_order(group: Group) -> tuple[int, int, int, str]:
    """Largest first: scarce extended resources (GPUs, ...), then cpu, then memory (as Karpenter)."""
    requests = group.requests
    extended = sum(v for k, v in requests.items() if k not in _BASIC_RESOURCES)
    return (-extended, -requests.get("cpu", 0), -requests.get("memory", 0), group.first.key)


def regroup(group: Group, pods: list[PodInput], prefs: Preferences) -> Group:
    """The same pods again, with (possibly relaxed) preferences."""
    return Group(
        pods=pods,
        requests=group.requests,
        constraints=prefs.constraints(pods[0]),
        preferences=prefs,
        tolerations=group.tolerations,
        host_ports=group.host_ports,
        namespace=group.namespace,
        labels=group.labels,
        error=group.error,
        denied=group.denied,
    )
