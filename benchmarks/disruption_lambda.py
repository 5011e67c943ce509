"""The whole disruption Lambda invocation at scale: ``nodeflow.lifecycle.disruption_round.run`` against a real
kube-apiserver holding the fragmented cluster of ``benchmarks.disruption`` (default 5,000 nodes and 50,000 pods, one
NodePool with a 10% budget).

    .venv/bin/python -m benchmarks.disruption_lambda [--nodes 5000] [--pods 50000] [--invocations 2] [--quick] [--json]

The cluster is a control plane of its own (``benchmarks.realcluster``: etcd and kube-apiserver, no controllers, so
nothing acts on the seeded objects), seeded before the first invocation: NodePools and EC2NodeClasses through the
API, Nodes, NodeClaims and pods written into etcd (``store_bypassing_admission``: their creationTimestamps, which
decide what may be consolidated, kept; minutes at the default size, where tests/kubeapi's store took seconds); its
processes are separate, so this process's CPU time is the Lambda's alone, and "server CPU" is kube-apiserver's and
etcd's (``--server-cpu`` pins them). Each invocation runs for real: ``take_snapshot`` over HTTPS with the official
client, straight to kube-apiserver, the round (``prepare`` + ``decide``), the NodeClaim conditions
(``mark_conditions``: the first invocation writes every NodeClaim's, later ones only changes), the validation wait
(0 s here) and its second snapshot and round, then the command (candidates tainted; terminate / launch / replace
workflows counted, not started). Reported per invocation, wall and CPU seconds of this process: the snapshots (LIST
+ parse, both), the rounds (both), the conditions, and the total. Target (issue 18): one round for 5,000 nodes and
50,000 pods in at most 5 s on one core.
"""

from __future__ import annotations

import argparse
import gc
import json
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


def objects(nodes: int, pods: int) -> list[dict[str, Any]]:
    """The fragmented cluster's EC2NodeClasses, NodePools, Nodes, NodeClaims and pods, as the API takes them."""
    from nodeflow.catalog.offline import load_offline

    state = fragmented(load_offline(REGION), nodes, pods, "10%").state
    out = [_dump(nc, "karpenter.k8s.aws/v1", "EC2NodeClass") for nc in state.node_classes]
    out += [_dump(pool, "karpenter.sh/v1", "NodePool") for pool in state.node_pools]
    out += [_dump(node, "v1", "Node") for node in state.nodes]
    out += [_dump(claim, "karpenter.sh/v1", "NodeClaim") for claim in state.node_claims]
    for pod in state.pods:
        body = _dump(pod, "v1", "Pod")
        for container in body["spec"]["containers"]:
            container.setdefault("image", "public.ecr.aws/nginx/nginx:1.27")  # not in the scheduling model
        if not body["spec"].get("overhead"):  # set by admission from a RuntimeClass only; refused otherwise
            body["spec"].pop("overhead", None)
        out.append(body)
    return out


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
    from benchmarks.realcluster import pin, seed, server_cpu, started
    from nodeflow.catalog.offline import load_offline
    from nodeflow.kube.events import EventRecorder
    from nodeflow.lifecycle import disruption_round as lifecycle
    from sandbox.controlplane import ADMIN

    with started() as server:
        plane = server.plane
        if args.server_cpu is not None:
            pin(plane, args.server_cpu)
        # ages decide what may be consolidated: Nodes, NodeClaims and pods keep their creationTimestamps
        seeded = seed(server, objects(args.nodes, args.pods), stored=("Node", "NodeClaim", "Pod"))
        gc.collect()
        print(f"seeded {args.nodes} nodes, {args.pods} pods in {seeded:.1f} s", flush=True)
        kube = plane.kube(ADMIN)  # straight to kube-apiserver
        catalog = load_offline(REGION)
        started_terminations: list[str] = []

        def terminate(name: str, _reason: str) -> bool:
            started_terminations.append(name)
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
            server0 = server_cpu(plane)
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                out = lifecycle.run(deps)
            finally:
                total_wall, total_cpu = time.perf_counter() - wall, time.process_time() - cpu
                for attr, real in originals.items():
                    setattr(lifecycle, attr, real)
            server_seconds = server_cpu(plane) - server0
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
                f"| {total_wall:.2f} / {total_cpu:.2f} | {server_seconds:.2f} | {what} |",
                flush=True,
            )
            case = f"invocation {i + 1}, {args.nodes} nodes, {args.pods} pods"
            for metric, value in (
                ("snapshots wall", phases.wall.get("snapshot", 0.0)),
                ("rounds wall", phases.wall.get("round", 0.0)),
                ("conditions wall", phases.wall.get("conditions", 0.0)),
                ("total wall", total_wall),
                ("total CPU", total_cpu),
                ("server CPU", server_seconds),  # the API server's CPU the invocation waited on (benchmarks.cost)
            ):
                rows.append({"case": case, "metric": metric, "value": round(value, 3)})
        kube.api_client.close()  # type: ignore[no-untyped-call]
        return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--invocations", type=int, default=2, help="invocations in a row on the same server")
    parser.add_argument("--server-cpu", type=int, default=None, help="pin etcd and kube-apiserver to this CPU")
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
