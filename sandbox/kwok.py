"""Simulated kubelets against a real API server, the way KWOK plays them: for every live moto instance launched for
a NodeClaim, a kubelet that registers its Node, keeps it alive, runs the pods bound to it and confirms their
deletion; when the instance goes away, the kubelet goes silent and the real node lifecycle controller does the rest.

What each simulated kubelet does, seen from the API server:

- Registers the Node ``sandbox.kubelet.node_body`` describes (providerID, the NodeClaim's labels and taints plus
  ``karpenter.sh/unregistered``, capacity and allocatable, Ready=False, no pressure) ``register_after`` seconds after
  the instance is first seen and once the NodeClaim has the capacity the Launch step computed (a real instance
  takes longer to boot than that write; a Node with a default capacity would mislead kube-scheduler), and creates
  its Lease in ``kube-node-lease`` (owned by the Node, so it goes with it).
  Registration is once per kubelet: a Node deleted under a running kubelet is not registered again (as a real kubelet
  does), until the instance restarts.
- ``ready_after`` seconds later, reports Ready=True and removes the NodeClaim's startup taints (the daemons owning
  them would). ``skip(nodeclaim)`` true: that instance's kubelet never registers (a node that fails to join).
- Renews the Lease every quarter of ``lease_duration`` and re-posts the Node's conditions (fresh heartbeats) every
  ``status_interval`` seconds, and at once when it sees its Node's Ready condition is not True while it runs (after
  the node lifecycle controller marked it Unknown, say).
- Marks every pod bound to its Node Running and Ready (pod IP, host IP, start time, container statuses, the pod
  conditions) once the Node is Ready.
- Confirms a pod deletion (delete with grace period 0 and the pod's uid as precondition) when the grace period ends
  (the pod's ``deletionTimestamp``), or ``container_stop_seconds`` after it saw the deletion when that is sooner
  (containers that exit promptly on SIGTERM).
- When its instance is shutting down, stopped, terminated or gone from EC2, it stops everything: no more Lease
  renewals, no status, no pod work. The node lifecycle controller then marks the Node Ready=Unknown after its
  grace period, taints it ``node.kubernetes.io/unreachable`` and evicts its pods, which stay Terminating (nobody
  confirms) until the Node is deleted.

Pods and Nodes are followed by watches (``sandbox.informer``), not by listing them over and over; only EC2 is
polled (``instance_interval``). API writes go through a small thread pool so a few thousand pods start quickly.
"""

from __future__ import annotations

import heapq
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nodeflow.kube.client import NODES, PODS, STRATEGIC_MERGE_PATCH, KubeClient, Resource
from nodeflow.kube.errors import AlreadyExists, Conflict, NotFound
from sandbox.informer import Informer
from sandbox.kubelet import (
    GONE_STATES,
    LIVE_STATES,
    TAG_NODECLAIM,
    cluster_instances,
    mark_ready,
    node_body,
    node_claim,
    provider_id,
)

__all__ = ["LEASES", "NODE_LEASE_NAMESPACE", "SimulatedKubelets"]

