"""kube-scheduler's rules over a plan as it will stand after launch: an independent checker for property tests.

``after_launch(inp, result)`` lists every way a plan would fail once its NodeClaims are nodes. Each NodeClaim
becomes a node in one *outcome* the launch may pick: one of its instance types, in an available offering of one of
its zones and a capacity type (and zone id, reservation) its requirements allow; that outcome gives the node its
labels (the type's, the NodePool's, the offering's, a value of each custom label its requirements ask for, and a
hostname of its own), taints (the NodePool's) and allocatable. Existing nodes are what they are. The cloud picks
each outcome, so every rule must hold whichever outcome each launch picks (each independently):

* on each node, in every outcome: the pods (and, on a new node, the DaemonSet pods that would run there) fit its
  allocatable; every pod's node selector / required node affinity and tolerations admit it; host ports do not
  clash; no pod goes to a cordoned node;
* topology spread (DoNotSchedule): in the final state the domain of each pod carrying the constraint holds at most
  maxSkew more matching pods than the least of kube-scheduler's domains, which are the values of the nodes (after
  launch) the constraint's nodeAffinityPolicy / nodeTaintsPolicy admit, counting the pods of the carrier's namespace
  its selector picks on those nodes; fewer domains than minDomains make the minimum 0; the carrier's own node must
  have the key. (Counting the final state is enough: binding lowest domain first never breaks the skew on the way.)
* required pod affinity: kube-scheduler binds a carrier only next to a matching pod, or anywhere when no pod in the
  cluster matches the term and the carrier matches it itself. Pods bind in any order, and pending pods are retried,
  so: when some pod matches the term without carrying it (it may bind first), every carrier's domain must surely
  hold one, or a carrier that is itself satisfied; when none does, all carriers must surely share one domain (the
  first one bound opens it) and one of them must match the term;
* required pod anti-affinity, both ways, running pods included: no pod a term selects may share a domain with the
  pod carrying it, in any outcome.

"Surely in domain v": the node's only possible value is v, or the pods are on the same node.

A node on its way out (``NodeInput.leaving``) is gone after launch, with its pods. Not modelled: existing nodes'
labels are taken as they are (an in-flight NodeClaim without a zone label stays without one), and preferences
(weighted terms, ScheduleAnyway) are not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nodeflow.api import labels as wk
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling.requirements import Requirements, normalize_key
from nodeflow.scheduling.taints import Taint, Toleration, untolerated
from nodeflow.scheduling.types import (
    AffinityTerm,
    HostPort,
    NodeClaimPlan,
    NodePoolInput,
    PodInput,
    SchedulingInput,
    SchedulingResult,
    TopologySpread,
)

__all__ = ["after_launch", "node_labels"]

_EPHEMERAL_TAINTS = frozenset({wk.TAINT_UNREGISTERED, "node.kubernetes.io/not-ready"})
_WILDCARD_IPS = frozenset({"", "0.0.0.0", "::"})


# A spread as one group of carriers sees it: (namespace, constraint, own node requirements, tolerations).
Spread = tuple[str, TopologySpread, tuple[Requirements, ...], tuple[Toleration, ...]]


@dataclass(frozen=True)
class Outcome:
    """One node a launch may make (or an existing node as it is)."""

    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Mapping[str, int]


@dataclass
class Host:
    """A node after launch: an existing node or a NodeClaim, with every outcome it may have."""

    name: str
    outcomes: list[Outcome]
    new: list[PodInput] = field(default_factory=list)
    running: list[tuple[str, Mapping[str, str], tuple[AffinityTerm, ...]]] = field(default_factory=list)
    used: Mapping[str, int] = field(default_factory=dict)  # already requested (existing nodes)
    ports: frozenset[HostPort] = frozenset()
    claim: bool = False
    cordoned: bool = False

    def values(self, key: str) -> frozenset[str | None]:
        return frozenset(o.labels.get(key) for o in self.outcomes)


@dataclass(frozen=True)
class Member:
    """A pod that inter-pod rules count: newly placed or already running."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    host: int
    new: bool
    anti: tuple[AffinityTerm, ...]


