"""Snapshot speed: ``take_snapshot`` against a real kube-apiserver holding 5,000 pods on 500 nodes.

    .venv/bin/python -m benchmarks.snapshot [--pods 5000] [--nodes 500] [--pending 200] [--workers 1]

A control plane of its own (``benchmarks.realcluster``: etcd and kube-apiserver, no controllers, so the seeded
pods stay as seeded) is seeded through the API (each pod created, then its status written: admission, defaulting
and validation run, so seeding takes about a minute at the default size where tests/kubeapi's in-memory store
took seconds). Then ``take_snapshot`` runs with the official client straight against kube-apiserver (best of
``--repeat``), and once more through the facade's proxy, which counts the requests it relays (LIST calls).
The pods are what a real server serves (managedFields, defaulted fields): bigger than the imitation's, so the
figure is not comparable with the ones measured before on tests/kubeapi.
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


def _status(bound: bool) -> dict[str, Any]:
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
    return status


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


def objects(pods: int, nodes: int, pending: int) -> list[dict[str, Any]]:
    """The namespaces, nodes and pods to seed (a pod's status as its scheduler and kubelet would write it)."""
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{ns}"}} for ns in range(10)
    ]
    node_names = []
    for i in range(nodes):
        body = {"apiVersion": "v1", "kind": "Node", **_node(i)}
        out.append(body)
        node_names.append(body["metadata"]["name"])
    for i in range(pods + pending):
        is_bound = i < pods
        body = _pod(i, node_names[i % nodes] if is_bound else None)
        body["status"] = _status(is_bound)
        out.append(body)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pending", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    args = parser.parse_args(argv)

    from benchmarks.realcluster import seed, started
    from sandbox.controlplane import ADMIN

    with started() as server:
        seeded = seed(server, objects(args.pods, args.nodes, args.pending))
        print(f"seeded {args.pods} bound + {args.pending} pending pods on {args.nodes} nodes in {seeded:.1f} s")
        client = server.plane.api_client(ADMIN)  # straight to kube-apiserver
        timings = []
        snap = None
        for _ in range(args.repeat):
            t = time.perf_counter()
            snap = take_snapshot(client, workers=args.workers)
            timings.append(time.perf_counter() - t)
        server.requests.clear()
        take_snapshot(server.api_client(), workers=args.workers)  # through the proxy, which counts
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


if __name__ == "__main__":
    raise SystemExit(main())
