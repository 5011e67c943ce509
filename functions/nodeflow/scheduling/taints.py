"""Taints and tolerations (Kubernetes semantics, used by the solver on plain data).

Must not touch: where pods go (``solver``); which taints a NodePool or node has (the inputs say).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["EFFECTS", "Taint", "Toleration", "tolerates", "untolerated"]

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # "Equal" | "Exists"
    value: str = ""
    effect: str = ""  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            # An empty key with Exists matches every taint.
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def untolerated(
    tolerations: Sequence[Toleration],
    taints: Iterable[Taint],
    effects: frozenset[str] = frozenset({"NoSchedule", "NoExecute"}),
) -> Taint | None:
    """The first taint with a scheduling effect the pod does not tolerate, or None."""
    for taint in taints:
        if taint.effect in effects and not tolerates(tolerations, taint):
            return taint
    return None
