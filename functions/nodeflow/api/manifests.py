"""Load Kubernetes and Karpenter manifests from files and directories (the ``plan`` command's input).

``load_manifests(paths)`` reads multi-document YAML (or JSON) files and directories (recursively,
``*.yaml``/``*.yml``/``*.json``, sorted), validates every object it knows, expands workloads
into pods, and returns a frozen ``Manifests``. Kinds nodeflow does not use (ConfigMap,
Service, ...) are skipped with a note. Every problem in every file is collected before a single
``ManifestError`` is raised; each problem names the file, the document (0-based), the object
and the field, e.g.::

    examples/bad.yaml: document 1 (NodePool/default): spec.template.spec.requirements[0].operator: ...

Must not touch: what the objects mean (plan, disruption); files are read here and nowhere in the pure code.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import pickle
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from nodeflow.api.core import (
    DaemonSet,
    Deployment,
    Job,
    Namespace,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PodSpec,
    ReplicaSet,
    StatefulSet,
    StorageClass,
    expand_workload,
    statefulset_claims,
)
from nodeflow.api.errors import format_validation_error
from nodeflow.api.json_text import NotYamlJson, loads_json, yaml_document
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.api.karpenter_overlay import NodeOverlay
from nodeflow.api.nodeflow_policy import NodeflowPolicy
from nodeflow.catalog.reservations import CapacityReservation, ReservationError, from_document, is_document

__all__ = ["KINDS", "ManifestError", "Manifests", "SkippedDocument", "load_manifests"]

_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML was built with it (``yaml.__with_libyaml__``), else the pure-Python one."""

# --- a faster SafeLoader ------------------------------------------------------------------------
#
# Even with libyaml, PyYAML builds Python objects from the node graph in Python, generically (one
# memo entry, one generator per mapping and sequence, regular expressions for every plain scalar).
# ``_FastLoader`` gives the same objects for the same text as ``_SafeLoader``: it caches the tag
# resolved for each distinct plain scalar, and builds each document with one recursive pass for
# the plain cases (mappings and sequences of the default tags, scalar keys, the scalar tags
# SafeLoader knows). Anything else (merge keys ``<<``, ``=`` value keys, !!set / !!omap / !!pairs,
# unknown tags, complex keys, very deep nesting) builds the whole document with SafeLoader's own
# constructor, so results and errors stay SafeLoader's.

_TAG = "tag:yaml.org,2002:"
_MAP_TAG, _SEQ_TAG, _STR_TAG = _TAG + "map", _TAG + "seq", _TAG + "str"
_SPECIAL_KEY_TAGS = frozenset({_TAG + "merge", _TAG + "value"})
# SafeConstructor's scalar constructors (plain functions of the node; the others are generators).
_SCALAR_CONSTRUCTORS: Mapping[str, Any] = {
    _TAG + name: yaml.SafeLoader.yaml_constructors[_TAG + name]
    for name in ("null", "bool", "int", "float", "binary", "timestamp", "str")
}


_FAST = True
"""Use ``_FastLoader`` and share the PodSpecs of identical pod specs (False: PyYAML's SafeLoader as is and one
PodSpec per pod, the reference the tests compare the fast path with)."""


class _NotPlain(Exception):
    """The document needs SafeLoader's generic constructor."""


def _build_document(loader: yaml.SafeLoader, root: yaml.Node) -> Any:
    scalar_node, mapping_node, sequence_node = yaml.ScalarNode, yaml.MappingNode, yaml.SequenceNode
    scalars = _SCALAR_CONSTRUCTORS
    special_keys = _SPECIAL_KEY_TAGS
    built: dict[int, Any] = {}  # id(node) -> object, for aliases (and recursive documents)

    def build(node: yaml.Node) -> Any:
        kind = node.__class__
        if kind is scalar_node:
            tag = node.tag
            if tag == _STR_TAG:
                return node.value
            construct = scalars.get(tag)
            if construct is None:
                raise _NotPlain
            return construct(loader, node)
        done = built.get(id(node), built)
        if done is not built:
            return done
        if kind is mapping_node:
            if node.tag != _MAP_TAG:
                raise _NotPlain
            mapping: dict[Any, Any] = {}
            built[id(node)] = mapping
            for key_node, value_node in node.value:
                if key_node.__class__ is not scalar_node or key_node.tag in special_keys:
                    raise _NotPlain
                key = build(key_node)
                mapping[key] = build(value_node)
            return mapping
        if kind is sequence_node:
            if node.tag != _SEQ_TAG:
                raise _NotPlain
            sequence: list[Any] = []
            built[id(node)] = sequence
            append = sequence.append
            for item in node.value:
                append(build(item))
            return sequence
        raise _NotPlain

    return build(root)


