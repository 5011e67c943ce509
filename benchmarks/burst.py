"""A burst on the real control plane: Deployments of ``--pods`` pending pods until kube-scheduler bound every one to a
Ready node launched for it, and where the time went.

    .venv/bin/python -m benchmarks.burst [--pods 5000] [--scale 0.02] [--json]

The whole path runs: real Deployments (kube-controller-manager creates the pods, kube-scheduler marks them
unschedulable and later binds them), the agent as a subprocess, the webhook behind its Function URL (SigV4), moto
EventBridge routing to the provisioning queue, the SQS event-source mapping with the deployed batching window, the
provisioner, Step Functions executing ``launch.asl.json`` (one execution per NodeClaim), CreateFleet on moto EC2,
the simulated kubelets (``sandbox.kwok``: a Node ``BOOT_SECONDS`` after the instance appears, Ready
``READY_SECONDS`` after that, both scaled by ``--scale`` like the workflow's Wait states and Retry intervals).

Where the time goes is read from the objects and the services' own records, not from one wall clock: the pods'
``creationTimestamp`` and ``PodScheduled`` condition, the queue messages' ``SentTimestamp``, the event-source
mapping's batches (window opened / provisioner invoked), the provisioner invocations, the executions' ``startDate``,
the CreateFleet calls (EC2's request hook), the simulated kubelets' registration and readiness, the NodeClaims'
``Registered`` / ``Initialized`` conditions. The critical path is walked back from the last pod bound: its node,
that node's NodeClaim and execution, the batch whose provisioner invocation started it. The control path is that
path minus the batch window and the simulated boot and readiness (``BOOT_SECONDS``/``READY_SECONDS`` x scale).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
for extra in (str(ROOT / "functions"), str(ROOT)):
    if extra not in sys.path:
        sys.path.insert(0, extra)

BOOT_SECONDS = 50.0  # an instance boots and its kubelet registers the Node
READY_SECONDS = 20.0  # the Node goes Ready (CNI, daemons) after registering
# (cpu, memory) of the Deployments' pods, in turn: small services, as in Karpenter's scale tests
SHAPES = [("100m", "128Mi"), ("250m", "256Mi"), ("500m", "512Mi"), ("1", "1Gi")]
DEPLOYMENTS = 10
# Task timeouts stretched (sandbox.stepfunctions.stretch_task_timeouts): the report counts the tasks that took longer
# than their own TimeoutSeconds here, where every Lambda waits for one interpreter lock
TASK_TIMEOUT_SCALE = 10.0
POLL_SECONDS = 5.0  # how often the benchmark LISTs the pods to see whether all are bound (10 % of the process at 2 s)


def deployments(pods: int, count: int = DEPLOYMENTS) -> list[dict[str, Any]]:
    """``count`` Deployments (``burst-NN``) holding ``pods`` replicas between them, the shapes in turn."""
    out: list[dict[str, Any]] = []
    per, extra = divmod(pods, count)
    for i in range(count):
        replicas = per + (1 if i < extra else 0)
        if not replicas:
            continue
        cpu, memory = SHAPES[i % len(SHAPES)]
        labels = {"app": f"burst-{i:02d}"}
        container = {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"burst-{i:02d}", "namespace": "default", "labels": labels},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
                },
            }
        )
    return out


def _epoch(stamp: str | None) -> float | None:
    """An RFC 3339 timestamp as epoch seconds."""
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c  # type: ignore[no-any-return]
    return None


def _true_since(obj: Mapping[str, Any], kind: str) -> float | None:
    c = _condition(obj, kind)
    return _epoch(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None


def _live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods not being deleted (a pod evicted from a Node the lifecycle controller gave up on has a successor)."""
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]


def _bound(pods: list[dict[str, Any]]) -> int:
    return sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))


def _load() -> str:
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


def run(pods: int, scale: float, timeout: float) -> dict[str, Any]:
    from benchmarks.realcluster import started

    with started(controllers=True) as kube:
        return _run(kube, pods, scale, timeout)


