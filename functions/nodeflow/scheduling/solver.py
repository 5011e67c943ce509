"""The solver: pending pods in, NodeClaims to launch and placements out. Pure.

The shape follows Karpenter's scheduler: pods are tried, largest first, on existing nodes
(and NodeClaims still launching), then on NodeClaims opened earlier in this solve, then
on a new NodeClaim from the highest-weight NodePool that can take them. Three things are
different, for speed and cost:

* Identical pods (same requests, constraints and tolerations — e.g. a Deployment's
  replicas) are placed as a group: "how many of these fit here" is one division per
  resource, not one trial per pod.
* A new NodeClaim is sized for cost: among the instance types that fit, the one with
  the lowest price per pod of the group being placed decides how many pods it takes
  (so three small pods get one right-sized node, a thousand get efficient large ones).
* Later pods fill the room left on open NodeClaims only while that does not push the
  NodeClaim onto a pricier instance type; otherwise they open a NodeClaim of their own.
* At the end (plans of modest size), NodeClaims whose pods could go anywhere in their NodePool
  are packed again, CPU-heavy and memory-heavy pods together on shared nodes, and replaced
  only when that costs less (``repack``).

Every NodeClaim keeps all instance types that still fit its pods, cheapest first, so the
launcher can fall back when capacity is short.

NodeflowPolicies arrive as data (``nodeflow.plan.build_input``): ``PodInput.denied`` (NodePools a pod's namespace
may not create capacity in, or every NodePool when it requests an extended resource it may not), a NodePool paused
for provisioning (its ``error``), and ``SchedulingInput.ceilings`` / ``group_limits``. A denied NodePool gets no new
NodeClaim for the pod and the pod joins none opened in this solve (existing nodes and launching NodeClaims stay
usable). A NodeClaim that would take a $/hour ceiling (cluster, its NodePool, the namespaces of its pods by CPU
share) over its max is not made, so the pods try the next NodePool; a NodeClaim made under a ceiling keeps only
the instance types priced within what was left under it when it was made. Group limits are NodePool limits shared
by the group. NodeClaims under a ceiling or group limit are left out of the final merge and re-packing passes
(as under NodePool limits; all are, under a namespace ceiling). Without policies none of this runs, and a ceiling
or group limit the plan could not cross (even launched at its dearest offerings and largest types) is not bound
at all, nor is a NodePool's ``spec.limits``: the solver runs first without them and binds only those its plan
could cross (``bounds``, ``_settled``), so a roomy policy or limit leaves the plan as it is without it. When a
bound limit refuses a NodeClaim and pods are left pending, the limited NodePools are packed again as Karpenter
packs them and the plan placing more pods is kept (``_denser``).

The solver holds the pieces, split the way Karpenter's scheduler is:

* ``groups``: pending pods grouped and ordered (Karpenter's queue);
* ``nodepools``: the NodePools with their instance types, daemonset overhead and limits;
* ``existing``: existing and in-flight nodes (Karpenter's ExistingNode);
* ``packing``: NodeClaims being filled (Karpenter's NodeClaim), within
  * ``limits``: NodePool and NodeflowPolicy group limits (Karpenter's remaining resources, subtractMax),
  * ``ceilings``: NodeflowPolicy $/hour ceilings (cluster, NodePool, namespace),
  * ``reservation_manager``: capacity reservations (Karpenter's ReservationManager);
* ``bounds``: which of those limits and ceilings bind a solve at all;
* ``repack``: the last re-packing pass;
* ``topology``: topology counts and domains, spread and pod (anti-)affinity (Karpenter's
  Topology and TopologyGroup);
* ``pricing``: offerings and instance-type filtering;
* ``preferences``: relaxing preferences (Karpenter's Preferences).

Must not touch: how NodeClaims are packed (``packing``), topology bookkeeping (``topology``); AWS, Kubernetes, the
clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeflow.api import labels as wk
from nodeflow.api.quantity import format_milli
from nodeflow.scheduling import bounds
from nodeflow.scheduling.existing import make_node, node_order, place_on_nodes, ports_conflict
from nodeflow.scheduling.groups import Group, group_pods, regroup
from nodeflow.scheduling.min_values import min_values_violation
from nodeflow.scheduling.nodeclaim import MAX_INSTANCE_TYPES, Claim
from nodeflow.scheduling.nodepools import NO_NODEPOOL, Reasons, all_pools, daemon_excluded, make_pool
from nodeflow.scheduling.packing import Packer
from nodeflow.scheduling.pricing import PRICE_EPSILON, Pricer, type_matches
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.topology import UNBOUNDED, HostCaps, Topology, pinned, water_fill
from nodeflow.scheduling.types import (
    ExistingPlacement,
    NodeClaimPlan,
    PodExplanation,
    SchedulingInput,
    SchedulingResult,
    UnschedulablePod,
)

# ``MAX_INSTANCE_TYPES``, ``NO_NODEPOOL``, ``min_values_violation``, ``ports_conflict``,
# ``type_matches`` and ``water_fill`` live in the modules above; they stay importable from here.
__all__ = [
    "MAX_INSTANCE_TYPES",
    "NO_NODEPOOL",
    "explain",
    "explain_daemon",
    "explain_pods",
    "min_values_violation",
    "ports_conflict",
    "solve",
    "solve_packed",
    "type_matches",
    "water_fill",
]


class _Solver:
    def __init__(
        self, inp: SchedulingInput, dense_limits: bool = False, shared: _Solver | None = None, dense_all: bool = False
    ) -> None:
        """``shared``: a solve of the same pods and NodePools under other bounds, whose prices and candidate
        instance types this one reuses. ``dense_all``: every NodePool packed as Karpenter packs (``solve_packed``)."""
        self.inp = inp
        self.pricer: Pricer = shared.pricer if shared is not None else Pricer()
        self.pools = [make_pool(p, inp, self.pricer) for p in sorted(inp.nodepools, key=lambda p: (-p.weight, p.name))]
        self.nodes = [make_node(n, inp) for n in sorted(inp.nodes, key=node_order)]
        self.claims: list[Claim] = []
        self.topology = Topology(self.pools, self.nodes, self.claims, inp.pods)
        self.packer: Packer = Packer(
            inp,
            self.pools,
            self.pricer,
            self.topology,
            self.claims,
            dense_limits,
            shared.packer if shared is not None else None,
            dense_all,
        )
        self.unschedulable: list[UnschedulablePod] = []
        self.group_of: dict[str, Group] = {}  # pod key -> the group it was last tried in
        self._placed: dict[str, str] | None = None  # pod key -> where it was placed (``_where``)
        self._unschedulable: tuple[SchedulingResult, dict[str, UnschedulablePod]] | None = None  # by pod key

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> SchedulingResult:
        """Place every group; groups that fail are retried once (pod affinity may target pods
        placed later), then with one preference relaxed at a time, as Karpenter does. A group whose
        required spreads count the pods of a group that failed waits for that group's next try
        (spreads are checked where their pods end up: see ``groups.group_pods``)."""
        queue = group_pods(self.inp.pods, self.inp.preference_policy == "Ignore", self.inp)
        for group in queue:
            for pod in group.pods:
                self.group_of[pod.key] = group
        retried: set[int] = set()
        while queue:
            failed: list[tuple[Group, list[str], Reasons]] = []
            # Pods other pods' spreads count that are tried again later: those spreads' carriers wait for them.
            again: list[Group] = []
            deferred: list[Group] = []
            for group in queue:
                if again and _counts_any(group, again):
                    deferred.append(group)
                    again.append(group)
                    continue
                remaining, reasons = self._place_group(group, [p.key for p in group.pods])
                if remaining:
                    failed.append((group, remaining, reasons))
                    if self.topology.counted(group):
                        again.append(group)
            queue = []
            for group, remaining, reasons in failed:
                left = [p for p in group.pods if p.key in set(remaining)]
                if group.constraints.affinity and group.uid not in retried:
                    retry = regroup(group, left, group.preferences)
                    retried.add(retry.uid)
                    queue.append(retry)
                    self.group_of.update((p.key, retry) for p in left)
                    continue
                relaxed = group.preferences.relax()
                if relaxed is not None and group.error is None:
                    regrouped = regroup(group, left, relaxed[0])
                    queue.append(regrouped)
                    self.group_of.update((p.key, regrouped) for p in left)
                    continue
                for key in remaining:
                    self.unschedulable.append(UnschedulablePod(key, reasons))
            queue += deferred
        self.unschedulable.sort(key=lambda u: u.pod)
        self.packer.merge_claims()
        return self._result()

    def _place_group(self, group: Group, pending: list[str]) -> tuple[list[str], Reasons]:
        if group.error is not None:
            return pending, all_pools(self.pools, group.error)
        return self.topology.split_group(group, pending, self._place)

    def _place(
        self, group: Group, pending: list[str], extra: Requirements, blocked: set[int]
    ) -> tuple[list[str], Reasons]:
        """Place pods of the group (pinned by ``extra``, kept off ``blocked``): existing nodes
        first, then open NodeClaims, then new ones; hostname rules limit each node."""
        alts = pinned(group.requirements, extra)
        if not alts:
            why = f"its node affinity and pod topology rules leave no domain of {', '.join(sorted(extra))}"
            return pending, all_pools(self.pools, why)
        caps, affinity = self.topology.host_caps(group)
        allowed, self_affinity, refusal = self.topology.hostname_affinity(group, affinity)
        if refusal is not None:
            return pending, all_pools(self.pools, refusal)
        if self_affinity:
            return self._place_together(group, pending, alts, caps, blocked)
        packer = self.packer
        pending = place_on_nodes(self.nodes, self.topology, group, pending, alts, caps, blocked, allowed)
        if pending:
            pending = packer.place_on_claims(group, pending, alts, caps, blocked, allowed)
        reasons: Reasons = {}
        if allowed is not None and pending:
            return pending, all_pools(self.pools, self.topology.hostname_affinity_full(group))
        fresh = self.topology.cap(-1, caps)
        grow = not caps and not group.host_ports
        # A hostname spread of maxSkew > 1 packs up to maxSkew pods on each new node (as Karpenter
        # fills a new NodeClaim), whatever count would be cheapest per pod.
        pack = 1 < fresh < UNBOUNDED
        while pending and fresh > 0:
            if grow and packer.few_nodes(group, alts, len(pending)):
                # Pods for a few nodes at most: first see whether growing partly filled NodeClaims
                # is the cheaper home for them. (Large groups fill efficient nodes of their own.)
                grow = False
                pending = packer.grow_claims(group, pending, alts, blocked)
                continue
            share = pending[:fresh] if pack else pending
            outcome = packer.new_claim(group, share, alts, fresh, together=pack)
            if isinstance(outcome, dict):
                reasons = outcome
                break
            pending = pending[outcome:]
        if pending and fresh == 0 and not reasons:
            reasons = all_pools(self.pools, f"pod anti-affinity or spread on {wk.LABEL_HOSTNAME} leaves no node for it")
        return pending, reasons

    def _place_together(
        self, group: Group, pending: list[str], alts: tuple[Requirements, ...], caps: HostCaps, blocked: set[int]
    ) -> tuple[list[str], Reasons]:
        """Place pods with required hostname affinity to each other, none of which is placed yet: all on one node.
        kube-scheduler binds the first of them anywhere and every later one only next to it (as Karpenter's
        TopologyGroup.nextDomainAffinity lets a self-affine group open a hostname only while it has no pod), so a
        pod put on a second node would stay pending there. The first node that holds them all is used: an existing
        node, an open NodeClaim, else a new NodeClaim sized for as many as one node holds; when no new NodeClaim can
        be made, the first node or NodeClaim with room for some. The rest are unschedulable."""
        count = len(pending)
        left = self._on_one_target(group, pending, alts, caps, blocked, count)
        if len(left) == count:
            fresh = self.topology.cap(-1, caps)
            outcome = self.packer.new_claim(group, pending, alts, fresh, together=True) if fresh > 0 else {}
            if isinstance(outcome, int):
                left = pending[outcome:]
            else:
                left = self._on_one_target(group, pending, alts, caps, blocked, 1)
                if len(left) == count:
                    why = f"pod anti-affinity or spread on {wk.LABEL_HOSTNAME} leaves no node for it"
                    return pending, outcome or all_pools(self.pools, why)
        if not left:
            return left, {}
        why = (
            f"pod affinity on {wk.LABEL_HOSTNAME}: the pods select each other: all {count} must share one node, "
            f"and the one they were given holds {count - len(left)}"
        )
        return left, all_pools(self.pools, why)

    def _on_one_target(
        self,
        group: Group,
        pending: list[str],
        alts: tuple[Requirements, ...],
        caps: HostCaps,
        blocked: set[int],
        least: int,
    ) -> list[str]:
        """The group's pods on the first existing node, else the first open NodeClaim, that takes at least
        ``least`` of them; the rest are returned."""
        left = place_on_nodes(self.nodes, self.topology, group, pending, alts, caps, blocked, None, least)
        if len(left) < len(pending):
            return left
        return self.packer.place_on_claims(group, pending, alts, caps, blocked, None, least)

    # -- explanations ------------------------------------------------------------------------------
    def _where(self, key: str) -> str | None:
        """Where a pod was placed: an existing node's name, "nodeclaim-N", or None (indexed once, after ``run``)."""
        if self._placed is None:
            placed: dict[str, str] = {}
            for claim in reversed(self.claims):
                placed.update(dict.fromkeys(claim.pods, f"nodeclaim-{claim.index}"))
            for node in reversed(self.nodes):  # a node before a NodeClaim, the first of each: as found in order
                placed.update(dict.fromkeys(node.placed, node.input.name))
            self._placed = placed
        return self._placed.get(key)

    def explain(self, key: str, result: SchedulingResult) -> PodExplanation:
        """Per NodePool, where the pod goes or why it cannot go there (after ``run``)."""
        group = self.group_of[key]
        where = self._where(key)
        per_pool: dict[str, str] = {}
        if self._unschedulable is None or self._unschedulable[0] is not result:
            self._unschedulable = (result, {u.pod: u for u in result.unschedulable})
        unschedulable = self._unschedulable[1].get(key)
        chosen: NodeClaimPlan | None = None
        if where is not None and where.startswith("nodeclaim-") and where not in {n.input.name for n in self.nodes}:
            chosen = result.node_claims[int(where.removeprefix("nodeclaim-"))]
        for pool in self.pools:
            name = pool.input.name
            if chosen is not None and chosen.nodepool == name:
                others = len(chosen.pods) - 1
                per_pool[name] = (
                    f"new NodeClaim {where}: {chosen.instance_types[0]} (+{len(chosen.instance_types) - 1} other "
                    f"types), {chosen.capacity_type}, zones {','.join(chosen.zones)}, ${chosen.price:.4f}/hour, "
                    f"shared with {others} other pod(s)"
                ) + self._reservation_note(where)
                continue
            if unschedulable is not None and name in unschedulable.reasons:
                per_pool[name] = unschedulable.reasons[name]
                continue
            if group.denied and name in group.denied:
                per_pool[name] = group.denied[name]
                continue
            passed = self.packer.passed_over.get(group.uid)
            if passed and name in passed:
                per_pool[name] = passed[name]
                continue
            why = [self.packer.candidates(pool, group, alt) for alt in group.requirements]
            reasons = [w for w in why if isinstance(w, str)]
            if len(reasons) < len(why):
                if chosen is not None:
                    per_pool[name] = (
                        f"could host it, but NodePool {chosen.nodepool} comes first (higher weight, or an open "
                        f"NodeClaim with room); this one has weight {pool.input.weight}"
                    )
                else:
                    per_pool[name] = f"could host it, but existing node {where} has room for it"
            else:
                per_pool[name] = "; ".join(reasons)
        if not self.pools:
            per_pool[NO_NODEPOOL] = "no NodePool is defined"
        placement = None
        if where is not None:
            placement = f"new NodeClaim {where} (NodePool {chosen.nodepool})" if chosen else f"existing node {where}"
        return PodExplanation(key, placement, per_pool)

    def _reservation_note(self, where: str | None) -> str:
        """What a NodeClaim's capacity reservation (or the lack of one left) adds to its explanation."""
        claim = next((c for c in self.claims if f"nodeclaim-{c.index}" == where), None)
        if claim is None:
            return ""
        if claim.reservation:
            return f"; launched into capacity reservation {claim.reservation}"
        note = self.packer.reservations.notes.get(id(claim))
        return f"; {note}, so not reserved" if note else ""

    # -- output --------------------------------------------------------------------------------
    def _result(self) -> SchedulingResult:
        plans = tuple(self.packer.plan(c) for c in self.claims)
        existing = tuple(
            ExistingPlacement(n.input.name, tuple(n.placed), n.input.in_flight) for n in self.nodes if n.placed
        )
        return SchedulingResult(plans, existing, tuple(self.unschedulable))


