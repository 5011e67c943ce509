"""The arithmetic of ``benchmarks.cost``: measured counts x stated assumptions x list prices -> USD per month.

Pure: no AWS, no Kubernetes, no clock. ``benchmarks.cost`` measures the counts (``Tally`` as JSON: one node's
lifecycle, one pod replaced, one scheduled invocation, a burst of nodes launched by one provisioner run, the
disruption round at cluster sizes) and the stack's configuration (``StackFacts``, from the synthesized template);
``monthly`` turns them into one month of a cluster of ``n`` nodes under ``Churn``.

What this module decides (each rule is stated next to its code):

- Billed Lambda duration: the in-process wall time of the handler (a proxy: Lambda bills the handler's duration,
  rounded up to the millisecond, and the INIT phase of a cold start), plus the disruption round's validation wait
  (``DISRUPTION_VALIDATION_SECONDS``, 0 in the sandbox) for every round that found a command.
- The disruption function runs on its schedule and on every cluster-change message (its SQS mapping, reserved
  concurrency 1): rounds per second ``lambda / (exp(-lambda d) + lambda d)`` for arrivals ``lambda`` (Poisson)
  and a round of ``d`` seconds, each round absorbing what arrived while it ran: ``lambda`` when idle, ``1 / d``
  when busy.
- Durations grow with the cluster: the disruption round measured at each size (``scale``: CPU seconds of the
  invocation and of the API server it waited on, so a loaded benchmark machine does not inflate it) minus the
  same at one node is added to the measured duration of every function that reads the whole cluster (disruption,
  provisioner, gc, interruption): an upper bound for the last three, which read less than a disruption round.
- The agent resyncs every ``AGENT_RESYNC_SECONDS`` (its default): each round is charged what one measured
  resync round with nothing pending cost.
- Cold starts: a function invoked less than once per ``WARM_INTERVAL_MINUTES`` pays its INIT each time, bounded
  by the handler import budget (``benchmarks.imports.TARGET_SECONDS``).
- Free tiers are left out (every request is priced); so are storage (logs kept a month, DynamoDB items with TTLs,
  point-in-time recovery of a few MB), data transfer, NAT (the Lambdas run outside a VPC unless ``lambdaVpcId``
  is set) and the EKS control plane, which both controllers need.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "AGENT_MANIFEST",
    "DAYS_PER_MONTH",
    "EC2_PRICES",
    "HOURS_PER_MONTH",
    "KARPENTER",
    "PRICES",
    "PRICES_AS_OF",
    "Churn",
    "Price",
    "StackFacts",
    "billed_units",
    "disruption_rounds_per_second",
    "item_bytes",
    "monthly",
    "pod_share",
    "sqs_requests",
    "unit_figures",
]

ROOT = Path(__file__).resolve().parents[1]
HOURS_PER_MONTH = 730.0
DAYS_PER_MONTH = HOURS_PER_MONTH / 24
WARM_INTERVAL_MINUTES = 5.0  # an execution environment idle longer than this is assumed recycled
INIT_SECONDS = 0.5  # the handler import budget (benchmarks.imports.TARGET_SECONDS): a cold start's INIT at most
PLATFORM_LOG_LINES = 4  # START, END, REPORT and the X-Ray trace line Lambda writes per invocation
# One invocation's platform lines as Lambda writes them (active tracing): their bytes, ids at their real lengths.
PLATFORM_LOG = (
    "START RequestId: 3f1c2a8e-6b1d-4c55-9a7e-0d2f4b6c8e10 Version: $LATEST\n"
    "END RequestId: 3f1c2a8e-6b1d-4c55-9a7e-0d2f4b6c8e10\n"
    "REPORT RequestId: 3f1c2a8e-6b1d-4c55-9a7e-0d2f4b6c8e10\tDuration: 123.45 ms\tBilled Duration: 124 ms\t"
    "Memory Size: 2048 MB\tMax Memory Used: 187 MB\t\n"
    "XRAY TraceId: 1-6745f3a2-0a1b2c3d4e5f60718293a4b5\tSegmentId: 0a1b2c3d4e5f6071\tSampled: true\t\n"
)
LOG_EVENT_OVERHEAD = 26  # bytes CloudWatch Logs counts per log event on top of its message
AGENT_RESYNC_SECONDS = 300.0  # agent/nodeflow_agent/config.py: resync_seconds' default
CLUSTER_WIDE = ("disruption", "provisioner", "gc", "interruption")  # their duration grows with the cluster
ESM_IDLE_POLLERS = 5  # long-polling ReceiveMessage loops an idle SQS event-source mapping keeps (20 s each)
LONG_POLL_SECONDS = 20.0


@dataclass(frozen=True, slots=True)
class Price:
    usd: float
    per: str
    source: str


# us-east-1 list prices as published on the pages named (read for this benchmark; stated as of the date of the
# repo's EC2 price file). Re-check them before quoting a bill.
PRICES_AS_OF = "2026-07-20"
PRICES: Mapping[str, Price] = {
    "lambda_gb_second": Price(
        0.0000133334, "GB-second, arm64 (first 7.5 billion GB-s a month)", "https://aws.amazon.com/lambda/pricing/"
    ),
    "lambda_request": Price(0.20 / 1e6, "request", "https://aws.amazon.com/lambda/pricing/"),
    "sfn_transition": Price(
        0.025 / 1e3, "state transition, Standard", "https://aws.amazon.com/step-functions/pricing/"
    ),
    "ddb_write_unit": Price(
        0.625 / 1e6, "write request unit, on-demand", "https://aws.amazon.com/dynamodb/pricing/on-demand/"
    ),
    "ddb_read_unit": Price(
        0.125 / 1e6, "read request unit, on-demand", "https://aws.amazon.com/dynamodb/pricing/on-demand/"
    ),
    "eventbridge_event": Price(1.00 / 1e6, "custom event (64 KB chunk)", "https://aws.amazon.com/eventbridge/pricing/"),
    "scheduler_invocation": Price(
        1.00 / 1e6, "EventBridge Scheduler invocation", "https://aws.amazon.com/eventbridge/pricing/"
    ),
    "sqs_request": Price(0.40 / 1e6, "request (64 KB chunk), standard queue", "https://aws.amazon.com/sqs/pricing/"),
    "logs_gb": Price(
        0.50, "GB ingested, CloudWatch Logs standard (Lambda logs)", "https://aws.amazon.com/cloudwatch/pricing/"
    ),
    "vended_logs_gb": Price(
        0.50, "GB ingested, vended logs first 10 TB (Step Functions)", "https://aws.amazon.com/cloudwatch/pricing/"
    ),
    "metric_month": Price(0.30, "custom metric a month (first 10,000)", "https://aws.amazon.com/cloudwatch/pricing/"),
    "alarm_month": Price(0.10, "standard-resolution alarm a month", "https://aws.amazon.com/cloudwatch/pricing/"),
    "dashboard_month": Price(3.00, "dashboard a month", "https://aws.amazon.com/cloudwatch/pricing/"),
    "xray_trace": Price(5.00 / 1e6, "trace recorded", "https://aws.amazon.com/xray/pricing/"),
    "secret_month": Price(
        0.40, "secret a month (webhookAuth=hmac only)", "https://aws.amazon.com/secrets-manager/pricing/"
    ),
    "fargate_vcpu_hour": Price(
        0.04048, "vCPU-hour, Linux/x86 (EKS pods run x86)", "https://aws.amazon.com/fargate/pricing/"
    ),
    "fargate_gb_hour": Price(0.004445, "GB-hour, Linux/x86", "https://aws.amazon.com/fargate/pricing/"),
}
EC2_PRICES = ROOT / "functions" / "nodeflow" / "catalog" / "data" / "ec2-ondemand-prices-us-east-1.json"
SHARE_INSTANCE = "m7g.large"  # 2 vCPU, 8 GiB, Graviton: the m-family node a controller pod shares
FARGATE_POD_OVERHEAD_GIB = 0.25  # Fargate adds 256 MiB to a pod's memory for kubelet, kube-proxy, containerd


@dataclass(frozen=True, slots=True)
class ControllerSizing:
    replicas: int
    cpu: float  # vCPU requested per replica
    memory_gib: float
    source: str


# Karpenter v1.14.1: charts/karpenter/values.yaml deploys ``replicas: 2`` and leaves ``controller.resources`` empty,
# its comment suggesting requests and limits of cpu 1 and memory 1Gi; the getting-started scripts set exactly
# those (website/.../getting-started-with-karpenter/scripts/step08-apply-helm-chart.sh).
KARPENTER = ControllerSizing(
    2,
    1.0,
    1.0,
    "aws/karpenter-provider-aws v1.14.1: charts/karpenter/values.yaml (replicas: 2; resources: the commented "
    "cpu 1 / memory 1Gi) and the getting-started step08-apply-helm-chart.sh (--set controller.resources...)",
)
AGENT_MANIFEST = ROOT / "agent" / "manifests" / "30-deployment.yaml"


@dataclass(frozen=True, slots=True)
class StackFacts:
    """What the synthesized stack configures that the bill depends on."""

    memory_mb: Mapping[str, int]  # function suffix -> MemorySize
    schedules_per_hour: Mapping[str, float]  # function suffix -> scheduled invocations an hour
    queue_mappings: int  # SQS event-source mappings (each polls its queue when idle)
    alarms: int
    dashboards: int
    secrets: int
    validation_seconds: float  # the disruption round's validation wait (Settings default unless configured)
    in_vpc: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Churn:
    """A typical day of a cluster: the assumptions under the table."""

    replaced_per_day: float = 0.10  # fraction of the nodes replaced a day (consolidation, drift, expiry, spot)
    pods_per_node_per_day: float = 20.0  # pods replaced a day per node, on capacity that is already there
    nodes_per_provisioner_run: Mapping[int, float] = field(default_factory=dict)  # cluster size -> launch batching

    def batch(self, nodes: int) -> float:
        """Nodes one provisioner run launches in a cluster of ``nodes``: given, else 1 % of the cluster (one run
        per node up to 100 nodes; a drift or expiry roll of 1,000 nodes replaces them ten at a time)."""
        return float(self.nodes_per_provisioner_run.get(nodes, max(1.0, nodes / 100)))


def pod_share(cpu: float, memory_gib: float, instance: Mapping[str, float]) -> float:
    """The fraction of ``instance`` (vcpus, memory_gib) a pod with these requests keeps others from using."""
    return max(cpu / instance["vcpus"], memory_gib / instance["memory_gib"])


def fargate_hourly(cpu: float, memory_gib: float) -> float:
    """A pod on Fargate: its requests plus Fargate's 256 MiB, rounded up to a Fargate size (0.25 vCPU with 0.5, 1
    or 2 GB; 0.5 vCPU with 1-4 GB; 1 vCPU with 2-8 GB; 2 vCPU with 4-16 GB, 1 GB steps)."""
    sizes = (
        (0.25, (0.5, 1.0, 2.0)),
        (0.5, (1.0, 2.0, 3.0, 4.0)),
        (1.0, tuple(range(2, 9))),
        (2.0, tuple(range(4, 17))),
    )
    need = memory_gib + FARGATE_POD_OVERHEAD_GIB
    for vcpu, memories in sizes:
        if vcpu >= cpu:
            fitting = [float(m) for m in memories if m >= need]
            if fitting:
                return vcpu * PRICES["fargate_vcpu_hour"].usd + fitting[0] * PRICES["fargate_gb_hour"].usd
    raise ValueError(f"no Fargate size for {cpu} vCPU and {memory_gib} GiB")


def disruption_rounds_per_second(arrivals: float, seconds: float) -> float:
    """Rounds a second of a function with concurrency 1 that runs once per arrival unless busy, in which case
    one more round takes everything that arrived meanwhile (Poisson arrivals, rounds of ``seconds``)."""
    if arrivals <= 0:
        return 0.0
    if seconds <= 0:
        return arrivals
    return arrivals / (math.exp(-arrivals * seconds) + arrivals * seconds)


def _per(tally: Mapping[str, Any], key: str, fn: str | None = None) -> float:
    value = tally.get(key, 0)
    if isinstance(value, Mapping):
        return float(value.get(fn, 0)) if fn is not None else float(sum(value.values()))
    return float(value)


PLATFORM_LOG_BYTES = len(PLATFORM_LOG.encode()) + PLATFORM_LOG_LINES * LOG_EVENT_OVERHEAD  # per invocation


def sqs_requests(rate: Callable[[str], float]) -> float:
    """SQS requests from a tally's counts (``rate(key)``): the handlers' own (SendMessage to requeue, ...), one
    SendMessage per message a rule (or the agent's bus) delivered, and a ReceiveMessage plus a DeleteMessageBatch
    per batch a mapping took."""
    return rate("sqsRequests") + rate("messages") + 2 * rate("batches")


def unit_figures(tally: Mapping[str, Any], facts: StackFacts) -> dict[str, float]:
    """One measured unit (a node's lifecycle, a pod replaced, ...) as the quantities AWS bills, with no modelling:
    invocations, GB-seconds (billed seconds x the function's memory), state transitions, DynamoDB request units,
    EventBridge events, SQS requests (``sqs_requests``) and CloudWatch Logs bytes (the handlers' lines and the
    platform's per invocation)."""
    invocations = _per(tally, "invocations")
    billed = tally.get("billedSeconds", {})
    return {
        "lambdaRequests": invocations,
        "lambdaGbSeconds": sum(float(v) * facts.memory_mb.get(fn, 512) / 1024 for fn, v in billed.items()),
        "stateTransitions": _per(tally, "transitions"),
        "writeUnits": _per(tally, "writeUnits"),
        "readUnits": _per(tally, "readUnits"),
        "events": _per(tally, "events"),
        "sqsRequests": sqs_requests(lambda key: _per(tally, key)),
        "logBytes": _per(tally, "logBytes") + invocations * PLATFORM_LOG_BYTES,
    }


def _grow(scale: Mapping[str, float], nodes: int) -> float:
    """The disruption round's measured wall seconds at ``nodes`` (interpolated between measured sizes, linear
    beyond the largest); 0 when nothing was measured."""
    points = sorted((int(k), v) for k, v in scale.items())
    if not points:
        return 0.0
    if nodes <= points[0][0]:
        return points[0][1] * nodes / points[0][0]
    for (n0, v0), (n1, v1) in itertools.pairwise(points):
        if nodes <= n1:
            return v0 + (v1 - v0) * (nodes - n0) / (n1 - n0)
    if len(points) == 1:
        return points[0][1] * nodes / points[0][0]
    (n0, v0), (n1, v1) = points[-2], points[-1]
    return v1 + (v1 - v0) / (n1 - n0) * (nodes - n1)


def monthly(
    nodes: int,
    measured: Mapping[str, Any],
    facts: StackFacts,
    churn: Churn,
    scale: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """One month of a cluster of ``nodes``: usage by kind and USD by line, from ``measured`` (``benchmarks.cost``'s
    JSON: ``lifecycle``, ``launch``, ``pod``, ``resync`` (one agent resync round), ``scheduled`` {function:
    per-invocation tally}, ``burst`` and ``burstNodes``, ``clusterNodes`` {"small"}) and ``scale`` (nodes -> the
    disruption round's seconds at that size). ``Churn(0, 0)`` gives an idle cluster."""
    scale = scale or {}
    lifecycle, pod, burst = measured["lifecycle"], measured["pod"], measured["burst"]
    scheduled, resync = measured["scheduled"], measured.get("resync", {})
    hour = 3600.0
    lifecycles_h = nodes * churn.replaced_per_day / 24
    pods_h = nodes * churn.pods_per_node_per_day / 24
    resyncs_h = hour / AGENT_RESYNC_SECONDS
    batch = churn.batch(nodes)
    growth = max(0.0, _grow(scale, nodes) - _grow(scale, measured["clusterNodes"]["small"]))

    def grown(fn: str) -> float:
        return growth if fn in CLUSTER_WIDE else 0.0

    # ---- Lambda: invocations and billed seconds an hour, per function
    calls: dict[str, float] = {}
    seconds: dict[str, float] = {}

    def add(fn: str, n: float, s: float) -> None:
        calls[fn] = calls.get(fn, 0.0) + n
        seconds[fn] = seconds.get(fn, 0.0) + s

    driven = ((lifecycle, lifecycles_h), (pod, pods_h), (resync, resyncs_h))  # measured tally, times an hour
    event_driven = {fn for tally, _ in driven for fn in tally.get("invocations", {})}
    for fn in sorted(event_driven - {"disruption", "provisioner"}):
        for tally, times in driven:
            n = times * _per(tally, "invocations", fn)
            add(fn, n, times * _per(tally, "billedSeconds", fn) + n * grown(fn))
    # provisioner: the launch run is shared by ``batch`` nodes; its duration interpolated between one node and the
    # measured burst, plus the growth with the cluster; its other runs (a NodeClaim deleted, a replacement pod
    # briefly unschedulable) as measured at one node, plus the growth
    launch_runs = _per(measured["launch"], "invocations", "provisioner")
    one = _per(measured["launch"], "billedSeconds", "provisioner") / max(1.0, launch_runs)
    burst_nodes = float(measured["burstNodes"])
    many = _per(burst, "billedSeconds", "provisioner") / max(1.0, _per(burst, "invocations", "provisioner"))
    per_run = one + (many - one) * (batch - 1) / max(1.0, burst_nodes - 1) + growth
    other_runs = sum(times * _per(tally, "invocations", "provisioner") for tally, times in driven)
    other_runs -= lifecycles_h * launch_runs
    add("provisioner", lifecycles_h * launch_runs / batch, lifecycles_h * launch_runs / batch * per_run)
    add("provisioner", other_runs, other_runs * (one + growth))
    # scheduled functions: their rate, their duration at one node plus the growth
    for fn, per_hour in facts.schedules_per_hour.items():
        if fn != "disruption":
            add(fn, per_hour, per_hour * (_per(scheduled.get(fn, {}), "billedSeconds", fn) + grown(fn)))
    # disruption: the schedule and every burst of cluster-change messages, rounds of the size's duration
    round_s = _per(scheduled.get("disruption", {}), "billedSeconds", "disruption") + growth
    bursts_h = sum(times * _per(tally, "batches", "disruption") for tally, times in driven)
    arrivals = (bursts_h + facts.schedules_per_hour.get("disruption", 0.0)) / hour
    rounds_h = disruption_rounds_per_second(arrivals, round_s) * hour
    commands_h = lifecycles_h * _per(lifecycle, "commands")
    add("disruption", rounds_h, rounds_h * round_s + commands_h * facts.validation_seconds)
    # cold starts: functions invoked less often than every WARM_INTERVAL_MINUTES pay INIT on every invocation
    warm_rate = 60.0 / WARM_INTERVAL_MINUTES
    cold_gb_s_h = sum(
        n * INIT_SECONDS * facts.memory_mb.get(fn, 512) / 1024 for fn, n in calls.items() if 0 < n < warm_rate
    )
    gb_s_h = sum(seconds[fn] * facts.memory_mb.get(fn, 512) / 1024 for fn in seconds) + cold_gb_s_h
    requests_h = sum(calls.values())

    # ---- everything else, per hour
    def rate(key: str) -> float:
        per_scheduled = sum(_per(scheduled.get(fn, {}), key) * r for fn, r in facts.schedules_per_hour.items())
        return sum(times * _per(tally, key) for tally, times in driven) + per_scheduled

    transitions_h = rate("transitions")
    executions_h = rate("executions")
    sqs_h = sqs_requests(rate) + facts.queue_mappings * ESM_IDLE_POLLERS * hour / LONG_POLL_SECONDS  # + idle polls
    log_bytes_h = rate("logBytes") + requests_h * PLATFORM_LOG_BYTES
    workflow_fns = set(measured.get("workflowFunctions", ()))
    traced_h = sum(min(n, hour + 0.05 * max(0.0, n - hour)) for fn, n in calls.items() if fn not in workflow_fns)
    usage = {
        "lambdaRequests": requests_h * HOURS_PER_MONTH,
        "lambdaGbSeconds": gb_s_h * HOURS_PER_MONTH,
        "lambdaColdStartGbSeconds": cold_gb_s_h * HOURS_PER_MONTH,
        "stateTransitions": transitions_h * HOURS_PER_MONTH,
        "writeUnits": rate("writeUnits") * HOURS_PER_MONTH,
        "readUnits": rate("readUnits") * HOURS_PER_MONTH,
        "events": rate("events") * HOURS_PER_MONTH,
        "schedulerInvocations": sum(facts.schedules_per_hour.values()) * HOURS_PER_MONTH,
        "sqsRequests": sqs_h * HOURS_PER_MONTH,
        "logGb": log_bytes_h * HOURS_PER_MONTH / 1e9,
        "vendedLogGb": rate("historyBytes") * HOURS_PER_MONTH / 1e9,
        "metrics": float(len(measured.get("metrics", ()))),
        "alarms": float(facts.alarms),
        "dashboards": float(facts.dashboards),
        "secrets": float(facts.secrets),
        "traces": (traced_h + executions_h) * HOURS_PER_MONTH,
        "disruptionRoundsPerHour": rounds_h,
        "disruptionRoundSeconds": round_s,
        "lifecyclesPerDay": lifecycles_h * 24,
        "podsPerDay": pods_h * 24,
        "nodesPerProvisionerRun": batch,
    }
    p = {k: v.usd for k, v in PRICES.items()}
    lines = {
        "Lambda": usage["lambdaRequests"] * p["lambda_request"] + usage["lambdaGbSeconds"] * p["lambda_gb_second"],
        "Step Functions": usage["stateTransitions"] * p["sfn_transition"],
        "DynamoDB": usage["writeUnits"] * p["ddb_write_unit"] + usage["readUnits"] * p["ddb_read_unit"],
        "EventBridge": usage["events"] * p["eventbridge_event"]
        + usage["schedulerInvocations"] * p["scheduler_invocation"],
        "SQS": usage["sqsRequests"] * p["sqs_request"],
        "CloudWatch": usage["logGb"] * p["logs_gb"]
        + usage["vendedLogGb"] * p["vended_logs_gb"]
        + usage["metrics"] * p["metric_month"]
        + usage["alarms"] * p["alarm_month"]
        + usage["dashboards"] * p["dashboard_month"],
        "X-Ray": usage["traces"] * p["xray_trace"],
        "Secrets Manager": usage["secrets"] * p["secret_month"],
    }
    return {
        "nodes": nodes,
        "usage": usage,
        "usd": lines,
        "total": sum(lines.values()),
        "lambdaByFunction": {fn: {"invocationsPerHour": calls[fn], "secondsPerHour": seconds[fn]} for fn in calls},
    }


def ec2_share(sizing: ControllerSizing, instance: str = SHARE_INSTANCE) -> dict[str, Any]:
    """The controller's replicas as their share of an on-demand ``instance`` and as Fargate pods, USD a month."""
    prices = json.loads(EC2_PRICES.read_text())
    from nodeflow.catalog.offline import load_offline

    info = load_offline("us-east-1").infos[instance]
    node = {"vcpus": float(info.vcpus), "memory_gib": info.memory_mib / 1024}
    hourly = float(prices["prices"][instance])
    share = pod_share(sizing.cpu, sizing.memory_gib, node)
    return {
        "instance": instance,
        "instanceHourly": hourly,
        "share": share,
        "ec2Monthly": sizing.replicas * share * hourly * HOURS_PER_MONTH,
        "fargateMonthly": sizing.replicas * fargate_hourly(sizing.cpu, sizing.memory_gib) * HOURS_PER_MONTH,
        "priceFile": prices["description"],
    }


def agent_sizing() -> ControllerSizing:
    """The in-cluster agent's replicas and requests, from its Deployment manifest."""
    import yaml

    from nodeflow.api.quantity import parse_quantity

    deployment = yaml.safe_load(AGENT_MANIFEST.read_text())
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "agent"]
    requests = container["resources"]["requests"]
    return ControllerSizing(
        int(deployment["spec"].get("replicas", 1)),
        float(parse_quantity(requests["cpu"])),
        float(parse_quantity(requests["memory"])) / 2**30,
        str(AGENT_MANIFEST.relative_to(ROOT)),
    )


# ------------------------------------------------------------------ billing units of one AWS API call


def _value_bytes(value: Mapping[str, Any]) -> int:
    """DynamoDB's size of an attribute value (typed JSON): strings and binaries by their bytes, numbers about one
    byte per two digits plus one, booleans and nulls one byte, lists and maps 3 bytes plus one per element."""
    (kind, v), *_ = value.items()
    if kind == "S":
        return len(str(v).encode())
    if kind == "N":
        return (len(str(v).lstrip("-").replace(".", "")) + 1) // 2 + 1
    if kind == "B":
        return len(v) if isinstance(v, bytes | bytearray) else len(str(v))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(x).encode()) for x in v)
    if kind == "NS":
        return sum((len(str(x)) + 1) // 2 + 1 for x in v)
    if kind == "BS":
        return sum(len(x) for x in v)
    if kind == "L":
        return 3 + sum(1 + _value_bytes(x) for x in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_bytes(x) for k, x in v.items())
    return len(json.dumps(v, default=str))


def item_bytes(item: Mapping[str, Any] | None) -> int:
    """An item's size as DynamoDB bills it: attribute names plus values."""
    return sum(len(k.encode()) + _value_bytes(v) for k, v in (item or {}).items())


def _write_units(size: int) -> float:
    return float(max(1, math.ceil(size / 1024)))


def _read_units(size: int, consistent: bool) -> float:
    units = max(1, math.ceil(size / 4096))
    return float(units if consistent else units / 2)


def _chunks(size: int) -> float:
    return float(max(1, math.ceil(size / 65536)))


def billed_units(
    service: str, operation: str, params: Mapping[str, Any], response: Mapping[str, Any] | None
) -> dict[str, float]:
    """What one API call made by a handler is billed as: DynamoDB write and read request units (an update or delete
    is charged for its key and new values: the stored item's size is not known here), EventBridge custom events
    (64 KB chunks of each entry), SQS requests (64 KB chunks of a call's payload), Secrets Manager API calls.
    Everything else (EC2, STS, Step Functions' StartExecution, ...) is free or billed elsewhere: {}."""
    response = response or {}
    if service == "dynamodb":
        consistent = bool(params.get("ConsistentRead"))
        if operation == "PutItem":
            return {"writeUnits": _write_units(item_bytes(params.get("Item")))}
        if operation in ("UpdateItem", "DeleteItem"):
            size = item_bytes(params.get("Key")) + item_bytes(params.get("ExpressionAttributeValues"))
            return {"writeUnits": _write_units(size)}
        if operation == "BatchWriteItem":
            units = 0.0
            for requests in (params.get("RequestItems") or {}).values():
                for r in requests:
                    put = r.get("PutRequest")
                    units += _write_units(item_bytes(put["Item"]) if put else item_bytes(r["DeleteRequest"]["Key"]))
            return {"writeUnits": units}
        if operation == "TransactWriteItems":
            units = 0.0
            for t in params.get("TransactItems") or []:
                (kind, body), *_ = t.items()
                size = item_bytes(body.get("Item")) if kind == "Put" else item_bytes(body.get("Key"))
                units += 2 * _write_units(size)
            return {"writeUnits": units}
        if operation == "GetItem":
            return {"readUnits": _read_units(item_bytes(response.get("Item")), consistent)}
        if operation in ("Query", "Scan"):
            size = sum(item_bytes(i) for i in response.get("Items") or [])
            return {"readUnits": _read_units(size, consistent)}
        if operation == "BatchGetItem":
            items = [i for table in (response.get("Responses") or {}).values() for i in table]
            return {"readUnits": sum(_read_units(item_bytes(i), consistent) for i in items)}
        if operation == "TransactGetItems":
            items = [r.get("Item") for r in response.get("Responses") or []]
            return {"readUnits": sum(2 * _read_units(item_bytes(i), True) for i in items)}
        return {}
    if service == "eventbridge" or service == "events":
        if operation != "PutEvents":
            return {}
        sizes = [
            len(str(e.get("Source", "")).encode())
            + len(str(e.get("DetailType", "")).encode())
            + len(str(e.get("Detail", "")).encode())
            + sum(len(str(r).encode()) for r in e.get("Resources") or [])
            for e in params.get("Entries") or []
        ]
        return {"events": sum(_chunks(s) for s in sizes)}
    if service == "sqs":
        if operation == "SendMessage":
            return {"sqsRequests": _chunks(len(str(params.get("MessageBody", "")).encode()))}
        if operation == "SendMessageBatch":
            size = sum(len(str(e.get("MessageBody", "")).encode()) for e in params.get("Entries") or [])
            return {"sqsRequests": _chunks(size)}
        return {"sqsRequests": 1.0}
    if service == "secretsmanager":
        return {"secretsCalls": 1.0}
    return {}
