"""What the cluster spends now, in $/hour: the input of the cost ceilings (``nodeflow.governance.policy``).

``cluster_spend(state, catalog)`` counts

- every Node that is not going away (no deletion timestamp, its NodeClaim not being deleted, not a failed
  launch's leftover Node), NodePool nodes and others alike (the cluster ceiling is the whole cluster's);
- every NodeClaim still launching (no Node registered for it yet, not being deleted).

Prices come from the catalog, as disruption prices nodes (``nodeflow.disruption.candidates.node_price``):

- a launched node or NodeClaim by its offering labels (``node.kubernetes.io/instance-type``,
  ``topology.kubernetes.io/zone``, ``karpenter.sh/capacity-type``): spot at the zone's spot price, on-demand at
  the on-demand price, reserved at the on-demand price / ``RESERVED_PRICE_DIVISOR`` (about $0: the reservation
  is paid for whether used or not);
- a NodeClaim not launched yet (no instance-type label) at the cheapest offering its requirements allow
  (instance types x capacity types x zones), which is what the launch picks first;
- a node whose offering has no price in the catalog (an unknown type, a node outside any catalog) counts $0.

NodeOverlay price adjustments are not applied (the catalog's prices count).

Each node's $/hour is shared among the namespaces of its non-DaemonSet, non-mirror pods that are not finished
(a launching NodeClaim: the pending pods nominated to it) in proportion to their CPU requests
(``governance.policy.namespace_shares``). Pure: no clock, no I/O.

Must not touch: the ceilings' verdicts (``policy``, ``nodeflow.scheduling.ceilings``); the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from nodeflow.api import labels as wk
from nodeflow.api.core import Node, Pod
from nodeflow.api.karpenter import NodeClaim
from nodeflow.catalog.instancetypes import RESERVED_PRICE_DIVISOR
from nodeflow.catalog.model import CatalogData
from nodeflow.governance.policy import NodeCost, Spend, spend_of
from nodeflow.podutil import is_daemon_or_mirror

if TYPE_CHECKING:
    from nodeflow.cluster import ClusterState

__all__ = ["cluster_spend", "offering_price"]

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_ALL_CAPACITY_TYPES = (wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_RESERVED)


def offering_price(catalog: CatalogData, instance_type: str, zone: str, capacity_type: str) -> float | None:
    """The catalog's $/hour of one offering (None when it has no price): spot by zone, on-demand, reserved at
    the on-demand price / ``RESERVED_PRICE_DIVISOR``."""
    if capacity_type == wk.CAPACITY_TYPE_SPOT:
        return catalog.spot_prices.get((instance_type, zone))
    on_demand = catalog.on_demand_prices.get(instance_type)
    if capacity_type == wk.CAPACITY_TYPE_RESERVED and on_demand is not None:
        return on_demand / RESERVED_PRICE_DIVISOR
    return on_demand


def _labelled_price(labels: Mapping[str, str], catalog: CatalogData) -> float | None:
    return offering_price(
        catalog,
        labels.get(wk.LABEL_INSTANCE_TYPE, ""),
        labels.get(wk.LABEL_ZONE, ""),
        labels.get(wk.LABEL_CAPACITY_TYPE, wk.CAPACITY_TYPE_ON_DEMAND),
    )


def _claim_price(claim: NodeClaim, catalog: CatalogData) -> float | None:
    """A launching NodeClaim's $/hour: by its labels once launched, else its cheapest allowed offering."""
    labels = claim.metadata.labels or {}
    if wk.LABEL_INSTANCE_TYPE in labels:
        return _labelled_price(labels, catalog)
    allowed: dict[str, tuple[str, frozenset[str]]] = {}
    for r in claim.spec.requirements:
        allowed[r.key] = (r.operator, frozenset(r.values or ()))

    def admits(key: str, value: str) -> bool:
        rule = allowed.get(key)
        if rule is None:
            return True
        operator, values = rule
        if operator == "In":
            return value in values
        if operator == "NotIn":
            return value not in values
        return operator != "DoesNotExist"

    known = {*catalog.on_demand_prices, *(t for t, _ in catalog.spot_prices)}
    types = sorted(t for t in known if admits(wk.LABEL_INSTANCE_TYPE, t))
    capacity_types = [ct for ct in _ALL_CAPACITY_TYPES if admits(wk.LABEL_CAPACITY_TYPE, ct)]
    best: float | None = None
    for name in types:
        for ct in capacity_types:
            if ct == wk.CAPACITY_TYPE_SPOT:
                zones = [z for z in catalog.offerings.get(name, ()) if admits(wk.LABEL_ZONE, z)]
                prices = [p for z in zones if (p := catalog.spot_prices.get((name, z))) is not None]
            elif ct == wk.CAPACITY_TYPE_RESERVED:
                continue  # a reservation is only launched into when the requirements pin its id: labels
            else:
                price = catalog.on_demand_prices.get(name)
                prices = [price] if price is not None else []
            for p in prices:
                if best is None or p < best:
                    best = p
    return best