def _counts_any(group: Group, others: list[Group]) -> bool:
    """Does a required topology spread of the group count the pods of one of ``others``?"""
    selectors = [s.selector for s in group.constraints.spread if not s.schedule_anyway]
    return any(
        other is not group
        and other.namespace == group.namespace
        and any(sel.matches(other.labels) for sel in selectors)
        for other in others
    )


def solve(inp: SchedulingInput) -> SchedulingResult:
    """Plan NodeClaims for the pending pods of ``inp``. Pure and deterministic."""
    return _settled(inp)[1]


def solve_packed(inp: SchedulingInput) -> SchedulingResult:
    """Plan NodeClaims for the pending pods of ``inp`` as Karpenter's scheduler packs them: a new NodeClaim keeps
    every instance type that holds its pods, takes as many as the largest holds, and later pods join it on any of
    its types, with no cost pass after (merge, re-pack). Fewer, larger NodeClaims than ``solve``'s, which sizes
    them for cost: consolidation asks for it when ``solve`` needs several new nodes where it may make one
    (``nodeflow.disruption.consolidation``). Every bound (limits, ceilings) applies. Pure and deterministic."""
    return _Solver(inp, dense_all=True).run()


def explain(inp: SchedulingInput, pod_key: str) -> tuple[SchedulingResult, PodExplanation]:
    """Solve, then say for one pending pod, per NodePool, where it goes or why not."""
    result, (why,) = explain_pods(inp, (pod_key,))
    return result, why


