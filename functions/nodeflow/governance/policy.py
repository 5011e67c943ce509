"""NodeflowPolicies evaluated: who may use which NodePool and extended resource, the $/hour ceilings and group
limits that apply, and which pause windows are open. Pure: the policies and the time are inputs.

Several policies combine as the most restrictive:

- a NodePool (an extended resource) named by a ``nodePoolAccess`` (``resourceAccess``) rule of some policy is
  open to a namespace only when, in EVERY policy naming it, one of the rules naming it admits the namespace
  (the rules of one policy are alternatives); a NodePool no policy names is open to every namespace;
- every ceiling and every group limit applies (so per scope and name the lowest ceiling binds);
- any open pause window pauses.

Access and pauses govern NEW capacity: pods may still land on existing nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from nodeflow.api.nodeflow_policy import NodeflowPolicy, NodePoolAccess, PauseWindow, ResourceAccess
from nodeflow.api.quantity import to_milli
from nodeflow.disruption.budgets import latest_fire, parse_cron

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
    nodepools: frozenset[str]
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
    nodepools: frozenset[str] | None  # None: every NodePool

    def open_until(self, now: datetime) -> datetime | None:
        """The end of the window's current opening when ``now`` is inside one (a window opened by the schedule
        at most ``duration`` ago), else None."""
        now = now.astimezone(UTC) if now.tzinfo is not None else now.replace(tzinfo=UTC)
        # A later opening may overlap an earlier one: the window stays open to the end of the latest.
        at = latest_fire(parse_cron(self.schedule), now, self.duration)
        return None if at is None else at + self.duration

    def covers(self, nodepool: str) -> bool:
        return self.nodepools is None or nodepool in self.nodepools


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

    @staticmethod
    def from_policies(policies: Sequence[NodeflowPolicy]) -> Governance:
        pools: dict[str, list[_Rules]] = {}
        resources: dict[str, list[_Rules]] = {}
        ceilings: list[Ceiling] = []
        limits: list[GroupLimit] = []
        windows: list[Window] = []
        for policy in sorted(policies, key=lambda p: p.name):
            spec = policy.spec
            for index, keys in ((pools, "node_pools"), (resources, "resources")):
                rules = spec.node_pool_access if keys == "node_pools" else spec.resource_access
                named: dict[str, list[NodePoolAccess | ResourceAccess]] = {}
                for rule in rules or ():
                    for key in getattr(rule, keys):
                        named.setdefault(key, []).append(rule)
                for key, mine in named.items():
                    index.setdefault(key, []).append(_Rules(policy.name, tuple(mine)))
            costs = spec.cost_ceilings
            if costs is not None:
                if costs.cluster is not None:
                    ceilings.append(Ceiling(policy.name, CLUSTER, "", costs.cluster.per_hour))
                ceilings += [Ceiling(policy.name, NODEPOOL, c.name, c.per_hour) for c in costs.node_pools or ()]
                ceilings += [Ceiling(policy.name, NAMESPACE, c.name, c.per_hour) for c in costs.namespaces or ()]
            for group in spec.limits or ():
                milli = {k: to_milli(v) for k, v in group.resources.items()}  # "nodes": 1000 a node
                limits.append(GroupLimit(policy.name, group.name, frozenset(group.node_pools), milli))
            windows += [_window(policy.name, w) for w in spec.pauses or ()]
        return Governance(
            policies=tuple(sorted(p.name for p in policies)),
            pool_rules={k: tuple(v) for k, v in pools.items()},
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
        """Why pods of ``namespace`` may not create capacity in ``nodepool`` (None: they may)."""
        for rules in self.pool_rules.get(nodepool, ()):
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
        """Every NodePool some policy names -> why ``namespace`` may not use it (None: it may)."""
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

    def _pause(self, nodepool: str, now: datetime, what: str) -> str | None:
        for w in self.windows:
            if not getattr(w, what) or not w.covers(nodepool):
                continue
            until = w.open_until(now)
            if until is not None:
                return (
                    f"{what} paused for NodePool {nodepool} by policy {w.policy}: window {w.name} "
                    f"({w.schedule} for {w.duration_text}) until {until.strftime('%Y-%m-%dT%H:%M:%SZ')}"
                )
        return None

    # -- ceilings -------------------------------------------------------------------------------------
    def ceilings_for(self, scope: str, name: str = "") -> tuple[Ceiling, ...]:
        return tuple(c for c in self.ceilings if c.scope == scope and c.name == name)


def _window(policy: str, w: PauseWindow) -> Window:
    hours, _, rest = w.duration.partition("h") if "h" in w.duration else ("0", "", w.duration)
    minutes = rest.removesuffix("m") or "0"
    return Window(
        policy=policy,
        name=w.name,
        schedule=w.schedule,
        duration=timedelta(hours=int(hours or 0), minutes=int(minutes)),
        duration_text=w.duration,
        provisioning=w.provisioning,
        disruption=w.disruption,
        nodepools=frozenset(w.node_pools) if w.node_pools is not None else None,
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
