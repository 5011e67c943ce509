"""What running nodeflow costs (issue 28): the AWS requests one node's life makes, measured, priced for a month.

    .venv/bin/python -m benchmarks.cost [--quick] [--sizes 10,100,1000] [--replaced-per-day 0.1]
        [--pods-per-node-per-day 20] [--nodes-per-run N:B,...] [--no-scale] [--markdown docs/cost.md] [--json]

1. Count, for real (``sandbox.nodeflow.LocalNodeflow`` on the real control plane of ``sandbox.controlplane``:
   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, with ``sandbox.kwok``'s simulated kubelets; the
   handlers in-process against moto, the real launch and terminate state machines executing; the real agent as a
   subprocess posting to the webhook's Function URL, EventBridge rules to the queues, SQS mappings invoking the
   provisioner, interruption and disruption functions as deployed), phase by phase:

   launch      a ReplicaSet kube-scheduler finds no node for -> agent -> webhook -> bus -> provisioner -> launch
               workflow (launch, register, initialize) -> Node Ready -> pods running (and the disruption rounds
               their events trigger); per node launched
   scheduled   each scheduled function (disruption, gc, interruption) invoked as its schedule does, at one node
   pod         a pod of the node deleted, the ReplicaSet's replacement bound by kube-scheduler: per pod
   terminate   the ReplicaSet scaled to zero, consolidateAfter elapsed (the disruption function's clock moved on,
               nothing else's) -> an Empty decision -> terminate workflow (taint, drain, terminate, finalize) -> the
               instance's state-change events (shutting-down, terminated) on the interruption queue; per node
   burst       ``burst`` nodes launched by one provisioner run (launch batching)
   resync      the agent's periodic resync with nothing pending (per resync round)

   What is counted, per function and phase: Lambda invocations and their in-process wall time (a proxy for billed
   duration: the handler's time, rounded up to the millisecond; the memory is the synthesized stack's), Step
   Functions state transitions as Standard workflows bill them (StateEntered plus retries, from the execution
   history) and the history's bytes (the vended logs of level ALL with execution data), DynamoDB write and read
   request units of each call (``cost_model.billed_units``: dedup records, idempotency, the unavailable-offerings
   cache, the decision log), EventBridge events put, SQS requests, messages the rules deliver and batches the
   mappings take, the bytes each handler writes to stdout (its logs and EMF metrics: CloudWatch Logs ingestion) and
   the distinct custom metrics of the EMF records.
2. Scale: the disruption round at ``--sizes`` nodes (``benchmarks.disruption_lambda`` in a subprocess, its
   fragmented cluster with 10 pods per node: a consolidation candidate every round, so an upper bound), in CPU
   seconds of the function and the API server.
3. Price (``benchmarks.cost_model``): a month of a cluster of each size under the stated churn, and idle, next to
   Karpenter's controller (the chart's 2 replicas of 1 vCPU / 1 GiB) on an m7g.large share and on Fargate.
   ``--markdown`` writes the tables into docs/cost.md between its markers.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import contextvars
import io
import json
import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[1]
for extra in (str(ROOT / "functions"), str(ROOT)):
    if extra not in sys.path:
        sys.path.insert(0, extra)

from benchmarks import cost_model  # noqa: E402
from benchmarks.cost_model import KARPENTER, PRICES, PRICES_AS_OF, Churn, StackFacts  # noqa: E402
from benchmarks.environment import environment  # noqa: E402

REGION = "us-east-1"
CLUSTER = "demo"  # examples/demo's EC2NodeClass selects the sandbox's subnets by this name
SCALE = 0.01  # Step Functions waits and the kubelet's delays, scaled alike (as benchmarks.provisioning)
BOOT_SECONDS = 50.0
READY_SECONDS = 20.0
SCHEDULED_EVENT = {"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {}}
QUEUES = ("provisioning", "disruption", "interruption")
CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("nodeflow_cost_function", default=None)


# ================================================================== counting


class Tally:
    """Counts of one phase: ``{key: number}`` or ``{key: {function or queue: number}}``."""

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self.data: dict[str, Any] = json.loads(json.dumps(data or {}))

    def add(self, key: str, value: float, sub: str | None = None) -> None:
        if sub is None:
            self.data[key] = self.data.get(key, 0) + value
        else:
            inner = self.data.setdefault(key, {})
            inner[sub] = inner.get(sub, 0) + value

    def plus(self, other: Tally) -> Tally:
        out = Tally(self.data)
        for key, value in other.data.items():
            if isinstance(value, dict):
                for sub, v in value.items():
                    out.add(key, v, sub)
            else:
                out.add(key, value)
        return out

    def per(self, units: float) -> Tally:
        def scaled(v: Any) -> Any:
            return {k: scaled(x) for k, x in v.items()} if isinstance(v, dict) else v / units

        return Tally({k: scaled(v) for k, v in self.data.items()})

    def get(self, key: str, sub: str | None = None) -> float:
        value = self.data.get(key, 0)
        if isinstance(value, dict):
            return float(value.get(sub, 0)) if sub is not None else float(sum(value.values()))
        return float(value)


def _metric_keys(record: Mapping[str, Any]) -> list[str]:
    """The custom metrics an EMF record publishes: namespace, name and dimension values, one per dimension set."""
    out = []
    for directive in (record.get("_aws") or {}).get("CloudWatchMetrics") or []:
        for dims in directive.get("Dimensions") or [[]]:
            labels = ",".join(f"{d}={record.get(d)}" for d in sorted(dims))
            out += [f"{directive.get('Namespace')}/{m.get('Name')}{{{labels}}}" for m in directive.get("Metrics", [])]
    return out


class _Stdout(io.TextIOBase):
    """sys.stdout (and the Powertools logger's stream) during the measurement: a handler's writes are counted for
    its function (complete lines: bytes plus CloudWatch's per-event overhead; EMF records parsed for their metrics);
    everything else goes through to the real stdout."""

    def __init__(self, target: TextIO, meter: Meter) -> None:
        self.target = target
        self.meter = meter
        self._partial = threading.local()

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        fn = CURRENT.get()
        if fn is None:
            return self.target.write(s)
        text = getattr(self._partial, "text", "") + s
        *lines, self._partial.text = text.split("\n")
        for line in lines:
            self.meter.log_line(fn, line)
        return len(s)

    def flush(self) -> None:
        self.target.flush()


class Meter:
    """Installs the counting (a botocore hook for the handlers' API calls, stdout capture, the invoking function in
    a context variable that thread pools carry) and files what it sees under the current phase."""

    def __init__(self, local: Any, sources: Mapping[str, Any]) -> None:
        self.local = local
        self.sources = dict(sources)
        self.phase = "setup"
        self.tallies: dict[str, Tally] = {}
        self.metrics: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._invocations = 0
        self._batches = dict.fromkeys(self.sources, 0)
        self._executions: set[str] = set()
        self._undo: list[Callable[[], None]] = []

    # --- what is seen as it happens

    def _tally(self) -> Tally:
        return self.tallies.setdefault(self.phase, Tally())

    def log_line(self, fn: str, line: str) -> None:
        with self._lock:
            t = self._tally()
            t.add("logBytes", len(line.encode()) + 1 + cost_model.LOG_EVENT_OVERHEAD, fn)
            if line.startswith('{"_aws"'):
                t.add("emfRecords", 1, fn)
                with contextlib.suppress(ValueError):
                    self.metrics.setdefault(self.phase, set()).update(_metric_keys(json.loads(line)))

    def api_call(self, fn: str, service: str, operation: str, params: Any, response: Any) -> None:
        units = cost_model.billed_units(service, operation, params, response)
        with self._lock:
            t = self._tally()
            t.add("apiCalls", 1, f"{service}:{operation}")
            for key, value in units.items():
                t.add(key, value)
            if service == "events" and operation == "PutEvents":
                for e in params.get("Entries") or []:
                    t.add("eventKinds", 1, str(e.get("DetailType")))

    # --- install / uninstall

    def install(self) -> Meter:
        from botocore.client import BaseClient

        from nodeflow.handlers.common import logger

        meter = self
        real_call = BaseClient.__dict__["_make_api_call"]

        def _make_api_call(client: Any, operation: str, params: Any) -> Any:
            fn = CURRENT.get()
            if fn is None:
                return real_call(client, operation, params)
            response = None
            try:
                response = real_call(client, operation, params)
                return response
            finally:
                meter.api_call(fn, client.meta.service_model.service_name, operation, params, response)

        BaseClient._make_api_call = _make_api_call
        self._undo.append(lambda: setattr(BaseClient, "_make_api_call", real_call))

        real_submit = concurrent.futures.ThreadPoolExecutor.submit

        def submit(pool: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            return real_submit(pool, contextvars.copy_context().run, fn, *args, **kwargs)

        concurrent.futures.ThreadPoolExecutor.submit = submit  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(concurrent.futures.ThreadPoolExecutor, "submit", real_submit))

        proxy = _Stdout(sys.stdout, self)
        real_stdout = sys.stdout
        sys.stdout = proxy
        self._undo.append(lambda: setattr(sys, "stdout", real_stdout))
        for handler in logging.getLogger(logger.name).handlers:
            if isinstance(handler, logging.StreamHandler):
                old = handler.setStream(proxy)

                def restore(h: logging.StreamHandler[Any] = handler, s: Any = old) -> None:
                    h.setStream(s)

                self._undo.append(restore)
        logger.setLevel("INFO")  # as deployed (POWERTOOLS_LOG_LEVEL=INFO, infra/functions.py)

        dispatch = self.local.dispatch
        inner = dispatch.invocation_context
        prefix = f"nodeflow-{self.local.cluster_name}-"

        @contextlib.contextmanager
        def around(name: str) -> Iterator[None]:
            token = CURRENT.set(name.removeprefix(prefix))
            try:
                with inner(name) if inner is not None else contextlib.nullcontext():
                    yield
            finally:
                CURRENT.reset(token)

        dispatch.invocation_context = around
        self._undo.append(lambda: setattr(dispatch, "invocation_context", inner))
        return self

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    # --- phases

    def begin(self, phase: str) -> None:
        """File what finished since the last call (invocations, mapping batches, executions) under the current
        phase, then count under ``phase``."""
        self.collect()
        self.phase = phase

    def collect(self) -> None:
        from sandbox.stepfunctions import execution_trace

        prefix = f"nodeflow-{self.local.cluster_name}-"
        invocations = self.local.dispatch.invocations
        fresh, self._invocations = invocations[self._invocations :], len(invocations)
        with self._lock:
            self._collect(fresh, prefix, execution_trace)

    def _collect(self, fresh: Sequence[Any], prefix: str, execution_trace: Callable[[Any, str], Any]) -> None:
        t = self._tally()
        for inv in fresh:
            fn = inv.function_name.removeprefix(prefix)
            t.add("invocations", 1, fn)
            t.add("seconds", inv.duration, fn)
            t.add("billedSeconds", max(1, -(-inv.duration * 1000 // 1)) / 1000, fn)
            if inv.error:
                t.add("errors", 1, fn)
            result = inv.result.get("result") if isinstance(inv.result, dict) else None
            if fn == "disruption" and isinstance(result, dict) and result.get("command"):
                t.add("commands", 1)
        for queue, source in self.sources.items():
            batches = source.snapshot()
            for b in batches[self._batches[queue] :]:
                t.add("batches", 1, queue)
                t.add("messages", len(b.records), queue)
            self._batches[queue] = len(batches)
        sfn = self.local.clients.sfn
        for arn in (self.local.launch_arn, self.local.terminate_arn, self.local.replace_arn):
            for e in _executions(sfn, arn):
                if e["executionArn"] in self._executions or e["status"] == "RUNNING":
                    continue
                self._executions.add(e["executionArn"])
                trace = execution_trace(sfn, e["executionArn"])
                workflow = arn.rsplit(":", 1)[-1].removeprefix(prefix)
                t.add("executions", 1, workflow)
                t.add("transitions", trace.transitions + sum(v.retries for v in trace.states))
                t.add("historyBytes", sum(len(json.dumps(ev, default=str)) for ev in _history(sfn, e["executionArn"])))

    def tally(self, *phases: str) -> Tally:
        out = Tally()
        for p in phases:
            out = out.plus(self.tallies.get(p, Tally()))
        return out


def _executions(sfn: Any, arn: str) -> list[dict[str, Any]]:
    return [
        e for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=arn) for e in page["executions"]
    ]


def _history(sfn: Any, arn: str) -> list[dict[str, Any]]:
    pages = sfn.get_paginator("get_execution_history").paginate(executionArn=arn)
    return [e for page in pages for e in page["events"]]


# ================================================================== the cluster's life


def settle(local: Any, quiet: float, timeout: float = 180.0) -> None:
    """Wait until nothing has been invoked for ``quiet`` seconds, no workflow runs and the route queues are empty
    (the agent's batches, the mappings and the workflows all done)."""
    sqs, sfn = local.clients.sqs, local.clients.sfn
    urls = local.world.queue_urls()
    arns = (local.launch_arn, local.terminate_arn, local.replace_arn)

    def busy() -> bool:
        for url in urls.values():
            attrs = sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
            )["Attributes"]
            if any(int(v) for v in attrs.values()):
                return True
        return any(sfn.list_executions(stateMachineArn=a, statusFilter="RUNNING")["executions"] for a in arns)

    deadline = time.monotonic() + timeout
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        count = len(local.dispatch.invocations)
        if count != seen or busy():
            seen, since = count, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.05)
    raise TimeoutError(f"benchmarks.cost: the sandbox did not settle within {timeout:.0f} s")


def _pods(kube: Any, app: str | None = None) -> list[dict[str, Any]]:
    """The pods of ``default`` not being deleted (of workload ``app`` if given)."""
    selector = f"app={app}" if app else None
    pods = kube.list_items("v1", "Pod", "default", label_selector=selector)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _claims(kube: Any) -> list[dict[str, Any]]:
    return list(kube.objects("karpenter.sh/v1", "NodeClaim"))


def _invocations(local: Any, fn: str) -> int:
    name = local.function_name(fn)
    return sum(1 for inv in local.dispatch.invocations if inv.function_name == name)


def _running(kube: Any, app: str, count: int) -> bool:
    """Exactly ``count`` pods of ``app``, every one bound and Running, none of them being deleted."""
    pods = kube.list_items("v1", "Pod", "default", label_selector=f"app={app}")
    return len(pods) == count and all(
        p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Running" for p in pods
    )


def _scale(kube: Any, app: str, replicas: int) -> None:
    from tests.realk8s.workloads import TEMPLATE_HASH

    kube.patch("apps/v1", "ReplicaSet", f"{app}-{TEMPLATE_HASH}", {"spec": {"replicas": replicas}})


def _scheduled(local: Any, meter: Meter, phase: str, runs: int, quiet: float) -> None:
    for fn in ("disruption", "gc", "interruption"):
        meter.begin(f"{phase}:{fn}")
        for _ in range(runs):
            local.invoke(fn, SCHEDULED_EVENT)
        settle(local, quiet)


def _later_for(fn: str, clock: Callable[[], datetime], ahead: timedelta) -> Callable[[], datetime]:
    """The handlers' clock, ``ahead`` for function ``fn`` only (its consolidateAfter elapses without waiting; the
    webhook, which refuses requests signed 5 minutes from its clock, keeps the real time)."""
    return lambda: clock() + ahead if CURRENT.get() == fn else clock()


def measure(*, pods: int = 4, churn: int = 10, runs: int = 3, burst: int = 10, quiet: float = 1.0) -> dict[str, Any]:
    """Run the phases (module docstring) once; the per-unit tallies as JSON (``cost_model.monthly``'s input)."""
    from moto import mock_aws

    from nodeflow.handlers import runtime
    from sandbox.agent import AgentProcess
    from sandbox.aws import MOCK_CONFIG, Clients
    from sandbox.controlplane import ControlPlane
    from sandbox.controlplane.facade import RealKubeAPI, wait_for
    from sandbox.esm import SqsEventSource
    from sandbox.nodeflow import LAUNCH_SUBSTITUTIONS, REPLACE_SUBSTITUTIONS, TERMINATE_SUBSTITUTIONS, LocalNodeflow
    from tests.fixtures.aws_events import STATE_CHANGE, variant
    from tests.functional.lifecycle.conftest import demo_node_pools
    from tests.realk8s.workloads import replica_set

    shape = {"cpu": "500m", "memory": "1Gi"}
    apart = {  # one burst pod per node: the burst launches ``burst`` nodes from one provisioner run
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "burst"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    env = {
        "AWS_ACCESS_KEY_ID": "cost",
        "AWS_SECRET_ACCESS_KEY": "cost",
        "AWS_SESSION_TOKEN": "cost",
        "AWS_DEFAULT_REGION": REGION,
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
        "POWERTOOLS_METRICS_DISABLED": "false",  # the EMF records are part of the bill
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    load_before = os.getloadavg()[0]
    plane = ControlPlane(controllers=True)  # etcd, kube-apiserver, controller-manager, kube-scheduler
    kube = None
    try:
        plane.start()
        kube = RealKubeAPI(plane).start()
        with environment(env), mock_aws(config=MOCK_CONFIG):
            local = LocalNodeflow(
                Clients(region=REGION),
                kube,
                cluster_name=CLUSTER,
                wait_scale=SCALE,
                kubelet_register_after=BOOT_SECONDS * SCALE,
                kubelet_ready_after=READY_SECONDS * SCALE,
                kubelet_interval=2 * SCALE,
                env={"POWERTOOLS_LOG_LEVEL": "INFO"},
            )
            with local:
                pools = demo_node_pools()
                for pool in pools:
                    pool.get("spec", {}).pop("limits", None)
                local.apply(pools)
                local.start_webhook()
                local.start_event_source()
                local.start_interruption_source()
                disruption = SqsEventSource(  # the disruption function's mapping as deployed: 10 a batch, no window
                    local.clients.sqs,
                    local.world.disruption_queue_url,
                    f"arn:aws:sqs:{REGION}:{local.world.account_id}:nodeflow-{CLUSTER}-disruption",
                    lambda event: local.invoke("disruption", event),
                    batch_size=10,
                    window_seconds=0.0,
                ).start()
                meter = Meter(
                    local,
                    {
                        "provisioning": local.event_source,
                        "interruption": local.interruption_source,
                        "disruption": disruption,
                    },
                ).install()
                agent = AgentProcess(local.agent_env()).start()
                try:
                    agent.wait_ready()
                    settle(local, quiet)
                    for fn in ("disruption", "gc", "interruption"):  # warm (the schedules keep them warm)
                        local.invoke(fn, SCHEDULED_EVENT)
                    settle(local, quiet)

                    # ---- launch: a ReplicaSet of ``pods`` pods kube-scheduler finds no node for -> one node
                    meter.begin("launch")
                    local.apply([replica_set("app", pods, **shape)])
                    wait_for("the pods running on a launched node", lambda: _running(kube, "app", pods), 180)
                    settle(local, quiet)
                    # one node, or more when the agent's reports reached the provisioner in separate runs: the
                    # lifecycle is counted per node launched
                    instance_ids = [c["status"]["providerID"].rsplit("/", 1)[-1] for c in _claims(kube)]

                    # ---- scheduled functions at one node
                    _scheduled(local, meter, "scheduled", runs, quiet)

                    # ---- pods replaced on the node, one after the other (deleted; the ReplicaSet's replacement
                    # bound by kube-scheduler to the room the deleted one left)
                    meter.begin("pod")
                    for _ in range(churn):
                        (victim, *_rest) = sorted(p["metadata"]["name"] for p in _pods(kube, "app"))
                        kube.delete("v1", "Pod", victim)

                        def replaced(v: str = victim) -> bool:
                            return _running(kube, "app", pods) and v not in {
                                p["metadata"]["name"] for p in _pods(kube, "app")
                            }

                        wait_for("a replacement pod running", replaced, 120)
                        settle(local, quiet)
                    replaced_claims = len(_claims(kube)) - len(instance_ids)  # a replacement launched a node

                    # ---- terminate: the workload scaled to zero, consolidateAfter elapsed (the disruption
                    # function's clock only), the Empty decision, the terminate workflow, the instance's events
                    meter.begin("terminate")
                    rt = runtime.runtime()
                    clock = rt.clock
                    rt.clock = _later_for("disruption", clock, timedelta(minutes=5))
                    _scale(kube, "app", 0)
                    wait_for("the pods gone", lambda: not kube.list_items("v1", "Pod", "default"), 120)
                    settle(local, quiet)
                    if _claims(kube) and not local.terminate_executions():  # the schedule's next round decides
                        local.invoke("disruption", SCHEDULED_EVENT)
                    wait_for("the NodeClaims terminated", lambda: not _claims(kube), 180)
                    settle(local, quiet)
                    for state in ("shutting-down", "terminated"):  # EC2 puts these on the default bus
                        for instance_id in instance_ids:
                            event = variant(STATE_CHANGE, instance_id=instance_id, detail={"state": state})
                            local.send_aws_event(event)
                    settle(local, quiet)
                    rt.clock = clock

                    # ---- a burst: ``burst`` nodes from one provisioner run
                    meter.begin("burst")
                    local.apply([replica_set("burst", burst, cpu="1", memory="1Gi", affinity=apart)])
                    wait_for("the burst's pods running", lambda: _running(kube, "burst", burst), 300)
                    settle(local, quiet)

                    # ---- the agent's resync with nothing pending (a new agent resyncing every second)
                    posted = _invocations(local, "webhook")
                    agent.stop()
                    agent = AgentProcess(local.agent_env(RESYNC_SECONDS="1")).start()
                    agent.wait_ready()
                    meter.begin("restart")  # the new agent's first LIST announces everything once: not counted
                    wait_for("the new agent's first events", lambda: _invocations(local, "webhook") > posted, 120)
                    settle(local, quiet)
                    meter.begin("resync")
                    started = time.monotonic()
                    time.sleep(max(3.5, 3 * quiet))
                    settle(local, quiet)
                    resync_rounds = (time.monotonic() - started) / 1.0
                    meter.begin("done")
                finally:
                    agent.stop()
                    disruption.stop()
                    meter.uninstall()
    finally:
        if kube is not None:
            kube.stop()
        plane.stop()

    nodes = len(instance_ids)
    lifecycle = meter.tally("launch", "terminate").per(nodes)
    workflow_fns = sorted(
        {*LAUNCH_SUBSTITUTIONS.values(), *TERMINATE_SUBSTITUTIONS.values(), *REPLACE_SUBSTITUTIONS.values()}
    )
    metrics = sorted(set().union(*(m for p, m in meter.metrics.items() if p not in ("setup", "restart"))))
    return {
        "launch": meter.tally("launch").per(nodes).data,
        "terminate": meter.tally("terminate").per(nodes).data,
        "lifecycleNodes": nodes,
        "lifecycle": lifecycle.data,
        "pod": meter.tally("pod").per(churn).data,
        "scheduled": {fn: meter.tally(f"scheduled:{fn}").per(runs).data for fn in ("disruption", "gc", "interruption")},
        "burst": meter.tally("burst").data,
        "burstNodes": burst,
        "resync": meter.tally("resync").per(resync_rounds).data,
        "clusterNodes": {"small": 1},
        "podsPerNode": pods,
        "loadAverage": [round(load_before, 1), round(os.getloadavg()[0], 1)],  # the 1-minute figure, before / after
        "cpus": os.cpu_count(),
        "nodesLaunchedByChurn": replaced_claims,
        "metrics": metrics,
        "workflowFunctions": workflow_fns,
        "errors": {p: t.data.get("errors", {}) for p, t in meter.tallies.items() if t.data.get("errors")},
    }


# ================================================================== the stack, the scale


def stack_facts() -> StackFacts:
    """Synthesize the default stack (clusterName only; no bundling) and read what the bill depends on."""
    import tempfile

    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    import aws_cdk as cdk

    from infra.config import NodeflowConfig
    from infra.stack import NodeflowStack
    from nodeflow.handlers.runtime import Settings

    with tempfile.TemporaryDirectory(prefix="nodeflow-cost-") as out:
        context = json.loads((ROOT / "cdk.json").read_text()).get("context", {})
        app = cdk.App(outdir=out, context={**context, "aws:cdk:bundling-stacks": []})
        config = NodeflowConfig.from_mapping({"clusterName": CLUSTER})
        NodeflowStack(app, config.stack_name, config=config)
        app.synth()
        template = json.loads((Path(out) / f"{config.stack_name}.template.json").read_text())
    return facts_from_template(template, Settings.__dataclass_fields__["disruption_validation_seconds"].default)


def facts_from_template(template: Mapping[str, Any], validation_default: Any) -> StackFacts:
    resources = template["Resources"]
    prefix = f"nodeflow-{CLUSTER}-"
    names = {
        lid: r["Properties"]["FunctionName"].removeprefix(prefix)
        for lid, r in resources.items()
        if r["Type"] == "AWS::Lambda::Function"
    }
    memory, validation = {}, float(validation_default)
    for lid, suffix in names.items():
        props = resources[lid]["Properties"]
        if props.get("Architectures", ["x86_64"]) != ["arm64"]:
            raise ValueError(f"{suffix}: priced as arm64, synthesized as {props.get('Architectures')}")
        memory[suffix] = int(props.get("MemorySize", 128))
        variables = (props.get("Environment") or {}).get("Variables") or {}
        if suffix == "disruption" and "DISRUPTION_VALIDATION_SECONDS" in variables:
            validation = float(variables["DISRUPTION_VALIDATION_SECONDS"])
    schedules: dict[str, float] = {}
    for r in resources.values():
        if r["Type"] != "AWS::Scheduler::Schedule":
            continue
        props = r["Properties"]
        expression = props["ScheduleExpression"]  # rate(N minute[s])
        count, unit = expression.removeprefix("rate(").removesuffix(")").split()
        per_hour = {"minute": 60.0, "minutes": 60.0, "hour": 1.0, "hours": 1.0}[unit] / float(count)
        target = props["Target"]["Arn"]["Fn::GetAtt"][0]
        schedules[names[target]] = schedules.get(names[target], 0.0) + per_hour
    count = lambda kind: sum(1 for r in resources.values() if r["Type"] == kind)  # noqa: E731
    return StackFacts(
        memory_mb=memory,
        schedules_per_hour=schedules,
        queue_mappings=count("AWS::Lambda::EventSourceMapping"),
        alarms=count("AWS::CloudWatch::Alarm"),
        dashboards=count("AWS::CloudWatch::Dashboard"),
        secrets=count("AWS::SecretsManager::Secret"),
        validation_seconds=validation,
        in_vpc=any("VpcConfig" in resources[lid]["Properties"] for lid in names),
    )


def disruption_scale(sizes: Sequence[int]) -> dict[str, float]:
    """The disruption round's seconds at each size: ``benchmarks.disruption_lambda`` (2 invocations; the second
    one: warm, NodeClaim conditions already written) in a subprocess, 10 pods per node. Its CPU seconds plus the
    API server's it waited on (kube-apiserver's and etcd's): wall seconds on a shared benchmark machine measure the
    other tenants."""
    from benchmarks.all import last_json

    out: dict[str, float] = {}
    for n in sizes:
        args = [sys.executable, "-m", "benchmarks.disruption_lambda", "--nodes", str(n), "--pods", str(10 * n)]
        done = subprocess.run(
            [*args, "--invocations", "2", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=900, check=True
        )
        second = {r["metric"]: r["value"] for r in last_json(done.stdout) if r["case"].startswith("invocation 2")}
        out[str(n)] = round(second["total CPU"] + second["server CPU"], 3)
    return out


# ================================================================== the report

UNITS = (  # measured unit -> (label, where in ``measured``)
    ("a node's lifecycle (launch + terminate)", ("lifecycle",)),
    ("a pod replaced on a node", ("pod",)),
    ("an agent resync round, nothing pending", ("resync",)),
    ("a scheduled disruption round (1 node)", ("scheduled", "disruption")),
    ("a scheduled gc run (1 node)", ("scheduled", "gc")),
    ("a scheduled interruption run (1 node)", ("scheduled", "interruption")),
)
COLUMNS = (  # usage key -> (header, scale to the unit shown, format)
    ("lambdaRequests", "Lambda invocations", 1.0, "{:,.2f}"),
    ("lambdaGbSeconds", "Lambda GB-s", 1.0, "{:,.2f}"),
    ("stateTransitions", "Step Functions transitions", 1.0, "{:,.1f}"),
    ("writeUnits", "DynamoDB WRU", 1.0, "{:,.1f}"),
    ("readUnits", "DynamoDB RRU", 1.0, "{:,.1f}"),
    ("events", "EventBridge events", 1.0, "{:,.2f}"),
    ("sqsRequests", "SQS requests", 1.0, "{:,.1f}"),
    ("logBytes", "CloudWatch Logs KB", 1e-3, "{:,.1f}"),
)


def _at(measured: Mapping[str, Any], path: Sequence[str]) -> Mapping[str, Any]:
    out: Any = measured
    for key in path:
        out = out.get(key, {})
    return out  # type: ignore[no-any-return]


def report(
    measured: Mapping[str, Any], facts: StackFacts, churn: Churn, sizes: Sequence[int], scale: Mapping[str, float]
) -> dict[str, Any]:
    idle = Churn(0.0, 0.0, churn.nodes_per_provisioner_run)
    idle_hours = []
    for n in sizes:
        usage = cost_model.monthly(n, measured, facts, idle, scale)["usage"]
        hour = {k: usage[k] / cost_model.HOURS_PER_MONTH for k, *_ in COLUMNS if k in usage}
        hour["logBytes"] = usage["logGb"] * 1e9 / cost_model.HOURS_PER_MONTH
        idle_hours.append({"nodes": n, **hour})
    agent = cost_model.ec2_share(cost_model.agent_sizing())
    table = [cost_model.monthly(n, measured, facts, churn, scale) for n in sizes]
    idle_table = [cost_model.monthly(n, measured, facts, idle, scale) for n in sizes]
    for row in (*table, *idle_table):  # the AWS services plus the agent pod: what nodeflow costs
        row["nodeflow"] = row["total"] + agent["ec2Monthly"]
    return {
        "measured": measured,
        "facts": facts.to_json(),
        "scale": dict(scale),
        "churn": {"replacedPerDay": churn.replaced_per_day, "podsPerNodePerDay": churn.pods_per_node_per_day},
        "prices": {k: {"usd": v.usd, "per": v.per, "source": v.source} for k, v in PRICES.items()},
        "pricesAsOf": PRICES_AS_OF,
        "units": {label: cost_model.unit_figures(_at(measured, path), facts) for label, path in UNITS},
        "idleHour": idle_hours,
        "table": table,
        "idleTable": idle_table,
        "karpenter": {**cost_model.ec2_share(KARPENTER), "sizing": KARPENTER.source},
        "agent": agent,
    }


def _money(v: float) -> str:
    return f"{v:,.2f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: int | None = None) -> list[str]:
    """A Markdown table; columns 2 to ``numeric`` (all but the first by default) right-aligned."""
    right = len(header) - 1 if numeric is None else numeric - 1
    marks = ["---"] + ["---:"] * right + ["---"] * (len(header) - 1 - right)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _cells(figures: Mapping[str, float]) -> list[str]:
    return [fmt.format(figures.get(key, 0.0) * factor) for key, _, factor, fmt in COLUMNS]


def render(out: Mapping[str, Any]) -> str:
    """The report as Markdown: what docs/cost.md shows between its markers."""
    m, k, a, churn = out["measured"], out["karpenter"], out["agent"], out["churn"]
    headers = [h for _, h, *_ in COLUMNS]
    lines = [
        f"#### Measured per unit (a ReplicaSet of {m['podsPerNode']} pods: {m['lifecycleNodes']} node(s) launched "
        "for it, the lifecycle divided among them)",
        "",
    ]
    lines += _table(["unit", *headers], [[label, *_cells(f)] for label, f in out["units"].items()])
    lines += [
        "",
        "Lambda seconds are the handlers' wall time in-process on the benchmark machine (load average "
        f"{m['loadAverage'][0]:g} before, {m['loadAverage'][1]:g} after, on {m['cpus']} CPUs): an upper bound, higher "
        "the busier the machine.",
    ]
    lines += ["", "#### An idle hour (no churn: the schedules, the agent's resyncs, the idle queue polls)", ""]
    lines += _table(["nodes", *headers], [[f"{h['nodes']:,}", *_cells(h)] for h in out["idleHour"]])
    scale = out["scale"]
    if scale:
        lines += [
            "",
            "Disruption round at each size, CPU seconds of the function and the API server (kube-apiserver + etcd) "
            "(`benchmarks.disruption_lambda`, 10 pods a node): "
            + ", ".join(f"{int(n):,} nodes {v:.2f} s" for n, v in sorted(scale.items(), key=lambda x: int(x[0]))),
        ]
    lines += [
        "",
        f"#### A month (730 h) with churn: {churn['replacedPerDay']:.0%} of the nodes replaced a day, "
        f"{churn['podsPerNodePerDay']:g} pods replaced a day per node",
        "",
    ]
    rows = []
    for row, idle in zip(out["table"], out["idleTable"], strict=True):
        u = row["usd"]
        rows.append(
            [
                f"{row['nodes']:,}",
                f"{row['usage']['lifecyclesPerDay']:g}",
                f"{row['usage']['podsPerDay']:,.0f}",
                _money(u["Lambda"]),
                _money(u["Step Functions"]),
                _money(u["DynamoDB"]),
                _money(u["EventBridge"] + u["SQS"]),
                _money(u["CloudWatch"] + u["X-Ray"]),
                _money(a["ec2Monthly"]),
                f"**{_money(row['nodeflow'])}**",
                _money(idle["nodeflow"]),
                _money(k["ec2Monthly"]),
                _money(k["fargateMonthly"]),
            ]
        )
    lines += _table(
        [
            "nodes",
            "nodes replaced / day",
            "pods replaced / day",
            "Lambda",
            "Step Functions",
            "DynamoDB",
            "EventBridge + SQS",
            "CloudWatch + X-Ray",
            "agent pod",
            "nodeflow",
            "nodeflow idle",
            f"Karpenter on {k['instance']}",
            "Karpenter on Fargate",
        ],
        rows,
    )
    lines += [
        "",
        f"USD a month, us-east-1 list prices as of {out['pricesAsOf']}. Karpenter: 2 replicas of 1 vCPU / 1 GiB "
        f"(its chart's replicas and suggested resources), as their share of an on-demand {k['instance']} "
        f"(${k['instanceHourly']:.4f}/h; share {k['share']:.3f} each) or as Fargate pods. "
        f"nodeflow's agent pod: {a['share']:.3f} of the same instance.",
    ]
    lines += ["", "#### Prices used", ""]
    lines += _table(
        ["item", "USD", "per", "source"],
        [[key, f"{p['usd']:.10g}", p["per"], p["source"]] for key, p in out["prices"].items()],
        numeric=2,
    )
    lines.append("")
    lines.append(f"EC2: {a['priceFile']}")
    return "\n".join(lines)


BEGIN, END = "<!-- benchmarks.cost: begin -->", "<!-- benchmarks.cost: end -->"


def write_markdown(path: Path, text: str, command: str) -> None:
    """Replace what is between the markers of ``path`` with ``text`` (and the command that made it)."""
    doc = path.read_text()
    if BEGIN not in doc or END not in doc:
        raise ValueError(f"{path}: no {BEGIN} ... {END} markers to write between")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n\nMade by `{command}`.\n\n{text}\n\n{END}{tail}")


def _command(argv: Sequence[str]) -> str:
    """The command line that made the figures, without the options that only say where they go."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--markdown":
            skip = True
        elif arg != "--json" and not arg.startswith("--markdown="):
            kept.append(arg)
    return " ".join([".venv/bin/python -m benchmarks.cost", *kept])


def _batches(text: str) -> dict[int, float]:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        nodes, _, batch = part.partition(":")
        out[int(nodes)] = float(batch)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smallest phases (2 pods, 1 replaced, 1 run, burst of 2)")
    parser.add_argument("--sizes", default="10,100,1000", help="cluster sizes of the table (nodes)")
    parser.add_argument("--replaced-per-day", type=float, default=0.10, help="fraction of nodes replaced a day")
    parser.add_argument("--pods-per-node-per-day", type=float, default=20.0, help="pods replaced a day per node")
    parser.add_argument("--nodes-per-run", default="", help="N:B,... nodes one provisioner run launches at size N")
    parser.add_argument("--no-scale", action="store_true", help="skip the disruption round at --sizes")
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables between the markers of this file")
    parser.add_argument("--json", action="store_true", help="also print everything as JSON, last")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    began = time.monotonic()
    facts = stack_facts()
    if args.quick:
        measured = measure(pods=2, churn=1, runs=1, burst=2, quiet=0.8)
    else:
        measured = measure()
    scale = {} if args.no_scale else disruption_scale(sizes)
    churn = Churn(args.replaced_per_day, args.pods_per_node_per_day, _batches(args.nodes_per_run))
    out = report(measured, facts, churn, sizes, scale)
    out["seconds"] = round(time.monotonic() - began, 1)
    text = render(out)
    print(text)
    print(f"\n(took {out['seconds']:.0f} s; errors: {measured['errors'] or 'none'})")
    if args.markdown is not None:
        write_markdown(args.markdown, text, _command(argv if argv is not None else sys.argv[1:]))
    if args.json:
        print(json.dumps(out, indent=1, sort_keys=True, default=str))
    return 1 if measured["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
