"""The fast manifest path (``_FastLoader``, shared PodSpecs) gives what the reference path gives.

The reference is PyYAML's SafeLoader as is and one PodSpec validated per pod (``manifests._FAST = False``):
the same documents, the same models, the same problems, and ``plan`` prints the same bytes (JSON and table).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeflow import cli
from nodeflow.api import manifests
from nodeflow.api.manifests import ManifestError, Manifests, load_manifests

# --- the YAML loader --------------------------------------------------------------------------

YAML_CASES = {
    "plain": "a: 1\nb: [x, 'y', \"z\", 2.5, -3, true, null, ~, '', yes, off]\nc: {d: {e: [1, [2, [3]]]}}\n",
    "numbers": "i: [0x1F, 0o17, 017, 1_000, +5, 1:30, -0]\nf: [.inf, -.Inf, .nan, 1e3, 6.8523015e+5, 1_0.5]\n",
    "strings": "q: '123'\nr: \"true\"\ns: |\n  two\n  lines\nt: >-\n  folded\n  text\nu: 'it''s'\nv: \"\\u00e9\\n\"\n",
    "timestamps and binary": "t: 2026-11-24T22:55:00Z\nd: 2026-11-24\nb: !!binary aGVsbG8=\n",
    "anchors": "base: &b {cpu: 1, labels: &l {app: web}}\nother: *b\nlabels: *l\nlist: [&s seven, *s]\n",
    "merge keys": "base: &b {cpu: 1, memory: 2Gi}\nderived:\n  <<: *b\n  cpu: 2\nlist:\n  <<: [*b, {z: 1}]\n",
    "value key": "a:\n  =: default\n  b: c\n",
    "set omap pairs": "s: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\np: !!pairs [{a: 1}, {a: 2}]\n",
    "explicit tags": "a: !!str 12\nb: !!int '7'\nc: !!float '1'\nd: !!bool 'true'\ne: !!null ''\nf: !!map {x: 1}\n",
    "non-string keys": "1: one\ntrue: yes\nnull: nothing\n2.5: x\n2026-01-01: day\n",
    "duplicate keys": "a: 1\na: 2\nb: {c: 1, c: 3}\n",
    "recursive": "a: &r [1, *r]\nb: &m {self: *m}\n",
    "multi-document": "---\na: 1\n---\n---\n- 1\n- 2\n--- just a scalar\n...\n---\nb: []\n",
    "deep": "a: " + "[" * 3000 + "]" * 3000 + "\n",
    "deep mapping": "".join(f"{'  ' * i}k{i}:\n" for i in range(600)) + "  " * 600 + "leaf\n",
    "empty": "",
    "comments only": "# nothing\n",
}


class _PurePythonFast(manifests._Faster, yaml.SafeLoader):
    """What ``_FastLoader`` is where PyYAML has no libyaml (``yaml.__with_libyaml__`` false)."""


# (reference, fast): libyaml's, where PyYAML has it, and the pure-Python fallback.
LOADERS = {"libyaml": (manifests._SafeLoader, manifests._FastLoader), "python": (yaml.SafeLoader, _PurePythonFast)}


def _load(text: str, loader: Any) -> list[Any]:
    return list(yaml.load_all(text, Loader=loader))


def test_libyaml_is_used_where_pyyaml_has_it() -> None:
    assert manifests._SafeLoader is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)
    assert issubclass(manifests._FastLoader, manifests._SafeLoader)


@pytest.mark.parametrize("loaders", sorted(LOADERS))
@pytest.mark.parametrize("name", sorted(YAML_CASES))
def test_fast_loader_builds_what_safe_loader_builds(name: str, loaders: str) -> None:
    text = YAML_CASES[name]
    reference, fast = LOADERS[loaders]
    try:
        want = _load(text, reference)
    except RecursionError:  # PyYAML's own composer recurses: too deep for it, too deep for both
        with pytest.raises(RecursionError):
            _load(text, fast)
        return
    got = _load(text, fast)  # the deep cases exceed the recursion limit: the generic path builds them
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # repr itself recurses
    try:
        # repr tells 1 from 1.0 from True, and shows recursive structures; nan != nan, repr does not care.
        assert repr(got) == repr(want)
    finally:
        sys.setrecursionlimit(limit)
    assert [type(doc) for doc in got] == [type(doc) for doc in want]


@pytest.mark.parametrize("loaders", sorted(LOADERS))
def test_fast_loader_keeps_aliases_shared_and_recursion(loaders: str) -> None:
    fast = LOADERS[loaders][1]
    (doc,) = _load(YAML_CASES["anchors"], fast)
    assert doc["other"] is doc["base"]
    assert doc["labels"] is doc["base"]["labels"]
    (rec,) = _load(YAML_CASES["recursive"], fast)
    assert rec["a"][1] is rec["a"]
    assert rec["b"]["self"] is rec["b"]


@pytest.mark.parametrize(
    "text",
    [
        "a: !custom 1\n",  # unknown tag: SafeLoader's constructor error
        "a: !!python/object:os.system {}\n",
        "a: [1, 2\n",  # syntax error while parsing
        "a: 1\n---\nb: *missing\n",  # unknown alias in the second document
        "? [a, b]\n: 1\n? {c: d}\n: 2\n",  # complex keys: lists are unhashable, a constructor error
    ],
)
@pytest.mark.parametrize("loaders", sorted(LOADERS))
def test_fast_loader_raises_what_safe_loader_raises(text: str, loaders: str) -> None:
    reference, fast = LOADERS[loaders]
    with pytest.raises(yaml.YAMLError) as want:
        _load(text, reference)
    with pytest.raises(yaml.YAMLError) as got:
        _load(text, fast)
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value)


# --- manifests: the same models, problems and plans ---------------------------------------------

NODEPOOLS = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  weight: 10
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}]
      requirements:
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [g]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
"""


