"""NodePool names as a NodeflowPolicy lists them (``nodePoolAccess[].nodePools``, ``limits[].nodePools``,
``pauses[].nodePools``): ``*`` stands for every NodePool, existing or future, exactly as ``*`` in ``namespaces``
stands for every namespace. ``PoolNames`` is the one place that meaning lives: every reader (access, group limits
in the solver and in disruption, pause windows, the governance record, plan warnings) asks it whether a NodePool is
covered, and none iterates the names (a ``*`` group is not a list of NodePools).

Must not touch: which policy applies to a NodePool beyond the name match (``nodeflow.governance.policy``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["EVERY", "PoolNames"]

EVERY = "*"


@dataclass(frozen=True, slots=True)
class PoolNames:
    """A set of NodePools: the names listed, or every NodePool when ``*`` is among them."""

    names: frozenset[str] = frozenset({EVERY})

    @staticmethod
    def of(values: Iterable[str] | None) -> PoolNames:
        """The NodePools ``values`` lists; None (a list left unset, as a pause window's) is every NodePool."""
        return PoolNames() if values is None else PoolNames(frozenset(values))

    @property
    def every(self) -> bool:
        return EVERY in self.names

    def __contains__(self, nodepool: object) -> bool:
        """True when ``nodepool`` (a NodePool name; None, a node of no NodePool, never) is covered."""
        return isinstance(nodepool, str) and (self.every or nodepool in self.names)

    def named(self) -> list[str]:
        """The NodePools named one by one (``*`` left out), sorted: those that may not exist."""
        return sorted(n for n in self.names if n != EVERY)

    def to_json(self) -> list[str] | None:
        """The names, sorted; None for every NodePool (as an unset list reads)."""
        return None if self.every else sorted(self.names)

    def describe(self) -> str:
        """ "every NodePool" or "a, b"."""
        return "every NodePool" if self.every else ", ".join(sorted(self.names))
