"""NodeflowPolicy $/hour ceilings during a solve: the cluster's, each NodePool's and each namespace's. Pure.

Decides what is left under each ceiling (``CeilingBudget``), which ceilings a new NodeClaim counts against
(``Ceilings.budgets``), the most a new NodeClaim may cost (``Ceilings.allowance``), whether pods joining a
NodeClaim keep every ceiling (``Ceilings.join_fits``) and what opening or joining one charges (``Ceilings.open``,
``Ceilings.join``). A namespace's share of a NodeClaim's price is its pods' share of the CPU requests (per pod when
none requests CPU: ``split_shares``), as ``governance.policy.namespace_shares`` counts it. The packer (``packing``)
asks; which ceilings are bound to a solve at all is ``bounds``'; resource limits are ``limits``'.

Must not touch: NodeClaims' instance types or pods (only their price and namespace shares are read and charged),
the clock, or anything outside the solve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from nodeflow.scheduling.groups import Group
from nodeflow.scheduling.nodepools import Pool
from nodeflow.scheduling.pricing import PRICE_EPSILON
from nodeflow.scheduling.types import CeilingInput, SchedulingInput

__all__ = ["CeilingBudget", "Ceilings", "Shared", "cannot_pay", "split_shares"]


@dataclass(slots=True)
class CeilingBudget:
    """What is left under a NodeflowPolicy $/hour ceiling during a solve (shared by every NodeClaim it covers)."""

    input: CeilingInput
    left: float

    @staticmethod
    def start(ceiling: CeilingInput) -> CeilingBudget:
        """The budget before anything is planned: the max less what is in use."""
        return CeilingBudget(ceiling, ceiling.max_per_hour - ceiling.in_use)

    @property
    def in_use(self) -> float:
        return self.input.max_per_hour - self.left

    def reason(self, pool: str, price: float) -> str:
        """ "NodeClaim of NodePool gpu ($3.0600/hour) would cross the $/hour ceiling of NodePool gpu ($20.00/hour,
        $18.50 in use): policy cost-caps"."""
        return (
            f"NodeClaim of NodePool {pool} (${price:.4f}/hour) would cross {self.input.describe(self.in_use)}: "
            f"policy {self.input.policy}"
        )


class Shared(Protocol):
    """What the ceilings read of a NodeClaim: its NodePool, its price now, and how that price is shared among
    namespaces (``shares``: namespace -> [CPU requested (millicores), pods]; kept only under namespace ceilings)."""

    shares: dict[str, list[int]] | None

    @property
    def pool(self) -> Pool: ...

    @property
    def price(self) -> float: ...