def _spec(app: str, kind: str, cpu: Any = "500m") -> dict[str, Any]:
    own = {"matchLabels": {"app": app}}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "nginx",
                "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                "ports": [{"containerPort": 8080}],
            }
        ]
    }
    if kind == "spread":
        spec["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
            | {"labelSelector": own, "matchLabelKeys": ["version"]},
            {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
            | {"labelSelector": own},
        ]
    elif kind == "affinity":
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 50,
                        "preference": {
                            "matchExpressions": [
                                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
                            ]
                        },
                    }
                ],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": own}
                ]
            },
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": own},
                    }
                ]
            },
        }
    elif kind == "gpu":
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1, "cpu": "2", "memory": "8Gi"}}
        spec["nodeSelector"] = {"karpenter.k8s.aws/instance-category": "g"}
    elif kind == "init":
        spec["initContainers"] = [
            {"name": "setup", "image": "busybox", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}},
            {
                "name": "sidecar",
                "image": "envoy",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}},
            },
        ]
        spec["overhead"] = {"cpu": "100m", "memory": "32Mi"}
        spec["runtimeClassName"] = "kata"
    return spec


def _pod(name: str, spec: dict[str, Any], labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": labels},
        "spec": spec,
        **extra,
    }


def _workload(kind: str, name: str, replicas: int, spec: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": name}
    template = {"metadata": {"labels": labels}, "spec": spec}
    api = "batch/v1" if kind == "Job" else "apps/v1"
    body: dict[str, Any] = {"template": template}
    if kind == "Job":
        body |= {"parallelism": replicas, "completions": replicas}
        template["spec"] = {**spec, "restartPolicy": "Never"}
    else:
        body |= {"replicas": replicas, "selector": {"matchLabels": labels}}
    if kind == "StatefulSet":
        body["serviceName"] = name
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "shop"}, "spec": body}


def _write_cluster(root: Path) -> Path:
    """Varied manifests: YAML multi-document files, a JSON List, standalone pods that repeat a spec."""
    root.mkdir()
    (root / "nodepools.yaml").write_text(NODEPOOLS)
    pods: list[dict[str, Any]] = []
    for kind in ("plain", "spread", "affinity", "gpu", "init"):
        spec = _spec(f"pods-{kind}", kind)
        for i in range(4):
            pods.append(_pod(f"pods-{kind}-{i}", spec, {"app": f"pods-{kind}", "version": f"v{i % 2}"}))
    # The same values with other types: 1 and 1.0 are the same quantity, and must not share a validation by accident.
    pods.append(_pod("typed-int", _spec("typed", "plain", cpu=1), {"app": "typed"}))
    pods.append(_pod("typed-float", _spec("typed", "plain", cpu=1.0), {"app": "typed"}))
    pods.append(_pod("typed-str", _spec("typed", "plain", cpu="1"), {"app": "typed"}))
    # A pod bound to a node, and a finished one, with a spec pending pods also have.
    bound_spec = {**_spec("pods-plain", "plain"), "nodeName": "node-a"}
    pods.append(_pod("bound", bound_spec, {"app": "pods-plain"}, status={"phase": "Running"}))
    pods.append(_pod("done", _spec("pods-plain", "plain"), {"app": "pods-plain"}, status={"phase": "Succeeded"}))
    (root / "pods.yaml").write_text(yaml.safe_dump_all(pods, sort_keys=False))
    workloads = [
        _workload("Deployment", "web", 7, _spec("web", "spread")),
        _workload("ReplicaSet", "cache", 3, _spec("cache", "affinity")),
        _workload("StatefulSet", "db", 3, _spec("db", "init")),
        _workload("Job", "batch", 5, _spec("batch", "plain")),
    ]
    (root / "workloads.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": workloads}))
    # Anchors and merge keys in a hand-written file (the generic constructor's path), one spec repeated.
    (root / "anchored.yaml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata: {name: anchored-0, namespace: shop, labels: &l {app: anchored}}\n"
        "  spec: &s\n    containers:\n    - {name: app, image: nginx, resources: {requests: {cpu: 300m, memory: 1Gi}}}\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata: {name: anchored-1, namespace: shop, labels: *l}\n"
        "  spec:\n    <<: *s\n    tolerations: [{key: x, operator: Exists}]\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata: {name: anchored-2, namespace: shop, labels: *l}\n  spec: *s\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: skipped}\ndata: {created: 2026-11-24T00:00:00Z}\n"
    )
    # Pods written by hand, one shape repeated with other names and values (the shape-reuse path), among
    # comments, quoted names, flow style, multi-line strings, anchors, and a document that differs elsewhere.
    hand: list[str] = []
    for i, (cpu, app) in enumerate([("250m", "hand"), ("1", "hand"), ("0.5", "v1.2"), ("1500m", "hand-2"), ("2", "x")]):
        hand.append(
            f"# pod {i}\napiVersion: v1\nkind: Pod\nmetadata:\n  name: hand-{i}\n  namespace: shop\n"
            f"  labels: &l\n    app: {app}\n  annotations:\n    note: |\n      name: not-{i}\n      cpu: 9\n"
            f"spec:\n  containers:\n  - name: app  # the only one\n    image: nginx\n"
            f"    resources:\n      requests:\n        cpu: {cpu}\n        memory: 512Mi\n"
        )
        hand.append(
            f"apiVersion: v1\nkind: Pod\nmetadata: {{name: 'flow-{i}', namespace: shop, labels: {{app: flow}}}}\n"
            f'spec: {{containers: [{{name: app, image: "nginx", resources: {{requests: {{cpu: {cpu}}}}}}}]}}\n'
        )
    hand.append(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hand-odd\n  namespace: shop\n  labels:\n    app: hand\n"
        "spec:\n  tolerations: [{key: x, operator: Exists}]\n  containers:\n  - name: app\n    image: nginx\n"
        "    resources:\n      requests:\n        cpu: 250m\n        memory: 512Mi\n"
    )
    (root / "hand.yaml").write_text("---\n".join(hand))
    (root / "node.yaml").write_text(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: node-a\n  labels:\n    kubernetes.io/hostname: node-a\n"
        "    topology.kubernetes.io/zone: us-east-1a\n    kubernetes.io/arch: amd64\n"
        "status:\n  allocatable: {cpu: '4', memory: 16Gi, pods: '110'}\n  capacity: {cpu: '4', memory: 16Gi, pods: '110'}\n"
    )
    return root


