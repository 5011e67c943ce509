"""What the decision log costs a provisioner run: 20,000 pending pods, the log on and off, in the same run.

    .venv/bin/python -m benchmarks.decision_log [--pods 20000] [--repeat 3] [--quick] [--json] [--profile FILE]

Karpenter's benchmark mix (``benchmarks.plan_scale.karpenter_mix``: Deployments of 10-50 replicas, one fifth each
plain, zone spread, hostname spread, zone self-affinity, hostname self anti-affinity) as pending pods, on Karpenter's
default NodePool shape (c/m/r, generation > 2, spot and on-demand; ``provisioning_scale.node_class``'s EC2NodeClass).
The provisioner handler's own dependencies (``nodeflow.handlers.provisioner.deps``: its Runtime, its decision-log
writer and DynamoDB client, Step Functions' StartExecution) run ``nodeflow.lifecycle.provisioner.provision``
against a moto server in a CHILD process (DynamoDB and Step Functions over HTTP on 127.0.0.1, as AWS would be
over the network; its CPU is not this process's). The Kubernetes API is answered in memory (the LIST bodies a
server would send, creates echoed): the seeding of 20,000 pods into a real kube-apiserver takes minutes, and an
in-memory API makes the run shorter than on a cluster, so the share below is an upper bound of the real one.

Each repetition runs the handler twice, log off then on (a new batch: new NodeClaim and execution names), and
times ``provision()`` (wall and this process's CPU) and, with the log on, the writer's call (``DecisionLog.write``:
building the records' items, serialising and sending them). Best of ``--repeat`` for each. Reported: both run
times, the share (``(on - off) / off``, wall and CPU: what the log adds to a run), the log's own time, and what it
sent: BatchWriteItem requests, items, the bytes of the requests and the item bytes and write units DynamoDB counts.

moto's DynamoDB is not AWS (and its server closes every connection: a TCP connect per request), and this run's
Kubernetes API and Step Functions answer at once. So the writer is also timed on the run's records with no transport
at all (DynamoDB answering at once through botocore's ``before-send``), and ``model`` puts both times on AWS,
independent of this machine's load: the log as its BatchWriteItem calls at DynamoDB's documented latency
(single-digit milliseconds; ``--aws-latency-ms``, default 10 ms a call) with the writer's 8 requests in flight plus
the writer's CPU without transport; the run without the log as its CPU here plus a NodeClaim create and a
StartExecution per NodeClaim (``--aws-call-ms``, default 30 ms for both, the low end of what they take), 8 in flight.
The documented limits bound the requests: 25 items and 16 MB a BatchWriteItem, 400 KB an item.

Target (issue 31): the log costs at most 10 % of a 20,000-pod run's time. Measure on one core:
``taskset -c 1 .venv/bin/python -m benchmarks.decision_log``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (str(ROOT / "functions"), str(ROOT)):
    if extra not in sys.path:
        sys.path.insert(0, extra)

from benchmarks.plan_scale import karpenter_mix  # noqa: E402
from benchmarks.provisioning_scale import node_class  # noqa: E402

REGION = "us-east-1"
TABLE = "bench-decisions"
STATE_TABLE = "bench-state"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TARGET = 0.10  # issue 31: the log at most 10 % of the run
# DynamoDB's documented limits (BatchWriteItem: 25 requests, 16 MB; an item: 400 KB).
BATCH_ITEMS = 25
BATCH_BYTES = 16 * 1024 * 1024
ITEM_BYTES = 400 * 1024
WCU_BYTES = 1024  # one write capacity unit: an item of up to 1 KB


# --- the cluster, served from memory ------------------------------------------------------------------


def node_pool() -> dict[str, Any]:
    """Karpenter's default NodePool shape: c/m/r, generation > 2, spot and on-demand."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default", "uid": "nodepool-default", "generation": 1},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h",
                }
            },
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"},
        },
    }


def pending_pods(count: int) -> list[dict[str, Any]]:
    """The mix's pods as the API server lists them after kube-scheduler gave up on them."""
    out = karpenter_mix(count, as_pods=True)
    for n, body in enumerate(out):
        meta = body["metadata"]
        meta.update(uid=f"pod-{n}", resourceVersion=str(n + 1), creationTimestamp="2026-03-01T11:59:00Z")
        body["status"] = {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/0 nodes"}
            ],
        }
    return out


