"""In-cluster agent benchmark: the real agent process against a real kube-apiserver with 10,000 pods,
forwarding to a counting webhook on 127.0.0.1 (HMAC mode, signatures checked).

    .venv/bin/python benchmarks/agent.py [--pods 10000] [--batch 100] [--page 500]

1. Initial list: the agent starts with N unschedulable pods in the cluster; time until all N PodUnschedulable
   events have been accepted by the webhook (from process start, and from the agent's own start log line).
2. Watch stream: all N pods are bound (``pods/binding``, 8 at a time, as fast as the API server commits them) while
   watched; time until all N PodBound events have arrived.
3. Memory: VmRSS and VmHWM of the agent process (from /proc/<pid>/status) after each phase.

The cluster is a control plane of its own (``benchmarks.realcluster``: etcd and kube-apiserver, no controllers, so
the pods stay pending with their made-up owner until bound), seeded through the API; the agent talks to
kube-apiserver directly over TLS with a bound token of its ServiceAccount (RBAC as installed). Both rates include
kube-apiserver and etcd (same machine: the 2 cores are shared with the agent and the webhook). Measured on
tests/kubeapi's in-process server before (docs/benchmarks/index.md): the figures are not comparable.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SECRET = "benchmark-secret"


class CountingWebhook(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.kinds: dict[str, int] = {}
        self.ids: set[str] = set()
        self.requests = 0
        self.bad = 0
        self.done = threading.Condition(self.lock)

    def count(self, kind: str) -> int:
        with self.lock:
            return self.kinds.get(kind, 0)

    def wait_for(self, kind: str, n: int, timeout: float) -> float:
        """Block until ``n`` events of ``kind`` arrived; returns the monotonic time it happened."""
        deadline = time.monotonic() + timeout
        with self.done:
            while self.kinds.get(kind, 0) < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.kinds.get(kind, 0)}/{n} {kind} events after {timeout}s")
                self.done.wait(remaining)
        return time.monotonic()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CountingWebhook

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        message = f"v1\n{self.headers['X-Nodeflow-Timestamp']}\n{self.headers['X-Nodeflow-Nonce']}\n"
        message += hashlib.sha256(body).hexdigest()
        expected = "v1=" + hmac.new(SECRET.encode(), message.encode(), hashlib.sha256).hexdigest()
        status = 202 if hmac.compare_digest(expected, self.headers.get("X-Nodeflow-Signature", "")) else 403
        if status == 202:
            events = json.loads(body)["events"]
            with self.server.done:
                self.server.requests += 1
                for event in events:
                    if event["id"] not in self.server.ids:
                        self.server.ids.add(event["id"])
                        self.server.kinds[event["kind"]] = self.server.kinds.get(event["kind"], 0) + 1
                self.server.done.notify_all()
        else:
            with self.server.lock:
                self.server.bad += 1
        data = b'{"accepted":0,"duplicates":0}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"bench-{i:05d}",
            "namespace": "default",
            "labels": {"app": f"app-{i % 50}", "pod-template-hash": "7d9c5b"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"app-{i % 50}-7d9c5b",
                    "uid": f"rs-{i % 50}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/app:1.2.3",
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}},
                }
            ],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}],
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient cpu.",
                }
            ],
        },
    }


def _memory(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])  # kB
    return out


def _bind(kube: Any, names: list[str]) -> None:
    """Bind every pod to node-1 (the API server does not check that the Node exists), 8 at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def bind(name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
        }
        kube.request("POST", f"/api/v1/namespaces/default/pods/{name}/binding", body=body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(bind, names))


