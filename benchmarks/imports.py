"""Cold import time of every Lambda handler module (issue 18 target 4: at most 0.5 s each).

    taskset -c 1 .venv/bin/python -m benchmarks.imports [--runs 5] [--quick] [--no-bytecode] [--json]
        [--python PYTHON] [--functions-dir DIR] [HANDLER ...]

For each handler module (a module of ``functions/nodeflow/handlers`` that defines ``handler``; ``common``,
``runtime`` and ``karpenter_metrics`` are shared by them), runs ``python -X importtime -c "import
nodeflow.handlers.<name>"`` in a fresh interpreter ``--runs`` times with the Lambda's environment
(``lambda_environment``: PYTHONPATH=functions, the variables infra/functions.py gives every function, and the
ones the Lambda runtime sets, so Powertools behaves as in Lambda) and prints one table: the best run's import
seconds (measured in the child around the import statement, the interpreter's own start-up excluded), the
least CPU time of the child over the runs (``(cpu)``: less disturbed by other processes), and the three modules
with the most self time in that run's ``-X importtime`` report. ``--compare DIR`` imports another functions/ tree's
handlers (e.g. the code before a change) alternately with ours and shows its figures as ``before``.

``--no-bytecode`` compiles every module from source in every run (a fresh ``PYTHONPYCACHEPREFIX``): the Lambda
bundle ships no ``.pyc`` files and /var/task is read-only, so that is what a real cold start pays.
``--functions-dir DIR --python python3.12`` imports from another tree, e.g. a bundled Lambda asset
(``python -m infra.bundling bundle DIR``, whose binary wheels must suit this machine), with that interpreter and
without writing any bytecode (/var/task is read-only): the asset's own precompiled ``.pyc`` files are what a
run "with .pyc" uses. ``--json`` prints the rows as JSON instead of the table.
Figures are noisy on a shared machine: take the best of several runs, on one core.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = ROOT / "functions"
HANDLERS_DIR = FUNCTIONS / "nodeflow" / "handlers"
TARGET_SECONDS = 0.5

# What infra/functions.py sets on every function (POWERTOOLS_ENVIRONMENT, CLUSTER_NAME), plus what the Lambda
# runtime itself sets (LAMBDA_TASK_ROOT turns Powertools' Tracer on, as in a deployed function).
LAMBDA_VARIABLES: Mapping[str, str] = {
    "CLUSTER_NAME": "bench",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_SERVICE_NAME": "nodeflow",
    "POWERTOOLS_METRICS_NAMESPACE": "nodeflow",
    "POWERTOOLS_LOG_LEVEL": "INFO",
    "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
    "LAMBDA_TASK_ROOT": str(FUNCTIONS),
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
}

_CHILD = (
    "import sys, time\n"
    "t, c = time.perf_counter(), time.process_time()\n"
    "import nodeflow.handlers.{name}\n"
    "sys.stdout.write(f'{{time.perf_counter() - t!r}} {{time.process_time() - c!r}}')\n"
)
_IMPORTTIME = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def handler_modules() -> list[str]:
    """The handler modules: the ones that define a top-level ``handler``."""
    names = []
    for path in sorted(HANDLERS_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            defined = (
                [node.name]
                if isinstance(node, ast.FunctionDef)
                else [t.id for t in node.targets if isinstance(t, ast.Name)]
                if isinstance(node, ast.Assign)
                else []
            )
            if "handler" in defined:
                names.append(path.stem)
                break
    return names


def lambda_environment(
    function: str, base: Mapping[str, str] | None = None, functions: Path = FUNCTIONS
) -> dict[str, str]:
    """The environment a handler's Lambda imports it with (no inherited PYTHON* or AWS variables)."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")}
    env.update(LAMBDA_VARIABLES)
    env["PYTHONPATH"] = str(functions)
    env["AWS_LAMBDA_FUNCTION_NAME"] = f"nodeflow-bench-{function.replace('_', '-')}"
    env["_HANDLER"] = f"nodeflow.handlers.{function}.handler"
    return env


@dataclass(frozen=True, slots=True)
class Run:
    seconds: float  # wall clock
    cpu: float  # the child's CPU time (less sensitive to other processes on a shared machine)
    self_times: dict[str, int]  # module -> self microseconds (-X importtime)


def import_once(
    name: str,
    *,
    bytecode: bool = True,
    functions: Path = FUNCTIONS,
    python: str = sys.executable,
    write_bytecode: bool = True,
) -> Run:
    """Import ``nodeflow.handlers.<name>`` in a fresh interpreter with the Lambda's environment."""
    env = lambda_environment(name, functions=functions)
    if functions != FUNCTIONS:
        env["LAMBDA_TASK_ROOT"] = str(functions)
    with tempfile.TemporaryDirectory(prefix="nodeflow-pyc-") as tmp:
        if not bytecode:
            env["PYTHONPYCACHEPREFIX"] = tmp  # empty: everything is compiled from source
        if not bytecode or not write_bytecode:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        done = subprocess.run(
            [python, "-X", "importtime", "-c", _CHILD.format(name=name)],
            env=env,
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"importing nodeflow.handlers.{name} failed:\n{done.stderr[-3000:]}")
    self_times: dict[str, int] = {}
    for line in done.stderr.splitlines():
        m = _IMPORTTIME.match(line)
        if m:
            self_times[m.group(4)] = self_times.get(m.group(4), 0) + int(m.group(1))
    wall, cpu = (float(x) for x in done.stdout.split())
    return Run(seconds=wall, cpu=cpu, self_times=self_times)


