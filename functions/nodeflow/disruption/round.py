"""One round of disruption: ``decide(snapshot, catalog, now, ...)`` -> ``RoundResult``. Pure.

This module only orders the methods, starts the round (what every method shares) and assembles the result;
each method is a module of its own implementing ``nodeflow.disruption.method.Method``.

Expiration first and apart (``expiration``): every node whose NodeClaim is older than its ``spec.expireAfter``
is returned in ``expirations`` (forceful: no budget, no blocker, no replacement simulation). Static NodePools
above their replicas are scaled down in ``scale_downs`` (``static``: no budget, like expiration).

NodeflowPolicies (``nodeflow.disruption.policy``): a node of a NodePool inside a pause window with
``disruption: true`` is not disrupted voluntarily (none of the methods below, nor a static scale-down) and is
reported blocked with the window; expiration goes on. Then every candidate with a blocker (``candidates``) is
reported blocked.

Then at most ONE voluntary command, trying the methods in Karpenter's order and stopping at the first found:
1. emptiness (``emptiness``, reason Empty);
2. static drift (``static_drift``, reason Drifted), then drift (``drift``);
3. multi-node consolidation (``multi_node_consolidation``, reason Underutilized);
4. single-node consolidation (``single_node_consolidation``).
Each method gets the candidates its budget class wants, filtered by its ``should_disrupt``, in disruption-cost
order (Karpenter: sum of the pods' eviction costs, from the pod-deletion-cost annotation and priority, times the
fraction of the node's lifetime left); the budgets (``budgets.RoundBudgets``), the simulation
(``simulation``) and the policy check of a command (``method.Round.validate``: replacements that would cross a
$/hour ceiling or a group limit are simulated again under them, else refused and their candidates reported
blocked) are the round's, shared by every method.

Must not touch: what a method decides (its own module), Kubernetes or AWS (the lifecycle applies the result), the
clock (``now`` is an input).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from nodeflow.catalog.model import CatalogData
from nodeflow.disruption.budgets import RoundBudgets
from nodeflow.disruption.candidates import Candidate, build_candidates
from nodeflow.disruption.consolidation import Consolidation
from nodeflow.disruption.drift import Drift
from nodeflow.disruption.drift_detection import drift_reason
from nodeflow.disruption.emptiness import Emptiness
from nodeflow.disruption.expiration import expirations
from nodeflow.disruption.method import Method, Round
from nodeflow.disruption.model import Blocked, BlockKind, Command, Evaluation, RoundResult, Settings, Snapshot
from nodeflow.disruption.multi_node_consolidation import MultiNodeConsolidation
from nodeflow.disruption.policy import RoundPolicy
from nodeflow.disruption.single_node_consolidation import SingleNodeConsolidation
from nodeflow.disruption.static import ScaleDown, scale_downs
from nodeflow.disruption.static_drift import StaticDrift

__all__ = ["Prepared", "decide", "methods", "prepare"]


def methods() -> tuple[Method, ...]:
    """The voluntary methods of one round, in the order they are tried (Karpenter's ``NewMethods``)."""
    shared = Consolidation()
    return (
        Emptiness(),
        StaticDrift(),
        Drift(),
        MultiNodeConsolidation(shared),
        SingleNodeConsolidation(shared),
    )


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


class Prepared:
    """What one snapshot at one time gives both the round and the NodeClaim conditions, computed once: the
    candidates (``build_candidates``) and, when first asked, a candidate's drift (``drift_reason``)."""

    def __init__(self, snapshot: Snapshot, catalog: CatalogData, now: datetime) -> None:
        self.snapshot = snapshot
        self.catalog = catalog
        self.now = _aware(now)
        self.candidates = build_candidates(snapshot, catalog, self.now)
        self._classes = {nc.name: nc for nc in snapshot.state.node_classes}
        self._drift: dict[str, str | None] = {}

    def drift(self, c: Candidate) -> str | None:
        """Why ``c`` drifted (``drift_reason`` at this time), or None."""
        if c.name not in self._drift:
            self._drift[c.name] = drift_reason(
                c.claim,
                c.pool,
                self._classes.get(c.pool.spec.template.spec.node_class_ref.name),
                c.node.metadata.labels,
                catalog=self.catalog,
                now=self.now,
            )
        return self._drift[c.name]


def prepare(snapshot: Snapshot, catalog: CatalogData, now: datetime) -> Prepared:
    """``Prepared`` for ``snapshot`` at ``now`` (the cyclic GC paused, as ``decide`` does): pass it to ``decide``
    and to whatever else reads the candidates of the same snapshot and time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return Prepared(snapshot, catalog, now)
    finally:
        if enabled:
            gc.enable()


def decide(
    snapshot: Snapshot,
    catalog: CatalogData,
    now: datetime,
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
    settings: Settings | None = None,
    timer: Callable[[], float] | None = None,
    *,
    prepared: Prepared | None = None,
) -> RoundResult:
    """At most one round of disruption for ``snapshot`` at ``now`` (see the module docstring).

    ``prepared`` (``prepare(snapshot, catalog, now)``, same objects and time, else ValueError) spares building the
    candidates and checking drift again when the caller needs them too.

    ``unavailable`` holds (instance type, zone, capacity type) offerings not to use for replacements.
    ``timer`` (seconds, e.g. ``time.perf_counter``; the caller's: the round reads no clock) times each method
    tried, reported in ``evaluations`` with its eligible nodes; the decision does not depend on it.
    The cyclic garbage collector is paused for the round (and restored as it was): the simulations allocate
    many small objects next to the snapshot's millions, and each collection rescans them all (5,000 nodes and
    50,000 pods: a third of the round's time).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _decide(prepared, snapshot, catalog, now, unavailable, settings, timer or _no_timer)
    finally:
        if enabled:
            gc.enable()


def _decide(
    prepared: Prepared | None,
    snapshot: Snapshot,
    catalog: CatalogData,
    now: datetime,
    unavailable: frozenset[tuple[str, str, str]],
    settings: Settings | None,
    timer: Callable[[], float],
) -> RoundResult:
    evaluations: list[Evaluation] = []
    since = timer()
    now = _aware(now)
    if prepared is None:
        prepared = Prepared(snapshot, catalog, now)
    elif prepared.snapshot is not snapshot or prepared.catalog is not catalog or prepared.now != now:
        raise ValueError("prepared: made for another snapshot, catalog or time than the round's")
    expired = tuple(expirations(prepared.candidates, now))
    r, downs = _start(prepared, settings or Settings(), unavailable, {e.node for e in expired})
    command: Command | None = None
    for method in methods():
        if method.simulates:
            r.simulate()
        wanted = [c for c in r.wants(method.budget_class) if method.should_disrupt(r, c)]
        if not wanted and not method.evaluated_without_candidates:
            continue
        command = method.compute(r, wanted)
        # a method's time runs from the previous one's end (the first's from the round's start, so the candidates
        # all methods share are counted once, where Karpenter's first method lists them)
        at = timer()
        evaluations.append(
            Evaluation(method.reason.value.lower(), method.consolidation_type, len(wanted), max(0.0, at - since))
        )
        since = at
        if command is not None:
            break
    return RoundResult(command, expired, _first_blockers(r.blocked, command), tuple(evaluations), downs)


def _start(
    prepared: Prepared, settings: Settings, unavailable: frozenset[tuple[str, str, str]], expired: set[str]
) -> tuple[Round, tuple[ScaleDown, ...]]:
    """The round every method shares: the live candidates (not expired, not deleting, not paused by a policy),
    the pauses and blockers reported, the budgets; and the static scale-downs outside pause windows."""
    snapshot, candidates, now = prepared.snapshot, prepared.candidates, prepared.now
    live = [c for c in candidates if c.name not in expired and not c.deleting]
    blocked: list[Blocked] = []
    policy = RoundPolicy.of(snapshot.state, candidates, prepared.catalog, now)
    downs = scale_downs(snapshot.state, candidates, now)
    if policy is not None:  # pause windows: no voluntary disruption of their NodePools' nodes
        pauses = {c.name: why for c in live if (why := policy.paused(c.pool_name)) is not None}
        blocked += [Blocked(c.name, BlockKind.BLOCKED, pauses[c.name]) for c in live if c.name in pauses]
        live = [c for c in live if c.name not in pauses]
        downs, held = _unpaused(downs, policy)
        blocked += held
    blocked += [Blocked(c.name, BlockKind.BLOCKED, c.blocker) for c in live if c.blocker]
    r = Round(
        snapshot=snapshot,
        catalog=prepared.catalog,
        now=now,
        settings=settings,
        unavailable=unavailable,
        drift=prepared.drift,
        candidates=candidates,
        live=live,
        policy=policy,
        budgets=RoundBudgets(snapshot, candidates, now),
        blocked=blocked,
    )
    return r, downs


def _first_blockers(blocked: Sequence[Blocked], command: Command | None) -> tuple[Blocked, ...]:
    """One entry per node not taken by ``command``: the first blocker found."""
    taken = set(command.candidates) if command is not None else set()
    first: dict[str, Blocked] = {}
    for b in blocked:
        if b.node not in taken:
            first.setdefault(b.node, b)
    return tuple(first.values())


def _unpaused(downs: Sequence[ScaleDown], policy: RoundPolicy) -> tuple[tuple[ScaleDown, ...], list[Blocked]]:
    """The static scale-downs outside pause windows, and the nodes of the others as blocked (a NodeClaim without a
    node yet is held as well, with no event: there is no Node to tell)."""
    kept: list[ScaleDown] = []
    held: list[Blocked] = []
    for s in downs:
        why = policy.paused(s.node_pool)
        if why is None:
            kept.append(s)
        elif s.node is not None:
            held.append(Blocked(s.node, BlockKind.BLOCKED, why))
    return tuple(kept), held


def _no_timer() -> float:
    return 0.0
