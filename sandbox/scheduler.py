"""A stand-in for kube-scheduler.

Two passes each step:

1. Nominated pods: once a NodeClaim is initialized, the pods nodeflow nominated to it are bound to its
   node (``pods/binding``) and marked Running.
2. With ``place_pending`` on, every other pending pod is bound to a Ready node it fits (``fit``): free
   resources after the pods already bound there, ``nodeSelector``, required node affinity, NoSchedule /
   NoExecute taints (so ``karpenter.sh/disrupted`` and ``karpenter.sh/unregistered`` keep pods off),
   required pod affinity and anti-affinity (both directions for anti-affinity) on any topology key.
   Among the nodes that fit, the least allocated (by CPU) wins, as kube-scheduler's default scoring
   prefers. This is what lets a consolidation replace run end to end: the pods evicted from the
   candidates come back pending and land on the replacement.

Without it, pending pods would stay pending forever in the local setup and every later batch
would see them again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from nodeflow.api import labels as wk
from nodeflow.api.quantity import parse_quantity
from nodeflow.kube import errors as kerr
from nodeflow.kube.client import NODE_CLAIMS, NODES, PODS, KubeClient
from nodeflow.lifecycle.drain import tolerates
from sandbox.background import BackgroundLoop

__all__ = ["SimulatedScheduler", "fit", "pod_requests"]

Obj = Mapping[str, Any]
_TERMINAL = ("Succeeded", "Failed")


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """The pod's effective requests: the sum over its containers, at least each init container's, plus one pod."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(value)
    for c in spec.get("initContainers") or []:
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, Decimal(0)), parse_quantity(value))
    total["pods"] = total.get("pods", Decimal(0)) + 1
    return total


def _labels(obj: Obj) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _ready(node: Obj) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _expression(labels: Mapping[str, str], expr: Obj) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator", ""), list(expr.get("values") or [])
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _node_term(node: Obj, term: Obj) -> bool:
    fields = {"metadata.name": (node.get("metadata") or {}).get("name", "")}
    return all(_expression(_labels(node), e) for e in term.get("matchExpressions") or []) and all(
        _expression(fields, e) for e in term.get("matchFields") or []
    )


