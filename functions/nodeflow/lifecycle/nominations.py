"""The ``nodeflow.io/nominated-pods`` annotation: the pods a NodeClaim was made for, while they still wait for it.

Written once, when the provisioner (or a disruption's replacement, ``lifecycle/replace.py``) creates the NodeClaim
(``claims.node_claim_manifest``). Read by the plan (``nodeflow.plan.build_input``: a pending pod nominated to a
NodeClaim not yet initialized counts as placed on it; a pod on a node going away that such a NodeClaim was made for
needs no other capacity), by governance's spend (the pending pods a launching NodeClaim will take), by CleanUp (a
failed launch's pods are provisioned again; the message is only a trigger) and by the sandbox's scheduler. Each of
them looks a nominated pod up among the pods as they are now and uses only one that is still pending (or, for a
replacement, still on the node it leaves): a pod that is gone, finished or placed elsewhere has no effect there.

Karpenter keeps a nomination in memory until the pod is bound; nodeflow's lives in the annotation, so it is pruned
as Karpenter's would lapse. A nomination is open while its pod exists, is neither finished nor being deleted, and
has no node yet, or is still on a node that is going away (being deleted, or tainted ``karpenter.sh/disrupted``:
the pods a replacement was made for move once their node drains). Otherwise it is stale: the pod was deleted, ran
to completion, or was bound to a node that stays (the NodeClaim's own: the nomination was fulfilled; or another the
scheduler chose). ``open_nominations`` is that rule (pure); ``prune_nominations`` (garbage collection) rewrites each
NodeClaim's annotation with its open nominations only, and removes it when none is left. A pod nodeflow cannot read
(it does not validate) is kept: it may well be there.

Must not touch: where pods go (``nodeflow.scheduling``); the NodeClaims beyond this annotation.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import partial

from nodeflow.api import labels as wk
from nodeflow.api.core import Node, Pod
from nodeflow.api.karpenter import NodeClaim
from nodeflow.cluster import nominated_pods
from nodeflow.kube.client import NODE_CLAIMS, KubeClient
from nodeflow.kube.reports import Reports

__all__ = ["leaving_nodes", "open_nominations", "prune_nominations"]

_FINISHED = frozenset({"Succeeded", "Failed"})


def leaving_nodes(nodes: Iterable[Node], claims: Iterable[NodeClaim]) -> frozenset[str]:
    """Names of the nodes whose pods are leaving: the Node or its NodeClaim is being deleted, or the Node is
    tainted ``karpenter.sh/disrupted`` (a disruption's candidate)."""
    going = {
        c.status.node_name
        for c in claims
        if c.metadata.deletion_timestamp is not None and c.status is not None and c.status.node_name
    }
    return frozenset(
        n.metadata.name or ""
        for n in nodes
        if n.metadata.deletion_timestamp is not None
        or n.metadata.name in going
        or any(t.key == wk.TAINT_DISRUPTED for t in n.spec.taints or ())
    )


def open_nominations(
    claim: NodeClaim,
    pods: Mapping[str, Pod],
    leaving: Collection[str],
    unreadable: Collection[str] = (),
) -> tuple[str, ...]:
    """The pods (``namespace/name``) of ``claim``'s annotation still waiting for it (see the module); ``pods`` by
    key, ``leaving`` from ``leaving_nodes``, ``unreadable``: keys of pods that exist but do not validate."""
    out: list[str] = []
    for key in nominated_pods(claim):
        pod = pods.get(key)
        if pod is None:
            if key in unreadable:
                out.append(key)
            continue
        if pod.metadata.deletion_timestamp is not None or pod.status.phase in _FINISHED:
            continue
        if not pod.spec.node_name or pod.spec.node_name in leaving:
            out.append(key)
    return tuple(out)


def prune_nominations(
    kube: KubeClient,
    claims: Sequence[NodeClaim],
    nodes: Sequence[Node],
    pods: Iterable[Pod],
    *,
    unreadable: Collection[str] = (),
    reports: Reports | None = None,
) -> dict[str, tuple[str, ...]]:
    """Rewrite the annotation of each NodeClaim (not being deleted) that names a stale nomination with its open ones,
    or remove it when none is left; each NodeClaim on its own (``reports``). ``pods`` must be listed after
    ``claims`` (a pod created after the claims were listed is not missed). Returns NodeClaim -> open nominations
    written."""
    reports = reports if reports is not None else Reports()
    by_key = {p.key: p for p in pods}
    leaving = leaving_nodes(nodes, claims)
    written: dict[str, tuple[str, ...]] = {}
    for claim in claims:
        listed = nominated_pods(claim)
        if claim.metadata.deletion_timestamp is not None or not listed:
            continue
        keep = open_nominations(claim, by_key, leaving, unreadable)
        if keep == listed:
            continue
        value = json.dumps(sorted(keep), separators=(",", ":")) if keep else None
        patch = {"metadata": {"annotations": {wk.ANNOTATION_NOMINATED_PODS: value}}}
        if reports.run(
            "NodeClaim nominations", f"NodeClaim/{claim.name}", partial(kube.patch, NODE_CLAIMS, claim.name, patch)
        ):
            written[claim.name] = keep
    return written
