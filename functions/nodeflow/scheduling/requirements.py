"""Node selector requirements and their algebra (Karpenter's scheduling.Requirements).

A ``Requirement`` is a set of allowed values for one label key, stored as
``(complement, values, greater_than, less_than)``:

    In [a b]      complement=False values={a,b}
    NotIn [a b]   complement=True  values={a,b}
    Exists        complement=True  values={}
    DoesNotExist  complement=False values={}
    Gt n / Gte n  complement=True  greater_than=n / n-1
    Lt n / Lte n  complement=True  less_than=n / n+1

Intersection of two requirements is again a requirement, so a NodeClaim's requirements are
the intersection of its NodePool's and every pod's on it.

Must not touch: instance types or prices (``pricing``); pods or NodeClaims.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping
from dataclasses import dataclass

from nodeflow.api.labels import LABEL_HOSTNAME, LABEL_REGION, LABEL_ZONE, NORMALIZED_LABELS, WELL_KNOWN_LABELS

__all__ = ["OPERATORS", "Requirement", "RequirementError", "Requirements", "normalize_key"]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
_INFINITE = 1 << 62
_TOPOLOGY_LABELS = frozenset({LABEL_ZONE, LABEL_REGION, LABEL_HOSTNAME})


class RequirementError(ValueError):
    """A requirement whose operator and values do not go together."""


def normalize_key(key: str) -> str:
    """Map deprecated and CSI aliases to the standard label (beta zone, EBS CSI zone...)."""
    return NORMALIZED_LABELS.get(key, key)


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    complement: bool
    values: frozenset[str] = frozenset()
    greater_than: int | None = None
    less_than: int | None = None
    min_values: int | None = None

    @staticmethod
    def create(key: str, operator: str, values: Iterable[str] = (), min_values: int | None = None) -> Requirement:
        """Build a requirement from a Kubernetes (key, operator, values) triple."""
        vals = frozenset(str(v) for v in values)
        key = normalize_key(key)
        if operator == "In":
            if not vals:
                raise RequirementError(f"{key}: operator In requires at least one value")
            return Requirement(key, False, vals, min_values=min_values)
        if operator == "NotIn":
            return Requirement(key, True, vals, min_values=min_values)
        if operator in ("Exists", "DoesNotExist"):
            if vals:
                raise RequirementError(f"{key}: operator {operator} takes no values")
            return Requirement(key, operator == "Exists", min_values=min_values)
        if operator in ("Gt", "Lt", "Gte", "Lte"):
            if len(vals) != 1:
                raise RequirementError(f"{key}: operator {operator} requires exactly one integer value")
            bound = _as_int(next(iter(vals)))
            if bound is None:
                raise RequirementError(f"{key}: operator {operator} requires an integer value, got {vals}")
            if operator == "Gt":
                return Requirement(key, True, greater_than=bound, min_values=min_values)
            if operator == "Gte":
                return Requirement(key, True, greater_than=bound - 1, min_values=min_values)
            if operator == "Lt":
                return Requirement(key, True, less_than=bound, min_values=min_values)
            return Requirement(key, True, less_than=bound + 1, min_values=min_values)
        raise RequirementError(f"{key}: unknown operator {operator!r} (expected one of {', '.join(OPERATORS)})")

    # -- queries -----------------------------------------------------------------------------
    def _within_bounds(self, value: str) -> bool:
        if self.greater_than is None and self.less_than is None:
            return True
        number = _as_int(value)
        if number is None:
            return False
        if self.greater_than is not None and number <= self.greater_than:
            return False
        return not (self.less_than is not None and number >= self.less_than)

    def has(self, value: str) -> bool:
        """Does a node labelled ``key=value`` satisfy this requirement?"""
        if self.complement:
            return value not in self.values and self._within_bounds(value)
        return value in self.values and self._within_bounds(value)

    def __len__(self) -> int:
        if self.complement:
            return _INFINITE - len(self.values)
        return len(self.values)

    @property
    def operator(self) -> str:
        if self.complement:
            return "NotIn" if self.values else "Exists"
        return "In" if self.values else "DoesNotExist"

    def allows_absent(self) -> bool:
        """Is a node *without* this label acceptable (NotIn / DoesNotExist)?"""
        return self.operator in ("NotIn", "DoesNotExist")

    def intersection(self, other: Requirement) -> Requirement:
        greater = _max_opt(self.greater_than, other.greater_than)
        less = _min_opt(self.less_than, other.less_than)
        min_values = _max_opt(self.min_values, other.min_values)
        if greater is not None and less is not None and greater >= less - 1:
            return Requirement(self.key, False, min_values=min_values)
        complement = self.complement and other.complement
        if self.complement and other.complement:
            values = self.values | other.values
        elif self.complement:
            values = other.values - self.values
        elif other.complement:
            values = self.values - other.values
        else:
            values = self.values & other.values
        if not complement and (greater is not None or less is not None):
            probe = Requirement(self.key, True, greater_than=greater, less_than=less)
            values = frozenset(v for v in values if probe._within_bounds(v))
        return Requirement(self.key, complement, values, greater, less, min_values)

    def any_value(self) -> str | None:
        """A deterministic value satisfying the requirement (None for DoesNotExist).

        In: the smallest value. NotIn / Exists / Gt / Lt: as Karpenter, an integer (it draws one at
        random within the bounds; here the smallest one from 0 or the lower bound that is not excluded).
        """
        if not self.complement:
            return min(self.values) if self.values else None
        candidate = self.greater_than + 1 if self.greater_than is not None else 0
        while str(candidate) in self.values:
            candidate += 1
        if self.less_than is not None and candidate >= self.less_than:
            return None
        return str(candidate)

    def describe(self) -> str:
        """Human-readable form, e.g. ``In [a, b]`` or ``Exists``."""
        parts = []
        if self.operator in ("In", "NotIn"):
            parts.append(f"{self.operator} [{', '.join(sorted(self.values))}]")
        elif self.greater_than is None and self.less_than is None:
            parts.append(self.operator)
        if self.greater_than is not None:
            parts.append(f"Gt {self.greater_than}")
        if self.less_than is not None:
            parts.append(f"Lt {self.less_than}")
        return " ".join(parts)


def _max_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


class Requirements(Mapping[str, Requirement]):
    """An immutable set of requirements keyed by label; combining intersects per key."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Iterable[Requirement] = ()) -> None:
        merged: dict[str, Requirement] = {}
        for req in items:
            existing = merged.get(req.key)
            merged[req.key] = req if existing is None else existing.intersection(req)
        self._items = merged
        self._hash: int | None = None

    @staticmethod
    def from_labels(labels: Mapping[str, str]) -> Requirements:
        return Requirements(Requirement(normalize_key(k), False, frozenset((v,))) for k, v in labels.items())

    def __getitem__(self, key: str) -> Requirement:
        return self._items[key]

    # Fast paths (the Mapping mixins go through __getitem__ and exceptions).
    def get(self, key: str, default: Requirement | None = None) -> Requirement | None:  # type: ignore[override]
        return self._items.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def items(self) -> ItemsView[str, Requirement]:
        return self._items.items()

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.values()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Requirements):
            return NotImplemented
        return self._items == other._items

    def __repr__(self) -> str:
        inner = ", ".join(f"{k} {r.describe()}" for k, r in sorted(self._items.items()))
        return f"Requirements({inner})"

    def add(self, *others: Requirements) -> Requirements:
        """The intersection of these requirements with others."""
        out = Requirements()
        out._items = dict(self._items)
        for other in others:
            for key, req in other._items.items():
                existing = out._items.get(key)
                out._items[key] = req if existing is None else existing.intersection(req)
        return out

    def intersects(self, incoming: Requirements) -> str | None:
        """None when every shared key has a common value, else the first conflict."""
        for key in sorted(self._items.keys() & incoming._items.keys()):
            existing = self._items[key]
            new = incoming._items[key]
            if len(existing.intersection(new)) == 0:
                if new.allows_absent() and existing.allows_absent():
                    continue
                return f"{key}: requires {new.describe()}, but only {existing.describe()} is allowed"
        return None

    def compatible(self, incoming: Requirements, allow_undefined: frozenset[str] = frozenset()) -> str | None:
        """Can a node with these requirements satisfy ``incoming`` (a pod's)?

        Keys the node does not define are denied unless the pod only excludes values
        (NotIn / DoesNotExist) or the key is in ``allow_undefined`` (well-known labels a
        new node gets from its instance type). Shared keys must intersect.
        """
        for key in sorted(incoming._items.keys() - self._items.keys()):
            req = incoming._items[key]
            if req.allows_absent() or key in allow_undefined:
                continue
            return f"{key}: requires {req.describe()}, but the label is not defined"
        return self.intersects(incoming)

    def labels(self) -> dict[str, str]:
        """Labels a node with these requirements carries.

        Single-valued ``In`` gives its value. A custom (not well-known) key gets a value it allows
        (:meth:`Requirement.any_value`), as Karpenter labels a node with some allowed value: so a node
        made for a pod requiring ``key Exists`` (or ``NotIn``) does carry the key. Well-known keys with
        several values (zone, instance type...) are decided by the launch, not here.
        """
        out: dict[str, str] = {}
        for key, req in self._items.items():
            if not req.complement and len(req.values) == 1:
                out[key] = next(iter(req.values))
            elif key not in WELL_KNOWN_LABELS and key not in _TOPOLOGY_LABELS:
                value = req.any_value()
                if value is not None:
                    out[key] = value
        return out