def list_bodies(pods: int) -> dict[str, bytes]:
    """Kind -> the LIST body of the cluster: the NodePool, its EC2NodeClass, the pending pods."""
    nc = node_class()
    nc["metadata"]["uid"] = "nodeclass-default"
    by_kind = {"Pod": pending_pods(pods), "NodePool": [node_pool()], "EC2NodeClass": [nc]}
    return {
        kind: json.dumps({"kind": f"{kind}List", "metadata": {"resourceVersion": "1"}, "items": items}).encode()
        for kind, items in by_kind.items()
    }


def memory_kube(bodies: Mapping[str, bytes]) -> Any:
    """A ``KubeClient`` that answers from memory: LISTs from ``bodies``, creates echoed, patches and GETs empty."""
    from nodeflow.kube.client import KubeClient

    class MemoryKube(KubeClient):
        def __init__(self) -> None:
            self.requests = 0
            self._lock = threading.Lock()
            # what the handler's Runtime reads of a connection (the nodes' endpoint and CA)
            config = SimpleNamespace(host="https://bench", ssl_ca_cert=None)
            self.api_client: Any = SimpleNamespace(configuration=config)

        def list_raw(self, resource: Any, **_kwargs: Any) -> bytes:
            return bodies.get(resource.kind, b'{"metadata": {}, "items": []}')

        def _send(
            self, method: str, path: str, query: Sequence[tuple[str, Any]], body: Any, content_type: str | None
        ) -> tuple[int, bytes]:
            with self._lock:
                self.requests += 1
            if method == "POST" and isinstance(body, dict):
                created = dict(body)
                created["metadata"] = {**body.get("metadata", {}), "uid": f"u{self.requests}", "resourceVersion": "1"}
                return 201, json.dumps(created).encode()
            return 200, b"{}"

    return MemoryKube()


# --- the moto server (a child process) ----------------------------------------------------------------


def serve(conn: Any) -> None:
    """The child: a moto server; answers its URL, then waits for "stop"."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    conn.send(f"http://{host}:{port}")
    conn.recv()
    server.stop()


# --- one provisioner run ----------------------------------------------------------------------------


class Counter:
    """BatchWriteItem requests and their bytes, counted by botocore's ``before-send`` hook."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.body_bytes = 0

    def __call__(self, request: Any, **_kwargs: Any) -> None:
        with self.lock:
            self.requests += 1
            self.body_bytes += len(request.body or b"")


def _runtime(decisions: str | None, arn: str, kube: Any, catalog: Any) -> Any:
    from nodeflow.handlers.runtime import Runtime, Settings

    settings = Settings(
        cluster_name="bench",
        region=REGION,
        table_name=STATE_TABLE,
        launch_state_machine_arn=arn,
        catalog_source="offline",
        decision_table_name=decisions,
    )
    rt = Runtime(settings, clock=lambda: NOW)
    rt._kube = kube
    rt._catalog = catalog
    return rt


def run_once(rt: Any, batch: str, counter: Counter, profile: cProfile.Profile | None = None) -> dict[str, Any]:
    """The provisioner handler's deps on ``rt``, ``provision`` timed; the writer's call timed apart."""
    import dataclasses

    from nodeflow.handlers import provisioner as handler
    from nodeflow.handlers import runtime as rt_module
    from nodeflow.lifecycle.provisioner import provision

    rt_module.reset(rt)
    deps = handler.deps(None)
    deps = dataclasses.replace(deps, resolver=None, reservations=None, karpenter=None)  # nothing to resolve here
    log: dict[str, Any] = {}
    writer: Any = deps.decisions  # the handler's DecisionLog (None: the log off)
    if writer is not None:
        writer.dynamodb.meta.events.register("before-send.dynamodb.BatchWriteItem", counter)
        if profile is not None:  # one thread: cProfile sees only the thread it runs on
            writer.workers = 1

        def decisions(records: Sequence[Any]) -> Any:
            log["records"] = list(records)
            cpu, wall = time.process_time(), time.perf_counter()
            if profile is not None:
                profile.enable()
            try:
                return writer(records)
            finally:
                if profile is not None:
                    profile.disable()
                log["wall"], log["cpu"] = time.perf_counter() - wall, time.process_time() - cpu

        deps = dataclasses.replace(deps, decisions=decisions)
    counter.requests = counter.body_bytes = 0
    cpu, wall = time.process_time(), time.perf_counter()
    result = provision(deps, batch)
    out = {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "nodeClaims": len(result.created),
        "started": len(result.started),
        "unschedulable": result.unschedulable,
    }
    if writer is not None:
        out["_records"] = log.get("records", [])
        out.update(
            logWall=log.get("wall", 0.0),
            logCpu=log.get("cpu", 0.0),
            written=writer.written,
            failed=writer.failed + writer.late,
            requests=counter.requests,
            requestBytes=counter.body_bytes,
            records=len(log.get("records", ())),
            **item_figures(log.get("records", ())),
        )
    return out


