"""``make demo``: nodeflow's provisioning path end to end, locally, in one process, on a real Kubernetes control plane.

A moto server (EC2, SSM, IAM, DynamoDB, SQS, Lambda, Step Functions executing the real
statemachines/*.asl.json), a real control plane (etcd, kube-apiserver, kube-controller-manager and kube-scheduler:
``sandbox.controlplane``) with Karpenter's CRDs, and simulated kubelets (``sandbox.kwok``: a Node per moto
instance, its Lease, its pods Running). The demo applies examples/demo's NodePools and EC2NodeClass and creates the
Deployments of examples/demo/workloads.yaml: the Deployment and ReplicaSet controllers make their pods, and
kube-scheduler finds no node for them. The agent (a subprocess) forwards them through the webhook's Function URL
(SigV4) to EventBridge, whose rule puts them on the provisioning queue; an SQS event-source mapping with the
deployed batching invokes the provisioner. kube-scheduler binds the pods to the nodes launched for them. The demo
prints each launch execution's trace (what the Step Functions console shows) and the nodes launched with their
price; then a spot interruption and consolidation, whose evicted pods come back through their ReplicaSets.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from nodeflow.api.labels import ANNOTATION_NOMINATED_PODS
from sandbox.esm import unschedulable_pods

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo"
#: the node lifecycle controller's grace period in the demo (50 s by default): a Node whose kubelet went silent
#: (its instance gone) turns Unknown within seconds
NODE_MONITOR_GRACE_PERIOD = 8.0
NODE_MONITOR_PERIOD = 1.0
#: kube-scheduler tries an unschedulable pod again at most this many seconds after a cluster change (10 s by
#: default): the pods are bound as soon as their node is ready
SCHEDULER_MAX_BACKOFF = 1.0
#: what a user of the real cluster would wait for at most (kube-scheduler, the controllers, a launch)
SETTLE_SECONDS = 60.0


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _price(catalog: Any, instance_type: str, zone: str, capacity_type: str) -> float | None:
    price = (
        catalog.spot_prices.get((instance_type, zone))
        if capacity_type == "spot"
        else catalog.on_demand_prices.get(instance_type)
    )
    return None if price is None else float(price)


# ---------------------------------------------------------------------------------------------- pods, as they are


def _scheduled(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(status, reason) of the pod's PodScheduled condition (kube-scheduler's verdict), None before any."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return str(c.get("status")), str(c.get("reason") or "")
    return None


def _running(pod: dict[str, Any]) -> bool:
    """Bound by kube-scheduler and Running (its simulated kubelet started it)."""
    return bool(pod["spec"].get("nodeName")) and (pod.get("status") or {}).get("phase") == "Running"


def _why_not_running(kube: Any, namespaces: Sequence[str], out: TextIO) -> None:
    """What a user would look at next (``kubectl get pods -o wide``, ``kubectl describe nodes``): each pod that is
    not Running with its phase, node and scheduling message, and each Node's Ready condition and taints."""
    for ns in namespaces:
        for p in live_pods(kube, ns):
            if _running(p):
                continue
            scheduled: dict[str, Any] = next(
                (c for c in p.get("status", {}).get("conditions") or [] if c.get("type") == "PodScheduled"), {}
            )
            print(
                f"  pod {ns}/{p['metadata']['name']}: {p.get('status', {}).get('phase')}, node "
                f"{p['spec'].get('nodeName') or '-'}, PodScheduled {scheduled.get('status', '-')} "
                f"{scheduled.get('reason', '')} {scheduled.get('message', '')}".rstrip(),
                file=out,
            )
    for n in kube.objects("v1", "Node"):
        ready: dict[str, Any] = next(
            (c for c in n.get("status", {}).get("conditions") or [] if c.get("type") == "Ready"), {}
        )
        taints = ",".join(f"{t['key']}:{t['effect']}" for t in n["spec"].get("taints") or []) or "none"
        print(f"  node {n['metadata']['name']}: Ready {ready.get('status', '-')}, taints {taints}", file=out)


def live_pods(kube: Any, namespace: str, app: str | None = None) -> list[dict[str, Any]]:
    """The pods of ``namespace`` (labelled ``app=<app>`` when given) that are not being deleted."""
    pods = kube.list_items("v1", "Pod", namespace, label_selector=f"app={app}" if app else None)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def scale(kube: Any, namespace: str, deployment: str, replicas: int) -> None:
    """``kubectl scale deploy``: the Deployment's ``spec.replicas`` (its controllers do the rest)."""
    kube.patch("apps/v1", "Deployment", deployment, {"spec": {"replicas": replicas}}, namespace)


