"""Topology: where pods are counted, and how a group is split across domains.

Karpenter's topology and topology groups in one place. Every selector a pending pod's spread or
pod (anti-)affinity uses gets a ``Tracker``: the pods it selects, counted per existing node and
per NodeClaim (running pods, and pods placed during the solve). From those counts:

* ``domains`` / ``domain_counts``: the values of a topology key that count for a group (NodePool
  offerings or enumerated values, eligible nodes, pinned NodeClaims) and its pods in each;
* ``split_group``: the group's zone-like spread and pod (anti-)affinity rules, one after the
  other, each pinning a share of the pods to one domain (``water_fill`` levels spread shares);
  the placement itself is the caller's ``place`` callback. Other pending pods' rules that count
  the group's pods (``Counted``: required spreads, self-affinity that opened a domain in this
  solve) pin them too, and spreads of groups placed earlier cap the domains holding their
  pods (``_carried_room``): the plan must hold as kube-scheduler sees it after launch,
  whatever zone each launch picks and whichever pod binds first;
* ``host_caps`` / ``cap`` / ``hostname_affinity``: per-node limits from hostname spread and
  anti-affinity (also other pods' hostname spreads, ``HeldSpread``), and the nodes hostname
  affinity allows;
* ``inverse_anti_affinity``: where placed pods' required anti-affinity keeps a group out;
  ``pinned``: node-affinity alternatives under topology pins, contradictions dropped;
* ``record`` / ``register``: book placed pods so the counts stay current.

Must not touch: which NodeClaim is opened or priced (``packing``), bounds, the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
    from nodeflow.scheduling.nodeclaim import Claim

__all__ = ["UNBOUNDED", "HostCaps", "Place", "Target", "Topology", "Tracker", "pinned", "water_fill"]

UNBOUNDED = 1 << 30
NO_PINS = Requirements()

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


# Per-node limits from hostname rules: (tracker, limit, the group's pods match it, the targets it applies to or
# None for all); limit 0 is anti-affinity.
HostCaps: TypeAlias = list[tuple[Tracker, int, bool, "set[int] | None"]]


@dataclass(slots=True)
class HeldSpread:
    """A required hostname spread that pending pods carry: the nodes and NodeClaims they were put on (``held``).
    kube-scheduler checks each carrier against the final count of its own node, so pods the spread's selector
    picks may not push such a node beyond maxSkew either, whoever carries the spread (Karpenter's
    Topology.Record counts them there, but nothing keeps them out)."""

    tracker: Tracker
    max_skew: int
    held: set[int] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Counted:
    """A rule of other pending pods that counts the group's pods by their domain of ``key`` (``tracker``): a required
    topology spread whose selector picks them, which the group's own rules leave open, or a required pod affinity
    term of pods that select themselves and that no running pod matches (``affinity``). A pod on a NodeClaim whose
    domain is not decided counts wherever the launch puts it (kube-scheduler counts it there after launch, where
    Karpenter's Topology.Record counts it nowhere), so a spread's pods are pinned to domains, the emptiest first.
    Pods that open a domain for their self-affinity are bound there only while no other pod matches them: one of
    these bound elsewhere first would leave them pending, so these join the domain they opened (``_split_counted``)."""

    key: str
    tracker: Tracker
    affinity: bool = False


SplitItem: TypeAlias = "TopologySpread | AffinityTerm | Counted"


class Topology:
    """Topology counts and domains of one solve. ``claims`` is the solver's list of NodeClaims
    (read, never changed here); NodeClaims are counted once ``register``ed."""

    def __init__(
        self, pools: Sequence[Pool], nodes: Sequence[Node], claims: Sequence[Claim], pods: Sequence[PodInput]
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
        counting: dict[tuple[str, bool, Selector, frozenset[str] | None], Tracker] = {}
        self.held: dict[tuple[Selector, str, int], HeldSpread] = {}
        # Zone-like required spreads of groups placed so far: (spread, group uid) -> (the group, the domains its
        # pods went to). Pods the spread counts may not push those domains beyond maxSkew (``_carried_room``).
        self.carried: dict[tuple[TopologySpread, int], tuple[Group, set[str]]] = {}
        # Group uid -> the entries of ``held`` / ``carried`` (how many there were then) whose selector picks it.
        self._held_for: dict[int, list[HeldSpread]] = {}
        self._carried_for: dict[int, tuple[int, list[tuple[TopologySpread, Group, set[str]]]]] = {}
        # The pending pods, one of each namespace, labels and node affinity (``followers``).
        self._pods = pods
        self._kinds: dict[tuple[str, tuple[tuple[str, str], ...], tuple[Requirements, ...]], PodInput] = {}
        self._kinds_by: dict[tuple[str, str], list[PodInput]] = {}
        for pending in pods:
            for spread in pending.spread:
                namespaces = frozenset({pending.namespace})
                tracker = self.tracker(spread.selector, namespaces)
                if spread.schedule_anyway:
                    continue
                if spread.key != wk.LABEL_HOSTNAME:
                    counting[(spread.key, False, spread.selector, namespaces)] = tracker
                elif (spread.selector, pending.namespace, spread.max_skew) not in self.held:
                    self.held[(spread.selector, pending.namespace, spread.max_skew)] = HeldSpread(
                        tracker, spread.max_skew
                    )
            for term in pending.affinity:
                tracker = self.tracker(term.selector, term.namespaces)
                # Self-affinity no running pod matches: its pods may open a domain of their own in this solve.
                opens = term.selects(pending.namespace, pending.labels) and not tracker.counts
                if opens and not term.anti and term.weight == 0:
                    counting[(term.key, True, term.selector, term.namespaces)] = tracker
        # Required spreads and pod affinity on keys a NodeClaim may leave open: the pods they select are pinned
        # (``Counted``). In a fixed order: the input's order must not change the plan.
        self.counting = [
            Counted(key, counting[(key, affinity, selector, namespaces)], affinity)
            for key, affinity, selector, namespaces in sorted(
                counting, key=lambda k: (k[0], k[1], k[2].describe(), sorted(k[3] or ()), k[3] is None)
            )
        ]
        # The rules of ``counting`` by a label their selector requires (None: any), to find a group's quickly.
        self._counting_by: dict[tuple[str, str] | None, list[int]] = {}
        for i, rule in enumerate(self.counting):
            self._counting_by.setdefault(rule.tracker.selector.anchor(), []).append(i)
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

    def _counting_of(self, group: Group) -> list[Counted]:
        """The rules of ``counting`` that may select the group (those whose selector names no label the group lacks),
        in their order."""
        found = set(self._counting_by.get(None, ()))
        for pair in group.labels.items():
            found.update(self._counting_by.get(pair, ()))
        return [self.counting[i] for i in sorted(found)]

    def counted(self, group: Group) -> bool:
        """Does a required topology spread of pending pods count this group's pods?"""
        rules = self._counting_of(group)
        if any(not rule.affinity and rule.tracker.selects(group.namespace, group.labels) for rule in rules):
            return True
        return any(ns == group.namespace and selector.matches(group.labels) for selector, ns, _ in self.held)

    def affinity_tracker(self, group: Group, term: AffinityTerm) -> Tracker:
        """The pods a pod (anti-)affinity term of the group counts. For a required affinity term, kube-scheduler
        counts only pods that match every required pod affinity term of the pod (InterPodAffinity's affinityCounts),
        and lets the pod open a domain only while no pod matches them all: the tracker selects that conjunction."""
        required = group.required_affinity() if not term.anti and term.weight == 0 else ()
        if len(required) < 2:
            return self.tracker(term.selector, term.namespaces)
        namespaces: frozenset[str] | None = None
        for t in required:
            if t.namespaces is not None:
                namespaces = t.namespaces if namespaces is None else namespaces & t.namespaces
        selector = Selector(
            tuple(pair for t in required for pair in t.selector.match_labels),
            tuple(expression for t in required for expression in t.selector.expressions),
        )
        return self.tracker(selector, namespaces)

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
        for spread in group.constraints.spread:
            if spread.schedule_anyway:
                continue
            if spread.key == wk.LABEL_HOSTNAME:
                self.held[(spread.selector, group.namespace, spread.max_skew)].held.add(tid)
                continue
            domain = target.domain(spread.key)
            if domain is not None:
                self.carried.setdefault((spread, group.uid), (group, set()))[1].add(domain)
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
        if not honor_affinity:
            alternatives: tuple[Requirements, ...] = (Requirements(),)
        else:
            alternatives = group.requirements if spread is None else group.own_requirements
        values = set(self.new_node_domains(group, alternatives, extra, key, honor_taints))
        check = spread if spread is not None and self._filters(group, spread) else None
        for node in self.nodes:
            if node.input.leaving:
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

    def new_node_domains(
        self, group: Group, alternatives: Sequence[Requirements], extra: Requirements, key: str, honor_taints: bool
    ) -> set[str]:
        """The values of ``key`` a new node of some NodePool may have under one of ``alternatives`` (and
        ``extra``); NodePools whose taints the group does not tolerate count only unless ``honor_taints``."""
        values: set[str] = set()
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
        return values

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
        me = (group.namespace, group.labels)
        if self.counting:
            # The keys the group's own rules pin a domain of (an anti-affinity not selecting the group only
            # keeps it out of some).
            own = {i.key for i in items if not isinstance(i, AffinityTerm) or not i.anti or i.selects(*me)}
            counted = [
                c
                for c in self._counting_of(group)
                if c.key != wk.LABEL_HOSTNAME and c.tracker.selects(group.namespace, group.labels)
            ]
            # Pods that must follow a self-affine group's first domain come first (their own rules then choose
            # within it); pods a spread counts only when their own rules leave the key open.
            mine = {(t.key, id(self.affinity_tracker(group, t))) for t in group.constraints.affinity if not t.anti}
            near = [c for c in counted if c.affinity and (c.key, id(c.tracker)) not in mine]
            items = near + items + [c for c in counted if not c.affinity and c.key not in own]
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
            if self.carried:
                room, why = self._carried_room(group, extra)
                if room < len(pending):
                    left, reasons = place(group, pending[:room], extra, blocked) if room > 0 else ([], {})
                    reasons = {name: f"{why}; {r}" for name, r in reasons.items()} or all_pools(self.pools, why)
                    return left + pending[room:], reasons
            return place(group, pending, extra, blocked)
        item = items[index]
        if isinstance(item, Counted):
            return self._split_counted(group, pending, extra, items, index, blocked, item, place)
        if isinstance(item, TopologySpread):
            return self._split_spread(group, pending, extra, items, index, blocked, item, place)
        if item.anti:
            return self._split_anti(group, pending, extra, items, index, blocked, item, place)
        return self._split_affinity(group, pending, extra, items, index, blocked, item, place)

    def _carried_room(self, group: Group, extra: Requirements) -> tuple[int, str]:
        """How many of the group's pods may go to the domains ``extra`` pins, given the zone-like spreads of
        groups placed earlier that count them: a domain holding such a spread's pods may rise to maxSkew above
        its minimum (as that spread sees it), whoever the pods are (kube-scheduler checks each carrier against the
        final count of its domain). The group's own spreads are its own to keep. (UNBOUNDED, "") when none binds."""
        room, why = UNBOUNDED, ""
        cached = self._carried_for.get(group.uid)
        if cached is None or cached[0] != len(self.carried):
            matching = [
                (spread, carrier, domains)
                for (spread, uid), (carrier, domains) in self.carried.items()
                if uid != group.uid and group.namespace == carrier.namespace and spread.selector.matches(group.labels)
            ]
            cached = (len(self.carried), matching)
            self._carried_for[group.uid] = cached
        for spread, carrier, domains in cached[1]:
            pin = extra.get(spread.key)
            if pin is None or pin.complement or len(pin.values) != 1:
                continue
            (domain,) = pin.values
            if domain not in domains:
                continue
            tracker = self.tracker(spread.selector, frozenset({carrier.namespace}))
            counts = self.domain_counts(tracker, spread.key, carrier, spread)
            universe = self.domains(carrier, NO_PINS, spread.key, spread)
            few = bool(spread.min_domains and len(universe) < spread.min_domains)
            floor = 0 if few else min((counts.get(d, 0) for d in universe), default=0)
            left = max(0, floor + spread.max_skew - counts.get(domain, 0))
            if left < room:
                room = left
                why = (
                    f"topology spread on {spread.key} (maxSkew {spread.max_skew}, selector "
                    f"{spread.selector.describe()}) of pods already placed in {domain} counts these pods there too"
                )
        return room, why

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
        # The minimum is over every domain the pods' own node affinity allows (as Karpenter's domainMinCount over
        # the pod's own requirement), also those earlier rules keep these pods out of: they are domains all the same.
        domains = self.domains(group, NO_PINS, spread.key, spread)
        if not domains:
            return pending, all_pools(self.pools, f"topology spread on {spread.key}: no domain is available")
        counts = dict.fromkeys(domains, 0)
        for d, n in self.domain_counts(tracker, spread.key, group, spread).items():
            if d in counts:
                counts[d] = n
        pin = extra.get(spread.key)
        closed = {d for d in domains if pin is not None and not pin.has(d)}
        few_domains = bool(spread.min_domains and len(domains) < spread.min_domains)
        if self_match:
            cap = (spread.max_skew, few_domains)
            firm = frozenset(self.new_node_domains(group, group.requirements, extra, spread.key, True))
            pending, reasons = self._fill(
                group, pending, extra, items, index, blocked, place, spread.key, counts, closed, cap, firm
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
        firm: frozenset[str] = frozenset(),
    ) -> tuple[list[str], Reasons]:
        """Fill the domains of ``counts`` not ``closed`` towards an even level (water-filling), the pods counting
        where they go; ``cap``: (maxSkew, fewer domains than minDomains) keeps each at most maxSkew above the
        minimum. Each domain is first probed with one pod, so a domain that cannot take any closes before the
        others are filled; then each gets its share at once. A domain's share counts on the others reaching
        theirs only where a new node can be made (``firm``): other domains (only existing nodes serve them, and
        they may fill up short of their share) count as they stand. ``counts`` and ``closed`` are kept current."""
        reasons: Reasons = {}
        probed: set[str] = set()
        while pending:
            open_domains = sorted(d for d in counts if d not in closed)
            if not open_domains:
                break
            quotas = water_fill(counts, open_domains, len(pending))
            due = {d: q for d, q in quotas.items() if d in firm}  # shares yet to come that will come
            progress = False
            for domain in sorted((d for d in open_domains if quotas[d]), key=lambda d: (counts[d], d)):
                room = UNBOUNDED
                if cap is not None:
                    floor = 0 if cap[1] else min(counts[d] + due.get(d, 0) for d in counts)
                    room = floor + cap[0] - counts[domain]
                take = min(quotas[domain], room, len(pending), 1 if domain not in probed else UNBOUNDED)
                if take <= 0:
                    continue
                probed.add(domain)
                pinned = self._pin(extra, key, domain)
                left, why = self._split(group, pending[:take], pinned, items, index + 1, blocked, place)
                placed = take - len(left)
                counts[domain] += placed
                if domain in due:
                    due[domain] -= placed
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
        """Pin the group's pods to the domains of a rule that counts them (``Counted``). A spread's: water-filled,
        emptiest first; pods that fit in no domain it has (a key no NodePool or node offers) are placed without
        it, as they count nowhere. A self-affinity term's, once its pods opened a domain in this solve: into that
        domain (kube-scheduler lets the first of them bind anywhere only while no pod matches: one of these bound
        elsewhere first would leave them pending), and pods that cannot go there wait; before that, anywhere."""
        if not item.affinity:
            domains = self.domains(group, extra, item.key, None)
            if not domains:
                return self._split(group, pending, extra, items, index + 1, blocked, place)
            counts = dict.fromkeys(domains, 0)
            for d, n in self.domain_counts(item.tracker, item.key, group, None).items():
                if d in counts:
                    counts[d] = n
            return self._fill(group, pending, extra, items, index, blocked, place, item.key, counts, set(), None)
        counts = self.domain_counts(item.tracker, item.key, group, None)
        opened = sorted((d for d, n in counts.items() if n > 0), key=lambda d: (-counts[d], d))
        if not opened:
            return self._split(group, pending, extra, items, index + 1, blocked, place)
        reasons: Reasons = {}
        for domain in opened:
            if pending and _allows(group.requirements, extra, item.key, domain):
                pinned = self._pin(extra, item.key, domain)
                pending, why = self._split(group, pending, pinned, items, index + 1, blocked, place)
                reasons.update(why)
        if pending:
            held = (
                f"pods with pod affinity on {item.key} to {item.tracker.selector.describe()} opened "
                f"{', '.join(opened)} in this plan, and these pods must join them there"
            )
            reasons = {name: f"{held}; {why}" for name, why in reasons.items()} or all_pools(self.pools, held)
        return pending, reasons

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
        tracker = self.affinity_tracker(group, term)
        counts = self.domain_counts(tracker, term.key, group, None)
        # The domains holding matching pods the pods' own node affinity allows (earlier rules' pins narrow where
        # they go among them, not whether they may open a domain of their own).
        reachable = [d for d, n in counts.items() if n > 0 and _allows(group.requirements, NO_PINS, term.key, d)]
        candidates = sorted(
            (d for d in reachable if _allows(group.requirements, extra, term.key, d)), key=lambda d: (-counts[d], d)
        )
        elsewhere = sorted(d for d, n in counts.items() if n > 0 and d not in reachable)
        undecided = not reachable and self._undecided(tracker, term.key, group, NO_PINS)
        # kube-scheduler lets self-affine pods open a domain only while no pod anywhere matches (InterPodAffinity's
        # empty affinityCounts); Karpenter's anyCompatiblePodDomain also lets them when the matching pods are only
        # where their node affinity excludes, and makes a node on which they would stay pending.
        bootstrap = not counts_any(counts) and not undecided and tracker.selects(group.namespace, group.labels)
        if bootstrap:
            # Self-affinity, no matching pod where the pods may go: they open one domain of their own, where every
            # other pending pod the term selects may follow (see ``_split_counted``) if there is one.
            followers = self.followers(tracker)
            candidates = sorted(
                (
                    d
                    for d in self.domains(group, extra, term.key, None)
                    if _allows(group.requirements, extra, term.key, d)
                ),
                key=lambda d: (not all(_allows(alts, NO_PINS, term.key, d) for alts in followers), d),
            )
        if not candidates:
            selector = tracker.selector.describe()
            message = f"pod affinity on {term.key}: no pod matches {selector} in any domain yet"
            if reachable:
                message = f"pod affinity on {term.key}: the domains with pods matching {selector} are ruled out here"
            elif elsewhere:
                message = (
                    f"pod affinity on {term.key}: pods matching {selector} are only in {', '.join(elsewhere)}, which "
                    "its node affinity excludes (kube-scheduler lets it start a domain of its own only while no pod "
                    "matches)"
                )
            elif undecided:
                # kube-scheduler would hold them to wherever that NodeClaim lands (as Karpenter, which counts such
                # a pod nowhere until its node exists: they follow it in a later round).
                message = (
                    f"pod affinity on {term.key}: the pods matching {selector} are on new nodes whose {term.key} "
                    "the launch decides"
                )
            return pending, all_pools(self.pools, message)
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

    def followers(self, tracker: Tracker) -> set[tuple[Requirements, ...]]:
        """The node affinity of the pending pods ``tracker`` selects."""
        if not self._kinds:
            for pod in self._pods:
                kind = self._kinds.setdefault((pod.namespace, tuple(sorted(pod.labels.items())), pod.requirements), pod)
                if kind is pod:
                    for pair in pod.labels.items():
                        self._kinds_by.setdefault(pair, []).append(pod)
        anchor = tracker.selector.anchor()
        kinds = self._kinds.values() if anchor is None else self._kinds_by.get(anchor, ())
        return {pod.requirements for pod in kinds if tracker.selects(pod.namespace, pod.labels)}

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
    def host_caps(self, group: Group) -> tuple[HostCaps, list[Tracker]]:
        """Per-node limits from hostname spread and anti-affinity: (tracker, limit, self-match, targets),
        and the trackers of the group's hostname affinity terms (one for all its required terms)."""
        caps: HostCaps = []
        for spread in group.constraints.spread:
            if spread.key == wk.LABEL_HOSTNAME:
                tracker = self.tracker(spread.selector, frozenset({group.namespace}))
                caps.append((tracker, spread.max_skew, spread.selector.matches(group.labels), None))
        if self.held:
            held = self._held_for.get(group.uid)
            if held is None:
                held = [
                    e for (sel, ns, _), e in self.held.items() if ns == group.namespace and sel.matches(group.labels)
                ]
                self._held_for[group.uid] = held
            # The nodes holding pods that carry a hostname spread: the pods it counts count there too.
            caps.extend((entry.tracker, entry.max_skew, True, entry.held) for entry in held if entry.held)
        affinity: list[Tracker] = []
        for term in group.constraints.affinity:
            if term.key != wk.LABEL_HOSTNAME:
                continue
            tracker = self.affinity_tracker(group, term)
            if term.anti:
                caps.append((tracker, 0, term.selects(group.namespace, group.labels), None))
            elif all(t is not tracker for t in affinity):
                affinity.append(tracker)
        return caps, affinity

    def hostname_affinity(self, group: Group, affinity: list[Tracker]) -> tuple[set[int] | None, bool, str | None]:
        """Where hostname affinity (``affinity``, from ``host_caps``) lets the group go: (the ids of the
        nodes and NodeClaims it may join, None for any; whether its pods must share one new node of
        their own instead (self-affinity, no matching pod placed yet); why it cannot go anywhere, or
        None). Every term holds: the nodes with pods each selects, or, for a term selecting the
        group's own pods and nothing else yet, one node of their own. Pods that other pods' hostname
        self-affinity selects, once those opened a node in this solve, may only join it
        (``_near_hosts``)."""
        allowed = self._near_hosts(group)
        opening = False
        for tracker in affinity:
            hosts = {tid for tid, n in tracker.counts.items() if n > 0}
            if hosts:
                allowed = hosts if allowed is None else allowed & hosts
            elif tracker.selects(group.namespace, group.labels):
                opening = True
            else:
                selector = tracker.selector.describe()
                return None, False, f"pod affinity on {wk.LABEL_HOSTNAME}: no pod matches {selector} on any node yet"
        return allowed, opening and allowed is None, None

    def _near_hosts(self, group: Group) -> set[int] | None:
        """The nodes a group must join because pending pods whose required hostname affinity selects both
        themselves and this group opened them in this solve (see ``Counted``); None when there is none."""
        out: set[int] | None = None
        for rule in self.counting:
            if rule.key != wk.LABEL_HOSTNAME or not rule.tracker.selects(group.namespace, group.labels):
                continue
            own = (t for t in group.constraints.affinity if t.key == rule.key and not t.anti)
            if any(self.affinity_tracker(group, t) is rule.tracker for t in own):
                continue  # the group's own term: its own rule decides
            hosts = {tid for tid, n in rule.tracker.counts.items() if n > 0}
            if hosts:
                out = hosts if out is None else out & hosts
        return out

    def hostname_affinity_full(self, group: Group) -> str:
        """Why pods held to some nodes by hostname affinity are left over once those nodes took what they could."""
        unable = "cannot take them (full, or ruled out by their other constraints)"
        affinity = next((t for t in self.host_caps(group)[1] if any(n > 0 for n in t.counts.values())), None)
        if affinity is None:
            return (
                f"pods whose pod affinity on {wk.LABEL_HOSTNAME} selects these pods opened a node in this plan, and "
                "these must join it (else kube-scheduler might bind them first elsewhere and leave those pending); "
                f"it {unable}"
            )
        mutual = " (the pods select each other: all must share one node)"
        return (
            f"pod affinity on {wk.LABEL_HOSTNAME}: the nodes with pods matching {affinity.selector.describe()} "
            f"{unable}{mutual if affinity.selects(group.namespace, group.labels) else ''}"
        )

    @staticmethod
    def cap(target_id: int, caps: HostCaps) -> int:
        """How many more pods of the group a node or NodeClaim may take under hostname rules
        (``target_id`` -1: a new NodeClaim)."""
        cap = UNBOUNDED
        for tracker, limit, self_match, only in caps:
            if only is not None and target_id not in only:
                continue
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


def pinned(alternatives: Sequence[Requirements], extra: Requirements) -> tuple[Requirements, ...]:
    """The pods' node-affinity alternatives under topology pins and exclusions (``extra``), leaving out those they
    contradict. An intersection with no value left reads as DoesNotExist, which a node without the label meets; but
    a domain pin needs the label, and exclusions only take values away from what the pods allow: such an
    alternative admits no node (kube-scheduler requires a pod's topology keys on its node)."""
    if not len(extra):
        return tuple(alternatives)
    out = []
    for alt in alternatives:
        merged = alt.add(extra)
        if all(_still_possible(merged[key], req, alt.get(key)) for key, req in extra.items()):
            out.append(merged)
    return tuple(out)


def _still_possible(merged: Requirement, pin: Requirement, own: Requirement | None) -> bool:
    if merged.operator != "DoesNotExist":
        return True
    # Nothing left: fine only when the pods themselves want no such label and ``extra`` only excludes values.
    return pin.complement and own is not None and own.operator == "DoesNotExist"


def _allows(alternatives: Sequence[Requirements], extra: Requirements, key: str, domain: str) -> bool:
    """May a pod with these node requirements (and ``extra``) be in ``domain`` of ``key``?"""
    pinned = extra.get(key)
    if pinned is not None and not pinned.has(domain):
        return False
    return any((req := alt.get(key)) is None or req.has(domain) for alt in alternatives)


def counts_any(counts: Mapping[str, int]) -> bool:
    return any(n > 0 for n in counts.values())


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
