"""What NodeflowPolicies and the decision log cost the provisioning path, at scale.

    .venv/bin/python -m benchmarks.governance [--pods 5000,20000] [--repeat 2] [--json] [--quick]
        [--functions OTHER_CHECKOUT/functions]

Karpenter's benchmark mix (``benchmarks.plan_scale.karpenter_mix``: Deployments of 10-50 replicas, one fifth each
plain, zone spread, hostname spread, zone self-affinity, hostname self anti-affinity), its Deployments spread over
ten namespaces (``team-0`` .. ``team-9``, labelled ``tier=prod`` for the even ones, ``tier=dev`` for the odd),
planned with two NodePools: ``all`` (every instance type, spot and on-demand) and ``prod`` (weight 10, on-demand
m/c/r families), each run three ways:

* ``none``: no NodeflowPolicy;
* ``roomy``: policies that bind nothing but are all evaluated: ``prod`` open to namespaces labelled ``tier``
  ``prod`` or ``dev`` (all of them), nvidia.com/gpu only to ``team-0``, a cluster ceiling, a ceiling per NodePool
  and per namespace, a group limit, and four pause windows that are closed at the plan's time;
* ``binding``: ``prod`` open to ``tier=prod`` namespaces only, the ``prod`` NodePool's ceiling at a tenth of what
  it plans unconstrained, and ``team-1``'s / ``team-3``'s ceilings at $2/hour: NodeClaims are stopped and pods go
  elsewhere or wait.

With ``--limits``, three more cases, no NodeflowPolicy but these: ``limits-roomy`` both NodePools with
``spec.limits`` that bind nothing (cpu 1,000,000, memory 1,000,000Gi), ``limits-binding`` both at 40 % of the CPU
the plan without limits launches, ``group-binding`` a NodeflowPolicy group limit over both at 80 % of it.

Per case: ``input`` (``build_input``, the policies' per-pod access included) and ``solve`` (``solve``), best of
``--repeat``, seconds; the plan's NodeClaims, $/hour, unschedulable pods and a digest of the plan (equal digests:
the same plan, e.g. against an older tree with ``--functions``). Then the decision log for the ``binding`` plan:
building the run's records (``provisioning_records``) and their DynamoDB items (record + index
items), the items and BatchWriteItem calls (25 items each) a provisioner run of that size writes.

Target (milestone 2: the whole path as fast as the solver): ``roomy`` within 10 % of ``none``, the records' CPU a
small fraction of the solve. Measure on one core: ``taskset -c 1 .venv/bin/python -m benchmarks.governance``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

_ROOT = Path(__file__).resolve().parents[1]
for extra in (str(_ROOT / "functions"), str(_ROOT)):
    if extra not in sys.path:
        sys.path.insert(0, extra)

import yaml  # noqa: E402

from benchmarks.plan_scale import _Dumper, karpenter_mix, node_pool_docs  # noqa: E402

T = TypeVar("T")
NAMESPACES = 10
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)  # a Wednesday noon: every window below is closed


def _namespace(i: int) -> dict[str, Any]:
    tier = "prod" if i % 2 == 0 else "dev"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{i}", "labels": {"tier": tier}}}


def _prod_pool() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "prod"},
        "spec": {
            "weight": 10,
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["m", "c", "r"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            },
        },
    }


def _policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nodeflow.io/v1alpha1", "kind": "NodeflowPolicy", "metadata": {"name": name}, "spec": spec}


def _access(case: str) -> dict[str, Any]:
    """``prod`` for the tier=prod namespaces only (``binding``), for both tiers (``roomy``: every namespace is
    admitted, by a rule evaluated per namespace)."""
    tiers = ["prod"] if case == "binding" else ["prod", "dev"]
    selector = {"matchExpressions": [{"key": "tier", "operator": "In", "values": tiers}]}
    return _policy(
        "access",
        nodePoolAccess=[{"nodePools": ["prod"], "namespaceSelector": selector}],
        resourceAccess=[{"resources": ["nvidia.com/gpu"], "namespaces": ["team-0"]}],
    )


def _windows() -> list[dict[str, Any]]:
    return [
        {"name": "quarter-end", "schedule": "0 18 * * 5", "duration": "60h", "provisioning": True, "disruption": True},
        {"name": "nightly", "schedule": "0 22 * * *", "duration": "8h", "provisioning": True, "nodePools": ["prod"]},
        {"name": "new-year", "schedule": "0 0 20 12 *", "duration": "336h", "disruption": True},
        {"name": "monday", "schedule": "0 6 * * 1", "duration": "2h", "disruption": True, "nodePools": ["all"]},
    ]


def policies(case: str, prod_spend: float) -> list[dict[str, Any]]:
    """The NodeflowPolicies of ``case`` (``prod_spend``: $/hour the prod NodePool plans with none)."""
    if case == "none":
        return []
    namespaces = [{"name": f"team-{i}", "maxPricePerHour": "100000"} for i in range(NAMESPACES)]
    prod_ceiling = "100000"
    if case == "binding":
        namespaces[1]["maxPricePerHour"] = namespaces[3]["maxPricePerHour"] = "2"
        prod_ceiling = f"{max(prod_spend / 10, 0.5):.2f}"
    caps = _policy(
        "caps",
        costCeilings={
            "cluster": {"maxPricePerHour": "1000000"},
            "nodePools": [
                {"name": "prod", "maxPricePerHour": prod_ceiling},
                {"name": "all", "maxPricePerHour": "100000"},
            ],
            "namespaces": namespaces,
        },
        limits=[{"name": "both", "nodePools": ["all", "prod"], "resources": {"cpu": "1000000", "nodes": "100000"}}],
        pauses=_windows(),
    )
    return [_access(case), caps]


def limit_documents(case: str, planned_cpu: int) -> list[dict[str, Any]]:
    """What the limit cases add: ``group-binding`` a NodeflowPolicy group limit over both NodePools at 80 % of the
    CPU the plan without limits launches (``planned_cpu``, millicores); the ``limits-*`` cases change the NodePools
    instead (``documents``)."""
    if case != "group-binding":
        return []
    cpu = f"{planned_cpu * 8 // 10}m"
    return [_policy("group", limits=[{"name": "both", "nodePools": ["all", "prod"], "resources": {"cpu": cpu}}])]


def documents(pods: int, limits: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The mix as Deployments over the namespaces, the NodePools (with ``limits`` as each one's spec.limits), the
    EC2NodeClass and the Namespaces."""
    workloads = karpenter_mix(pods, as_pods=False)
    for i, deployment in enumerate(workloads):
        deployment["metadata"]["namespace"] = f"team-{i % NAMESPACES}"
    pools = [*node_pool_docs(), _prod_pool()]
    if limits is not None:
        for doc in pools:
            if doc["kind"] == "NodePool":
                doc["spec"]["limits"] = dict(limits)
    return [*pools, *(_namespace(i) for i in range(NAMESPACES)), *workloads]


