"""Provisioning-path benchmark, in the local setup (moto in-process with Step Functions executing
the real launch.asl.json, a real control plane (``benchmarks.realcluster``: kube-apiserver, etcd,
kube-controller-manager, kube-scheduler), handlers in-process, simulated kubelets (``sandbox.kwok``)).

    .venv/bin/python -m benchmarks.provisioning [--pods 1000] [--repeat 3]

1. Decision latency: a 1,000-pod batch of pending-pod events goes to the provisioner Lambda
   (through the Lambda API); measured from the invocation to the first CreateFleet call that
   reaches EC2 (moto), best and median of --repeat fresh runs. DESIGN budget: the batch window + 0.5 s.
2. Control-plane cost: Step Functions state transitions and Lambda invocations per launched node,
   counted from the execution histories, with a node that boots in ~50 s and is Ready ~20 s
   later (Step Functions waits scaled by 0.01, the kubelet's delays scaled alike).
   DESIGN budget for a whole lifecycle (launch to terminate): <= 25 transitions, <= 10 invocations.

The pending pods are 20 real ReplicaSets' (``tests.realk8s.workloads``), created before the clock starts and
waited for until kube-scheduler marked every one unschedulable; kube-scheduler binds them once their nodes are
up. One control plane serves every repetition (``RealKubeAPI.reset`` between them). Measured on tests/kubeapi's
in-process server before (docs/benchmarks/index.md): the API server is now separate processes, so it no longer
shares the benchmark's interpreter lock.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import threading
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
for extra in (str(ROOT / "functions"), str(ROOT)):
    if extra not in sys.path:
        sys.path.insert(0, extra)

SCALE = 0.01
BOOT_SECONDS = 50.0
READY_SECONDS = 20.0
SHAPES = [("250m", "512Mi"), ("500m", "1Gi"), ("1", "2Gi"), ("2", "4Gi"), ("1", "8Gi")]


def _workloads(count: int) -> list[tuple[str, int, str, str]]:
    """(name, replicas, cpu, memory) of the ReplicaSets holding ``count`` pods: ~20, shapes in turn."""
    out: list[tuple[str, int, str, str]] = []
    per = max(1, count // 20)
    placed = i = 0
    while placed < count:
        cpu, memory = SHAPES[i % len(SHAPES)]
        n = min(per, count - placed)
        out.append((f"app{i:02d}", n, cpu, memory))
        placed += n
        i += 1
    return out


def _pending(local: Any, name: str, replicas: int, cpu: str, memory: str, **spec: Any) -> list[str]:
    """A ReplicaSet's pods, once kube-scheduler found no node for any of them; their keys."""
    from tests.realk8s.workloads import replica_set, unschedulable

    local.apply([replica_set(name, replicas, cpu, memory, **spec)])
    return unschedulable(local.kube_server, name, replicas, timeout=120)


def _unbound(kube: Any) -> list[str]:
    """The benchmark's pods kube-scheduler has not bound (namespace/name)."""
    return [
        f"default/{p['metadata']['name']}"
        for p in kube.objects("v1", "Pod", "default")
        if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    ]


