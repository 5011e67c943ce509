"""Karpenter's cluster-state gauges, under Karpenter's metric and label names, for ``/metrics``.

``compute`` is pure: LISTed nodes, pods, NodePools and NodeClaims (plus the time and the pods seen pending
before) in, samples out. ``ClusterMetrics`` LISTs them when scraped (at most every ``min_interval`` seconds,
otherwise the previous text is served) and renders Prometheus text.

Values follow Karpenter: cpu in cores, every other resource in its base unit (bytes, count); resource names
lower-case with ``-`` as ``_`` (label ``resource_type``).
"""

from __future__ import annotations

import calendar
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from .kube import KubeClient, KubeError, NotFound
from .log import get_logger

__all__ = [
    "CLUSTER_METRICS",
    "NODE_LABELS",
    "ClusterMetrics",
    "Histogram",
    "Sample",
    "Snapshot",
    "bound_durations",
    "compute",
    "parse_quantity",
    "pod_requests",
    "render",
]

log = get_logger("cluster")
Obj = dict[str, Any]
Labels = tuple[tuple[str, str], ...]

#: name -> (type, help)
CLUSTER_METRICS: dict[str, tuple[str, str]] = {
    "karpenter_nodes_allocatable": ("gauge", "Node allocatable, by node and resource type."),
    "karpenter_nodes_total_pod_requests": ("gauge", "Requests of the non-terminal pods bound to the node."),
    "karpenter_nodes_total_pod_limits": ("gauge", "Limits of the non-terminal pods bound to the node."),
    "karpenter_nodes_total_daemon_requests": ("gauge", "Requests of the DaemonSet pods bound to the node."),
    "karpenter_nodes_total_daemon_limits": ("gauge", "Limits of the DaemonSet pods bound to the node."),
    "karpenter_nodes_system_overhead": ("gauge", "Node capacity minus allocatable, by resource type."),
    "karpenter_nodes_current_lifetime_seconds": ("gauge", "Seconds since the node was created."),
    "karpenter_nodepools_usage": ("gauge", "Resources provisioned for a NodePool, by resource type."),
    "karpenter_nodepools_limit": ("gauge", "The NodePool's spec.limits, by resource type."),
    "karpenter_cluster_state_node_count": ("gauge", "Nodes and NodeClaims without a node yet, in cluster state."),
    "karpenter_cluster_state_synced": ("gauge", "1 when the last LIST of the cluster state succeeded."),
    "karpenter_pods_state": ("gauge", "1 per pod, labeled with its owner, node, phase and readiness."),
    "karpenter_pods_unstarted_time_seconds": ("gauge", "Seconds since creation of a pod that is not ready yet."),
    "karpenter_pods_startup_duration_seconds": ("summary", "Seconds from pod creation until the pod was ready."),
    "karpenter_pods_bound_duration_seconds": ("histogram", "Seconds from pod creation until the pod was bound."),
    "karpenter_cluster_utilization_percent": ("gauge", "Pod requests over allocatable of all nodes, by resource type."),
}

#: node label -> metric label (Karpenter's well-known labels, snake_cased)
NODE_LABELS: dict[str, str] = {
    "karpenter.sh/nodepool": "nodepool",
    "topology.kubernetes.io/zone": "zone",
    "topology.kubernetes.io/region": "region",
    "node.kubernetes.io/instance-type": "instance_type",
    "kubernetes.io/arch": "arch",
    "kubernetes.io/os": "os",
    "karpenter.sh/capacity-type": "capacity_type",
    "node.kubernetes.io/windows-build": "windows_build",
}
NODEPOOL_LABEL = "karpenter.sh/nodepool"
QUANTILES = (0.0, 0.5, 0.9, 0.99, 1.0)
#: Karpenter's duration histogram buckets (seconds)
DURATION_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    *(1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60),
    *(120, 150, 300, 450, 600),
)
#: startup observations kept for the quantiles (the count and sum cover all)
MAX_OBSERVATIONS = 10_000