def _best(repeat: int, run: Callable[[], T]) -> tuple[float, T]:
    best, value = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        value = run()
        best = min(best, time.perf_counter() - t0)
    assert value is not None
    return best, value


CASES = ("none", "roomy", "binding", "limits-roomy", "limits-binding", "group-binding")


def measure(pods: int, repeat: int, limits: bool = False) -> dict[str, Any]:
    from nodeflow.api.manifests import load_manifests
    from nodeflow.catalog.offline import load_offline
    from nodeflow.cluster import ClusterState
    from nodeflow.plan import build_input
    from nodeflow.scheduling.solver import solve

    catalog = load_offline("us-east-1")
    base = documents(pods)
    rows: dict[str, Any] = {}
    prod_spend = 0.0
    planned_cpu = 0
    results: dict[str, Any] = {}
    for case in CASES if limits else CASES[:3]:
        docs = [*base, *policies(case, prod_spend)] if case in CASES[:3] else limit_documents(case, planned_cpu)
        if case == "limits-roomy":
            docs = documents(pods, {"cpu": "1000000", "memory": "1000000Gi"})
        elif case == "limits-binding":
            docs = documents(pods, {"cpu": f"{planned_cpu * 4 // 10}m"})
        elif case == "group-binding":
            docs = [*base, *docs]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "manifests.yaml"
            path.write_text(yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False))
            manifests = load_manifests([path])
        state = ClusterState.from_manifests(manifests)
        input_s, inp = _best(repeat, lambda state=state: build_input(state, catalog, now=NOW))  # type: ignore[misc]
        solve_s, result = _best(repeat, lambda inp=inp: solve(inp))  # type: ignore[misc]
        if case == "none":
            prod_spend = sum(c.price for c in result.node_claims if c.nodepool == "prod")
            sizes = {(p.name, it.name): it.capacity.get("cpu", 0) for p in inp.nodepools for it in p.instance_types}
            planned_cpu = sum(sizes[c.nodepool, c.instance_types[0]] for c in result.node_claims)
        rows[case] = {
            "input": round(input_s, 3),
            "solve": round(solve_s, 3),
            "nodeClaims": len(result.node_claims),
            "pricePerHour": round(sum(c.price for c in result.node_claims), 2),
            "unschedulable": len(result.unschedulable),
            "digest": hashlib.sha256(repr(result).encode()).hexdigest()[:12],
        }
        results[case] = (state, result)
        print(
            f"{pods:>7} pods  {case:14} input {input_s:6.3f} s  solve {solve_s:6.3f} s  "
            f"{rows[case]['nodeClaims']:5} NodeClaims  ${rows[case]['pricePerHour']:9.2f}/hour  "
            f"{rows[case]['unschedulable']:5} unschedulable  plan {rows[case]['digest']}",
            flush=True,
        )
    rows["roomy/none"] = round(
        (rows["roomy"]["input"] + rows["roomy"]["solve"]) / (rows["none"]["input"] + rows["none"]["solve"]), 3
    )
    rows["decisionLog"] = _records(results["binding"], repeat)
    return rows