def node_labels(it: InstanceType, offering: Offering, reqs: Requirements, pool: NodePoolInput) -> dict[str, str]:
    """The labels a node launched with this type and offering for a NodeClaim with these requirements carries.

    Like Karpenter (``Requirements.Labels()``), the node also gets a value satisfying each of the claim's
    requirements on a custom (not well-known) label: a pod's ``NotIn`` puts such a key on the claim, and a later
    pod's ``In`` on the same key then narrows it to the value the node gets.
    """
    labels = {
        **it.labels,
        **pool.labels,
        wk.LABEL_ZONE: offering.zone,
        wk.LABEL_ZONE_ID: offering.zone_id,
        wk.LABEL_CAPACITY_TYPE: offering.capacity_type,
        wk.LABEL_NODEPOOL: pool.name,
    }
    for key, req in reqs.items():
        value = req.any_value()
        if key not in labels and key not in wk.WELL_KNOWN_LABELS and value is not None:
            labels[key] = value
    return labels


def _launchable(it: InstanceType, claim: NodeClaimPlan) -> list[Offering]:
    """The offerings of ``it`` a launch of ``claim`` may use: available, in its zones, allowed by its requirements."""
    reqs = claim.requirements
    ctype, zone_id = reqs.get(wk.LABEL_CAPACITY_TYPE), reqs.get(wk.LABEL_ZONE_ID)
    reservation = reqs.get(wk.LABEL_CAPACITY_RESERVATION_ID)
    return [
        o
        for o in it.offerings
        if o.available
        and o.zone in claim.zones
        and (ctype is None or ctype.has(o.capacity_type))
        and (zone_id is None or zone_id.has(o.zone_id))
        and (reservation is None or reservation.has(o.reservation_id))
    ]


def _satisfied(labels: Mapping[str, str], alternative: Requirements) -> bool:
    for key, req in alternative.items():
        value = labels.get(key)
        if value is None:
            value = next((v for k, v in labels.items() if normalize_key(k) == key), None)
        if not (req.allows_absent() if value is None else req.has(value)):
            return False
    return True


def _admits(labels: Mapping[str, str], alternatives: Sequence[Requirements]) -> bool:
    return any(_satisfied(labels, alt) for alt in alternatives)


def _clash(a: HostPort, b: HostPort) -> bool:
    return a[1:] == b[1:] and (a[0] == b[0] or a[0] in _WILDCARD_IPS or b[0] in _WILDCARD_IPS)


def after_launch(inp: SchedulingInput, result: SchedulingResult) -> list[str]:
    """Every rule of kube-scheduler the plan breaks in some launch outcome (empty: it holds in all of them)."""
    return _Checker(inp, result).run()