class _Faster:
    """Mixed into a SafeLoader (libyaml's or PyYAML's own): memoised scalar resolution and a one-pass
    constructor for plain documents."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)  # type: ignore[call-arg]
        self._resolved: dict[tuple[Any, str, Any], str] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode:
            key = (implicit, value, kind)
            tag = self._resolved.get(key)
            if tag is None:
                tag = super().resolve(kind, value, implicit)  # type: ignore[misc]
                self._resolved[key] = tag
            return tag
        return super().resolve(kind, value, implicit)  # type: ignore[misc]

    def construct_document(self, node: yaml.Node) -> Any:
        try:
            return _build_document(self, node)  # type: ignore[arg-type]
        except (_NotPlain, RecursionError):
            return super().construct_document(node)  # type: ignore[misc]


class _FastLoader(_Faster, _SafeLoader):  # type: ignore[valid-type,misc]
    """``_SafeLoader`` made faster (the loader ``load_manifests`` uses)."""


# --- documents that repeat: one parse per shape ---------------------------------------------------
#
# A ``kubectl get pods -o yaml``-style stream has thousands of documents that differ only in a few plain scalars
# (metadata.name, a label value). ``_template_documents`` splits the text at its ``---`` lines, and in every
# document replaces the value of each line ``KEY: VALUE`` (VALUE a plain scalar of letters, digits and ``._-``,
# the rest of the line empty) with a placeholder: documents with the same remaining text (the same "shape")
# are parsed once, with placeholders, and each is then a copy of that parse with its own values put back, each
# value resolved and constructed as SafeLoader would a plain scalar. A shape is only reused when that is exact:
# its parse holds each placeholder once, as a whole string value (not in a block scalar, a multi-line or quoted
# string, a key, or copied by a merge key), and only dicts, lists and immutable scalars; aliases stay shared
# (pickle keeps them so). When most documents have shapes of their own, the stream is parsed as a whole.
# Anything the split cannot be sure of (directives, ``...``, ``---`` with content, other line breaks than ``\n``,
# a BOM) or any error gives None: the caller parses the whole stream as before, so results and errors stay the
# stream's.

_LINE_BREAKS_OTHER = ("\r", "\x85", "\u2028", "\u2029", "\ufeff", "\x00")
# Each pattern starts with the newline before its line (the text gets one in front): re finds a literal first
# character fast, where "^" with MULTILINE is tried at every position.
_MARKER_LINE = re.compile(r"\n(?:---|\.\.\.|%)")
_SEPARATOR_LINE = re.compile(r"\n---(?=\n|\Z)")
_SLOT_LINE = re.compile(r"(\n *(?:- )?[A-Za-z0-9_][A-Za-z0-9_./-]*: )([A-Za-z0-9][A-Za-z0-9_.-]*)(?=\n|\Z)")
_SLOT_MARK = "__nodeflow_slot_"
_JSON_START = re.compile(r"\s*[{\[]")
"""A document that starts as JSON does: read by a JSON parser when YAML would read it to the same values
(``nodeflow.api.json_text``)."""
_SHAPES_BEFORE_GIVING_UP = 64
_IMMUTABLE_SCALARS = (str, int, float, bool, type(None), bytes, datetime.date, datetime.datetime)


class _NoTemplate(Exception):
    """The shape's parse cannot be reused exactly."""


@dataclass(frozen=True)
class _Shape:
    blob: bytes | None
    """The parse with placeholders, pickled (our own objects, never input bytes; None: the document is empty):
    ``pickle.loads`` makes a fresh copy in C, aliases and recursion kept."""
    slots: tuple[tuple[Any, ...], ...]
    """Where each value goes: the keys and indexes from the document's root, in the order of the lines."""
    fill: Callable[[Any, list[Any]], None] = field(default=lambda document, values: None, compare=False)
    """Puts the values (in the order of ``slots``) into a copy of the parse (see ``_filler``)."""


class _Shapes:
    """The shapes met so far (by the text between their values) and the plain values read, for one loader: shared
    by the files of one ``load_manifests`` call (a directory of one object per file has the shapes of one stream)."""

    def __init__(self, loader: type[yaml.SafeLoader]) -> None:
        self.loader = loader
        self.shapes: dict[str, _Shape | None] = {}
        self.values = _Values(loader(""))
        self.documents = 0
        """Documents read through ``shapes``: when most have shapes of their own, parsing each alone costs more."""