def explain_pods(inp: SchedulingInput, pod_keys: Sequence[str]) -> tuple[SchedulingResult, tuple[PodExplanation, ...]]:
    """Solve once, then explain each of ``pod_keys`` (pending pods of ``inp``; KeyError naming the first that is
    not one)."""
    pending = {p.key for p in inp.pods}
    missing = next((k for k in pod_keys if k not in pending), None)
    if missing is not None:
        raise KeyError(missing)
    solver, result = _settled(inp)
    return result, tuple(solver.explain(key, result) for key in pod_keys)


def explain_daemon(inp: SchedulingInput, pod_key: str) -> PodExplanation:
    """Per NodePool, whether the DaemonSet pod ``pod_key`` (one of ``inp.daemon_pods``; KeyError when not) runs on
    its new nodes, with the overhead it adds to each, or why not. DaemonSet pods are never pending pods to plan:
    they follow the nodes."""
    daemon = next((d for d in inp.daemon_pods if d.key == pod_key), None)
    if daemon is None:
        raise KeyError(pod_key)
    pricer = Pricer()
    per_pool: dict[str, str] = {}
    for np in inp.nodepools:
        pool = make_pool(np, inp, pricer)
        why = np.error or daemon_excluded(daemon, pool.requirements, np.taints)
        if why is None:
            overhead = ", ".join(f"{k} {format_milli(v, k)}" for k, v in sorted(daemon.requests.items()) if k != "pods")
            why = f"runs on its nodes: {overhead or 'no requests'} of overhead on each"
        else:
            why = f"does not run on its nodes: {why}"
        per_pool[np.name] = why
    return PodExplanation(pod_key, None, per_pool or {NO_NODEPOOL: "no NodePool is defined"})


