"""Pods to solver input (``PodInput``, ``RunningPod``). Pure.

Decides which pods of the manifests need a place (``needs_placement``: unbound, not finished or deleting, not a
DaemonSet's; unlike ``kube.snapshot.is_pending`` it does not ask for the scheduler's Unschedulable verdict, which
offline manifests lack), which pods of a deleting node need capacity elsewhere
(``reschedulable``), what a pod asks of a node (requests, node selector and affinity ANDed per term, tolerations,
host ports, volume zones; ``_Converter``, one conversion per PodSpec), which pods Karpenter's validation refuses
(a selector on a restricted label), and how a DaemonSet's pod meets a new node (``on_new_nodes``).

Must not touch: nodes, NodePools or policies (a pod is converted as it is; what may run where is the solver's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nodeflow.api import labels as wk
from nodeflow.api.core import PersistentVolume, PersistentVolumeClaim, Pod, PodDisruptionBudget, PodSpec, StorageClass
from nodeflow.api.meta import Taint as ApiTaint
from nodeflow.api.meta import Toleration as ApiToleration
from nodeflow.cluster import ClusterState
from nodeflow.constraints import (
    affinity_terms,
    namespace_label_map,
    preferred_node_terms,
    running_pod,
    topology_spreads,
    volume_requirements,
)
from nodeflow.podutil import do_not_disrupt_active, fully_blocking_pdbs, is_daemon_or_mirror
from nodeflow.scheduling.requirements import Requirement, Requirements, normalize_key
from nodeflow.scheduling.taints import Taint, Toleration
from nodeflow.scheduling.types import PodInput, RunningPod

__all__ = [
    "TERMINAL_PHASES",
    "convert_pods",
    "converter",
    "needs_placement",
    "on_new_nodes",
    "pod_converter",
    "reschedulable",
    "taint",
    "toleration",
]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def taint(t: ApiTaint) -> Taint:
    """A Kubernetes taint as the solver matches it."""
    return Taint(t.key, t.effect, t.value or "")


def toleration(t: ApiToleration) -> Toleration:
    """A Kubernetes toleration as the solver matches it."""
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
            tolerations=tuple(toleration(t) for t in spec.tolerations),
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


def needs_placement(pod: Pod) -> bool:
    if pod.spec.node_name or (pod.status is not None and pod.status.phase in TERMINAL_PHASES):
        return False
    if pod.metadata.deletion_timestamp is not None:
        return False
    owner = pod.owner()
    return not (owner is not None and owner.kind == "DaemonSet")


def reschedulable(pod: Pod, pdbs: Sequence[PodDisruptionBudget]) -> bool:
    """Does a pod bound to a deleting node need capacity elsewhere now (Karpenter's currently reschedulable
    pod): not finished; not terminating unless a StatefulSet owns it (its replacement needs the same name, so
    it is provisioned for early); not a DaemonSet or mirror pod; not held by do-not-disrupt; and not one no
    PodDisruptionBudget will ever let go."""
    if pod.status is not None and pod.status.phase in TERMINAL_PHASES:
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


def converter(state: ClusterState) -> _Converter:
    """A converter for the pods of ``state``: its namespaces' labels and volumes indexed once."""
    pod_namespaces = {p.metadata.namespace or "default" for p in state.pods}
    return _Converter(
        namespace_labels=namespace_label_map(state.namespaces, pod_namespaces),
        pvcs={c.key: c for c in state.pvcs},
        pvs={v.metadata.name or "": v for v in state.pvs},
        classes={c.metadata.name or "": c for c in state.storage_classes},
    )


_LIFECYCLE_LABELS = (wk.LABEL_REGISTERED, wk.LABEL_INITIALIZED)


def on_new_nodes(daemon: PodInput) -> PodInput | None:
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
    convert = converter(state)
    return lambda pods: {p.key: convert.pod(p) for p in pods}


def convert_pods(state: ClusterState, pods: Iterable[Pod]) -> dict[str, PodInput]:
    """``pods`` (bound or not) as solver input, keyed "namespace/name", converted as ``build_input``
    converts pending pods (used by disruption to simulate moving the pods of a node)."""
    return pod_converter(state)(pods)