def _template_documents(text: str, loader: type[yaml.SafeLoader], cache: _Shapes | None = None) -> list[Any] | None:
    """The documents of ``text``, as ``yaml.load_all(text, Loader=loader)`` gives them, or None (see above).
    ``cache``: shapes already met (of ``loader``), added to."""
    if any(other in text for other in _LINE_BREAKS_OTHER) or loader.yaml_path_resolvers:
        return None  # (path resolvers resolve by where a scalar is: none in SafeLoader)
    if cache is None or cache.loader is not loader:
        cache = _Shapes(loader)
    text = "\n" + text  # a blank line more: the same documents, and every line after a newline
    chunks = _SEPARATOR_LINE.split(text)  # each starts with the newline that ended its "---" line
    if len(_MARKER_LINE.findall(text)) != len(chunks) - 1:
        return None  # a line starts with "...", "%" or "---" plus more
    last = len(chunks) - 1
    shapes, values, before = cache.shapes, cache.values, cache.documents
    documents: list[Any] = []
    try:
        for number, chunk in enumerate(chunks):
            if number < last:
                chunk += "\n"  # the line break before the next "---", which the split took (block scalars keep it)
            if _JSON_START.match(chunk):
                try:
                    documents.append(yaml_document(chunk))
                    continue
                except NotYamlJson:  # read as YAML, below
                    pass
            if "\nitems:" in chunk:
                listed = _with_items(chunk, loader, cache)
                if listed is not None:
                    documents.append(listed)
                    continue
            parts = _SLOT_LINE.split(chunk)
            texts = parts[2::3]
            del parts[2::3]
            key = "\x00".join(parts)
            if key in shapes:
                shape = shapes[key]
            else:
                if len(shapes) >= _SHAPES_BEFORE_GIVING_UP and 2 * len(shapes) > before + number:
                    return None  # most documents differ: one stream parse is cheaper than one parse each
                shape = shapes[key] = _shape(parts, len(texts), loader)
            if shape is None:  # not reusable: this document parsed as it is
                found = list(yaml.load_all(chunk, Loader=loader))
                if len(found) > 1:
                    return None
                document = found[0] if found else None
                if not found and number == 0:
                    continue  # nothing before the first "---": no document
            elif shape.blob is None:
                if number == 0:
                    continue
                document = None
            else:
                document = pickle.loads(shape.blob)
                shape.fill(document, list(map(values.__getitem__, texts)))
            documents.append(document)
    except Exception:  # YAML errors, too deep, a bad timestamp...: the stream parse says what
        return None
    cache.documents = before + len(chunks)
    return documents


# --- a List's items: documents of their own -------------------------------------------------------
#
# ``kubectl get -o yaml`` writes one ``kind: List`` document whose ``items:`` holds every object, one block sequence
# entry each: a single document, so no shape repeats. ``_with_items`` reads each entry as a document of its own
# (``- `` and the entry's indentation taken off every line: the same mapping, its nested indentation relative), all
# of them through ``_template_documents`` (shapes and all), and the rest of the document with ``items:`` left empty;
# then puts the list in its place. It only takes entries that start with a plain mapping key, and the rest of the
# document must read ``items`` as empty: an entry cut short (a quoted or flow scalar running on to a line of a lesser
# indentation), an alias across entries, an anchor name used twice (one document refuses it, two do not), a line
# that would mark a document: anything else raises or does not match,
# and the document is read as a whole.

_ITEMS_LINE = re.compile(r"\nitems:[ ]*\n( *)- [A-Za-z0-9_]")
"""A top-level ``items:`` key with a block sequence whose first entry starts with a plain mapping key."""


def _with_items(chunk: str, loader: type[yaml.SafeLoader], cache: _Shapes) -> Any | None:
    """The document ``chunk`` (a top-level mapping with a block sequence under ``items:``) read entry by entry (see
    above); None when it is not that or not certainly the same."""
    found = _ITEMS_LINE.search(chunk)
    if found is None:
        return None
    indent = found.group(1)
    entry, rest = f"\n{indent}- ", f"\n{indent}  "
    start = found.start() + len("\nitems:")
    start = chunk.index("\n", start)  # the line break ending "items:" (spaces may follow the colon)
    # The entries: every line from here that starts an entry, goes on one (deeper), or is empty.
    end = _entries_end(indent).search(chunk, start)
    stop = end.start() if end is not None else len(chunk)
    block = chunk[start:stop]
    count = block.count(entry)
    if count < 2 or _ENTRY_START_UNSURE.search(block.replace(entry, "\n- ")) is not None or _anchor_repeats(block):
        return None
    documents = _template_documents(block.replace(entry, "\n---\n").replace(rest, "\n"), loader, cache)
    if documents is None or len(documents) != count:
        return None
    outer = list(yaml.load_all(chunk[:start] + chunk[stop:], Loader=loader))
    if len(outer) != 1 or type(outer[0]) is not dict or "items" not in outer[0] or outer[0]["items"] is not None:
        return None
    outer[0]["items"] = documents
    return outer[0]


_ENTRY_START_UNSURE = re.compile(r"\n- (?![A-Za-z0-9_])")
"""An entry that does not start with a plain key (a block scalar, a tag, an anchor, a flow collection, a quote)."""


_ANCHOR = re.compile(r"(?:^|[\s\[{,])&([^\s\[\]{},]+)")
"""What may be an anchor (``&name`` after a space or a flow indicator; in a string too)."""


def _anchor_repeats(block: str) -> bool:
    """Whether two anchors may have one name: one document refuses that, two documents do not."""
    if "&" not in block:
        return False
    names = _ANCHOR.findall(block)
    return len(names) != len(set(names))


