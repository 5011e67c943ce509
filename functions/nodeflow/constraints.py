"""Kubernetes objects -> the solver's constraint types (pure; no I/O).

Converts the scheduling constraints of a ``Pod`` (topology spread, pod affinity and
anti-affinity, preferred node affinity) and of its volumes (PV node affinity, StorageClass
allowed topologies) into ``nodeflow.scheduling.types`` values, with Kubernetes' semantics:

- A ``None`` label selector matches nothing (``metav1.LabelSelectorAsSelector(nil)`` is
  ``labels.Nothing()``), an empty one ``{}`` matches everything. "Nothing" is
  ``MATCH_NOTHING``: one ``In`` expression with no values, which no label set satisfies.
- ``matchLabelKeys`` adds ``key=<the pod's value>`` and ``mismatchLabelKeys`` adds
  ``key NotIn [<the pod's value>]`` to the selector; keys the pod has no label for are ignored.
- Topology keys are normalised (``topology.ebs.csi.aws.com/zone`` and the beta labels become
  the standard ones), like every requirement key.

Speed: the replicas of a Deployment share one ``PodSpec`` object, so results that depend only
on the spec (and on the few pod labels named by matchLabelKeys / mismatchLabelKeys, and the
namespace) are cached on that ``PodSpec``. The cache records the objects it was computed from
and is rebuilt when they change, so ``model_copy(update=...)`` never sees a stale value. The
``namespace_labels`` mapping is treated as an immutable snapshot: the cache is keyed on its
identity, so pass the same mapping for every pod of one snapshot and do not mutate it.

Must not touch: where pods go (``nodeflow.scheduling``); other objects than the pods' constraints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nodeflow.api.core import (
    LABEL_NAMESPACE_NAME,
    Affinity,
    LabelSelector,
    Namespace,
    NodeSelectorTerm,
    PersistentVolume,
    PersistentVolumeClaim,
    PersistentVolumeClaimSpec,
    Pod,
    PodAffinityTerm,
    PodSpec,
    StorageClass,
    TopologySpreadConstraint,
)
from nodeflow.scheduling.requirements import Requirement, Requirements, normalize_key
from nodeflow.scheduling.types import AffinityTerm, RunningPod, Selector, TopologySpread

__all__ = [
    "ANNOTATION_DEFAULT_STORAGE_CLASS",
    "MATCH_NOTHING",
    "affinity_terms",
    "default_storage_class",
    "namespace_label_map",
    "preferred_node_terms",
    "running_pod",
    "selector",
    "topology_spreads",
    "volume_requirements",
]

ANNOTATION_DEFAULT_STORAGE_CLASS = "storageclass.kubernetes.io/is-default-class"
ANNOTATION_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
_HOSTNAME = "kubernetes.io/hostname"

MATCH_NOTHING = Selector(expressions=(("<no labelSelector>", "In", frozenset()),))
"""The selector of an absent (null) labelSelector: ``In`` an empty set, never satisfied."""

_EVERYTHING = Selector()
_NO_EXTRA: tuple[Requirements, ...] = (Requirements(),)
_MAX_VOLUME_ALTERNATIVES = 64
_CACHE = "__nodeflow_constraints__"

Labels = Mapping[str, str]
NamespaceLabels = Mapping[str, Mapping[str, str]]


# --------------------------------------------------------------------------------------------
# Selectors


def selector(ls: LabelSelector | None) -> Selector:
    """A ``LabelSelector`` as a solver ``Selector``; ``None`` matches nothing (``MATCH_NOTHING``)."""
    if ls is None:
        return MATCH_NOTHING
    if ls.empty:
        return _EVERYTHING
    return Selector(
        match_labels=tuple(sorted(ls.match_labels.items())),
        expressions=tuple((e.key, e.operator, frozenset(e.values)) for e in ls.match_expressions),
    )


def _fold(
    base: Selector,
    labels: Labels,
    match_keys: Sequence[str] = (),
    mismatch_keys: Sequence[str] = (),
) -> Selector:
    """``base`` ANDed with key=value (match) and key NotIn [value] (mismatch) from ``labels``."""
    extra_labels = tuple((key, labels[key]) for key in match_keys if key in labels)
    extra_expressions = tuple((key, "NotIn", frozenset((labels[key],))) for key in mismatch_keys if key in labels)
    if not extra_labels and not extra_expressions:
        return base
    return Selector(
        match_labels=tuple(sorted({*base.match_labels, *extra_labels})),
        expressions=base.expressions + extra_expressions,
    )


# --------------------------------------------------------------------------------------------
# Per-PodSpec cache


@dataclass(slots=True)
class _SpreadCache:
    source: tuple[TopologySpreadConstraint, ...]
    base: tuple[Selector, ...]
    label_keys: tuple[str, ...]
    results: dict[tuple[str | None, ...], tuple[TopologySpread, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class _AffinityCache:
    source: Affinity | None
    namespace_labels: NamespaceLabels
    label_keys: tuple[str, ...]
    results: dict[tuple[object, ...], tuple[AffinityTerm, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class _PreferredCache:
    source: Affinity | None
    result: tuple[tuple[int, Requirements], ...]


@dataclass(slots=True)
class _Cache:
    spread: _SpreadCache | None = None
    affinity: _AffinityCache | None = None
    preferred: _PreferredCache | None = None


def _cache(spec: PodSpec) -> _Cache:
    # Lives in __dict__ under a non-field key, like PodSpec's own requests cache: pydantic
    # ignores it for equality and dumps, and the frozen model stays logically immutable.
    cache = spec.__dict__.get(_CACHE)
    if not isinstance(cache, _Cache):
        cache = _Cache()
        spec.__dict__[_CACHE] = cache
    return cache


# --------------------------------------------------------------------------------------------
# Topology spread


def topology_spreads(pod: Pod) -> tuple[TopologySpread, ...]:
    """Every topologySpreadConstraint of the pod, defaults applied, matchLabelKeys folded in."""
    spec = pod.spec
    constraints = spec.topology_spread_constraints
    if not constraints:
        return ()
    cache = _cache(spec)
    entry = cache.spread
    if entry is None or entry.source is not constraints:
        keys = dict.fromkeys(key for c in constraints for key in c.match_label_keys)
        entry = _SpreadCache(constraints, tuple(selector(c.label_selector) for c in constraints), tuple(keys))
        cache.spread = entry
    labels = pod.labels
    key = tuple(labels.get(k) for k in entry.label_keys)
    result = entry.results.get(key)
    if result is None:
        result = tuple(
            TopologySpread(
                key=normalize_key(c.topology_key),
                max_skew=c.max_skew,
                selector=_fold(base, labels, c.match_label_keys),
                schedule_anyway=c.when_unsatisfiable == "ScheduleAnyway",
                min_domains=c.min_domains,
                honor_node_affinity=c.honors_node_affinity,
                honor_node_taints=c.honors_node_taints,
            )
            for c, base in zip(constraints, entry.base, strict=True)
        )
        entry.results[key] = result
    return result


# --------------------------------------------------------------------------------------------
# Pod affinity and anti-affinity


def _affinity_sources(affinity: Affinity | None) -> list[tuple[PodAffinityTerm, bool, int]]:
    """(term, anti, weight) in spec order: affinity required, preferred; anti required, preferred."""
    out: list[tuple[PodAffinityTerm, bool, int]] = []
    if affinity is None:
        return out
    for group, anti in ((affinity.pod_affinity, False), (affinity.pod_anti_affinity, True)):
        if group is None:
            continue
        out.extend((term, anti, 0) for term in group.required)
        out.extend((weighted.pod_affinity_term, anti, weighted.weight) for weighted in group.preferred)
    return out


def _namespace_matches(ls: LabelSelector, name: str, labels: Labels | None) -> bool:
    if labels is None or labels.get(LABEL_NAMESPACE_NAME) != name:
        labels = {**(labels or {}), LABEL_NAMESPACE_NAME: name}
    return ls.matches(labels)


def _namespaces(term: PodAffinityTerm, own: str, namespace_labels: NamespaceLabels) -> frozenset[str] | None:
    """The namespaces a term selects pods in; None means every namespace.

    Kubernetes: ``namespaces`` plus the namespaces matched by ``namespaceSelector``; an empty selector
    ``{}`` means all namespaces; with neither, the pod's own namespace. Every namespace carries
    the implicit label ``kubernetes.io/metadata.name=<name>``. The pod's own namespace exists
    even when ``namespace_labels`` does not list it (it then has only the implicit label).
    """
    ns_selector = term.namespace_selector
    if ns_selector is None:
        return frozenset(term.namespaces) if term.namespaces else frozenset((own,))
    if ns_selector.empty:
        return None
    names = set(term.namespaces)
    names.update(name for name, labels in namespace_labels.items() if _namespace_matches(ns_selector, name, labels))
    if own not in namespace_labels and _namespace_matches(ns_selector, own, None):
        names.add(own)
    return frozenset(names)


def affinity_terms(pod: Pod, namespace_labels: NamespaceLabels) -> tuple[AffinityTerm, ...]:
    """The pod's podAffinity and podAntiAffinity terms, required (weight 0) then preferred, in spec order.

    ``namespace_labels`` maps namespace name -> labels (see ``namespace_label_map``).
    """
    spec = pod.spec
    affinity = spec.affinity
    if affinity is None or (affinity.pod_affinity is None and affinity.pod_anti_affinity is None):
        return ()
    cache = _cache(spec)
    entry = cache.affinity
    if entry is None or entry.source is not affinity or entry.namespace_labels is not namespace_labels:
        keys = dict.fromkeys(
            key
            for term, _, _ in _affinity_sources(affinity)
            for key in (*term.match_label_keys, *term.mismatch_label_keys)
        )
        entry = _AffinityCache(affinity, namespace_labels, tuple(keys))
        cache.affinity = entry
    labels = pod.labels
    own = pod.namespace
    key = (own, *(labels.get(k) for k in entry.label_keys))
    result = entry.results.get(key)
    if result is None:
        result = tuple(
            AffinityTerm(
                key=normalize_key(term.topology_key),
                selector=_fold(selector(term.label_selector), labels, term.match_label_keys, term.mismatch_label_keys),
                namespaces=_namespaces(term, own, namespace_labels),
                anti=anti,
                weight=weight,
            )
            for term, anti, weight in _affinity_sources(affinity)
        )
        entry.results[key] = result
    return result


def running_pod(pod: Pod, namespace_labels: NamespaceLabels) -> RunningPod:
    """A pod already on a node: namespace, labels and its required anti-affinity terms."""
    anti = tuple(t for t in affinity_terms(pod, namespace_labels) if t.anti and t.weight == 0)
    return RunningPod(namespace=pod.namespace, labels=pod.labels, anti_affinity=anti)


def namespace_label_map(namespaces: Iterable[Namespace], names: Iterable[str] = ()) -> dict[str, Mapping[str, str]]:
    """namespace name -> labels (implicit ``kubernetes.io/metadata.name`` included).

    ``names`` adds namespaces known only by name (e.g. those of the pods when no Namespace
    object was given); they carry only the implicit label.
    """
    out: dict[str, Mapping[str, str]] = {name: {LABEL_NAMESPACE_NAME: name} for name in names}
    for namespace in namespaces:
        out[namespace.name] = namespace.labels
    return out


# --------------------------------------------------------------------------------------------
# Node affinity preferences


def _term_requirements(term: NodeSelectorTerm) -> Requirements:
    return Requirements(Requirement.create(e.key, e.operator, e.values or ()) for e in term.match_expressions)


def preferred_node_terms(pod: Pod) -> tuple[tuple[int, Requirements], ...]:
    """preferredDuringSchedulingIgnoredDuringExecution node-affinity terms as (weight, requirements)."""
    spec = pod.spec
    affinity = spec.affinity
    node_affinity = affinity.node_affinity if affinity is not None else None
    if node_affinity is None or not node_affinity.preferred:
        return ()
    cache = _cache(spec)
    entry = cache.preferred
    if entry is None or entry.source is not affinity:
        result = tuple((term.weight, _term_requirements(term.preference)) for term in node_affinity.preferred)
        entry = _PreferredCache(affinity, result)
        cache.preferred = entry
    return entry.result


# --------------------------------------------------------------------------------------------
# Volume topology


def default_storage_class(classes: Mapping[str, StorageClass]) -> StorageClass | None:
    """The class annotated ``storageclass.kubernetes.io/is-default-class: "true"`` (newest wins, as Kubernetes)."""
    defaults = [c for c in classes.values() if c.metadata.annotation(ANNOTATION_DEFAULT_STORAGE_CLASS) == "true"]
    if not defaults:
        return None
    return max(defaults, key=_class_age)


def _class_age(storage_class: StorageClass) -> tuple[float, str]:
    created = storage_class.metadata.creation_timestamp
    return (created.timestamp() if created is not None else float("-inf"), storage_class.metadata.name or "")


class _Classes:
    """StorageClass lookup with the default class resolved lazily, once per call."""

    __slots__ = ("_classes", "_default", "_resolved")

    def __init__(self, classes: Mapping[str, StorageClass]) -> None:
        self._classes = classes
        self._default: StorageClass | None = None
        self._resolved = False

    def get(self, name: str | None) -> StorageClass | None:
        if name is not None:
            return self._classes.get(name) if name else None  # "" asks for no class at all
        if not self._resolved:
            self._default = default_storage_class(self._classes)
            self._resolved = True
        return self._default


def _class_alternatives(
    claim: PersistentVolumeClaimSpec, classes: _Classes, key: str
) -> tuple[Requirements, ...] | str:
    """An unbound claim: its class's allowedTopologies (binding waits for the first consumer); an error when
    no node can be provisioned for it yet (as Karpenter: no class, a missing class, or an Immediate class,
    whose volume must be bound first)."""
    name = claim.storage_class_name
    storage_class = classes.get(name)
    if storage_class is None:
        if name:
            return f'storageclass "{name}" of unbound persistentvolumeclaim "{key}" not found'
        return f'unbound persistentvolumeclaim "{key}" names no storage class (and none is the default)'
    if storage_class.volume_binding_mode != "WaitForFirstConsumer":
        return (
            f'persistentvolumeclaim "{key}" is not bound yet and its storage class "{storage_class.metadata.name}" '
            "binds Immediate: its volume must be bound first"
        )
    if not storage_class.allowed_topologies:
        return _NO_EXTRA
    return tuple(
        Requirements(Requirement.create(e.key, "In", e.values) for e in term.match_label_expressions)
        for term in storage_class.allowed_topologies
    )


def _volume_alternatives(pv: PersistentVolume) -> tuple[Requirements, ...] | str:
    """A bound claim: its PV's required node affinity, terms ORed (keys normalised)."""
    node_affinity = pv.spec.node_affinity
    required = node_affinity.required if node_affinity is not None else None
    if required is None:
        return _NO_EXTRA
    # A term with neither expressions nor fields matches no node (Kubernetes); matchFields
    # (metadata.name) cannot be expressed as node requirements and is not enforced here.
    terms = [term for term in required.node_selector_terms if term.match_expressions or term.match_fields]
    if pv.spec.local is not None or pv.spec.host_path is not None:
        # A node-local volume's hostname term names the node its data is on; Karpenter leaves it out of the
        # node requirements (a term of nothing else allows any node).
        alternatives = tuple(
            Requirements(r for k, r in _term_requirements(term).items() if k != _HOSTNAME) for term in terms
        )
    else:
        alternatives = tuple(_term_requirements(term) for term in terms)
    if not alternatives:
        return f'persistentvolume "{pv.metadata.name}": node affinity matches no node'
    return alternatives


