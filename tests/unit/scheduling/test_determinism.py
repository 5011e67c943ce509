"""The plan does not depend on the interpreter's string hashing (PYTHONHASHSEED): set and dict iteration orders
must never leak into decisions. The same clusters are planned (and a disruption round decided) in child
interpreters under different hash seeds and the results must be byte-identical."""

from __future__ import annotations

import difflib
import json
import os
import pathlib
import subprocess
import sys

from .random_clusters import REGRESSIONS

ROOT = pathlib.Path(__file__).resolve().parents[3]

# Builds a cluster (the provisioning benchmark's mix: zone spread, nodeSelectors, existing full nodes with bound
# pods; plus pod affinity, anti-affinity, hostname spread and preferred node affinity), plans it and prints the
# result as JSON (sets sorted).
_CHILD = r"""
import dataclasses, json, sys
from benchmarks import provisioning_scale as ps
from nodeflow.api.core import Namespace, Node, Pod
from nodeflow.api.karpenter import EC2NodeClass, NodePool
from nodeflow.catalog.offline import load_offline
from nodeflow.cluster import ClusterState
from nodeflow.plan import plan

docs = []
nodes = [ps.node(i) for i in range(12)]
for i in range(40):
    body = ps.pod(1000 + i // 10, i, nodes[i % 12]["metadata"]["name"])
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "900m", "memory": "3Gi"}}
    docs.append(body)
docs += [ps.pod(i // 7, i, None) for i in range(300)]
extra = [
    ("together", {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "together"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}),
    ("apart", {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "apart"}}, "topologyKey": "kubernetes.io/hostname"}]}}),
    ("prefers", {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["r"]}]}}]}}),
]
for n, (app, affinity) in enumerate(extra):
    for i in range(9):
        body = ps.pod(900 + n, i, None)
        body["metadata"]["name"] = f"{app}-{i}"
        body["metadata"]["labels"]["app"] = app
        body["spec"]["affinity"] = affinity
        docs.append(body)
for i in range(9):
    body = ps.pod(950, i, None)
    body["metadata"]["name"] = f"spread-{i}"
    body["metadata"]["labels"]["app"] = "spread"
    body["spec"]["topologySpreadConstraints"] = [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "spread"}}}]
    docs.append(body)
state = ClusterState(
    node_pools=[NodePool.model_validate(ps.node_pool())],
    node_classes=[EC2NodeClass.model_validate(ps.node_class())],
    namespaces=[Namespace.model_validate({"metadata": {"name": f"team-{i}"}}) for i in range(10)],
    nodes=[Node.model_validate(n) for n in nodes],
    pods=[Pod.model_validate(d) for d in docs],
)
result = plan(state, load_offline(ps.REGION))

def enc(o):
    if dataclasses.is_dataclass(o):
        return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=repr)
    return repr(o)

sys.stdout.write(json.dumps(result, default=enc, sort_keys=True))
"""


def _env(seed: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "functions"), str(ROOT)])
    return env


def _plan_under(seed: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        cwd=ROOT,
        env=_env(seed),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_plan_is_the_same_under_any_hash_seed() -> None:
    outputs = {seed: _plan_under(seed) for seed in ("0", "1", "12345")}
    first = json.loads(outputs["0"])
    assert len(first["node_claims"]) > 10  # new NodeClaims...
    assert first["existing"]  # ...and existing nodes both used
    assert outputs["1"] == outputs["0"]
    assert outputs["12345"] == outputs["0"]


# Random clusters (``random_clusters.cluster``) and the regression cases, each planned and put through a disruption
# round (``disrupt --dry-run``), in one child per seed (the children run at once).
SEEDS = ("0", "1", "12345")
CLUSTERS = 16


def _batches(first: int, count: int) -> dict[str, dict[str, dict[str, str]]]:
    """Seed -> case -> {"plan": text, "disrupt": text}."""
    command = [sys.executable, "-m", "tests.unit.scheduling.random_clusters", str(first), str(count)]
    children = {
        seed: subprocess.Popen(
            command, cwd=ROOT, env=_env(seed), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for seed in SEEDS
    }
    done = {seed: child.communicate(timeout=300) for seed, child in children.items()}  # every child, then judge
    out: dict[str, dict[str, dict[str, str]]] = {}
    for seed, (stdout, stderr) in done.items():
        assert children[seed].returncode == 0, f"PYTHONHASHSEED={seed}: {stderr[-2000:]}"
        lines = [json.loads(line) for line in stdout.splitlines()]
        out[seed] = {line.pop("case"): line for line in lines}
    return out


def _first_difference(a: str, b: str) -> str:
    return "\n".join(list(difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=2))[:40])


def test_random_clusters_plan_and_disrupt_alike_under_any_hash_seed() -> None:
    outputs = _batches(0, CLUSTERS)
    base = outputs[SEEDS[0]]
    assert set(base) == {f"cluster {n}" for n in range(CLUSTERS)} | set(REGRESSIONS)
    differences = []
    for seed in SEEDS[1:]:
        assert set(outputs[seed]) == set(base)
        for case, result in base.items():
            for command in ("plan", "disrupt"):
                if outputs[seed][case][command] != result[command]:
                    diff = _first_difference(result[command], outputs[seed][case][command])
                    differences.append(f"{case}: {command} under PYTHONHASHSEED={seed} vs {SEEDS[0]}:\n{diff}")
    assert not differences, "\n\n".join(differences)
    # The regression cases decide as they should (under every seed, since all agree).
    plan = json.loads(base["multi_zone_pods_join_a_pinned_claim"]["plan"])
    assert [len(c["pods"]) for c in plan["nodeClaims"]] == [3]
    command = json.loads(base["consolidation_of_multi_zone_pods"]["disrupt"])["command"]
    assert command is not None
    assert (command["decision"], command["candidates"]) == ("replace", ["big"])
    # The random clusters are not all alike: some place pods, some leave them pending, some disrupt.
    plans = [json.loads(base[f"cluster {n}"]["plan"]) for n in range(CLUSTERS)]
    rounds = [json.loads(base[f"cluster {n}"]["disrupt"]) for n in range(CLUSTERS)]
    assert sum(len(p["nodeClaims"]) for p in plans) > CLUSTERS
    assert any(p["unschedulable"] for p in plans)
    assert any(p["existingNodes"] for p in plans)
    assert {r["command"]["reason"] for r in rounds if r["command"]} >= {"Empty", "Drifted"}