def _entries_end(indent: str) -> re.Pattern[str]:
    """The first line that neither starts an entry of a sequence indented ``indent``, goes on one, nor is empty."""
    return re.compile(rf"\n(?!{indent}- |{indent}  |\n|\Z)")


class _Values(dict[str, Any]):
    """The value of each slot text: what SafeLoader makes of that plain scalar (a str, int, float, bool, None or
    date), resolved once per distinct text."""

    def __init__(self, loader: yaml.SafeLoader) -> None:
        super().__init__()
        self.loader = loader
        resolvers = loader.yaml_implicit_resolvers
        # Texts whose first character no implicit resolver is registered for are strings, by the resolver's own
        # rule (it looks its candidates up by the first character); unless a resolver is registered for any.
        self.maybe_typed: frozenset[str] | None = None if None in resolvers else frozenset(resolvers)

    def __missing__(self, raw: str) -> Any:
        if self.maybe_typed is not None and raw[0] not in self.maybe_typed:
            value: Any = raw
        else:
            tag = self.loader.resolve(yaml.ScalarNode, raw, (True, False))  # type: ignore[no-untyped-call]
            if tag == _STR_TAG:
                value = raw
            else:
                construct = _SCALAR_CONSTRUCTORS.get(tag)
                if construct is None:
                    raise _NoTemplate
                value = construct(self.loader, yaml.ScalarNode(tag, raw))
        self[raw] = value
        return value


def _filler(slots: tuple[tuple[Any, ...], ...]) -> Callable[[Any, list[Any]], None]:
    """A function ``fill(document, values)`` doing ``document[k0][k1]...[kn] = values[i]`` for each slot: compiled
    once per shape (its keys are bound as constants by name, never written into the source), as the loop it
    replaces costs a Python step per key per document."""
    constants: dict[str, Any] = {}
    lines = ["def fill(document, values):"]
    for number, path in enumerate(slots):
        steps = []
        for depth, step in enumerate(path):
            name = f"k{number}_{depth}"
            constants[name] = step
            steps.append(f"[{name}]")
        lines.append(f"    document{''.join(steps)} = values[{number}]")
    lines.append("    return None")
    exec(compile("\n".join(lines), "<nodeflow shape>", "exec"), constants)  # identifiers only, no input text
    fill: Callable[[Any, list[Any]], None] = constants["fill"]
    return fill


def _shape(parts: list[str], count: int, loader: type[yaml.SafeLoader]) -> _Shape | None:
    """The reusable parse of a document shape (``parts``: the text between the values), or None."""
    if any(_SLOT_MARK in part for part in parts):
        return None
    pieces = [parts[0]]
    for index in range(count):
        pieces += [parts[2 * index + 1], f"{_SLOT_MARK}{index}__", parts[2 * index + 2]]
    found = list(yaml.load_all("".join(pieces), Loader=loader))
    if len(found) > 1:
        raise _NoTemplate
    if not found:
        return _Shape(None, ()) if count == 0 else None
    slots: dict[int, tuple[Any, ...]] = {}
    seen: set[int] = set()

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        kind = type(node)
        if kind is dict or kind is list:
            if id(node) in seen:  # an alias: pickle keeps it shared (and recursive), its slots were found once
                return
            seen.add(id(node))
            for step, child in node.items() if kind is dict else enumerate(node):
                if type(step) is str and _SLOT_MARK in step:
                    raise _NoTemplate
                walk(child, (*path, step))
        elif kind is str:
            if _SLOT_MARK in node:
                index = _slot_index(node)
                if index is None or index in slots or index >= count:
                    raise _NoTemplate
                slots[index] = path
        elif kind not in _IMMUTABLE_SCALARS:
            raise _NoTemplate

    try:
        walk(found[0], ())
    except (_NoTemplate, RecursionError):
        return None
    if len(slots) != count or any(not path for path in slots.values()):
        return None
    paths = tuple(slots[i] for i in range(count))
    return _Shape(pickle.dumps(found[0], protocol=pickle.HIGHEST_PROTOCOL), paths, _filler(paths))


def _slot_index(text: str) -> int | None:
    if not (text.startswith(_SLOT_MARK) and text.endswith("__")):
        return None
    digits = text[len(_SLOT_MARK) : -2]
    return int(digits) if digits.isdigit() and digits.isascii() else None


@dataclass(frozen=True)
class _Kind:
    api_version: str
    model: type[BaseModel]
    namespaced: bool