class _Checker:
    def __init__(self, inp: SchedulingInput, result: SchedulingResult) -> None:
        self.inp = inp
        self.problems: list[str] = []
        pods = {p.key: p for p in inp.pods}
        pools = {p.name: p for p in inp.nodepools}
        self.hosts: list[Host] = []
        for index, claim in enumerate(result.node_claims):
            pool = pools[claim.nodepool]
            types = {it.name: it for it in pool.instance_types}
            outcomes = [
                Outcome(
                    {**node_labels(it, o, claim.requirements, pool), wk.LABEL_HOSTNAME: f"nodeclaim-{index}"},
                    pool.taints,
                    it.allocatable,
                )
                for it in (types[name] for name in claim.instance_types)
                for o in _launchable(it, claim)
            ]
            if not outcomes:
                self.problems.append(f"nodeclaim-{index}: no launch outcome (type and offering) it may use")
            host = Host(f"nodeclaim-{index}", outcomes, [pods[k] for k in claim.pods], claim=True)
            self.hosts.append(host)
        placed = {e.name: e.pods for e in result.existing}
        for node in inp.nodes:
            if node.leaving and node.name not in placed:
                continue  # on its way out: gone after launch, with its pods
            initializing = node.in_flight or (
                node.nodepool is not None and node.labels.get(wk.LABEL_INITIALIZED) != "true"
            )
            taints = tuple(t for t in node.taints if not (initializing and t.key in _EPHEMERAL_TAINTS))
            labels = {**node.labels, wk.LABEL_HOSTNAME: node.labels.get(wk.LABEL_HOSTNAME) or node.name}
            host = Host(
                f"node {node.name}",
                [Outcome(labels, taints, node.allocatable)],
                [pods[k] for k in placed.get(node.name, ())],
                [(r.namespace, r.labels, r.anti_affinity) for r in node.running],
                node.requested,
                node.host_ports,
                cordoned=not node.schedulable,
            )
            self.hosts.append(host)
        self.members: list[Member] = []
        for index, host in enumerate(self.hosts):
            for pod in host.new:
                anti = tuple(t for t in pod.affinity if t.anti and t.weight == 0)
                self.members.append(Member(pod.key, pod.namespace, pod.labels, index, True, anti))
            for i, (namespace, running_labels, anti) in enumerate(host.running):
                name = f"{host.name}:running[{i}]"
                self.members.append(Member(name, namespace, running_labels, index, False, anti))

    def run(self) -> list[str]:
        for host in self.hosts:
            self._node_local(host)
        self._spreads()
        self._affinities()
        self._anti_affinities()
        return self.problems

    def _fail(self, message: str) -> None:
        self.problems.append(message)

    # -- node-local rules ------------------------------------------------------------------------------------------
    def _node_local(self, host: Host) -> None:
        if not host.new:
            return
        if host.cordoned:
            self._fail(f"{host.name}: cordoned, yet given {[p.key for p in host.new]}")
        ports: list[tuple[HostPort, str]] = [(port, "pods already there") for port in host.ports]
        for pod in host.new:
            for port in pod.host_ports:
                other = next((owner for taken, owner in ports if _clash(port, taken)), None)
                if other is not None:
                    self._fail(f"{host.name}: {pod.key} binds host port {port}, as {other} does")
            ports.extend((port, pod.key) for port in pod.host_ports)
        added: dict[str, int] = {}
        for pod in host.new:
            for name, value in pod.requests.items():
                added[name] = added.get(name, 0) + value
        seen: set[tuple[object, ...]] = set()
        for outcome in host.outcomes:
            signature = (
                tuple(sorted(outcome.labels.items())),
                outcome.taints,
                tuple(sorted(outcome.allocatable.items())),
            )
            if signature in seen:
                continue
            seen.add(signature)
            where = f"{host.name} as {outcome.labels.get(wk.LABEL_INSTANCE_TYPE, '?')} in {outcome.labels.get(wk.LABEL_ZONE)}"
            used = dict(host.used)
            if host.claim:
                for daemon in self.inp.daemon_pods:
                    if untolerated(daemon.tolerations, outcome.taints) is None and _admits(
                        outcome.labels, daemon.requirements
                    ):
                        for name, value in daemon.requests.items():
                            used[name] = used.get(name, 0) + value
            for name, value in sorted(added.items()):
                total = used.get(name, 0) + value
                if value > 0 and total > outcome.allocatable.get(name, 0):
                    self._fail(f"{where}: {name} {total} requested, {outcome.allocatable.get(name, 0)} allocatable")
            for pod in host.new:
                if not _admits(outcome.labels, pod.requirements):
                    self._fail(f"{where}: {pod.key}'s node affinity does not admit the node")
                taint = untolerated(pod.tolerations, outcome.taints)
                if taint is not None:
                    self._fail(f"{where}: {pod.key} does not tolerate {taint}")

    # -- topology spread ---------------------------------------------------------------------------------------------
    def _spreads(self) -> None:
        carriers: dict[Spread, list[tuple[PodInput, int]]] = {}
        for index, host in enumerate(self.hosts):
            for pod in host.new:
                own = pod.requirements if pod.own_requirements is None else pod.own_requirements
                for spread in pod.spread:
                    if not spread.schedule_anyway:
                        view = (pod.namespace, spread, own, pod.tolerations)
                        carriers.setdefault(view, []).append((pod, index))
        for (namespace, spread, own, tolerations), placed in carriers.items():
            self._spread(namespace, spread, own, tolerations, placed)

    def _spread(
        self,
        namespace: str,
        spread: TopologySpread,
        own: Sequence[Requirements],
        tolerations: Sequence[Toleration],
        placed: list[tuple[PodInput, int]],
    ) -> None:
        key = spread.key
        # Per node: the domains it may count in for this constraint (None: not counted), and its matching pods.
        values: list[frozenset[str | None]] = []
        for host in self.hosts:
            options: set[str | None] = set()
            for o in host.outcomes:
                counted = (not spread.honor_node_affinity or _admits(o.labels, own)) and (
                    not spread.honor_node_taints or untolerated(tolerations, o.taints) is None
                )
                options.add(o.labels.get(key) if counted else None)
            values.append(frozenset(options))
        counts = [0] * len(self.hosts)
        for member in self.members:
            if member.namespace == namespace and spread.selector.matches(member.labels):
                counts[member.host] += 1
        universe = {v for vs in values for v in vs if v is not None}
        label = f"topology spread {key} maxSkew {spread.max_skew} selector {spread.selector.describe()}"
        reported: set[tuple[int, str]] = set()
        for pod, index in placed:
            if None in self.hosts[index].values(key):
                self._fail(f"{pod.key} on {self.hosts[index].name}: {label}: the node may lack the label {key}")
            for domain in sorted(v for v in values[index] if v is not None):
                if (index, domain) in reported:
                    continue
                skew, low = _worst_skew(values, counts, index, domain, universe, spread.min_domains)
                if skew > spread.max_skew:
                    reported.add((index, domain))
                    self._fail(
                        f"{pod.key} on {self.hosts[index].name}: {label}: if it lands in {domain}, skew {skew} "
                        f"against {low}"
                    )

    # -- required pod affinity -----------------------------------------------------------------------------------------
    def _affinities(self) -> None:
        carriers: dict[tuple[AffinityTerm, ...], list[tuple[PodInput, int]]] = {}
        for index, host in enumerate(self.hosts):
            for pod in host.new:
                terms = tuple(t for t in pod.affinity if not t.anti and t.weight == 0)
                if terms:
                    carriers.setdefault(terms, []).append((pod, index))
        for terms, placed in carriers.items():
            self._affinity(terms, placed)

    def _surely(self, index: int, key: str) -> str | None:
        """The one value of ``key`` a node may have (None: several, or the label may be missing)."""
        values = self.hosts[index].values(key)
        if len(values) == 1:
            (value,) = values
            return value
        return None

    def _affinity(self, terms: tuple[AffinityTerm, ...], placed: list[tuple[PodInput, int]]) -> None:
        """kube-scheduler counts, per topology pair, the pods that match ALL of the carrier's terms, on nodes
        with the term's key; a carrier needs a count in its node's domain for every term, or an empty count
        (no such pod anywhere) and to match its terms itself."""
        keys = sorted({t.key for t in terms})
        label = "pod affinity " + "; ".join(f"{t.key} selector {t.selector.describe()}" for t in terms)

        def matches(namespace: str, labels: Mapping[str, str]) -> bool:
            return all(t.selects(namespace, labels) for t in terms)

        for pod, index in placed:
            for key in keys:
                if None in self.hosts[index].values(key):
                    self._fail(f"{pod.key} on {self.hosts[index].name}: {label}: the node may lack the label {key}")
        carrying = {pod.key for pod, _ in placed}
        seeds = {
            m.host
            for m in self.members
            if m.name not in carrying
            and matches(m.namespace, m.labels)
            and any(self.hosts[m.host].values(key) - {None} for key in keys)
        }
        if seeds:
            unsatisfied = self._unsatisfied(placed, seeds, keys, matches)
        else:
            openers = {i for pod, i in placed if matches(pod.namespace, pod.labels)}
            if not openers:
                self._fail(f"{placed[0][0].key}: {label}: no pod matches the terms")
                return
            # Any carrier matching its terms may bind first and open the domains the rest must join.
            unsatisfied = set()
            for opener in sorted(openers):
                unsatisfied |= self._unsatisfied(placed, {opener}, keys, matches)
        for pod, index in placed:
            if index in unsatisfied:
                where = ", ".join(f"{k}={_show(self.hosts[index].values(k))}" for k in keys)
                opened = "" if seeds else " (none else matches: the first carrier bound opens the domain)"
                self._fail(f"{pod.key} on {self.hosts[index].name}: {label}: {where} may hold no matching pod{opened}")

    def _unsatisfied(
        self,
        placed: list[tuple[PodInput, int]],
        providers: set[int],
        keys: Sequence[str],
        matches: Callable[[str, Mapping[str, str]], bool],
    ) -> set[int]:
        """The nodes of carriers that may end up without a matching pod in their domain, given the nodes whose
        matching pods bind first (``providers``); a satisfied carrier that matches the terms provides too."""
        providers = set(providers)
        satisfied: set[int] = set()
        changed = True
        while changed:
            changed = False
            for pod, index in placed:
                if index in satisfied:
                    continue
                if all(
                    index in providers or all(any(self._surely(y, key) == v for y in providers) for v in values)
                    for key in keys
                    if (values := self.hosts[index].values(key))
                ):
                    satisfied.add(index)
                    changed = True
                if index in satisfied and index not in providers and matches(pod.namespace, pod.labels):
                    providers.add(index)
                    changed = True
        return {index for _, index in placed} - satisfied

    # -- required pod anti-affinity ------------------------------------------------------------------------------------
    def _anti_affinities(self) -> None:
        reported: set[tuple[str, str]] = set()
        for carrier in self.members:
            for term in carrier.anti:
                near = self.hosts[carrier.host].values(term.key) - {None}
                for other in self.members:
                    if other is carrier or not (carrier.new or other.new):
                        continue
                    if not term.selects(other.namespace, other.labels):
                        continue
                    shared = near & self.hosts[other.host].values(term.key)
                    pair = (min(carrier.name, other.name), max(carrier.name, other.name))
                    if shared and pair not in reported:
                        reported.add(pair)
                        self._fail(
                            f"{carrier.name}: pod anti-affinity {term.key} selector {term.selector.describe()}: "
                            f"{other.name} may share {sorted(v for v in shared if v is not None)[0]}"
                        )


