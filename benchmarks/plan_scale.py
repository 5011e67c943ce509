"""``python -m nodeflow plan`` at scale: manifests on disk -> plan, end to end, phase by phase.

    .venv/bin/python -m benchmarks.plan_scale [--pods 20000] [--deployments-100k | --only-100k] [--repeat 3]
        [--cases pods,deployments,100k] [--styles yaml,json,list-json,list-yaml,dir] [--output json|table]
        [--cpu] [--no-subprocess] [--no-main] [--quick] [--save-outputs DIR] [--functions OTHER_CHECKOUT/functions]

Writes Karpenter's benchmark mix (the one ``benchmarks/solver_parity.py`` solves: Deployments of
10-50 replicas, one fifth each plain, zone spread, hostname spread, zone self-affinity, hostname
self anti-affinity; same seed, same requests) as the files a user would have, into a temp dir:

* ``pods``: every pod as its own object (``kubectl get pods`` style, 20,000 objects),
* ``deployments``: the Deployments themselves (about 670 objects),
* ``100k`` (with ``--deployments-100k``): 100,000 pods from 200 Deployments of 500 replicas
  (every fifth zone-spread), as Deployments,

each case in every manifest style of ``--styles`` (``STYLES``: block YAML documents, JSON documents between
``---`` lines, one ``kind: List`` as ``kubectl get -o json`` and ``-o yaml`` write it, a directory of one file
per object), with one NodePool over the whole offline catalog (spot and on-demand) and its EC2NodeClass.
Then runs the real ``plan`` entry point (``-o json`` unless ``--output table``):

* in process, phase by phase, calling what ``nodeflow.cli`` calls: load (``load_manifests``),
  catalog (``load_offline``, cached after the first call, as in one CLI run it is loaded once),
  input (``ClusterState`` + ``build_input``), solve, render (warnings + the output), best of ``--repeat``;
  and ``main(["plan", ...])`` itself, best of ``--repeat`` (column ``main``);
* as a subprocess ``python -m nodeflow plan -f DIR``: the true wall time with interpreter start
  and imports (column ``process``), best of ``--repeat``.

Columns: the phases, ``total`` (their sum), ``main`` and ``process`` as above, and the ratios to ``solve``;
``process/solve CPU`` is the same ratio in CPU seconds (the child's and this process's best), which a busy
machine stretches far less than wall seconds. The first line says the machine's load average.
Targets: issue 18 ``process / solve <= 2``; issue 31 ``<= 1.5`` in every style (the whole command, interpreter
start included). Measure on one core: ``taskset -c 1 .venv/bin/python -m benchmarks.plan_scale``; on a busy
machine, ``--cpu``. Every style of a case plans the same pods: ``--save-outputs`` keeps each output, to compare
styles and trees (``--functions``) byte for byte.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

_ROOT = Path(__file__).resolve().parents[1]
_FUNCTIONS = _ROOT / "functions"

NAMESPACE = "bench"
# The same choices, in the same order, as benchmarks/solver_parity.py (same seed: the same mix).
CPUS = ("100m", "250m", "500m", "1", "1.5")
MEMORY = ("100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi")
KINDS = ("plain", "zone-spread", "hostname-spread", "zone-affinity", "hostname-anti-affinity")
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"

_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
T = TypeVar("T")


# --- manifests --------------------------------------------------------------------------------


def node_pool_docs() -> list[dict[str, Any]]:
    """Karpenter's benchmark NodePool (every instance type, spot and on-demand) and its EC2NodeClass."""
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "all"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            }
        },
    }
    node_class = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-bench",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
        },
    }
    return [pool, node_class]


def pod_spec(app: str, cpu: str, memory: str, kind: str) -> dict[str, Any]:
    """The pod spec of one Deployment of the mix: one container with requests, the constraint ``kind``."""
    own = {"matchLabels": {"app": app}}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.9",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ]
    }
    if kind in ("zone-spread", "hostname-spread"):
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE if kind == "zone-spread" else HOSTNAME,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": own,
            }
        ]
    elif kind == "zone-affinity":
        term = {"topologyKey": ZONE, "labelSelector": own}
        spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    elif kind == "hostname-anti-affinity":
        term = {"topologyKey": HOSTNAME, "labelSelector": own}
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    elif kind != "plain":
        raise ValueError(f"unknown kind {kind!r}")
    return spec


