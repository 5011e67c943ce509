"""The doctor's Kubernetes facts: one reader per fact, each returning the fact or ``Unreadable`` (the API server's
error: a Forbidden naming the verb and resource, a CRD not installed), never raising past its check. Only
``reachable`` raises (``ClusterUnreachable``): without the API server there is nothing to check.

Reads only: CRDs (apiextensions.k8s.io), EC2NodeClasses and NodePools (the before-install checks select with them),
the agent's Deployment and pods, pending pods and Nodes (what the agent must have forwarded), NodeClaims, and
Karpenter's Deployments and leader-election Lease (``nodeflow.karpenter_presence``).

Must not touch: what a fact means (``checks`` decides); anything but reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from nodeflow.doctor.checks import (
    AGENT_DEPLOYMENT,
    AGENT_NAMESPACE,
    NOT_INSTALLED,
    AgentFacts,
    ClusterActivity,
    CrdFact,
    NodeClaimFact,
    NodePoolFact,
    Unreadable,
    node_claim_fact,
    node_pool_fact,
)
from nodeflow.karpenter_presence import DEPLOYMENT_SELECTOR, LEASE_NAME, KarpenterController, karpenter_controller
from nodeflow.kube.client import (
    DEPLOYMENTS,
    EC2_NODE_CLASSES,
    LEASES,
    NODE_CLAIMS,
    NODE_OVERLAYS,
    NODE_POOLS,
    NODEFLOW_POLICIES,
    NODES,
    PODS,
    KubeClient,
    Resource,
)
from nodeflow.kube.errors import KubeError, NotFound, Unavailable

__all__ = [
    "CRDS",
    "DEPLOYMENTS",
    "EXPECTED_CRDS",
    "LEASES",
    "ClusterUnreachable",
    "activity",
    "agent",
    "crds",
    "karpenter",
    "node_claims",
    "node_classes",
    "node_pools",
    "reachable",
]

T = TypeVar("T")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
# The CRDs nodeflow reads, with the one version its client reads each at (nodeflow.kube.client).
EXPECTED_CRDS: Mapping[str, tuple[str, ...]] = {
    f"{r.plural}.{r.group}": (r.version,)
    for r in (NODE_POOLS, NODE_CLAIMS, EC2_NODE_CLASSES, NODE_OVERLAYS, NODEFLOW_POLICIES)
}
_PAGE = 500


class ClusterUnreachable(Exception):
    """The API server did not answer (or refused the credentials); the message says what was tried."""


def _readable(read: Callable[[], T]) -> T | Unreadable:
    """``read()``, or ``Unreadable`` with the API server's error (anything else it raised too: a doctor that stops
    at one unreadable fact checks nothing else; the error's type names it)."""
    try:
        return read()
    except Exception as exc:
        return Unreadable(f"{type(exc).__name__}: {exc}", type(exc).__name__)


def reachable(kube: KubeClient, where: str) -> None:
    """Raise ``ClusterUnreachable`` unless the API server answers ``/version`` (``where``: how it was found)."""
    try:
        kube.request("GET", "/version")
    except Unavailable as exc:
        raise ClusterUnreachable(f"the cluster ({where}) could not be reached: {exc}") from None
    except KubeError as exc:
        if exc.status in (401, 403):
            raise ClusterUnreachable(f"the cluster ({where}) refused the credentials: {exc}") from None
        raise ClusterUnreachable(f"the cluster ({where}) answered /version with an error: {exc}") from None


def _list_or_empty(kube: KubeClient, resource: Resource) -> list[dict[str, Any]]:
    """Every object of a custom resource; none when its CRD is not installed (before install)."""
    try:
        return kube.list_items(resource, page_size=_PAGE)
    except NotFound:
        return []


def node_classes(kube: KubeClient) -> list[dict[str, Any]] | Unreadable:
    return _readable(lambda: _list_or_empty(kube, EC2_NODE_CLASSES))


def node_pools(kube: KubeClient) -> tuple[NodePoolFact, ...] | Unreadable:
    return _readable(lambda: tuple(node_pool_fact(p) for p in _list_or_empty(kube, NODE_POOLS)))


