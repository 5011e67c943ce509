"""The parity suite's harness: manifest builders and in-process runs of the real CLI.

Every parity test builds Kubernetes objects (dicts, exactly as a user would write them in YAML),
then asks the real command line what it decides: ``plan -o json``, ``explain -o json`` or
``disrupt --dry-run -o json``. The objects are written to a YAML file and read back by
``nodeflow.cli.main`` (manifest loading and validation included), so a test sees what a user of the
CLI sees. Nothing here decides anything; the builders only spare the tests boilerplate.
"""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from nodeflow import cli
from nodeflow.catalog.offline import load_offline

Obj = dict[str, Any]

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
NODEPOOL = "karpenter.sh/nodepool"
ARCH = "kubernetes.io/arch"


def ts(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(**delta: float) -> str:
    """An RFC 3339 time ``delta`` before ``NOW`` (e.g. ``ago(minutes=5)``)."""
    return ts(NOW - timedelta(**delta))


# --- cluster configuration ----------------------------------------------------------------------------------------


def node_class(name: str = "default", *, zones: Sequence[str] = ZONES, **spec: Any) -> Obj:
    """A Ready EC2NodeClass (status filled as the controller would) with one subnet per zone."""
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "parity"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "parity"}}],
            **spec,
        },
        "status": {
            "amis": [{"id": "ami-0parity", "name": "al2023"}],
            "subnets": [{"id": f"subnet-{z[-1]}", "zone": z} for z in zones],
            "securityGroups": [{"id": "sg-parity"}],
        },
    }


def requirement(key: str, operator: str = "In", *values: str, min_values: int | None = None) -> Obj:
    req: Obj = {"key": key, "operator": operator}
    if values or operator in ("In", "NotIn"):
        req["values"] = list(values)
    if min_values is not None:
        req["minValues"] = min_values
    return req


def node_pool(
    name: str = "default",
    *,
    requirements: Iterable[Obj] = (),
    node_class_name: str = "default",
    weight: int | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Iterable[Obj] = (),
    startup_taints: Iterable[Obj] = (),
    limits: Mapping[str, str] | None = None,
    disruption: Mapping[str, Any] | None = None,
    expire_after: str | None = None,
    termination_grace_period: str | None = None,
) -> Obj:
    """A NodePool; by default any on-demand or spot linux type of the catalog (Karpenter's defaults)."""
    template_spec: Obj = {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": node_class_name},
        "requirements": list(requirements),
    }
    if taints:
        template_spec["taints"] = list(taints)
    if startup_taints:
        template_spec["startupTaints"] = list(startup_taints)
    if expire_after is not None:
        template_spec["expireAfter"] = expire_after
    if termination_grace_period is not None:
        template_spec["terminationGracePeriod"] = termination_grace_period
    template: Obj = {"spec": template_spec}
    meta: Obj = {}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if meta:
        template["metadata"] = meta
    spec: Obj = {"template": template}
    if weight is not None:
        spec["weight"] = weight
    if limits:
        spec["limits"] = dict(limits)
    spec["disruption"] = dict(
        disruption if disruption is not None else {"consolidationPolicy": "WhenEmptyOrUnderutilized"}
    )
    spec["disruption"].setdefault("consolidateAfter", "0s")
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def taint(key: str, value: str | None = None, effect: str = "NoSchedule") -> Obj:
    t: Obj = {"key": key, "effect": effect}
    if value is not None:
        t["value"] = value
    return t


def toleration(key: str | None = None, value: str | None = None, *, effect: str | None = None) -> Obj:
    t: Obj = {"operator": "Exists"} if value is None else {"operator": "Equal", "value": value}
    if key is not None:
        t["key"] = key
    if effect is not None:
        t["effect"] = effect
    return t


# --- workloads ----------------------------------------------------------------------------------------------------