def _settled(inp: SchedulingInput) -> tuple[_Solver, SchedulingResult]:
    """The solve, under its upper bounds (NodePool limits, NodeflowPolicy ceilings and group limits) only where
    they bind (``bounds``): first with none of them but those with nothing left, then bound to those that plan could
    cross, and if that plan could cross another, to all of them (at most three runs). When a limit then refused a
    NodeClaim and pods are left pending, the limited NodePools are packed again as Karpenter packs them
    (``_denser``)."""
    bound = bounds.every(inp)
    if not bound:
        solver = _Solver(inp)
        return solver, solver.run()
    keep = bounds.spent(inp)  # nothing left under these: bound from the first run
    previous: _Solver | None = None
    for attempt in range(3):
        if attempt == 2:
            keep = bound
        solver = previous = _Solver(bounds.without(inp, keep), shared=previous)
        result = solver.run()
        if attempt == 2:
            break
        more = bounds.could_cross(result, inp, skip=keep)
        if not more:
            break
        keep = keep.union(more, inp)
    if solver.packer.limits.refusals and result.unschedulable:
        return _denser(inp, keep, solver, result)
    return solver, result


def _denser(
    inp: SchedulingInput, keep: bounds.Bounds, solver: _Solver, result: SchedulingResult
) -> tuple[_Solver, SchedulingResult]:
    """The plan with limited NodePools packed as Karpenter packs them (``Packer.dense_limits``: each new NodeClaim
    charged its largest type, later pods joining it on any of them), kept when it leaves fewer pods pending (as
    many: when it costs less). Sized for cost, small NodeClaims of different pods can spend a limit that one larger
    node would hold them all within (a cpu=8 NodePool: four 2-vCPU NodeClaims, a pod pending, where one t4g.xlarge
    holds all 14); charged at its largest type, one early NodeClaim can spend a limit that small ones would share.
    Bound as ``keep``, else (a plan that could cross another bound) by all of them."""
    dense = _Solver(bounds.without(inp, keep), dense_limits=True, shared=solver)
    found = dense.run()
    if bounds.could_cross(found, inp, skip=keep):
        dense = _Solver(inp, dense_limits=True, shared=solver)
        found = dense.run()
    pending, now = len(found.unschedulable), len(result.unschedulable)
    if pending < now or (pending == now and found.total_price < result.total_price - PRICE_EPSILON):
        return dense, found
    return solver, result