_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (``500m``, ``2Gi``, ``1e3``, ``4``) in base units; ValueError naming the value."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"invalid quantity {value!r}")
    text = str(value).strip()
    for suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"):
        if text.endswith(suffix):
            number, scale = text[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        number, scale = text, _SUFFIXES[""]
    try:
        result = Decimal(number) * scale
    except InvalidOperation:
        raise ValueError(f"invalid quantity {value!r}") from None
    if not result.is_finite():
        raise ValueError(f"invalid quantity {value!r}")
    return result


def _resource_type(name: str) -> str:
    return name.lower().replace("-", "_")


def _value(resource: str, quantity: Decimal) -> float:
    """Karpenter's reading: cpu in cores (from millicores), everything else rounded up to a whole unit."""
    if resource == "cpu":
        return float((quantity * 1000).to_integral_value(rounding="ROUND_CEILING")) / 1000
    return float(quantity.to_integral_value(rounding="ROUND_CEILING"))


def _resources(raw: Any) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    if isinstance(raw, dict):
        for name, q in raw.items():
            try:
                out[str(name)] = parse_quantity(q)
            except ValueError:
                log.warning("ignoring an invalid quantity", extra={"resource": name, "value": str(q)})
    return out


def _add(into: dict[str, Decimal], other: dict[str, Decimal]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, Decimal(0)) + v


def _max(into: dict[str, Decimal], other: dict[str, Decimal]) -> None:
    for k, v in other.items():
        into[k] = max(into.get(k, Decimal(0)), v)


def pod_requests(pod: Obj, which: str = "requests") -> dict[str, Decimal]:
    """A pod's effective requests (or limits): containers plus restartable init containers (sidecars), at
    least the largest regular init container with the sidecars started before it, plus the pod overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        _add(total, _resources((c.get("resources") or {}).get(which)))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or []:
        own = _resources((c.get("resources") or {}).get(which))
        if c.get("restartPolicy") == "Always":
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            step = dict(sidecars)
            _add(step, own)
            _max(init_peak, step)
    _add(total, sidecars)
    _max(total, init_peak)
    _add(total, _resources(spec.get("overhead")))
    return total


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Labels
    value: float


@dataclass
class Snapshot:
    """What a LIST returned."""

    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    nodepools: list[Obj] = field(default_factory=list)
    nodeclaims: list[Obj] = field(default_factory=list)


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _timestamp(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def _condition(obj: Obj, type_: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == type_:
            return c
    return None


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _is_daemon(pod: Obj) -> bool:
    return any(ref.get("kind") == "DaemonSet" for ref in _meta(pod).get("ownerReferences") or [])


def _lbl(**labels: str) -> Labels:
    return tuple(sorted(labels.items()))


def compute(snapshot: Snapshot, now: float, pending: set[str]) -> tuple[list[Sample], list[float], set[str]]:
    """Samples for ``snapshot`` at ``now``; ``pending`` holds the uids of pods seen not ready before.

    Returns (samples, startup durations observed now, the new pending set).
    """
    samples: list[Sample] = []
    nodes_by_name: dict[str, Obj] = {}
    claimed = {
        str((nc.get("status") or {}).get("providerID") or "")
        for nc in snapshot.nodeclaims
        if (nc.get("status") or {}).get("providerID")
    }
    node_provider_ids: set[str] = set()
    for node in snapshot.nodes:
        name = str(_meta(node).get("name") or "")
        if name:
            nodes_by_name[name] = node
        pid = str((node.get("spec") or {}).get("providerID") or "")
        if pid:
            node_provider_ids.add(pid)

    # ------------------------------------------------------------------ pods: per node sums, state, startup
    totals: dict[str, dict[str, dict[str, Decimal]]] = {
        k: {} for k in ("pod_requests", "pod_limits", "daemon_requests", "daemon_limits")
    }
    observed: list[float] = []
    still_pending: set[str] = set()
    for pod in snapshot.pods:
        meta, spec = _meta(pod), pod.get("spec") or {}
        node_name = str(spec.get("nodeName") or "")
        if node_name and not _terminal(pod):
            requests, limits = pod_requests(pod), pod_requests(pod, "limits")
            _add(totals["pod_requests"].setdefault(node_name, {}), requests)
            _add(totals["pod_limits"].setdefault(node_name, {}), limits)
            if _is_daemon(pod):
                _add(totals["daemon_requests"].setdefault(node_name, {}), requests)
                _add(totals["daemon_limits"].setdefault(node_name, {}), limits)
        node_labels = (nodes_by_name.get(node_name) or {}).get("metadata", {}).get("labels") or {}
        owners = meta.get("ownerReferences") or []
        owner = ""
        if owners:
            ref = owners[0]
            owner = f"/apis/{ref.get('apiVersion', '')}/namespaces/{meta.get('namespace', '')}/"
            owner += f"{str(ref.get('kind', '')).lower()}s/{ref.get('name', '')}"
        ready_cond = _condition(pod, "Ready")
        ready = bool(ready_cond and ready_cond.get("status") == "True")
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        samples.append(
            Sample(
                "karpenter_pods_state",
                _lbl(
                    name=name,
                    namespace=namespace,
                    owner=owner,
                    node=node_name,
                    scheduled="true" if node_name else "false",
                    nodepool=str(node_labels.get(NODEPOOL_LABEL, "")),
                    zone=str(node_labels.get("topology.kubernetes.io/zone", "")),
                    arch=str(node_labels.get("kubernetes.io/arch", "")),
                    capacity_type=str(node_labels.get("karpenter.sh/capacity-type", "")),
                    instance_type=str(node_labels.get("node.kubernetes.io/instance-type", "")),
                    phase=str((pod.get("status") or {}).get("phase") or ""),
                    ready="true" if ready else "false",
                    managed="true" if node_labels.get(NODEPOOL_LABEL) else "false",
                ),
                1,
            )
        )
        uid = str(meta.get("uid") or "")
        created = _timestamp(meta.get("creationTimestamp"))
        if not uid or created is None or _terminal(pod):
            continue
        if ready:
            if uid in pending:
                became_ready = _timestamp((ready_cond or {}).get("lastTransitionTime"))
                if became_ready is not None:
                    observed.append(max(0.0, became_ready - created))
        elif not meta.get("deletionTimestamp"):
            still_pending.add(uid)
            samples.append(
                Sample("karpenter_pods_unstarted_time_seconds", _lbl(name=name, namespace=namespace), now - created)
            )

    # ------------------------------------------------------------------------------------------ nodes
    for name, node in sorted(nodes_by_name.items()):
        meta, status = _meta(node), node.get("status") or {}
        labels = meta.get("labels") or {}
        pid = str((node.get("spec") or {}).get("providerID") or "")
        base = {metric: str(labels.get(key, "")) for key, metric in NODE_LABELS.items()}
        base.update(
            node_name=name,
            phase=str(status.get("phase") or ""),
            managed="true" if (pid and pid in claimed) or labels.get(NODEPOOL_LABEL) else "false",
        )
        allocatable, capacity = _resources(status.get("allocatable")), _resources(status.get("capacity"))
        overhead = {k: v - allocatable.get(k, Decimal(0)) for k, v in capacity.items()}
        per_resource = {
            "karpenter_nodes_allocatable": allocatable,
            "karpenter_nodes_system_overhead": overhead,
            "karpenter_nodes_total_pod_requests": totals["pod_requests"].get(name, {}),
            "karpenter_nodes_total_pod_limits": totals["pod_limits"].get(name, {}),
            "karpenter_nodes_total_daemon_requests": totals["daemon_requests"].get(name, {}),
            "karpenter_nodes_total_daemon_limits": totals["daemon_limits"].get(name, {}),
        }
        for metric, resources in per_resource.items():
            for resource, quantity in sorted(resources.items()):
                rt = _resource_type(resource)
                samples.append(Sample(metric, _lbl(**base, resource_type=rt), _value(resource, quantity)))
        created = _timestamp(meta.get("creationTimestamp"))
        if created is not None:
            samples.append(Sample("karpenter_nodes_current_lifetime_seconds", _lbl(**base), now - created))

    # -------------------------------------------------------------------------------------- nodepools
    usage_from_claims: dict[str, dict[str, Decimal]] = {}
    for nc in snapshot.nodeclaims:
        pool = str((_meta(nc).get("labels") or {}).get(NODEPOOL_LABEL) or "")
        if pool:
            _add(usage_from_claims.setdefault(pool, {}), _resources((nc.get("status") or {}).get("capacity")))
    for pool_obj in snapshot.nodepools:
        pool = str(_meta(pool_obj).get("name") or "")
        if not pool:
            continue
        # status.resources when a reconciler wrote it (Karpenter's source), else the NodeClaims' capacity
        usage = _resources((pool_obj.get("status") or {}).get("resources")) or usage_from_claims.get(pool, {})
        limits = _resources((pool_obj.get("spec") or {}).get("limits"))
        for metric, resources in (("karpenter_nodepools_usage", usage), ("karpenter_nodepools_limit", limits)):
            for resource, quantity in sorted(resources.items()):
                labels = _lbl(nodepool=pool, resource_type=_resource_type(resource))
                samples.append(Sample(metric, labels, _value(resource, quantity)))

    # ------------------------------------------------- cluster utilization: pod requests / allocatable, all nodes
    allocatable_all: dict[str, Decimal] = {}
    requested_all: dict[str, Decimal] = {}
    for name, node in nodes_by_name.items():
        _add(allocatable_all, _resources((node.get("status") or {}).get("allocatable")))
        _add(requested_all, totals["pod_requests"].get(name, {}))
    for resource, quantity in sorted(allocatable_all.items()):
        if quantity > 0:
            percent = 100 * requested_all.get(resource, Decimal(0)) / quantity
            labels = _lbl(resource_type=_resource_type(resource))
            samples.append(Sample("karpenter_cluster_utilization_percent", labels, float(percent)))

    launching = sum(
        1
        for nc in snapshot.nodeclaims
        if str((nc.get("status") or {}).get("providerID") or "") not in node_provider_ids
    )
    samples.append(Sample("karpenter_cluster_state_node_count", (), len(snapshot.nodes) + launching))
    return samples, observed, still_pending


def bound_durations(pods: list[Obj], unbound: set[str]) -> tuple[list[float], set[str]]:
    """Pod creation -> PodScheduled for pods seen unbound before (uids in ``unbound``).

    Returns (durations observed now, the uids of the pods that are still unbound).
    """
    observed: list[float] = []
    still: set[str] = set()
    for pod in pods:
        meta = _meta(pod)
        uid = str(meta.get("uid") or "")
        created = _timestamp(meta.get("creationTimestamp"))
        if not uid or created is None or _terminal(pod) or meta.get("deletionTimestamp"):
            continue
        scheduled = _condition(pod, "PodScheduled")
        if scheduled and scheduled.get("status") == "True":
            at = _timestamp(scheduled.get("lastTransitionTime"))
            if uid in unbound and at is not None:
                observed.append(max(0.0, at - created))
        elif not (pod.get("spec") or {}).get("nodeName"):
            still.add(uid)
    return observed, still


@dataclass
class Histogram:
    """A Prometheus histogram with Karpenter's duration buckets."""

    buckets: tuple[float, ...] = DURATION_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * len(DURATION_BUCKETS))
    count: int = 0
    total: float = 0.0

    def observe(self, value: float) -> None:
        for i, upper in enumerate(self.buckets):
            if value <= upper:
                self.counts[i] += 1
        self.count += 1
        self.total += value

    def lines(self, name: str) -> list[str]:
        out = [
            f'{name}_bucket{{le="{_number(upper)}"}} {n}' for upper, n in zip(self.buckets, self.counts, strict=True)
        ]
        out.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        return [*out, _line(f"{name}_sum", (), self.total), _line(f"{name}_count", (), self.count)]


