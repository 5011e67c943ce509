"""The NodePool template hash Karpenter writes as ``karpenter.sh/nodepool-hash`` (hash version v3).

Karpenter hashes ``spec.template`` of a NodePool with the Go library hashstructure (format v2, FNV-1
64-bit, options: slices as sets, zero values ignored, nil pointers as zero values) and records the
decimal number on the NodePool and on every NodeClaim it makes. A NodeClaim is drifted when the
numbers differ (and both carry the same hash version). nodeflow computes the very same number, so a
NodeClaim made by Karpenter is not drifted under nodeflow merely because a different program made it.

What is hashed, as Go sees the template (``NodeClaimTemplate``):
- metadata labels and annotations (maps: order does not matter; an empty map differs from none);
- spec taints and startupTaints (sets: order does not matter; an empty list differs from none);
- spec nodeClassRef (kind, name, group), terminationGracePeriod and expireAfter (as nanoseconds;
  ``Never`` is the same as unset).
Requirements are not hashed (Karpenter checks them one by one). Zero values (an empty string, a
zero duration inside its holder) are left out as Go's IsZero leaves them out.

Every value is reduced to a 64-bit number: a string is FNV-1 of its bytes, an integer FNV-1 of its 8
little-endian bytes; a struct starts from the hash of its Go type name and, per non-zero field, XORs in
the ordered hash of (field name, value) then re-hashes the running value; a map XORs the ordered
hashes of its (key, value) pairs and re-hashes once; a set XORs its elements.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

from nodeflow.api.duration import NEVER

if TYPE_CHECKING:
    from nodeflow.api.karpenter_core import NodeClaimTemplate
    from nodeflow.api.meta import Taint

__all__ = ["go_duration_nanoseconds", "template_hash"]

_OFFSET = 14695981039346656037
_PRIME = 1099511628211
_MASK = (1 << 64) - 1
_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_COMPONENT = re.compile(r"(\d*\.?\d*)(ns|us|µs|μs|ms|s|m|h)")

Field = tuple[str, int | None]  # (Go field name, hash of its value; None when the value is zero)


def _fnv1(data: bytes) -> int:
    h = _OFFSET
    for byte in data:
        h = (h * _PRIME) & _MASK
        h ^= byte
    return h


def _string(value: str) -> int:
    return _fnv1(value.encode())


def _int64(value: int) -> int:
    return _fnv1(struct.pack("<q", value))


def _ordered(a: int, b: int) -> int:
    return _fnv1(struct.pack("<QQ", a, b))


def _finish(a: int) -> int:
    return _fnv1(struct.pack("<Q", a))


def _struct(type_name: str, fields: Iterable[Field]) -> int:
    h = _string(type_name)
    for name, value in fields:
        if value is None:
            continue
        h ^= _ordered(_string(name), value)
        h = _finish(h)
    return h


def _map(values: Mapping[str, str] | None) -> int | None:
    if values is None:
        return None
    h = 0
    for key, value in values.items():
        h ^= _ordered(_string(key), _string(value))
    return _finish(h)


def _set(items: Iterable[int] | None) -> int | None:
    if items is None:
        return None
    h = 0
    for item in items:
        h ^= item
    return h


def _nonzero_string(value: str | None) -> int | None:
    return _string(value) if value else None


def _taint(taint: Taint) -> int:
    time_added = None
    if taint.time_added is not None:  # metav1.Time{time.Time}: time.Time has only unexported fields
        time_added = _struct("Time", [("Time", _string("Time"))])
    return _struct(
        "Taint",
        [
            ("Key", _nonzero_string(taint.key)),
            ("Value", _nonzero_string(taint.value)),
            ("Effect", _nonzero_string(taint.effect)),
            ("TimeAdded", time_added),
        ],
    )


def go_duration_nanoseconds(value: str) -> int | None:
    """A Go duration string in whole nanoseconds as ``time.ParseDuration`` gives it; None for ``Never``."""
    if value == NEVER:
        return None
    text = value
    sign = 1
    if text[:1] in ("+", "-"):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0
    total = Fraction(0)
    pos = 0
    while pos < len(text):
        match = _COMPONENT.match(text, pos)
        if match is None or match[1] in ("", "."):
            raise ValueError(f"invalid duration {value!r}")
        total += Fraction(match[1]) * _NS[match[2]]
        pos = match.end()
    if pos == 0:
        raise ValueError(f"invalid duration {value!r}")
    return sign * int(total)


def _duration(type_name: str, value: str | None) -> int | None:
    """metav1.Duration (a ``time.Duration`` field: zero is left out) or NillableDuration (a pointer to one:
    only nil, i.e. ``Never``, is left out), both with the one field ``Duration`` in nanoseconds."""
    if value is None:
        return None
    ns = go_duration_nanoseconds(value)
    if ns is None:
        return None  # Never: a nil duration, the whole NillableDuration is zero
    pointer = type_name == "NillableDuration"
    return _struct(type_name, [("Duration", _int64(ns) if ns != 0 or pointer else None)])


def template_hash(template: NodeClaimTemplate) -> str:
    """The decimal ``karpenter.sh/nodepool-hash`` of a NodePool's ``spec.template``."""
    meta = template.metadata
    labels, annotations = _map(meta.labels), _map(meta.annotations)
    object_meta = None
    if labels is not None or annotations is not None:
        object_meta = _struct("ObjectMeta", [("Labels", labels), ("Annotations", annotations)])
    spec = template.spec
    ref = spec.node_class_ref
    node_class_ref = _struct(
        "NodeClassReference",
        [
            ("Kind", _nonzero_string(ref.kind)),
            ("Name", _nonzero_string(ref.name)),
            ("Group", _nonzero_string(ref.group)),
        ],
    )
    spec_hash = _struct(
        "NodeClaimTemplateSpec",
        [
            ("Taints", _set(None if spec.taints is None else (_taint(t) for t in spec.taints))),
            ("StartupTaints", _set(None if spec.startup_taints is None else (_taint(t) for t in spec.startup_taints))),
            ("NodeClassRef", node_class_ref),
            ("TerminationGracePeriod", _duration("Duration", spec.termination_grace_period)),
            ("ExpireAfter", _duration("NillableDuration", spec.expire_after)),
        ],
    )
    return str(_struct("NodeClaimTemplate", [("ObjectMeta", object_meta), ("Spec", spec_hash)]))