def _and(left: tuple[Requirements, ...], right: tuple[Requirements, ...]) -> tuple[Requirements, ...]:
    """Cross product of two ORed lists, dropping contradictory and duplicate alternatives."""
    if right == _NO_EXTRA:
        return left
    if left == _NO_EXTRA:
        return right
    out: dict[Requirements, None] = {}
    for a in left:
        for b in right:
            if a.intersects(b) is None:
                out[a.add(b)] = None
                if len(out) >= _MAX_VOLUME_ALTERNATIVES:
                    return tuple(out)
    return tuple(out)


def volume_requirements(
    pod: Pod,
    pvcs: Mapping[str, PersistentVolumeClaim],
    pvs: Mapping[str, PersistentVolume],
    classes: Mapping[str, StorageClass],
) -> tuple[Requirements, ...] | str:
    """Extra node requirements the pod's volumes impose, as ORed alternatives, or an error.

    The caller ANDs them into every alternative of the pod's own requirements; ``(Requirements(),)``
    means no restriction. ``pvcs`` is keyed "namespace/name", ``pvs`` and ``classes`` by name.

    - Bound claim (``spec.volumeName``): the PV's ``nodeAffinity.required`` terms, ORed.
    - Unbound claim: its StorageClass (``storageClassName``; the default class when unset, none
      when ""); WaitForFirstConsumer with ``allowedTopologies`` gives those terms, ORed; an
      Immediate class, a class without topologies or a missing class gives nothing.
    - An ephemeral volume's claim "<pod>-<volume>" is used when it exists, otherwise its
      ``volumeClaimTemplate`` stands for the claim the controller will create.
    - Several volumes: AND (cross product; contradictory alternatives dropped, at most 64 kept).
    - A missing claim or PV is an error string; so is an empty product (the volumes' topologies
      exclude each other).
    """
    volumes = [v for v in pod.spec.volumes if v.persistent_volume_claim is not None or v.ephemeral is not None]
    if not volumes:
        return _NO_EXTRA
    namespace = pod.namespace
    lookup = _Classes(classes)
    result = _NO_EXTRA
    for volume, claim_name in zip(volumes, pod.claim_names(), strict=True):
        key = f"{namespace}/{claim_name}"
        pvc = pvcs.get(key)
        alternatives: tuple[Requirements, ...] | str
        if pvc is None:
            if volume.ephemeral is None:
                return f'persistentvolumeclaim "{key}" not found'
            alternatives = _class_alternatives(volume.ephemeral.volume_claim_template.spec, lookup, key)
        elif pvc.metadata.deletion_timestamp is not None:
            return f'persistentvolumeclaim "{key}" is being deleted'
        elif pvc.status.phase == "Lost":
            return f'persistentvolumeclaim "{key}" is Lost (its persistentvolume no longer exists)'
        elif pvc.spec.volume_name:
            pv = pvs.get(pvc.spec.volume_name)
            if pv is None:
                return f'persistentvolume "{pvc.spec.volume_name}" not found (bound to persistentvolumeclaim "{key}")'
            if pv.metadata.deletion_timestamp is not None:
                return f'persistentvolume "{pv.metadata.name}" (of persistentvolumeclaim "{key}") is being deleted'
            if ANNOTATION_BIND_COMPLETED not in (pvc.metadata.annotations or {}):
                return (
                    f'persistentvolumeclaim "{key}" names volume "{pv.metadata.name}" but is not bound yet '
                    f"(no {ANNOTATION_BIND_COMPLETED} annotation)"
                )
            alternatives = _volume_alternatives(pv)
        else:
            alternatives = _class_alternatives(pvc.spec, lookup, key)
        if isinstance(alternatives, str):
            return alternatives
        result = _and(result, alternatives)
        if not result:
            return f"pod {pod.key}: the node affinities of its volumes exclude each other"
    return result
