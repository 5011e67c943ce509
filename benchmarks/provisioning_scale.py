"""Provisioner at scale: 20,000 pending pods + 2,000 bound pods on 500 nodes -> ~4,000 NodeClaims.

    .venv/bin/python -m benchmarks.provisioning_scale [--pending 20000] [--bound 2000] [--nodes 500] [--repeat 3]
        [--sfn-burst N --sfn-rate R] [--kube-inflight N] [--quick]

A real control plane (``benchmarks.realcluster``: etcd and kube-apiserver, no controllers, so the seeded pods stay
pending with their made-up owners), the facade's fault proxy in front of it and a moto server (Step Functions, not
executing) are started by a CHILD process, so the provisioner's own cost (this process: snapshot LIST + parse,
solve, NodeClaim POSTs, StartExecution calls) is measured apart from the servers' (reported as "server CPU": the
child's, which relays every request through the proxy and runs moto, plus kube-apiserver's and etcd's). The cluster
is seeded through the API (admission and validation run: minutes at the default size, where tests/kubeapi's store
took seconds). Each repetition starts from the same seeded cluster (the NodeClaims and Events of the previous one
are deleted first, ``ClusterScope.reset``) and runs ``nodeflow.lifecycle.provisioner.provision`` once, with a new
batch id.

Reported: list+parse snapshot, solve, time to the first StartExecution, to all NodeClaims created and to
all launch executions started, this process's CPU seconds and the server process's.

Throttling, as in AWS: ``--sfn-burst/--sfn-rate`` give StartExecution a token bucket (us-east-1 standard
workflows: 1,300 burst, 300/s refill) that answers ThrottlingException when empty; ``--kube-inflight`` makes
the proxy answer 429 (Retry-After: 1, the proxy's ``Fault``) to mutating requests beyond N in flight to the API
server (what kube-apiserver's --max-mutating-requests-inflight, default 200, meant before API Priority and Fairness,
which queues instead). The provisioner must still start every execution.

``--in-process`` measures only the path to the first StartExecution, without servers: the LIST bodies the API
server would send are built in memory, then ``take_snapshot`` (parse), ``build_input`` and ``plan`` (input + solve,
as the provisioner calls it) run in a fresh interpreter per repetition; CPU and wall per stage. ``--ref DIR`` (a
``functions`` directory, e.g. ``git archive`` of an older commit) runs the same in alternation with that tree
(before/after measured at the same moment) and checks that both plans are byte-identical.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import pathlib
import statistics
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
for extra in (str(ROOT / "functions"), str(ROOT)):
    if extra not in sys.path:
        sys.path.insert(0, extra)

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
# (cpu, memory) of the pending Deployments' pods; ~0.75 CPU on average: ~5 per 4-vCPU node.
SHAPES = (("500m", "1Gi"), ("750m", "1536Mi"), ("1", "2Gi"), ("250m", "512Mi"), ("1", "4Gi"), ("750m", "1Gi"))
REPLICAS = 100  # pods per Deployment


# --- the cluster ---------------------------------------------------------------------------------


def node_pool() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["4"]},
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h",
                }
            },
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"},
        },
    }


def node_class() -> dict[str, Any]:
    stamp = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": 1},
        "spec": {
            "role": "KarpenterNodeRole-bench",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
        },
        "status": {
            "subnets": [{"id": f"subnet-{i}", "zone": z, "zoneID": f"use1-az{i}"} for i, z in enumerate(ZONES)],
            "securityGroups": [{"id": "sg-1", "name": "bench"}],
            "amis": [
                {
                    "id": "ami-1",
                    "name": "al2023",
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                },
                {
                    "id": "ami-2",
                    "name": "al2023-arm",
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}],
                },
            ],
            "instanceProfile": "bench",
            "conditions": [
                {
                    "type": t,
                    "status": "True",
                    "reason": t,
                    "message": "",
                    "lastTransitionTime": stamp,
                    "observedGeneration": 1,
                }
                for t in ("Ready", "AMIsReady", "SubnetsReady", "SecurityGroupsReady", "InstanceProfileReady")
            ],
        },
    }


def node(i: int) -> dict[str, Any]:
    name = f"ip-10-1-{i // 250}-{i % 250}.ec2.internal"
    capacity = {"cpu": "4", "memory": "16Gi", "pods": "58", "ephemeral-storage": "100Gi"}
    allocatable = {"cpu": "3920m", "memory": "15Gi", "pods": "58", "ephemeral-storage": "90Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "m7i.xlarge",
                "topology.kubernetes.io/zone": ZONES[i % 3],
                "karpenter.sh/capacity-type": "on-demand",
            },
        },
        "spec": {"providerID": f"aws:///{ZONES[i % 3]}/i-{i:017x}"},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def pod(app: int, i: int, node_name: str | None) -> dict[str, Any]:
    """Pod ``i`` of Deployment ``app``: varied shapes and constraints, as a Deployment writes them."""
    cpu, memory = SHAPES[app % len(SHAPES)]
    label = f"app-{app:03d}"
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "public.ecr.aws/nginx/nginx:1.27",
                "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "APP", "value": label}],
            }
        ],
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    }
    if app % 5 == 1:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": label}},
            }
        ]
    if app % 7 == 2:
        spec["nodeSelector"] = {"kubernetes.io/arch": "amd64"}
    if app % 11 == 3:
        spec["nodeSelector"] = {"karpenter.sh/capacity-type": "on-demand"}
    if node_name:
        spec["nodeName"] = node_name
        status: dict[str, Any] = {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
            "podIP": "10.1.0.1",
        }
    else:
        status = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/500 nodes are available: 500 Insufficient cpu.",
                }
            ],
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{label}-5d8f7c9b6d-{i:05d}",
            "namespace": f"team-{app % 10}",
            "labels": {"app": label, "pod-template-hash": "5d8f7c9b6d"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{label}-5d8f7c9b6d",
                    "uid": f"rs-{label}",
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": status,
    }


def objects(pending: int, bound: int, nodes: int) -> list[dict[str, Any]]:
    """The cluster to seed: the EC2NodeClass, the NodePool, 10 namespaces, the nodes, the bound and pending pods."""
    out = [node_class(), node_pool()]
    out += [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{ns}"}} for ns in range(10)]
    names = []
    for i in range(nodes):
        body = node(i)
        out.append(body)
        names.append(body["metadata"]["name"])
    # Bound pods: 1 CPU each, 4 per node (the nodes are full: the pending pods need new capacity).
    for i in range(bound):
        body = pod(1000 + i // REPLICAS, i, names[i % nodes] if nodes else None)
        body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "900m", "memory": "3Gi"}}
        out.append(body)
    out += [pod(i // REPLICAS, i, None) for i in range(pending)]
    return out


# --- the server process ------------------------------------------------------------------------


class _MutatingInflight:
    """A proxy hook: 429 with Retry-After: 1 to a mutating request beyond ``limit`` in flight to the API server
    (forwarded by the proxy and not answered yet: its exchange is logged when the answer comes)."""

    def __init__(self, proxy: Any, limit: int, counter: dict[str, int]) -> None:
        self.proxy, self.limit, self.counter = proxy, limit, counter
        self.lock = threading.Lock()
        self.forwarded = self.answered = self.seen = 0

    def __call__(self, method: str, path: str, query: Mapping[str, str]) -> None:
        from sandbox.controlplane.proxy import Fault

        if method == "GET":
            return
        with self.lock:
            new = self.proxy.exchanges[self.seen :]
            self.seen += len(new)
            self.answered += sum(1 for e in new if e.method != "GET" and not e.injected)
            if self.forwarded - self.answered >= self.limit:
                self.counter["kube_429"] = self.counter.get("kube_429", 0) + 1
                message = "Too many requests, please try again later."
                raise Fault(429, "TooManyRequests", message, details={"retryAfterSeconds": 1}, retry_after=1)
            self.forwarded += 1


def _install_sfn_bucket(burst: int, rate: float, counter: dict[str, int]) -> None:
    """StartExecution answers ThrottlingException when a token bucket (``burst`` tokens, ``rate``/s) is empty."""
    from moto.core.exceptions import AWSError
    from moto.stepfunctions.responses import StepFunctionResponse

    lock = threading.Lock()
    state = {"tokens": float(burst), "at": time.monotonic()}
    real = StepFunctionResponse.start_execution

    class Throttling(AWSError):
        TYPE = "ThrottlingException"
        STATUS = 400

    def start_execution(self: Any) -> Any:
        with lock:
            now = time.monotonic()
            state["tokens"] = min(float(burst), state["tokens"] + (now - state["at"]) * rate)
            state["at"] = now
            ok = state["tokens"] >= 1
            if ok:
                state["tokens"] -= 1
        if not ok:
            counter["sfn_throttled"] = counter.get("sfn_throttled", 0) + 1
            raise Throttling("Rate exceeded")
        return real(self)

    StepFunctionResponse.start_execution = start_execution  # type: ignore[method-assign]


def serve(conn: Any, args: dict[str, Any]) -> None:
    """The child: start the control plane and seed it, start moto, answer commands until "stop"."""
    if args.get("server_cpu") is not None:
        os.sched_setaffinity(0, {args["server_cpu"]})
    os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"
    from moto.server import ThreadedMotoServer

    from benchmarks.realcluster import pin, seed, server_cpu, started
    from sandbox.controlplane import ADMIN

    counter: dict[str, int] = {}
    if args.get("sfn_burst"):
        _install_sfn_bucket(args["sfn_burst"], args["sfn_rate"], counter)
    with started() as kube:
        if args.get("server_cpu") is not None:
            pin(kube.plane, args["server_cpu"])
        seeded = seed(kube, objects(args["pending"], args["bound"], args["nodes"]))
        assert kube.scope is not None
        mark = kube.scope.mark()
        if args.get("kube_inflight"):
            kube.before_request = _MutatingInflight(kube.proxy, args["kube_inflight"], counter)
        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        moto.start()
        host, port = moto.get_host_and_port()
        conn.send(
            {"kube": kube.url, "token": kube.plane.token_for(ADMIN), "moto": f"http://{host}:{port}", "seeded": seeded}
        )

        def cpu() -> float:
            return time.process_time() + server_cpu(kube.plane)

        while True:
            command = conn.recv()
            if command == "stop":
                break
            if command == "reset":  # forget the previous repetition's NodeClaims and Events
                kube.scope.reset(mark)
                kube.requests.clear()
                kube.exchanges.clear()
                if isinstance(kube.before_request, _MutatingInflight):
                    kube.before_request = _MutatingInflight(kube.proxy, args["kube_inflight"], counter)
                counter.clear()
                conn.send(cpu())
            elif command == "stats":
                posts = sum(1 for m, p, _ in kube.requests if m == "POST" and p.endswith("/nodeclaims"))
                gets = sum(1 for m, _, _ in kube.requests if m == "GET")
                conn.send({"cpu": cpu(), "claim_posts": posts, "gets": gets, **counter})
        moto.stop()


# --- the provisioner process ---------------------------------------------------------------------


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import boto3
    from botocore.config import Config

    from nodeflow.aws.sfn import start_launch
    from nodeflow.catalog.offline import load_offline
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle.provisioner import ProvisionDeps, provision

    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    options = {
        "pending": args.pending,
        "bound": args.bound,
        "nodes": args.nodes,
        "server_cpu": args.server_cpu,
        "kube_inflight": args.kube_inflight,
        "sfn_burst": args.sfn_burst,
        "sfn_rate": args.sfn_rate,
    }
    proc = ctx.Process(target=serve, args=(child, options), daemon=True)
    proc.start()
    try:
        info = _recv(parent, proc)
        print(
            f"seeded {args.pending} pending + {args.bound} bound pods on {args.nodes} nodes "
            f"in {info['seeded']:.1f} s (server process)"
        )
        sfn = boto3.session.Session().client(
            "stepfunctions",
            region_name=REGION,
            endpoint_url=info["moto"],
            config=Config(max_pool_connections=64),
        )
        arn = sfn.create_state_machine(
            name="launch",
            definition='{"StartAt":"A","States":{"A":{"Type":"Pass","End":true}}}',
            roleArn="arn:aws:iam::123456789012:role/sfn",
        )["stateMachineArn"]
        import kubernetes.client

        config = kubernetes.client.Configuration(host=info["kube"])  # the proxy, plain HTTP on 127.0.0.1
        config.api_key = {"BearerToken": info["token"]}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        config.connection_pool_maxsize = 64
        kube = KubeClient(kubernetes.client.ApiClient(config))
        catalog = load_offline(REGION)
        runs: list[dict[str, Any]] = []
        for rep in range(args.repeat):
            parent.send("reset")
            server_cpu0 = _recv(parent, proc)

            def launch(name: str) -> bool:
                return start_launch(sfn, arn, name)

            deps = ProvisionDeps(
                kube=kube,
                catalog=catalog,
                unavailable=lambda _now: frozenset(),
                start_launch=launch,
                recorder=EventRecorder(kube),
                now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
            )
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            result = provision(deps, f"bench{rep:03d}{os.getpid()}")
            total = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            parent.send("stats")
            stats = _recv(parent, proc)
            t = result.timings
            runs.append(
                {
                    "snapshot": t["snapshot"],
                    "solve": t["solve"],
                    "first_start": t.get("first_start"),
                    "claims_created": t.get("claims_created"),
                    "all_started": t.get("all_started"),
                    "events": t.get("events"),
                    "nominated": getattr(result, "nominated", None),
                    "total": total,
                    "cpu": cpu,
                    "server_cpu": stats["cpu"] - server_cpu0,
                    "node_claims": len(result.created) + len(result.existing),
                    "started": len(result.started),
                    "deferred": len(getattr(result, "deferred", ())),
                    "refused": len(result.refused),
                    "pending": result.pending_pods,
                    "unschedulable": result.unschedulable,
                    "claim_posts": stats["claim_posts"],
                    "kube_429": stats.get("kube_429", 0),
                    "sfn_throttled": stats.get("sfn_throttled", 0),
                }
            )
            r = runs[-1]
            print(
                f"  run {rep + 1}: snapshot {r['snapshot']:.3f} s, solve {r['solve']:.3f} s, first StartExecution "
                f"{_s(r['first_start'])}, all NodeClaims {_s(r['claims_created'])}, all started "
                f"{_s(r['all_started'])}, total {r['total']:.2f} s; {r['node_claims']} NodeClaims, "
                f"{r['started']} started, {r['deferred']} deferred, {r['refused']} refused, {r['unschedulable']} "
                f"unschedulable pods; 429s {r['kube_429']}, "
                f"throttled starts {r['sfn_throttled']}; Nominated events {r['nominated']}; "
                f"CPU here {r['cpu']:.2f} s, server {r['server_cpu']:.2f} s",
                flush=True,
            )
        parent.send("stop")
        return runs
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()


# --- in-process: snapshot parse + build_input + solve only ------------------------------------------


def list_bodies(pending: int, bound: int, nodes: int) -> dict[str, bytes]:
    """kind -> the LIST body an API server would answer for the seeded cluster (``objects``)."""
    objects_by_kind: dict[str, list[dict[str, Any]]] = {}
    for body in objects(pending, bound, nodes):
        items = objects_by_kind.setdefault(body["kind"], [])
        meta = body["metadata"]
        meta.setdefault("uid", f"{body['kind'].lower()}-{len(items)}")
        meta.setdefault("resourceVersion", str(len(items) + 1))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        items.append(body)
    return {
        kind: json.dumps({"kind": f"{kind}List", "metadata": {"resourceVersion": "1"}, "items": items}).encode()
        for kind, items in objects_by_kind.items()
    }


def in_process_child(args: argparse.Namespace) -> dict[str, Any]:
    """One repetition in this interpreter: (CPU, wall) of snapshot parse, build_input, plan; the plan's digest."""
    import dataclasses
    import hashlib

    from nodeflow.catalog.offline import load_offline
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.snapshot import take_snapshot
    from nodeflow.plan import build_input, plan

    bodies = list_bodies(args.pending, args.bound, args.nodes)

    class Served(KubeClient):
        def __init__(self) -> None:
            pass

        def list_raw(self, resource: Any, **_kwargs: Any) -> bytes:
            return bodies.get(resource.kind, b'{"metadata": {}, "items": []}')

    catalog = load_offline(REGION)
    out: dict[str, Any] = {}

    def timed(name: str, fn: Any) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        value = fn()
        out[name] = (time.process_time() - cpu, time.perf_counter() - wall)
        return value

    snap = timed("snapshot", lambda: take_snapshot(Served()))
    state = snap.provisioning_state()
    timed("build_input", lambda: build_input(state, catalog))
    result = timed("plan", lambda: plan(state, catalog))

    def encode(o: Any) -> Any:
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
        if isinstance(o, set | frozenset):
            return sorted(o, key=repr)
        return repr(o)

    text = json.dumps(result, default=encode, sort_keys=True)
    out["digest"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    out["node_claims"] = len(result.node_claims)
    return out


def in_process(args: argparse.Namespace) -> int:
    import subprocess

    trees = [("this tree", str(ROOT / "functions"))] + ([("ref", args.ref)] if args.ref else [])
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in trees}
    for rep in range(args.repeat):
        for label, funcs in trees:
            cmd = [sys.executable, "-m", "benchmarks.provisioning_scale", "--in-process-child", "--funcs", funcs]
            cmd += ["--pending", str(args.pending), "--bound", str(args.bound), "--nodes", str(args.nodes)]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
            r = json.loads(done.stdout.strip().splitlines()[-1])
            runs[label].append(r)
            print(
                f"  run {rep + 1} {label:<9}: snapshot {r['snapshot'][0]:.3f} s CPU, build_input "
                f"{r['build_input'][0]:.3f} s, plan {r['plan'][0]:.3f} s; {r['node_claims']} NodeClaims "
                f"(plan {r['digest']})",
                flush=True,
            )
    print()
    print(
        f"{args.pending} pending + {args.bound} bound pods on {args.nodes} nodes, in process (no servers), "
        f"best of {args.repeat}, CPU / wall seconds:"
    )
    header = f"  {'stage':<42}" + "".join(f"{label:>22}" for label, _ in trees)
    print(header)
    for stage, label in (
        ("snapshot", "snapshot (LIST JSON parse)"),
        ("build_input", "build_input"),
        ("plan", "plan (build_input + solve)"),
        ("total", "snapshot + plan (to the first create)"),
    ):
        cells = ""
        for tree, _ in trees:
            if stage == "total":
                cpu = min(r["snapshot"][0] + r["plan"][0] for r in runs[tree])
                wall = min(r["snapshot"][1] + r["plan"][1] for r in runs[tree])
            else:
                cpu = min(r[stage][0] for r in runs[tree])
                wall = min(r[stage][1] for r in runs[tree])
            cells += f"{cpu:>12.3f} /{wall:>7.3f}"
        print(f"  {label:<42}{cells}")
    digests = {r["digest"] for rs in runs.values() for r in rs}
    print(f"  plans identical across runs and trees: {'yes' if len(digests) == 1 else 'NO: ' + ', '.join(digests)}")
    return 0 if len(digests) == 1 else 1