def _worst_skew(
    values: Sequence[frozenset[str | None]],
    counts: Sequence[int],
    carrier: int,
    domain: str,
    universe: Iterable[str],
    min_domains: int | None,
) -> tuple[int, str]:
    """The largest skew a carrier on node ``carrier``, landed in ``domain``, may see over the outcomes of every
    node (each picked independently), and the domain it is against. For each other domain ``low`` it may be
    measured against: every node that may count in ``domain`` with matching pods does (the most there), every node
    that may stay out of ``low`` does, and ``low`` must exist (some node counts in it): a node without matching
    pods that may be there is, else the node whose move there costs least."""
    top = sum(c for c, vs in zip(counts, values, strict=True) if domain in vs)
    worst, against = 0, domain
    for low in sorted(set(universe) - {domain}):
        at_low, exists, cost = 0, False, None
        for index, (count, vs) in enumerate(zip(counts, values, strict=True)):
            if index == carrier or low not in vs:
                continue
            if count == 0 or vs == {low}:
                exists = True
                at_low += count
                continue
            # Matching pods that would rather be elsewhere: in ``domain`` (moving costs 2x), or out of ``low``.
            move = 2 * count if domain in vs else count
            cost = move if cost is None else min(cost, move)
        if not exists:
            if cost is None:
                continue
            at_low += cost  # (both ways the skew shrinks by the cost)
        if top - at_low > worst:
            worst, against = top - at_low, low
    if min_domains is not None and _fewest_domains(values, carrier, domain) < min_domains and top > worst:
        worst, against = top, f"0 (fewer domains than minDomains {min_domains})"
    return worst, against


def _fewest_domains(values: Sequence[frozenset[str | None]], carrier: int, domain: str) -> int:
    """How few domains the nodes may end up in (greedy: a node joins a domain already there when it may)."""
    chosen = {domain}
    rest = []
    for index, vs in enumerate(values):
        if index == carrier or None in vs:
            continue
        if len(vs) == 1:
            chosen |= {v for v in vs if v is not None}
        else:
            rest.append(vs)
    for vs in sorted(rest, key=len):
        if not vs & chosen:
            chosen.add(min(v for v in vs if v is not None))
    return len(chosen)


def _show(values: Iterable[str | None]) -> str:
    return ", ".join(sorted(v or "<no label>" for v in values))