def _run(args: argparse.Namespace, server: Any, seed_seconds: float) -> int:
    from benchmarks.realcluster import cpu_seconds

    n = args.pods
    webhook = CountingWebhook()
    threading.Thread(target=webhook.serve_forever, daemon=True).start()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="nodeflow-agent-bench-"))
    print(f"agent log: {tmp / 'agent.log'}", file=sys.stderr)
    (tmp / "secret").write_text(SECRET)
    (tmp / "token").write_text(server.service_account_token("nodeflow", "nodeflow-agent"))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT / "agent"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "WEBHOOK_URL": f"http://127.0.0.1:{webhook.server_address[1]}/",
        "CLUSTER_NAME": "bench",
        "AUTH_MODE": "hmac",
        "HMAC_SECRET_FILE": str(tmp / "secret"),
        "KUBE_API_URL": server.plane.url,
        "KUBE_CA_FILE": str(server.plane.ca_file),
        "KUBE_TOKEN_FILE": str(tmp / "token"),
        "HEALTH_PORT": "0",
        "HEALTH_BIND": "127.0.0.1",
        "BATCH_MAX_EVENTS": str(args.batch),
        "LIST_PAGE_SIZE": str(args.page),
        "LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "warning"),
    }
    log = (tmp / "agent.log").open("w")
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "nodeflow_agent"], env=env, stdout=log, stderr=subprocess.STDOUT)
    rows: list[tuple[str, str]] = []
    try:
        listed_at = webhook.wait_for("PodUnschedulable", n, args.timeout)
        list_seconds = listed_at - started
        mem_list = _memory(proc.pid)
        cpu_list = cpu_seconds(proc.pid)
        time.sleep(1.0)  # settle: the watches are open, the buffer is empty
        mem_idle = _memory(proc.pid)

        cpu_idle = cpu_seconds(proc.pid)
        bound_started = time.monotonic()
        _bind(server.kube, [f"bench-{i:05d}" for i in range(n)])
        commit_seconds = time.monotonic() - bound_started
        bound_at = webhook.wait_for("PodBound", n, args.timeout)
        stream_seconds = bound_at - bound_started
        mem_stream = _memory(proc.pid)
        cpu_stream = cpu_seconds(proc.pid) - cpu_idle

        proc.terminate()
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        webhook.shutdown()

    rows = [
        ("pods", f"{n:,}"),
        ("seeding the API server (create + status, 8 at a time)", f"{seed_seconds:.2f} s"),
        ("initial list: all PodUnschedulable accepted, from process start", f"{list_seconds:.2f} s"),
        ("initial list: events/s", f"{n / list_seconds:,.0f}"),
        ("initial list: agent CPU time (start-up included)", f"{cpu_list:.2f} s"),
        ("watch stream: binding commits (8 at a time)", f"{commit_seconds:.2f} s"),
        ("watch stream: all PodBound accepted, from the first bind", f"{stream_seconds:.2f} s"),
        ("watch stream: events/s", f"{n / stream_seconds:,.0f}"),
        ("watch stream: agent CPU time", f"{cpu_stream:.2f} s"),
        ("webhook requests (batch size)", f"{webhook.requests:,} ({args.batch})"),
        ("VmRSS after the initial list", f"{mem_list['VmRSS'] / 1024:.1f} MiB"),
        (f"VmRSS watching {n:,} pods (idle)", f"{mem_idle['VmRSS'] / 1024:.1f} MiB"),
        ("VmRSS after the watch stream", f"{mem_stream['VmRSS'] / 1024:.1f} MiB"),
        ("VmHWM (peak RSS)", f"{mem_stream['VmHWM'] / 1024:.1f} MiB"),
        ("exit status on SIGTERM", str(code)),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"| {'measure'.ljust(width)} | value |")
    print(f"| {'-' * width} | ----- |")
    for key, value in rows:
        print(f"| {key.ljust(width)} | {value} |")
    if args.json:
        case = f"{n} pods"
        figures = [("initial list", list_seconds), ("watch stream", stream_seconds), ("agent CPU, list", cpu_list)]
        print(json.dumps([{"case": case, "metric": m, "value": v} for m, v in figures]))
    if webhook.bad:
        print(f"\n{webhook.bad} requests failed the signature check", file=sys.stderr)
        return 1
    return 0 if code == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100, help="BATCH_MAX_EVENTS (agent default 100)")
    parser.add_argument("--page", type=int, default=500, help="LIST_PAGE_SIZE (agent default 500)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    args = parser.parse_args(argv)

    from benchmarks.realcluster import seed, started

    n = args.pods
    with started() as server:
        return _run(args, server, seed(server, [_pod(i) for i in range(n)]))


if __name__ == "__main__":
    sys.exit(main())