def _recv(conn: Any, proc: Any) -> Any:
    """The server's answer; fails (instead of hanging) when the server process died."""
    while not conn.poll(0.5):
        if not proc.is_alive():
            raise RuntimeError(f"the server process exited with code {proc.exitcode}")
    return conn.recv()


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=20000)
    parser.add_argument("--bound", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 pending, 200 bound, 50 nodes, one run")
    parser.add_argument("--server-cpu", type=int, default=None, help="pin the servers (child, etcd, API server) here")
    parser.add_argument("--kube-inflight", type=int, default=0, help="429 beyond N mutating requests in flight")
    parser.add_argument("--sfn-burst", type=int, default=0, help="StartExecution token bucket size (0: none)")
    parser.add_argument("--sfn-rate", type=float, default=300.0, help="StartExecution token refill per second")
    parser.add_argument("--claim-workers", type=int, default=None, help="NodeClaim creates in flight (default: 8)")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    parser.add_argument("--in-process", action="store_true", help="snapshot parse + plan only, no servers")
    parser.add_argument("--ref", default=None, help="with --in-process: a functions/ tree to compare, interleaved")
    parser.add_argument("--in-process-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--funcs", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.in_process_child:
        sys.path.insert(0, args.funcs)
        print(json.dumps(in_process_child(args)))
        return 0
    if args.quick:
        args.pending, args.bound, args.nodes, args.repeat = 2000, 200, 50, 1
    for key, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        os.environ[key] = value
    if args.claim_workers:
        from nodeflow.lifecycle import provisioner

        provisioner.CLAIM_WORKERS = args.claim_workers
    if args.in_process:
        return in_process(args)
    runs = run(args)
    best = {k: min(r[k] for r in runs if r[k] is not None) for k in runs[0] if isinstance(runs[0][k], float)}
    med = {k: statistics.median(r[k] for r in runs if r[k] is not None) for k in best}
    last = runs[-1]
    print()
    print(
        f"{args.pending} pending + {args.bound} bound pods on {args.nodes} nodes -> {last['node_claims']} NodeClaims "
        f"({last['unschedulable']} unschedulable), best / median of {len(runs)}:"
    )
    rows = [
        ("list + parse snapshot", "snapshot"),
        ("solve", "solve"),
        ("first StartExecution (snapshot + solve + 1st create)", "first_start"),
        ("all NodeClaims created", "claims_created"),
        ("all launch executions started", "all_started"),
        ("provision() returned (incl. events)", "total"),
        ("provisioner CPU (this process)", "cpu"),
        ("server CPU (kube-apiserver + etcd + proxy + moto)", "server_cpu"),
    ]
    for label, key in rows:
        if key in best:
            print(f"  {label:<55} {best[key]:8.3f} s  {med[key]:8.3f} s")
    if args.json:
        case = f"{args.pending} pending, {args.bound} bound, {args.nodes} nodes, {last['node_claims']} NodeClaims"
        figures = [{"case": case, "metric": key, "value": best[key]} for _, key in rows if key in best]
        figures.append({"case": case, "metric": "node_claims", "value": last["node_claims"]})
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