KINDS: Mapping[str, _Kind] = {
    "NodePool": _Kind("karpenter.sh/v1", NodePool, namespaced=False),
    "NodeClaim": _Kind("karpenter.sh/v1", NodeClaim, namespaced=False),
    "EC2NodeClass": _Kind("karpenter.k8s.aws/v1", EC2NodeClass, namespaced=False),
    "NodeOverlay": _Kind("karpenter.sh/v1alpha1", NodeOverlay, namespaced=False),
    "NodeflowPolicy": _Kind("nodeflow.io/v1alpha1", NodeflowPolicy, namespaced=False),
    "Pod": _Kind("v1", Pod, namespaced=True),
    "Node": _Kind("v1", Node, namespaced=False),
    "PersistentVolumeClaim": _Kind("v1", PersistentVolumeClaim, namespaced=True),
    "PersistentVolume": _Kind("v1", PersistentVolume, namespaced=False),
    "Deployment": _Kind("apps/v1", Deployment, namespaced=True),
    "ReplicaSet": _Kind("apps/v1", ReplicaSet, namespaced=True),
    "StatefulSet": _Kind("apps/v1", StatefulSet, namespaced=True),
    "DaemonSet": _Kind("apps/v1", DaemonSet, namespaced=True),
    "Job": _Kind("batch/v1", Job, namespaced=True),
    "StorageClass": _Kind("storage.k8s.io/v1", StorageClass, namespaced=False),
    "PodDisruptionBudget": _Kind("policy/v1", PodDisruptionBudget, namespaced=True),
    "Namespace": _Kind("v1", Namespace, namespaced=False),
}
"""The kinds ``load_manifests`` reads, with the one apiVersion accepted for each."""

_KARPENTER_GROUPS = ("karpenter.sh", "karpenter.k8s.aws", "nodeflow.io")
_SUFFIXES = frozenset({".yaml", ".yml", ".json"})


class ManifestError(Exception):
    """Invalid manifests. ``problems`` holds one message per problem, each naming file, document and field."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: list[str] = list(problems)
        count = len(self.problems)
        header = f"{count} problem{'s' if count != 1 else ''} in the manifests:"
        super().__init__("\n".join([header, *(f"  {problem}" for problem in self.problems)]))


@dataclass(frozen=True)
class SkippedDocument:
    """A document ``load_manifests`` did not use (a kind nodeflow has no use for)."""

    file: str
    index: int
    kind: str
    name: str
    api_version: str = ""
    item: int | None = None

    def __str__(self) -> str:
        where = f"document {self.index}" + (f" items[{self.item}]" if self.item is not None else "")
        what = f"{self.kind}/{self.name}" if self.name else self.kind
        version = f" ({self.api_version})" if self.api_version else ""
        return f"{self.file}: {where} ({what}): kind {self.kind}{version} is not used by nodeflow; skipped"


@dataclass(frozen=True)
class Manifests:
    """Everything ``load_manifests`` read, in input order."""

    node_pools: tuple[NodePool, ...] = ()
    node_classes: tuple[EC2NodeClass, ...] = ()
    node_claims: tuple[NodeClaim, ...] = ()
    pods: tuple[Pod, ...] = ()
    """Standalone pods and the pods of Deployments, ReplicaSets, StatefulSets and Jobs."""
    daemon_sets: tuple[DaemonSet, ...] = ()
    nodes: tuple[Node, ...] = ()
    pvcs: tuple[PersistentVolumeClaim, ...] = ()
    """Explicit claims, then the claims of StatefulSet volumeClaimTemplates not given explicitly."""
    pvs: tuple[PersistentVolume, ...] = ()
    storage_classes: tuple[StorageClass, ...] = ()
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    skipped: tuple[SkippedDocument, ...] = ()
    workloads: tuple[Deployment | ReplicaSet | StatefulSet | Job, ...] = field(default=())
    """The workloads the expanded pods came from."""
    namespaces: tuple[Namespace, ...] = ()
    capacity_reservations: tuple[CapacityReservation, ...] = ()
    """From ``aws ec2 describe-capacity-reservations`` output (a document with ``CapacityReservations``)."""
    node_overlays: tuple[NodeOverlay, ...] = ()
    policies: tuple[NodeflowPolicy, ...] = ()
    """nodeflow.io/v1alpha1 NodeflowPolicies (``nodeflow.governance.policy``)."""


@dataclass
class _Collector:
    problems: list[str] = field(default_factory=list)
    skipped: list[SkippedDocument] = field(default_factory=list)
    node_pools: list[NodePool] = field(default_factory=list)
    node_classes: list[EC2NodeClass] = field(default_factory=list)
    node_claims: list[NodeClaim] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    daemon_sets: list[DaemonSet] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    pvcs: list[PersistentVolumeClaim] = field(default_factory=list)
    generated_pvcs: list[PersistentVolumeClaim] = field(default_factory=list)
    pvs: list[PersistentVolume] = field(default_factory=list)
    storage_classes: list[StorageClass] = field(default_factory=list)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)
    workloads: list[Deployment | ReplicaSet | StatefulSet | Job] = field(default_factory=list)
    namespaces: list[Namespace] = field(default_factory=list)
    capacity_reservations: list[CapacityReservation] = field(default_factory=list)
    node_overlays: list[NodeOverlay] = field(default_factory=list)
    policies: list[NodeflowPolicy] = field(default_factory=list)
    # (kind, namespace, name) -> where it was first defined
    seen: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # pod key -> where the pod came from
    pod_origin: dict[str, str] = field(default_factory=dict)
    # repr of a Pod's spec mapping -> the PodSpec validated from it (see _validate_pod)
    pod_specs: dict[str, PodSpec] | None = field(default_factory=lambda: {} if _FAST else None)

    def result(self) -> Manifests:
        explicit = {claim.key for claim in self.pvcs}
        generated = [claim for claim in self.generated_pvcs if claim.key not in explicit]
        return Manifests(
            node_pools=tuple(self.node_pools),
            node_classes=tuple(self.node_classes),
            node_claims=tuple(self.node_claims),
            pods=tuple(self.pods),
            daemon_sets=tuple(self.daemon_sets),
            nodes=tuple(self.nodes),
            pvcs=(*self.pvcs, *generated),
            pvs=tuple(self.pvs),
            storage_classes=tuple(self.storage_classes),
            pdbs=tuple(self.pdbs),
            skipped=tuple(self.skipped),
            workloads=tuple(self.workloads),
            namespaces=tuple(self.namespaces),
            capacity_reservations=tuple(self.capacity_reservations),
            node_overlays=tuple(self.node_overlays),
            policies=tuple(self.policies),
        )


def load_manifests(paths: Sequence[str | Path]) -> Manifests:
    """Read, validate and expand the manifests in ``paths`` (files or directories).

    Raises ``ManifestError`` listing every problem found in every file.
    """
    collector = _Collector()
    seen_files: set[tuple[int, int]] = set()
    shapes = _Shapes(_FastLoader)
    # Hundreds of thousands of acyclic objects (YAML nodes, dicts, models): cyclic GC passes over them
    # would cost more than the loading itself.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for file, identity in _files(paths, collector.problems):
            if identity in seen_files:  # named twice, or inside a directory also named: read once
                continue
            seen_files.add(identity)
            for index, document in _documents(file, collector.problems, shapes):
                _load_document(collector, file, index, None, document)
    finally:
        if gc_was_enabled:
            gc.enable()
    if collector.problems:
        raise ManifestError(collector.problems)
    return collector.result()


def _files(paths: Sequence[str | Path], problems: list[str]) -> Iterator[tuple[str, tuple[int, int]]]:
    """Each manifest file of ``paths`` (as ``str(Path(...))`` names it) with its identity (device, inode): a file
    as named; a directory's ``.yaml``/``.yml``/``.json`` files at any depth, in the order of their sorted ``Path``s,
    leaving out hidden files and directories and not following links to directories (as ``Path.rglob``)."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found: list[tuple[str, tuple[int, int]]] = []
            _scan(str(path), found)
            yield from found
        elif path.is_file():
            st = os.stat(path)
            yield str(path), (st.st_dev, st.st_ino)
        else:
            problems.append(f"{path}: no such file or directory")


