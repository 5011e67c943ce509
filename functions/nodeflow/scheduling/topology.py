"""Topology: where pods are counted, and how a group is split across domains.

Karpenter's topology and topology groups in one place. Every selector a pending pod's spread or
pod (anti-)affinity uses gets a ``Tracker``: the pods it selects, counted per existing node and
per NodeClaim (running pods, and pods placed during the solve). From those counts:

* ``domains`` / ``domain_counts``: the values of a topology key that count for a group (NodePool
  offerings or enumerated values, eligible nodes, pinned NodeClaims) and its pods in each;
* ``split_group``: the group's zone-like spread and pod (anti-)affinity rules, one after the
  other, each pinning a share of the pods to one domain (``water_fill`` levels spread shares);
  the placement itself is the caller's ``place`` callback;
* ``host_caps`` / ``cap`` / ``hostname_affinity``: per-node limits from hostname spread and
  anti-affinity, and the nodes hostname affinity allows;
* ``inverse_anti_affinity``: where placed pods' required anti-affinity keeps a group out;
* ``record`` / ``register``: book placed pods so the counts stay current.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from nodeflow.api import labels as wk
from nodeflow.scheduling.existing import Node
from nodeflow.scheduling.groups import Group
from nodeflow.scheduling.nodepools import Pool, Reasons, all_pools
from nodeflow.scheduling.pricing import ALLOW_UNDEFINED, OFFERING_KEYS, offering_label, type_matches
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.taints import untolerated
from nodeflow.scheduling.types import AffinityTerm, PodInput, Selector, TopologySpread

if TYPE_CHECKING:
    from nodeflow.scheduling.packing import Claim

__all__ = ["UNBOUNDED", "HostCaps", "Place", "Target", "Topology", "Tracker", "water_fill"]

UNBOUNDED = 1 << 30

Target: TypeAlias = "Node | Claim"
# Places a share of a group's pods under extra requirements, away from blocked targets:
# (pods left over, reasons per NodePool).
Place: TypeAlias = Callable[[Group, list[str], Requirements, set[int]], tuple[list[str], Reasons]]


@dataclass(slots=True)
class Tracker:
    """Pods matching one selector (in some namespaces), counted per node or NodeClaim."""

    selector: Selector
    namespaces: frozenset[str] | None
    counts: dict[int, int] = field(default_factory=dict)  # id(target) -> matching pods

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.namespaces is None or namespace in self.namespaces) and self.selector.matches(labels)


# Per-node limits from hostname rules: (tracker, limit, the group's pods match it); limit 0 is
# anti-affinity.
HostCaps: TypeAlias = list[tuple[Tracker, int, bool]]


@dataclass(frozen=True, slots=True)
class Counted:
    """A rule of other pending pods that counts the group's pods by their domain of ``key`` (a required topology
    spread whose selector picks them, ``tracker``), which the group's own rules leave open.
    A pod on a NodeClaim whose domain is not decided counts wherever the launch puts it (kube-scheduler counts it
    there after launch, where Karpenter's Topology.Record counts it nowhere), so such pods are pinned to domains
    too, the emptiest first."""

    key: str
    tracker: Tracker


SplitItem: TypeAlias = "TopologySpread | AffinityTerm | Counted"


class Topology:
    """Topology counts and domains of one solve. ``claims`` is the solver's list of NodeClaims
    (read, never changed here); NodeClaims are counted once ``register``ed."""

    def __init__(
        self, pools: Sequence[Pool], nodes: Sequence[Node], claims: Sequence[Claim], pods: Iterable[PodInput]
    ) -> None:
        self.pools = pools
        self.nodes = nodes
        self.claims = claims
        self.targets: dict[int, Target] = {id(n): n for n in nodes}
        self.trackers: dict[tuple[Selector, frozenset[str] | None], Tracker] = {}
        self._group_trackers: dict[int, list[Tracker]] = {}  # group uid -> trackers selecting it
        # Required anti-affinity of pods already placed: (term, namespace of its pod, where).
        self.anti: list[tuple[AffinityTerm, str, Target]] = []
        for node in nodes:
            running = node.input.running
            node.entries.extend([(pod.namespace, pod.labels, 1) for pod in running])
            for pod in running:
                if pod.anti_affinity:  # most pods have none: no generator per pod (5,000 nodes re-solved)
                    self.anti.extend((term, pod.namespace, node) for term in pod.anti_affinity)
        # Every selector a pod's spread or affinity uses gets its tracker now, counted over the
        # existing nodes only; placements keep them current.
        counting: dict[tuple[str, Selector, str], Tracker] = {}
        for pending in pods:
            for spread in pending.spread:
                tracker = self.tracker(spread.selector, frozenset({pending.namespace}))
                if not spread.schedule_anyway and spread.key != wk.LABEL_HOSTNAME:
                    counting[(spread.key, spread.selector, pending.namespace)] = tracker
            for term in pending.affinity:
                self.tracker(term.selector, term.namespaces)
        # Required spreads on keys a NodeClaim may leave open: the pods they select are pinned (``Counted``). In a
        # fixed order: the input's order must not change the plan.
        self.counting = [
            Counted(key, counting[(key, selector, namespace)])
            for key, selector, namespace in sorted(counting, key=lambda k: (k[0], k[1].describe(), k[2]))
        ]
        self._domain_cache: dict[tuple[int, Requirements, str], frozenset[str]] = {}

    # -- counting --------------------------------------------------------------------------------
    def tracker(self, selector: Selector, namespaces: frozenset[str] | None) -> Tracker:
        tracker = self.trackers.get((selector, namespaces))
        if tracker is None:
            tracker = Tracker(selector, namespaces)
            for tid, target in self.targets.items():
                count = sum(n for ns, labels, n in target.entries if tracker.selects(ns, labels))
                if count:
                    tracker.counts[tid] = count
            self.trackers[(selector, namespaces)] = tracker
            self._group_trackers.clear()  # which trackers select which group: work it out again
        return tracker

    def register(self, claim: Claim) -> None:
        """Count a new NodeClaim from now on (before its first ``record``)."""
        self.targets[id(claim)] = claim

    def record(self, group: Group, target: Target, count: int) -> None:
        """Book ``count`` pods of the group onto a node or NodeClaim: topology counts and
        anti-affinity follow them."""
        target.entries.append((group.namespace, group.labels, count))
        matching = self._group_trackers.get(group.uid)
        if matching is None:
            matching = self._matching_trackers(group)
        tid = id(target)
        for tracker in matching:
            tracker.counts[tid] = tracker.counts.get(tid, 0) + count
        for term in group.required_anti_affinity():
            self.anti.append((term, group.namespace, target))
        if not isinstance(target, Node) and (matching or group.constraints.spread or group.constraints.affinity):
            target.topology = True  # a NodeClaim holding pods some topology rule looks at

    def _matching_trackers(self, group: Group) -> list[Tracker]:
        """The trackers whose selector picks this group's pods (cached until a tracker is added)."""
        matching = [t for t in self.trackers.values() if t.selects(group.namespace, group.labels)]
        self._group_trackers[group.uid] = matching
        return matching

    def domain_counts(self, tracker: Tracker, key: str, group: Group, spread: TopologySpread | None) -> dict[str, int]:
        """Pods ``tracker`` selects per domain of ``key`` (where their domain is known): for a
        spread, only on the nodes and NodeClaims that count for it (``eligible``)."""
        counts: dict[str, int] = {}
        check = spread if spread is not None and self._filters(group, spread) else None
        for tid, count in tracker.counts.items():
            target = self.targets[tid]
            if check is not None and not self.eligible(target, group, check):
                continue
            domain = target.domain(key)
            if domain is not None:
                counts[domain] = counts.get(domain, 0) + count
        return counts

    @staticmethod
    def _filters(group: Group, spread: TopologySpread) -> bool:
        """Can ``eligible`` leave any node or NodeClaim out for this spread?"""
        return spread.honor_node_taints or (spread.honor_node_affinity and any(len(a) for a in group.own_requirements))

    def eligible(self, target: Target, group: Group, spread: TopologySpread) -> bool:
        """Does a node or NodeClaim count for a spread constraint? nodeAffinityPolicy Honor: only
        where the pods' own node selector and required affinity allow; nodeTaintsPolicy Honor:
        only where they tolerate the taints."""
        taints = target.taints if isinstance(target, Node) else target.pool.input.taints
        if spread.honor_node_affinity and not any(
            target.requirements.compatible(a, ALLOW_UNDEFINED) is None for a in group.own_requirements
        ):
            return False
        return not (spread.honor_node_taints and untolerated(group.tolerations, taints, group.effects) is not None)

    def domains(self, group: Group, extra: Requirements, key: str, spread: TopologySpread | None) -> frozenset[str]:
        """Every value of a topology key that counts for the group: the offerings or enumerated
        values of the NodePools, and the labels of eligible nodes. For a spread constraint the
        NodePools' taints and the pod's node affinity narrow this only when its
        nodeTaintsPolicy / nodeAffinityPolicy say Honor (as in Kubernetes: a domain the pod
        cannot use still holds the minimum down under Ignore)."""
        honor_taints = spread is None or spread.honor_node_taints
        honor_affinity = spread is None or spread.honor_node_affinity
        values: set[str] = set()
        if not honor_affinity:
            alternatives: tuple[Requirements, ...] = (Requirements(),)
        else:
            alternatives = group.requirements if spread is None else group.own_requirements
        for alt in alternatives:
            full = alt.add(extra) if len(extra) else alt
            for pool in self.pools:
                if pool.input.error:
                    continue
                if honor_taints and untolerated(group.tolerations, pool.input.taints, group.effects):
                    continue
                if pool.requirements.compatible(full, ALLOW_UNDEFINED) is not None and (
                    pool.reserved_requirements is None
                    or pool.reserved_requirements.compatible(full, ALLOW_UNDEFINED) is not None
                ):
                    continue
                values |= self.pool_domains(pool, full, key)
        check = spread if spread is not None and self._filters(group, spread) else None
        for node in self.nodes:
            if not node.input.schedulable:
                continue
            if check is not None and not self.eligible(node, group, check):
                continue
            domain = node.domain(key)
            if domain is not None:
                values.add(domain)
        for claim in self.claims:
            domain = claim.domain(key)
            if domain is not None and domain not in values:
                if check is not None and not self.eligible(claim, group, check):
                    continue
                values.add(domain)
        return frozenset(values)

    def pool_domains(self, pool: Pool, alt: Requirements, key: str) -> frozenset[str]:
        cache_key = (id(pool), alt, key)
        cached = self._domain_cache.get(cache_key)
        if cached is not None:
            return cached
        reqs = pool.requirements.add(alt)
        allowed = reqs.get(key)
        out: set[str] = set()
        if key in OFFERING_KEYS:
            zone, ctype, zone_id = reqs.get(wk.LABEL_ZONE), reqs.get(wk.LABEL_CAPACITY_TYPE), reqs.get(wk.LABEL_ZONE_ID)
            for it in pool.types:
                if not type_matches(it, reqs):
                    continue
                for o in it.offerings:
                    if (
                        o.available
                        and (zone is None or zone.has(o.zone))
                        and (ctype is None or ctype.has(o.capacity_type))
                        and (zone_id is None or zone_id.has(o.zone_id))
                    ):
                        out.add(offering_label(o, key))
            reserved = pool.reserved_requirements
            if reserved is not None and reserved.compatible(alt, ALLOW_UNDEFINED) is None:
                # A NodePool allowing reserved capacity also reaches its reservations' domains.
                reserved = reserved.add(alt)
                checks = [(k, r) for k, r in reserved.items() if k in OFFERING_KEYS]
                for it in pool.reserved_types:
                    if type_matches(it, reserved):
                        out.update(
                            offering_label(o, key)
                            for o in it.offerings
                            if o.reservation_id and o.available and all(r.has(offering_label(o, k)) for k, r in checks)
                        )
        elif allowed is not None and not allowed.complement:
            out = set(allowed.values)
        else:
            out = {it.labels[key] for it in pool.types if key in it.labels and type_matches(it, reqs)}
        frozen = frozenset(out)
        self._domain_cache[cache_key] = frozen
        return frozen

    def anti_domains(self, tracker: Tracker, key: str) -> set[str]:
        """Every domain of ``key`` where a pod ``tracker`` selects is or may end up: a NodeClaim
        whose domain is not decided yet may land in any it allows, and anti-affinity avoids them all."""
        out: set[str] = set()
        for tid, count in tracker.counts.items():
            if count > 0:
                out |= self.possible_domains(self.targets[tid], key)
        return out

    def possible_domains(self, target: Target, key: str) -> frozenset[str]:
        """The domains of ``key`` a node is in (one, or none) or a NodeClaim may still end up in."""
        domain = target.domain(key)
        if domain is not None:
            return frozenset((domain,))
        if isinstance(target, Node):
            return frozenset()
        return self.pool_domains(target.pool, target.requirements, key)

    def inverse_anti_affinity(self, group: Group) -> tuple[Requirements, set[int]]:
        """Where placed pods' required anti-affinity keeps this group out: zones (or other
        keys) as NotIn requirements, nodes and NodeClaims as a set."""
        blocked: dict[str, set[str]] = {}
        targets: set[int] = set()
        for term, _owner, target in self.anti:
            if not term.selects(group.namespace, group.labels):
                continue
            if term.key == wk.LABEL_HOSTNAME:
                targets.add(id(target))
                continue
            possible = self.possible_domains(target, term.key)
            if possible:
                blocked.setdefault(term.key, set()).update(possible)
        extra = Requirements(Requirement(k, True, frozenset(v)) for k, v in sorted(blocked.items()))
        return extra, targets

    # -- splitting a group across domains ----------------------------------------------------------
    def split_group(self, group: Group, pending: list[str], place: Place) -> tuple[list[str], Reasons]:
        """Place the group's pending pods through ``place``, domain by domain: its zone-like
        spread and pod (anti-)affinity rules each pin a share of the pods to one domain, in
        order, and placed pods' anti-affinity keeps them out of domains and targets. Hostname
        rules are left to ``place`` (see ``host_caps``)."""
        extra, blocked_targets = self.inverse_anti_affinity(group)
        items: list[SplitItem] = [s for s in group.constraints.spread if s.key != wk.LABEL_HOSTNAME]
        items += [t for t in group.constraints.affinity if t.key != wk.LABEL_HOSTNAME]
        if self.counting:
            own = {item.key for item in items}
            items += [c for c in self.counting if c.key not in own and c.tracker.selects(group.namespace, group.labels)]
        return self._split(group, pending, extra, items, 0, blocked_targets, place)

    def _split(
        self,
        group: Group,
        pending: list[str],
        extra: Requirements,
        items: Sequence[SplitItem],
        index: int,
        blocked: set[int],
        place: Place,
    ) -> tuple[list[str], Reasons]:
        if index == len(items):
            return place(group, pending, extra, blocked)
        item = items[index]
        if isinstance(item, Counted):
            return self._split_counted(group, pending, extra, items, index, blocked, item, place)
        if isinstance(item, TopologySpread):
            return self._split_spread(group, pending, extra, items, index, blocked, item, place)
        if item.anti:
            return self._split_anti(group, pending, extra, items, index, blocked, item, place)
        return self._split_affinity(group, pending, extra, items, index, blocked, item, place)

    def _pin(self, extra: Requirements, key: str, domain: str) -> Requirements:
        return extra.add(Requirements([Requirement(key, False, frozenset({domain}))]))

    def _split_spread(
        self,
        group: Group,
        pending: list[str],
        extra: Requirements,
        items: Sequence[SplitItem],
        index: int,
        blocked: set[int],
        spread: TopologySpread,
        place: Place,
    ) -> tuple[list[str], Reasons]:
        tracker = self.tracker(spread.selector, frozenset({group.namespace}))
        self_match = spread.selector.matches(group.labels)
        domains = self.domains(group, extra, spread.key, spread)
        if not domains:
            return pending, all_pools(self.pools, f"topology spread on {spread.key}: no domain is available")
        counts = dict.fromkeys(domains, 0)
        for d, n in self.domain_counts(tracker, spread.key, group, spread).items():
            if d in counts:
                counts[d] = n
        closed: set[str] = set()
        few_domains = bool(spread.min_domains and len(domains) < spread.min_domains)
        if self_match:
            cap = (spread.max_skew, few_domains)
            pending, reasons = self._fill(
                group, pending, extra, items, index, blocked, place, spread.key, counts, closed, cap
            )
        else:
            # The pods do not count towards their own spread: all go to the emptiest domain.
            reasons = {}
            floor = 0 if few_domains else min(counts.values())
            while pending and len(closed) < len(domains):
                domain = min((d for d in domains if d not in closed), key=lambda d: (counts[d], d))
                if counts[domain] - floor > spread.max_skew:
                    break
                pinned = self._pin(extra, spread.key, domain)
                pending, why = self._split(group, pending, pinned, items, index + 1, blocked, place)
                if pending:
                    closed.add(domain)
                    reasons.update(why)
        if pending:
            detail = ", ".join(f"{d}={counts[d]}" for d in sorted(counts))
            topology = (
                f"topology spread on {spread.key} (maxSkew {spread.max_skew}, selector {spread.selector.describe()}) "
                f"cannot be met; domain counts: {detail}"
            )
            reasons = {name: f"{topology}; {why}" if why else topology for name, why in reasons.items()} or (
                all_pools(self.pools, topology)
            )
        return pending, reasons

    def _fill(
        self,
        group: Group,
        pending: list[str],
        extra: Requirements,
        items: Sequence[SplitItem],
        index: int,
        blocked: set[int],
        place: Place,
        key: str,
        counts: dict[str, int],
        closed: set[str],
        cap: tuple[int, bool] | None,
    ) -> tuple[list[str], Reasons]:
        """Fill the domains of ``counts`` not ``closed`` towards an even level (water-filling), the pods counting
        where they go; ``cap``: (maxSkew, fewer domains than minDomains) keeps each at most maxSkew above the final
        minimum. Each domain is first probed with one pod, so a domain that cannot take any closes before the
        others are filled; then each gets its share at once. ``counts`` and ``closed`` are kept current."""
        reasons: Reasons = {}
        probed: set[str] = set()
        while pending:
            open_domains = sorted(d for d in counts if d not in closed)
            if not open_domains:
                break
            quotas = water_fill(counts, open_domains, len(pending))
            floor = 0
            if cap is not None and not cap[1]:
                floor = min(counts[d] + quotas.get(d, 0) for d in counts)
            progress = False
            for domain in sorted((d for d in open_domains if quotas[d]), key=lambda d: (counts[d], d)):
                room = UNBOUNDED if cap is None else floor + cap[0] - counts[domain]
                take = min(quotas[domain], room, len(pending), 1 if domain not in probed else UNBOUNDED)
                if take <= 0:
                    continue
                probed.add(domain)
                pinned = self._pin(extra, key, domain)
                left, why = self._split(group, pending[:take], pinned, items, index + 1, blocked, place)
                placed = take - len(left)
                counts[domain] += placed
                progress = progress or placed > 0
                pending = left + pending[take:]
                if left:
                    closed.add(domain)
                    reasons.update(why)
                    break  # the level changes: work the shares out again
            else:
                if not progress:
                    break
        return pending, reasons

    def _split_counted(
        self,
        group: Group,
        pending: list[str],
        extra: Requirements,
        items: Sequence[SplitItem],
        index: int,
        blocked: set[int],
        item: Counted,
        place: Place,
    ) -> tuple[list[str], Reasons]:
        """Pin the group's pods to the domains of a rule that counts them (``Counted``), the emptiest first. Pods
        that fit in no domain it has (a key no NodePool or node offers) are placed without it: they count nowhere."""
        domains = self.domains(group, extra, item.key, None)
        if not domains:
            return self._split(group, pending, extra, items, index + 1, blocked, place)
        counts = dict.fromkeys(domains, 0)
        for d, n in self.domain_counts(item.tracker, item.key, group, None).items():
            if d in counts:
                counts[d] = n
        return self._fill(group, pending, extra, items, index, blocked, place, item.key, counts, set(), None)

    def _split_affinity(
        self,
        group: Group,
        pending: list[str],
        extra: Requirements,
        items: Sequence[SplitItem],
        index: int,
        blocked: set[int],
        term: AffinityTerm,
        place: Place,
    ) -> tuple[list[str], Reasons]:
        tracker = self.tracker(term.selector, term.namespaces)
        counts = self.domain_counts(tracker, term.key, group, None)
        # Only domains the pods may use count: matching pods elsewhere neither attract nor hold them.
        candidates = sorted(
            (d for d, n in counts.items() if n > 0 and _allows(group.requirements, extra, term.key, d)),
            key=lambda d: (-counts[d], d),
        )
        undecided = not candidates and self._undecided(tracker, term.key, group, extra)
        bootstrap = not candidates and not undecided and term.selects(group.namespace, group.labels)
        if bootstrap:
            # Self-affinity, no matching pod where the pods may go: they open one domain of their own.
            candidates = sorted(
                d for d in self.domains(group, extra, term.key, None) if _allows(group.requirements, extra, term.key, d)
            )
        if not candidates:
            selector = term.selector.describe()
            why = f"pod affinity on {term.key}: no pod matches {selector} in any domain yet"
            if undecided:
                # kube-scheduler would hold them to wherever that NodeClaim lands (as Karpenter, which counts such
                # a pod nowhere until its node exists: they follow it in a later round).
                why = (
                    f"pod affinity on {term.key}: the pods matching {selector} are on new nodes whose {term.key} "
                    "the launch decides"
                )
            return pending, all_pools(self.pools, why)
        reasons: Reasons = {}
        for domain in candidates:
            left, why = self._split(
                group, pending, self._pin(extra, term.key, domain), items, index + 1, blocked, place
            )
            placed = len(pending) - len(left)
            pending = left
            reasons.update(why)
            if not pending or (bootstrap and placed):
                # Self-affinity without earlier pods: the first domain used is the domain.
                break
        return pending, reasons

    def _undecided(self, tracker: Tracker, key: str, group: Group, extra: Requirements) -> bool:
        """Is a pod ``tracker`` selects on a NodeClaim whose domain of ``key`` is not decided yet, and may it land
        in one the group may use?"""
        for tid, count in tracker.counts.items():
            target = self.targets[tid]
            if count <= 0 or target.domain(key) is not None:
                continue
            if any(_allows(group.requirements, extra, key, d) for d in self.possible_domains(target, key)):
                return True
        return False

    def _split_anti(
        self,
        group: Group,
        pending: list[str],
        extra: Requirements,
        items: Sequence[SplitItem],
        index: int,
        blocked: set[int],
        term: AffinityTerm,
        place: Place,
    ) -> tuple[list[str], Reasons]:
        tracker = self.tracker(term.selector, term.namespaces)
        taken = self.anti_domains(tracker, term.key)
        if not term.selects(group.namespace, group.labels):
            if taken:
                extra = extra.add(Requirements([Requirement(term.key, True, frozenset(taken))]))
            return self._split(group, pending, extra, items, index + 1, blocked, place)
        # The pods repel each other: one per free domain.
        reasons: Reasons = {}
        for domain in sorted(self.domains(group, extra, term.key, None) - taken):
            if not pending:
                break
            left, why = self._split(
                group, pending[:1], self._pin(extra, term.key, domain), items, index + 1, blocked, place
            )
            if left:
                reasons.update(why)
            else:
                pending = pending[1:]
        if pending:
            message = (
                f"pod anti-affinity on {term.key}: every domain already has a pod matching {term.selector.describe()}"
            )
            reasons = all_pools(self.pools, message)
        return pending, reasons

    # -- hostname rules ---------------------------------------------------------------------------
    def host_caps(self, group: Group) -> tuple[HostCaps, Tracker | None]:
        """Per-node limits from hostname spread and anti-affinity: (tracker, limit, self-match),
        and the tracker of a required hostname affinity term, if any."""
        caps: HostCaps = []
        for spread in group.constraints.spread:
            if spread.key == wk.LABEL_HOSTNAME:
                tracker = self.tracker(spread.selector, frozenset({group.namespace}))
                caps.append((tracker, spread.max_skew, spread.selector.matches(group.labels)))
        affinity: Tracker | None = None
        for term in group.constraints.affinity:
            if term.key != wk.LABEL_HOSTNAME:
                continue
            tracker = self.tracker(term.selector, term.namespaces)
            if term.anti:
                caps.append((tracker, 0, term.selects(group.namespace, group.labels)))
            else:
                affinity = tracker
        return caps, affinity

    def hostname_affinity(self, group: Group, affinity: Tracker | None) -> tuple[set[int] | None, bool, str | None]:
        """Where required hostname affinity (``affinity``, from ``host_caps``) lets the group go:
        (the ids of the nodes and NodeClaims it may join, None for any; whether its pods must
        share one new node of their own instead (self-affinity, no matching pod placed yet);
        why it cannot go anywhere, or None)."""
        if affinity is None:
            return None, False, None
        allowed = {tid for tid, n in affinity.counts.items() if n > 0}
        if allowed:
            return allowed, False, None
        if affinity.selects(group.namespace, group.labels):
            return None, True, None
        selector = self._hostname_term(group).selector.describe()
        return None, False, f"pod affinity on {wk.LABEL_HOSTNAME}: no pod matches {selector} on any node yet"

    def hostname_affinity_full(self, group: Group) -> str:
        """Why pods with required hostname affinity are left over once the nodes they may join are full."""
        term = self._hostname_term(group)
        mutual = (
            " (the pods select each other: all must share one node)"
            if term.selects(group.namespace, group.labels)
            else ""
        )
        return (
            f"pod affinity on {wk.LABEL_HOSTNAME}: the nodes with pods matching {term.selector.describe()} have no "
            f"room left{mutual}"
        )

    @staticmethod
    def _hostname_term(group: Group) -> AffinityTerm:
        return next(t for t in group.constraints.affinity if t.key == wk.LABEL_HOSTNAME and not t.anti)

    @staticmethod
    def cap(target_id: int, caps: HostCaps) -> int:
        """How many more pods of the group a node or NodeClaim may take under hostname rules
        (``target_id`` -1: a new NodeClaim)."""
        cap = UNBOUNDED
        for tracker, limit, self_match in caps:
            count = tracker.counts.get(target_id, 0)
            if limit == 0:  # anti-affinity: no matching pod may share the node
                if count:
                    return 0
                if self_match:
                    cap = min(cap, 1)
            elif self_match:  # hostname spread: a fresh node is always a domain with 0
                cap = min(cap, max(0, limit - count))
            elif count > limit:
                return 0
        return cap


def _allows(alternatives: Sequence[Requirements], extra: Requirements, key: str, domain: str) -> bool:
    """May a pod with these node requirements (and ``extra``) be in ``domain`` of ``key``?"""
    pinned = extra.get(key)
    if pinned is not None and not pinned.has(domain):
        return False
    return any((req := alt.get(key)) is None or req.has(domain) for alt in alternatives)


def water_fill(counts: Mapping[str, int], domains: Sequence[str], n: int) -> dict[str, int]:
    """Spread ``n`` pods over ``domains`` one at a time onto the emptiest (ties by name):
    how many each gets. Computed level by level, not pod by pod."""
    quota = dict.fromkeys(domains, 0)
    left = n
    while left > 0:
        level = min(counts[d] + quota[d] for d in domains)
        at_level = sorted(d for d in domains if counts[d] + quota[d] == level)
        higher = [counts[d] + quota[d] for d in domains if counts[d] + quota[d] > level]
        step = (min(higher) - level) if higher else None
        if step is not None and step * len(at_level) <= left:
            for d in at_level:
                quota[d] += step
            left -= step * len(at_level)
            continue
        per, extra = divmod(left, len(at_level))
        for i, d in enumerate(at_level):
            quota[d] += per + (1 if i < extra else 0)
        left = 0
    return quota
