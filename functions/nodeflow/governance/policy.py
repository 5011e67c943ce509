"""NodeflowPolicies evaluated: who may use which NodePool and extended resource, the $/hour ceilings and group
limits that apply, and which pause windows are open. Pure: the policies and the time are inputs.

Several policies combine as the most restrictive:

- a NodePool (an extended resource) named by a ``nodePoolAccess`` (``resourceAccess``) rule of some policy is
  open to a namespace only when, in EVERY policy naming it, one of the rules naming it admits the namespace
  (the rules of one policy are alternatives); a NodePool no policy names is open to every namespace;
- every ceiling and every group limit applies (so per scope and name the lowest ceiling binds);
- any open pause window pauses.

``*`` in a list of NodePools names every NodePool (``nodeflow.api.pool_names``): a ``*`` access rule names each
NodePool (an alternative to the policy's other rules naming it), a ``*`` group holds every NodePool's nodes, a
``*`` window pauses every NodePool.

Access and pauses govern NEW capacity: pods may still land on existing nodes. A window is judged once per time asked
(``Governance.open_windows``), whatever the number of NodePools asked about.

Must not touch: where pods go (``nodeflow.scheduling`` applies the bounds) or which nodes are disrupted
(``nodeflow.disruption``); the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from nodeflow.api.cron import latest_fire, parse_cron
from nodeflow.api.nodeflow_policy import (
    MAX_PAUSE,
    NodeflowPolicy,
    NodePoolAccess,
    PauseWindow,
    ResourceAccess,
    pause_duration,
)
from nodeflow.api.pool_names import EVERY, PoolNames
from nodeflow.api.quantity import to_milli

__all__ = [
    "Ceiling",
    "Governance",
    "GroupLimit",
    "NodeCost",
    "Spend",
    "Window",
    "namespace_shares",
    "spend_of",
]

CLUSTER, NODEPOOL, NAMESPACE = "cluster", "nodePool", "namespace"
EVERY_POOL = PoolNames()


@dataclass(frozen=True, slots=True)
class Ceiling:
    """A $/hour ceiling of one policy: on the whole cluster, one NodePool or one namespace."""

    policy: str
    scope: str  # "cluster" | "nodePool" | "namespace"
    name: str  # the NodePool or namespace ("" for the cluster)
    max_per_hour: float

    def describe(self) -> str:
        """ "the $/hour ceiling of NodePool gpu ($20.00/hour)"."""
        what = {CLUSTER: "the cluster", NODEPOOL: f"NodePool {self.name}", NAMESPACE: f"namespace {self.name}"}
        return f"the $/hour ceiling of {what[self.scope]} (${self.max_per_hour:.2f}/hour)"


@dataclass(frozen=True, slots=True)
class GroupLimit:
    """Limits (milli-units; ``nodes`` counts 1000 a node) shared by a group of NodePools."""

    policy: str
    name: str
    nodepools: PoolNames
    limits: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Window:
    """A pause window of one policy."""

    policy: str
    name: str
    schedule: str
    duration: timedelta
    duration_text: str
    provisioning: bool
    disruption: bool
    nodepools: PoolNames = EVERY_POOL

    def open_until(self, now: datetime) -> datetime | None:
        """The end of the window's current opening when ``now`` is inside one (a window opened by the schedule
        at most ``duration`` ago), else None. A duration over MAX_PAUSE (the model refuses one) counts as
        MAX_PAUSE: the look-back, and so the cost, stays bounded."""
        now = now.astimezone(UTC) if now.tzinfo is not None else now.replace(tzinfo=UTC)
        duration = min(self.duration, MAX_PAUSE)
        # A later opening may overlap an earlier one: the window stays open to the end of the latest.
        at = latest_fire(parse_cron(self.schedule), now, duration)
        return None if at is None else at + duration

    def covers(self, nodepool: str) -> bool:
        return nodepool in self.nodepools


@dataclass(frozen=True, slots=True)
class _Rules:
    """The access rules of one policy for one NodePool or resource name."""

    policy: str
    rules: tuple[NodePoolAccess | ResourceAccess, ...]

    def admits(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return any(r.admits(namespace, dict(labels)) for r in self.rules)


@dataclass(frozen=True, slots=True)
class Governance:
    """What a set of NodeflowPolicies allows (``Governance.from_policies``)."""

    policies: tuple[str, ...] = ()
    pool_rules: Mapping[str, tuple[_Rules, ...]] = field(default_factory=dict)  # NodePool -> rules per policy
    resource_rules: Mapping[str, tuple[_Rules, ...]] = field(default_factory=dict)  # resource -> rules per policy
    ceilings: tuple[Ceiling, ...] = ()
    group_limits: tuple[GroupLimit, ...] = ()
    windows: tuple[Window, ...] = ()
    # the windows open at one time, with their ends (``open_windows``; the last time asked only)
    _open: dict[datetime, tuple[tuple[Window, datetime], ...]] = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def from_policies(policies: Sequence[NodeflowPolicy]) -> Governance:
        pools: dict[str, list[_Rules]] = {}
        resources: dict[str, list[_Rules]] = {}
        ceilings: list[Ceiling] = []
        limits: list[GroupLimit] = []
        windows: list[Window] = []
        for policy in sorted(policies, key=lambda p: p.name):
            spec = policy.spec
            _index(pools, policy.name, [(r, r.node_pools) for r in spec.node_pool_access or ()])
            _index(resources, policy.name, [(r, r.resources) for r in spec.resource_access or ()])
            costs = spec.cost_ceilings
            if costs is not None:
                if costs.cluster is not None:
                    ceilings.append(Ceiling(policy.name, CLUSTER, "", costs.cluster.per_hour))
                ceilings += [Ceiling(policy.name, NODEPOOL, c.name, c.per_hour) for c in costs.node_pools or ()]
                ceilings += [Ceiling(policy.name, NAMESPACE, c.name, c.per_hour) for c in costs.namespaces or ()]
            for group in spec.limits or ():
                milli = {k: to_milli(v) for k, v in group.resources.items()}  # "nodes": 1000 a node
                limits.append(GroupLimit(policy.name, group.name, PoolNames.of(group.node_pools), milli))
            windows += [_window(policy.name, w) for w in spec.pauses or ()]
        return Governance(
            policies=tuple(sorted(p.name for p in policies)),
            pool_rules=_with_every(pools),
            resource_rules={k: tuple(v) for k, v in resources.items()},
            ceilings=tuple(ceilings),
            group_limits=tuple(limits),
            windows=tuple(windows),
        )

    @property
    def empty(self) -> bool:
        """True when no policy restricts anything."""
        return not (self.pool_rules or self.resource_rules or self.ceilings or self.group_limits or self.windows)

    # -- access ---------------------------------------------------------------------------------------
    def pool_denial(self, namespace: str, labels: Mapping[str, str], nodepool: str) -> str | None:
        """Why pods of ``namespace`` may not create capacity in ``nodepool`` (None: they may). The rules of a NodePool
        no policy names one by one are the ``*`` rules (``pool_rules[EVERY]``, when some policy has them)."""
        for rules in self.pool_rules.get(nodepool, self.pool_rules.get(EVERY, ())):
            if not rules.admits(namespace, labels):
                return f"namespace {namespace} may not use NodePool {nodepool}: policy {rules.policy}"
        return None

    def resource_denial(self, namespace: str, labels: Mapping[str, str], resource: str) -> str | None:
        """Why pods of ``namespace`` may not request ``resource`` (None: they may)."""
        for rules in self.resource_rules.get(resource, ()):
            if not rules.admits(namespace, labels):
                return f"namespace {namespace} may not request {resource}: policy {rules.policy}"
        return None

    def request_denial(self, namespace: str, labels: Mapping[str, str], requests: Iterable[str]) -> str | None:
        """The first resource of ``requests`` (names) ``namespace`` may not request, as a reason."""
        if not self.resource_rules:
            return None
        for name in sorted(requests):
            why = self.resource_denial(namespace, labels, name)
            if why is not None:
                return why
        return None

    def pools_for(self, namespace: str, labels: Mapping[str, str]) -> dict[str, str | None]:
        """Every NodePool some policy names (``*`` for those it names only as every NodePool) -> why ``namespace``
        may not use it (None: it may)."""
        return {pool: self.pool_denial(namespace, labels, pool) for pool in sorted(self.pool_rules)}

    def resources_for(self, namespace: str, labels: Mapping[str, str]) -> dict[str, str | None]:
        """Every governed resource -> why ``namespace`` may not request it (None: it may)."""
        return {name: self.resource_denial(namespace, labels, name) for name in sorted(self.resource_rules)}

    # -- pauses ---------------------------------------------------------------------------------------
    def provisioning_pause(self, nodepool: str, now: datetime) -> str | None:
        """Why no NodeClaim may be created in ``nodepool`` at ``now`` (None: not paused)."""
        return self._pause(nodepool, now, "provisioning")

    def disruption_pause(self, nodepool: str, now: datetime) -> str | None:
        """Why no node of ``nodepool`` may be disrupted voluntarily at ``now`` (None: not paused)."""
        return self._pause(nodepool, now, "disruption")

    def open_windows(self, now: datetime) -> tuple[tuple[Window, datetime], ...]:
        """The windows open at ``now`` (in order), each with the end of its opening. Each window is judged once per
        ``now``, not once per NodePool asked about (its opening does not depend on the NodePool)."""
        found = self._open.get(now)
        if found is None:
            found = tuple((w, until) for w in self.windows if (until := w.open_until(now)) is not None)
            self._open.clear()
            self._open[now] = found
        return found

    def _pause(self, nodepool: str, now: datetime, what: str) -> str | None:
        if not self.windows:
            return None
        for w, until in self.open_windows(now):
            if getattr(w, what) and w.covers(nodepool):
                return (
                    f"{what} paused for NodePool {nodepool} by policy {w.policy}: window {w.name} "
                    f"({w.schedule} for {w.duration_text}) until {until.strftime('%Y-%m-%dT%H:%M:%SZ')}"
                )
        return None

    # -- ceilings -------------------------------------------------------------------------------------
    def ceilings_for(self, scope: str, name: str = "") -> tuple[Ceiling, ...]:
        return tuple(c for c in self.ceilings if c.scope == scope and c.name == name)


def _index(
    index: dict[str, list[_Rules]], policy: str, rules: Sequence[tuple[NodePoolAccess | ResourceAccess, list[str]]]
) -> None:
    """Add one policy's access ``rules`` (each with the names it covers) to ``index``: name -> the rules naming it,
    one entry for the policy."""
    named: dict[str, list[NodePoolAccess | ResourceAccess]] = {}
    for rule, names in rules:
        for key in names:
            named.setdefault(key, []).append(rule)
    for key, mine in named.items():
        index.setdefault(key, []).append(_Rules(policy, tuple(mine)))


def _with_every(index: Mapping[str, list[_Rules]]) -> dict[str, tuple[_Rules, ...]]:
    """``index`` (NodePool -> rules per policy) with each policy's ``*`` rules also under every NodePool it names one
    by one, as alternatives to the policy's rules naming that NodePool (a policy with only ``*`` rules gets an entry
    of its own there); the ``*`` entry stays for the NodePools no policy names one by one."""
    every = {rules.policy: rules for rules in index.get(EVERY, ())}
    out: dict[str, tuple[_Rules, ...]] = {}
    for key, entries in index.items():
        if key == EVERY or not every:
            out[key] = tuple(entries)
            continue
        mine = {r.policy: r for r in entries}
        merged = {**{p: r for p, r in every.items() if p not in mine}, **mine}
        out[key] = tuple(
            _Rules(p, r.rules + every[p].rules) if p in every and p in mine else r for p, r in sorted(merged.items())
        )
    return out


def _window(policy: str, w: PauseWindow) -> Window:
    return Window(
        policy=policy,
        name=w.name,
        schedule=w.schedule,
        duration=pause_duration(w.duration),
        duration_text=w.duration,
        provisioning=w.provisioning,
        disruption=w.disruption,
        nodepools=PoolNames.of(w.node_pools),
    )


# -- spend -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeCost:
    """A node (or a NodeClaim still launching) as spend: its NodePool, $/hour and the (namespace, CPU request
    in millicores) of each non-DaemonSet pod on it (or planned for it)."""

    nodepool: str | None
    price: float
    pods: tuple[tuple[str, int], ...] = ()
    name: str = ""  # the Node or NodeClaim (for reports; "" when unnamed)


@dataclass(frozen=True, slots=True)
class Spend:
    """$/hour in use: the cluster's, per NodePool and per namespace."""

    cluster: float = 0.0
    by_pool: Mapping[str, float] = field(default_factory=dict)
    by_namespace: Mapping[str, float] = field(default_factory=dict)

    def in_use(self, ceiling: Ceiling) -> float:
        if ceiling.scope == CLUSTER:
            return self.cluster
        table = self.by_pool if ceiling.scope == NODEPOOL else self.by_namespace
        return table.get(ceiling.name, 0.0)

    def plus(self, cost: NodeCost) -> Spend:
        """This spend with ``cost`` added."""
        return spend_of([cost], self)