def _scan(directory: str, found: list[tuple[str, tuple[int, int]]]) -> None:
    """The manifest files under ``directory`` (a ``str(Path)``) into ``found``, in the order sorted ``Path``s
    have (by their parts: each directory's entries by name, a subdirectory's files where its name sorts): one
    scandir per directory, the inode from the directory entry (a stat only for a link), names joined as ``Path``
    joins them; no ``Path`` per file (a directory of 20,000 files: 20,000 path objects built, and compared
    ~260,000 times to sort them)."""
    try:
        device = os.stat(directory).st_dev
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError:  # unreadable or gone: skipped, as rglob skips it
        return
    prefix = "" if directory == "." else directory if directory.endswith(os.sep) else directory + os.sep
    for entry in entries:
        name = entry.name
        if name.startswith("."):
            continue
        try:
            if entry.is_dir():
                if not entry.is_symlink():
                    _scan(prefix + name, found)
            elif os.path.splitext(name)[1].lower() in _SUFFIXES and entry.is_file():
                if entry.is_symlink():
                    st = entry.stat()
                    found.append((prefix + name, (st.st_dev, st.st_ino)))
                else:
                    found.append((prefix + name, (device, entry.inode())))
        except OSError:
            continue


def _suffix(file: str) -> str:
    """``Path(file).suffix``: from the last dot of the name, unless the name starts or ends with it."""
    name = file.rpartition(os.sep)[2]
    dot = name.rfind(".")
    return name[dot:] if 0 < dot < len(name) - 1 else ""


