"""The layering of functions/nodeflow, read from the import statements (ast; nothing is imported).

Every module belongs to one UNIT (a package, a top-level module, or a named part of a package whose modules sit in
different layers) and each unit to a LAYER (docs/architecture.md):

- pure: decisions and models; no boto3, no Kubernetes client, no clock (DESIGN.md rule 1);
- adapter: the outside systems (AWS, Kubernetes, bundled files) and the steps that drive them;
- entry: the Lambda handlers and the command line.

Two rules, over every import (module level, inside functions, and under ``if TYPE_CHECKING``: a typing-only
import is still a dependency of the design):
1. no cycle between units;
2. a pure unit imports no adapter or entry unit, and an adapter unit no entry unit.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "functions"

PURE, ADAPTER, ENTRY = "pure", "adapter", "entry"

# unit -> layer. A module's unit is the longest of its name's prefixes that is a unit or in MEMBERS; else its package
# (or top-level module), which then must be listed here.
UNITS: dict[str, str] = {
    "nodeflow": PURE,  # the package root: __version__
    "nodeflow.api": PURE,  # the Kubernetes kinds, their fields' formats (durations, cron, quantities, hashes)
    "nodeflow.catalog": PURE,  # instance types resolved for an EC2NodeClass, NodeOverlays
    "nodeflow.catalog.model": PURE,  # the catalog's data model, what the solver reads; capacity reservations
    "nodeflow.catalog.source": ADAPTER,  # where catalog data comes from: EC2 and Pricing, or the bundled snapshot
    "nodeflow.cluster": PURE,
    "nodeflow.constraints": PURE,
    "nodeflow.disruption": PURE,
    "nodeflow.governance": PURE,
    "nodeflow.ingress": PURE,
    "nodeflow.ingress.webhook": ADAPTER,  # the webhook's step: wires the checks to the nonce store and the bus
    "nodeflow.install": PURE,  # the install manifests as data
    "nodeflow.interruption": PURE,
    "nodeflow.karpenter_presence": PURE,
    "nodeflow.jsontext": PURE,  # JSON text written as json.dumps(indent=2) writes it (plan -o json)
    "nodeflow.plan": PURE,
    "nodeflow.podutil": PURE,
    "nodeflow.scheduling": PURE,
    "nodeflow.timeflags": PURE,
    "nodeflow.aws": ADAPTER,
    "nodeflow.doctor": ADAPTER,
    "nodeflow.installer": ADAPTER,
    "nodeflow.kube": ADAPTER,
    "nodeflow.lifecycle": ADAPTER,
    "nodeflow.handlers": ENTRY,
    "nodeflow.__main__": ENTRY,
    "nodeflow.cli": ENTRY,
    "nodeflow.cli_exits": ENTRY,
    "nodeflow.decisions_cli": ENTRY,
    "nodeflow.doctor_cli": ENTRY,
    "nodeflow.explain_cli": ENTRY,
    "nodeflow.governance_cli": ENTRY,
}
# modules that belong to a unit their name does not say
MEMBERS: dict[str, str] = {
    "nodeflow.catalog.reservations": "nodeflow.catalog.model",
    "nodeflow.catalog.aws": "nodeflow.catalog.source",
    "nodeflow.catalog.offline": "nodeflow.catalog.source",
}
_RANK = {PURE: 0, ADAPTER: 1, ENTRY: 2}


def modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((ROOT / "nodeflow").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def unit_of(module: str) -> str:
    """The unit of a module (see UNITS)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in MEMBERS:
            return MEMBERS[prefix]
        if prefix in UNITS:
            return prefix
    return ".".join(parts[:2])