def namespace_shares(pods: Sequence[tuple[str, int]]) -> dict[str, float]:
    """How a node's price is shared among the namespaces of its pods: in proportion to their CPU requests,
    equally per pod when none requests CPU. Fractions sum to 1 (empty when there are no pods)."""
    if not pods:
        return {}
    total = sum(max(cpu, 0) for _, cpu in pods)
    shares: dict[str, float] = {}
    for namespace, cpu in pods:
        weight = max(cpu, 0) / total if total else 1 / len(pods)
        shares[namespace] = shares.get(namespace, 0.0) + weight
    return shares


def spend_of(costs: Iterable[NodeCost], base: Spend | None = None) -> Spend:
    """``base`` (nothing when None) plus the $/hour of ``costs``."""
    cluster = base.cluster if base is not None else 0.0
    by_pool = dict(base.by_pool) if base is not None else {}
    by_namespace = dict(base.by_namespace) if base is not None else {}
    for cost in costs:
        cluster += cost.price
        if cost.nodepool is not None:
            by_pool[cost.nodepool] = by_pool.get(cost.nodepool, 0.0) + cost.price
        for namespace, share in namespace_shares(cost.pods).items():
            by_namespace[namespace] = by_namespace.get(namespace, 0.0) + cost.price * share
    return Spend(cluster, by_pool, by_namespace)
