"""What judging NodeflowPolicy pause windows costs a run: windows whose cron never fires (``0 0 30 2 *``), the worst
case for the look-back, with a long duration.

    .venv/bin/python -m benchmarks.pause_windows [--windows 100] [--pools 50] [--duration 8784h] [--repeat 3]
        [--functions OTHER_CHECKOUT/functions]

One policy with ``--windows`` such windows (provisioning and disruption) and ``--pools`` NodePools, at a time when
every window is closed:

* ``pauses``: ``Governance.provisioning_pause`` and ``disruption_pause`` for every NodePool (what the provisioner's
  plan and the disruption round ask), one Governance;
* ``provisioner``: what a provisioner run does with them: ``plan`` (``build_input`` judges the pauses of every
  NodePool) and ``pause_retry`` (for an unschedulable pod), on the offline catalog.

Best of ``--repeat``, seconds. ``--functions`` measures another source tree (e.g. ``/work/main/functions``, before the
change); a duration the tree's model refuses (past 8784h since issue 26) is reported as refused.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _best(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure(windows: int, pools: int, duration: str, repeat: int) -> dict[str, Any]:
    from pydantic import ValidationError

    from benchmarks.plan_scale import node_pool_docs
    from nodeflow.api.core import Pod
    from nodeflow.api.karpenter import EC2NodeClass, NodePool
    from nodeflow.api.nodeflow_policy import NodeflowPolicy
    from nodeflow.catalog.offline import load_offline
    from nodeflow.cluster import ClusterState
    from nodeflow.governance.policy import Governance
    from nodeflow.lifecycle.provisioner import pause_retry
    from nodeflow.plan import plan

    pauses = [
        {"name": f"w{i}", "schedule": "0 0 30 2 *", "duration": duration, "provisioning": True, "disruption": True}
        for i in range(windows)
    ]
    try:
        policy = NodeflowPolicy.model_validate({"metadata": {"name": "never"}, "spec": {"pauses": pauses}})
    except ValidationError as exc:
        return {"refused": str(exc).splitlines()[2].strip()}
    names = [f"pool-{i}" for i in range(pools)]

    def judge() -> None:
        gov = Governance.from_policies([policy])
        for name in names:
            gov.provisioning_pause(name, NOW)
            gov.disruption_pause(name, NOW)

    pool_doc, class_doc = node_pool_docs()  # every instance type; the NodePools differ by name only
    node_class = EC2NodeClass.model_validate(class_doc)
    node_pools = [NodePool.model_validate({**pool_doc, "metadata": {"name": name}}) for name in names]
    huge = Pod.model_validate(  # fits nowhere: pause_retry looks at every NodePool's pause for it
        {
            "metadata": {"name": "huge", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "10000"}}}]},
            "status": {"phase": "Pending"},
        }
    )
    state = ClusterState(node_pools=node_pools, node_classes=(node_class,), pods=(huge,), policies=(policy,))
    catalog = load_offline("us-east-1")
    bare = ClusterState(node_pools=node_pools, node_classes=(node_class,), pods=(huge,))

    def provision(s: ClusterState) -> None:
        result = plan(s, catalog, now=NOW)
        pause_retry(s, result, NOW)

    return {
        "pauses": _best(judge, repeat),
        "provisioner": _best(lambda: provision(state), repeat),
        "provisioner without the policy": _best(lambda: provision(bare), repeat),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--pools", type=int, default=50)
    parser.add_argument("--duration", default="8784h", help="every window's duration (default 8784h, the longest)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--functions", type=Path, default=None, help="the nodeflow source tree to measure")
    args = parser.parse_args(argv)
    for extra in (str(_ROOT / "functions"), str(_ROOT)):
        if extra not in sys.path:
            sys.path.insert(0, extra)
    if args.functions is not None:
        sys.path.insert(0, str(args.functions.resolve()))
    out = measure(args.windows, args.pools, args.duration, args.repeat)
    what = f"{args.windows} windows '0 0 30 2 *' for {args.duration}, {args.pools} NodePools"
    if "refused" in out:
        print(f"{what}: refused by the model: {out['refused']}")
        return 0
    for name, seconds in out.items():
        print(f"{what}: {name}: {seconds:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