def best_of(
    name: str,
    runs: int,
    *,
    bytecode: bool = True,
    functions: Path = FUNCTIONS,
    python: str = sys.executable,
    write_bytecode: bool = True,
) -> Run:
    def once(bytecode: bool) -> Run:
        return import_once(name, bytecode=bytecode, functions=functions, python=python, write_bytecode=write_bytecode)

    if bytecode:
        once(True)  # warm the .pyc files and the page cache; not counted
    return _best([once(bytecode) for _ in range(runs)])


def _best(runs: Sequence[Run]) -> Run:
    """The fastest run (wall clock), with the least CPU time seen in any of them."""
    fastest = min(runs, key=lambda r: r.seconds)
    return Run(seconds=fastest.seconds, cpu=min(r.cpu for r in runs), self_times=fastest.self_times)


def compare(name: str, runs: int, other: Path, *, bytecode: bool = True) -> tuple[Run, Run]:
    """Best of ``runs`` for ``other``'s handler and ours, imported alternately (after one warm-up each)."""
    olds: list[Run] = []
    news: list[Run] = []
    for i in range(runs + 1):
        old = import_once(name, bytecode=bytecode, functions=other)
        new = import_once(name, bytecode=bytecode)
        if i or not bytecode:
            olds.append(old)
            news.append(new)
    return _best(olds), _best(news)


def top(run: Run, n: int = 3) -> list[tuple[str, float]]:
    ranked = sorted(run.self_times.items(), key=lambda kv: -kv[1])[:n]
    return [(module, us / 1e6) for module, us in ranked]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("handlers", nargs="*", help="handler modules (default: all)")
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per handler; the best counts")
    parser.add_argument("--quick", action="store_true", help="2 runs per handler")
    parser.add_argument(
        "--no-bytecode", action="store_true", help="compile from source (the Lambda bundle has no .pyc)"
    )
    parser.add_argument(
        "--functions-dir",
        type=Path,
        metavar="DIR",
        help="import from this tree (e.g. a bundled Lambda asset) instead of functions/, writing no bytecode",
    )
    parser.add_argument("--python", default=sys.executable, help="the interpreter (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="DIR",
        help="another functions/ tree (e.g. a checkout of the old code): "
        "its handlers are imported in turn with ours, run by run, and its best time shown as 'before'",
    )
    args = parser.parse_args(argv)
    known = handler_modules()
    names = args.handlers or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"not handler modules: {unknown} (known: {known})")
    runs = 2 if args.quick else max(1, args.runs)
    mode = "from source, no .pyc" if args.no_bytecode else "with .pyc"
    functions = args.functions_dir.resolve() if args.functions_dir else FUNCTIONS
    out = (lambda *_a, **_k: None) if args.json else print
    out(
        f"cold import of nodeflow.handlers.<name>, best of {runs} fresh interpreters ({mode}); "
        f"target {TARGET_SECONDS} s"
    )
    before = f"{'before s':>9} {'(cpu)':>6} " if args.compare else ""
    out(f"{'handler':<14} {before}{'import s':>9} {'(cpu)':>6}  {'ok':<4} top 3 self-time modules (-X importtime)")
    worst = 0.0
    rows: list[dict[str, object]] = []
    for name in names:
        if args.compare:  # interleaved, so both see the same moment's load
            old, run = compare(name, runs, args.compare.resolve(), bytecode=not args.no_bytecode)
        else:
            run = best_of(
                name,
                runs,
                bytecode=not args.no_bytecode,
                functions=functions,
                python=args.python,
                write_bytecode=args.functions_dir is None,
            )
        worst = max(worst, run.seconds)
        tops = ", ".join(f"{m} {s:.3f}" for m, s in top(run))
        ok = "yes" if run.seconds <= TARGET_SECONDS else "NO"
        col = f"{old.seconds:>9.3f} {old.cpu:>6.3f} " if args.compare else ""
        out(f"{name:<14} {col}{run.seconds:>9.3f} {run.cpu:>6.3f}  {ok:<4} {tops}", flush=True)
        row: dict[str, object] = {"handler": name, "seconds": run.seconds, "cpu": run.cpu, "bytecode": mode}
        row.update({"target": TARGET_SECONDS, "met": run.seconds <= TARGET_SECONDS})
        if args.compare:
            row.update({"before_seconds": old.seconds, "before_cpu": old.cpu})
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
    else:
        affinity = sorted(os.sched_getaffinity(0))
        print(f"slowest: {worst:.3f} s (python {args.python}, {functions}, pid affinity {affinity})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