def _selects(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and all(
        _expression(labels, e) for e in selector.get("matchExpressions") or []
    )


def _term_matches(term: Obj, owner: Obj, other: Obj) -> bool:
    """Whether ``other`` is a pod the (anti-)affinity ``term`` of pod ``owner`` refers to."""
    namespaces = term.get("namespaces") or []
    other_ns = (other.get("metadata") or {}).get("namespace", "default")
    if namespaces:
        if other_ns not in namespaces:
            return False
    elif term.get("namespaceSelector") is None and other_ns != (owner.get("metadata") or {}).get(
        "namespace", "default"
    ):
        return False
    return _selects(term.get("labelSelector"), _labels(other))


def _required(pod: Obj, kind: str) -> list[Obj]:
    return list(
        (((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or []
    )


def fit(pod: Obj, node: Obj, nodes: Sequence[Obj], pods: Iterable[Obj]) -> str | None:
    """Why ``pod`` cannot be bound to ``node`` (None when it fits). ``nodes`` are all Nodes (for topology
    domains), ``pods`` all pods (those with ``spec.nodeName`` occupy their node)."""
    name = (node.get("metadata") or {}).get("name", "")
    spec = pod.get("spec") or {}
    if (node.get("metadata") or {}).get("deletionTimestamp"):
        return f"node {name} is being deleted"
    if not _ready(node):
        return f"node {name} is not Ready"
    if (node.get("spec") or {}).get("unschedulable"):
        return f"node {name} is cordoned"
    tolerations = spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        effect = taint.get("effect", "")
        if effect in ("NoSchedule", "NoExecute") and not tolerates(
            tolerations, taint.get("key", ""), effect, taint.get("value") or ""
        ):
            return f"node {name} has taint {taint.get('key')}:{effect} the pod does not tolerate"
    labels = _labels(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"node {name} does not match nodeSelector {key}={value}"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and not any(_node_term(node, t) for t in required.get("nodeSelectorTerms") or []):
        return f"node {name} does not match the pod's required node affinity"

    by_name = {(n.get("metadata") or {}).get("name", ""): n for n in nodes}
    placed = [
        p
        for p in pods
        if (p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("phase") not in _TERMINAL
    ]
    used: dict[str, Decimal] = {}
    for p in placed:
        if p["spec"]["nodeName"] == name:
            for resource, amount in pod_requests(p).items():
                used[resource] = used.get(resource, Decimal(0)) + amount
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for resource, amount in pod_requests(pod).items():
        have = parse_quantity(allocatable[resource]) if resource in allocatable else Decimal(0)
        if used.get(resource, Decimal(0)) + amount > have:
            return f"node {name} has not enough {resource} left"

    def same_domain(other: Obj, key: str) -> bool:
        there = by_name.get(other["spec"]["nodeName"])
        return key in labels and there is not None and _labels(there).get(key) == labels[key]

    for term in _required(pod, "podAffinity"):
        key = term.get("topologyKey", "")
        if any(_term_matches(term, pod, p) and same_domain(p, key) for p in placed):
            continue
        alone = not any(_term_matches(term, pod, p) for p in placed)
        if not (alone and _term_matches(term, pod, pod) and key in labels):  # the first of its kind may go anywhere
            return f"node {name} breaks the pod's required pod affinity on {key}"
    for term in _required(pod, "podAntiAffinity"):
        key = term.get("topologyKey", "")
        if any(_term_matches(term, pod, p) and same_domain(p, key) for p in placed):
            return f"node {name} breaks the pod's required pod anti-affinity on {key}"
    for p in placed:
        for term in _required(p, "podAntiAffinity"):
            if _term_matches(term, p, pod) and same_domain(p, term.get("topologyKey", "")):
                return f"node {name} breaks the required pod anti-affinity of {p['metadata'].get('name')}"
    return None


def _free_cpu_fraction(node: Obj, pods: Iterable[Obj]) -> Decimal:
    name = node["metadata"]["name"]
    allocatable = parse_quantity(((node.get("status") or {}).get("allocatable") or {}).get("cpu", "0"))
    if allocatable <= 0:
        return Decimal(0)
    used = sum(
        (
            pod_requests(p).get("cpu", Decimal(0))
            for p in pods
            if (p.get("spec") or {}).get("nodeName") == name and (p.get("status") or {}).get("phase") not in _TERMINAL
        ),
        Decimal(0),
    )
    return (allocatable - used) / allocatable


class SimulatedScheduler(BackgroundLoop):
    def __init__(self, kube: KubeClient, *, place_pending: bool = False) -> None:
        super().__init__("scheduler")
        self.kube = kube
        self.place_pending = place_pending
        self.bound: list[tuple[str, str]] = []  # (pod key, node)

    def step(self) -> int:
        done = 0
        for claim in self.kube.list_items(NODE_CLAIMS):
            status = claim.get("status") or {}
            node = status.get("nodeName")
            ready = any(
                c.get("type") == "Initialized" and c.get("status") == "True" for c in status.get("conditions", [])
            )
            if not node or not ready or (claim.get("metadata") or {}).get("deletionTimestamp"):
                continue
            keys = json.loads(
                ((claim.get("metadata") or {}).get("annotations") or {}).get(wk.ANNOTATION_NOMINATED_PODS, "[]")
            )
            for key in keys:
                namespace, _, name = key.partition("/")
                if self._bind(namespace, name, node):
                    self.bound.append((key, node))
                    done += 1
        if self.place_pending:
            done += self._place_pending()
        return done

    def _place_pending(self) -> int:
        pods = self.kube.list_items(PODS)
        pending = sorted(
            (
                p
                for p in pods
                if not (p.get("spec") or {}).get("nodeName")
                and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase", "Pending") == "Pending"
            ),
            key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]),
        )
        if not pending:
            return 0
        nodes = self.kube.list_items(NODES)
        done = 0
        for pod in pending:
            fitting = [n for n in nodes if fit(pod, n, nodes, pods) is None]
            if not fitting:
                continue
            best = max(fitting, key=lambda n: (_free_cpu_fraction(n, pods), n["metadata"]["name"]))
            meta = pod["metadata"]
            namespace, node = meta.get("namespace", "default"), best["metadata"]["name"]
            if self._bind(namespace, meta["name"], node):
                self.bound.append((f"{namespace}/{meta['name']}", node))
                pod["spec"]["nodeName"] = node  # it occupies the node for the rest of this pass
                done += 1
        return done

    def _bind(self, namespace: str, name: str, node: str) -> bool:
        try:
            pod = self.kube.get(PODS, name, namespace)
        except kerr.NotFound:
            return False
        if (pod.get("spec") or {}).get("nodeName"):
            return False
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.kube.request("POST", PODS.path(name, namespace, "binding"), body=body)
            self.kube.patch(PODS, name, {"status": {"phase": "Running"}}, namespace=namespace, subresource="status")
        except (kerr.Conflict, kerr.NotFound):
            return False
        return True
