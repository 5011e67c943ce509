"""A simulated kubelet: moto instances launched for NodeClaims become Kubernetes Nodes.

What a real kubelet started from nodeflow's user data does, seen from the API server: it registers a Node named
after the instance's private DNS name, with ``spec.providerID`` ``aws:///<zone>/<instance id>``, the NodeClaim's
labels plus the well-known ones, the claim's taints and startup taints plus ``karpenter.sh/unregistered``, and
Ready=False. A little later it reports Ready=True, and the daemons that own the startup taints (CNI, CSI, ...)
remove them. When the instance goes away the Node stays, and its Ready condition becomes Unknown (the node
lifecycle controller's doing, in a real cluster). Removing ``karpenter.sh/unregistered`` and linking the Node to
its NodeClaim are Karpenter's (here nodeflow's) job, not the kubelet's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nodeflow.kube.client import NODE_CLAIMS, NODES, STRATEGIC_MERGE_PATCH, KubeClient
from nodeflow.kube.errors import Conflict, NotFound

__all__ = [
    "DEFAULT_CAPACITY",
    "UNREGISTERED_TAINT",
    "KubeletEvent",
    "SimulatedKubelet",
    "cluster_instances",
    "mark_ready",
    "node_body",
    "node_claim",
    "provider_id",
    "ready_condition",
]

LOG = logging.getLogger(__name__)

TAG_NODECLAIM = "karpenter.sh/nodeclaim"
UNREGISTERED_TAINT = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
DEFAULT_CAPACITY = {"cpu": "2", "memory": "8Gi", "pods": "110"}
LIVE_STATES = ("pending", "running")
GONE_STATES = ("shutting-down", "terminated", "stopping", "stopped")
_EC2_ARCH = {"x86_64": "amd64", "arm64": "arm64", "x86_64_mac": "amd64", "arm64_mac": "arm64"}


def provider_id(zone: str, instance_id: str) -> str:
    return f"aws:///{zone}/{instance_id}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tags(instance: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags") or []}


def _taint(t: Mapping[str, Any]) -> dict[str, str]:
    out = {"key": str(t["key"]), "effect": str(t["effect"])}
    if t.get("value"):
        out["value"] = str(t["value"])
    return out


def _taint_id(t: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(t.get("key")), str(t.get("value") or ""), str(t.get("effect")))


def _ready_status(node: Mapping[str, Any]) -> str | None:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status"))
    return None


def node_claim(kube: KubeClient, name: str) -> dict[str, Any] | None:
    """The NodeClaim ``name`` (None when the name is empty or the claim does not exist)."""
    if not name:
        return None
    try:
        return kube.get(NODE_CLAIMS, name)
    except NotFound:
        return None


def cluster_instances(ec2: Any, cluster_name: str) -> Iterator[dict[str, Any]]:
    """The EC2 instances of ``cluster_name`` launched for a NodeClaim (every state), all pages."""
    filters = [
        {"Name": f"tag:kubernetes.io/cluster/{cluster_name}", "Values": ["owned"]},
        {"Name": "tag-key", "Values": [TAG_NODECLAIM]},
    ]
    kwargs: dict[str, Any] = {"Filters": filters, "MaxResults": 1000}
    while True:
        page = ec2.describe_instances(**kwargs)
        for reservation in page.get("Reservations") or []:
            yield from reservation.get("Instances") or []
        token = page.get("NextToken")
        if not token:
            return
        kwargs["NextToken"] = token


def node_body(inst: Mapping[str, Any], claim: Mapping[str, Any], kubelet_version: str) -> dict[str, Any]:
    """The Node a kubelet started from nodeflow's user data registers for ``inst``/``claim``: Ready=False."""
    iid = inst["InstanceId"]
    zone = (inst.get("Placement") or {}).get("AvailabilityZone", "")
    ip = inst.get("PrivateIpAddress") or ""
    name = inst.get("PrivateDnsName") or (f"ip-{ip.replace('.', '-')}.ec2.internal" if ip else iid)
    claim_meta = claim.get("metadata") or {}
    claim_spec = claim.get("spec") or {}
    claim_status = claim.get("status") or {}
    claim_labels: dict[str, str] = dict(claim_meta.get("labels") or {})
    arch = claim_labels.get("kubernetes.io/arch") or _EC2_ARCH.get(inst.get("Architecture") or "", "amd64")
    labels = {
        **claim_labels,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch,
        "node.kubernetes.io/instance-type": inst.get("InstanceType", ""),
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": zone[:-1] if zone else "",
        "karpenter.sh/capacity-type": "spot" if inst.get("InstanceLifecycle") == "spot" else "on-demand",
    }
    taints: list[dict[str, str]] = []
    for t in [*(claim_spec.get("taints") or []), *(claim_spec.get("startupTaints") or []), UNREGISTERED_TAINT]:
        taint = _taint(t)
        if _taint_id(taint) not in {_taint_id(x) for x in taints}:
            taints.append(taint)
    capacity = dict(claim_status.get("capacity") or DEFAULT_CAPACITY)
    allocatable = dict(claim_status.get("allocatable") or capacity)
    now = _now()
    addresses = [{"type": "InternalIP", "address": ip}] if ip else []
    addresses += [{"type": "InternalDNS", "address": name}, {"type": "Hostname", "address": name}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": provider_id(zone, iid), "taints": taints},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "addresses": addresses,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "KubeletNotReady",
                    "message": "container runtime network not ready: NetworkReady=false",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "nodeInfo": {
                "architecture": arch,
                "operatingSystem": "linux",
                "kubeletVersion": kubelet_version,
                "containerRuntimeVersion": "containerd://1.7.27",
            },
        },
    }