def deployment(app: str, replicas: int, spec: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": app}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def pods(app: str, replicas: int, spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{app}-{i:04d}", "namespace": NAMESPACE, "labels": {"app": app}},
            "spec": spec,
        }
        for i in range(replicas)
    ]


def karpenter_mix(count: int, as_pods: bool, seed: int = 42) -> list[dict[str, Any]]:
    """The mix of ``solver_parity.karpenter_mix`` as Deployments (or as their pods)."""
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = []
    total = index = 0
    while total < count:
        replicas = min(rng.randint(10, 50), count - total)
        cpu, memory = rng.choice(CPUS), rng.choice(MEMORY)
        app = f"app-{index:05d}"
        spec = pod_spec(app, cpu, memory, KINDS[index % len(KINDS)])
        docs += pods(app, replicas, spec) if as_pods else [deployment(app, replicas, spec)]
        total += replicas
        index += 1
    return docs


def large_mix(deployments: int = 200, replicas: int = 500, seed: int = 42) -> list[dict[str, Any]]:
    """``solver_parity.large_mix``: ``deployments`` x ``replicas`` pods, every fifth Deployment zone-spread."""
    rng = random.Random(seed)
    docs = []
    for index in range(deployments):
        cpu, memory = rng.choice(CPUS), rng.choice(MEMORY)
        app = f"svc-{index:03d}"
        docs.append(deployment(app, replicas, pod_spec(app, cpu, memory, "zone-spread" if index % 5 == 4 else "plain")))
    return docs


STYLES = ("yaml", "json", "list-json", "list-yaml", "dir")
"""How the workloads are written (``--styles``): block YAML documents in one file; JSON documents (``kubectl get
-o json`` of each object, 4-space indents) separated by ``---`` lines in one .yaml file; one ``kind: List`` as
``kubectl get -o json`` writes it (a .json file) and as ``-o yaml`` writes it (block YAML, sorted keys); a
directory with one block-YAML file per object."""


class _NoAliasDumper(_Dumper):  # type: ignore[misc]
    """Writes an object met twice (a Deployment's spec in each of its pods) out each time, as kubectl does."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _kube_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def write_case(directory: Path, workloads: list[dict[str, Any]], style: str = "yaml") -> Path:
    """``directory``/nodepool.yaml (NodePool + EC2NodeClass) and the workloads written in ``style`` (see
    ``STYLES``): workloads.yaml, workloads.json or the directory workloads/."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "nodepool.yaml").write_text(yaml.dump_all(node_pool_docs(), Dumper=_Dumper, sort_keys=False))
    if style == "yaml":
        (directory / "workloads.yaml").write_text(yaml.dump_all(workloads, Dumper=_Dumper, sort_keys=False))
    elif style == "json":
        text = "---\n".join(json.dumps(document, indent=4) + "\n" for document in workloads)
        (directory / "workloads.yaml").write_text(text)
    elif style == "list-json":
        (directory / "workloads.json").write_text(json.dumps(_kube_list(workloads), indent=4) + "\n")
    elif style == "list-yaml":
        text = yaml.dump(_kube_list(workloads), Dumper=_NoAliasDumper, sort_keys=True)  # kubectl writes no anchors
        (directory / "workloads.yaml").write_text(text)
    elif style == "dir":
        folder = directory / "workloads"
        folder.mkdir()
        for number, document in enumerate(workloads):
            name = f"{number:06d}-{document['kind'].lower()}-{document['metadata']['name']}.yaml"
            (folder / name).write_text(yaml.dump(document, Dumper=_Dumper, sort_keys=False))
    else:
        raise ValueError(f"unknown style {style!r} (one of {', '.join(STYLES)})")
    return directory


# --- measuring --------------------------------------------------------------------------------


_CPU = False
"""--cpu: time with CPU seconds (this process's, or the child's) instead of wall seconds, for a busy machine."""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


