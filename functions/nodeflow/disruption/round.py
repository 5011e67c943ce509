"""One round of disruption: ``decide(snapshot, catalog, now, ...)`` -> ``RoundResult``.

Expiration first and apart: every node whose NodeClaim is older than its ``spec.expireAfter`` is
returned in ``expirations`` (forceful: no budget, no blocker, no replacement simulation).

Then at most ONE voluntary command, trying in Karpenter's order and stopping at the first found:
1. emptiness: every unblocked candidate holding only DaemonSet/mirror pods whose last pod event is
   at least consolidateAfter ago (policy WhenEmpty or WhenEmptyOrUnderutilized), as many as the
   budgets (reason Empty) allow, deleted together;
2. drift (reason Drifted): empty drifted candidates first, then the earliest drifted (the NodeClaim's
   Drifted condition; drift found only now counts as now): the first unblocked one within budget whose
   pods can be rescheduled, replaced by as many NodeClaims as its pods need (deleted when they fit elsewhere: on
   any other node, one inside its consolidateAfter window too, as Karpenter's drift simulation is no
   consolidation simulation);
3. multi-node consolidation (reason Underutilized): the nodes consolidation may take (see
   ``consolidation.unconsolidatable``; busy, consolidateAfter elapsed), best savings per disruption first
   (``consolidation.consolidation_order``), the first up to ``multi_node_candidates`` within budget; binary
   search for the longest prefix (at least 2) that can be deleted or replaced by one cheaper node;
4. single-node consolidation: the first of those nodes (NodePools interleaved; any NodePool with budget
   left) that can.
Consolidation moves of NodePools with consolidationPolicy Balanced must also pass their score against the
NodePool's totals over all its nodes (``nodeflow.disruption.balanced``); a rejected one is not taken.

Static NodePools (``spec.replicas``, ``nodeflow.disruption.static``): their nodes are never emptied or
consolidated; a drifted one is replaced by a new NodeClaim of its pool's template ("static drift", tried before
drift); a pool above its replicas is scaled down in ``scale_downs`` (no budget, like expiration).

NodeflowPolicies (``nodeflow.disruption.policy``): a node of a NodePool inside a pause window with ``disruption: true``
is not disrupted voluntarily (none of the methods above, nor a static scale-down) and is reported blocked with the
window; expiration goes on. Replacements are simulated without the NodePools the moving pods' namespaces may not
use (or whose provisioning is paused). A command whose replacements would cross a $/hour ceiling or a group limit
(the candidates counted as freed) is simulated again with the solver given the ceilings and limits that could bind,
so its replacements go to another NodePool as the provisioner's would; when none can, it is not taken and its
candidates are reported blocked with why.

Emptiness and drift take candidates in disruption-cost order (Karpenter: sum of the pods' eviction costs,
from the pod-deletion-cost annotation and priority, times the fraction of the node's lifetime left).
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from nodeflow.api.duration import shift
from nodeflow.catalog.model import CatalogData
from nodeflow.disruption.balanced import BALANCED, pool_totals
from nodeflow.disruption.budgets import allowed
from nodeflow.disruption.candidates import Candidate, budget_standing, build_candidates
from nodeflow.disruption.consolidation import (
    PodInputs,
    Simulator,
    consolidate,
    consolidation_order,
    interleave_pools,
    moves_of,
    on_hold,
    unconsolidatable,
)
from nodeflow.disruption.drift import drift_reason
from nodeflow.disruption.model import (
    Blocked,
    BlockKind,
    Command,
    Evaluation,
    Expiration,
    Reason,
    RoundResult,
    Settings,
    Snapshot,
)
from nodeflow.disruption.policy import RoundPolicy
from nodeflow.disruption.static import ScaleDown, scale_downs, static_drift
from nodeflow.plan import build_input
from nodeflow.scheduling.static import static_plan
from nodeflow.scheduling.types import NodeClaimPlan

__all__ = ["Prepared", "decide", "prepare"]


class _Budgets:
    """Remaining disruptions per (NodePool, reason) for this round."""

    def __init__(self, snapshot: Snapshot, candidates: Sequence[Candidate], now: datetime) -> None:
        self.now = now
        self.pools = {p.name: p for p in snapshot.state.node_pools}
        self.total: dict[str, int] = {}
        self.disrupting: dict[str, int] = {}
        for c in candidates:
            counted, disrupting = budget_standing(c)
            if counted:
                self.total[c.pool_name] = self.total.get(c.pool_name, 0) + 1
            if counted and disrupting:
                self.disrupting[c.pool_name] = self.disrupting.get(c.pool_name, 0) + 1
        self.cache: dict[tuple[str, Reason], int] = {}

    def left(self, pool: str, reason: Reason) -> int:
        key = (pool, reason)
        if key not in self.cache:
            budgets = self.pools[pool].spec.disruption.budgets
            self.cache[key] = allowed(
                budgets, reason.value, self.total.get(pool, 0), self.disrupting.get(pool, 0), self.now
            )
        return self.cache[key]

    def within(self, candidates: Sequence[Candidate], reason: Reason, blocked: list[Blocked]) -> list[Candidate]:
        """The candidates the budgets allow together (in order); the others are reported blocked."""
        taken: dict[str, int] = {}
        out: list[Candidate] = []
        for c in candidates:
            if taken.get(c.pool_name, 0) < self.left(c.pool_name, reason):
                taken[c.pool_name] = taken.get(c.pool_name, 0) + 1
                out.append(c)
            else:
                message = f"disruption budget of NodePool {c.pool_name} allows no more {reason.value} disruptions now"
                blocked.append(Blocked(c.name, BlockKind.BLOCKED, message))
        return out


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _expirations(candidates: Sequence[Candidate], now: datetime) -> list[Expiration]:
    out: list[Expiration] = []
    for c in candidates:
        seconds = c.claim.spec.expire_after_seconds
        created = c.claim.metadata.creation_timestamp
        if seconds is None or created is None or c.deleting:
            continue
        at = shift(_aware(created), seconds)
        if at <= now:
            out.append(Expiration(c.name, c.claim.name, at))
    return sorted(out, key=lambda e: (e.expired_at, e.node))


def _drifted_at(c: Candidate, now: datetime) -> datetime:
    """When the node drifted: its NodeClaim's Drifted condition (True) lastTransitionTime, else now."""
    cond = c.claim.status.condition("Drifted") if c.claim.status is not None else None
    if cond is not None and cond.status == "True" and cond.last_transition_time is not None:
        return min(_aware(cond.last_transition_time), now)
    return now


