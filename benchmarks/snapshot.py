"""Snapshot speed: ``take_snapshot`` against the test API server holding 5,000 pods on 500 nodes.

    .venv/bin/python -m benchmarks.snapshot [--pods 5000] [--nodes 500] [--pending 200] [--workers 1]

Seeds the in-process test server (tests/kubeapi) directly through its ``Cluster`` (no HTTP,
so seeding takes seconds), then times ``take_snapshot`` over real HTTP with the official
client (best of 3) and counts the LIST requests the server saw.
Targets (DESIGN budgets): <= 2 s and <= 15 LIST calls.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
for extra in (str(ROOT / "functions"), str(ROOT)):
    if extra not in sys.path:
        sys.path.insert(0, extra)

from nodeflow.kube.snapshot import take_snapshot  # noqa: E402

TARGET_SECONDS = 2.0
TARGET_LISTS = 15


def _pod(i: int, node: str | None) -> dict[str, Any]:
    app = f"app-{i % 100}"
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "public.ecr.aws/nginx/nginx:1.27",
                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "APP", "value": app}],
            }
        ],
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": app}},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-{i:05d}",
            "namespace": f"team-{i % 10}",
            "labels": {"app": app, "pod-template-hash": "5d8f7c9b6d"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-5d8f7c9b6d",
                    "uid": f"rs-{app}",
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


def _status(bound: bool) -> bytes:
    if bound:
        status = {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
            "podIP": "10.0.0.1",
        }
    else:
        status = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/500 nodes are available",
                }
            ],
        }
    return json.dumps({"status": status}).encode()


def _node(i: int) -> dict[str, Any]:
    name = f"ip-10-0-{i // 250}-{i % 250}.us-west-2.compute.internal"
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "karpenter.sh/nodepool": "default",
                "node.kubernetes.io/instance-type": "m7i.4xlarge",
                "topology.kubernetes.io/zone": f"us-west-2{'abc'[i % 3]}",
                "karpenter.sh/capacity-type": "on-demand",
            },
        },
        "spec": {"providerID": f"aws:///us-west-2a/i-{i:017d}"},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def seed(server: Any, pods: int, nodes: int, pending: int) -> None:
    cluster = server.cluster
    rt = {(r.group, r.plural): r for r in cluster.types()}
    for ns in range(10):
        cluster.create(rt[("", "namespaces")], None, {"metadata": {"name": f"team-{ns}"}})
    node_names = []
    for i in range(nodes):
        body = _node(i)
        cluster.create(rt[("", "nodes")], None, body)
        node_names.append(body["metadata"]["name"])
    bound, waiting = _status(True), _status(False)
    for i in range(pods + pending):
        is_bound = i < pods
        body = _pod(i, node_names[i % nodes] if is_bound else None)
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        cluster.create(rt[("", "pods")], ns, body)
        cluster.patch(
            rt[("", "pods")],
            ns,
            name,
            "application/merge-patch+json",
            bound if is_bound else waiting,
            subresource="status",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pending", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    args = parser.parse_args(argv)

    from tests.kubeapi import KubeAPIServer
    from tests.kubeapi.crds import karpenter_crds

    server = KubeAPIServer().start()
    try:
        for crd in karpenter_crds():
            server.register_crd(crd)
        t0 = time.perf_counter()
        seed(server, args.pods, args.nodes, args.pending)
        seeded = time.perf_counter() - t0
        print(f"seeded {args.pods} bound + {args.pending} pending pods on {args.nodes} nodes in {seeded:.1f} s")
        client = server.api_client()
        timings = []
        lists = 0
        snap = None
        for _ in range(args.repeat):
            server.requests.clear()
            t = time.perf_counter()
            snap = take_snapshot(client, workers=args.workers)
            timings.append(time.perf_counter() - t)
            lists = sum(1 for method, _, _ in server.requests if method == "GET")
        assert snap is not None
        best = min(timings)
        print(f"pods={len(snap.pods)} pending={len(snap.pending)} nodes={len(snap.nodes)} invalid={len(snap.invalid)}")
        print(f"take_snapshot: best of {args.repeat} = {best:.3f} s (all: {', '.join(f'{t:.3f}' for t in timings)})")
        print(f"LIST calls per snapshot: {lists}")
        ok = best <= TARGET_SECONDS and lists <= TARGET_LISTS
        print(f"targets (<= {TARGET_SECONDS} s, <= {TARGET_LISTS} LISTs): {'met' if ok else 'MISSED'}")
        if args.json:
            case = f"{args.pods} bound + {args.pending} pending pods, {args.nodes} nodes"
            print(
                json.dumps(
                    [
                        {"case": case, "metric": "take_snapshot", "value": best, "target": TARGET_SECONDS},
                        {"case": case, "metric": "LIST calls", "value": lists, "target": TARGET_LISTS},
                    ]
                )
            )
        return 0 if ok else 1
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
