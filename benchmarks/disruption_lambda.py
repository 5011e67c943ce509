"""The whole disruption Lambda invocation at scale: ``nodeflow.lifecycle.disruption_round.run`` against the test API
server holding the fragmented cluster of ``benchmarks.disruption`` (default 5,000 nodes and 50,000 pods, one NodePool
with a 10% budget).

    .venv/bin/python -m benchmarks.disruption_lambda [--nodes 5000] [--pods 50000] [--invocations 2] [--quick] [--json]

The server runs in a child process (seeded in-process, no HTTP; the pods without admission, to seed fast;
``--server-cpu`` pins it), so this
process's CPU time is the Lambda's alone. Each invocation runs for real: ``take_snapshot`` over HTTP with the official
client, the round (``prepare`` + ``decide``), the NodeClaim conditions (``mark_conditions``: the first invocation
writes every NodeClaim's, later ones only changes), the validation wait (0 s here) and its second snapshot and round,
then the command (candidates tainted; terminate / launch / replace workflows counted, not started). Reported per
invocation, wall and CPU seconds of this process: the snapshots (LIST + parse, both), the rounds (both), the
conditions, and the total. Target (issue 18): one round for 5,000 nodes and 50,000 pods in at most 5 s on one core.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (str(ROOT / "functions"), str(ROOT)):
    if extra not in sys.path:
        sys.path.insert(0, extra)

from benchmarks.disruption import NOW, fragmented  # noqa: E402

REGION = "us-east-1"


def _dump(obj: Any, api_version: str, kind: str) -> dict[str, Any]:
    body: dict[str, Any] = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"apiVersion": api_version, "kind": kind, **body}


def serve(conn: Any, args: dict[str, Any]) -> None:
    """The child: build the cluster, seed the test API server with it, answer "cpu" until "stop"."""
    if args.get("server_cpu") is not None:
        os.sched_setaffinity(0, {args["server_cpu"]})
    from nodeflow.catalog.offline import load_offline
    from tests.kubeapi import KubeAPIServer
    from tests.kubeapi.crds import karpenter_crds

    t0 = time.perf_counter()
    state = fragmented(load_offline(REGION), args["nodes"], args["pods"], "10%").state
    kube = KubeAPIServer(history_size=10).start()
    for crd in karpenter_crds():
        kube.register_crd(crd)
    for nc in state.node_classes:
        kube.create(_dump(nc, "karpenter.k8s.aws/v1", "EC2NodeClass"))
    for pool in state.node_pools:
        kube.create(_dump(pool, "karpenter.sh/v1", "NodePool"))
    for node in state.nodes:
        kube.create(_dump(node, "v1", "Node"))
    for claim in state.node_claims:
        kube.create(_dump(claim, "karpenter.sh/v1", "NodeClaim"))
    for pod in state.pods:
        body = _dump(pod, "v1", "Pod")
        for container in body["spec"]["containers"]:
            container.setdefault("image", "public.ecr.aws/nginx/nginx:1.27")  # not in the scheduling model
        kube.store_bypassing_admission(body)  # valid pods: admission skipped only to seed 50,000 in seconds
    del state
    gc.collect()
    conn.send({"kube": kube.url, "seeded": time.perf_counter() - t0})
    while True:
        command = conn.recv()
        if command == "stop":
            break
        if command == "cpu":
            conn.send(time.process_time())
    kube.stop()


def _recv(conn: Any, proc: Any) -> Any:
    """The server's answer; fails (instead of hanging) when the server process died."""
    while not conn.poll(0.5):
        if not proc.is_alive():
            raise RuntimeError(f"the server process exited with code {proc.exitcode}")
    return conn.recv()