def _wait(predicate: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return None


# ---------------------------------------------------------------------------------------------- the cluster


def run(out: TextIO = sys.stdout, *, wait_scale: float = 0.01, keep: bool = False) -> int:
    from sandbox.controlplane import ControlPlane
    from sandbox.controlplane.binaries import BinariesNotFound

    # Everything AWS is the local moto server: fake credentials, never a real account.
    for key, value in (("AWS_ACCESS_KEY_ID", "demo"), ("AWS_SECRET_ACCESS_KEY", "demo"), ("AWS_SESSION_TOKEN", "demo")):
        os.environ[key] = value
    os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    # moto's Step Functions engine logs (as an error) every path a Choice rule's IsPresent finds missing, e.g. the
    # launch workflow's $.registration.initialized while a Node is registered but not ready yet; a real failure
    # fails its execution, which the demo reports.
    logging.getLogger("moto.stepfunctions.parser.asl").setLevel(logging.CRITICAL)
    started = time.perf_counter()
    plane = ControlPlane(
        controllers=True,
        node_monitor_grace_period=NODE_MONITOR_GRACE_PERIOD,
        node_monitor_period=NODE_MONITOR_PERIOD,
        scheduler_max_backoff=SCHEDULER_MAX_BACKOFF,
        log=lambda message: print(f"control plane: {message}", file=out, flush=True),
    )
    try:
        binaries = plane.binaries
    except BinariesNotFound as exc:
        print(f"nodeflow demo: no Kubernetes control plane binaries.\n{exc}", file=out)
        return 2
    print(
        "nodeflow demo: moto server + a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, "
        f"kube-scheduler from {binaries.source}) + simulated kubelets, one process\n",
        file=out,
        flush=True,
    )
    try:
        return _with_cluster(plane, _starting(plane), out, started, wait_scale=wait_scale, keep=keep)
    finally:
        plane.stop()


def _starting(plane: Any) -> Callable[[], None]:
    """``plane.start()`` on a thread, so the moto server and the Lambdas are set up meanwhile; the function returned
    waits for it and raises what it raised."""
    failed: list[BaseException] = []

    def start() -> None:
        try:
            plane.start()
        except BaseException as exc:  # re-raised by the caller
            failed.append(exc)

    thread = threading.Thread(target=start, name="control-plane-start", daemon=True)
    thread.start()

    def started() -> None:
        thread.join()
        if failed:
            raise failed[0]

    return started


def _with_cluster(
    plane: Any, plane_started: Callable[[], None], out: TextIO, started: float, *, wait_scale: float, keep: bool
) -> int:
    from nodeflow.catalog.offline import load_offline
    from sandbox.aws import moto_server
    from sandbox.controlplane.facade import RealKubeAPI
    from sandbox.nodeflow import LocalNodeflow

    with moto_server() as server:
        catalog = load_offline("us-east-1")
        plane_started()
        kube = RealKubeAPI(plane).start()
        try:
            local = LocalNodeflow(
                server.clients(),
                kube,
                endpoint_url=server.url,
                wait_scale=wait_scale,
                kubelet_register_after=0.2,
                kubelet_ready_after=0.2,
                env={"POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "ERROR"},
            )
            # The Lambdas' Karpenter metrics are CloudWatch EMF records printed to stdout (CloudWatch Logs in AWS):
            # counted here instead of filling the demo's output.
            metrics = _MetricRecords(sys.stdout)
            with local, contextlib.redirect_stdout(metrics):
                code = _scenario(local, out, started, catalog)
                print(
                    f"metrics: the Lambdas wrote {metrics.records} CloudWatch EMF records under Karpenter's metric "
                    "names (in AWS: CloudWatch Logs -> metrics in the nodeflow namespace)",
                    file=out,
                )
                if keep:  # make demo KEEP=1: the cluster stays up for kubectl until SIGINT/SIGTERM
                    from sandbox.keep import keep_running

                    keep_running(local, out)
                return code
        finally:
            kube.stop()


class _MetricRecords(io.TextIOBase):
    """A stdout that counts the EMF records (lines starting ``{"_aws"``) written to it and passes every other line
    on to ``target``."""

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self.target = target
        self.records = 0
        self._partial = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            for line in lines:
                if line.startswith('{"_aws"'):
                    self.records += 1
                else:
                    self.target.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.target.flush()


def _scenario(local: Any, out: TextIO, started: float, catalog: Any) -> int:
    pools = _docs(DEMO / "nodepools.yaml")
    local.apply(pools)
    names = [f"{d['kind']}/{d['metadata']['name']}" for d in pools]
    print(f"applied {', '.join(names)}", file=out)

    from sandbox.agent import AgentProcess

    url = local.start_webhook()
    source = local.start_event_source()
    agent = AgentProcess(local.agent_env(BATCH_MAX_WAIT="0.1")).start()
    try:
        agent.wait_ready()
        print(
            f"agent: watching the API server, forwarding to the webhook's Function URL {url.url} (AWS_IAM, SigV4);"
            f"\n       EventBridge routes pending pods to the provisioning queue (batching window "
            f"{source.window_seconds:g} s) and node/pod changes to the disruption queue",
            file=out,
        )
        return _provision(local, agent, source, out, started, catalog)
    finally:
        agent.stop()


def _provision(local: Any, agent: Any, source: Any, out: TextIO, started: float, catalog: Any) -> int:
    deployments = [d for d in _docs(DEMO / "workloads.yaml") if d.get("kind") == "Deployment"]
    namespaces = sorted({d["metadata"].get("namespace", "default") for d in deployments})
    for ns in namespaces:
        local.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    created = time.time()
    local.apply(deployments)
    expected = sum(int(d["spec"]["replicas"]) for d in deployments)

    def unschedulable() -> list[dict[str, Any]] | None:  # kube-scheduler's verdict on every pod
        pods = [p for ns in namespaces for p in live_pods(local.kube_server, ns)]
        done = [p for p in pods if _scheduled(p) == ("False", "Unschedulable")]
        return done if len(pods) == expected == len(done) else None

    pods = _wait(unschedulable, SETTLE_SECONDS) or []
    summary = ", ".join(
        f"{d['metadata'].get('namespace', 'default')}/{d['metadata']['name']} x{d['spec']['replicas']}"
        for d in deployments
    )
    print(
        f"created Deployments {summary}: their ReplicaSets made {len(pods)} pods, kube-scheduler found no node for "
        f"them (PodScheduled=False, Unschedulable) {time.time() - created:.1f} s after\n",
        file=out,
    )
    if not pods:
        print("  the pods were not all marked Unschedulable", file=out)
        return 1

    names = {p["metadata"]["name"] for p in pods}
    batches = source.wait_for(lambda bs: names <= set(unschedulable_pods(bs)) and all(b.ok for b in bs), timeout=60)
    for i, b in enumerate(batches, 1):
        result = (b.result or {}).get("result") or {}
        timings = result.get("timings", {})
        print(
            f"provisioner batch {i}: {len(b.records)} events, {b.invoked_at - created:.2f} s after the Deployments "
            f"were created -> {result.get('pendingPods', 0)} pending pods, "
            f"{len(result.get('nodeClaimsCreated', []))} NodeClaims, {len(result.get('executionsStarted', []))} "
            f"launch executions (snapshot {timings.get('snapshot', 0):.2f} s, solve {timings.get('solve', 0):.2f} s)",
            file=out,
        )
        if result.get("unschedulablePods"):
            print(f"  {result['unschedulablePods']} pods cannot be served by any NodePool", file=out)

    done = local.wait_for_executions(timeout=45)
    transitions = invocations = 0
    for d in done:
        trace = local.trace(d["executionArn"])
        transitions += trace.transitions
        invocations += trace.task_invocations
        print("\n" + trace.render(), file=out)

    claims = {c["metadata"]["name"]: c for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")}
    pods_per_claim = {
        name: len(json.loads((c["metadata"].get("annotations") or {}).get(ANNOTATION_NOMINATED_PODS, "[]")))
        for name, c in claims.items()
    }
    print("\nnodes launched:", file=out)
    row = "  {:<16} {:<30} {:<14} {:<11} {:<10} {:>4} {:>8}"
    print(row.format("NODECLAIM", "NODE", "INSTANCE TYPE", "ZONE", "CAPACITY", "PODS", "$/HOUR"), file=out)
    total = 0.0
    for name, claim in sorted(claims.items()):
        labels = claim["metadata"].get("labels") or {}
        itype = labels.get("node.kubernetes.io/instance-type", "?")
        zone = labels.get("topology.kubernetes.io/zone", "?")
        ctype = labels.get("karpenter.sh/capacity-type", "?")
        price = _price(catalog, itype, zone, ctype)
        total += price or 0.0
        node = (claim.get("status") or {}).get("nodeName", "-")
        shown = f"{price:.4f}" if price is not None else "?"
        print(
            f"  {name:<16} {node:<30} {itype:<14} {zone:<11} {ctype:<10} {pods_per_claim[name]:>4} {shown:>8}", file=out
        )
    print(f"  total ${total:.4f}/hour (spot prices are offline estimates)", file=out)

    ok = bool(done) and all(d["status"] == "SUCCEEDED" for d in done)
    if done:
        print(
            f"\nper node: {transitions / len(done):.1f} state transitions, "
            f"{invocations / len(done):.1f} Lambda invocations (launch workflow); "
            f"{local.dispatch.count()} Lambda invocations in all",
            file=out,
        )
    # kube-scheduler binds the pods once their nodes are Ready and initialized; the agent reports that too.
    bound = _wait(
        lambda: (
            (ps := [p for ns in namespaces for p in live_pods(local.kube_server, ns)])
            and len(ps) == expected
            and all(_running(p) for p in ps)
        ),
        SETTLE_SECONDS,
    )
    on = Counter(str(p["spec"].get("nodeName")) for ns in namespaces for p in live_pods(local.kube_server, ns))
    print(
        f"kube-scheduler bound all {expected} pods to {len(on)} of the new nodes, Running "
        f"{time.time() - created:.1f} s after the Deployments were created"
        if bound
        else f"kube-scheduler did NOT bind every pod within {SETTLE_SECONDS:.0f} s",
        file=out,
    )
    if not bound:
        _why_not_running(local.kube_server, namespaces, out)
    ok = ok and bool(bound)
    changes: set[str] = set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not {"Node Ready", "Pod Bound"} <= changes:
        changes = {json.loads(m["Body"])["detail-type"] for m in local.queue_messages("disruption")}
        time.sleep(0.1)
    ok = _interrupt(local, out, catalog) and ok
    ok = _consolidate(local, out, catalog) and ok
    counters = agent.metrics()
    requests = sum(v for k, v in counters.items() if k.startswith("nodeflow_agent_requests_total"))
    print(
        f"agent: {counters.get('nodeflow_agent_events_sent_total', 0):.0f} events forwarded in {requests:.0f} "
        f"requests; the disruption queue got {', '.join(sorted(changes)) or 'nothing'}",
        file=out,
    )
    code = agent.stop()
    print(f"agent: SIGTERM -> flushed and exited {code}", file=out)
    ok = ok and code == 0
    # A leak is an instance no NodeClaim names; terminations still in flight get a few seconds to settle.
    leaked = _wait(lambda: not _unowned_instances(local), 15) is None
    if leaked:
        print(f"instances no NodeClaim names: {', '.join(_unowned_instances(local))}", file=out)
    ok = _collect_garbage(local, out) and ok
    ok = _decision_log(local, out) and ok
    print(
        f"demo finished in {time.perf_counter() - started:.1f} s: {'OK' if ok and not leaked else 'FAILED'}", file=out
    )
    return 0 if ok and not leaked else 1


DECISIONS_SHOWN = 12


def _collect_garbage(local: Any, out: TextIO) -> bool:
    """One garbage-collection run, as the schedule runs it every 2 minutes in AWS: after the scenario it finds no
    leak; it prunes the nominated-pods annotations of the pods that were deleted or bound meanwhile. False when a
    NodeClaim still names such a pod afterwards."""
    result = local.collect_garbage()
    stale = stale_nominations(local.kube_server)
    leftovers = sum(len(result.get(k) or ()) for k in ("terminatedInstances", "deletedNodeClaims", "deletedNodes"))
    print(
        f"\ngarbage collection: {leftovers} leftovers; nominated-pods pruned on "
        f"{len(result.get('nominationsPruned') or ())} NodeClaims (their pods deleted or bound)"
        + (f"; still naming pods gone or bound: {', '.join(stale)}" if stale else ""),
        file=out,
    )
    return not stale


def stale_nominations(kube: Any) -> list[str]:
    """``NodeClaim: pod`` for each pod a NodeClaim's nominated-pods annotation names that no longer exists or is
    bound to that NodeClaim's own node (what garbage collection prunes)."""
    pods = {
        f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}": p for p in kube.objects("v1", "Pod")
    }
    out = []
    for claim in kube.objects("karpenter.sh/v1", "NodeClaim"):
        node = (claim.get("status") or {}).get("nodeName")
        for key in json.loads((claim["metadata"].get("annotations") or {}).get(ANNOTATION_NOMINATED_PODS, "[]")):
            pod = pods.get(key)
            if pod is None or (node and (pod.get("spec") or {}).get("nodeName") == node):
                out.append(f"{claim['metadata']['name']}: {key}")
    return out


def _decision_log(local: Any, out: TextIO) -> bool:
    """Where the decision log is (the provisioner and the disruption Lambda wrote it as they ran): its count, the
    newest records (this moto server goes with the demo), and the command that reads it, which works against a
    deployed stack, and against this one while ``make demo KEEP=1`` keeps it up. False when nothing was written."""
    from datetime import UTC, datetime, timedelta

    from nodeflow.aws.decision_log import read_decisions
    from nodeflow.decisions_cli import render
    from sandbox.aws import register_stack

    stack = register_stack(local.clients, local.world)  # the CDK stack's outputs, for --stack
    table = local.world.decision_table_name
    now = datetime.now(UTC)
    records = read_decisions(local.clients.dynamodb, table, since=now - timedelta(hours=1), now=now)
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(Counter(r.kind for r in records).items()))
    print(f"\ndecision log: {len(records)} records in table {table} ({kinds}); the newest:", file=out)
    render(records[:DECISIONS_SHOWN], out)
    print(
        f"read them with: python -m nodeflow decisions --stack {stack} --since 1h  [--pod NS/NAME] [--nodepool NAME] "
        f"[-o json]\n  (this demo's moto server, while KEEP=1 keeps it up: AWS_ENDPOINT_URL={local.endpoint_url} "
        f"AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_REGION={local.world.region} python -m nodeflow "
        f"decisions --stack {stack})",
        file=out,
    )
    return bool(records)


def _unowned_instances(local: Any) -> list[str]:
    named = {
        str((c.get("status") or {}).get("providerID", "")).rsplit("/", 1)[-1]
        for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")
    }
    return sorted(i["InstanceId"] for i in local.instances(("pending", "running")) if i["InstanceId"] not in named)


def _interrupt(local: Any, out: TextIO, catalog: Any) -> bool:
    """A spot interruption of one node, end to end: AWS's warning on the default bus -> interruption
    queue -> interruption Lambda -> terminate workflow (taint, drain through the eviction API, terminate) -> the
    evicted pods' ReplicaSets make new pods -> kube-scheduler binds those it has room for and marks the others
    Unschedulable -> agent -> provisioner -> a new node."""
    from sandbox.stepfunctions import wait_for_execution
    from tests.fixtures.aws_events import SPOT, variant

    kube = local.kube_server
    claims = kube.objects("karpenter.sh/v1", "NodeClaim")
    spot = [c for c in claims if (c["metadata"].get("labels") or {}).get("karpenter.sh/capacity-type") == "spot"]
    if not spot:
        print("\nspot interruption: no spot node to interrupt", file=out)
        return False
    pods = kube.objects("v1", "Pod")
    namespaces = sorted({p["metadata"]["namespace"] for p in pods if p["spec"].get("nodeName")})
    pods_on = {
        c["metadata"]["name"]: [p for p in pods if p["spec"].get("nodeName") == (c.get("status") or {}).get("nodeName")]
        for c in spot
    }
    victim = max(spot, key=lambda c: len(pods_on[c["metadata"]["name"]]))
    name = victim["metadata"]["name"]
    labels = victim["metadata"].get("labels") or {}
    instance = str(victim["status"]["providerID"]).rsplit("/", 1)[-1]
    before = {c["metadata"]["name"] for c in claims}
    uids = {p["metadata"]["uid"] for p in pods}
    moved = len(pods_on[name])
    local.start_interruption_source()
    t0 = time.perf_counter()
    local.send_aws_event(variant(SPOT, instance_id=instance, detail={"instance-action": "terminate"}))
    print(
        f"\nspot interruption: EC2 Spot Instance Interruption Warning for {instance} "
        f"({labels.get('node.kubernetes.io/instance-type')}, {moved} pods) put on the default bus",
        file=out,
    )
    arn = f"{local.terminate_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"
    done = _wait(lambda: _described(local, arn), 30)
    if done is None:
        print("  no terminate execution started", file=out)
        return False
    done = wait_for_execution(local.clients.sfn, arn, timeout=60)
    trace = local.trace(arn)
    print("\n" + trace.render(), file=out)

    def recreated() -> list[dict[str, Any]]:  # the pods the ReplicaSets made since the warning
        return [p for ns in namespaces for p in live_pods(kube, ns) if p["metadata"]["uid"] not in uids]

    bound = _wait(lambda: (ps := recreated()) and len(ps) >= moved and all(_running(p) for p in ps), SETTLE_SECONDS)
    launched = local.wait_for_executions(timeout=60)
    state = local.clients.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["State"][
        "Name"
    ]
    unavailable = (
        labels.get("node.kubernetes.io/instance-type"),
        labels.get("topology.kubernetes.io/zone"),
        "spot",
    ) in _unavailable(local)
    fresh = [c for c in kube.objects("karpenter.sh/v1", "NodeClaim") if c["metadata"]["name"] not in before]
    fresh_nodes = {(c.get("status") or {}).get("nodeName") for c in fresh}
    came_back = recreated()
    on_fresh = sum(1 for p in came_back if p["spec"].get("nodeName") in fresh_nodes)
    new = ", ".join(
        f"{c['metadata']['name']} ({(c['metadata'].get('labels') or {}).get('node.kubernetes.io/instance-type')}, "
        f"{(c['metadata'].get('labels') or {}).get('karpenter.sh/capacity-type')})"
        for c in fresh
    )
    print(
        f"  terminate {done['status']}: node drained, instance {instance} {state}, NodeClaim and Node gone; "
        f"offering marked unavailable: {'yes' if unavailable else 'no'}",
        file=out,
    )
    print(
        f"  {len(came_back)} evicted pods came back Pending through their ReplicaSets: kube-scheduler bound "
        f"{len(came_back) - on_fresh} to nodes with room, {on_fresh} went agent -> provisioner -> {new or 'nothing'}; "
        f"all Running again {time.perf_counter() - t0:.1f} s after the warning"
        if bound
        else "  pods NOT bound again",
        file=out,
    )
    return _passed(
        out,
        "spot interruption",
        {
            "terminate execution succeeded": done["status"] == "SUCCEEDED",
            "interrupted instance terminated": state in ("shutting-down", "terminated"),
            "evicted pods bound again": bool(bound),
            "replacement launches succeeded": all(d["status"] == "SUCCEEDED" for d in launched),
        },
    )


def _passed(out: TextIO, section: str, checks: dict[str, bool]) -> bool:
    """True when every check holds; otherwise names the ones that did not."""
    failed = [name for name, held in checks.items() if not held]
    if failed:
        print(f"  {section} FAILED: not {'; not '.join(failed)}", file=out)
    return not failed


def _cluster_price(local: Any, catalog: Any) -> float:
    total = 0.0
    for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim"):
        labels = c["metadata"].get("labels") or {}
        price = _price(
            catalog,
            labels.get("node.kubernetes.io/instance-type", ""),
            labels.get("topology.kubernetes.io/zone", ""),
            labels.get("karpenter.sh/capacity-type", ""),
        )
        total += price or 0.0
    return total


@contextlib.contextmanager
def consolidate_now(kube: Any) -> Iterator[str]:
    """The NodePools' ``consolidateAfter`` at 0s while the block runs, then back to what they were: the demo's
    disruption rounds find the nodes consolidatable without waiting a minute, and without a clock set ahead of
    time. A clock ahead would be seen by everything running meanwhile (the round, the terminate and replace
    workflows it starts, the provisioner) and leak into what they write (conditions' lastTransitionTime, Events,
    lastPodEventTime, decision-log rows): with this, every time written is the real one. A NodePool's
    ``spec.disruption`` is not part of its hash: nothing drifts. Yields what was changed, for the demo's output."""
    from nodeflow.kube.client import NODE_POOLS, KubeClient

    api = kube.api_client()
    client = KubeClient(api)
    saved = {
        p["metadata"]["name"]: ((p.get("spec") or {}).get("disruption") or {}).get("consolidateAfter")
        for p in client.list_items(NODE_POOLS)
    }
    shortened = {name: after for name, after in saved.items() if after not in (None, "0s", "Never")}
    try:
        for name in shortened:
            client.patch(NODE_POOLS, name, {"spec": {"disruption": {"consolidateAfter": "0s"}}})
        yield ", ".join(f"NodePool {n} consolidateAfter {a} -> 0s" for n, a in sorted(shortened.items())) or "-"
    finally:
        for name, after in shortened.items():
            with contextlib.suppress(Exception):  # deleted meanwhile
                client.patch(NODE_POOLS, name, {"spec": {"disruption": {"consolidateAfter": after}}})
        api.close()


def _scale_down(kube: Any, namespace: str, deployment: str, replicas: int) -> int | None:
    """Scale a Deployment down and wait until its ReplicaSet's surplus pods are gone (deleted by the ReplicaSet
    controller, confirmed by their kubelets): how many went, None if they did not within ``SETTLE_SECONDS``."""
    had = len(live_pods(kube, namespace, deployment))
    scale(kube, namespace, deployment, replicas)

    def settled() -> bool:
        return len(kube.list_items("v1", "Pod", namespace, label_selector=f"app={deployment}")) == replicas

    return had - replicas if _wait(settled, SETTLE_SECONDS) else None


def _consolidate(local: Any, out: TextIO, catalog: Any) -> bool:
    """Scale shop/web down to zero and let the disruption Lambda remove the nodes left empty or underutilized, one
    round at a time within the NodePool's disruption budget (10% by default: one node per round here). kube-scheduler
    spreads pods over the nodes that fit them, so which nodes end up empty is its choice: an underutilized node's
    pods are evicted, re-created by their ReplicaSets and bound to the nodes that stay."""
    before = _cluster_price(local, catalog)
    nodes_before = len(local.kube_server.objects("karpenter.sh/v1", "NodeClaim"))
    gone = _scale_down(local.kube_server, "shop", "web", 0)
    if gone is None:
        print("\nconsolidation: the pods of shop/web were not deleted", file=out)
        return False
    print(
        f"\nconsolidation: Deployment shop/web scaled to 0 ({gone} pods deleted by its ReplicaSet); "
        f"{nodes_before} nodes, ${before:.4f}/hour",
        file=out,
    )
    deleted: Counter[str] = Counter()
    with consolidate_now(local.kube_server) as shortened:
        print(f"  {shortened} for these rounds (the demo does not wait; restored after)", file=out)
        for i in range(1, 11):
            result = local.invoke("disruption", {"source": "aws.scheduler", "detail-type": "Scheduled Event"})
            cmd = result["result"]["command"]
            if cmd is None:
                print(f"  round {i}: nothing to disrupt", file=out)
                break
            what = f"{cmd['method']} ({cmd['reason']}): {', '.join(cmd['candidates'])} -> {cmd['decision']}"
            print(f"  round {i}: {what}, saves ${cmd['savedPerHour']:.4f}/hour", file=out)
            if not _round_done(local, result, out):
                return False
            deleted[cmd["reason"]] += len(cmd["candidates"]) if cmd["decision"] == "delete" else 0
    # the pods evicted from an underutilized node are back, bound by kube-scheduler to the nodes that stay
    settled = _wait(lambda: all(_running(p) for p in live_pods(local.kube_server, "shop")), SETTLE_SECONDS)
    after = _cluster_price(local, catalog)
    removed = sum(deleted.values())
    print(
        f"  {removed} nodes removed ({', '.join(f'{n} {r}' for r, n in sorted(deleted.items())) or 'none'}): "
        f"{nodes_before - removed} nodes, ${after:.4f}/hour (saved ${before - after:.4f}/hour); "
        f"every shop pod Running: {'yes' if settled else 'NO'}",
        file=out,
    )
    return removed > 0 and after < before and bool(settled) and _move(local, out, catalog)


def _round_done(local: Any, result: dict[str, Any], out: TextIO) -> bool:
    """Wait for the workflows a disruption round started (a replace, the candidates' terminations); False, said,
    when one did not succeed."""
    from sandbox.stepfunctions import wait_for_execution

    def execution(machine: str, name: str) -> str:
        return f"{machine.replace(':stateMachine:', ':execution:', 1)}:{name}"

    replacing = result["result"].get("replacing")
    arns = [execution(local.terminate_arn, claim) for claim in result["result"].get("executed") or []]
    if replacing:
        arns = [execution(local.replace_arn, replacing["name"])]
        arns += [execution(local.terminate_arn, c["nodeClaim"]) for c in replacing["candidates"]]
    for arn in arns:
        done = wait_for_execution(local.clients.sfn, arn, timeout=60)
        if done["status"] != "SUCCEEDED":
            print(f"  {arn.rsplit(':', 2)[-2]} {arn.rsplit(':', 1)[-1]}: {done['status']}", file=out)
            return False
    return True


#: four pods kept together on one on-demand node by a preferred pod affinity on the hostname (the provisioner
#: enforces a preference as required first, as Karpenter does: one NodeClaim for the four). Not a required one:
#: kube-scheduler does not try a pod again when the pod its required affinity matched (its own ReplicaSet's last other
#: one, still terminating on the node being replaced) is deleted; it would wait for another cluster event or its
#: 5-minute flush of unschedulable pods.
REPORT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "report", "namespace": "shop"},
    "spec": {
        "replicas": 4,
        "selector": {"matchLabels": {"app": "report"}},
        "template": {
            "metadata": {"labels": {"app": "report"}},
            "spec": {
                "nodeSelector": {"karpenter.sh/capacity-type": "on-demand"},
                "affinity": {
                    "podAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 100,
                                "podAffinityTerm": {
                                    "labelSelector": {"matchLabels": {"app": "report"}},
                                    "topologyKey": "kubernetes.io/hostname",
                                },
                            }
                        ]
                    }
                },
                "containers": [
                    {
                        "name": "report",
                        "image": "example/report:1",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    }
                ],
            },
        },
    },
}