def _number(v: float) -> str:
    return str(int(v)) if v == int(v) else repr(float(v))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _line(name: str, labels: Iterable[tuple[str, str]], value: float) -> str:
    rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return f"{name}{{{rendered}}} {_number(value)}" if rendered else f"{name} {_number(value)}"


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def render(
    samples: list[Sample],
    synced: bool,
    startup: list[float],
    startup_count: int,
    startup_sum: float,
    bound: Histogram | None = None,
) -> str:
    """Prometheus text for the samples, every metric with its HELP and TYPE."""
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    lines: list[str] = []
    for name, (type_, help_) in CLUSTER_METRICS.items():
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {type_}")
        if name == "karpenter_cluster_state_synced":
            lines.append(_line(name, (), 1 if synced else 0))
        elif name == "karpenter_pods_startup_duration_seconds":
            ordered = sorted(startup)
            for q in QUANTILES:
                value = _quantile(ordered, q)
                lines.append(f'{name}{{quantile="{q:g}"}} {"NaN" if value != value else _number(value)}')
            lines.append(_line(f"{name}_sum", (), startup_sum))
            lines.append(_line(f"{name}_count", (), startup_count))
        elif name == "karpenter_pods_bound_duration_seconds":
            lines.extend((bound or Histogram()).lines(name))
        else:
            for s in sorted(by_name.get(name, []), key=lambda s: s.labels):
                lines.append(_line(name, s.labels, s.value))
    return "\n".join(lines) + "\n"