class _Answered:
    """The raw body of a BatchWriteItem answer that wrote everything (botocore reads it as a stream)."""

    def stream(self, **_kwargs: Any) -> Any:
        yield b'{"UnprocessedItems":{}}'


def without_transport(records: Sequence[Any], repeat: int) -> float:
    """CPU seconds of the handler's writer on ``records`` when DynamoDB answers at once and no byte is sent (its
    client's ``before-send`` answers): rendering, botocore's serialising and signing, the threads; best of ``repeat``.
    What the log costs the Lambda apart from the network, and apart from moto's server (which closes every
    connection, so each request there also pays a TCP connect)."""
    from botocore.awsrequest import AWSResponse

    from nodeflow.governance.decisions import item_count
    from nodeflow.handlers.runtime import Runtime, Settings

    def answer(**_kwargs: Any) -> AWSResponse:
        headers = {"content-type": "application/x-amz-json-1.0"}
        return AWSResponse("https://dynamodb", 200, headers, _Answered())

    best = math.inf
    for _ in range(repeat):  # a runtime each time: it remembers the records its writers wrote, and skips them
        rt = Runtime(Settings(cluster_name="bench", region=REGION, decision_table_name=TABLE))
        writer = rt.decision_log(lambda _m, _e: None)
        assert writer is not None
        writer.dynamodb.meta.events.register("before-send.dynamodb.BatchWriteItem", answer)
        cpu = time.process_time()
        writer.write(records)
        best = min(best, time.process_time() - cpu)
        assert writer.written == item_count(records), writer.written
    return best


def item_figures(records: Sequence[Any]) -> dict[str, int]:
    """The items the records make, their bytes and write units as DynamoDB counts them (after the run, untimed)."""
    from nodeflow.governance.decisions import item_size, write_items

    sizes = [item_size(i) for i in write_items(records)]
    return {
        "items": len(sizes),
        "itemBytes": sum(sizes),
        "largestItem": max(sizes, default=0),
        "writeUnits": sum(math.ceil(s / WCU_BYTES) for s in sizes),
    }


def model(
    on: Mapping[str, Any], off: Mapping[str, Any], claims: int, latency_ms: float, call_ms: float, workers: int
) -> dict[str, Any]:
    """Both times on AWS, load-independent. The log: its BatchWriteItem calls at ``latency_ms`` each, ``workers`` in
    flight, plus the writer's CPU without the transport (counted in full, though the pipeline overlaps them). The
    run without it: its CPU here plus, per NodeClaim, a create and a StartExecution answered in ``call_ms`` together,
    8 in flight (the provisioner's CLAIM_WORKERS)."""
    from nodeflow.lifecycle.provisioner import CLAIM_WORKERS

    calls = max(math.ceil(on["items"] / BATCH_ITEMS), math.ceil(on["itemBytes"] / BATCH_BYTES))
    network = math.ceil(calls / workers) * latency_ms / 1000
    seconds = network + on["cpuWithoutTransport"]
    run = off["cpu"] + math.ceil(claims / CLAIM_WORKERS) * call_ms / 1000
    return {
        "batchWriteCalls": calls,
        "latencyMs": latency_ms,
        "callMs": call_ms,
        "workers": workers,
        "networkSeconds": round(network, 3),
        "logSeconds": round(seconds, 3),
        "runSeconds": round(run, 3),
        "share": round(seconds / run, 4),
        "itemsOverLimit": int(on["largestItem"] > ITEM_BYTES),
    }