class _Phases:
    """Wall and CPU seconds per phase, by wrapping the functions ``run`` calls (module attributes)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, module: Any, attr: str, phase: str) -> None:
        real: Callable[..., Any] = getattr(module, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return real(*args, **kwargs)
            finally:
                self.wall[phase] = self.wall.get(phase, 0.0) + time.perf_counter() - wall
                self.cpu[phase] = self.cpu.get(phase, 0.0) + time.process_time() - cpu
                self.calls[phase] = self.calls.get(phase, 0) + 1

        setattr(module, attr, timed)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import kubernetes.client

    from nodeflow.catalog.offline import load_offline
    from nodeflow.kube.client import KubeClient
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle import disruption_round as lifecycle

    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    options = {"nodes": args.nodes, "pods": args.pods, "server_cpu": args.server_cpu}
    proc = ctx.Process(target=serve, args=(child, options), daemon=True)
    proc.start()
    try:
        info = _recv(parent, proc)
        print(f"seeded {args.nodes} nodes, {args.pods} pods in {info['seeded']:.1f} s (server process)", flush=True)
        config = kubernetes.client.Configuration(host=info["kube"])
        config.api_key = {"BearerToken": "admin"}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        kube = KubeClient(kubernetes.client.ApiClient(config))
        catalog = load_offline(REGION)
        started: list[str] = []

        def terminate(name: str, _reason: str) -> bool:
            started.append(name)
            return True

        deps = lifecycle.DisruptionDeps(
            kube=kube,
            catalog=catalog,
            unavailable=lambda _now: frozenset(),
            start_terminate=terminate,
            recorder=EventRecorder(kube),
            now=lambda: NOW,
            sleep=lambda _s: None,
            validation_seconds=0.0,
        )
        print(
            "| invocation | snapshots (LIST + parse) wall / CPU s | rounds wall / CPU s | conditions wall / CPU s "
            "| total wall / CPU s | server CPU s | command |"
        )
        print("|---|---|---|---|---|---|---|")
        rows: list[dict[str, Any]] = []
        for i in range(args.invocations):
            phases = _Phases()
            originals = {a: getattr(lifecycle, a) for a in ("take_snapshot", "decide", "prepare", "mark_conditions")}
            phases.wrap(lifecycle, "take_snapshot", "snapshot")
            phases.wrap(lifecycle, "prepare", "round")
            phases.wrap(lifecycle, "decide", "round")
            phases.wrap(lifecycle, "mark_conditions", "conditions")
            parent.send("cpu")
            server0 = _recv(parent, proc)
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                out = lifecycle.run(deps)
            finally:
                total_wall, total_cpu = time.perf_counter() - wall, time.process_time() - cpu
                for attr, real in originals.items():
                    setattr(lifecycle, attr, real)
            parent.send("cpu")
            server_cpu = _recv(parent, proc) - server0
            command = out.command
            what = (
                f"{command['method']}, {len(command['candidates'])} node(s)"
                + (f", skipped: {out.skipped}" if out.skipped else "")
                if command
                else "none"
            )

            def cell(phase: str, ph: _Phases = phases) -> str:
                n = ph.calls.get(phase, 0)
                return f"{ph.wall.get(phase, 0.0):.2f} / {ph.cpu.get(phase, 0.0):.2f} ({n} call(s))"

            print(
                f"| {i + 1} | {cell('snapshot')} | {cell('round')} | {cell('conditions')} "
                f"| {total_wall:.2f} / {total_cpu:.2f} | {server_cpu:.2f} | {what} |",
                flush=True,
            )
            case = f"invocation {i + 1}, {args.nodes} nodes, {args.pods} pods"
            for metric, value in (
                ("snapshots wall", phases.wall.get("snapshot", 0.0)),
                ("rounds wall", phases.wall.get("round", 0.0)),
                ("conditions wall", phases.wall.get("conditions", 0.0)),
                ("total wall", total_wall),
                ("total CPU", total_cpu),
                ("server CPU", server_cpu),  # the API server's CPU the invocation waited on (benchmarks.cost)
            ):
                rows.append({"case": case, "metric": metric, "value": round(value, 3)})
        parent.send("stop")
        return rows
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--invocations", type=int, default=2, help="invocations in a row on the same server")
    parser.add_argument("--server-cpu", type=int, default=None, help="pin the server process to this CPU")
    parser.add_argument("--quick", action="store_true", help="500 nodes, 5,000 pods")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line (benchmarks.all)")
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.pods = 500, 5000
    rows = run(args)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