PATHS = {
    "nodes": "/api/v1/nodes",
    "pods": "/api/v1/pods",
    "nodepools": "/apis/karpenter.sh/v1/nodepools",
    "nodeclaims": "/apis/karpenter.sh/v1/nodeclaims",
}


class ClusterMetrics:
    """LISTs the cluster when scraped (at most every ``min_interval`` seconds) and renders the gauges."""

    def __init__(
        self,
        client: KubeClient,
        *,
        min_interval: float = 10.0,
        page_size: int = 500,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.min_interval = min_interval
        self.page_size = page_size
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._text = ""
        self._samples: list[Sample] = []
        self._at: float | None = None
        self._pending: set[str] = set()
        self._startup: list[float] = []
        self._startup_count = 0
        self._startup_sum = 0.0
        self._unbound: set[str] = set()
        self._bound = Histogram()
        self.synced = False

    def _list(self, path: str) -> list[Obj]:
        items: list[Obj] = []
        try:
            for page in self.client.list_pages(path, self.page_size):
                items.extend(page.items)
        except NotFound:
            return []  # a CRD not installed: nothing of that kind
        return items

    def refresh(self) -> None:
        try:
            snapshot = Snapshot(**{kind: self._list(path) for kind, path in PATHS.items()})
        except (OSError, KubeError, ValueError) as e:
            log.warning("cannot list the cluster for metrics", extra={"error": f"{type(e).__name__}: {e}"})
            self.synced = False
            return
        samples, observed, self._pending = compute(snapshot, self._wall(), self._pending)
        self._samples = samples
        self._startup = (self._startup + observed)[-MAX_OBSERVATIONS:]
        self._startup_count += len(observed)
        self._startup_sum += sum(observed)
        bound, self._unbound = bound_durations(snapshot.pods, self._unbound)
        for seconds in bound:
            self._bound.observe(seconds)
        self.synced = True

    def render(self) -> str:
        with self._lock:
            now = self._clock()
            if self._at is None or now - self._at >= self.min_interval:
                self.refresh()
                self._at = now
                self._text = render(
                    self._samples, self.synced, self._startup, self._startup_count, self._startup_sum, self._bound
                )
            return self._text