class Ceilings:
    """The $/hour ceilings of one solve: budgets per NodePool (the cluster's and its own) and per namespace."""

    def __init__(self, inp: SchedulingInput, pools: Sequence[Pool]) -> None:
        budgets = [CeilingBudget.start(c) for c in inp.ceilings]
        cluster = tuple(b for b in budgets if b.input.scope == "cluster")
        # NodePool name -> the ceilings its NodeClaims count against (empty without policies)
        self._of: dict[str, tuple[CeilingBudget, ...]] = {}
        for pool in pools:
            name = pool.input.name
            mine = cluster + tuple(b for b in budgets if b.input.scope == "nodePool" and b.input.name == name)
            if mine:
                self._of[name] = mine
        self.namespaced: dict[str, list[CeilingBudget]] = {}  # namespace -> its ceilings
        for b in budgets:
            if b.input.scope == "namespace":
                self.namespaced.setdefault(b.input.name, []).append(b)

    def of(self, pool: Pool) -> tuple[CeilingBudget, ...]:
        """The cluster and NodePool ceilings the pool's NodeClaims count against."""
        return self._of.get(pool.input.name, ())

    def budgets(self, pool: Pool, namespace: str) -> list[CeilingBudget]:
        """The ceilings a new NodeClaim of ``pool`` for pods of ``namespace`` counts against."""
        return [*self.of(pool), *self.namespaced.get(namespace, ())]

    @staticmethod
    def allowance(budgets: Sequence[CeilingBudget]) -> float | None:
        """The most a new NodeClaim counted against ``budgets`` may cost (None: no ceiling)."""
        return min(b.left for b in budgets) + PRICE_EPSILON if budgets else None

    @staticmethod
    def refusal(pool: Pool, budgets: Sequence[CeilingBudget], price: float) -> str:
        """Why a NodeClaim of ``pool`` costing ``price`` is not made: the ceiling with the least left."""
        binding = min(budgets, key=lambda b: b.left)
        return binding.reason(pool.input.name, price)

    def open(self, claim: Shared, budgets: Sequence[CeilingBudget], group: Group, take: int) -> None:
        """A new NodeClaim's price counts against its ceilings (its pods are all of the group's namespace)."""
        for b in budgets:
            b.left -= claim.price
        if self.namespaced:
            claim.shares = {group.namespace: [group.requests.get("cpu", 0) * take, take]}

    def left_for(self, group: Group) -> float | None:
        """The least left under the $/hour ceilings of the group's namespace, when it has one and its pods request
        CPU (their share of a NodeClaim goes by CPU), else None."""
        if not self.namespaced or group.requests.get("cpu", 0) <= 0:
            return None
        budgets = self.namespaced.get(group.namespace)
        return None if budgets is None else min(b.left for b in budgets)

    def _deltas(self, claim: Shared, group: Group, take: int, price: float) -> tuple[float, dict[str, float]]:
        """How the NodeClaim's $/hour changes (in total, and per namespace with a ceiling) when ``take`` pods of
        the group join it and its price becomes ``price``."""
        delta = price - claim.price
        per_ns: dict[str, float] = {}
        if self.namespaced and claim.shares is not None:
            before = split_shares(claim.shares)
            after_shares = {k: list(v) for k, v in claim.shares.items()}
            entry = after_shares.setdefault(group.namespace, [0, 0])
            entry[0] += group.requests.get("cpu", 0) * take
            entry[1] += take
            after = split_shares(after_shares)
            for ns in self.namespaced:
                change = after.get(ns, 0.0) * price - before.get(ns, 0.0) * claim.price
                if change:
                    per_ns[ns] = change
        return delta, per_ns

    def join_fits(self, claim: Shared, group: Group, take: int, price: float) -> bool:
        """Do the pods joining keep every ceiling (the NodeClaim's and the namespaces') at or under its max?"""
        delta, per_ns = self._deltas(claim, group, take, price)
        if delta > PRICE_EPSILON and any(b.left < delta - PRICE_EPSILON for b in self.of(claim.pool)):
            return False
        return not any(
            change > PRICE_EPSILON and any(b.left < change - PRICE_EPSILON for b in self.namespaced[ns])
            for ns, change in per_ns.items()
        )

    def join(self, claim: Shared, group: Group, take: int, price: float) -> None:
        """Charge the pods joining (``join_fits`` said they may) to the NodeClaim's ceilings and the namespaces'."""
        delta, per_ns = self._deltas(claim, group, take, price)
        for b in self.of(claim.pool):
            b.left -= delta
        for ns, change in per_ns.items():
            for b in self.namespaced[ns]:
                b.left -= change
        if claim.shares is not None:
            entry = claim.shares.setdefault(group.namespace, [0, 0])
            entry[0] += group.requests.get("cpu", 0) * take
            entry[1] += take


def cannot_pay(claim: Shared, namespace: str, cpu: int, left: float) -> bool:
    """Would even one pod of ``namespace`` requesting ``cpu`` millicores (> 0) joining ``claim`` cost the namespace
    more than the ``left`` it has under its ceilings? Its share grows from c/T to (c+cpu)/(T+cpu) of the
    NodeClaim's CPU requests, and the price does not fall: the cost is at least that growth times today's price
    (the check made on a join, ``Ceilings.join_fits``, cannot pass then). False when it may pay, or when shares go
    by pod count (no CPU requested on it)."""
    shares = claim.shares
    if shares is None:
        return False
    total = 0
    for requested, _ in shares.values():
        total += requested
    if total <= 0:
        return False
    mine = shares[namespace][0] if namespace in shares else 0
    growth = (mine + cpu) / (total + cpu) - mine / total
    return growth * claim.price > left + 2 * PRICE_EPSILON


def split_shares(shares: Mapping[str, list[int]]) -> dict[str, float]:
    """Namespace -> its fraction of a node's price: by CPU requests, per pod when none requests CPU."""
    total = sum(cpu for cpu, _ in shares.values())
    if total:
        return {ns: cpu / total for ns, (cpu, _) in shares.items()}
    pods = sum(n for _, n in shares.values()) or 1
    return {ns: n / pods for ns, (_, n) in shares.items()}