def _read_text(file: str) -> str:
    """``Path(file).read_text(encoding="utf-8")`` (line ends ``\r\n`` and ``\r`` read as ``\n``, errors the
    same, naming the file) with one ``os.open`` and ``os.read``: no Python file object and text wrapper per file."""
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)
        if len(data) > size:  # it grew: the rest
            parts = [data]
            while more := os.read(fd, 1 << 16):
                parts.append(more)
            data = b"".join(parts)
    except OSError as exc:
        if exc.filename is None:  # read(2) errors name no file (a directory: "Is a directory"): as open names it
            raise type(exc)(exc.errno, exc.strerror, file) from None
        raise
    finally:
        os.close(fd)
    text = data.decode("utf-8")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def _documents(file: str, problems: list[str], shapes: _Shapes | None = None) -> Iterator[tuple[int, Any]]:
    try:
        text = _read_text(file)
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{file}: cannot read: {exc}")
        return
    if _suffix(file).lower() == ".json":
        try:
            yield 0, loads_json(text)
        except json.JSONDecodeError as exc:
            problems.append(f"{file}: line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}")
        return
    if _FAST:
        documents = _template_documents(text, _FastLoader, shapes)
        if documents is not None:
            yield from enumerate(documents)
            return
    index = 0
    try:
        for document in yaml.load_all(text, Loader=_FastLoader if _FAST else _SafeLoader):
            yield index, document
            index += 1
    except yaml.YAMLError as exc:
        problems.append(f"{file}: {_yaml_error(exc, index)}")


def _yaml_error(exc: yaml.YAMLError, index: int) -> str:
    problem_mark = getattr(exc, "problem_mark", None)
    context_mark = getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    detail = str(problem) if problem else str(exc)
    if context:
        started = (
            f" started at line {context_mark.line + 1}, column {context_mark.column + 1}"
            if context_mark is not None and problem_mark is not None and context_mark.line != problem_mark.line
            else ""
        )
        detail = f"{detail} ({context}{started})"
    mark = problem_mark or context_mark
    if mark is not None:
        position = f"line {mark.line + 1}, column {mark.column + 1}"
        return f"{position} (document {index}): YAML syntax error: {detail}"
    return f"document {index}: YAML syntax error: {detail}"


def _load_document(collector: _Collector, file: str, index: int, item: int | None, document: Any) -> None:
    where = f"{file}: document {index}" + (f" items[{item}]" if item is not None else "")
    if document is None:
        return
    if not isinstance(document, dict):
        collector.problems.append(
            f"{where}: expected a Kubernetes object (a mapping with apiVersion and kind), got {type(document).__name__}"
        )
        return
    if item is None and is_document(document):
        _load_reservations(collector, where, document)
        return
    kind = document.get("kind")
    api_version = document.get("apiVersion")
    metadata = document.get("metadata")
    raw_name = metadata.get("name") if isinstance(metadata, dict) else None
    name = raw_name if isinstance(raw_name, str) else ""
    if not isinstance(kind, str) or not kind:
        collector.problems.append(f"{where}: kind: required field is missing")
        return
    label = f"{where} ({kind}/{name or '<unnamed>'})"
    if item is None and (kind == "List" or kind.endswith("List")) and "items" in document:
        items = document.get("items")
        if not isinstance(items, list):
            collector.problems.append(f"{where} ({kind}): items: must be a list")
            return
        for position, entry in enumerate(items):
            _load_document(collector, file, index, position, entry)
        return
    spec = KINDS.get(kind)
    if spec is None:
        group = api_version.partition("/")[0] if isinstance(api_version, str) else ""
        if group in _KARPENTER_GROUPS:
            collector.problems.append(
                f"{label}: kind {kind} ({api_version}) is not supported: nodeflow reads the Karpenter v1 "
                "APIs (NodePool and NodeClaim karpenter.sh/v1, EC2NodeClass karpenter.k8s.aws/v1, NodeOverlay "
                "karpenter.sh/v1alpha1) and NodeflowPolicy nodeflow.io/v1alpha1"
            )
            return
        collector.skipped.append(
            SkippedDocument(
                file=file,
                index=index,
                kind=kind,
                name=name,
                api_version=api_version if isinstance(api_version, str) else "",
                item=item,
            )
        )
        return
    problems_before = len(collector.problems)
    if api_version != spec.api_version:
        got = f"got {api_version}" if api_version else "apiVersion is missing"
        hint = ""
        if spec.api_version.startswith(_KARPENTER_GROUPS):
            hint = " (nodeflow reads Karpenter v1 APIs only; migrate older manifests to v1)"
        collector.problems.append(f"{label}: apiVersion: {kind} must be {spec.api_version}, {got}{hint}")
        return
    if not isinstance(metadata, dict):
        collector.problems.append(f"{label}: metadata.name: required field is missing")
        return
    if raw_name is None or raw_name == "":
        collector.problems.append(f"{label}: metadata.name: required field is missing")
    namespace = ""
    if spec.namespaced:
        raw_namespace = metadata.get("namespace")
        if raw_namespace is None or raw_namespace == "":
            document = {**document, "metadata": {**metadata, "namespace": "default"}}
            namespace = "default"
        elif isinstance(raw_namespace, str):
            namespace = raw_namespace
    try:
        obj = _validate_pod(collector, document) if spec.model is Pod else spec.model.model_validate(document)
    except ValidationError as exc:
        collector.problems.extend(f"{label}: {line}" for line in format_validation_error(exc))
        return
    if len(collector.problems) > problems_before:
        return
    identity = (kind, namespace, name)
    first = collector.seen.get(identity)
    if first is not None:
        shown = f"{namespace}/{name}" if spec.namespaced else name
        collector.problems.append(f"{label}: duplicate {kind} {shown} (first defined in {first})")
        return
    collector.seen[identity] = where
    _store(collector, obj, label)