def measure(
    pods: int, repeat: int, profile_to: Path | None, latency_ms: float, call_ms: float = 30.0
) -> dict[str, Any]:
    import boto3

    from nodeflow.aws.decision_log import WORKERS
    from nodeflow.catalog.offline import load_offline
    from sandbox.aws import create_decision_table

    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=serve, args=(child,), daemon=True)
    proc.start()
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    try:
        url = parent.recv()
        os.environ["AWS_ENDPOINT_URL"] = url  # every client the handler makes goes to the moto server
        sfn = boto3.client("stepfunctions", region_name=REGION)
        ddb = boto3.client("dynamodb", region_name=REGION)
        create_decision_table(lambda _service: ddb, STATE_TABLE)  # unavailable offerings: the same keys
        t0 = time.perf_counter()
        kube = memory_kube(list_bodies(pods))
        catalog = load_offline(REGION)
        print(f"{pods} pending pods built in {time.perf_counter() - t0:.1f} s; moto at {url}", flush=True)
        counter = Counter()
        profile = cProfile.Profile() if profile_to is not None else None
        runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
        for rep in range(repeat):
            for mode in ("off", "on"):
                # A state machine and a table per run: moto looks an execution's name up in a list of all the
                # machine's executions (each run would start slower than the one before, whichever mode it is).
                arn = sfn.create_state_machine(
                    name=f"launch-{rep}-{mode}",
                    definition='{"StartAt":"A","States":{"A":{"Type":"Pass","End":true}}}',
                    roleArn="arn:aws:iam::123456789012:role/sfn",
                )["stateMachineArn"]
                table = create_decision_table(lambda _service: ddb, f"{TABLE}-{rep}") if mode == "on" else None
                rt = _runtime(table, arn, kube, catalog)
                r = run_once(rt, f"bench{rep:02d}{mode}", counter, profile if mode == "on" else None)
                sfn.delete_state_machine(stateMachineArn=arn)
                if table is not None:
                    ddb.delete_table(TableName=table)
                runs[mode].append(r)
                extra = (
                    f"; log {r['logWall']:.2f} s wall / {r['logCpu']:.2f} s CPU, {r['requests']} BatchWriteItem, "
                    f"{r['written']} items written, {r['failed']} not"
                    if mode == "on"
                    else ""
                )
                print(
                    f"  run {rep + 1} log {mode:<3}: {r['wall']:.2f} s wall, {r['cpu']:.2f} s CPU; "
                    f"{r['nodeClaims']} NodeClaims, {r['started']} started{extra}",
                    flush=True,
                )
        if profile is not None and profile_to is not None:
            profile.dump_stats(str(profile_to))
    finally:
        if endpoint is None:
            os.environ.pop("AWS_ENDPOINT_URL", None)
        else:
            os.environ["AWS_ENDPOINT_URL"] = endpoint
        from nodeflow.handlers import runtime as rt_module

        rt_module.reset()  # the runtime it installed points at the stopped server
        parent.send("stop")
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()
    off = {k: min(r[k] for r in runs["off"]) for k in ("wall", "cpu")}
    on = {k: min(r[k] for r in runs["on"]) for k in ("wall", "cpu", "logWall", "logCpu")}
    last = runs["on"][-1]
    on.update({k: last[k] for k in ("requests", "requestBytes", "records", "items", "itemBytes", "largestItem")})
    on.update(writeUnits=last["writeUnits"], written=last["written"], failed=last["failed"])
    on["cpuWithoutTransport"] = without_transport(last["_records"], repeat)
    return {
        "pods": pods,
        "nodeClaims": last["nodeClaims"],
        "repeat": repeat,
        "off": {k: round(v, 3) for k, v in off.items()},
        "on": {k: round(v, 3) if isinstance(v, float) else v for k, v in on.items()},
        "share": round((on["wall"] - off["wall"]) / off["wall"], 4),
        "shareCpu": round((on["cpu"] - off["cpu"]) / off["cpu"], 4),
        "logShare": round(on["logWall"] / off["wall"], 4),
        "logCpuShare": round(on["logCpu"] / off["cpu"], 4),
        "cpuWithoutTransportShare": round(on["cpuWithoutTransport"] / off["cpu"], 4),
        "model": model(on, off, last["nodeClaims"], latency_ms, call_ms, WORKERS),
        "loadAverage": [round(x, 2) for x in os.getloadavg()],
    }


