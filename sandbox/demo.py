"""``make demo``: nodeflow's provisioning path end to end, locally, in one process.

A moto server (EC2, SSM, IAM, DynamoDB, SQS, Lambda, Step Functions executing the real
statemachines/launch.asl.json), the test Kubernetes API server with Karpenter's CRDs, and a
simulated kubelet. The demo applies examples/demo's NodePools and EC2NodeClass, creates the
Deployments of examples/demo/workloads.yaml with their pods pending. The agent (a subprocess)
forwards them through the webhook's Function URL (SigV4) to EventBridge, whose rule puts them on
the provisioning queue; an SQS event-source mapping with the deployed batching invokes the
provisioner. The demo prints each launch execution's trace (what the Step Functions console
shows) and the nodes launched with their price.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from nodeflow.api.labels import ANNOTATION_NOMINATED_PODS
from sandbox.esm import unschedulable_pods

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo"


def _pending(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a Deployment's controller would create, left Pending/Unschedulable by the scheduler."""
    from nodeflow.api.core import Deployment, expand_workload

    template_spec = doc["spec"]["template"]["spec"]
    out = []
    for pod in expand_workload(Deployment.model_validate(doc)):
        body = pod.model_dump(by_alias=True, exclude_none=True, mode="json")
        body["spec"] = copy.deepcopy(template_spec)  # exactly the template (images and all)
        body["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
        out.append(body)
    return out


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _price(catalog: Any, instance_type: str, zone: str, capacity_type: str) -> float | None:
    price = (
        catalog.spot_prices.get((instance_type, zone))
        if capacity_type == "spot"
        else catalog.on_demand_prices.get(instance_type)
    )
    return None if price is None else float(price)


def run(out: TextIO = sys.stdout, *, wait_scale: float = 0.01, keep: bool = False) -> int:
    from nodeflow.catalog.offline import load_offline
    from sandbox.aws import moto_server
    from sandbox.nodeflow import LocalNodeflow
    from tests.kubeapi import KubeAPIServer
    from tests.kubeapi.crds import karpenter_crds

    # Everything AWS is the local moto server: fake credentials, never a real account.
    for key, value in (("AWS_ACCESS_KEY_ID", "demo"), ("AWS_SECRET_ACCESS_KEY", "demo"), ("AWS_SESSION_TOKEN", "demo")):
        os.environ[key] = value
    os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    started = time.perf_counter()
    print("nodeflow demo: moto server + Kubernetes API server + simulated kubelet, one process\n", file=out)
    kube = KubeAPIServer().start()
    try:
        for crd in karpenter_crds():
            kube.register_crd(crd)
        with moto_server() as server:
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
                code = _scenario(local, out, started, load_offline("us-east-1"))
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
    pods: list[dict[str, Any]] = []
    for d in deployments:
        pods.extend(_pending(d))
    for ns in sorted({p["metadata"].get("namespace", "default") for p in pods}):
        local.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    created = time.time()
    local.apply(pods)
    summary = ", ".join(
        f"{d['metadata'].get('namespace', 'default')}/{d['metadata']['name']} x{d['spec']['replicas']}"
        for d in deployments
    )
    print(f"created Deployments {summary}: {len(pods)} pods Pending (Unschedulable)\n", file=out)

    names = {p["metadata"]["name"] for p in pods}
    batches = source.wait_for(lambda bs: names <= set(unschedulable_pods(bs)) and all(b.ok for b in bs), timeout=60)
    for i, b in enumerate(batches, 1):
        result = (b.result or {}).get("result") or {}
        timings = result.get("timings", {})
        print(
            f"provisioner batch {i}: {len(b.records)} events, {b.invoked_at - created:.2f} s after the pods were "
            f"created -> {result.get('pendingPods', 0)} pending pods, {len(result.get('nodeClaimsCreated', []))} "
            f"NodeClaims, {len(result.get('executionsStarted', []))} launch executions "
            f"(snapshot {timings.get('snapshot', 0):.2f} s, solve {timings.get('solve', 0):.2f} s)",
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
    leaked = len(local.instances(("pending", "running"))) - len(claims)
    if done:
        print(
            f"\nper node: {transitions / len(done):.1f} state transitions, "
            f"{invocations / len(done):.1f} Lambda invocations (launch workflow); "
            f"{local.dispatch.count()} Lambda invocations in all",
            file=out,
        )
    # The scheduler binds the pods once their nodes are initialized; the agent reports that too.
    changes: set[str] = set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not {"Node Ready", "Pod Bound"} <= changes:
        changes = {json.loads(m["Body"])["detail-type"] for m in local.queue_messages("disruption")}
        time.sleep(0.1)
    from nodeflow.kube.client import KubeClient
    from sandbox.replicasets import SimulatedReplicaSets

    replicasets = SimulatedReplicaSets(KubeClient(local.kube_server.api_client())).track_existing()
    replicasets.run_in_background(0.1)
    try:
        ok = _interrupt(local, out, catalog, replicasets) and ok
        ok = _consolidate(local, out, catalog, replicasets) and ok
    finally:
        replicasets.stop()
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

    from nodeflow.aws.decisions import read_decisions
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


def _wait(predicate: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return None


def _interrupt(local: Any, out: TextIO, catalog: Any, replicasets: Any) -> bool:
    """A spot interruption of one node, end to end: AWS's warning on the default bus -> interruption
    queue -> interruption Lambda -> terminate workflow (taint, drain, terminate) -> the evicted pods
    come back Pending (simulated ReplicaSet controller) -> agent -> provisioner -> a new node."""
    from sandbox.stepfunctions import wait_for_execution
    from tests.fixtures.aws_events import SPOT, variant

    claims = local.kube_server.objects("karpenter.sh/v1", "NodeClaim")
    spot = [c for c in claims if (c["metadata"].get("labels") or {}).get("karpenter.sh/capacity-type") == "spot"]
    if not spot:
        print("\nspot interruption: no spot node to interrupt", file=out)
        return False
    pods_on = {
        c["metadata"]["name"]: [
            p
            for p in local.kube_server.objects("v1", "Pod")
            if p["spec"].get("nodeName") == (c.get("status") or {}).get("nodeName")
        ]
        for c in spot
    }
    victim = max(spot, key=lambda c: len(pods_on[c["metadata"]["name"]]))
    name = victim["metadata"]["name"]
    labels = victim["metadata"].get("labels") or {}
    instance = str(victim["status"]["providerID"]).rsplit("/", 1)[-1]
    before = {c["metadata"]["name"] for c in claims}
    local.start_interruption_source()
    t0 = time.perf_counter()
    local.send_aws_event(variant(SPOT, instance_id=instance, detail={"instance-action": "terminate"}))
    print(
        f"\nspot interruption: EC2 Spot Instance Interruption Warning for {instance} "
        f"({labels.get('node.kubernetes.io/instance-type')}, {len(pods_on[name])} pods) put on the default bus",
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
    moved = len(pods_on[name])
    fresh = _wait(
        lambda: [
            c for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim") if c["metadata"]["name"] not in before
        ],
        60,
    )
    launched = local.wait_for_executions(timeout=60)
    bound = _wait(
        lambda: (
            len(replicasets.created) >= moved
            and all(
                (local.kube_server.get("v1", "Pod", key.split("/")[1], key.split("/")[0]) or {})
                .get("spec", {})
                .get("nodeName")
                for key in replicasets.created
            )
        ),
        60,
    )
    state = local.clients.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["State"][
        "Name"
    ]
    unavailable = (
        labels.get("node.kubernetes.io/instance-type"),
        labels.get("topology.kubernetes.io/zone"),
        "spot",
    ) in _unavailable(local)
    current = {c["metadata"]["name"]: c for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")}
    fresh = [current.get(c["metadata"]["name"], c) for c in fresh or []]
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
        f"  {len(replicasets.created)} evicted pods came back Pending -> agent -> provisioner -> "
        f"{new or 'nothing'}; "
        f"all bound again {time.perf_counter() - t0:.1f} s after the warning"
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
            "a new NodeClaim was made": bool(fresh),
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


def _consolidate(local: Any, out: TextIO, catalog: Any, replicasets: Any) -> bool:
    """Scale shop/web down to zero and let the disruption Lambda remove the nodes left empty, one round at a
    time within the NodePool's disruption budget (10% by default: one node per round here)."""
    from sandbox.stepfunctions import wait_for_execution

    before = _cluster_price(local, catalog)
    nodes_before = len(local.kube_server.objects("karpenter.sh/v1", "NodeClaim"))
    gone = replicasets.scale("shop", "web", 0)
    print(
        f"\nconsolidation: Deployment shop/web scaled to 0 ({len(gone)} pods deleted); "
        f"{nodes_before} nodes, ${before:.4f}/hour",
        file=out,
    )
    deleted = 0
    with consolidate_now(local.kube_server) as shortened:
        print(f"  {shortened} for these rounds (the demo does not wait; restored after)", file=out)
        for i in range(1, 11):
            result = local.invoke("disruption", {"source": "aws.scheduler", "detail-type": "Scheduled Event"})
            cmd = result["result"]["command"]
            if cmd is None:
                print(f"  round {i}: nothing to disrupt", file=out)
                break
            what = f"{cmd['method']} ({cmd['reason']}): {', '.join(cmd['candidates'])} -> {cmd['decision']}"
            if cmd["reason"] != "Empty":
                print(f"  round {i}: {what} - run in the next part", file=out)
                break
            print(f"  round {i}: {what}, saves ${cmd['savedPerHour']:.4f}/hour", file=out)
            for claim in result["result"]["executed"]:
                arn = f"{local.terminate_arn.replace(':stateMachine:', ':execution:', 1)}:{claim}"
                done = wait_for_execution(local.clients.sfn, arn, timeout=60)
                if done["status"] != "SUCCEEDED":
                    print(f"  terminate {claim}: {done['status']}", file=out)
                    return False
                deleted += 1
    after = _cluster_price(local, catalog)
    print(
        f"  {deleted} empty nodes removed: {nodes_before - deleted} nodes, ${after:.4f}/hour "
        f"(saved ${before - after:.4f}/hour)",
        file=out,
    )
    return deleted > 0 and after < before and _move(local, out, catalog, replicasets)


REPORT: dict[str, Any] = {  # four pods kept together on one on-demand node (required pod affinity on hostname)
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
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": {"app": "report"}},
                                "topologyKey": "kubernetes.io/hostname",
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


def _move(local: Any, out: TextIO, catalog: Any, replicasets: Any) -> bool:
    """Consolidation that moves pods: shop/report (4 pods together on one on-demand node) scaled to 1 leaves its
    node underused; the disruption Lambda replaces it with a cheaper node (replace workflow: candidate tainted
    karpenter.sh/disrupted, replacement launched and initialized, candidate drained and terminated), and the
    simulated kube-scheduler binds the evicted pod, recreated by its ReplicaSet, to the replacement."""
    from sandbox.stepfunctions import wait_for_execution

    local.scheduler.place_pending = True  # from here on, pending pods go to the nodes they fit
    pods = _pending(REPORT)
    before_claims = {c["metadata"]["name"] for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")}
    local.apply(pods)
    names = [p["metadata"]["name"] for p in pods]

    def report_pods() -> list[dict[str, Any]]:
        return [
            p
            for p in local.kube_server.objects("v1", "Pod", "shop")
            if p["metadata"]["name"].startswith("report-") and not p["metadata"].get("deletionTimestamp")
        ]

    placed = _wait(lambda: all(p["spec"].get("nodeName") for p in report_pods() if p["metadata"]["name"] in names), 60)
    fresh = sorted(
        c["metadata"]["name"]
        for c in local.kube_server.objects("karpenter.sh/v1", "NodeClaim")
        if c["metadata"]["name"] not in before_claims
    )
    # The scheduler may bind the pods once the node is Ready, before the launch workflow marks the NodeClaim
    # Initialized; disruption does not consider an uninitialized node, so wait for that too.
    initialized = len(fresh) == 1 and _wait(
        lambda: any(
            c.get("type") == "Initialized" and c.get("status") == "True"
            for c in (local.kube_server.get("karpenter.sh/v1", "NodeClaim", fresh[0]).get("status") or {}).get(
                "conditions", []
            )
        ),
        60,
    )
    if not placed or not initialized:
        print(f"\nconsolidation that moves pods: shop/report not placed on one new node ({fresh})", file=out)
        return False
    old_node, old_kind = _node_of(local, fresh[0])
    replicasets.track_existing()
    gone = replicasets.scale("shop", "report", 1)
    before = _cluster_price(local, catalog)
    print(
        f"\nconsolidation that moves pods: Deployment shop/report x4 (on-demand, kept together) -> {old_node} "
        f"({old_kind}); scaled to 1 ({len(gone)} pods deleted), ${before:.4f}/hour",
        file=out,
    )
    created = len(replicasets.created)
    t0 = time.perf_counter()
    with consolidate_now(local.kube_server):
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
        lambda: [
            p
            for p in report_pods()
            if p["spec"].get("nodeName") == new_node and (p.get("status") or {}).get("phase") == "Running"
        ],
        30,
    )
    after = _cluster_price(local, catalog)
    ok = _passed(
        out,
        "consolidation",
        {
            "replace execution succeeded": done["status"] == "SUCCEEDED",
            "candidates' terminations succeeded": all(t["status"] == "SUCCEEDED" for t in terminated),
            "the pod moved to the replacement": bool(moved),
            "the evicted pod was recreated": len(replicasets.created) > created,
            "no pod left on the old node": not any(p["spec"].get("nodeName") == old_node for p in report_pods()),
            "the cluster is cheaper": after < before,
        },
    )
    print(
        f"  replace {done['status']}: {old_node} tainted karpenter.sh/disrupted, replacement {new} -> {new_node} "
        f"({new_kind}) initialized, {old_node} drained and terminated\n"
        f"  {len(moved or [])} evicted pod recreated by its ReplicaSet, bound by the scheduler to {new_node}, Running "
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