LOG = logging.getLogger(__name__)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
NODE_LEASE_NAMESPACE = "kube-node-lease"
PRESSURE = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)
POD_NETWORK = ipaddress.ip_network("10.128.0.0/9")
_TERMINAL = ("Succeeded", "Failed")


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _condition(obj: Mapping[str, Any], kind: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


@dataclass
class _Node:
    """A Node whose kubelet runs (its instance is live)."""

    name: str
    instance_id: str
    claim: str
    uid: str
    host_ip: str
    registered_at: float
    registered_stamp: str
    startup_taints: list[dict[str, str]] = field(default_factory=list)
    ready: bool = False
    ready_stamp: str = ""
    next_lease: float = 0.0
    next_status: float = 0.0


@dataclass
class _Pod:
    uid: str
    namespace: str
    name: str
    node: str
    running: bool
    terminal: bool
    deletion: datetime | None
    host_network: bool
    spec: Mapping[str, Any]
    pod_ip: str = ""  # kept once given: a pod's IP never changes
    start_time: str = ""


@dataclass(frozen=True)
class KubeletEvent:
    kind: str  # registered | ready | gone | deleted
    node: str
    instance_id: str
    node_claim: str
    at: float


class SimulatedKubelets:
    """One simulated kubelet per live instance of ``cluster_name``; ``start()``/``stop()`` (or ``with``)."""

    def __init__(
        self,
        kube: KubeClient,
        ec2: Any,
        cluster_name: str,
        *,
        register_after: float = 0.0,
        ready_after: float = 0.0,
        lease_duration: int = 40,
        status_interval: float = 60.0,
        container_stop_seconds: float | None = None,
        instance_interval: float = 0.5,
        tick: float = 0.05,
        workers: int = 4,
        skip: Callable[[str], bool] | None = None,
        kubelet_version: str = "v1.36.2",
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.ec2 = ec2
        self.cluster_name = cluster_name
        self.register_after = register_after
        self.ready_after = ready_after
        self.lease_duration = lease_duration
        self.status_interval = status_interval
        self.container_stop_seconds = container_stop_seconds
        self.instance_interval = instance_interval
        self.tick = tick
        self.skip = skip
        self.kubelet_version = kubelet_version
        self.clock = clock
        self.wall = wall
        self.events: list[KubeletEvent] = []
        self.errors: list[BaseException] = []
        self.lease_renewals = 0
        self._lock = threading.RLock()
        self._nodes: dict[str, _Node] = {}  # name -> running kubelet
        self._by_instance: dict[str, str] = {}  # instance id -> node name
        self._first_seen: dict[str, float] = {}
        self._retired: set[str] = set()  # instances whose Node was deleted under their running kubelet
        self._node_cache: dict[str, dict[str, Any]] = {}  # every Node: name -> {uid, providerID, ready}
        self._pods: dict[str, dict[str, _Pod]] = {}  # node -> uid -> pod bound there
        self._pod_node: dict[str, str] = {}  # uid -> node
        self._busy: set[str] = set()  # pod uids with a write in flight
        self._deletions: list[tuple[float, str, str]] = []  # heap of (due, node, uid)
        self._scheduled: set[str] = set()
        self._next_ip = 1
        self._next_poll = 0.0
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="kwok-write")
        self._informers = [
            Informer(kube, NODES, self._on_node),
            Informer(kube, PODS, self._on_pod, field_selector="spec.nodeName!="),
        ]
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------- running

    def start(self, timeout: float = 30.0) -> SimulatedKubelets:
        for informer in self._informers:
            informer.start()
        for informer in self._informers:
            if not informer.synced.wait(timeout):
                self.stop()
                raise TimeoutError(
                    f"simulated kubelets: the {informer.resource.plural} watch did not sync: {informer.errors[-1:]}"
                )
        self._thread = threading.Thread(target=self._loop, name=f"kwok-{self.cluster_name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        for informer in self._informers:
            informer.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> SimulatedKubelets:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:
                LOG.exception("simulated kubelets: step failed")
                self.errors.append(exc)
            self._stop.wait(self.tick)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        def run() -> None:
            try:
                fn(*args)
            except Exception as exc:
                LOG.warning("simulated kubelets: %s failed: %s", getattr(fn, "__name__", fn), exc)
                self.errors.append(exc)

        if not self._stop.is_set():
            self._pool.submit(run)

    # ------------------------------------------------------------------------------------------- one pass

    def step(self) -> None:
        """Poll EC2 when due, then do the Lease renewals, status posts and pod deletions that are due."""
        now = self.clock()
        if now >= self._next_poll:
            self._next_poll = now + self.instance_interval
            self._reconcile_instances(now)
        with self._lock:
            for node in self._nodes.values():
                if now >= node.next_lease:
                    node.next_lease = now + self.lease_duration / 4
                    self._submit(self._renew_lease, node)
                if node.ready and now >= node.next_status:
                    node.next_status = now + self.status_interval
                    self._submit(self._post_status, node)
            while self._deletions and self._deletions[0][0] <= now:
                _, node_name, uid = heapq.heappop(self._deletions)
                self._scheduled.discard(uid)
                pod = self._pods.get(node_name, {}).get(uid)
                if pod is not None and node_name in self._nodes:
                    self._submit(self._confirm_deletion, pod)

    def _reconcile_instances(self, now: float) -> None:
        live: dict[str, dict[str, Any]] = {}
        for inst in cluster_instances(self.ec2, self.cluster_name):
            state = (inst.get("State") or {}).get("Name", "")
            if state in LIVE_STATES:
                live[inst["InstanceId"]] = inst
            elif state in GONE_STATES:
                self._retired.discard(inst["InstanceId"])  # a later start is a new kubelet process
        with self._lock:
            for iid, name in list(self._by_instance.items()):
                if iid not in live:
                    self._silence(name, "gone", now)
        for iid, inst in live.items():
            self._first_seen.setdefault(iid, now)
            with self._lock:
                known = self._by_instance.get(iid)
                node = self._nodes.get(known) if known else None
            if node is None:
                if iid not in self._retired:
                    self._start_kubelet(inst, now)
            elif not node.ready and now - node.registered_at >= self.ready_after:
                self._mark_ready(node, now)

    def _silence(self, name: str, why: str, now: float) -> None:
        """The kubelet of Node ``name`` stops (its instance is gone, or its Node was deleted)."""
        node = self._nodes.pop(name, None)
        if node is None:
            return
        self._by_instance.pop(node.instance_id, None)
        if why == "deleted":
            self._retired.add(node.instance_id)
        self._event(why, node, now)

    # ------------------------------------------------------------------------------------------- registration

    def _start_kubelet(self, inst: Mapping[str, Any], now: float) -> None:
        iid = inst["InstanceId"]
        claim_name = {t["Key"]: t["Value"] for t in inst.get("Tags") or []}.get(TAG_NODECLAIM, "")
        zone = (inst.get("Placement") or {}).get("AvailabilityZone", "")
        pid = provider_id(zone, iid)
        with self._lock:
            existing = next((n for n, c in self._node_cache.items() if c["providerID"] == pid), None)
        claim = node_claim(self.kube, claim_name)
        startup = [dict(t) for t in ((claim or {}).get("spec") or {}).get("startupTaints") or []]
        stamp = _stamp(self.wall())
        if existing is not None:  # the kubelet (re)starts on an instance whose Node exists: it carries on with it
            uid = self._node_cache[existing]["uid"]
            node = _Node(existing, iid, claim_name, uid, inst.get("PrivateIpAddress") or "", now, stamp, startup)
        else:
            if now - self._first_seen[iid] < self.register_after:
                return
            if claim is None or (self.skip is not None and self.skip(claim_name)):
                return
            if not (claim.get("status") or {}).get("allocatable"):
                # A real instance boots for tens of seconds, long after the Launch step wrote the NodeClaim's
                # capacity; the Node reports the machine's (here: the capacity Launch computed), never a default.
                return
            body = node_body(inst, claim, self.kubelet_version)
            body["status"]["conditions"] += [
                {
                    "type": t,
                    "status": "False",
                    "reason": r,
                    "message": m,
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
                for t, r, m in PRESSURE
            ]
            try:
                created = self.kube.create(NODES, body)
            except AlreadyExists:  # a Node of that name (an earlier instance's) is still there: retry later
                LOG.info("instance %s: Node %s already exists", iid, body["metadata"]["name"])
                return
            meta = created["metadata"]
            node = _Node(
                meta["name"], iid, claim_name, meta["uid"], inst.get("PrivateIpAddress") or "", now, stamp, startup
            )
        with self._lock:
            self._nodes[node.name] = node
            self._by_instance[iid] = node.name
        self._event("registered", node, now)
        if self.ready_after <= 0:
            self._mark_ready(node, now)

    def _mark_ready(self, node: _Node, now: float) -> None:
        if not mark_ready(self.kube, node.name, node.startup_taints):
            return  # the startup taints' patch met a conflict: next pass
        with self._lock:
            node.ready = True
            node.ready_stamp = _stamp(self.wall())
            node.next_status = now + self.status_interval
            pods = list(self._pods.get(node.name, {}).values())
        self._event("ready", node, now)
        for pod in pods:
            self._reconcile_pod(pod)

    # ------------------------------------------------------------------------------------------- heartbeats

    def _renew_lease(self, node: _Node) -> None:
        now = _micro(self.wall())
        spec = {"holderIdentity": node.name, "leaseDurationSeconds": self.lease_duration, "renewTime": now}
        try:
            self.kube.patch(LEASES, node.name, {"spec": spec}, namespace=NODE_LEASE_NAMESPACE)
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": node.name,
                    "namespace": NODE_LEASE_NAMESPACE,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}],
                },
                "spec": {**spec, "acquireTime": now},
            }
            try:
                self.kube.create(LEASES, body, namespace=NODE_LEASE_NAMESPACE)
            except AlreadyExists:
                return
        self.lease_renewals += 1

    def _post_status(self, node: _Node) -> None:
        stamp = _stamp(self.wall())
        conditions = [
            {
                "type": t,
                "status": "False",
                "reason": r,
                "message": m,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": node.registered_stamp,
            }
            for t, r, m in PRESSURE
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": node.ready_stamp or stamp,
            }
        )
        try:
            self.kube.patch(
                NODES,
                node.name,
                {"status": {"conditions": conditions}},
                subresource="status",
                content_type=STRATEGIC_MERGE_PATCH,
            )
        except NotFound:
            with self._lock:
                self._silence(node.name, "deleted", self.clock())

    def _on_node(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        with self._lock:
            if kind == "DELETED":
                self._node_cache.pop(name, None)
                if name in self._nodes and self._nodes[name].uid == meta.get("uid"):
                    self._silence(name, "deleted", self.clock())
                return
            self._node_cache[name] = {
                "uid": meta.get("uid"),
                "providerID": (obj.get("spec") or {}).get("providerID") or "",
            }
            node = self._nodes.get(name)
            if node is not None and node.ready and _condition(obj, "Ready") != "True":
                node.ready_stamp = _stamp(self.wall())  # a transition back to Ready
                node.next_status = 0.0  # post at once

    # ------------------------------------------------------------------------------------------- pods

    def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        uid, node = str(meta.get("uid")), str(spec.get("nodeName") or "")
        with self._lock:
            if kind == "DELETED":
                bound = self._pod_node.pop(uid, None)
                if bound is not None:
                    self._pods.get(bound, {}).pop(uid, None)
                return
            deletion = meta.get("deletionTimestamp")
            pod = _Pod(
                uid=uid,
                namespace=str(meta.get("namespace")),
                name=str(meta.get("name")),
                node=node,
                running=status.get("phase") == "Running" and _condition(obj, "Ready") == "True",
                terminal=status.get("phase") in _TERMINAL,
                deletion=_parse_time(deletion) if deletion else None,
                host_network=bool(spec.get("hostNetwork")),
                spec=spec,
                pod_ip=str(status.get("podIP") or ""),
                start_time=str(status.get("startTime") or ""),
            )
            self._pods.setdefault(node, {})[uid] = pod
            self._pod_node[uid] = node
        self._reconcile_pod(pod)

    def _reconcile_pod(self, pod: _Pod) -> None:
        with self._lock:
            node = self._nodes.get(pod.node)
            if node is None:
                return  # no kubelet runs there
            if pod.deletion is not None:
                if pod.uid not in self._scheduled:
                    now = self.clock()
                    due = now + (pod.deletion - self.wall()).total_seconds()
                    if self.container_stop_seconds is not None:
                        due = min(due, now + self.container_stop_seconds)
                    heapq.heappush(self._deletions, (due, pod.node, pod.uid))
                    self._scheduled.add(pod.uid)
                return
            if not node.ready or pod.running or pod.terminal or pod.uid in self._busy:
                return
            self._busy.add(pod.uid)
            ip = pod.pod_ip or (node.host_ip if pod.host_network else self._allocate_ip())
        self._submit(self._run_pod, pod, node.host_ip, ip)

    def _allocate_ip(self) -> str:
        address = str(POD_NETWORK[self._next_ip])
        self._next_ip += 1
        return address

    def _run_pod(self, pod: _Pod, host_ip: str, pod_ip: str) -> None:
        stamp = _stamp(self.wall())
        running = {"running": {"startedAt": stamp}}
        containers = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": f"containerd://{pod.uid.replace('-', '')}{i:02d}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": running,
            }
            for i, c in enumerate(pod.spec.get("containers") or [])
        ]
        inits = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": {
                    "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": stamp, "finishedAt": stamp}
                },
            }
            for c in pod.spec.get("initContainers") or []
        ]
        conditions = [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
            for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
        ]
        status: dict[str, Any] = {
            "phase": "Running",
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}] if host_ip else [],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}] if pod_ip else [],
            "startTime": pod.start_time or stamp,
            "conditions": conditions,
            "containerStatuses": containers,
        }
        if inits:
            status["initContainerStatuses"] = inits
        try:
            self.kube.patch(
                PODS,
                pod.name,
                {"status": status},
                namespace=pod.namespace,
                subresource="status",
                content_type=STRATEGIC_MERGE_PATCH,
            )
        except NotFound:
            pass
        finally:
            with self._lock:
                self._busy.discard(pod.uid)

    def _confirm_deletion(self, pod: _Pod) -> None:
        try:
            self.kube.delete(PODS, pod.name, pod.namespace, grace_period_seconds=0, uid=pod.uid)
        except (NotFound, Conflict):
            return
        with self._lock:
            node = self._nodes.get(pod.node)
        if node is not None:
            self._event("deleted", node, self.clock(), f"{pod.namespace}/{pod.name}")

    # ------------------------------------------------------------------------------------------- queries

    def _event(self, kind: str, node: _Node, now: float, detail: str = "") -> None:
        self.events.append(KubeletEvent(kind, node.name, node.instance_id, detail or node.claim, now))
        LOG.info("kubelet %s (%s): %s %s", node.name, node.instance_id, kind, detail)

    def node_name(self, instance_id: str) -> str | None:
        with self._lock:
            return self._by_instance.get(instance_id)

    def running(self) -> list[str]:
        """Names of the Nodes whose kubelet runs."""
        with self._lock:
            return sorted(self._nodes)

    def events_of(self, kind: str) -> list[KubeletEvent]:
        return [e for e in self.events if e.kind == kind]