def _load_reservations(collector: _Collector, where: str, document: dict[str, Any]) -> None:
    """The capacity reservations of a DescribeCapacityReservations output; an id listed twice is an error."""
    try:
        found = from_document(document, where)
    except ReservationError as exc:
        collector.problems.append(str(exc))
        return
    for index, reservation in enumerate(found):
        key = ("CapacityReservation", "", reservation.id)
        place = f"{where} CapacityReservations[{index}]"
        if key in collector.seen:
            collector.problems.append(
                f"{place}: capacity reservation {reservation.id} is listed twice (first at {collector.seen[key]})"
            )
            continue
        collector.seen[key] = place
        collector.capacity_reservations.append(reservation)


def _validate_pod(collector: _Collector, document: dict[str, Any]) -> Pod:
    """``Pod.model_validate(document)``, with one PodSpec per distinct spec: pods whose ``spec`` mapping is the
    same (the replicas of a workload in a ``kubectl get pods`` dump) share the PodSpec validated for the first,
    as the pods of an expanded Deployment do, so a spec is validated and converted for the solver once.

    The key is the mapping's ``repr``, which tells apart what ``==`` does not (``1``, ``1.0``, ``True``), so
    a shared PodSpec was validated from exactly the same values. Only valid specs are shared: a pod whose
    spec was refused is validated again, and reports its own problems.
    """
    raw_spec = document.get("spec")
    specs = collector.pod_specs
    if specs is None or not isinstance(raw_spec, dict) or not raw_spec:
        return Pod.model_validate(document)
    try:
        key = repr(raw_spec)
    except RecursionError:  # nested deeper than repr goes: validated alone (and refused)
        return Pod.model_validate(document)
    shared = specs.get(key)
    if shared is None:
        pod = Pod.model_validate(document)
        if "..." not in key:  # a self-referencing mapping (YAML anchors) prints "{...}": never shared
            specs[key] = pod.spec
        return pod
    rest = Pod.model_validate({name: value for name, value in document.items() if name != "spec"})
    # What ``rest.model_copy(update={"spec": shared})`` gives, without the copy: ``rest`` is new and not shared.
    rest.__dict__["spec"] = shared
    rest.__pydantic_fields_set__.add("spec")
    return rest


def _store(collector: _Collector, obj: BaseModel, label: str) -> None:
    if isinstance(obj, NodePool):
        collector.node_pools.append(obj)
    elif isinstance(obj, EC2NodeClass):
        collector.node_classes.append(obj)
    elif isinstance(obj, NodeClaim):
        collector.node_claims.append(obj)
    elif isinstance(obj, Pod):
        _add_pods(collector, [obj], label)
    elif isinstance(obj, Deployment | ReplicaSet | StatefulSet | Job):
        collector.workloads.append(obj)
        _add_pods(collector, expand_workload(obj), label)
        if isinstance(obj, StatefulSet):
            collector.generated_pvcs.extend(statefulset_claims(obj))
    elif isinstance(obj, DaemonSet):
        collector.daemon_sets.append(obj)
    elif isinstance(obj, Node):
        collector.nodes.append(obj)
    elif isinstance(obj, PersistentVolumeClaim):
        collector.pvcs.append(obj)
    elif isinstance(obj, PersistentVolume):
        collector.pvs.append(obj)
    elif isinstance(obj, StorageClass):
        collector.storage_classes.append(obj)
    elif isinstance(obj, PodDisruptionBudget):
        collector.pdbs.append(obj)
    elif isinstance(obj, Namespace):
        collector.namespaces.append(obj)
    elif isinstance(obj, NodeOverlay):
        collector.node_overlays.append(obj)
    elif isinstance(obj, NodeflowPolicy):
        collector.policies.append(obj)
    else:  # pragma: no cover - KINDS and this dispatch are kept in step
        raise TypeError(f"no collection for {type(obj).__name__}")


def _add_pods(collector: _Collector, pods: list[Pod], label: str) -> None:
    origin = collector.pod_origin
    collisions: list[tuple[str, str]] = []
    for pod in pods:
        key = pod.key
        first = origin.get(key)
        if first is not None:
            collisions.append((key, first))
            continue
        origin[key] = label
    if collisions:
        key, first = collisions[0]
        more = f" (and {len(collisions) - 1} more)" if len(collisions) > 1 else ""
        collector.problems.append(f"{label}: pod {key} is defined twice: also by {first}{more}")
        return
    collector.pods.extend(pods)
