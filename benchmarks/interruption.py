"""Interruption benchmark, in the local setup: moto in-process (EventBridge default bus and its
rules, SQS, Step Functions executing the real terminate.asl.json), a real control plane
(``benchmarks.realcluster``: kube-apiserver, etcd, kube-controller-manager, kube-scheduler), handlers
in-process, simulated kubelets (``sandbox.kwok``), the interruption function behind an SQS
event-source mapping (no batching window).

    .venv/bin/python -m benchmarks.interruption [--nodes 4] [--pods-per-node 6]

For each node (one at a time): the AWS sample "EC2 Spot Instance Interruption Warning" for its
instance is put on the default bus; measured from that PutEvents to the first eviction request the
API server receives (through the facade's proxy), and to the end of the terminate execution; plus
the execution's state transitions and Lambda invocations (DESIGN budget for a whole lifecycle: 25 / 10,
of which launch uses 11 / 4).

Each node's pods are a real ReplicaSet's, bound by kube-scheduler; the evictions are the real eviction
API's, and the drain waits until the simulated kubelet confirmed each deletion (its containers stop 1 s
after the eviction, unscaled), so "event → terminated" includes that second. The ReplicaSet controller
makes new pods for the evicted ones (they stay pending: nothing provisions for them). Measured on
tests/kubeapi's in-process server before (docs/benchmarks/index.md), where a deletion was immediate.
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


def _instance_id(claim: dict[str, Any]) -> str:
    return str(claim["status"]["providerID"]).rsplit("/", 1)[-1]


def _settled(kube: Any, name: str, count: int) -> list[str]:
    """Wait until kube-scheduler bound or marked Unschedulable each of the ``count`` pods of ``name``; the
    unschedulable ones' keys."""
    from sandbox.controlplane.facade import wait_for

    def check() -> list[str] | None:
        pods = [p for p in kube.objects("v1", "Pod", "default") if p["metadata"]["name"].startswith(f"{name}-")]
        verdicts: list[dict[str, Any]] = [
            next((c for c in p["status"].get("conditions") or [] if c.get("type") == "PodScheduled"), {}) for p in pods
        ]
        done = [p for p, v in zip(pods, verdicts, strict=True) if p["spec"].get("nodeName") or v.get("reason")]
        if len(pods) != count or len(done) != count:
            return None
        return [f"default/{p['metadata']['name']}" for p in pods if not p["spec"].get("nodeName")]

    return list(wait_for(f"kube-scheduler's verdict on the {count} pods of {name}", check, 120.0))


def run(nodes: int, pods_per_node: int) -> dict[str, Any]:
    from benchmarks.realcluster import started

    with started(controllers=True) as kube:
        return _run(kube, nodes, pods_per_node)


def _run(kube: Any, nodes: int, pods_per_node: int) -> dict[str, Any]:
    from moto import mock_aws

    from sandbox.aws import MOCK_CONFIG, Clients
    from sandbox.nodeflow import LocalNodeflow
    from sandbox.stepfunctions import quiet_engine_logs, wait_for_execution
    from tests.fixtures.aws_events import SPOT, variant
    from tests.functional.lifecycle.conftest import demo_node_pools
    from tests.realk8s.workloads import replica_set, running

    evictions: list[float] = []
    lock = threading.Lock()

    def hook(method: str, path: str, query: dict[str, str]) -> None:
        if method == "POST" and path.endswith("/eviction"):
            with lock:
                evictions.append(time.time())

    rows: list[dict[str, Any]] = []
    quiet = {"POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "ERROR"}
    with mock_aws(config=MOCK_CONFIG), quiet_engine_logs():
        local = LocalNodeflow(Clients.fake(), kube, env=quiet, wait_scale=0.01).start()
        try:
            local.apply(demo_node_pools())
            # a node per Deployment, about: pods that fill a 2-vCPU node (kube-scheduler may put some on a node the
            # plan chose larger, and provisioning is only for those it found no node for)
            for i in range(nodes):
                local.apply([replica_set(f"svc{i}", pods_per_node, cpu="250m", memory="256Mi")])
                pending = _settled(kube, f"svc{i}", pods_per_node)
                if pending:
                    local.send_pending(pending)
                    local.provision()
                    local.wait_for_executions(timeout=60)
                running(kube, f"svc{i}", pods_per_node, timeout=60)  # kube-scheduler bound them
            claims = [c for c in kube.objects("karpenter.sh/v1", "NodeClaim") if c.get("status", {}).get("nodeName")]
            local.start_interruption_source()
            kube.before_request = hook
            for claim in claims:
                with lock:
                    evictions.clear()
                event = variant(SPOT, instance_id=_instance_id(claim), detail={"instance-action": "terminate"})
                t0 = time.time()
                local.send_aws_event(event)
                arn = f"{local.terminate_arn.replace(':stateMachine:', ':execution:', 1)}:{claim['metadata']['name']}"
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    try:
                        done = wait_for_execution(local.clients.sfn, arn, timeout=60)
                        break
                    except Exception:
                        time.sleep(0.05)
                ended = time.time()
                trace = local.trace(arn)
                with lock:
                    first = min(evictions) if evictions else float("nan")
                rows.append(
                    {
                        "status": done["status"],
                        "to_eviction": first - t0,
                        "to_end": ended - t0,
                        "transitions": trace.transitions,
                        "invocations": trace.task_invocations,
                        "evictions": len(evictions),
                    }
                )
            kube.before_request = None
        finally:
            local.stop()
    return {"rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--pods-per-node", type=int, default=6)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    args = parser.parse_args(argv)
    rows = run(args.nodes, args.pods_per_node)["rows"]
    print(f"Spot interruption → drain → terminate, local setup ({len(rows)} nodes, waits scaled by 0.01)\n")
    print("| node | status | event → first eviction (s) | event → terminated (s) | transitions | invocations |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for i, r in enumerate(rows, 1):
        print(
            f"| {i} | {r['status']} | {r['to_eviction']:.3f} | {r['to_end']:.3f} | {r['transitions']} "
            f"| {r['invocations']} |"
        )
    if rows:
        print(
            f"\nmedian event → first eviction {statistics.median(r['to_eviction'] for r in rows):.3f} s; "
            f"transitions / invocations per terminated node: "
            f"{statistics.mean(r['transitions'] for r in rows):.1f} / "
            f"{statistics.mean(r['invocations'] for r in rows):.1f}"
        )
    if args.json and rows:
        case = f"{len(rows)} nodes"
        print(
            json.dumps(
                [
                    {
                        "case": case,
                        "metric": "median event -> first eviction",
                        "value": statistics.median(r["to_eviction"] for r in rows),
                    },
                    {"case": case, "metric": "max event -> terminated", "value": max(r["to_end"] for r in rows)},
                ]
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