def pod(
    name: str,
    *,
    namespace: str = "default",
    cpu: str | None = "1",
    memory: str | None = None,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    node_affinity: Iterable[Obj] | None = None,
    preferred_node_affinity: Iterable[tuple[int, Obj]] | None = None,
    pod_affinity: Iterable[Obj] = (),
    pod_anti_affinity: Iterable[Obj] = (),
    spread: Iterable[Obj] = (),
    tolerations: Iterable[Obj] = (),
    node: str | None = None,
    owner: str | None = "ReplicaSet",
    phase: str | None = None,
    created: str | None = None,
    deleting: str | None = None,
    priority: int | None = None,
    init_containers: Iterable[Obj] = (),
    volumes: Iterable[Obj] = (),
    conditions: Iterable[Obj] | None = None,
    **spec: Any,
) -> Obj:
    """A pod: pending (PodScheduled=False, Unschedulable) unless ``node`` binds it (then Running).

    ``node_affinity``: required node selector terms' matchExpressions (one term);
    ``preferred_node_affinity``: (weight, expression) pairs; ``pod_affinity`` / ``pod_anti_affinity``:
    terms made with :func:`affinity_term` (a ``weight`` key makes a term preferred).
    """
    res: Obj = {}
    req = dict(requests or {})
    if cpu is not None:
        req.setdefault("cpu", cpu)
    if memory is not None:
        req.setdefault("memory", memory)
    if req:
        res["requests"] = req
    if limits:
        res["limits"] = dict(limits)
    meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {"app": name})}
    meta["creationTimestamp"] = created or ago(hours=1)
    if annotations:
        meta["annotations"] = dict(annotations)
    if deleting:
        meta["deletionTimestamp"] = deleting
    if owner:
        kind_api = "v1" if owner == "Node" else "apps/v1" if owner != "Job" else "batch/v1"
        meta["ownerReferences"] = [
            {"apiVersion": kind_api, "kind": owner, "name": f"{name}-owner", "uid": f"uid-{name}", "controller": True}
        ]
    body: Obj = {"containers": [{"name": "app", "image": "app:1", "resources": res}], **spec}
    if init_containers:
        body["initContainers"] = list(init_containers)
    if volumes:
        body["volumes"] = list(volumes)
    if node_selector:
        body["nodeSelector"] = dict(node_selector)
    if tolerations:
        body["tolerations"] = list(tolerations)
    if priority is not None:
        body["priority"] = priority
    affinity: Obj = {}
    if node_affinity is not None or preferred_node_affinity is not None:
        na: Obj = {}
        if node_affinity is not None:
            na["requiredDuringSchedulingIgnoredDuringExecution"] = {
                "nodeSelectorTerms": [{"matchExpressions": list(node_affinity)}]
            }
        if preferred_node_affinity is not None:
            na["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "preference": {"matchExpressions": [expr]}} for w, expr in preferred_node_affinity
            ]
        affinity["nodeAffinity"] = na
    for kind, terms in (("podAffinity", pod_affinity), ("podAntiAffinity", pod_anti_affinity)):
        terms = list(terms)
        if not terms:
            continue
        required = [t for t in terms if "weight" not in t]
        preferred = [{"weight": t["weight"], "podAffinityTerm": t["term"]} for t in terms if "weight" in t]
        block: Obj = {}
        if required:
            block["requiredDuringSchedulingIgnoredDuringExecution"] = required
        if preferred:
            block["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
        affinity[kind] = block
    if affinity:
        body["affinity"] = affinity
    spreads = list(spread)
    if spreads:
        body["topologySpreadConstraints"] = spreads
    if node is not None:
        body["nodeName"] = node
        status: Obj = {"phase": phase or "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    else:
        status = {
            "phase": phase or "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    if conditions is not None:
        status["conditions"] = list(conditions)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body, "status": status}


def selector(labels: Mapping[str, str] | None = None, *expressions: Obj) -> Obj:
    sel: Obj = {}
    if labels:
        sel["matchLabels"] = dict(labels)
    if expressions:
        sel["matchExpressions"] = list(expressions)
    return sel


def spread(
    key: str = ZONE,
    *,
    labels: Mapping[str, str] | None = None,
    max_skew: int = 1,
    when: str = "DoNotSchedule",
    min_domains: int | None = None,
    node_affinity_policy: str | None = None,
    node_taints_policy: str | None = None,
    match_label_keys: Sequence[str] = (),
    label_selector: Obj | None = None,
) -> Obj:
    tsc: Obj = {
        "topologyKey": key,
        "maxSkew": max_skew,
        "whenUnsatisfiable": when,
        "labelSelector": label_selector if label_selector is not None else selector(labels),
    }
    if min_domains is not None:
        tsc["minDomains"] = min_domains
    if node_affinity_policy is not None:
        tsc["nodeAffinityPolicy"] = node_affinity_policy
    if node_taints_policy is not None:
        tsc["nodeTaintsPolicy"] = node_taints_policy
    if match_label_keys:
        tsc["matchLabelKeys"] = list(match_label_keys)
    return tsc


def affinity_term(
    key: str,
    labels: Mapping[str, str] | None = None,
    *,
    weight: int | None = None,
    namespaces: Sequence[str] = (),
    namespace_selector: Obj | None = None,
    label_selector: Obj | None = None,
) -> Obj:
    """A pod (anti-)affinity term; with ``weight`` a preferred one."""
    term: Obj = {
        "topologyKey": key,
        "labelSelector": label_selector if label_selector is not None else selector(labels),
    }
    if namespaces:
        term["namespaces"] = list(namespaces)
    if namespace_selector is not None:
        term["namespaceSelector"] = namespace_selector
    return term if weight is None else {"weight": weight, "term": term}


def namespace(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}


def pdb(
    name: str,
    labels: Mapping[str, str],
    *,
    namespace: str = "default",
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    unhealthy_pod_eviction_policy: str | None = None,
    disruptions_allowed: int | None = None,
) -> Obj:
    spec: Obj = {"selector": selector(labels)}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if unhealthy_pod_eviction_policy is not None:
        spec["unhealthyPodEvictionPolicy"] = unhealthy_pod_eviction_policy
    out: Obj = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    if disruptions_allowed is not None:
        out["status"] = {"disruptionsAllowed": disruptions_allowed}
    return out


# --- capacity reservations -----------------------------------------------------------------------------------------

RID = "karpenter.k8s.aws/capacity-reservation-id"


def reservations(*held: tuple[str, str, int]) -> Obj:
    """``aws ec2 describe-capacity-reservations`` output: (id, instance type, instances left), all in ZONES[0]."""
    return {
        "CapacityReservations": [
            {
                "CapacityReservationId": rid,
                "OwnerId": "123456789012",
                "InstanceType": it,
                "AvailabilityZone": ZONES[0],
                "AvailableInstanceCount": left,
                "TotalInstanceCount": left,
                "State": "active",
                "InstanceMatchCriteria": "targeted",
                "ReservationType": "default",
                "Tags": [{"Key": "parity", "Value": rid}],
            }
            for rid, it, left in held
        ]
    }


def reserved_class(name: str = "default", ids: Iterable[str] = ()) -> Obj:
    return node_class(name, capacityReservationSelectorTerms=[{"id": rid} for rid in ids])


# --- nodes and NodeClaims -----------------------------------------------------------------------------------------


def _capacity(instance_type: str) -> tuple[str, str]:
    info = load_offline("us-east-1").infos[instance_type]
    return str(info.vcpus), f"{info.memory_mib}Mi"


def node(
    name: str,
    *,
    pool: str | None = "default",
    instance_type: str = "m5.xlarge",
    zone: str = "us-east-1a",
    capacity_type: str = "on-demand",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Iterable[Obj] = (),
    ready: str | None = "True",
    initialized: bool = True,
    created: str | None = None,
    allocatable: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    deleting: str | None = None,
    conditions: Iterable[Obj] = (),
) -> Obj:
    """A Node as a NodeClaim's node looks once registered (Karpenter's labels; ``pool=None``: not Karpenter's).

    ``allocatable`` defaults to the instance type's capacity less a little (the test decides when it matters).
    """
    cpu, memory = _capacity(instance_type)
    node_labels: Obj = {
        HOSTNAME: name,
        ZONE: zone,
        INSTANCE_TYPE: instance_type,
        ARCH: load_offline("us-east-1").infos[instance_type].architecture or "amd64",
        "kubernetes.io/os": "linux",
    }
    if pool is not None:
        node_labels.update({NODEPOOL: pool, CAPACITY_TYPE: capacity_type, "karpenter.sh/registered": "true"})
        if initialized:
            node_labels["karpenter.sh/initialized"] = "true"
    node_labels.update(labels or {})
    meta: Obj = {"name": name, "labels": node_labels, "creationTimestamp": created or ago(hours=2)}
    if annotations:
        meta["annotations"] = dict(annotations)
    if deleting:
        meta["deletionTimestamp"] = deleting
        meta["finalizers"] = ["karpenter.sh/termination"]
    spec: Obj = {"providerID": f"aws:///{zone}/i-{hashlib.sha256(name.encode()).hexdigest()[:17]}"}
    if taints:
        spec["taints"] = list(taints)
    if unschedulable:
        spec["unschedulable"] = True
    conds = [{"type": "Ready", "status": ready, "lastTransitionTime": ago(hours=2)}] if ready is not None else []
    conds.extend(conditions)
    alloc = dict(allocatable or {"cpu": f"{int(cpu) * 1000 - 100}m", "memory": memory, "pods": "110"})
    status: Obj = {"capacity": {"cpu": cpu, "memory": memory, "pods": "110"}, "allocatable": alloc}
    if conds:
        status["conditions"] = conds
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec, "status": status}


def node_claim(
    the_node: Obj,
    *,
    name: str | None = None,
    node_class_name: str = "default",
    requirements: Iterable[Obj] | None = None,
    annotations: Mapping[str, str] | None = None,
    created: str | None = None,
    initialized: str | None = None,
    conditions: Iterable[Obj] = (),
    image_id: str = "ami-0parity",
    expire_after: str | None = None,
    deleting: str | None = None,
) -> Obj:
    """The NodeClaim of ``the_node`` (made by :func:`node`): launched, registered and (unless
    ``initialized=""``) initialized, with the node's pool, type, zone and capacity type."""
    labels = the_node["metadata"]["labels"]
    node_name = the_node["metadata"]["name"]
    created = created or the_node["metadata"]["creationTimestamp"]
    reqs = (
        list(requirements)
        if requirements is not None
        else [
            requirement(INSTANCE_TYPE, "In", labels[INSTANCE_TYPE]),
            requirement(CAPACITY_TYPE, "In", labels[CAPACITY_TYPE]),
            requirement(ZONE, "In", labels[ZONE]),
        ]
    )
    spec: Obj = {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": node_class_name},
        "requirements": reqs,
    }
    if expire_after is not None:
        spec["expireAfter"] = expire_after
    conds = [
        {"type": "Launched", "status": "True", "lastTransitionTime": created},
        {"type": "Registered", "status": "True", "lastTransitionTime": created},
    ]
    if initialized != "":
        conds.append({"type": "Initialized", "status": "True", "lastTransitionTime": initialized or created})
    conds.extend(conditions)
    meta: Obj = {
        "name": name or f"{node_name}-claim",
        "labels": {k: v for k, v in labels.items() if k != HOSTNAME},
        "creationTimestamp": created,
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    if deleting:
        meta["deletionTimestamp"] = deleting
        meta["finalizers"] = ["karpenter.sh/termination"]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": meta,
        "spec": spec,
        "status": {
            "nodeName": node_name,
            "providerID": the_node["spec"]["providerID"],
            "imageID": image_id,
            "conditions": conds,
        },
    }


def managed_node(name: str, **kw: Any) -> list[Obj]:
    """A Karpenter node and its NodeClaim (``claim_*`` keywords go to :func:`node_claim`)."""
    claim_kw = {k[len("claim_") :]: kw.pop(k) for k in list(kw) if k.startswith("claim_")}
    n = node(name, **kw)
    return [n, node_claim(n, **claim_kw)]


# --- running the CLI ----------------------------------------------------------------------------------------------


@dataclass
class Plan:
    """``plan -o json``, with the questions tests ask of it."""

    raw: Obj
    node_claims: list[Obj] = field(init=False)
    unschedulable: dict[str, dict[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.node_claims = self.raw["nodeClaims"]
        self.unschedulable = {pod: u["reasons"] for u in self.raw["unschedulable"] for pod in u["pods"]}

    def claim_of(self, pod_name: str) -> Obj | None:
        key = pod_name if "/" in pod_name else f"default/{pod_name}"
        return next((c for c in self.node_claims if key in c["pods"]), None)

    def existing_of(self, pod_name: str) -> str | None:
        key = pod_name if "/" in pod_name else f"default/{pod_name}"
        return next((e["name"] for e in self.raw["existingNodes"] if key in e["pods"]), None)

    def scheduled(self, pod_name: str) -> bool:
        return self.claim_of(pod_name) is not None or self.existing_of(pod_name) is not None

    def zones_of(self, pod_names: Iterable[str]) -> list[tuple[str, ...]]:
        """The zones each pod's NodeClaim may use (pods on existing nodes are not in this list)."""
        out = []
        for p in pod_names:
            claim = self.claim_of(p)
            if claim is not None:
                out.append(tuple(claim["zones"]))
        return out

    def zone_counts(self, pod_names: Iterable[str]) -> dict[str, int]:
        """How many of ``pod_names`` land in each zone (their NodeClaim must be pinned to one zone)."""
        counts: dict[str, int] = {}
        for zones in self.zones_of(pod_names):
            assert len(zones) == 1, f"NodeClaim not pinned to one zone: {zones}"
            counts[zones[0]] = counts.get(zones[0], 0) + 1
        return counts


def run(command: str, objects: Iterable[Obj | Iterable[Obj]], *args: str) -> tuple[int, str, str]:
    """Run ``python -m nodeflow COMMAND -f <objects as YAML> ARGS`` in this process: (exit code, stdout, stderr)."""
    flat: list[Obj] = []
    for o in objects:
        if isinstance(o, dict):
            flat.append(o)
        else:
            flat.extend(o)
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory(prefix="nodeflow-parity-") as tmp:
        path = Path(tmp, "manifests.yaml")
        path.write_text(yaml.safe_dump_all(flat, sort_keys=False))
        code = cli.main([command, "-f", str(path), *args], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _json(command: str, objects: Iterable[Obj | Iterable[Obj]], *args: str) -> Obj:
    code, out, err = run(command, objects, *args, "-o", "json")
    assert code == 0, f"{command} exited {code}: {err}"
    result: Obj = json.loads(out)
    return result


def plan(objects: Iterable[Obj | Iterable[Obj]], *args: str) -> Plan:
    """``plan -o json`` (``args``: extra flags, e.g. ``--ignore-preferences``)."""
    return Plan(_json("plan", objects, *args))


def explain(objects: Iterable[Obj | Iterable[Obj]], pod_name: str, *args: str) -> Obj:
    """``explain NS/POD -o json``: {"pod", "placement", "nodePools": {pool: reason}}."""
    return _json("explain", objects, pod_name, *args)


def disrupt(objects: Iterable[Obj | Iterable[Obj]], *args: str, now: datetime = NOW) -> Obj:
    """``disrupt --dry-run --now NOW -o json``: {"command", "expirations", "blocked", ...}."""
    return _json("disrupt", objects, "--dry-run", "--now", ts(now), *args)
