"""Disruption: time to decide one round, and how close consolidation gets to a from-scratch plan.

Run: ``.venv/bin/python benchmarks/disruption.py [--nodes 500 --pods 5000 --rounds 40]``.

The cluster is FRAGMENTED on purpose: ``--nodes`` on-demand nodes of mixed sizes (m5.xlarge to
m5.4xlarge) in one NodePool, each filled to roughly a third of its CPU with ``--pods`` pods of
simple requests (no constraints), the way a cluster looks after a big scale-down.

1. Decision time: the best wall time of ``--repeat`` calls of ``nodeflow.disruption.round.decide``
   on that cluster (everything from the snapshot objects on: candidates, budgets, drift, the
   simulations), with the NodePool's default budget (10%). Target: at most 5 s for 500 nodes and
   5,000 pods. Also timed: a FULL cluster of as many nodes where nothing can be consolidated, so
   every candidate is examined (the slowest kind of round).
   ``--scale`` adds the issue 18 rows (default 5,000 nodes and 50,000 pods; target: at most 5 s on one
   core), fragmented and full, COLD (the first round on freshly parsed objects, as each Lambda round is)
   and warm (best of ``--repeat``), wall and CPU time (CPU time is what a busy machine distorts least), and
   the snapshot side: the same objects as the API's LIST JSON parsed into models the way ``take_snapshot``
   parses a page (``nodeflow.kube.snapshot``; HTTP excluded, see ``benchmarks.snapshot``).
   ``--scale-only`` prints those rows alone.
2. Cost quality: rounds are decided and APPLIED to the snapshot (candidates removed, pods bound where
   the command moves them, replacements added as nodes of their cheapest instance type) with a 100%
   budget, until no command is left or ``--rounds`` is reached; the cluster's $/hour is then divided
   by the planner's $/hour for the same pods from scratch (``nodeflow.plan.plan`` with every pod
   pending and no nodes). 1.0 means as good as re-planning everything. Beside it: the pods evicted (every
   move of every command) and the pods evicted per $/hour saved (what the saving cost in disruption), and
   the CPU time of one round's decision (the mean over the rounds).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "functions"))

from nodeflow.api.core import Node, Pod
from nodeflow.api.karpenter import EC2NodeClass, NodeClaim, NodePool
from nodeflow.api.quantity import format_milli
from nodeflow.catalog.instancetypes import resolve_instance_types
from nodeflow.catalog.model import CatalogData, InstanceType
from nodeflow.catalog.offline import load_offline
from nodeflow.cluster import ClusterState
from nodeflow.disruption.model import Command, Snapshot
from nodeflow.disruption.round import decide
from nodeflow.kube.snapshot import _LIST_MODELS
from nodeflow.plan import build_input, node_class_settings, plan

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
TYPES = ("m5.xlarge", "m5.2xlarge", "m5.4xlarge")
CPUS_M = (100, 250, 500, 1000)
MEM_MI = (256, 512, 1024, 2048)


def _pool(budget: str) -> NodePool:
    return NodePool.model_validate(
        {
            "metadata": {"name": "general"},
            "spec": {
                "template": {
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                        ],
                    }
                },
                "disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": budget}]},
            },
        }
    )


def _node_class() -> EC2NodeClass:
    return EC2NodeClass.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {
                "role": "R",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"id": "subnet-a"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}],
            },
        }
    )


def _node(name: str, it: str, zone: str, ct: str, alloc: dict[str, str], cap: dict[str, str]) -> tuple[Node, NodeClaim]:
    labels = {
        "karpenter.sh/nodepool": "general",
        "karpenter.sh/initialized": "true",
        "karpenter.sh/capacity-type": ct,
        "node.kubernetes.io/instance-type": it,
        "topology.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
    }
    created = "2026-11-20T08:00:00Z"
    node = Node.model_validate(
        {
            "metadata": {"name": name, "creationTimestamp": created, "labels": labels},
            "status": {"capacity": cap, "allocatable": alloc},
        }
    )
    claim = NodeClaim.model_validate(
        {
            "metadata": {
                "name": f"{name}-claim",
                "creationTimestamp": created,
                "labels": {"karpenter.sh/nodepool": "general"},
            },
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [it]}],
            },
            "status": {"nodeName": name},
        }
    )
    return node, claim


def _pod(name: str, on: str | None, cpu_m: int, mem_mi: int) -> Pod:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "x", "resources": {"requests": {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi"}}}
        ]
    }
    if on:
        spec["nodeName"] = on
    meta = {"name": name, "namespace": "default", "creationTimestamp": "2026-11-20T09:00:00Z", "labels": {"app": "a"}}
    return Pod.model_validate({"metadata": meta, "spec": spec, "status": {"phase": "Running" if on else "Pending"}})


_RESOLVED: dict[str, InstanceType] = {}


def _resources(catalog: CatalogData, it: str) -> tuple[dict[str, str], dict[str, str]]:
    """The node's allocatable and capacity as the catalog resolves the type for the EC2NodeClass
    (the same figures the planner uses, pods limit included)."""
    if not _RESOLVED:
        settings = node_class_settings(_node_class())
        _RESOLVED.update({t.name: t for t in resolve_instance_types(catalog, settings)})
    t = _RESOLVED[it]
    keys = ("cpu", "memory", "pods")
    alloc = {k: format_milli(t.allocatable[k], k) for k in keys}
    cap = {k: format_milli(t.capacity[k], k) for k in keys}
    return alloc, cap


def _milli_cpu(catalog: CatalogData, it: str) -> int:
    _resources(catalog, it)
    return _RESOLVED[it].allocatable["cpu"]


def fragmented(catalog: CatalogData, nodes: int, pods: int, budget: str, seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    node_objs: list[tuple[Node, NodeClaim]] = []
    room: list[int] = []
    for i in range(nodes):
        it = rng.choice(TYPES)
        alloc, cap = _resources(catalog, it)
        node_objs.append(_node(f"node-{i:04d}", it, rng.choice(("us-east-1a", "us-east-1b")), "on-demand", alloc, cap))
        room.append(_milli_cpu(catalog, it) // 3)
    pod_objs = []
    for j in range(pods):
        i = j % nodes
        cpu = min(rng.choice(CPUS_M), max(50, room[i]))
        room[i] -= cpu
        pod_objs.append(_pod(f"p-{j:05d}", node_objs[i][0].metadata.name, cpu, rng.choice(MEM_MI)))
    return Snapshot(
        ClusterState(
            node_pools=(_pool(budget),),
            node_classes=(_node_class(),),
            node_claims=tuple(c for _, c in node_objs),
            nodes=tuple(n for n, _ in node_objs),
            pods=tuple(pod_objs),
        )
    )


def full(catalog: CatalogData, nodes: int, pods_per_node: int = 10, seed: int = 7) -> Snapshot:
    """Every node full (CPU), on types the NodePool has nothing cheaper than: nothing to consolidate,
    so every candidate is examined (the slowest round)."""
    snap = fragmented(catalog, nodes, 0, "100%", seed)
    pods = []
    for i, n in enumerate(snap.state.nodes):
        it = (n.metadata.labels or {})["node.kubernetes.io/instance-type"]
        per = _milli_cpu(catalog, it) // pods_per_node
        pods += [_pod(f"p-{i:04d}-{j}", n.metadata.name, per, 512) for j in range(pods_per_node)]
    raw = snap.state.node_pools[0].model_dump(by_alias=True, exclude_none=True)
    only = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(TYPES)}
    raw["spec"]["template"]["spec"]["requirements"].append(only)
    state = snap.state
    return Snapshot(
        ClusterState(
            node_pools=(NodePool.model_validate(raw),),
            node_classes=state.node_classes,
            node_claims=state.node_claims,
            nodes=state.nodes,
            pods=tuple(pods),
        )
    )


def node_price(catalog: CatalogData, node: Node) -> float:
    labels = node.metadata.labels or {}
    return catalog.on_demand_prices[labels["node.kubernetes.io/instance-type"]]


def apply(snapshot: Snapshot, command: Command, catalog: CatalogData, serial: int) -> Snapshot:
    """``snapshot`` after ``command``: candidates gone, pods bound where they moved, replacements added."""
    state = snapshot.state
    gone = set(command.candidates)
    new_nodes = [(n, c) for n, c in zip(state.nodes, state.node_claims, strict=True) if n.metadata.name not in gone]
    target: dict[str, str] = {}
    for i, r in enumerate(command.replacements):
        name = f"repl-{serial:03d}-{i}"
        alloc, cap = _resources(catalog, r.instance_types[0])
        new_nodes.append(_node(name, r.instance_types[0], r.zones[0], r.capacity_type, alloc, cap))
        target[str(i)] = name
    where = {m.pod: (m.node if m.node is not None else target[str(m.replacement)]) for m in command.moves}
    pods = tuple(
        p.model_copy(update={"spec": p.spec.model_copy(update={"node_name": where[p.key]})}) if p.key in where else p
        for p in state.pods
        if p.key in where or p.spec.node_name not in gone
    )
    return Snapshot(
        ClusterState(
            node_pools=state.node_pools,
            node_classes=state.node_classes,
            node_claims=tuple(c for _, c in new_nodes),
            nodes=tuple(n for n, _ in new_nodes),
            pods=pods,
        )
    )


def _list_json(objs: Sequence[Any]) -> bytes:
    items = ",".join(o.model_dump_json(by_alias=True, exclude_none=True) for o in objs)
    return f'{{"apiVersion":"v1","kind":"List","metadata":{{}},"items":[{items}]}}'.encode()


def parse_snapshot(snap: Snapshot) -> tuple[Snapshot, float]:
    """``snap``'s nodes, NodeClaims and pods parsed again from LIST JSON (as ``take_snapshot`` parses each
    page, its garbage collector paused likewise): a fresh snapshot and the CPU seconds the parsing took."""
    state = snap.state
    pages = {
        kind: _list_json(objs)
        for kind, objs in ((Node, state.nodes), (NodeClaim, state.node_claims), (Pod, state.pods))
    }
    gc.collect()
    start = time.process_time()
    gc.disable()
    try:
        parsed = {kind: tuple(_LIST_MODELS[kind].model_validate_json(data).items or ()) for kind, data in pages.items()}
    finally:
        gc.enable()
    took = time.process_time() - start
    fresh = ClusterState(
        node_pools=state.node_pools,
        node_classes=state.node_classes,
        node_claims=parsed[NodeClaim],
        nodes=parsed[Node],
        pods=parsed[Pod],
    )
    return Snapshot(fresh), took


def _timed(snap: Snapshot, catalog: CatalogData) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = decide(snap, catalog, NOW)
    return time.perf_counter() - wall, time.process_time() - cpu, result


def scale_rows(catalog: CatalogData, nodes: int, pods: int, repeat: int) -> list[dict[str, Any]]:
    """The issue 18 rows: cold and warm decision times, fragmented and full, and the snapshot parsing."""
    print(
        f"| cluster ({nodes} nodes, {pods} pods) | parse snapshot CPU s | cold wall / CPU s "
        "| warm best wall / CPU s | command |"
    )
    print("|---|---|---|---|---|")
    figures: list[dict[str, Any]] = []
    for kind in ("fragmented", "full"):
        built = fragmented(catalog, nodes, pods, "10%") if kind == "fragmented" else full(catalog, nodes, pods // nodes)
        snap, parse_cpu = parse_snapshot(built)
        del built
        gc.collect()
        cold_wall, cold_cpu, result = _timed(snap, catalog)
        warm = [_timed(snap, catalog) for _ in range(repeat)]
        best_wall = min(w for w, _, _ in warm)
        best_cpu = min(c for _, c, _ in warm)
        command = result.command
        what = (
            f"{command.method}, {len(command.candidates)} node(s)"
            if command
            else f"none ({len(result.blocked)} blocked)"
        )
        print(
            f"| {kind} | {parse_cpu:.2f} | {cold_wall:.2f} / {cold_cpu:.2f} "
            f"| {best_wall:.2f} / {best_cpu:.2f} | {what} |",
            flush=True,
        )
        case = f"{kind}, {nodes} nodes, {pods} pods"
        for metric, value in (
            ("parse snapshot CPU", parse_cpu),
            ("cold round wall", cold_wall),
            ("cold round CPU", cold_cpu),
            ("warm round wall", best_wall),
            ("warm round CPU", best_cpu),
        ):
            figures.append({"case": case, "metric": metric, "value": value})
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=40, help="rounds applied for the cost figure")
    parser.add_argument("--scale", action="store_true", help="also the issue 18 rows (--scale-nodes / --scale-pods)")
    parser.add_argument("--scale-only", action="store_true", help="only the issue 18 rows")
    parser.add_argument("--scale-nodes", type=int, default=5000)
    parser.add_argument("--scale-pods", type=int, default=50000)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    args = parser.parse_args(argv)
    catalog = load_offline("us-east-1")
    if args.scale or args.scale_only:
        figures = scale_rows(catalog, args.scale_nodes, args.scale_pods, args.repeat)
        if args.scale_only:
            if args.json:
                print(json.dumps(figures))
            return 0

    snap = fragmented(catalog, args.nodes, args.pods, "10%")
    best = float("inf")
    result = None
    for _ in range(args.repeat):
        start = time.perf_counter()
        result = decide(snap, catalog, NOW)
        best = min(best, time.perf_counter() - start)
    assert result is not None
    command = result.command
    what = f"{command.method}: {len(command.candidates)} node(s), saves ${command.saved:.3f}/h" if command else "none"
    print(
        f"decide one round: {args.nodes} nodes, {args.pods} pods: {best:.2f} s (best of {args.repeat}); command: {what}"
    )

    snap = full(catalog, args.nodes, max(1, args.pods // args.nodes))
    start = time.perf_counter()
    idle = decide(snap, catalog, NOW)
    took = time.perf_counter() - start
    print(
        f"decide one round, full cluster (nothing to do, every candidate examined): {took:.2f} s; "
        f"command: {idle.command.method if idle.command else 'none'}; {len(idle.blocked)} Unconsolidatable"
    )

    snap = fragmented(catalog, args.nodes, args.pods, "100%")
    before = sum(node_price(catalog, n) for n in snap.state.nodes)
    rounds = evicted = 0
    deciding = 0.0
    start = time.perf_counter()
    while rounds < args.rounds:
        began = time.process_time()
        command = decide(snap, catalog, NOW).command
        deciding += time.process_time() - began
        if command is None:
            break
        evicted += len(command.moves)
        snap = apply(snap, command, catalog, rounds)
        rounds += 1
    elapsed = time.perf_counter() - start
    after = sum(node_price(catalog, n) for n in snap.state.nodes)
    pending = [p.model_copy(update={"spec": p.spec.model_copy(update={"node_name": None})}) for p in snap.state.pods]
    scratch_state = ClusterState(
        node_pools=snap.state.node_pools, node_classes=snap.state.node_classes, pods=tuple(pending)
    )
    scratch = plan(scratch_state, catalog)
    assert not scratch.unschedulable
    assert not build_input(scratch_state, catalog).nodes
    per_round = deciding / max(1, rounds)
    print(
        f"consolidation: {rounds} round(s) in {elapsed:.1f} s (decide: {per_round:.2f} CPU s a round); "
        f"nodes {args.nodes} -> {len(snap.state.nodes)}; "
        f"$/hour {before:.3f} -> {after:.3f}; from-scratch plan ${scratch.total_price:.3f}/h "
        f"({len(scratch.node_claims)} nodes); ratio after/scratch = {after / scratch.total_price:.3f}; "
        f"pods evicted {evicted}, {evicted / max(before - after, 1e-9):.1f} per $/hour saved"
    )
    if args.json:
        case = f"{args.nodes} nodes, {args.pods} pods, {rounds} rounds"
        print(
            json.dumps(
                [
                    {"case": case, "metric": "after / from scratch", "value": round(after / scratch.total_price, 4)},
                    {
                        "case": case,
                        "metric": "pods evicted per $/h saved",
                        "value": round(evicted / max(before - after, 1e-9), 2),
                    },
                    {"case": case, "metric": "decide CPU a round", "value": round(per_round, 3)},
                ]
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
