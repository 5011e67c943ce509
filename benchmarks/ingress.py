"""Ingress latency benchmark, in the local setup: the agent as a subprocess watching a real
kube-apiserver (``benchmarks.realcluster``, controllers running; the agent goes through the facade's
proxy, as in the end-to-end tests), the webhook behind a Function URL on 127.0.0.1 (SigV4 verified),
moto EventBridge routing to the provisioning queue, an SQS event-source mapping with the deployed
batching (``nodeflow.ingress.routing``), and the provisioner (in-process, through the Lambda API).

    .venv/bin/python -m benchmarks.ingress [--trials 10] [--burst 200]

1. Single pod, idle cluster (--trials times, 2 s apart): from the status patch that makes a pod
   unschedulable to (a) its event on the provisioning queue (agent + webhook + bus) and (b) the
   provisioner's invocation with it (plus the batching window).
2. Burst: --burst pods turned unschedulable as fast as the API server takes it; time until the
   last one reached the provisioner, and how many provisioner batches it took.

The pods are held (``tests.realk8s.workloads.held``: no owner, a scheduler name no scheduler has), so the
benchmark alone decides when each turns unschedulable: a merge patch of its status, as the admin, straight to
kube-apiserver. Measured on tests/kubeapi's in-process server before (docs/benchmarks/index.md).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
for extra in (str(ROOT / "functions"), str(ROOT)):
    if extra not in sys.path:
        sys.path.insert(0, extra)

UNSCHEDULABLE = {
    "status": {
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}
        ]
    }
}


def _pod(name: str) -> dict[str, Any]:
    from tests.realk8s.workloads import held_pods

    pod = held_pods(name, 1, cpu="250m", memory="256Mi")[0]
    pod["metadata"]["name"] = name
    pod["status"] = {"phase": "Pending"}
    return pod


def _carries(name: str) -> Any:
    from sandbox.esm import unschedulable_pods

    return lambda batches: name in unschedulable_pods(batches)


def _stats(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]
    return f"{statistics.median(values):.3f} / {p90:.3f} / {values[-1]:.3f}"


def run(trials: int, burst: int) -> dict[str, Any]:
    from benchmarks.realcluster import started

    with started(controllers=True) as kube:
        return _run(kube, trials, burst)


def _unschedulable(kube: Any, name: str) -> None:
    kube.patch("v1", "Pod", name, UNSCHEDULABLE, "default", subresource="status")


def _run(kube: Any, trials: int, burst: int) -> dict[str, Any]:
    from moto import mock_aws

    from nodeflow.ingress.routing import PROVISIONING_BATCH_WINDOW_SECONDS
    from sandbox.agent import AgentProcess
    from sandbox.aws import MOCK_CONFIG, Clients
    from sandbox.esm import unschedulable_pods
    from sandbox.nodeflow import LocalNodeflow
    from tests.functional.lifecycle.conftest import demo_node_pools

    with mock_aws(config=MOCK_CONFIG):
        quiet = {"POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "ERROR"}
        local = LocalNodeflow(Clients.fake(), kube, env=quiet).start()
        try:
            local.apply(demo_node_pools())
            local.start_webhook()
            source = local.start_event_source()
            with AgentProcess(local.agent_env()) as agent:
                agent.wait_ready()
                patched: dict[str, float] = {}
                for i in range(trials):
                    name = f"single-{i:03d}"
                    kube.create(_pod(name))
                    time.sleep(0.2)
                    patched[name] = time.time()
                    _unschedulable(kube, name)
                    source.wait_for(_carries(name), timeout=30)
                    time.sleep(2.0)
                arrivals = unschedulable_pods(source.snapshot())
                to_queue = [arrivals[n][0] - t for n, t in patched.items()]
                to_provisioner = [arrivals[n][1] - t for n, t in patched.items()]

                names = [f"burst-{i:04d}" for i in range(burst)]
                for n in names:
                    kube.create(_pod(n))
                time.sleep(0.5)
                start = time.time()
                for n in names:
                    _unschedulable(kube, n)
                patched_all = time.time() - start
                source.wait_for(lambda bs: set(names) <= set(unschedulable_pods(bs)), timeout=120)
                arrivals = unschedulable_pods(source.snapshot())
                last = max(arrivals[n][1] for n in names) - start
                burst_batches = len({arrivals[n][1] for n in names})
                metrics = agent.metrics()
        finally:
            local.stop()
    return {
        "window": PROVISIONING_BATCH_WINDOW_SECONDS,
        "to_queue": to_queue,
        "to_provisioner": to_provisioner,
        "burst": burst,
        "burst_patch_seconds": patched_all,
        "burst_last": last,
        "burst_batches": burst_batches,
        "agent_metrics": {k: v for k, v in metrics.items() if "sent" in k or "dropped" in k},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    args = parser.parse_args(argv)
    r = run(args.trials, args.burst)
    print(f"Ingress latency, local setup ({args.trials} single-pod trials; median / p90 / max seconds)\n")
    print("| measured | seconds |")
    print("| --- | --- |")
    print(f"| pod unschedulable → event on the provisioning queue (agent + webhook + bus) | {_stats(r['to_queue'])} |")
    print(
        f"| pod unschedulable → provisioner invoked (+ {r['window']} s batching window) "
        f"| {_stats(r['to_provisioner'])} |"
    )
    print(
        f"| burst of {r['burst']} pods: last one at the provisioner, from the first patch "
        f"(patching took {r['burst_patch_seconds']:.2f} s) | {r['burst_last']:.3f} in {r['burst_batches']} batches |"
    )
    print(f"\nagent counters: {r['agent_metrics']}")
    if args.json:
        median = statistics.median
        case = f"{args.trials} trials, burst {r['burst']}"
        print(
            json.dumps(
                [
                    {"case": case, "metric": "median pod -> queue", "value": median(r["to_queue"])},
                    {
                        "case": case,
                        "metric": "median pod -> provisioner",
                        "value": statistics.median(r["to_provisioner"]),
                    },
                    {"case": case, "metric": "burst: last pod at the provisioner", "value": r["burst_last"]},
                ]
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