def _run(kube: Any, pods: int, scale: float, timeout: float) -> dict[str, Any]:
    from moto import mock_aws

    from benchmarks.realcluster import server_cpu
    from sandbox.agent import AgentProcess
    from sandbox.aws import MOCK_CONFIG, Clients
    from sandbox.esm import unschedulable_pods
    from sandbox.nodeflow import LocalNodeflow
    from sandbox.stepfunctions import quiet_engine_logs
    from tests.functional.lifecycle.conftest import demo_node_pools

    with mock_aws(config=MOCK_CONFIG), quiet_engine_logs():  # not a line per Choice path found missing
        quiet = {"POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "ERROR"}
        local = LocalNodeflow(
            Clients.fake(),
            kube,
            env=quiet,
            wait_scale=scale,
            kubelet_register_after=BOOT_SECONDS * scale,
            kubelet_ready_after=READY_SECONDS * scale,
            kubelet_interval=1.0,  # how often the kubelets list EC2 (19 % of the process at 0.25 s); boot is apart
            direct_kube=True,  # no fault proxy relaying every request in this process
            task_timeout_scale=TASK_TIMEOUT_SCALE,
        ).start()
        try:
            pools = demo_node_pools()
            for pool in pools:  # no CPU limit: the burst is larger than the demo's 1,000 CPU
                pool.get("spec", {}).pop("limits", None)
            local.apply(pools)
            fleet = _time_create_fleet(local)
            local.start_webhook()
            source = local.start_event_source()
            with AgentProcess(local.agent_env()) as agent:
                agent.wait_ready()
                load_before = _load()
                cpu_before = (os.times(), server_cpu(kube.plane), _agent_cpu(agent))
                began = time.time()
                for d in deployments(pods):
                    kube.create(d)
                seen: list[dict[str, Any]] = []
                deadline = began + timeout
                progress = began
                while time.time() < deadline:
                    seen = _live(kube.objects("v1", "Pod", "default"))
                    if len(seen) >= pods and _bound(seen) >= pods:
                        break
                    if time.time() - progress >= 30:
                        progress = time.time()
                        print(
                            f"  +{progress - began:.0f} s: {len(seen)} pods, {_bound(seen)} bound, "
                            f"{len(local.executions())} executions, load {_load()}",
                            file=sys.stderr,
                            flush=True,
                        )
                    time.sleep(POLL_SECONDS)
                ended = time.time()
                load_after = _load()
                now = os.times()
                cpu = {
                    "this process (handlers, moto, Step Functions engine, kubelets, proxy)": now.user
                    + now.system
                    - cpu_before[0].user
                    - cpu_before[0].system,
                    "control plane (etcd, kube-apiserver, controllers, scheduler)": server_cpu(kube.plane)
                    - cpu_before[1],
                    "agent": _agent_cpu(agent) - cpu_before[2],
                }
                batches = source.snapshot()
                arrivals = unschedulable_pods(batches)
            nodes = {n["metadata"]["name"]: n for n in kube.objects("v1", "Node")}
            claims = {c["metadata"]["name"]: c for c in kube.objects("karpenter.sh/v1", "NodeClaim")}
            executions = local.executions()
            statuses = [local.clients.sfn.describe_execution(executionArn=e["executionArn"]) for e in executions]
            tasks = _task_durations(local, executions)
            provisioner = [
                i for i in local.dispatch.invocations if i.function_name == local.function_name("provisioner")
            ]
            kubelet = {(e.kind, e.node_claim): e.at for e in local.kubelet.events}
            mono_offset = time.time() - time.monotonic()  # the kubelets' clock is monotonic
            return _report(
                pods=pods,
                scale=scale,
                began=began,
                ended=ended,
                seen=seen,
                nodes=nodes,
                claims=claims,
                statuses=statuses,
                batches=batches,
                arrivals=arrivals,
                provisioner=[(i.started, i.started + i.duration, i.error) for i in provisioner],
                fleet=fleet,
                kubelet={k: v + mono_offset for k, v in kubelet.items()},
                load=(load_before, load_after),
                cpu=cpu,
                tasks=tasks,
                invocations=local.dispatch.count(),
                agent_metrics=agent_metrics_or_none(agent),
            )
        finally:
            local.stop()


def _task_durations(local: Any, executions: list[dict[str, Any]]) -> dict[str, Any]:
    """Per Task state of the launch workflow: its attempts' durations (first / median / p90 / last) and how many
    took longer than the state's own TimeoutSeconds (which here were stretched, ``TASK_TIMEOUT_SCALE``)."""
    from sandbox.nodeflow import LAUNCH_ASL

    limits = {
        name: state.get("TimeoutSeconds")
        for name, state in json.loads(LAUNCH_ASL.read_text())["States"].items()
        if state.get("Type") == "Task"
    }
    seconds: dict[str, list[float]] = {name: [] for name in limits}
    for e in executions:
        for visit in local.trace(e["executionArn"]).states:
            for attempt in visit.attempts if visit.name in seconds else ():
                if attempt.ended is not None:
                    seconds[visit.name].append((attempt.ended - attempt.started).total_seconds())
    return {
        name: {
            "attempts": len(values),
            "timeoutSeconds": limits[name],
            "over": sum(1 for v in values if limits[name] and v > limits[name]),
            "seconds": _spread(values),
        }
        for name, values in seconds.items()
        if values
    }


def _agent_cpu(agent: Any) -> float:
    from benchmarks.realcluster import cpu_seconds

    return cpu_seconds(agent.proc.pid) if agent.proc is not None and agent.proc.poll() is None else 0.0


def agent_metrics_or_none(agent: Any) -> Any:
    try:
        return agent.metrics()
    except Exception:
        return None


def _time_create_fleet(local: Any) -> dict[str, float]:
    """NodeClaim name -> epoch seconds of the first CreateFleet its Launch step made (EC2's request hook)."""
    here = threading.local()
    fleet: dict[str, float] = {}
    name = local.function_name("launch")
    real_launch = local.dispatch.handlers[name]

    def launch(event: Any, context: Any) -> Any:
        here.claim = event.get("nodeClaim")
        return real_launch(event, context)

    def before(asked: Any) -> None:
        claim = getattr(here, "claim", None)
        if claim:
            fleet.setdefault(claim, time.time())

    local.dispatch.register(name, launch)
    local.faults.before = before
    return fleet


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    values = sorted(values)
    return {
        "first": values[0],
        "median": statistics.median(values),
        "p90": values[min(len(values) - 1, round(0.9 * (len(values) - 1)))],
        "last": values[-1],
    }


def _batch(b: Any, t0: float) -> dict[str, Any]:
    """One provisioner batch: when it was invoked, its records, the NodeClaims it created, its own timings."""
    result = (b.result or {}).get("result") or {} if isinstance(b.result, dict) else {}
    return {
        "invoked": b.invoked_at - t0,
        "records": len(b.records),
        "ok": b.ok,
        "created": len(result.get("nodeClaimsCreated") or []),
        "timings": {k: round(v, 3) for k, v in (result.get("timings") or {}).items()},
    }


def _report(**r: Any) -> dict[str, Any]:
    """Milestones (seconds after the first Deployment was created, first / median / p90 / last over the objects),
    per-object stage durations, and the critical path of the last pod bound."""
    t0 = r["began"]
    scale = r["scale"]
    pods: list[dict[str, Any]] = r["seen"]
    claims: dict[str, dict[str, Any]] = r["claims"]
    nodes: dict[str, dict[str, Any]] = r["nodes"]
    kubelet: dict[tuple[str, str], float] = r["kubelet"]
    started = {s["name"]: s["startDate"].timestamp() for s in r["statuses"]}
    status_count: dict[str, int] = {}
    for s in r["statuses"]:
        status_count[s["status"]] = status_count.get(s["status"], 0) + 1
    claim_of_node = {(c.get("status") or {}).get("nodeName"): n for n, c in claims.items()}

    created = {p["metadata"]["name"]: _epoch(p["metadata"]["creationTimestamp"]) or 0.0 for p in pods}
    bound = {p["metadata"]["name"]: _true_since(p, "PodScheduled") for p in pods}
    node_of = {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName") for p in pods}
    queued = {name: sent for name, (sent, _) in r["arrivals"].items()}

    def rel(values: Any) -> dict[str, float] | None:
        return _spread([v - t0 for v in values if v is not None])

    milestones = {
        "pod created": rel(created.values()),
        "pod pending event queued": rel(queued.values()),
        "batch opened": rel(b.opened_at for b in r["batches"]),
        "provisioner invoked": rel(b.invoked_at for b in r["batches"]),
        "provisioner returned": rel(end for _, end, _ in r["provisioner"]),
        "StartExecution": rel(started.values()),
        "CreateFleet": rel(r["fleet"].values()),
        "Node registered by its kubelet": rel(v for (k, _), v in kubelet.items() if k == "registered"),
        "NodeClaim Registered": rel(_true_since(c, "Registered") for c in claims.values()),
        "Node Ready": rel(v for (k, _), v in kubelet.items() if k == "ready"),
        "NodeClaim Initialized": rel(_true_since(c, "Initialized") for c in claims.values()),
        "pod bound": rel(bound.values()),
    }
    stages = {
        "agent + webhook + bus (pod created -> queued)": _spread(
            [queued[n] - created[n] for n in queued if n in created]
        ),
        "batch window (opened -> invoked)": _spread([b.invoked_at - b.opened_at for b in r["batches"]]),
        "provisioner invocation": _spread([end - start for start, end, _ in r["provisioner"]]),
        "StartExecution -> CreateFleet": _spread([r["fleet"][c] - started[c] for c in r["fleet"] if c in started]),
        "CreateFleet -> Node (simulated boot)": _spread(
            [kubelet[("registered", c)] - r["fleet"][c] for c in r["fleet"] if ("registered", c) in kubelet]
        ),
        "Node -> NodeClaim Registered (Register polls)": _spread(
            [
                t - kubelet[("registered", n)]
                for n, c in claims.items()
                if (t := _true_since(c, "Registered")) is not None and ("registered", n) in kubelet
            ]
        ),
        "Node Ready -> NodeClaim Initialized (Initialize polls)": _spread(
            [
                t - kubelet[("ready", n)]
                for n, c in claims.items()
                if (t := _true_since(c, "Initialized")) is not None and ("ready", n) in kubelet
            ]
        ),
    }

    out: dict[str, Any] = {
        "pods": r["pods"],
        "bound": sum(1 for v in bound.values() if v is not None),
        "scale": scale,
        "boot_seconds": BOOT_SECONDS * scale,
        "ready_seconds": READY_SECONDS * scale,
        "wall_seconds": r["ended"] - t0,
        "load_average": {"before": r["load"][0], "after": r["load"][1]},
        "cpu_seconds": r["cpu"],
        "node_claims": len(claims),
        "nodes": len(nodes),
        "executions": status_count,
        "batches": len(r["batches"]),
        "provisioner_failures": sum(1 for *_, err in r["provisioner"] if err),
        "lambda_invocations": r["invocations"],
        "milestones": milestones,
        "stages": stages,
        "provisioner_batches": [_batch(b, t0) for b in r["batches"]],
        "tasks": r["tasks"],
    }
    if not all(v is not None for v in bound.values()) or not pods:
        return out

    # The critical path, walked back from the last pod bound.
    last = max(bound, key=lambda n: bound[n] or 0.0)
    end = bound[last] or 0.0
    node = node_of[last]
    claim = str(claim_of_node.get(node) or node)
    start = started.get(claim)
    batch = None
    for b in r["batches"]:  # the latest batch invoked before the execution started
        if start is not None and b.invoked_at <= start:
            batch = b
    registered_node = kubelet.get(("registered", claim))
    ready_node = kubelet.get(("ready", claim))
    registered_claim = _true_since(claims.get(claim, {}), "Registered")
    path: dict[str, float | None] = {}
    if batch is not None and start is not None:
        fleet = r["fleet"].get(claim)
        path = {
            "first Deployment created -> batch opened (controllers, scheduler, agent, webhook, bus, queue, "
            "earlier batches)": batch.opened_at - t0,
            "batch window": batch.invoked_at - batch.opened_at,
            "provisioner: invoked -> StartExecution": start - batch.invoked_at,
            "StartExecution -> CreateFleet": (fleet - start) if fleet else None,
            "CreateFleet -> Node registered (simulated boot)": (registered_node - fleet)
            if fleet and registered_node
            else None,
            "Node registered -> NodeClaim Registered (Register)": (registered_claim - registered_node)
            if registered_claim and registered_node
            else None,
            "NodeClaim Registered -> Node Ready (simulated)": (ready_node - registered_claim)
            if ready_node and registered_claim
            else None,
            "Node Ready / Registered -> pod bound (kube-scheduler)": end
            - max(v for v in (ready_node, registered_claim, registered_node) if v is not None)
            if registered_node
            else None,
        }
    # Apart: the batch window, and the kubelet's simulated span from CreateFleet to Node Ready (boot, registration,
    # readiness); a Register poll that ends after the Node is Ready stays in the control path.
    fleet_at = r["fleet"].get(claim)
    simulated = (
        (ready_node - fleet_at)
        if ready_node is not None and fleet_at is not None
        else (BOOT_SECONDS + READY_SECONDS) * scale
    )
    window = (batch.invoked_at - batch.opened_at) if batch is not None else 0.0
    total = end - t0
    out["critical_path"] = {
        "pod": last,
        "node": node,
        "total": total,
        "stages": path,
        "simulated boot + readiness (apart): CreateFleet -> Node Ready": simulated,
        "batch window (apart)": window,
        "control path": total - simulated - window,
    }
    return out


def _print(out: Mapping[str, Any]) -> None:
    print(
        f"{out['pods']} pods in {DEPLOYMENTS} Deployments -> {out['node_claims']} NodeClaims, {out['bound']} bound "
        f"in {out['wall_seconds']:.1f} s wall (waits and boot scaled by {out['scale']}: boot "
        f"{out['boot_seconds']:.2f} s, Ready {out['ready_seconds']:.2f} s later); load average "
        f"{out['load_average']['before']} -> {out['load_average']['after']}"
    )
    print(
        f"  executions {out['executions']}, {out['batches']} provisioner batches "
        f"({out['provisioner_failures']} failed), {out['lambda_invocations']} Lambda invocations"
    )
    print("  CPU seconds over the burst: " + ", ".join(f"{k} {v:.1f}" for k, v in out["cpu_seconds"].items()))
    print("  milestones, s after the first Deployment was created (first / median / p90 / last):")
    for name, s in out["milestones"].items():
        if s:
            print(f"    {name:<34} {s['first']:8.2f} {s['median']:8.2f} {s['p90']:8.2f} {s['last']:8.2f}")
    print("  stages per object, s (first / median / p90 / last):")
    for name, s in out["stages"].items():
        if s:
            print(f"    {name:<56} {s['first']:7.3f} {s['median']:7.3f} {s['p90']:7.3f} {s['last']:7.3f}")
    print(f"  launch workflow tasks (timeouts stretched x{TASK_TIMEOUT_SCALE:g}; first / median / p90 / last s):")
    for name, t in out["tasks"].items():
        d = t["seconds"]
        print(
            f"    {name:<10} {t['attempts']:4d} attempts {d['first']:7.2f} {d['median']:7.2f} {d['p90']:7.2f} "
            f"{d['last']:7.2f}; over its own TimeoutSeconds ({t['timeoutSeconds']}): {t['over']}"
        )
    print("  provisioner batches (s after the start: records, NodeClaims created, the provisioner's timings):")
    for b in out["provisioner_batches"]:
        timings = ", ".join(f"{k} {v:.2f}" for k, v in b["timings"].items())
        print(f"    +{b['invoked']:7.2f}  {b['records']:4d} records  {b['created']:4d} created  {timings}")
    cp = out.get("critical_path")
    if cp:
        print(f"  critical path of the last pod bound ({cp['pod']} on {cp['node']}): {cp['total']:.2f} s")
        for name, v in cp["stages"].items():
            print(f"    {name:<104} {'-' if v is None else f'{v:7.2f}'}")
        print(
            f"    control path {cp['control path']:.2f} s = total - batch window {cp['batch window (apart)']:.2f} s "
            f"- simulated boot and readiness (CreateFleet -> Node Ready) "
            f"{cp['simulated boot + readiness (apart): CreateFleet -> Node Ready']:.2f} s"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--scale", type=float, default=0.02, help="Wait states, Retry intervals, boot (x)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds")
    parser.add_argument("--quick", action="store_true", help="200 pods")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    args = parser.parse_args(argv)
    if args.quick:
        args.pods = 200
    from benchmarks.environment import offline_aws

    offline_aws()
    out = run(args.pods, args.scale, args.timeout)
    _print(out)
    if args.json:
        cp = out.get("critical_path") or {}
        case = f"{args.pods} pods, {out['node_claims']} NodeClaims"
        print(
            json.dumps(
                [
                    {"case": case, "metric": "first pod -> last bound (wall)", "value": out["wall_seconds"]},
                    {"case": case, "metric": "control path", "value": cp.get("control path")},
                ]
            )
        )
    return 0 if out["bound"] >= out["pods"] else 1


if __name__ == "__main__":
    sys.exit(main())
