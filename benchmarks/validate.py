"""An independent checker of solver output: ``check_result(inp, result) -> list[str]``.

It answers one question: *could the cluster really run this plan?* It does not look at how the
solver works; it re-derives everything from the ``SchedulingInput`` and the
``SchedulingResult`` alone, with deliberately simple (slow but obvious) code. An empty list
means the plan is valid. Used by the benchmarks and by tests.

What is checked
---------------

1. Accounting: every pending pod is placed exactly once (on a new NodeClaim or an existing
   node) or listed as unschedulable; no unknown pod appears; a pod with an ``error`` is
   not placed.
2. NodeClaims: the NodePool exists and has no error; every listed instance type belongs
   to the NodePool and can be bought with the claim's capacity type in one of its zones; the
   price is that of the first (cheapest) type; the pods' requests plus the DaemonSet overhead
   fit the allocatable of EVERY listed type (any of them may be launched); the declared
   ``requests`` cover the pods; host ports do not clash.
3. Existing nodes: the node exists and is schedulable; what it already runs plus the new pods
   fit its allocatable; host ports do not clash.
4. Node requirements: for every placed pod, one of its node-affinity alternatives is met by
   the node (existing node: its labels; NodeClaim: every listed instance type, its capacity
   type, EVERY zone it may land in, its NodePool's labels), and the NodePool's own
   requirements hold as well; the pod tolerates the node's / NodePool's taints.
5. Required inter-pod constraints of placed pods (preferred ones, weight > 0 or
   ``ScheduleAnyway``, are not checked):

   * topology spread (``DoNotSchedule``): see ``_check_spread``;
   * required pod affinity: see ``_check_affinity``;
   * required pod anti-affinity, both directions and including pods already running on
     existing nodes: see ``_check_anti_affinity``.

Topology domains
----------------

A *location* is a NodeClaim of the plan or an existing node. Its domain for a topology key is
a set of possible values:

* existing node: the value of its label (``kubernetes.io/hostname`` falls back to the node
  name); no label means the node is in no domain for that key;
* NodeClaim, ``kubernetes.io/hostname``: its own domain (each new node is one host);
* NodeClaim, ``topology.kubernetes.io/zone``: the zones it may land in (``plan.zones``, narrowed
  by a zone requirement);
* NodeClaim, ``karpenter.sh/capacity-type``: its capacity type;
* NodeClaim, any other key: its requirements' single value, or the labels of its instance types.

A domain is *pinned* when exactly one value is possible. A pod whose spread or affinity
depends on a domain that is not pinned is a violation: the launch could pick any of them.

Eligible domains of a topology spread (the ones whose minimum defines the skew) are the values
the pod could be placed in: those of existing nodes that match the pod's node requirements
(``nodeAffinityPolicy: Honor``) and, with ``nodeTaintsPolicy: Honor``, whose taints it
tolerates; plus the values NodePools could launch into for the pod (zones and capacity types of
the allowed offerings of matching instance types). For ``kubernetes.io/hostname`` a NodePool
that can serve the pod adds "a new empty node", so the minimum is 0 there.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nodeflow.api import labels as wk
from nodeflow.api.quantity import format_milli
from nodeflow.catalog.model import InstanceType, Offering
from nodeflow.scheduling.requirements import Requirement, Requirements, normalize_key
from nodeflow.scheduling.taints import Taint, untolerated
from nodeflow.scheduling.types import (
    AffinityTerm,
    HostPort,
    NodeClaimPlan,
    NodeInput,
    NodePoolInput,
    PodInput,
    SchedulingInput,
    SchedulingResult,
    Selector,
    TopologySpread,
)

__all__ = ["cheapest_offers", "check_result", "effective_pool_requirements"]

# Labels a new node takes from its offering rather than from its instance type.
_OFFERING_KEYS = frozenset({wk.LABEL_ZONE, wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE_ID})
# Taints that only exist while a node starts; not held against pods for nodes being launched.
_EPHEMERAL_TAINTS = frozenset(
    {
        wk.TAINT_UNREGISTERED,
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
    }
)
# The "new empty node" domain of a hostname spread: always possible, always empty.
_NEW_NODE = "<new node>"
_PRICE_TOLERANCE = 1e-9

Domain = frozenset[str]  # the values a location may take for one topology key


@dataclass(slots=True)
class _Location:
    """Where pods run: a NodeClaim of the plan or an existing node."""

    name: str
    claim: NodeClaimPlan | None = None
    claim_index: int = -1
    node: NodeInput | None = None
    pool: NodePoolInput | None = None
    new_pods: list[PodInput] = field(default_factory=list)


@dataclass(slots=True)
class _Member:
    """A pod that counts for inter-pod constraints: newly placed or already running."""

    namespace: str
    labels: Mapping[str, str]
    location: int
    new: bool
    name: str  # the pod key, or "<node>:running[i]"
    anti: tuple[AffinityTerm, ...] = ()  # required anti-affinity terms it carries


class _Classes:
    """Members grouped by (namespace, labels): a selector is evaluated once per group.

    Real clusters (and the benchmarks) have thousands of identical replicas, so this turns
    "every term x every pod" into "every term x every distinct label set".
    """

    def __init__(self, members: Sequence[_Member]) -> None:
        groups: dict[tuple[str, frozenset[tuple[str, str]]], list[_Member]] = defaultdict(list)
        for member in members:
            groups[(member.namespace, frozenset(member.labels.items()))].append(member)
        self.groups = [(ns, dict(labels), group) for (ns, labels), group in groups.items()]

    def selected_by(self, term: AffinityTerm) -> Iterable[_Member]:
        for namespace, labels, group in self.groups:
            if term.selects(namespace, labels):
                yield from group

    def matching(self, namespace: str, selector: Selector) -> Iterable[_Member]:
        for ns, labels, group in self.groups:
            if ns == namespace and selector.matches(labels):
                yield from group


def check_result(inp: SchedulingInput, result: SchedulingResult) -> list[str]:
    """Every way ``result`` breaks a rule of ``inp``; an empty list when the plan is valid."""
    return _Checker(inp, result).run()


class _Checker:
    def __init__(self, inp: SchedulingInput, result: SchedulingResult) -> None:
        self.inp = inp
        self.result = result
        self.violations: list[str] = []
        self.pods = {p.key: p for p in inp.pods}
        self.pools = {p.name: p for p in inp.nodepools}
        self.nodes = {n.name: n for n in inp.nodes}
        self.locations: list[_Location] = []
        self._domain_cache: dict[tuple[int, str], Domain | None] = {}
        self._eligible_cache: dict[tuple[object, ...], set[str]] = {}

    def run(self) -> list[str]:
        self._check_accounting()
        for index, location in enumerate(self.locations):
            if location.claim is not None:
                self._check_claim(index, location)
            else:
                self._check_node(location)
        members = _Classes(self._members())
        self._check_spread(members)
        self._check_affinity(members)
        self._check_anti_affinity(members)
        return self.violations

    def _fail(self, message: str) -> None:
        self.violations.append(message)

    # -- 1. accounting -----------------------------------------------------------------------
    def _check_accounting(self) -> None:
        seen: dict[str, str] = {}  # pod key -> where it went

        def record(key: str, where: str) -> PodInput | None:
            if key not in self.pods:
                self._fail(f"{where}: pod {key} is not a pending pod of the input")
                return None
            if key in seen:
                self._fail(f"pod {key} appears twice: {seen[key]} and {where}")
                return None
            seen[key] = where
            return self.pods[key]

        for i, claim in enumerate(self.result.node_claims):
            cheapest = claim.instance_types[0] if claim.instance_types else "no type"
            where = f"nodeclaim[{i}] ({claim.nodepool}/{cheapest})"
            location = _Location(where, claim=claim, claim_index=i, pool=self.pools.get(claim.nodepool))
            for key in claim.pods:
                pod = record(key, where)
                if pod is not None:
                    location.new_pods.append(pod)
            self.locations.append(location)
        by_node: dict[str, _Location] = {}
        for placement in self.result.existing:
            where = f"node {placement.name}"
            node = self.nodes.get(placement.name)
            if node is None:
                self._fail(f"{where}: no such node in the input (pods {list(placement.pods)[:3]})")
                continue
            if node.name not in by_node:  # a node listed twice is still one node
                by_node[node.name] = _Location(where, node=node)
                self.locations.append(by_node[node.name])
            for key in placement.pods:
                pod = record(key, where)
                if pod is not None:
                    by_node[node.name].new_pods.append(pod)
        for unschedulable in self.result.unschedulable:
            record(unschedulable.pod, "unschedulable")
        # Nodes that receive no new pod still count for topology (their running pods).
        for node in self.inp.nodes:
            if node.name not in by_node:
                self.locations.append(_Location(f"node {node.name}", node=node))

        missing = [key for key in self.pods if key not in seen]
        if missing:
            self._fail(f"{len(missing)} pod(s) neither placed nor unschedulable, e.g. {missing[:5]}")
        for key, where in seen.items():
            pod = self.pods.get(key)
            if pod is not None and pod.error and where != "unschedulable":
                self._fail(f"pod {key} has error {pod.error!r} but was placed on {where}")

    # -- 2. NodeClaims -----------------------------------------------------------------------
    def _check_claim(self, index: int, location: _Location) -> None:
        claim = location.claim
        assert claim is not None
        where = location.name
        pool = location.pool
        if pool is None:
            self._fail(f"{where}: NodePool {claim.nodepool!r} is not in the input")
            return
        if pool.error:
            self._fail(f"{where}: NodePool {pool.name} has an error ({pool.error}) and cannot launch")
        if not claim.instance_types:
            self._fail(f"{where}: lists no instance type")
            return
        by_name = {it.name: it for it in pool.instance_types}
        types: list[InstanceType] = []
        for name in claim.instance_types:
            it = by_name.get(name)
            if it is None:
                self._fail(f"{where}: instance type {name} is not one of NodePool {pool.name}'s")
            else:
                types.append(it)
        if not types:
            return
        zones = self._domain(index, wk.LABEL_ZONE) or frozenset()
        if not zones:
            self._fail(f"{where}: no zone to launch into")

        # Every listed type must be buyable under the claim's zone / capacity-type requirements
        # (a fallback type may use another capacity type the requirements allow).
        ctypes = _claim_capacity_types(claim)
        for it in types:
            if not any(o.available and o.capacity_type in ctypes and o.zone in zones for o in it.offerings):
                self._fail(f"{where}: {it.name} has no available {sorted(ctypes)} offering in {sorted(zones)}")
        first_prices = [o.price for o in types[0].offerings if _offering_ok(o, claim.capacity_type, zones)]
        if first_prices and abs(min(first_prices) - claim.price) > _PRICE_TOLERANCE:
            self._fail(
                f"{where}: price {claim.price} is not the cheapest offering of {types[0].name} ({min(first_prices)})"
            )

        # Capacity: the pods plus the DaemonSets that would run there fit every listed type.
        pods_total = _sum(p.requests for p in location.new_pods)
        daemons = [d for d in self.inp.daemon_pods if self._daemon_runs_on_claim(d, pool, claim)]
        needed = _sum([pods_total, *(d.requests for d in daemons)])
        for name, value in sorted(pods_total.items()):
            if value > claim.requests.get(name, 0):
                self._fail(
                    f"{where}: declared requests {name}={format_milli(claim.requests.get(name, 0), name)} "
                    f"do not cover its pods ({format_milli(value, name)})"
                )
        for it in types:
            for name, value in sorted(needed.items()):
                if value > 0 and value > it.allocatable.get(name, 0):
                    self._fail(
                        f"{where}: over-committed on {it.name}: {name} needs {format_milli(value, name)} "
                        f"(pods + daemonsets), allocatable {format_milli(it.allocatable.get(name, 0), name)}"
                    )
        self._check_ports(where, [], location.new_pods)

        # Requirements and taints: the NodePool's own, then every pod's.
        pool_reqs = effective_pool_requirements(pool)
        problem = self._claim_meets(claim, types, pool, pool_reqs)
        if problem:
            self._fail(f"{where}: does not meet its NodePool's requirements: {problem}")
        verdicts: dict[tuple[object, ...], str | None] = {}
        for pod in location.new_pods:
            signature = (pod.requirements, pod.tolerations)
            if signature not in verdicts:
                verdicts[signature] = self._pod_fits_claim(pod, claim, types, pool)
            if verdicts[signature]:
                self._fail(f"{where}: pod {pod.key} {verdicts[signature]}")

    def _pod_fits_claim(
        self, pod: PodInput, claim: NodeClaimPlan, types: Sequence[InstanceType], pool: NodePoolInput
    ) -> str | None:
        taint = untolerated(pod.tolerations, pool.taints)
        if taint is not None:
            return f"does not tolerate NodePool taint {taint}"
        problems = [self._claim_meets(claim, types, pool, alt) for alt in pod.requirements]
        if all(problems):
            return "node requirements not met: " + "; ".join(p for p in problems if p)
        return None

    def _claim_meets(
        self, claim: NodeClaimPlan, types: Sequence[InstanceType], pool: NodePoolInput, reqs: Requirements
    ) -> str | None:
        """Does the node this claim launches (whichever listed type and zone) satisfy ``reqs``?"""
        claim_labels = claim.requirements.labels()
        zones = frozenset(claim.zones)
        zone_req = claim.requirements.get(wk.LABEL_ZONE)
        if zone_req is not None and not zone_req.complement:
            zones = zones & zone_req.values if zones else zone_req.values
        for key, req in reqs.items():
            if key == wk.LABEL_ZONE:
                bad = sorted(z for z in zones if not req.has(z))
                if bad or not zones:
                    return f"{key} {req.describe()} but the node may land in {sorted(zones)}"
            elif key == wk.LABEL_CAPACITY_TYPE:
                ctypes = _claim_capacity_types(claim)
                if not all(req.has(c) for c in ctypes):
                    return f"{key} {req.describe()} but the node may be {sorted(ctypes)}"
            elif key == wk.LABEL_NODEPOOL:
                if not req.has(claim.nodepool):
                    return f"{key} {req.describe()} but NodePool is {claim.nodepool}"
            elif key == wk.LABEL_HOSTNAME:
                if not req.complement:
                    return f"{key} {req.describe()} cannot hold for a node not yet launched"
            elif key == wk.LABEL_ZONE_ID:
                ids = {o.zone_id for it in types for o in it.offerings if _offering_ok(o, claim.capacity_type, zones)}
                if any(not req.has(i) for i in ids):
                    return f"{key} {req.describe()} but zone ids {sorted(ids)} are possible"
            elif any(key in it.labels for it in types) or key in wk.WELL_KNOWN_LABELS:
                # A label of the instance type: every listed type must satisfy it.
                for it in types:
                    if not _label_ok(req, it.labels.get(key)):
                        return f"{key} {req.describe()} but {it.name} has {it.labels.get(key, '<none>')}"
            else:
                # A custom label: the node gets it from the NodePool (labels or requirements).
                value = pool.labels.get(key, claim_labels.get(key))
                own = claim.requirements.get(key)
                if value is None and own is not None and len(own.intersection(req)) > 0:
                    continue  # e.g. Exists: the node gets some value both allow
                if not _label_ok(req, value):
                    return f"{key} {req.describe()} but the node's label is {value or '<none>'}"
        return None

    def _daemon_runs_on_claim(self, daemon: PodInput, pool: NodePoolInput, claim: NodeClaimPlan) -> bool:
        """A DaemonSet pod runs on the node if it tolerates the taints and its requirements allow the node."""
        if untolerated(daemon.tolerations, pool.taints) is not None:
            return False
        return any(claim.requirements.compatible(alt, _ALLOW_UNDEFINED) is None for alt in daemon.requirements)

    # -- 3. existing nodes -------------------------------------------------------------------
    def _check_node(self, location: _Location) -> None:
        node = location.node
        assert node is not None
        if not location.new_pods:
            return
        where = location.name
        if not node.schedulable:
            self._fail(f"{where}: is not schedulable (cordoned) but received {len(location.new_pods)} pod(s)")
        used = _sum([node.requested, *(p.requests for p in location.new_pods)])
        added = _sum(p.requests for p in location.new_pods)
        for name, value in sorted(used.items()):
            if added.get(name, 0) > 0 and value > node.allocatable.get(name, 0):
                self._fail(
                    f"{where}: over-committed: {name} {format_milli(value, name)} requested "
                    f"(running + new), allocatable {format_milli(node.allocatable.get(name, 0), name)}"
                )
        self._check_ports(where, [node.host_ports], location.new_pods)
        taints = self._node_taints(node)
        for pod in location.new_pods:
            taint = untolerated(pod.tolerations, taints)
            if taint is not None:
                self._fail(f"{where}: pod {pod.key} does not tolerate taint {taint}")
            if not any(_labels_meet(node.labels, alt) is None for alt in pod.requirements):
                problem = "; ".join(p for alt in pod.requirements if (p := _labels_meet(node.labels, alt)))
                self._fail(f"{where}: pod {pod.key} node requirements not met: {problem}")

    def _node_taints(self, node: NodeInput) -> tuple[Taint, ...]:
        """A node still starting up does not hold its startup / not-ready taints against pods."""
        initializing = node.in_flight or (node.nodepool is not None and node.labels.get(wk.LABEL_INITIALIZED) != "true")
        if not initializing:
            return node.taints
        startup = {t.key for p in self.inp.nodepools if p.name == node.nodepool for t in p.startup_taints}
        return tuple(t for t in node.taints if t.key not in _EPHEMERAL_TAINTS and t.key not in startup)

    def _check_ports(self, where: str, existing: Iterable[frozenset[HostPort]], pods: Sequence[PodInput]) -> None:
        taken: list[tuple[HostPort, str]] = [(port, "running pods") for ports in existing for port in ports]
        for pod in pods:
            for port in pod.host_ports:
                for other, owner in taken:
                    if _ports_clash(port, other):
                        self._fail(f"{where}: pod {pod.key} host port {port} clashes with {owner}")
            taken.extend((port, pod.key) for port in pod.host_ports)

    # -- topology domains --------------------------------------------------------------------
    def _domain(self, index: int, key: str) -> Domain | None:
        """The values location ``index`` may take for topology ``key`` (None: not in any domain)."""
        cache_key = (index, key)
        if cache_key in self._domain_cache:
            return self._domain_cache[cache_key]
        location = self.locations[index]
        domain: Domain | None
        if location.node is not None:
            labels = location.node.labels
            value = labels.get(key)
            if value is None and key == wk.LABEL_HOSTNAME:
                value = location.node.name
            if value is None:
                value = next((v for k, v in labels.items() if normalize_key(k) == key), None)
            domain = None if value is None else frozenset({value})
        else:
            claim = location.claim
            assert claim is not None
            domain = _claim_domain(claim, location.claim_index, key, location.pool)
        self._domain_cache[cache_key] = domain
        return domain

    def _members(self) -> list[_Member]:
        """Every pod that counts for spread and affinity: placed pods and running pods."""
        members = []
        for index, location in enumerate(self.locations):
            for pod in location.new_pods:
                anti = tuple(t for t in pod.affinity if t.anti and t.weight == 0)
                members.append(_Member(pod.namespace, pod.labels, index, True, pod.key, anti))
            if location.node is not None:
                for i, running in enumerate(location.node.running):
                    name = f"{location.node.name}:running[{i}]"
                    anti = tuple(t for t in running.anti_affinity if t.anti and t.weight == 0)
                    members.append(_Member(running.namespace, running.labels, index, False, name, anti))
        return members

    def _counts(self, members: _Classes, namespace: str, selector: Selector, key: str) -> Counter[str]:
        """Pods matching ``selector`` in ``namespace``, per pinned domain value."""
        counts: Counter[str] = Counter()
        for member in members.matching(namespace, selector):
            domain = self._domain(member.location, key)
            if domain is not None and len(domain) == 1:
                counts[next(iter(domain))] += 1
        return counts

    def _eligible(self, pod: PodInput, spread: TopologySpread) -> set[str]:
        """The domain values of ``spread.key`` the pod could be placed in (see module docstring)."""
        cache_key = (
            pod.requirements,
            pod.tolerations,
            spread.key,
            spread.honor_node_affinity,
            spread.honor_node_taints,
        )
        cached = self._eligible_cache.get(cache_key)
        if cached is not None:
            return cached
        key = spread.key
        alternatives = pod.requirements if spread.honor_node_affinity else (Requirements(),)
        values: set[str] = set()
        for node in self.inp.nodes:
            if spread.honor_node_taints and untolerated(pod.tolerations, self._node_taints(node)) is not None:
                continue
            if not any(_labels_meet(node.labels, alt) is None for alt in alternatives):
                continue
            value = node.labels.get(key, node.name if key == wk.LABEL_HOSTNAME else None)
            if value is not None:
                values.add(value)
        for pool in self.inp.nodepools:
            if pool.error:
                continue
            if spread.honor_node_taints and untolerated(pod.tolerations, pool.taints) is not None:
                continue
            pool_reqs = effective_pool_requirements(pool)
            for alt in alternatives:
                if pool_reqs.compatible(alt, _ALLOW_UNDEFINED) is not None:
                    continue
                values |= _pool_domains(pool, pool_reqs.add(alt), key)
        self._eligible_cache[cache_key] = values
        return values

    # -- 5a. topology spread -----------------------------------------------------------------
    def _check_spread(self, members: _Classes) -> None:
        """For each DoNotSchedule constraint: the domains that received a pod carrying it may
        exceed the minimum over the eligible domains by at most maxSkew.

        Counting the final plan is enough: if every receiving domain ends within maxSkew of the
        final minimum, placing pods lowest-domain-first never breaks the skew on the way; and if
        one does not, its last pod broke the skew when it was placed. Pods on existing nodes
        count, including ones whose domain was already over the skew (those are only reported
        if the plan adds a carrying pod there).
        """
        carriers: dict[tuple[str, TopologySpread], list[tuple[PodInput, int]]] = defaultdict(list)
        for index, location in enumerate(self.locations):
            for pod in location.new_pods:
                for spread in pod.spread:
                    if not spread.schedule_anyway:
                        carriers[(pod.namespace, spread)].append((pod, index))
        for (namespace, spread), placed in carriers.items():
            counts = self._counts(members, namespace, spread.selector, spread.key)
            label = f"topology spread {spread.key} maxSkew={spread.max_skew} selector {spread.selector.describe()}"
            reported: set[str] = set()
            for pod, index in placed:
                domain = self._domain(index, spread.key)
                where = self.locations[index].name
                if domain is None or len(domain) != 1:
                    self._fail(f"pod {pod.key}: {label}: {where} is not pinned to one domain ({_show(domain)})")
                    continue
                value = next(iter(domain))
                eligible = self._eligible(pod, spread) | (
                    {_NEW_NODE} if spread.key == wk.LABEL_HOSTNAME and self._any_pool_serves(pod) else set()
                )
                if not eligible:
                    continue
                lowest = min(counts.get(d, 0) for d in eligible)
                if spread.min_domains is not None and len(eligible) < spread.min_domains:
                    lowest = 0  # fewer domains than minDomains: the global minimum is 0
                if counts[value] - lowest > spread.max_skew and value not in reported:
                    reported.add(value)
                    low = sorted(d for d in eligible if counts.get(d, 0) == lowest)[:3]
                    self._fail(
                        f"pod {pod.key}: {label} violated: domain {value} has {counts[value]} matching pod(s), "
                        f"minimum {lowest} (in {low}), skew {counts[value] - lowest}"
                    )

    def _any_pool_serves(self, pod: PodInput) -> bool:
        for pool in self.inp.nodepools:
            if pool.error or untolerated(pod.tolerations, pool.taints) is not None:
                continue
            reqs = effective_pool_requirements(pool)
            if any(reqs.compatible(alt, _ALLOW_UNDEFINED) is None for alt in pod.requirements):
                return True
        return False

    # -- 5b. required pod affinity -----------------------------------------------------------
    def _check_affinity(self, members: _Classes) -> None:
        """A pod with a required affinity term must share a domain with a pod the term selects.

        Kubernetes lets the FIRST pod through when no pod in the cluster matches the term and
        the pod matches its own term (a group that is attracted to itself). In a final plan this
        means, per term:

        * if some pod that does not carry the term matches it ("anchors", running or newly
          placed), every carrier must be in a pinned domain holding an anchor;
        * otherwise, if carriers match themselves, all carriers must be in ONE pinned domain
          (the first one's);
        * otherwise nothing can satisfy the term.
        """
        carriers: dict[AffinityTerm, list[tuple[PodInput, int]]] = defaultdict(list)
        for index, location in enumerate(self.locations):
            for pod in location.new_pods:
                for term in pod.affinity:
                    if term.weight == 0 and not term.anti:
                        carriers[term].append((pod, index))
        for term, placed in carriers.items():
            carrier_keys = {pod.key for pod, _ in placed}
            label = f"required pod affinity {term.key} selector {term.selector.describe()}"
            anchors: set[str] = set()
            any_anchor = False
            for member in members.selected_by(term):
                if member.new and member.name in carrier_keys:
                    continue
                any_anchor = True
                domain = self._domain(member.location, term.key)
                if domain is not None and len(domain) == 1:
                    anchors |= domain
            self_matching = [(pod, i) for pod, i in placed if term.selects(pod.namespace, pod.labels)]
            if not any_anchor and not self_matching:
                for pod, _ in placed[:5]:
                    self._fail(f"pod {pod.key}: {label}: no pod matches the term")
                continue
            domains: dict[str, list[str]] = defaultdict(list)
            for pod, index in placed:
                domain = self._domain(index, term.key)
                if domain is None or len(domain) != 1:
                    where = self.locations[index].name
                    self._fail(f"pod {pod.key}: {label}: {where} is not pinned to one domain ({_show(domain)})")
                    continue
                domains[next(iter(domain))].append(pod.key)
            if any_anchor:
                for value, keys in sorted(domains.items()):
                    if value not in anchors:
                        self._fail(
                            f"pod {keys[0]} (+{len(keys) - 1}): {label} violated: domain {value} holds no matching "
                            f"pod (matching pods are in {sorted(anchors)[:5]})"
                        )
            elif len(domains) > 1:
                spread_out = {v: len(k) for v, k in sorted(domains.items())}
                self._fail(
                    f"pod {placed[0][0].key}: {label} violated: the group attracts itself, so all of it must "
                    f"share one domain, but it is spread over {spread_out}"
                )

    # -- 5c. required pod anti-affinity ------------------------------------------------------
    def _check_anti_affinity(self, members: _Classes) -> None:
        """No pod may share a domain with a pod its required anti-affinity term selects.

        Carriers are newly placed pods and running pods (``RunningPod.anti_affinity``), so both
        directions are covered: a new pod may not join a domain with pods it repels, nor one
        whose running pods repel it. Pairs of running pods are not the plan's doing and are
        ignored. A carrier or a selected pod whose domain is not pinned conflicts with every
        domain it may land in.
        """
        carriers: dict[AffinityTerm, list[_Member]] = defaultdict(list)
        for _, _, group in members.groups:
            for member in group:
                for term in member.anti:
                    carriers[term].append(member)
        for term, carrying in carriers.items():
            label = f"required anti-affinity {term.key} selector {term.selector.describe()}"
            # The pods the term selects, by each value their domain may take.
            selected: dict[str, list[_Member]] = defaultdict(list)
            for member in members.selected_by(term):
                for value in self._domain(member.location, term.key) or ():
                    selected[value].append(member)
            reported: set[tuple[str, str]] = set()
            for carrier in carrying:
                for value in self._domain(carrier.location, term.key) or ():
                    for other in selected.get(value, ()):
                        if other is carrier or not (carrier.new or other.new):
                            continue
                        pair = (min(carrier.name, other.name), max(carrier.name, other.name))
                        if pair in reported:
                            continue
                        reported.add(pair)
                        self._fail(
                            f"pod {carrier.name}: {label} violated: {other.name} "
                            f"may share domain {value} ({self.locations[other.location].name})"
                        )


# --- helpers ----------------------------------------------------------------------------------

_ALLOW_UNDEFINED = wk.WELL_KNOWN_LABELS | {wk.LABEL_ZONE, wk.LABEL_REGION, wk.LABEL_CAPACITY_TYPE}


def effective_pool_requirements(pool: NodePoolInput) -> Requirements:
    """A NodePool's requirements as Karpenter applies them: its labels and name are
    requirements too (without a capacity-type requirement every capacity type is allowed)."""
    return pool.requirements.add(
        Requirements.from_labels(pool.labels),
        Requirements([Requirement(wk.LABEL_NODEPOOL, False, frozenset({pool.name}))]),
    )


def cheapest_offers(pool: NodePoolInput) -> list[tuple[InstanceType, Offering]]:
    """Each instance type a NodePool may launch, with its cheapest allowed available offering."""
    reqs = effective_pool_requirements(pool)
    zone, ctype, zone_id = reqs.get(wk.LABEL_ZONE), reqs.get(wk.LABEL_CAPACITY_TYPE), reqs.get(wk.LABEL_ZONE_ID)
    out = []
    for it in pool.instance_types:
        if not _type_matches(it, reqs):
            continue
        allowed = [
            o
            for o in it.offerings
            if o.available
            and (zone is None or zone.has(o.zone))
            and (ctype is None or ctype.has(o.capacity_type))
            and (zone_id is None or zone_id.has(o.zone_id))
        ]
        if allowed:
            out.append((it, min(allowed, key=lambda o: o.price)))
    return out


def _label_ok(req: Requirement, value: str | None) -> bool:
    """Does a node with this label value (None: no such label) satisfy the requirement?"""
    return req.allows_absent() if value is None else req.has(value)


def _labels_meet(labels: Mapping[str, str], reqs: Requirements) -> str | None:
    """None when an existing node's labels satisfy every requirement, else the first failure."""
    normalized = {normalize_key(k): v for k, v in labels.items()}
    for key, req in reqs.items():
        value = normalized.get(key)
        if not _label_ok(req, value):
            return f"{key} {req.describe()} but the node has {value or '<none>'}"
    return None


def _offering_ok(offering: Offering, capacity_type: str, zones: frozenset[str]) -> bool:
    return offering.available and offering.capacity_type == capacity_type and offering.zone in zones


def _type_matches(it: InstanceType, reqs: Requirements) -> bool:
    """Do an instance type's own labels satisfy the requirements (offering keys aside)?"""
    for key, req in reqs.items():
        if key in _OFFERING_KEYS or key == wk.LABEL_NODEPOOL:
            continue
        value = it.labels.get(key)
        if value is not None and not req.has(value):
            return False
        if value is None and key in wk.WELL_KNOWN_LABELS and not req.allows_absent():
            return False
    return True


def _pool_domains(pool: NodePoolInput, reqs: Requirements, key: str) -> set[str]:
    """The values of ``key`` a node launched from ``pool`` under ``reqs`` may get."""
    if key == wk.LABEL_HOSTNAME:
        return set()  # a new node is a new, empty hostname domain (handled by the caller)
    zone, ctype, zone_id = reqs.get(wk.LABEL_ZONE), reqs.get(wk.LABEL_CAPACITY_TYPE), reqs.get(wk.LABEL_ZONE_ID)
    values: set[str] = set()
    for it in pool.instance_types:
        if not _type_matches(it, reqs):
            continue
        if key not in _OFFERING_KEYS:
            req = reqs.get(key)
            if req is not None and not req.complement:
                values |= req.values
            elif key in it.labels:
                values.add(it.labels[key])
            continue
        for o in it.offerings:
            if not o.available:
                continue
            if zone is not None and not zone.has(o.zone):
                continue
            if ctype is not None and not ctype.has(o.capacity_type):
                continue
            if zone_id is not None and not zone_id.has(o.zone_id):
                continue
            values.add({wk.LABEL_ZONE: o.zone, wk.LABEL_CAPACITY_TYPE: o.capacity_type}.get(key, o.zone_id))
    return values


def _claim_domain(claim: NodeClaimPlan, index: int, key: str, pool: NodePoolInput | None) -> Domain | None:
    """The values a NodeClaim may take for a topology key (see the module docstring)."""
    if key == wk.LABEL_HOSTNAME:
        return frozenset({f"nodeclaim[{index}]"})
    if key == wk.LABEL_ZONE:
        zones = frozenset(claim.zones)
        req = claim.requirements.get(wk.LABEL_ZONE)
        if req is not None and not req.complement:
            zones = zones & req.values if zones else req.values
        return zones or None
    if key == wk.LABEL_CAPACITY_TYPE:
        return frozenset({claim.capacity_type})
    value = claim.requirements.labels().get(key)
    if value is None and pool is not None:
        value = pool.labels.get(key)
    if value is not None:
        return frozenset({value})
    if pool is None:
        return None
    by_name = {it.name: it for it in pool.instance_types}
    found = {by_name[n].labels.get(key) for n in claim.instance_types if n in by_name}
    if found == {None} or not found:
        return None
    # Some listed types lack the label: the node may end up in no domain at all ("").
    return frozenset(v if v is not None else "" for v in found)


def _claim_capacity_types(claim: NodeClaimPlan) -> frozenset[str]:
    """The capacity types a NodeClaim may launch with: its own, and any its requirements allow."""
    req = claim.requirements.get(wk.LABEL_CAPACITY_TYPE)
    allowed = {wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_RESERVED}
    return frozenset({claim.capacity_type} | ({c for c in allowed if req.has(c)} if req is not None else set()))


def _sum(items: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        for name, value in item.items():
            out[name] = out.get(name, 0) + value
    return out


_WILDCARD_IPS = frozenset({"", "0.0.0.0", "::"})


def _ports_clash(a: HostPort, b: HostPort) -> bool:
    """Same protocol and port, and the same IP or either one a wildcard."""
    (ip_a, proto_a, port_a), (ip_b, proto_b, port_b) = a, b
    return port_a == port_b and proto_a == proto_b and (ip_a == ip_b or ip_a in _WILDCARD_IPS or ip_b in _WILDCARD_IPS)


def _show(domain: Domain | None) -> str:
    return "no domain" if domain is None else ", ".join(sorted(domain)[:6])