def _node_of(local: Any, claim: str) -> tuple[str, str]:
    """(node name, "instance type, capacity type") of a NodeClaim."""
    c = local.kube_server.get("karpenter.sh/v1", "NodeClaim", claim)
    labels = c["metadata"].get("labels") or {}
    kind = f"{labels.get('node.kubernetes.io/instance-type')}, {labels.get('karpenter.sh/capacity-type')}"
    return str((c.get("status") or {}).get("nodeName", "-")), kind


def _move(local: Any, out: TextIO, catalog: Any) -> bool:
    """Consolidation that moves pods: shop/report (4 pods together on one on-demand node) scaled to 1 leaves its
    node underused; the disruption Lambda replaces it with a cheaper node (replace workflow: candidate tainted
    karpenter.sh/disrupted, replacement launched and initialized, candidate drained through the eviction API and
    terminated), and kube-scheduler binds the evicted pod, recreated by its ReplicaSet, to the replacement."""
    from sandbox.stepfunctions import wait_for_execution

    kube = local.kube_server
    before_claims = {c["metadata"]["name"] for c in kube.objects("karpenter.sh/v1", "NodeClaim")}
    local.apply([REPORT])
    placed = _wait(lambda: (ps := live_pods(kube, "shop", "report")) and len(ps) == 4 and all(map(_running, ps)), 60)
    fresh = sorted(
        c["metadata"]["name"]
        for c in kube.objects("karpenter.sh/v1", "NodeClaim")
        if c["metadata"]["name"] not in before_claims
    )
    # kube-scheduler may bind the pods once the node is Ready, before the launch workflow marks the NodeClaim
    # Initialized; disruption does not consider an uninitialized node, so wait for that too.
    initialized = len(fresh) == 1 and _wait(
        lambda: any(
            c.get("type") == "Initialized" and c.get("status") == "True"
            for c in (kube.get("karpenter.sh/v1", "NodeClaim", fresh[0]).get("status") or {}).get("conditions", [])
        ),
        60,
    )
    if not placed or not initialized:
        print(f"\nconsolidation that moves pods: shop/report not placed on one new node ({fresh})", file=out)
        return False
    old_node, old_kind = _node_of(local, fresh[0])
    gone = _scale_down(kube, "shop", "report", 1)
    before = _cluster_price(local, catalog)
    print(
        f"\nconsolidation that moves pods: Deployment shop/report x4 (on-demand, kept together) -> {old_node} "
        f"({old_kind}); scaled to 1 ({gone} pods deleted by its ReplicaSet), ${before:.4f}/hour",
        file=out,
    )
    uids = {p["metadata"]["uid"] for p in kube.objects("v1", "Pod", "shop")}
    t0 = time.perf_counter()
    with consolidate_now(kube):
        result = local.invoke("disruption", {"source": "aws.scheduler", "detail-type": "Scheduled Event"})
    cmd, replacing = result["result"]["command"], result["result"].get("replacing")
    if cmd is None or not replacing:
        print(f"  no replace command: {cmd}", file=out)
        return False
    print(
        f"  {cmd['method']} ({cmd['reason']}): {', '.join(cmd['candidates'])} -> {cmd['decision']}, "
        f"saves ${cmd['savedPerHour']:.4f}/hour",
        file=out,
    )
    arn = f"{local.replace_arn.replace(':stateMachine:', ':execution:', 1)}:{replacing['name']}"
    done = wait_for_execution(local.clients.sfn, arn, timeout=60)
    print("\n" + local.trace(arn).render(), file=out)
    terminated = [
        wait_for_execution(
            local.clients.sfn,
            f"{local.terminate_arn.replace(':stateMachine:', ':execution:', 1)}:{c['nodeClaim']}",
            timeout=60,
        )
        for c in replacing["candidates"]
    ]
    (new,) = replacing["replacements"]
    new_node, new_kind = _node_of(local, new)
    moved = _wait(
        lambda: [p for p in live_pods(kube, "shop", "report") if p["spec"].get("nodeName") == new_node and _running(p)],
        30,
    )
    after = _cluster_price(local, catalog)
    report = live_pods(kube, "shop", "report")
    ok = _passed(
        out,
        "consolidation",
        {
            "replace execution succeeded": done["status"] == "SUCCEEDED",
            "candidates' terminations succeeded": all(t["status"] == "SUCCEEDED" for t in terminated),
            "the pod moved to the replacement": bool(moved),
            "the evicted pod was recreated": any(p["metadata"]["uid"] not in uids for p in moved or []),
            "no pod left on the old node": not any(p["spec"].get("nodeName") == old_node for p in report),
            "the cluster is cheaper": after < before,
        },
    )
    print(
        f"  replace {done['status']}: {old_node} tainted karpenter.sh/disrupted, replacement {new} -> {new_node} "
        f"({new_kind}) initialized, {old_node} drained and terminated\n"
        f"  {len(moved or [])} evicted pod recreated by its ReplicaSet, bound by kube-scheduler to {new_node}, Running "
        f"{time.perf_counter() - t0:.1f} s after the round; ${after:.4f}/hour (saved ${before - after:.4f}/hour)",
        file=out,
    )
    return ok


def _described(local: Any, arn: str) -> Any:
    try:
        return local.clients.sfn.describe_execution(executionArn=arn)
    except Exception:
        return None


def _unavailable(local: Any) -> frozenset[tuple[str, str, str]]:
    from datetime import UTC, datetime

    from nodeflow.aws.offerings import UnavailableOfferings

    return UnavailableOfferings(local.clients.dynamodb, local.world.table_name).current(datetime.now(UTC))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--wait-scale", type=float, default=0.01, help="scale of Step Functions waits (default 0.01: 20 s -> 0.2 s)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the cluster running after the scenario (KUBECONFIG=<path> line)"
    )
    args = parser.parse_args(argv)
    return run(wait_scale=args.wait_scale, keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