def _settled(c: Candidate, now: datetime) -> bool:
    """consolidateAfter has passed since the node's last pod event (never with consolidateAfter Never)."""
    after = c.pool.spec.disruption.consolidate_after_seconds
    if after is None:
        return False
    return c.last_pod_event is None or shift(c.last_pod_event, after) <= now


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
    since = [timer()]

    def evaluated(reason: Reason, consolidation_type: str, eligible: int) -> None:
        """A method was tried: its time runs from the previous one's end (the first's from the round's start,
        so the candidates all methods share are counted once, where Karpenter's first method lists them)."""
        at = timer()
        evaluations.append(Evaluation(reason.value.lower(), consolidation_type, eligible, max(0.0, at - since[0])))
        since[0] = at

    now = _aware(now)
    settings = settings or Settings()
    if prepared is None:
        prepared = Prepared(snapshot, catalog, now)
    elif prepared.snapshot is not snapshot or prepared.catalog is not catalog or prepared.now != now:
        raise ValueError("prepared: made for another snapshot, catalog or time than the round's")
    candidates = prepared.candidates
    expirations = _expirations(candidates, now)
    expired = {e.node for e in expirations}
    live = [c for c in candidates if c.name not in expired and not c.deleting]
    blocked: list[Blocked] = []
    policy = RoundPolicy.of(snapshot.state, candidates, catalog, now)
    downs = scale_downs(snapshot.state, candidates, now)
    if policy is not None:  # pause windows: no voluntary disruption of their NodePools' nodes
        pauses = {c.name: why for c in live if (why := policy.paused(c.pool_name)) is not None}
        blocked += [Blocked(c.name, BlockKind.BLOCKED, pauses[c.name]) for c in live if c.name in pauses]
        live = [c for c in live if c.name not in pauses]
        downs, held = _unpaused(downs, policy)
        blocked += held
    blocked += [Blocked(c.name, BlockKind.BLOCKED, c.blocker) for c in live if c.blocker]
    usable = [c for c in live if c.blocker is None]
    budgets = _Budgets(snapshot, candidates, now)

    def done(command: Command | None) -> RoundResult:
        taken = set(command.candidates) if command is not None else set()
        first: dict[str, Blocked] = {}
        for b in blocked:  # one entry per node: the first blocker found
            if b.node not in taken:
                first.setdefault(b.node, b)
        return RoundResult(command, tuple(expirations), tuple(first.values()), tuple(evaluations), downs)

    # 1. emptiness
    empty = [c for c in usable if not c.movable and _settled(c, now) and not c.static]
    chosen = budgets.within(empty, Reason.EMPTY, blocked)
    evaluated(Reason.EMPTY, "empty", len(empty))
    if chosen:
        before = sum(c.price or 0.0 for c in chosen)
        return done(Command(Reason.EMPTY, "emptiness", tuple(c.name for c in chosen), (), (), before, 0.0))

    base = build_input(
        snapshot.state,
        catalog,
        settings.preference_policy,
        settings.min_values_policy,
        unavailable=unavailable,
        now=now,
    )
    if base.ceilings or base.group_limits:
        # The policies' ceilings and group limits are checked on each command with its candidates counted as freed
        # (``RoundPolicy.check``); a refused command is simulated again with the solver given those that could bind,
        # the candidates counted as freed (``rerouted``), never as the provisioner counts them (still running).
        base = dataclasses.replace(base, ceilings=(), group_limits=())
    bound = [p for c in candidates for p in c.movable]
    sim = Simulator(
        base=base,
        pods=PodInputs(snapshot.state, bound),
        held=on_hold(candidates, snapshot.last_pod_events, now),
        draining={c.name: tuple(p.key for p in c.movable if p.key not in c.held) for c in candidates if c.deleting},
        deny=policy.denials([p.name for p in base.nodepools]) if policy is not None else None,
    )

    def refused(command: Command, cs: Sequence[Candidate]) -> str | None:
        """Why the policies refuse ``command``'s replacements (a ceiling or group limit), or None."""
        if policy is None or not command.replacements:
            return None
        return policy.check(command, cs, base, lambda key: (sim.requests_of(key) or {}).get("cpu", 0))

    rerouting: list[Simulator] = []

    def rerouted() -> Simulator | None:
        """The simulator whose solver is given the ceilings and group limits that could bind (the candidates counted
        as freed), so replacements go to the next NodePool as the provisioner's do; used only for a command the
        policies refused (a decision no ceiling or limit refuses stays as without policies). None: no policy has
        a ceiling or a group limit."""
        if policy is None or not (policy.gov.ceilings or policy.gov.group_limits):
            return None
        if not rerouting:
            rule = policy
            rerouting.append(dataclasses.replace(sim, limits=lambda cs, pods: rule.limits(cs, pods, base)))
        return rerouting[0]

    # 2. static drift (a new NodeClaim of the pool's template replaces the node), then drift
    static_drifted = [c for c in live if c.static and c.eventual_ok and prepared.drift(c)]
    if static_drifted:
        pool_inputs = {p.name: p for p in base.static_pools}

        def template(pool: str) -> NodeClaimPlan | None:
            made = static_plan(pool_inputs[pool], base.daemon_pods) if pool in pool_inputs else None
            return made if isinstance(made, NodeClaimPlan) else None

        left = lambda pool: budgets.left(pool, Reason.DRIFTED)  # noqa: E731
        command = static_drift(static_drifted, snapshot.state, left, template)
        evaluated(Reason.DRIFTED, "", len(static_drifted))
        if command is not None:
            why = refused(command, [c for c in static_drifted if c.name in command.candidates])
            if why is None:
                return done(command)
            blocked += [Blocked(name, BlockKind.BLOCKED, why) for name in command.candidates]
    # drift is eventual: a terminationGracePeriod lets it through pod blockers
    drifted = [c for c in live if c.eventual_ok and not c.static and prepared.drift(c)]
    drifted.sort(key=lambda c: (bool(c.movable), _drifted_at(c, now)))  # stable: then disruption cost
    for c in budgets.within(drifted, Reason.DRIFTED, blocked):
        result = sim.run([c])
        if result.unschedulable:
            first = result.unschedulable[0]
            message = f"drifted, but pod {first.pod} could not be rescheduled"
            governed = sorted((k, v) for k, v in first.reasons.items() if ": policy " in v or " by policy " in v)
            if governed:  # a NodeflowPolicy closed a NodePool to it: say so
                message += " (" + "; ".join(f"{k}: {v}" for k, v in governed) + ")"
            blocked.append(Blocked(c.name, BlockKind.BLOCKED, message))
            continue
        after = sum(nc.price for nc in result.node_claims)
        command = Command(
            Reason.DRIFTED, "drift", (c.name,), result.node_claims, moves_of(result), c.price or 0.0, after
        )
        why = refused(command, [c])
        again = rerouted() if why is not None else None
        if again is not None:  # the replacements under the ceilings / limits, as the provisioner would make them
            second = again.run([c])
            if not second.unschedulable:
                price = sum(nc.price for nc in second.node_claims)
                other = Command(
                    Reason.DRIFTED, "drift", (c.name,), second.node_claims, moves_of(second), c.price or 0.0, price
                )
                if refused(other, [c]) is None:
                    command, why = other, None
        if why is not None:
            blocked.append(Blocked(c.name, BlockKind.BLOCKED, why))
            continue
        evaluated(Reason.DRIFTED, "", len(drifted))
        return done(command)
    evaluated(Reason.DRIFTED, "", len(drifted))

    # 3. multi-node and 4. single-node consolidation (best savings per disruption first)
    eligible: list[Candidate] = []
    for c in usable:
        if c.static:  # static NodePools are never consolidated
            continue
        why = unconsolidatable(c, catalog)
        if why is not None:
            blocked.append(Blocked(c.name, BlockKind.UNCONSOLIDATABLE, why))
        elif c.movable and _settled(c, now):  # empty nodes are emptiness's
            eligible.append(c)
    eligible = consolidation_order(eligible)
    in_budget = [c for c in eligible if budgets.left(c.pool_name, Reason.UNDERUTILIZED) > 0]
    out_of_budget = [c for c in eligible if budgets.left(c.pool_name, Reason.UNDERUTILIZED) <= 0]
    budgets.within(out_of_budget, Reason.UNDERUTILIZED, blocked)
    balanced = any(p.spec.disruption.consolidation_policy == BALANCED for p in snapshot.state.node_pools)
    totals = pool_totals(candidates) if balanced else None  # every node counts, blocked and deleting ones too

    def attempt(cs: Sequence[Candidate], method: str) -> Command | str:
        outcome = consolidate(cs, sim, settings, method, totals)
        why = refused(outcome, cs) if isinstance(outcome, Command) else None
        again = rerouted() if why is not None else None
        if again is not None:  # under the ceilings / limits, as the provisioner would make the replacements
            other = consolidate(cs, again, settings, method, totals)
            if isinstance(other, Command) and refused(other, cs) is None:
                return other
        return outcome if why is None else why

    multi = _multi_node(  # a batch takes no more nodes of a NodePool than its budget has left
        budgets.within(in_budget, Reason.UNDERUTILIZED, [])[: settings.multi_node_candidates],
        lambda cs: attempt(cs, "multi-node consolidation"),
    )
    evaluated(Reason.UNDERUTILIZED, "multi", len(eligible))
    if multi is not None:
        return done(multi)
    single: Command | None = None
    for c in interleave_pools(in_budget):  # one node per command: any node of a NodePool with budget left
        outcome = attempt([c], "single-node consolidation")
        if isinstance(outcome, Command):
            single = outcome
            break
        blocked.append(Blocked(c.name, BlockKind.UNCONSOLIDATABLE, outcome))
    evaluated(Reason.UNDERUTILIZED, "single", len(eligible))
    return done(single)


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


def _multi_node(
    candidates: Sequence[Candidate], attempt: Callable[[Sequence[Candidate]], Command | str]
) -> Command | None:
    """Binary search for the longest prefix (>= 2 nodes) of ``candidates`` that consolidates."""
    low, high = 2, len(candidates)
    best: Command | None = None
    while low <= high:
        mid = (low + high) // 2
        outcome = attempt(candidates[:mid])
        if isinstance(outcome, Command):
            best = outcome
            low = mid + 1
        else:
            high = mid - 1
    return best