def _pod_shares(pods: Iterable[Pod]) -> tuple[tuple[str, int], ...]:
    """(namespace, CPU request in millicores) of the pods that share a node's price."""
    out = []
    for pod in pods:
        if is_daemon_or_mirror(pod) or pod.status.phase in _TERMINAL_PHASES:
            continue
        out.append((pod.namespace, pod.spec.effective_requests().get("cpu", 0)))
    return tuple(sorted(out))


def cluster_spend(state: ClusterState, catalog: CatalogData) -> tuple[Spend, list[NodeCost]]:
    """The $/hour in use (cluster, per NodePool, per namespace) and each node / launching NodeClaim that makes it
    up (Nodes by name, then NodeClaims by name), priced as the module docstring says."""
    from nodeflow.cluster import claim_index, left_behind, nominated_pods

    live = [c for c in state.node_claims if c.metadata.deletion_timestamp is None]
    by_node, by_provider, going = claim_index(state.node_claims)
    on_node: dict[str, list[Pod]] = {}
    pods_by_key: dict[str, Pod] = {}
    for pod in state.pods:
        if pod.spec.node_name:
            on_node.setdefault(pod.spec.node_name, []).append(pod)
        else:
            pods_by_key[pod.key] = pod
    costs: list[NodeCost] = []
    names: set[str] = set()
    providers: set[str] = set()
    for node in sorted(state.nodes, key=lambda n: n.metadata.name or ""):
        name = node.metadata.name or ""
        provider = node.spec.provider_id or ""
        claim = by_node.get(name) or by_provider.get(provider)
        if claim is None and left_behind(node):
            continue
        names.add(name)
        if provider:
            providers.add(provider)
        if node.metadata.deletion_timestamp is not None or name in going or (provider and provider in going):
            continue
        costs.append(_node_cost(node, on_node.get(name, ()), catalog))
    for claim in sorted(live, key=lambda c: c.name):
        status = claim.status
        if status is not None and (status.node_name in names or (status.provider_id or None) in providers):
            continue  # registered: counted as its Node
        nominated = [pods_by_key[k] for k in nominated_pods(claim) if k in pods_by_key]
        costs.append(
            NodeCost(
                nodepool=(claim.metadata.labels or {}).get(wk.LABEL_NODEPOOL),
                price=_claim_price(claim, catalog) or 0.0,
                pods=_pod_shares(nominated),
                name=claim.name,
            )
        )
    return spend_of(costs), costs


def _node_cost(node: Node, pods: Sequence[Pod] | tuple[()], catalog: CatalogData) -> NodeCost:
    labels = node.metadata.labels or {}
    return NodeCost(
        nodepool=labels.get(wk.LABEL_NODEPOOL),
        price=_labelled_price(labels, catalog) or 0.0,
        pods=_pod_shares(pods),
        name=node.metadata.name or "",
    )
