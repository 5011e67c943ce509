"""NodeflowPolicies in the disruption decisions (``nodeflow.governance.policy`` evaluates them). Pure: the policies
are the snapshot's, the time is the round's ``now``.

- Pause windows with ``disruption: true``: no VOLUNTARY disruption of a node of a paused NodePool (emptiness,
  drift, static drift, consolidation, Balanced, static scale-down); each such node is reported blocked (a
  DisruptionBlocked event) with the window's message ("disruption paused for NodePool gpu by policy freeze:
  window ... until ..."). Forceful disruption goes on: expiration, interruption, node repair, capacity-block
  expiry.
- Replacements are new capacity: in the simulation of a drift or consolidation, a moving pod gets no NodeClaim in
  a NodePool its namespace may not use (``nodePoolAccess``), nor anywhere when it requests an extended resource its
  namespace may not (``resourceAccess``): ``denials``, the provisioner's rule (``PodInput.denied``); a NodePool
  whose provisioning is paused makes no replacement (``nodeflow.plan.build_input`` at the round's time).
- A command's replacements may not push a $/hour ceiling (cluster, NodePool, namespace) or a group limit over its
  maximum, counting the candidates as freed: after = in use - candidates + replacements (``check``). A ceiling or
  limit blocks only when the move RAISES what it counts: a move that lowers it is never blocked, even when it was
  over already.
- Such a command is simulated again with the solver given the ceilings and group limits that could bind (``limits``:
  those whose room, the candidates counted as freed, is less than the moving pods could need), so the replacements
  go to the next NodePool as the provisioner's would (``nodeflow.disruption.method.Round.validate``); ``check``
  stays the guard.
  Only a refused command is simulated again: decisions that no ceiling or limit refuses are the same as without.

Spend in use is ``nodeflow.governance.spend.cluster_spend`` (the provisioner's): nodes not going away and NodeClaims
still launching, shared among namespaces by CPU request; the candidates are freed at what it counts them for.

Must not touch: what a policy allows (``nodeflow.governance.policy`` evaluates it); the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import CatalogData
from nodeflow.cluster import ClusterState
from nodeflow.constraints import namespace_label_map
from nodeflow.disruption.candidates import Candidate
from nodeflow.disruption.model import Command
from nodeflow.governance.policy import Governance, NodeCost, Spend, spend_of
from nodeflow.governance.spend import cluster_spend
from nodeflow.plan import with_denials  # with_denials: the provisioner's rule, one for both
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.types import CeilingInput, GroupLimitInput, NodeClaimPlan, PodInput, SchedulingInput

__all__ = ["RoundPolicy"]

_EPSILON = 1e-9


def _pods(c: Candidate) -> tuple[tuple[str, int], ...]:
    """(namespace, CPU request in millicores) of the non-DaemonSet pods of ``c``."""
    return tuple((p.metadata.namespace or "default", p.spec.effective_requests().get("cpu", 0)) for p in c.movable)


def _cost(c: Candidate) -> NodeCost:
    return NodeCost(c.pool_name, c.price or 0.0, _pods(c))


@dataclass(slots=True)
class RoundPolicy:
    """The policies as one round applies them (``RoundPolicy.of``; None when no policy restricts anything)."""

    gov: Governance
    now: datetime
    state: ClusterState
    candidates: Sequence[Candidate]
    catalog: CatalogData
    _paused: dict[str, str | None] = field(default_factory=dict)
    _spend: tuple[Spend, dict[str, NodeCost]] | None = None
    _usage: dict[str, dict[str, int]] | None = None
    _most: dict[str, tuple[float, dict[str, int]]] | None = None

    @staticmethod
    def of(
        state: ClusterState, candidates: Sequence[Candidate], catalog: CatalogData, now: datetime
    ) -> RoundPolicy | None:
        if not state.policies:
            return None
        gov = Governance.from_policies(state.policies)
        return None if gov.empty else RoundPolicy(gov, now, state, candidates, catalog)

    # -- pauses -----------------------------------------------------------------------------------------
    def paused(self, nodepool: str) -> str | None:
        """Why no node of ``nodepool`` may be disrupted voluntarily now (None: it may)."""
        if nodepool not in self._paused:
            self._paused[nodepool] = self.gov.disruption_pause(nodepool, self.now)
        return self._paused[nodepool]

    # -- access -----------------------------------------------------------------------------------------
    def denials(self, pools: Sequence[str]) -> Callable[[Sequence[PodInput]], Sequence[PodInput]] | None:
        """What gives moving pods the NodePools of ``pools`` they may not get new capacity in (``PodInput.denied``,
        as ``nodeflow.plan`` gives pending pods theirs: NodePool access, and extended resources their namespace may
        not request); None when no policy restricts access."""
        if not (self.gov.pool_rules or self.gov.resource_rules):
            return None
        labels = namespace_label_map(self.state.namespaces, {p.namespace for p in self.state.pods})
        gov, names = self.gov, list(pools)
        return lambda pods: with_denials(pods, gov, names, labels)

    # -- ceilings and group limits --------------------------------------------------------------------------
    def _in_use(self) -> tuple[Spend, dict[str, NodeCost]]:
        """The spend in use and what each node counts for in it (by name)."""
        if self._spend is None:
            spend, costs = cluster_spend(self.state, self.catalog)
            self._spend = (spend, {c.name: c for c in costs})
        return self._spend

    def _capacity(self, base: SchedulingInput) -> dict[str, dict[str, int]]:
        """NodePool -> its nodes' and launching NodeClaims' capacity (milli; "nodes": 1000 a node)."""
        if self._usage is None:
            live = {c.name for c in self.candidates if not c.deleting}
            usage: dict[str, dict[str, int]] = {}
            for n in base.nodes:
                if n.nodepool is None or not (n.in_flight or n.name in live):
                    continue
                mine = usage.setdefault(n.nodepool, {})
                for k, v in {**n.capacity, "nodes": 1000}.items():
                    mine[k] = mine.get(k, 0) + v
            self._usage = usage
        return self._usage

    def _dearest(self, base: SchedulingInput) -> dict[str, tuple[float, dict[str, int]]]:
        """NodePool -> (the dearest $/hour of any of its available offerings, the most of each resource any of its
        instance types has): what one NodeClaim of it may add at most."""
        if self._most is None:
            most: dict[str, tuple[float, dict[str, int]]] = {}
            for pool in base.nodepools:
                price, caps = 0.0, {"nodes": 1000}
                for it in pool.instance_types:
                    price = max([price, *(o.price for o in it.offerings if o.available)])
                    for k, v in it.capacity.items():
                        caps[k] = max(caps.get(k, 0), v)
                most[pool.name] = (price, caps)
            self._most = most
        return self._most

    def limits(
        self, candidates: Sequence[Candidate], pods: Sequence[PodInput], base: SchedulingInput
    ) -> tuple[tuple[CeilingInput, ...], tuple[GroupLimitInput, ...]]:
        """The ceilings and group limits for the solver in a simulation moving ``pods`` off ``candidates``: in use
        less the candidates (as ``check`` counts them; a ceiling or limit already over its maximum keeps the room a
        move that does not raise it has), and only those that could bind: whose room is less than ``pods`` could
        need (each pod on a NodeClaim of its own, of the dearest / largest type of a NodePool they cover)."""
        if not pods or not (self.gov.ceilings or self.gov.group_limits):
            return (), ()
        most = self._dearest(base)
        ceilings: list[CeilingInput] = []
        if self.gov.ceilings:
            before, counted = self._in_use()
            without = _minus(before, [counted.get(c.name) or _cost(c) for c in candidates])
            dearest = max((price for price, _ in most.values()), default=0.0)
            for c in self.gov.ceilings:
                was, left = before.in_use(c), without.in_use(c)
                if c.scope == "nodePool":
                    need = len(pods) * most.get(c.name, (0.0, {}))[0]
                elif c.scope == "namespace":
                    need = sum(p.namespace == c.name for p in pods) * dearest
                else:
                    need = len(pods) * dearest
                over = max(0.0, was - c.max_per_hour)  # a move may take it back up to what it was
                if c.max_per_hour + over - left < need - _EPSILON:
                    ceilings.append(CeilingInput(c.policy, c.scope, c.name, c.max_per_hour, left - over))
        groups: list[GroupLimitInput] = []
        if self.gov.group_limits:
            usage = self._capacity(base)
            node_caps = {n.name: n.capacity for n in base.nodes}
            for g in self.gov.group_limits:
                held = res.total(used for pool, used in usage.items() if pool in g.nodepools)
                kept = dict(held)
                for cand in candidates:
                    if cand.pool_name in g.nodepools:
                        for k, v in {**node_caps.get(cand.name, {}), "nodes": 1000}.items():
                            kept[k] = kept.get(k, 0) - v
                largest = [caps for p, (_, caps) in most.items() if p in g.nodepools]
                in_use: dict[str, int] = {}
                binds = False
                for k, limit in g.limits.items():
                    extra = max(0, held.get(k, 0) - limit)
                    in_use[k] = kept.get(k, 0) - extra
                    needs = len(pods) * max((caps.get(k, 0) for caps in largest), default=0)
                    binds = binds or limit - in_use[k] < needs
                if binds:
                    groups.append(GroupLimitInput(g.policy, g.name, g.nodepools, g.limits, in_use))
        return tuple(ceilings), tuple(groups)

    def check(
        self,
        command: Command,
        candidates: Sequence[Candidate],
        base: SchedulingInput,
        cpu_of: Callable[[str], int],
    ) -> str | None:
        """Why ``command``'s replacements may not be launched (a ceiling or group limit they would cross, the
        candidates counted as freed), or None. ``cpu_of(pod key)``: the pod's CPU request (millicores)."""
        if not command.replacements or not (self.gov.ceilings or self.gov.group_limits):
            return None
        before, counted = self._in_use()
        freed = [counted.get(c.name) or _cost(c) for c in candidates]
        added = [
            NodeCost(r.nodepool, r.price, tuple((k.split("/", 1)[0], cpu_of(k)) for k in r.pods))
            for r in command.replacements
        ]
        without = _minus(before, freed)
        after = spend_of(added, without)
        for ceiling in self.gov.ceilings:
            was, will = before.in_use(ceiling), after.in_use(ceiling)
            if will > ceiling.max_per_hour + _EPSILON and will > was + _EPSILON:
                price = sum(r.price for r in command.replacements)
                pools = ", ".join(sorted({r.nodepool for r in command.replacements}))
                return (
                    f"{command.method} replacement NodeClaim of NodePool {pools} (${price:.4f}/hour) would cross "
                    f"{ceiling.describe()[:-1]}, ${was:.2f} in use, ${was - without.in_use(ceiling):.2f} "
                    f"freed by the candidates): policy {ceiling.policy}"
                )
        return self._group_check(command, candidates, base)

    def _group_check(self, command: Command, candidates: Sequence[Candidate], base: SchedulingInput) -> str | None:
        if not self.gov.group_limits:
            return None
        usage = self._capacity(base)
        node_caps = {n.name: n.capacity for n in base.nodes}
        types = {
            (p.name, it.name): it.capacity for p in (*base.nodepools, *base.static_pools) for it in p.instance_types
        }
        for group in self.gov.group_limits:
            was = res.total(used for pool, used in usage.items() if pool in group.nodepools)
            will = dict(was)
            for c in candidates:
                if c.pool_name in group.nodepools:
                    for k, v in {**node_caps.get(c.name, {}), "nodes": 1000}.items():
                        will[k] = will.get(k, 0) - v
            for r in command.replacements:
                if r.nodepool in group.nodepools:
                    for k, v in {**_largest(r, types), "nodes": 1000}.items():
                        will[k] = will.get(k, 0) + v
            for key, limit in sorted(group.limits.items()):
                if will.get(key, 0) > limit and will.get(key, 0) > was.get(key, 0):
                    pools = ", ".join(sorted({r.nodepool for r in command.replacements}))
                    return (
                        f"{command.method} replacement NodeClaim of NodePool {pools} would exceed the {key} limit "
                        f"of NodePool group {group.name} ({format_milli(limit, key)}; "
                        f"{format_milli(max(was.get(key, 0), 0), key)} in use, "
                        f"{format_milli(max(will.get(key, 0), 0), key)} after the move): policy {group.policy}"
                    )
        return None


def _minus(spend: Spend, costs: Sequence[NodeCost]) -> Spend:
    """``spend`` less ``costs``."""
    negative = [NodeCost(c.nodepool, -c.price, c.pods) for c in costs]
    return spend_of(negative, spend)


def _largest(plan: NodeClaimPlan, types: Mapping[tuple[str, str], Mapping[str, int]]) -> dict[str, int]:
    """The most of each resource any of ``plan``'s instance types has (what its launch may add)."""
    out: dict[str, int] = {}
    for name in plan.instance_types:
        for k, v in types.get((plan.nodepool, name), {}).items():
            out[k] = max(out.get(k, 0), v)
    return out