def imported(path: Path, known: dict[str, Path], module: str) -> Iterator[str]:
    """The nodeflow modules ``path`` imports (a name imported from a package counts as its module when it is one)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "nodeflow":
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if base.split(".")[0] != "nodeflow":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield sub if sub in known else base


def unit_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> unit it imports -> the "module -> module" imports that make the edge."""
    known = modules()
    graph: dict[str, dict[str, list[str]]] = {}
    for module, path in known.items():
        src = unit_of(module)
        graph.setdefault(src, {})
        for target in imported(path, known, module):
            dst = unit_of(target)
            edges = graph[src].setdefault(dst, []) if dst != src else None
            if edges is not None and f"{module} -> {target}" not in edges:
                edges.append(f"{module} -> {target}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_unit_has_a_layer() -> None:
    missing = sorted(u for u in unit_graph() if u not in UNITS)
    assert not missing, f"units without a layer in UNITS: {missing}"


def test_no_cycle_between_units() -> None:
    graph = unit_graph()
    found = cycles(graph)
    detail = [
        f"{' <-> '.join(c)}: " + "; ".join(e for a in c for b in c if b in graph.get(a, {}) for e in graph[a][b])
        for c in found
    ]
    assert not found, "import cycles between units:\n" + "\n".join(detail)


def test_no_unit_imports_a_layer_above_its_own() -> None:
    graph = unit_graph()
    wrong = [
        f"{src} ({UNITS[src]}) -> {dst} ({UNITS[dst]}): {edges[0]}"
        for src, targets in sorted(graph.items())
        for dst, edges in sorted(targets.items())
        if src in UNITS and dst in UNITS and _RANK[UNITS[dst]] > _RANK[UNITS[src]]
    ]
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_the_checker_sees_a_cycle_and_a_layer_breach() -> None:
    """The checker itself: a made-up graph with a cycle and a pure unit importing an adapter one."""
    graph = {"nodeflow.plan": {"nodeflow.governance": ["x"]}, "nodeflow.governance": {"nodeflow.plan": ["y"]}}
    assert cycles(graph) == [["nodeflow.governance", "nodeflow.plan"]]
    assert _RANK[UNITS["nodeflow.kube"]] > _RANK[UNITS["nodeflow.disruption"]]


# Module names more than one package uses, and why that is no collision (issue 30: a name says its layer). Any other
# name shared across packages fails ``test_module_names_say_their_layer``.
SHARED_NAMES: dict[str, str] = {
    "errors": "each package's own typed errors (api, aws, kube, lifecycle)",
    "model": "the data model of its package (catalog, disruption)",
    "policy": "governance.policy reads NodeflowPolicies; disruption.policy is a round's view of them",
    "overlays": "catalog.overlays decides which NodeOverlays win; plan.overlays applies that to solver input",
    # A Lambda's handler is named after its Lambda, which runs the one step of the same name.
    "cleanup": "handlers.cleanup is the entry point of lifecycle.cleanup",
    "launch": "handlers.launch is the entry point of lifecycle.launch",
    "provisioner": "handlers.provisioner is the entry point of lifecycle.provisioner",
    "replace": "handlers.replace is the entry point of lifecycle.replace",
    "install": "handlers.install is the entry point of install (the manifests as data)",
    "webhook": "handlers.webhook is the entry point of ingress.webhook",
}


def test_module_names_say_their_layer() -> None:
    """No two packages hold a module of the same name (lifecycle.launch_templates beside aws.ec2.launch_templates
    was one) unless SHARED_NAMES says why."""
    by_name: dict[str, list[str]] = {}
    for module in modules():
        package, _, name = module.rpartition(".")
        if package and not (ROOT / Path(*module.split("."))).is_dir():
            by_name.setdefault(name, []).append(module)
    shared = {name: found for name, found in sorted(by_name.items()) if len(found) > 1 and name not in SHARED_NAMES}
    assert not shared, f"module names shared across packages: {shared}"


def test_every_module_says_what_it_decides_and_must_not_touch() -> None:
    """Each module's docstring says what it decides and what it must not touch (issue 30): a docstring with a
    "must not" part."""
    lacking = [
        module
        for module, path in modules().items()
        if "must not" not in (ast.get_docstring(ast.parse(path.read_text())) or "").lower()
    ]
    assert not lacking, f"module docstrings without what the module must not touch: {lacking}"