def run_once(kube: Any, pods: int, *, wait: bool) -> dict[str, Any]:
    from moto import mock_aws

    from sandbox.aws import MOCK_CONFIG, Clients
    from sandbox.nodeflow import LocalNodeflow
    from tests.functional.lifecycle.conftest import demo_node_pools

    kube.reset()
    try:
        with mock_aws(config=MOCK_CONFIG):
            local = LocalNodeflow(
                Clients(region="us-east-1"),
                kube,
                wait_scale=SCALE,
                kubelet_register_after=BOOT_SECONDS * SCALE,
                kubelet_ready_after=READY_SECONDS * SCALE,
                kubelet_interval=2 * SCALE,  # the kubelet reports every ~2 s (scaled)
            )
            with local:
                pools = demo_node_pools()
                for pool in pools:  # no CPU limit: the batch is larger than the demo's 1,000 CPU
                    pool.get("spec", {}).pop("limits", None)
                local.apply(pools)
                keys = [k for w in _workloads(pods) for k in _pending(local, *w)]
                local.send_pending(keys)
                batch = local.receive_batch()
                first: list[float] = []
                here = threading.local()
                entered: dict[str, float] = {}
                fleet: dict[str, float] = {}
                launch_fn = local.function_name("launch")
                real_launch = local.dispatch.handlers[launch_fn]

                def timed_launch(event: Any, context: Any) -> Any:
                    here.claim = event.get("nodeClaim")
                    entered.setdefault(here.claim, time.perf_counter())
                    return real_launch(event, context)

                def before(asked: Any) -> None:
                    now = time.perf_counter()
                    if not first:
                        first.append(now)
                    claim = getattr(here, "claim", None)
                    if claim and claim not in fleet:
                        fleet[claim] = now

                local.dispatch.register(launch_fn, timed_launch)
                local.faults.before = before
                t0 = time.perf_counter()
                result = local.provision(batch)["result"]
                returned = time.perf_counter() - t0
                while not first and time.perf_counter() - t0 < 30:
                    time.sleep(0.001)
                out: dict[str, Any] = {
                    "first_create_fleet": (first[0] - t0) if first else None,
                    "provisioner_seconds": returned,
                    "node_claims": len(result["nodeClaimsCreated"]),
                    "timings": result["timings"],
                }
                if wait:
                    # every launch shares this process: allow for the plan's size (1,000 pods plan 183 small spot
                    # NodeClaims since the solver's re-packing pass, where this once was 29)
                    done = local.wait_for_executions(timeout=max(300.0, 4.0 * out["node_claims"]))
                    traces = [local.trace(d["executionArn"]) for d in done]
                    ok = [t for t, d in zip(traces, done, strict=True) if d["status"] == "SUCCEEDED"]
                    out["succeeded"] = len(ok)
                    out["transitions_per_node"] = sum(t.transitions for t in ok) / max(1, len(ok))
                    out["task_invocations_per_node"] = sum(t.task_invocations for t in ok) / max(1, len(ok))
                    out["max_transitions"] = max((t.transitions for t in ok), default=0)
                    out["lambda_invocations"] = local.dispatch.count()
                first_claim = min(entered, key=entered.__getitem__) if entered else None
                step = sorted(fleet[c] - entered[c] for c in fleet if c in entered)
                out["first_launch_entered"] = (entered[first_claim] - t0) if first_claim else None
                out["first_launch_step"] = (
                    fleet[first_claim] - entered[first_claim] if first_claim and first_claim in fleet else None
                )
                out["launch_step_median"] = statistics.median(step) if step else None

                # The same path with nothing else running (as in AWS, where each Lambda has its own
                # process): one more pending pod, one NodeClaim.
                # kube-scheduler binds the batch's pods; those it gave other pods' planned room to get the run that
                # the provisioner's follow-up message would start (docs/benchmarks/fidelity.md), here in-line
                out["leftover_pods"] = out["leftover_node_claims"] = 0
                for round_ in range(3):
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline and _unbound(kube):
                        time.sleep(0.1)
                    leftover = _unbound(kube)
                    if not leftover or round_ == 2:
                        break
                    out["leftover_pods"] += len(leftover)
                    local.send_pending(leftover)
                    again = local.provision(local.receive_batch())["result"]
                    out["leftover_node_claims"] += len(again["nodeClaimsCreated"])
                    local.wait_for_executions(timeout=max(120.0, 4.0 * len(again["nodeClaimsCreated"])))
                # (a type the mix never picks, so it cannot join an existing node)
                late_keys = _pending(
                    local, "late", 1, "1", "1Gi", nodeSelector={"node.kubernetes.io/instance-type": "m7i.8xlarge"}
                )
                local.send_pending(late_keys)
                batch = local.receive_batch()
                first.clear()
                entered.clear()
                fleet.clear()
                t1 = time.perf_counter()
                idle = local.provision(batch)["result"]
                local.wait_for_executions(timeout=60)
                if len(idle["nodeClaimsCreated"]) != 1:
                    raise RuntimeError(f"expected one NodeClaim for the late pod: {idle}")
                (claim,) = idle["nodeClaimsCreated"]
                out["idle_first_start"] = idle["timings"]["first_start"]
                out["idle_launch_entered"] = entered[claim] - t1
                out["idle_launch_step"] = fleet[claim] - entered[claim]
                out["idle_first_create_fleet"] = first[0] - t1
                late = next(e for e in local.executions() if e["name"] == claim)
                trace = local.trace(late["executionArn"])
                out["idle_transitions"] = trace.transitions
                out["idle_invocations"] = trace.task_invocations
                out["idle_states"] = " > ".join(v.name for v in trace.states)
                return out
    finally:
        kube.reset()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    args = parser.parse_args(argv)
    from benchmarks.environment import offline_aws

    offline_aws()

    from benchmarks.realcluster import started

    with started(controllers=True) as kube:
        runs = [run_once(kube, args.pods, wait=True) for _ in range(args.repeat)]
    firsts = [r["first_create_fleet"] for r in runs if r["first_create_fleet"] is not None]
    last = runs[-1]
    print(f"{args.pods} pending pods in one batch -> {last['node_claims']} NodeClaims")
    print(
        f"batch received -> first CreateFleet: best {min(firsts):.3f} s, median {statistics.median(firsts):.3f} s "
        f"({len(firsts)} runs)"
    )
    print(
        f"  critical path (best run): first StartExecution after "
        f"{min(r['timings']['first_start'] for r in runs):.3f} s; its Launch step entered after "
        f"{min(r['first_launch_entered'] for r in runs):.3f} s; Launch step to CreateFleet "
        f"{min(r['first_launch_step'] for r in runs):.3f} s (median over all NodeClaims "
        f"{statistics.median(r['launch_step_median'] for r in runs):.3f} s, all sharing one process)"
    )
    print(
        "  one more pod with nothing else running (best run): first CreateFleet after "
        f"{min(r['idle_first_create_fleet'] for r in runs):.3f} s = StartExecution after "
        f"{min(r['idle_first_start'] for r in runs):.3f} s, Launch step entered after "
        f"{min(r['idle_launch_entered'] for r in runs):.3f} s, Launch step to CreateFleet "
        f"{min(r['idle_launch_step'] for r in runs):.3f} s"
    )
    t = last["timings"]
    print(
        "  provisioner breakdown (last run): "
        + ", ".join(f"{k} {v:.3f} s" for k, v in t.items())
        + f"; the invocation returned after {last['provisioner_seconds']:.3f} s"
    )
    print(
        f"launch workflow for that node alone: {last['idle_transitions']} state transitions, "
        f"{last['idle_invocations']} Lambda invocations: {last['idle_states']}"
    )
    if "succeeded" in last:
        nodes = last["succeeded"]
        print(
            f"launch workflow per node of the big batch ({nodes} nodes, boot ~{BOOT_SECONDS:.0f} s, "
            f"Ready ~{READY_SECONDS:.0f} s later): "
            f"{last['transitions_per_node']:.1f} state transitions (max {last['max_transitions']}), "
            f"{last['task_invocations_per_node']:.1f} Lambda invocations "
            f"(+{1 / max(1, nodes):.2f} provisioner invocation per node for this batch)"
        )
    if last.get("leftover_pods"):
        print(
            f"kube-scheduler gave {last['leftover_pods']} pods' planned room to others: a second run made "
            f"{last['leftover_node_claims']} NodeClaims for them (the provisioner's follow-up run on AWS)"
        )
    if args.json:
        case = f"{args.pods} pods, {last['node_claims']} NodeClaims"
        print(
            json.dumps(
                [
                    {"case": case, "metric": "batch -> first CreateFleet", "value": min(firsts)},
                    {
                        "case": case,
                        "metric": "one pod -> first CreateFleet",
                        "value": min(r["idle_first_create_fleet"] for r in runs),
                    },
                ]
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
