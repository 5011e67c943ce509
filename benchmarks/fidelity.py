"""Plan fidelity: does kube-scheduler put the pods where nodeflow's plan said they would go?

    .venv/bin/python -m benchmarks.fidelity [--workloads demo,mix,spread,...] [--mix-pods 500] [--json]
    make bench-fidelity

For each workload, on a real control plane (``sandbox.controlplane``: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler), with simulated kubelets (``sandbox.kwok``) and nodeflow running in-process against moto
(``sandbox.nodeflow.LocalNodeflow``): the workload's real Deployments / StatefulSets / Jobs / Pods are created, the
benchmark waits for kube-scheduler to mark every pod Unschedulable (no node yet) and for the PV controller to bind
every claim that names its volume, then

- round 1: the provisioner gets every pending pod in one event, its NodeClaims launch through the real launch
  workflow, the kubelets register the nodes, and the benchmark waits until kube-scheduler has bound every pod or
  bound nothing more for ``QUIET_SECONDS`` (its backoff for unschedulable pods is at most 10 s);
- round 2: the pods still pending go to the provisioner again; the NodeClaims it creates are the plan's misses.

Figures per workload: pods, pods nodeflow planned for (the rest it reports unschedulable: e.g. a GPU pod without
the GPU pool's toleration), NodeClaims of round 1, the share of planned pods kube-scheduler bound to round-1 nodes
(target 100 %), the share bound to the very NodeClaim the plan nominated them for (informative: kube-scheduler
scores nodes its own way, any round-1 node is a hit), and the NodeClaims round 2 adds (target 0). Every pod still
pending after round 1 is listed with kube-scheduler's reason.

Workloads: ``demo`` (examples/demo/workloads.yaml: Deployments, a Job, bare pods, one GPU pod without its toleration),
``mix`` (Karpenter's scheduling-benchmark mix of ``benchmarks.solver_parity``: Deployments of 10-50 replicas, plain,
zone / hostname spread, zone self-affinity, hostname anti-affinity; one NodePool of every instance type, spot and
on-demand), and examples/fidelity's ``spread``, ``affinity``, ``gpu``, ``arm64`` and ``volumes``. Every workload but
``mix`` uses examples/demo's NodePools; every workload has examples/demo's DaemonSets (per-node overhead).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
for _path in (str(ROOT / "functions"), str(ROOT)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from benchmarks import plan_scale  # noqa: E402
from benchmarks.environment import environment  # noqa: E402
from benchmarks.solver_parity import MixDeployment, karpenter_mix_deployments  # noqa: E402

DEMO = ROOT / "examples" / "demo"
EXAMPLES = ROOT / "examples" / "fidelity"
REGION = "us-east-1"
QUIET_SECONDS = 12.0  # no new binding for this long after the last node came up: kube-scheduler is done
NOMINATED_PODS = "nodeflow.io/nominated-pods"  # nodeflow.api.labels.ANNOTATION_NOMINATED_PODS
CLAIM_LABEL = "karpenter.sh/nodeclaim"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"  # nodeflow.constraints.ANNOTATION_BIND_COMPLETED
WORKLOADS = ("demo", "mix", "spread", "affinity", "gpu", "arm64", "volumes")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@dataclass(frozen=True)
class Workload:
    """What a run creates: ``pools`` (NodePools, EC2NodeClass), ``objects`` (the workload; namespaced objects
    without a namespace go to ``namespace``)."""

    name: str
    pools: tuple[dict[str, Any], ...]
    objects: tuple[dict[str, Any], ...]
    namespace: str

    def placed(self) -> list[dict[str, Any]]:
        """``objects`` with their namespace set (a PersistentVolume's claimRef follows its claim)."""
        out = []
        for obj in self.objects:
            obj = copy.deepcopy(obj)
            if obj["kind"] == "PersistentVolume":
                ref = obj["spec"].get("claimRef")
                if ref:
                    ref["namespace"] = self.namespace
            elif obj["kind"] not in ("Namespace", "Node", "StorageClass"):
                obj["metadata"].setdefault("namespace", self.namespace)
            out.append(obj)
        return out

    def namespaces(self) -> list[str]:
        return sorted({o["metadata"]["namespace"] for o in self.placed() if o["metadata"].get("namespace")})

    def expected_pods(self) -> int:
        """How many pods the workload's controllers make (a Job: as many as run at once)."""
        count = 0
        for obj in self.objects:
            spec = obj.get("spec") or {}
            if obj["kind"] in ("Deployment", "ReplicaSet", "StatefulSet"):
                count += int(spec.get("replicas", 1))
            elif obj["kind"] == "Job":
                count += min(int(spec.get("parallelism", 1)), int(spec.get("completions", spec.get("parallelism", 1))))
            elif obj["kind"] == "Pod":
                count += 1
        return count


def mix_deployment(d: MixDeployment) -> dict[str, Any]:
    """One Deployment of Karpenter's benchmark mix as a manifest (``benchmarks.plan_scale``'s), namespace left to the
    run."""
    body = plan_scale.deployment(d.app, d.replicas, plan_scale.pod_spec(d.app, d.cpu, d.memory, d.kind))
    body["metadata"].pop("namespace", None)
    return body


def mix_pools() -> list[dict[str, Any]]:
    """Karpenter's benchmark NodePool (every instance type, spot and on-demand) and the demo's EC2NodeClass (the
    sandbox's subnets and security groups carry the demo's discovery tag)."""
    pool = next(d for d in plan_scale.node_pool_docs() if d["kind"] == "NodePool")
    return [pool, next(d for d in _docs(DEMO / "nodepools.yaml") if d["kind"] == "EC2NodeClass")]


def workload(name: str, mix_pods: int = 500) -> Workload:
    """The named workload (``WORKLOADS``)."""
    daemonsets = _docs(DEMO / "daemonsets.yaml")
    if name == "demo":
        return Workload(name, tuple(_docs(DEMO / "nodepools.yaml")), (*daemonsets, *_docs(DEMO / "workloads.yaml")), "")
    if name == "mix":
        deployments = [mix_deployment(d) for d in karpenter_mix_deployments(mix_pods)]
        return Workload(name, tuple(mix_pools()), (*daemonsets, *deployments), "fidelity-mix")
    if name in WORKLOADS:
        objects = (*daemonsets, *_docs(EXAMPLES / f"{name}.yaml"))
        return Workload(name, tuple(_docs(DEMO / "nodepools.yaml")), objects, f"fidelity-{name}")
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")


# --------------------------------------------------------------------------------------------- explaining misses

# Why a planned pod was not bound to a round-1 node, in the order they are judged (the first that applies).
CAUSE_LAUNCH = "launch failed"  # its NodeClaim's launch did not succeed, or its Node never registered
CAUSE_PLAN = "plan over capacity"  # the pods planned for the NodeClaim (with DaemonSet pods) exceed its allocatable
CAUSE_NOT_READY = "node not ready"  # the Node was still NotReady or tainted when kube-scheduler stopped binding
CAUSE_TAKEN = "room taken"  # pods planned for other nodes (or unplanned) are on its node, which has no room left
CAUSE_SPREAD = "topology spread"  # its node has room; kube-scheduler's skew count (registered nodes) refused it
CAUSE_AFFINITY = "pod affinity"  # the pods its affinity needs were not where the plan assumed
CAUSE_UNEXPLAINED = "unexplained"
CAUSES = (CAUSE_LAUNCH, CAUSE_PLAN, CAUSE_NOT_READY, CAUSE_TAKEN, CAUSE_SPREAD, CAUSE_AFFINITY, CAUSE_UNEXPLAINED)
_RESOURCES = ("cpu", "memory", "pods")
_STARTUP_TAINTS = ("karpenter.sh/unregistered", "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _daemonset_pod(pod: Mapping[str, Any]) -> bool:
    return any(o.get("kind") == "DaemonSet" for o in pod["metadata"].get("ownerReferences") or [])


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """A pod's requests in milli-units (cpu, memory, pods) as kube-scheduler counts them: the sum of its
    containers, or an init container's when larger, plus its overhead."""
    from nodeflow.api.quantity import to_milli

    def total(containers: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        out = {"cpu": 0, "memory": 0}
        for c in containers:
            for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
                if name in out:
                    out[name] += to_milli(value)
        return out

    spec = pod.get("spec") or {}
    need = total(spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        one = total([init])
        need = {k: max(v, one[k]) for k, v in need.items()}
    for name, value in (spec.get("overhead") or {}).items():
        if name in need:
            need[name] += to_milli(value)
    need["pods"] = 1000
    return need


def _allocatable(claim_allocatable: Mapping[str, Any] | None) -> dict[str, int]:
    from nodeflow.api.quantity import to_milli

    return {r: to_milli(claim_allocatable[r]) for r in _RESOURCES if claim_allocatable and r in claim_allocatable}


def _node_usable(node: Mapping[str, Any] | None) -> bool:
    if not node:
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    taints = {t.get("key") for t in (node.get("spec") or {}).get("taints") or []}
    return ready and not taints.intersection(_STARTUP_TAINTS)


def explain_misses(
    misses: Sequence[Mapping[str, Any]],
    layout: Sequence[Mapping[str, Any]],
    requests: Mapping[str, Mapping[str, int]],
    daemonset_pods: set[str],
    daemonset_overhead: Mapping[str, int],
    nodes: Mapping[str, Mapping[str, Any]],
    failed: set[str],
) -> list[dict[str, Any]]:
    """Each miss with its ``cause`` (one of ``CAUSES``) and the evidence (``detail``). A miss is judged against its
    NodeClaim's row of ``layout`` (allocatable, pods planned for it, pods bound to its node): ``requests`` maps pod
    keys to ``pod_requests``; ``daemonset_pods`` are the keys of DaemonSet pods; ``daemonset_overhead`` is what the
    DaemonSets put on every node (the plan counts it); ``nodes`` maps Node names to Node objects; ``failed`` names
    the NodeClaims whose launch did not succeed. Only ``CAUSE_PLAN`` says the plan was wrong."""
    rows = {r["nodeClaim"]: r for r in layout}
    out = []
    for miss in misses:
        claim, node_name = miss["plannedFor"], miss.get("plannedNode") or ""
        row = rows.get(claim) or {}
        planned, bound = list(row.get("planned") or []), list(row.get("bound") or [])
        alloc = _allocatable(row.get("allocatable"))
        demand = dict(daemonset_overhead)
        for key in planned:
            for r, v in requests.get(key, {}).items():
                demand[r] = demand.get(r, 0) + v
        over = sorted(r for r in _RESOURCES if r in alloc and demand.get(r, 0) > alloc[r])
        intruders = sorted(k for k in bound if k not in planned and k not in daemonset_pods)
        used: dict[str, int] = {}
        for key in [*bound, miss["pod"]]:
            for r, v in requests.get(key, {}).items():
                used[r] = used.get(r, 0) + v
        fits_now = all(used.get(r, 0) <= alloc[r] for r in alloc)
        why = str(miss.get("why") or "")
        detail: dict[str, Any] = {}
        if claim in failed or not node_name or node_name not in nodes:
            cause = CAUSE_LAUNCH
        elif over:
            cause = CAUSE_PLAN
            detail = {"over": over, "demand": {r: demand.get(r, 0) for r in _RESOURCES}, "allocatable": alloc}
        elif not _node_usable(nodes.get(node_name)):
            cause = CAUSE_NOT_READY
        elif intruders and not fits_now:
            cause = CAUSE_TAKEN
            detail = {"takenBy": intruders}
        elif "topology spread" in why:
            cause = CAUSE_SPREAD
        elif "affinity" in why:
            cause = CAUSE_AFFINITY
        else:
            cause = CAUSE_UNEXPLAINED
        out.append({**miss, "cause": cause, "detail": detail})
    return out


def cause_counts(explained: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many misses of each cause, in ``CAUSES`` order, the causes with none left out."""
    counts = {c: sum(1 for m in explained if m["cause"] == c) for c in CAUSES}
    return {c: n for c, n in counts.items() if n}


# --------------------------------------------------------------------------------------------- measuring


def _scheduled(pod: Mapping[str, Any]) -> dict[str, Any]:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), {})


PROVISION_ATTEMPTS = 3  # a provisioner invocation that fails is run again on the same batch, as SQS redelivers it


def _key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


@dataclass
class Round:
    """One provisioning round: the NodeClaims it created and where the pods were once kube-scheduler settled."""

    claims: list[str]
    unschedulable: int  # pods the provisioner reported it cannot place
    bound: dict[str, str] = field(default_factory=dict)  # pod key -> node
    pending: dict[str, str] = field(default_factory=dict)  # pod key -> kube-scheduler's message
    failed: list[str] = field(default_factory=list)  # NodeClaims whose launch workflow did not succeed
    expected: dict[str, str] = field(default_factory=dict)  # pending pod key -> its status.nominatedNodeName
    seconds: float = 0.0


class Run:
    """One workload on a started ``RealKubeAPI`` (``kube``) inside a moto mock: ``run()`` returns its report."""

    def __init__(self, kube: Any, work: Workload, *, log: Callable[[str], None] = lambda m: None) -> None:
        self.kube = kube
        self.work = work
        self.log = log

    def pods(self) -> list[dict[str, Any]]:
        """The workload's pods (not the DaemonSets')."""
        out: list[dict[str, Any]] = []
        for ns in self.work.namespaces():
            out += [
                p
                for p in self.kube.objects("v1", "Pod", ns)
                if not p["metadata"].get("deletionTimestamp") and not _daemonset_pod(p)
            ]
        return out

    def claim_nodes(self, names: Sequence[str]) -> dict[str, str]:
        """NodeClaim -> its Node's name."""
        wanted = set(names)
        return {
            c["metadata"]["name"]: str((c.get("status") or {}).get("nodeName") or "")
            for c in self.kube.objects("karpenter.sh/v1", "NodeClaim")
            if c["metadata"]["name"] in wanted
        }

    def nominated(self, names: Sequence[str]) -> dict[str, str]:
        """Pod key -> the NodeClaim the plan nominated it for."""
        out: dict[str, str] = {}
        for c in self.kube.objects("karpenter.sh/v1", "NodeClaim"):
            if c["metadata"]["name"] in names:
                for key in json.loads((c["metadata"].get("annotations") or {}).get(NOMINATED_PODS) or "[]"):
                    out[key] = c["metadata"]["name"]
        return out

    def layout(self, done: Round, nominated: Mapping[str, str]) -> list[dict[str, Any]]:
        """Each round-1 NodeClaim: instance type, zone, allocatable, the pods planned for it and those bound to
        its node (DaemonSet pods included): what explains a miss."""
        planned: dict[str, list[str]] = {}
        for key, claim in nominated.items():
            planned.setdefault(claim, []).append(key)
        on_node: dict[str, list[str]] = {}
        for pod in self.kube.objects("v1", "Pod"):
            if pod["spec"].get("nodeName"):
                on_node.setdefault(pod["spec"]["nodeName"], []).append(_key(pod))
        out = []
        for c in self.kube.objects("karpenter.sh/v1", "NodeClaim"):
            name = c["metadata"]["name"]
            if name not in done.claims:
                continue
            labels = c["metadata"].get("labels") or {}
            node = (c.get("status") or {}).get("nodeName") or ""
            out.append(
                {
                    "nodeClaim": name,
                    "instanceType": labels.get("node.kubernetes.io/instance-type"),
                    "zone": labels.get("topology.kubernetes.io/zone"),
                    "allocatable": (c.get("status") or {}).get("allocatable"),
                    "planned": sorted(planned.get(name, [])),
                    "bound": sorted(on_node.get(node, [])),
                }
            )
        return out

    def explain(
        self, misses: Sequence[Mapping[str, Any]], layout: Sequence[Mapping[str, Any]], failed: set[str]
    ) -> list[dict[str, Any]]:
        """``explain_misses`` on the cluster as it is now: every pod's requests, the DaemonSets' per-node overhead
        (every DaemonSet of the workload tolerates every node), the Nodes."""
        pods = self.kube.objects("v1", "Pod")
        requests = {_key(p): pod_requests(p) for p in pods}
        daemonset_pods = {_key(p) for p in pods if _daemonset_pod(p)}
        overhead: dict[str, int] = {}
        for obj in self.work.objects:
            if obj["kind"] == "DaemonSet":
                for r, v in pod_requests(obj["spec"]["template"]).items():
                    overhead[r] = overhead.get(r, 0) + v
        nodes = {n["metadata"]["name"]: n for n in self.kube.objects("v1", "Node")}
        return explain_misses(misses, layout, requests, daemonset_pods, overhead, nodes, failed)

    def create(self) -> list[str]:
        """Create the workload; wait until kube-scheduler marked each of its pods Unschedulable; their keys."""
        for ns in self.work.namespaces():
            with contextlib.suppress(Exception):  # kube-system, or a namespace an earlier run left
                self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for obj in self.work.placed():
            self.kube.create(obj)
        expected = self.work.expected_pods()

        def all_unschedulable() -> list[str] | None:
            pods = self.pods()
            verdicts = [_scheduled(p) for p in pods]
            done = [p for p, v in zip(pods, verdicts, strict=True) if v.get("reason") == "Unschedulable"]
            return sorted(_key(p) for p in done) if len(pods) == expected == len(done) else None

        from sandbox.controlplane.facade import wait_for

        keys = list(wait_for(f"{expected} unschedulable pods of {self.work.name}", all_unschedulable, 120.0, 0.25))
        # kube-scheduler marks a pod Unschedulable before the PV controller has bound its pre-bound claim; a plan
        # made then leaves the pod out (the claim is not bound yet, as Karpenter does): wait for the bindings
        claims = f"the claims of {self.work.name} bound to their volumes"
        wait_for(claims, lambda: not self.unbound_claims(), 60.0, 0.25)
        return keys

    def unbound_claims(self) -> list[str]:
        """The workload's claims that name their volume (``spec.volumeName``) and that the PV controller has not
        bound yet (no ``pv.kubernetes.io/bind-completed``): claims of a WaitForFirstConsumer class bind only once
        their pod is scheduled and are not waited for."""
        return sorted(
            _key(c)
            for ns in self.work.namespaces()
            for c in self.kube.objects("v1", "PersistentVolumeClaim", ns)
            if c["spec"].get("volumeName") and BIND_COMPLETED not in (c["metadata"].get("annotations") or {})
        )

    def provision_round(self, local: Any, keys: Sequence[str], timeout: float) -> Round:
        began = time.monotonic()
        local.send_pending(list(keys))
        before = {c["metadata"]["name"] for c in self.kube.objects("karpenter.sh/v1", "NodeClaim")}
        batch = local.receive_batch()
        for attempt in range(1, PROVISION_ATTEMPTS + 1):
            try:
                result = local.provision(batch)["result"]
                break
            except RuntimeError as exc:  # e.g. a connection the loaded API server reset: SQS would redeliver
                if attempt == PROVISION_ATTEMPTS:
                    raise
                self.log(f"{self.work.name}: provisioner failed ({str(exc)[:200]}); the same batch again")
        claims = list(result["nodeClaimsCreated"])
        if attempt > 1:  # the failed attempts' NodeClaims too (the batch is provisioned once)
            now = {c["metadata"]["name"] for c in self.kube.objects("karpenter.sh/v1", "NodeClaim")}
            claims = sorted(now - before)
        out = Round(claims, int(result.get("unschedulablePods") or 0))
        if out.claims:
            done = local.wait_for_executions(timeout=timeout)
            # a launch that failed (on a starved machine: a Lambda task past its timeout) is counted, not fatal:
            # its pods show up as misses, their reason kube-scheduler's
            out.failed = sorted(d["name"] for d in done if d["status"] != "SUCCEEDED" and d["name"] in out.claims)
        self.settle(out)
        out.seconds = time.monotonic() - began
        return out

    def settle(self, out: Round) -> None:
        """Wait until every pod is bound, or none was bound for ``QUIET_SECONDS``; record where each one is."""
        last, seen = time.monotonic(), -1
        while True:
            pods = self.pods()
            bound = {_key(p): str(p["spec"]["nodeName"]) for p in pods if p["spec"].get("nodeName")}
            if len(bound) != seen:
                last, seen = time.monotonic(), len(bound)
            if len(bound) == len(pods) or time.monotonic() - last > QUIET_SECONDS:
                out.expected = {
                    _key(p): str((p.get("status") or {}).get("nominatedNodeName") or "")
                    for p in pods
                    if _key(p) not in bound
                }
                out.bound = bound
                out.pending = {
                    _key(p): str(_scheduled(p).get("message") or _scheduled(p).get("reason") or "no verdict")
                    for p in pods
                    if _key(p) not in bound
                }
                return
            time.sleep(0.5)

    def run(self, local: Any) -> dict[str, Any]:
        began = time.monotonic()
        local.apply(self.work.pools)
        keys = self.create()
        self.log(f"{self.work.name}: {len(keys)} pods unschedulable; round 1")
        first = self.provision_round(local, keys, timeout=600.0)
        nodes = self.claim_nodes(first.claims)
        round_one_nodes = {n for n in nodes.values() if n}
        nominated = self.nominated(first.claims)
        planned = [k for k in keys if k in nominated]
        hits = [k for k in planned if first.bound.get(k) in round_one_nodes]
        on_plan = [k for k in planned if first.bound.get(k) and first.bound[k] == nodes.get(nominated[k])]
        unplanned_bound = sorted(k for k in keys if k not in nominated and k in first.bound)
        misses = [
            {
                "pod": k,
                "plannedFor": nominated[k],
                "boundTo": first.bound.get(k),
                "why": first.pending.get(k, ""),
                "nominatedNodeName": first.expected.get(k, ""),
                "plannedNode": nodes.get(nominated[k], ""),
            }
            for k in planned
            if k not in hits
        ]
        layout = self.layout(first, nominated) if misses else []
        if misses:
            misses = self.explain(misses, layout, set(first.failed))
        second = Round([], 0)
        if first.pending:
            self.log(f"{self.work.name}: {len(first.pending)} pods pending after round 1; round 2")
            second = self.provision_round(local, sorted(first.pending), timeout=600.0)
        return {
            "workload": self.work.name,
            "pods": len(keys),
            "planned": len(planned),
            "unplaceable": len(keys) - len(planned),
            "nodeClaims": len(first.claims),
            "launchesFailed": len(first.failed) + len(second.failed),
            "bound": len(hits),
            "boundShare": round(100.0 * len(hits) / len(planned), 1) if planned else 100.0,
            "onPlannedNode": round(100.0 * len(on_plan) / len(planned), 1) if planned else 100.0,
            "unplannedBound": unplanned_bound,
            "pendingAfterRound1": len(first.pending),
            "extraNodeClaims": len(second.claims),
            "pendingAfterRound2": len(second.pending) if first.pending else len(first.pending),
            "misses": misses,
            "causes": cause_counts(misses),
            "layout": layout,
            "notPlaced": {k: first.pending.get(k, "") for k in keys if k not in nominated},
            "seconds": round(time.monotonic() - began, 1),
        }


# --------------------------------------------------------------------------------------------- running


@contextlib.contextmanager
def aws_sandbox() -> Iterator[None]:
    """Fake credentials and moto's settings for the run (restored after)."""
    settings = {
        "AWS_ACCESS_KEY_ID": "fidelity",
        "AWS_SECRET_ACCESS_KEY": "fidelity",
        "AWS_SESSION_TOKEN": "fidelity",
        "AWS_DEFAULT_REGION": REGION,
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }
    with environment(settings):
        yield


def run_workload(kube: Any, work: Workload, *, log: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """One workload on ``kube`` (a started ``RealKubeAPI`` with controllers), in a fresh moto account; what it
    created in the cluster is deleted afterwards (``kube.reset()``)."""
    from moto import mock_aws

    from sandbox.aws import MOCK_CONFIG, Clients
    from sandbox.nodeflow import LocalNodeflow
    from sandbox.stepfunctions import quiet_engine_logs

    kube.reset()
    try:
        # quiet: the engine logs every path a Choice's IsPresent finds missing (Register's while a Node is not ready)
        with aws_sandbox(), mock_aws(config=MOCK_CONFIG), quiet_engine_logs():
            # The workflow's waits (45 / 10 / 15 s) scaled to about a second: shorter, and dozens of executions
            # polling Register / Initialize starve the process.
            local = LocalNodeflow(
                Clients(region=REGION),
                kube,
                env={"POWERTOOLS_LOG_LEVEL": "ERROR"},
                wait_scale=0.02,
                kubelet_interval=0.5,
                # every Lambda task waits for this process's interpreter lock: a task's wall time is mostly that
                # queue at hundreds of launches (issue 27), so its timeout is stretched; and no fault proxy
                task_timeout_scale=10.0,
                direct_kube=True,
            )
            # the handlers' CloudWatch EMF records (stdout in Lambda) are not this benchmark's output
            with local, contextlib.redirect_stdout(io.StringIO()):
                return Run(kube, work, log=log).run(local)
    finally:
        kube.reset()


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    columns = (
        ("workload", "workload"),
        ("pods", "pods"),
        ("planned", "planned"),
        ("NodeClaims", "nodeClaims"),
        ("launches failed", "launchesFailed"),
        ("bound round 1", "boundShare"),
        ("on planned node", "onPlannedNode"),
        ("extra NodeClaims", "extraNodeClaims"),
        ("seconds", "seconds"),
    )
    cells = [[str(r[k]) + (" %" if k in ("boundShare", "onPlannedNode") else "") for _, k in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _) in enumerate(columns)]
    lines = ["| " + " | ".join(h.ljust(w) for (h, _), w in zip(columns, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    for r in rows:
        if r.get("causes"):
            causes = ", ".join(f"{cause} {count}" for cause, count in r["causes"].items())
            lines.append(f"misses of {r['workload']} by cause: {causes}")
        for m in r["misses"]:
            cause = f" [{m['cause']}]" if "cause" in m else ""
            lines.append(f"miss {r['workload']}{cause}: {m['pod']} (planned for {m['plannedFor']}): {m['why']}")
        for key, why in r["notPlaced"].items():
            lines.append(f"not planned {r['workload']}: {key}: {why}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--mix-pods", type=int, default=500, help="pods of Karpenter's benchmark mix (default 500)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON after the table")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        parser.error(f"--workloads: unknown {unknown}; known: {', '.join(WORKLOADS)}")

    from sandbox.controlplane import ControlPlane
    from sandbox.controlplane.facade import RealKubeAPI

    def log(message: str) -> None:
        print(f"... {message}", file=sys.stderr, flush=True)

    began = time.monotonic()
    rows: list[dict[str, Any]] = []
    with ControlPlane(controllers=True) as plane, RealKubeAPI(plane) as kube:
        log(f"control plane up in {time.monotonic() - began:.1f} s")
        for name in names:
            rows.append(run_workload(kube, workload(name, args.mix_pods), log=log))
            log(f"{name}: {rows[-1]['boundShare']} % bound in round 1, {rows[-1]['extraNodeClaims']} extra NodeClaims")
    print(f"plan fidelity, {len(rows)} workloads, {time.monotonic() - began:.0f} s wall")
    print(table(rows))
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
