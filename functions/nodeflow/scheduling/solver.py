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
or group limit the plan could not cross (even launched at its dearest offerings) is not bound at all: the solver
runs first without them and binds only those its plan could cross (``_settled``), so a roomy policy leaves the
plan as it is without it.

The solver holds the pieces, split the way Karpenter's scheduler is:

* ``groups``: pending pods grouped and ordered (Karpenter's queue);
* ``nodepools``: the NodePools with their instance types, daemonset overhead and limits;
* ``existing``: existing and in-flight nodes (Karpenter's ExistingNode);
* ``packing``: NodeClaims being filled (Karpenter's NodeClaim);
* ``repack``: the last re-packing pass;
* ``topology``: topology counts and domains, spread and pod (anti-)affinity (Karpenter's
  Topology and TopologyGroup);
* ``pricing``: offerings and instance-type filtering;
* ``preferences``: relaxing preferences (Karpenter's Preferences).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from nodeflow.api import labels as wk
from nodeflow.scheduling.existing import make_node, node_order, place_on_nodes, ports_conflict
from nodeflow.scheduling.groups import Group, group_pods, regroup
from nodeflow.scheduling.nodepools import NO_NODEPOOL, Reasons, all_pools, make_pool
from nodeflow.scheduling.packing import MAX_INSTANCE_TYPES, Claim, Packer, min_values_violation, split_shares
from nodeflow.scheduling.pricing import PRICE_EPSILON, Pricer, type_matches
from nodeflow.scheduling.requirements import Requirements
from nodeflow.scheduling.topology import UNBOUNDED, Topology, water_fill
from nodeflow.scheduling.types import (
    CeilingInput,
    ExistingPlacement,
    GroupLimitInput,
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
    "could_cross",
    "explain",
    "min_values_violation",
    "ports_conflict",
    "solve",
    "type_matches",
    "water_fill",
]


class _Solver:
    def __init__(self, inp: SchedulingInput) -> None:
        self.inp = inp
        self.pricer = Pricer()
        self.pools = [make_pool(p, inp, self.pricer) for p in sorted(inp.nodepools, key=lambda p: (-p.weight, p.name))]
        self.nodes = [make_node(n, inp) for n in sorted(inp.nodes, key=node_order)]
        self.claims: list[Claim] = []
        self.topology = Topology(self.pools, self.nodes, self.claims, inp.pods)
        self.packer = Packer(inp, self.pools, self.pricer, self.topology, self.claims)
        self.unschedulable: list[UnschedulablePod] = []
        self.group_of: dict[str, Group] = {}  # pod key -> the group it was last tried in

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> SchedulingResult:
        """Place every group; groups that fail are retried once (pod affinity may target pods
        placed later), then with one preference relaxed at a time, as Karpenter does."""
        queue = group_pods(self.inp.pods, self.inp.preference_policy == "Ignore", self.inp)
        for group in queue:
            for pod in group.pods:
                self.group_of[pod.key] = group
        retried: set[int] = set()
        while queue:
            failed: list[tuple[Group, list[str], Reasons]] = []
            for group in queue:
                remaining, reasons = self._place_group(group, [p.key for p in group.pods])
                if remaining:
                    failed.append((group, remaining, reasons))
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
        alts = tuple(alt.add(extra) for alt in group.requirements) if len(extra) else group.requirements
        caps, affinity = self.topology.host_caps(group)
        allowed, self_affinity, refusal = self.topology.hostname_affinity(group, affinity)
        if refusal is not None:
            return pending, all_pools(self.pools, refusal)
        packer = self.packer
        pending = place_on_nodes(self.nodes, self.topology, group, pending, alts, caps, blocked, allowed)
        if pending:
            pending = packer.place_on_claims(group, pending, alts, caps, blocked, allowed)
        reasons: Reasons = {}
        if allowed is not None and pending:
            return pending, all_pools(
                self.pools, f"pod affinity on {wk.LABEL_HOSTNAME}: the nodes with matching pods have no room left"
            )
        fresh = self.topology.cap(-1, caps)
        grow = not self_affinity and not caps and not group.host_ports
        # A hostname spread of maxSkew > 1 packs up to maxSkew pods on each new node (as Karpenter
        # fills a new NodeClaim), whatever count would be cheapest per pod.
        pack = 1 < fresh < UNBOUNDED and not self_affinity
        while pending and fresh > 0:
            if grow and packer.few_nodes(group, alts, len(pending)):
                # Pods for a few nodes at most: first see whether growing partly filled NodeClaims
                # is the cheaper home for them. (Large groups fill efficient nodes of their own.)
                grow = False
                pending = packer.grow_claims(group, pending, alts, blocked)
                continue
            share = pending[:fresh] if pack else pending
            outcome = packer.new_claim(group, share, alts, fresh, together=self_affinity or pack)
            if isinstance(outcome, dict):
                reasons = outcome
                break
            pending = pending[outcome:]
            if self_affinity:
                if pending:
                    reasons = all_pools(
                        self.pools,
                        f"pod affinity on {wk.LABEL_HOSTNAME}: the pods must share one node and do not fit on one",
                    )
                break
        if pending and fresh == 0 and not reasons:
            reasons = all_pools(self.pools, f"pod anti-affinity or spread on {wk.LABEL_HOSTNAME} leaves no node for it")
        return pending, reasons

    # -- explanations ------------------------------------------------------------------------------
    def _where(self, key: str) -> str | None:
        """Where a pod was placed: an existing node's name, "nodeclaim-N", or None."""
        for node in self.nodes:
            if key in node.placed:
                return node.input.name
        for claim in self.claims:
            if key in claim.pods:
                return f"nodeclaim-{claim.index}"
        return None

    def explain(self, key: str, result: SchedulingResult) -> PodExplanation:
        """Per NodePool, where the pod goes or why it cannot go there (after ``run``)."""
        group = self.group_of[key]
        where = self._where(key)
        per_pool: dict[str, str] = {}
        unschedulable = next((u for u in result.unschedulable if u.pod == key), None)
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
        note = self.packer.fallback_notes.get(id(claim))
        return f"; {note}, so not reserved" if note else ""

    # -- output --------------------------------------------------------------------------------
    def _result(self) -> SchedulingResult:
        plans = tuple(self.packer.plan(c) for c in self.claims)
        existing = tuple(
            ExistingPlacement(n.input.name, tuple(n.placed), n.input.in_flight) for n in self.nodes if n.placed
        )
        return SchedulingResult(plans, existing, tuple(self.unschedulable))


def solve(inp: SchedulingInput) -> SchedulingResult:
    """Plan NodeClaims for the pending pods of ``inp``. Pure and deterministic."""
    return _settled(inp)[1]


def explain(inp: SchedulingInput, pod_key: str) -> tuple[SchedulingResult, PodExplanation]:
    """Solve, then say for one pending pod, per NodePool, where it goes or why not."""
    if not any(p.key == pod_key for p in inp.pods):
        raise KeyError(pod_key)
    solver, result = _settled(inp)
    return result, solver.explain(pod_key, result)


def _settled(inp: SchedulingInput) -> tuple[_Solver, SchedulingResult]:
    """The solve, under NodeflowPolicy ceilings and group limits only where they bind.

    A ceiling or group limit the plan stays under even if every NodeClaim launched as its dearest offering and
    largest type changes nothing but the cost of checking it, and binding the solver to it would (NodeClaims
    under one are kept out of the merge and re-packing passes; a namespace ceiling splits groups by namespace).
    So the solver first runs without them; those that plan could cross are given to it and it runs again; if
    that plan could cross another one, the third run has them all (at most three runs: a plan's cost bounded)."""
    if not (inp.ceilings or inp.group_limits):
        solver = _Solver(inp)
        return solver, solver.run()
    ceilings: tuple[CeilingInput, ...] = ()
    groups: tuple[GroupLimitInput, ...] = ()
    for attempt in range(3):
        if attempt == 2:
            ceilings, groups = inp.ceilings, inp.group_limits
        trial = dataclasses.replace(inp, ceilings=ceilings, group_limits=groups)
        solver = _Solver(trial)
        result = solver.run()
        if attempt == 2:
            break
        more_ceilings, more_groups = could_cross(result, inp, skip=(ceilings, groups))
        if not more_ceilings and not more_groups:
            break
        ceilings = tuple(c for c in inp.ceilings if c in ceilings or c in more_ceilings)
        groups = tuple(g for g in inp.group_limits if g in groups or g in more_groups)
    return solver, result


def could_cross(
    result: SchedulingResult,
    inp: SchedulingInput,
    skip: tuple[Sequence[CeilingInput], Sequence[GroupLimitInput]] = ((), ()),
) -> tuple[tuple[CeilingInput, ...], tuple[GroupLimitInput, ...]]:
    """The ceilings and group limits of ``inp`` (but ``skip``'s) that ``result``'s new NodeClaims could take over
    their maximum, each NodeClaim counted at the dearest available offering of its instance types and, for group
    limits, the most of each resource any of its instance types has. A namespace's share of a NodeClaim is its
    pods' share of the CPU requests (per pod when none requests CPU), as the solver charges it."""
    # (NodePool, type) -> its dearest available offering and its capacity ("nodes": 1000, as limits count a node)
    dearest_of: dict[tuple[str, str], float] = {}
    capacity_of: dict[tuple[str, str], Mapping[str, int]] = {}
    for p in inp.nodepools:
        for it in p.instance_types:
            dearest_of[p.name, it.name] = max((o.price for o in it.offerings if o.available), default=0.0)
            capacity_of[p.name, it.name] = it.capacity
    namespaced = any(c.scope == "namespace" for c in inp.ceilings)
    cpu = {p.key: p.requests.get("cpu", 0) for p in inp.pods} if namespaced else {}
    cluster = 0.0
    by_pool: dict[str, float] = {}
    by_namespace: dict[str, float] = {}
    held: dict[str, dict[str, int]] = {}  # NodePool -> the most its NodeClaims could hold
    for nc in result.node_claims:
        dearest = max([nc.price, *(dearest_of.get((nc.nodepool, name), 0.0) for name in nc.instance_types)])
        cluster += dearest
        by_pool[nc.nodepool] = by_pool.get(nc.nodepool, 0.0) + dearest
        if namespaced:
            shares: dict[str, list[int]] = {}
            for key in nc.pods:
                entry = shares.setdefault(key.split("/", 1)[0], [0, 0])
                entry[0] += cpu.get(key, 0)
                entry[1] += 1
            for ns, share in split_shares(shares).items():
                by_namespace[ns] = by_namespace.get(ns, 0.0) + dearest * share
        if inp.group_limits:
            most: dict[str, int] = {"nodes": 1000}
            for name in nc.instance_types:
                for k, v in capacity_of.get((nc.nodepool, name), {}).items():
                    if v > most.get(k, 0):
                        most[k] = v
            pool = held.setdefault(nc.nodepool, {})
            for k, v in most.items():
                pool[k] = pool.get(k, 0) + v
    skip_ceilings, skip_groups = skip
    crossed = []
    for c in inp.ceilings:
        if c in skip_ceilings:
            continue
        table = {"cluster": {"": cluster}, "nodePool": by_pool}.get(c.scope, by_namespace)
        if c.in_use + table.get(c.name, 0.0) > c.max_per_hour + PRICE_EPSILON:
            crossed.append(c)
    exceeded = []
    for g in inp.group_limits:
        if g in skip_groups:
            continue
        for k, limit in g.limits.items():
            added = sum(held.get(pool, {}).get(k, 0) for pool in g.nodepools)
            if added and g.in_use.get(k, 0) + added > limit:
                exceeded.append(g)
                break
    return tuple(crossed), tuple(exceeded)