def _both(monkeypatch: pytest.MonkeyPatch, run: Any) -> tuple[Any, Any]:
    """``run()`` on the fast path, then on the reference path."""
    fast = run()
    monkeypatch.setattr(manifests, "_FAST", False)
    reference = run()
    monkeypatch.setattr(manifests, "_FAST", True)
    return fast, reference


def _dump(loaded: Manifests) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in Manifests.__dataclass_fields__:
        values = getattr(loaded, name)
        out[name] = [
            (v.model_dump(mode="json", by_alias=True), sorted(v.model_fields_set)) if hasattr(v, "model_dump") else v
            for v in values
        ]
    return out


def test_fast_path_loads_the_same_manifests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _write_cluster(tmp_path / "cluster")
    fast, reference = _both(monkeypatch, lambda: load_manifests([root]))
    assert _dump(fast) == _dump(reference)
    assert [p.key for p in fast.pods] == [p.key for p in reference.pods]
    # Standalone pods with the same spec share one PodSpec (as a Deployment's replicas do); other types do not.
    by_name = {p.name: p for p in fast.pods}
    assert by_name["pods-spread-0"].spec is by_name["pods-spread-3"].spec
    assert by_name["typed-int"].spec is not by_name["typed-float"].spec
    assert by_name["typed-int"].spec is not by_name["typed-str"].spec
    assert len({id(p.spec) for p in reference.pods if p.name.startswith("pods-spread")}) == 4


@pytest.mark.parametrize("output", ["json", "table"])
def test_fast_path_plans_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str) -> None:
    root = _write_cluster(tmp_path / "cluster")

    def plan() -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["plan", "-f", str(root), "-o", output], out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    fast, reference = _both(monkeypatch, plan)
    assert fast[0] == 0
    assert fast == reference
    assert "UNSCHEDULABLE" not in fast[1]


def test_fast_path_reports_the_same_problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad spec repeated is reported for every pod; a bool quantity is refused even after the same spec with 1."""
    root = tmp_path / "bad"
    root.mkdir()
    bad = _spec("bad", "plain", cpu="lots")
    pods = [
        _pod("bad-0", bad, {"app": "bad"}),
        _pod("bad-1", bad, {"app": "bad"}),
        _pod("one", _spec("x", "plain", cpu=1), {"app": "x"}),
        _pod("true", _spec("x", "plain", cpu=True), {"app": "x"}),
        _pod("Bad_Name", _spec("x", "plain", cpu=1), {"app": "x"}),
        _pod("bad-label", _spec("x", "plain", cpu=1), {"app": "-nope-"}),
    ]
    (root / "pods.yaml").write_text(yaml.safe_dump_all(pods, sort_keys=False) + "---\nkind: [\n")

    def problems() -> list[str]:
        with pytest.raises(ManifestError) as caught:
            load_manifests([root])
        return caught.value.problems

    fast, reference = _both(monkeypatch, problems)
    assert fast == reference
    assert sum("bad-0" in p or "bad-1" in p for p in fast) >= 2
    assert any("Pod/true" in p for p in fast)