def report(out: Mapping[str, Any]) -> None:
    on, off, m = out["on"], out["off"], out["model"]
    print()
    print(
        f"{out['pods']} pending pods -> {out['nodeClaims']} NodeClaims, best of {out['repeat']} "
        f"(load average {', '.join(map(str, out['loadAverage']))}):"
    )
    print(f"  provision(), log off            {off['wall']:8.3f} s wall  {off['cpu']:8.3f} s CPU")
    print(f"  provision(), log on             {on['wall']:8.3f} s wall  {on['cpu']:8.3f} s CPU")
    print(f"  the log's write call            {on['logWall']:8.3f} s wall  {on['logCpu']:8.3f} s CPU")
    print(f"  share (on - off) / off          {out['share']:8.1%} wall  {out['shareCpu']:8.1%} CPU")
    print(f"  the log's call / run, log off   {out['logShare']:8.1%} wall  {out['logCpuShare']:8.1%} CPU")
    print(
        f"  the log's CPU without transport {on['cpuWithoutTransport']:8.3f} s      "
        f"{out['cpuWithoutTransportShare']:8.1%} of the run's CPU (DynamoDB answering at once, nothing sent)"
    )
    print(
        f"  sent: {on['records']} records as {on['items']} items ({on['written']} written, {on['failed']} not) in "
        f"{on['requests']} BatchWriteItem requests, {on['requestBytes'] / 1e6:.1f} MB of requests; items "
        f"{on['itemBytes'] / 1e6:.1f} MB as DynamoDB counts them (largest {on['largestItem'] / 1024:.1f} KB), "
        f"{on['writeUnits']} write units"
    )
    print(
        f"  on AWS (model): {m['batchWriteCalls']} BatchWriteItem at {m['latencyMs']:g} ms, {m['workers']} in flight "
        f"= {m['networkSeconds']:.2f} s + the writer's CPU without transport = {m['logSeconds']:.2f} s; the run "
        f"without the log: its CPU + {out['nodeClaims']} creates and starts at {m['callMs']:g} ms, 8 in flight = "
        f"{m['runSeconds']:.2f} s; share {m['share']:.1%}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3, help="best of N, log off and on in each (default 3)")
    parser.add_argument("--quick", action="store_true", help="2,000 pods, one repetition")
    parser.add_argument("--aws-latency-ms", type=float, default=10.0, help="a BatchWriteItem's latency on AWS")
    parser.add_argument(
        "--aws-call-ms", type=float, default=30.0, help="a NodeClaim create + StartExecution on AWS, together"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="cProfile the log's write calls into FILE (its requests sent one at a time)",
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    args = parser.parse_args(argv)
    if args.quick:
        args.pods, args.repeat = 2000, 1
    for key, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": "/nonexistent",
        "POWERTOOLS_METRICS_NAMESPACE": "bench",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        os.environ.setdefault(key, value)
    out = measure(args.pods, args.repeat, args.profile, args.aws_latency_ms, args.aws_call_ms)
    report(out)
    if args.json:
        case = f"{out['pods']} pods, {out['nodeClaims']} NodeClaims"
        rows = [
            {"case": case, "metric": "run, log off", "value": out["off"]["wall"]},
            {"case": case, "metric": "run, log on", "value": out["on"]["wall"]},
            {"case": case, "metric": "(on - off) / off, wall on moto", "value": out["share"]},
            {"case": case, "metric": "(on - off) / off, CPU", "value": out["shareCpu"]},
            {"case": case, "metric": "log CPU / run CPU", "value": out["logCpuShare"], "target": TARGET},
            {"case": case, "metric": "log share on AWS (model)", "value": out["model"]["share"], "target": TARGET},
            {"case": case, "metric": "log CPU without transport / run CPU", "value": out["cpuWithoutTransportShare"]},
            {"case": case, "metric": "BatchWriteItem requests", "value": out["on"]["requests"]},
            {"case": case, "metric": "request MB", "value": round(out["on"]["requestBytes"] / 1e6, 2)},
        ]
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