_CPU_BEST: dict[str, float] = {}
"""The best CPU seconds of the last ``_best`` call named so (solve, process), whatever the clock: a busy machine
stretches wall time, CPU time much less."""


def _best(repeat: int, run: Callable[[], T], child: bool = False, name: str = "") -> tuple[float, T]:
    cpu_clock = _children_cpu if child else time.process_time
    clock = cpu_clock if _CPU else time.perf_counter
    best, best_cpu, value = float("inf"), float("inf"), None
    for _ in range(max(repeat, 1)):
        gc.collect()
        start, start_cpu = clock(), cpu_clock()
        value = run()
        best = min(best, clock() - start)
        best_cpu = min(best_cpu, cpu_clock() - start_cpu)
    assert value is not None
    if name:
        _CPU_BEST[name] = best_cpu
    return best, value


def _write_json(cli: Any, result: Any, warnings: list[str], out: io.StringIO) -> None:
    """What ``plan -o json`` writes (an older tree, given with ``--functions``, may not have the function)."""
    writer = getattr(cli, "write_plan_json", None)
    if writer is not None:
        writer(result, warnings, out)
    else:
        json.dump({**result.to_json(), "warnings": warnings}, out, indent=2)
        out.write("\n")


def measure(
    directory: Path,
    repeat: int,
    subprocess_too: bool,
    main_too: bool = True,
    output: str = "table",
    save: Path | None = None,
) -> dict[str, float | int]:
    """The phases of ``plan -f directory -o output`` (see the module's docstring); ``save``: where the process's
    output is written (to compare two trees' outputs byte for byte)."""
    from nodeflow import cli
    from nodeflow.api.manifests import load_manifests
    from nodeflow.catalog.offline import load_offline
    from nodeflow.cli import main, render_table
    from nodeflow.cluster import ClusterState
    from nodeflow.plan import build_input, plan_warnings
    from nodeflow.scheduling.solver import solve

    paths = [str(directory)]
    catalog_s, catalog = _best(1, lambda: load_offline("us-east-1"))
    load_s, manifests = _best(repeat, lambda: load_manifests(paths))

    def build() -> Any:
        state = ClusterState.from_manifests(manifests)
        return state, build_input(state, catalog)

    input_s, (state, inp) = _best(repeat, build)
    solve_s, result = _best(repeat, lambda: solve(inp), name="solve")

    def render() -> str:
        out = io.StringIO()
        warnings = plan_warnings(state, inp, catalog.region)
        if output == "json":
            _write_json(cli, result, warnings, out)
        else:
            render_table(result, out, spot_estimated=catalog.spot_prices_estimated)
        return out.getvalue()

    render_s, _ = _best(repeat, render)

    def run_main() -> int:
        code = main(["plan", "-f", str(directory), "-o", output], out=io.StringIO(), err=io.StringIO())
        if code != 0:
            raise SystemExit(f"plan exited {code}")
        return code

    row: dict[str, float | int] = {
        "load": load_s,
        "catalog": catalog_s,
        "input": input_s,
        "solve": solve_s,
        "render": render_s,
    }
    if main_too:
        row["main"], _ = _best(repeat, run_main)
    if subprocess_too:
        env = {**os.environ, "PYTHONPATH": str(_FUNCTIONS)}
        command = [sys.executable, "-m", "nodeflow", "plan", "-f", str(directory), "-o", output]

        def run_process() -> int:
            done = subprocess.run(command, env=env, capture_output=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"plan exited {done.returncode}: {done.stderr.decode()[-2000:]}")
            if save is not None:
                save.write_bytes(done.stdout)
            return done.returncode

        row["process"], _ = _best(repeat, run_process, child=True, name="process")
        row["process/solve CPU"] = _CPU_BEST["process"] / _CPU_BEST["solve"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=20000, help="pods of the Karpenter mix (default 20000)")
    parser.add_argument("--deployments-100k", action="store_true", help="add 100,000 pods in 200 Deployments")
    parser.add_argument("--only-100k", action="store_true", help="run the 100,000-pod case only")
    parser.add_argument("--repeat", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--no-subprocess", action="store_true", help="skip the `python -m nodeflow plan` wall time")
    parser.add_argument("--quick", action="store_true", help="2,000 pods, best of 1")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line, last")
    parser.add_argument("--no-main", action="store_true", help="skip timing main() in process")
    parser.add_argument(
        "--cases", help="comma-separated: pods, deployments, 100k (default: pods,deployments [,100k with its flag])"
    )
    parser.add_argument(
        "--styles",
        default=",".join(STYLES),
        help=f"comma-separated manifest styles to write each case in (default: all of {', '.join(STYLES)})",
    )
    parser.add_argument("--output", choices=("table", "json"), default="json", help="plan -o (default json)")
    parser.add_argument(
        "--save-outputs", type=Path, help="write each case's `plan` process output to this directory (to diff trees)"
    )
    parser.add_argument(
        "--cpu", action="store_true", help="CPU seconds instead of wall seconds (a busy machine: compare, not quote)"
    )
    parser.add_argument(
        "--functions",
        type=Path,
        default=_ROOT / "functions",
        help="the nodeflow source tree to measure (default: this repository's; e.g. an older checkout, to compare)",
    )
    args = parser.parse_args(argv)
    global _FUNCTIONS, _CPU
    _FUNCTIONS = args.functions.resolve()
    _CPU = args.cpu
    sys.path.insert(0, str(_FUNCTIONS))
    if args.quick:
        args.pods, args.repeat = 2000, 1
    if args.cases:
        wanted = set(args.cases.split(","))
    elif args.only_100k:
        wanted = {"100k"}
    else:
        wanted = {"pods", "deployments"} | ({"100k"} if args.deployments_100k else set())
    cases: list[tuple[str, Callable[[], list[dict[str, Any]]]]] = []
    if "pods" in wanted:
        cases.append((f"{args.pods} pods as Pods", lambda: karpenter_mix(args.pods, as_pods=True)))
    if "deployments" in wanted:
        cases.append((f"{args.pods} pods as Deployments", lambda: karpenter_mix(args.pods, as_pods=False)))
    if "100k" in wanted:
        cases.append(("100000 pods in 200 Deployments", large_mix))
    columns = (
        "load",
        "catalog",
        "input",
        "solve",
        "render",
        "total",
        "total/solve",
        "main",
        "process",
        "process/solve",
        "process/solve CPU",
    )
    header = f"{'case':<44}" + "".join(f"{c:>{max(14, len(c) + 1)}}" for c in columns)
    print(
        f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}, "
        f"python {sys.version.split()[0]}, libyaml {getattr(yaml, '__with_libyaml__', False)}, "
        f"best of {args.repeat}, {'CPU' if _CPU else 'wall'} seconds, nodeflow from {_FUNCTIONS}"
    )
    print(header)
    figures: list[dict[str, Any]] = []
    styles = args.styles.split(",")
    unknown = set(styles) - set(STYLES)
    if unknown:
        parser.error(f"--styles: unknown {', '.join(sorted(unknown))} (one of {', '.join(STYLES)})")
    if args.save_outputs:
        args.save_outputs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="plan-scale-") as tmp:
        for number, (case, make, style) in enumerate((case, make, style) for case, make in cases for style in styles):
            name = f"{case}, {style}"
            directory = write_case(Path(tmp) / f"case{number}", make(), style)
            save = args.save_outputs / f"{name.replace(' ', '_').replace(',', '')}.out" if args.save_outputs else None
            row = measure(directory, args.repeat, not args.no_subprocess, not args.no_main, args.output, save)
            row["total"] = sum(row[phase] for phase in ("load", "catalog", "input", "solve", "render"))
            row["total/solve"] = row["total"] / row["solve"]
            if "process" in row:
                row["process/solve"] = row["process"] / row["solve"]
            cells = []
            for column in columns:
                value = row.get(column)
                width = max(14, len(column) + 1)
                if value is None:
                    cells.append(f"{'-':>{width}}")
                elif "/solve" in column:
                    cells.append(f"{value:>{width - 1}.2f}x")
                else:
                    cells.append(f"{value:>{width - 1}.3f}s")
            print(f"{name:<44}" + "".join(cells), flush=True)
            figures += [{"case": name, "metric": c, "value": row[c]} for c in columns if row.get(c) is not None]
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