def ready_condition(stamp: str) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def mark_ready(kube: KubeClient, name: str, startup_taints: list[dict[str, str]], attempts: int = 5) -> bool:
    """Report the Node Ready, then remove its startup taints as the daemons owning them would (a strategic merge
    status patch, then a spec patch guarded by the resourceVersion read, read again and retried on a conflict: the
    node lifecycle controller writes the same taints when the Node turns Ready); False when every attempt met a
    conflict (try again on a later pass)."""
    kube.patch(
        NODES,
        name,
        {"status": {"conditions": [ready_condition(_now())]}},
        subresource="status",
        content_type=STRATEGIC_MERGE_PATCH,
    )
    startup = {_taint_id(t) for t in startup_taints}
    if not startup:
        return True
    for _ in range(attempts):
        current = kube.get(NODES, name)
        taints = (current.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if _taint_id(t) not in startup]
        if len(kept) == len(taints):
            return True
        try:
            kube.patch(
                NODES,
                name,
                {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "spec": {"taints": kept}},
            )
        except Conflict:
            continue
        return True
    return False


@dataclass(frozen=True)
class KubeletEvent:
    kind: str  # registered | ready | unknown
    node: str
    instance_id: str
    node_claim: str
    at: float  # the kubelet's clock
    wall: datetime


@dataclass
class _Instance:
    instance_id: str
    first_seen: float
    node_claim: str = ""
    node_name: str | None = None
    registered_at: float | None = None
    ready: bool = False
    startup_taints: list[dict[str, str]] = field(default_factory=list)