def _records(planned: tuple[Any, Any], repeat: int) -> dict[str, Any]:
    from nodeflow.aws.decision_log import BATCH
    from nodeflow.governance.decisions import ClaimOutcome, provisioning_records, write_items

    state, result = planned
    pending = [f"{p.metadata.namespace}/{p.metadata.name}" for p in state.pods]
    outcomes = [ClaimOutcome(f"nodeclaim-{i}", "created") for i in range(len(result.node_claims))]

    def build() -> tuple[int, int]:
        records = provisioning_records("bench", NOW, pending, result, outcomes, 60)
        items = write_items(records)
        return len(records), len(items)

    seconds, (records, items) = _best(repeat, build)
    calls = -(-items // BATCH)
    print(
        f"        decision log: {records} records, {items} items, {calls} BatchWriteItem calls; "
        f"built in {seconds:.3f} s",
        flush=True,
    )
    return {"records": records, "items": items, "batchWriteCalls": calls, "build": round(seconds, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="5000,20000", help="comma-separated pod counts (default 5000,20000)")
    parser.add_argument("--repeat", type=int, default=2, help="best of N (default 2)")
    parser.add_argument("--quick", action="store_true", help="1,000 pods, best of 1")
    parser.add_argument(
        "--limits",
        action="store_true",
        help="also NodePool spec.limits that bind nothing / bind at 40 %% of the planned CPU, a group limit at 80 %%",
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    parser.add_argument(
        "--functions",
        type=Path,
        default=None,
        help="the nodeflow source tree to measure (default: this repository's; e.g. an older checkout, to compare)",
    )
    args = parser.parse_args(argv)
    if args.functions is not None:
        sys.path.insert(0, str(args.functions.resolve()))
    sizes = [1000] if args.quick else [int(n) for n in args.pods.split(",")]
    repeat = 1 if args.quick else args.repeat
    out = {str(n): measure(n, repeat, args.limits) for n in sizes}
    for n, row in out.items():
        print(f"{n} pods: (input + solve) with roomy policies / without: {row['roomy/none']:.3f}")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
