"""The plan does not depend on the interpreter's string hashing (PYTHONHASHSEED): set and dict iteration orders
must never leak into decisions. The same cluster is planned in child interpreters under different hash seeds and
the results must be byte-identical."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

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
from nodeflow.plan import ClusterState, plan

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


def _plan_under(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "functions"), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
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