def crds(kube: KubeClient, names: Mapping[str, tuple[str, ...]] = EXPECTED_CRDS) -> dict[str, CrdFact] | Unreadable:
    def read() -> dict[str, CrdFact]:
        found: dict[str, CrdFact] = {}
        for name in names:
            try:
                crd = kube.get(CRDS, name)
            except NotFound:
                continue
            versions = (crd.get("spec") or {}).get("versions") or []
            conditions = (crd.get("status") or {}).get("conditions") or []
            found[name] = CrdFact(
                name=name,
                served=tuple(str(v["name"]) for v in versions if v.get("served")),
                established=any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions),
            )
        return found

    return _readable(read)


def agent(kube: KubeClient, namespace: str = AGENT_NAMESPACE) -> AgentFacts | Unreadable:
    def read() -> AgentFacts:
        try:
            deployment = kube.get(DEPLOYMENTS, AGENT_DEPLOYMENT, namespace)
        except NotFound:
            return AgentFacts(exists=False)
        spec = deployment.get("spec") or {}
        status = deployment.get("status") or {}
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        container = next((c for c in containers if c.get("name") == "agent"), containers[0] if containers else {})
        env = {str(e["name"]): str(e["value"]) for e in container.get("env") or () if "value" in e and "name" in e}
        selector = ",".join(f"{k}={v}" for k, v in ((spec.get("selector") or {}).get("matchLabels") or {}).items())
        waiting: list[str] = []
        for pod in kube.list_items(PODS, namespace=namespace, label_selector=selector or None):
            for cs in (pod.get("status") or {}).get("containerStatuses") or ():
                state = (cs.get("state") or {}).get("waiting")
                if state:
                    message = f" ({state['message'][:120]})" if state.get("message") else ""
                    waiting.append(f"{pod['metadata']['name']}: {state.get('reason', 'waiting')}{message}")
        return AgentFacts(
            exists=True,
            replicas=int(spec.get("replicas", 1)),
            ready=int(status.get("readyReplicas") or 0),
            env=env,
            waiting=tuple(waiting),
        )

    return _readable(read)


def _unschedulable_since(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod became unschedulable, if the agent forwards it (PROTOCOL.md's PodUnschedulable)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or spec.get("nodeName") or status.get("nominatedNodeName"):
        return None
    if any(o.get("kind") in ("DaemonSet", "Node") for o in meta.get("ownerReferences") or ()):
        return None
    for c in status.get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return _time(c.get("lastTransitionTime"))
    return None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def activity(kube: KubeClient) -> ClusterActivity | Unreadable:
    """The earliest still-unschedulable pod and the newest Node: what the agent must have sent since."""

    def read() -> ClusterActivity:
        pending: list[tuple[datetime, str]] = []
        for pod in kube.list_items(PODS, field_selector="spec.nodeName=,status.phase=Pending", page_size=_PAGE):
            since = _unschedulable_since(pod)
            if since is not None:
                pending.append((since, f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"))
        nodes = [
            (created, str(n["metadata"]["name"]))
            for n in kube.list_items(NODES, page_size=_PAGE)
            if (created := _time(n["metadata"].get("creationTimestamp"))) is not None
        ]
        first = min(pending) if pending else None
        newest = max(nodes) if nodes else None
        return ClusterActivity(
            unschedulable_since=first[0] if first else None,
            unschedulable_pod=first[1] if first else None,
            newest_node_created=newest[0] if newest else None,
            newest_node=newest[1] if newest else None,
        )

    return _readable(read)


def node_claims(kube: KubeClient) -> tuple[NodeClaimFact, ...] | Unreadable:
    def read() -> tuple[NodeClaimFact, ...] | Unreadable:
        try:
            items = kube.list_items(NODE_CLAIMS, page_size=_PAGE)
        except NotFound:  # before install
            return Unreadable(f"{NODE_CLAIMS.plural}.{NODE_CLAIMS.group} is not installed", NOT_INSTALLED)
        return tuple(f for f in (node_claim_fact(o) for o in items) if f is not None)

    return _readable(read)


def karpenter(kube: KubeClient, now: datetime) -> KarpenterController | Unreadable:
    def read() -> KarpenterController:
        deployments = kube.list_items(DEPLOYMENTS, label_selector=DEPLOYMENT_SELECTOR)
        leases = kube.list_items(LEASES, field_selector=f"metadata.name={LEASE_NAME}")
        return karpenter_controller(deployments, leases, now)

    return _readable(read)