class SimulatedKubelet:
    """Turns the cluster's moto instances into Nodes; call ``step()`` or ``run_in_background()``.

    ``register_after``/``ready_after`` are seconds on ``clock``: from first seeing the instance to registering,
    and from registering to Ready. ``skip(nodeclaim_name)`` true: that instance never registers (a node that
    fails to join). An instance whose NodeClaim does not exist (yet, or any more) is not registered either.
    """

    def __init__(
        self,
        kube: KubeClient,
        ec2: Any,
        cluster_name: str,
        *,
        register_after: float = 0.0,
        ready_after: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        skip: Callable[[str], bool] | None = None,
        kubelet_version: str = "v1.33.0",
    ) -> None:
        self.kube = kube
        self.ec2 = ec2
        self.cluster_name = cluster_name
        self.register_after = register_after
        self.ready_after = ready_after
        self.clock = clock
        self.skip = skip
        self.kubelet_version = kubelet_version
        self.events: list[KubeletEvent] = []
        self.errors: list[BaseException] = []
        self._instances: dict[str, _Instance] = {}
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # --- running ----------------------------------------------------------------------------

    def run_in_background(self, interval: float = 0.05) -> SimulatedKubelet:
        """Call ``step()`` every ``interval`` seconds in a daemon thread until ``stop()``."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(interval,), name=f"kubelet-{self.cluster_name}", daemon=True
        )
        self._thread.start()
        return self

    def _loop(self, interval: float) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:
                LOG.exception("simulated kubelet step failed")
                with self._lock:
                    self.errors.append(exc)
            self._stop.wait(interval)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> SimulatedKubelet:
        return self.run_in_background()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- one pass ---------------------------------------------------------------------------

    def step(self) -> None:
        """One reconcile pass over the cluster's instances and Nodes."""
        with self._lock:
            instances = list(cluster_instances(self.ec2, self.cluster_name))
            nodes = {
                str((n.get("spec") or {}).get("providerID")): n
                for n in self.kube.list_items(NODES)
                if (n.get("spec") or {}).get("providerID")
            }
            now = self.clock()
            for inst in instances:
                state = (inst.get("State") or {}).get("Name", "")
                zone = (inst.get("Placement") or {}).get("AvailabilityZone", "")
                pid = provider_id(zone, inst["InstanceId"])
                node = nodes.get(pid)
                if state in LIVE_STATES:
                    self._live(inst, node, now)
                elif state in GONE_STATES and node is not None:
                    self._gone(inst, node, now)

    def _live(self, inst: Mapping[str, Any], node: Mapping[str, Any] | None, now: float) -> None:
        iid = inst["InstanceId"]
        claim_name = _tags(inst).get(TAG_NODECLAIM, "")
        track = self._instances.get(iid)
        if track is None:
            track = self._instances[iid] = _Instance(iid, first_seen=now, node_claim=claim_name)
        if node is None:
            if track.registered_at is not None:  # our Node was deleted: a kubelet registers again
                track.registered_at, track.node_name, track.ready = None, None, False
            if now - track.first_seen < self.register_after:
                return
            if self.skip is not None and self.skip(claim_name):
                return
            self._register(inst, track, claim_name, now)
            return
        if track.registered_at is None:  # a Node we did not create (kubelet restarted): adopt it
            track.registered_at = now
            track.node_name = node["metadata"]["name"]
            track.ready = _ready_status(node) == "True"
            if not track.ready:
                track.startup_taints = self._claim_startup_taints(claim_name)
        if not track.ready and now - track.registered_at >= self.ready_after:
            self._mark_ready(node, track, now)

    def _claim(self, name: str) -> dict[str, Any] | None:
        return node_claim(self.kube, name)

    def _claim_startup_taints(self, name: str) -> list[dict[str, str]]:
        claim = self._claim(name) or {}
        return [_taint(t) for t in (claim.get("spec") or {}).get("startupTaints") or []]

    def node_body(self, inst: Mapping[str, Any], claim: Mapping[str, Any]) -> dict[str, Any]:
        """The Node a kubelet started from nodeflow's user data registers for ``inst``/``claim``."""
        return node_body(inst, claim, self.kubelet_version)

    def _register(self, inst: Mapping[str, Any], track: _Instance, claim_name: str, now: float) -> None:
        claim = self._claim(claim_name)
        if claim is None:
            LOG.debug("instance %s: NodeClaim %r not found, not registering", inst["InstanceId"], claim_name)
            return
        body = self.node_body(inst, claim)
        try:
            created = self.kube.create(NODES, body)
        except Conflict:  # AlreadyExists: a Node of that name (a previous instance); retry next step
            LOG.info("instance %s: Node %s already exists", inst["InstanceId"], body["metadata"]["name"])
            return
        track.node_name = created["metadata"]["name"]
        track.registered_at = now
        track.ready = False
        track.startup_taints = [_taint(t) for t in (claim.get("spec") or {}).get("startupTaints") or []]
        self._event("registered", track, now)

    def _mark_ready(self, node: Mapping[str, Any], track: _Instance, now: float) -> None:
        if not mark_ready(self.kube, node["metadata"]["name"], track.startup_taints):
            return  # someone else wrote the node meanwhile: try again next step
        track.ready = True
        self._event("ready", track, now)

    def _gone(self, inst: Mapping[str, Any], node: Mapping[str, Any], now: float) -> None:
        if _ready_status(node) == "Unknown":
            return
        stamp = _now()
        unknown = {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        name = node["metadata"]["name"]
        try:
            self.kube.patch(
                NODES,
                name,
                {"status": {"conditions": [unknown]}},
                subresource="status",
                content_type=STRATEGIC_MERGE_PATCH,
            )
        except NotFound:
            return
        iid = inst["InstanceId"]
        track = self._instances.get(iid) or _Instance(
            iid, first_seen=now, node_claim=_tags(inst).get(TAG_NODECLAIM, "")
        )
        track.node_name, track.ready = name, False
        self._instances[iid] = track
        self._event("unknown", track, now)

    def _event(self, kind: str, track: _Instance, now: float) -> None:
        event = KubeletEvent(kind, track.node_name or "", track.instance_id, track.node_claim, now, datetime.now(UTC))
        self.events.append(event)
        LOG.info("kubelet: node %s (%s, claim %s) %s", event.node, event.instance_id, event.node_claim, kind)

    # --- queries ----------------------------------------------------------------------------

    def node_name(self, instance_id: str) -> str | None:
        with self._lock:
            track = self._instances.get(instance_id)
            return track.node_name if track else None

    def events_of(self, kind: str) -> list[KubeletEvent]:
        with self._lock:
            return [e for e in self.events if e.kind == kind]
