"""`explain`, and topology/volume constraints read from real manifests through `plan`."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path
from typing import Any

from nodeflow.cli import main

from .test_plan_cli import GENERAL, GPU_POOL, deployment, plan_json, write

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "examples" / "demo")


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(args), out, err), out.getvalue(), err.getvalue()


def test_explain_unschedulable_pod_names_each_pool_reason() -> None:
    code, out, err = run("explain", "-f", DEMO, "ml/notebook")
    assert code == 0, err
    assert out.splitlines()[0] == "pod ml/notebook: cannot be scheduled"
    assert "  gpu: did not tolerate taint nvidia.com/gpu=true:NoSchedule" in out
    assert "  default: no instance type offers nvidia.com/gpu" in out


def test_explain_placed_pod_json() -> None:
    code, out, err = run("explain", "-f", DEMO, "ml/trainer", "-o", "json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    assert doc["pod"] == "ml/trainer"
    assert doc["placement"].endswith("(NodePool gpu)")
    assert doc["nodePools"]["gpu"].startswith("new NodeClaim")
    assert "nvidia.com/gpu" in doc["nodePools"]["default"]


def test_explain_unknown_pod_is_an_input_error() -> None:
    code, out, err = run("explain", "-f", DEMO, "shop/nope")
    assert code == 2
    assert out == ""
    assert "shop/nope is not a pending pod" in err


def test_zone_spread_and_hostname_anti_affinity_from_yaml(tmp_path: Path) -> None:
    spread = """
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: topology.kubernetes.io/zone
          whenUnsatisfiable: DoNotSchedule
          labelSelector: {matchLabels: {app: spread}}
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - topologyKey: kubernetes.io/hostname
              labelSelector: {matchLabels: {app: spread}}
    """
    path = write(tmp_path, "m.yaml", GENERAL, deployment("spread", 6, "500m", "512Mi", spread))
    result = plan_json(path)
    assert not result["unschedulable"]
    claims = result["nodeClaims"]
    assert len(claims) == 6  # one pod per node (anti-affinity)
    zones = [c["zones"] for c in claims]
    assert all(len(z) == 1 for z in zones)
    counts: dict[str, int] = {}
    for (zone,) in zones:
        counts[zone] = counts.get(zone, 0) + 1
    assert max(counts.values()) - min(counts.values()) <= 1
    assert len(counts) == 6  # us-east-1a..f all offer these types


def test_volume_zone_pins_the_node(tmp_path: Path) -> None:
    volumes = """
    apiVersion: v1
    kind: PersistentVolume
    metadata: {name: pv-data}
    spec:
      capacity: {storage: 10Gi}
      accessModes: [ReadWriteOnce]
      storageClassName: gp3
      csi: {driver: ebs.csi.aws.com, volumeHandle: vol-0123}
      nodeAffinity:
        required:
          nodeSelectorTerms:
            - matchExpressions:
                - {key: topology.ebs.csi.aws.com/zone, operator: In, values: [us-east-1c]}
    ---
    apiVersion: v1
    kind: PersistentVolumeClaim
    metadata: {name: data, namespace: default, annotations: {pv.kubernetes.io/bind-completed: "yes"}}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: gp3
      volumeName: pv-data
      resources: {requests: {storage: 10Gi}}
    ---
    apiVersion: storage.k8s.io/v1
    kind: StorageClass
    metadata: {name: wffc}
    provisioner: ebs.csi.aws.com
    volumeBindingMode: WaitForFirstConsumer
    allowedTopologies:
      - matchLabelExpressions:
          - {key: topology.ebs.csi.aws.com/zone, values: [us-east-1d]}
    ---
    apiVersion: v1
    kind: PersistentVolumeClaim
    metadata: {name: scratch, namespace: default}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: wffc
      resources: {requests: {storage: 10Gi}}
    """
    pods = """
    apiVersion: v1
    kind: Pod
    metadata: {name: db, namespace: default}
    spec:
      volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
      containers: [{name: c, image: x, resources: {requests: {cpu: "1", memory: 1Gi}}}]
    ---
    apiVersion: v1
    kind: Pod
    metadata: {name: worker, namespace: default}
    spec:
      volumes: [{name: s, persistentVolumeClaim: {claimName: scratch}}]
      containers: [{name: c, image: x, resources: {requests: {cpu: "1", memory: 1Gi}}}]
    ---
    apiVersion: v1
    kind: Pod
    metadata: {name: orphan, namespace: default}
    spec:
      volumes: [{name: s, persistentVolumeClaim: {claimName: missing}}]
      containers: [{name: c, image: x}]
    """
    path = write(tmp_path, "m.yaml", GENERAL, textwrap.dedent(volumes), textwrap.dedent(pods))
    result = plan_json(path)
    zones = {p: c["zones"] for c in result["nodeClaims"] for p in c["pods"]}
    assert zones["default/db"] == ["us-east-1c"]
    assert zones["default/worker"] == ["us-east-1d"]
    (orphan,) = result["unschedulable"]
    assert orphan["pods"] == ["default/orphan"]
    assert 'persistentvolumeclaim "default/missing" not found' in orphan["reasons"]["general"]


def test_explain_pod_on_existing_node() -> None:
    code, out, _ = run("plan", "-f", DEMO, "-o", "json")
    assert code == 0
    (existing,) = json.loads(out)["existingNodes"]
    pod = existing["pods"][0]
    code, out, err = run("explain", "-f", DEMO, pod)
    assert code == 0, err
    assert out.splitlines()[0] == f"pod {pod}: goes to existing node {existing['name']}"
    assert f"  default: could host it, but existing node {existing['name']} has room for it" in out


def test_explain_names_a_node_class_that_is_not_ready(tmp_path: Path) -> None:
    """A NodePool whose EC2NodeClass reports Ready=False (for its current generation) is skipped with that reason;
    the pod goes to another NodePool. A Ready condition of an older generation says nothing (the class is used)."""
    broken = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: preferred}
spec:
  weight: 100
  template:
    spec:
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: broken}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: broken, generation: GENERATION}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: nowhere}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
status:
  conditions:
    - {type: Ready, status: "False", reason: UnhealthyDependents, observedGeneration: 2,
       message: subnetSelectorTerms matched no subnet, lastTransitionTime: "2026-11-20T10:00:00Z"}
"""
    path = write(tmp_path, "m.yaml", GENERAL, broken.replace("GENERATION", "2"), deployment("app", 1, "1", "1Gi"))
    pod = plan_json(path)["nodeClaims"][0]["pods"][0]
    assert plan_json(path)["nodeClaims"][0]["nodePool"] == "general"
    code, out, err = run("explain", "-f", str(path), pod, "-o", "json")
    assert code == 0, err
    why = json.loads(out)["nodePools"]["preferred"]
    assert why == "EC2NodeClass 'broken' is not ready: subnetSelectorTerms matched no subnet"
    edited = write(tmp_path, "n.yaml", GENERAL, broken.replace("GENERATION", "3"), deployment("app", 1, "1", "1Gi"))
    assert plan_json(edited)["nodeClaims"][0]["nodePool"] == "preferred"


# --- explain a workload: its pending pods, grouped -----------------------------------------------------------


def _template(name: str, cpu: str = "1") -> str:
    return f"""
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: x, resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}}}]
"""


WORKLOADS = [
    f"apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: db, namespace: default}}\nspec:\n  replicas: 2"
    f"\n  serviceName: db{_template('db')}",
    f"apiVersion: batch/v1\nkind: Job\nmetadata: {{name: etl, namespace: default}}\nspec:\n  parallelism: 3{_template('etl')}",
    f"apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {{name: cache, namespace: default}}\nspec:\n  replicas: 2"
    f"{_template('cache')}",
    f"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: agent, namespace: default}}\nspec:{_template('agent', '100m')}",
    "apiVersion: v1\nkind: Pod\nmetadata: {name: solo, namespace: default}\nspec:\n"
    '  containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]',
    # a pod as `kubectl get pod -o yaml` gives it: its Deployment is known only by its ReplicaSet and label
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: shop-7c9f8d-abcde\n  namespace: default\n"
    "  labels: {app: shop, pod-template-hash: 7c9f8d}\n"
    "  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: shop-7c9f8d, uid: u1, controller: true}]\n"
    'spec:\n  containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]',
]


def _cluster(tmp_path: Path) -> Path:
    huge = deployment("huge", 3, "1000", "1Gi")  # no instance type is that large: unschedulable, one reason
    return write(tmp_path, "m.yaml", GENERAL, GPU_POOL, deployment("web", 5, "1", "1Gi"), huge, *WORKLOADS)


def _owned(path: Path, prefix: str) -> set[str]:
    result = plan_json(path)
    placed = {p for c in result["nodeClaims"] for p in c["pods"]}
    stuck = {p for u in result["unschedulable"] for p in u["pods"]}
    return {p for p in placed | stuck if p.startswith(f"default/{prefix}-")}


def test_explain_a_workload_explains_each_of_its_pending_pods_grouped(tmp_path: Path) -> None:
    path = _cluster(tmp_path)
    for query, kind, count, prefix in [
        ("default/web", "Deployment", 5, "web"),
        ("default/db", "StatefulSet", 2, "db"),
        ("default/etl", "Job", 3, "etl"),
        ("default/cache", "ReplicaSet", 2, "cache"),
        ("default/shop", "Deployment", 1, "shop"),  # from the pod's owner and pod-template-hash
        ("default/shop-7c9f8d", "ReplicaSet", 1, "shop"),
    ]:
        code, out, err = run("explain", "-f", str(path), query)
        assert (code, err) == (0, ""), query
        assert out.splitlines()[0] == f"{kind} {query}: {count} pending pod{'s' if count > 1 else ''}"
        code, out, err = run("explain", "-f", str(path), query, "-o", "json")
        (workload,) = json.loads(out)["workloads"]
        assert (workload["kind"], workload["pendingPods"]) == (kind, count)
        pods = [p for e in workload["explanations"] for p in e["pods"]]
        assert len(pods) == count
        assert set(pods) == _owned(path, prefix)

    # identical explanations are one group, its reasons said once
    code, out, err = run("explain", "-f", str(path), "default/huge")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Deployment default/huge: 3 pending pods"
    assert lines[1].startswith("  3 pods (default/huge-")
    assert lines[1].endswith("): cannot be scheduled")
    assert len(lines) == 4  # the header, the group and one line per NodePool
    assert lines[2].startswith("    general: ")
    assert lines[3] == "    gpu: did not tolerate taint nvidia.com/gpu=true:NoSchedule"

    # a bare pod: as before
    code, out, err = run("explain", "-f", str(path), "default/solo")
    assert out.splitlines()[0].startswith("pod default/solo: goes to new NodeClaim")


def test_explain_a_daemonset_says_which_nodepools_nodes_run_it_and_the_overhead(tmp_path: Path) -> None:
    code, out, err = run("explain", "-f", str(_cluster(tmp_path)), "default/ds/agent")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "DaemonSet default/agent: its pods are not planned, they run on every node they fit",
        "  general: runs on its nodes: cpu 100m, memory 1Gi of overhead on each",
        "  gpu: does not run on its nodes: did not tolerate taint nvidia.com/gpu=true:NoSchedule",
    ]


def test_explain_names_the_value_that_matches_nothing_and_near_matches(tmp_path: Path) -> None:
    path = str(_cluster(tmp_path))
    code, out, err = run("explain", "-f", path, "default/wbe")
    assert (code, out) == (2, "")
    assert err.startswith("error: default/wbe is not a pending pod or a workload in the manifests; near matches: ")
    assert "default/web (Deployment, 5 pending pods)" in err
    # a pod name from an earlier rollout: its Deployment and ReplicaSet first
    code, _, err = run("explain", "-f", path, "default/web-6b8f9c7d5-zzzzz")
    assert code == 2
    assert "near matches: default/web (Deployment, 5 pending pods)" in err
    code, _, err = run("explain", "-f", path, "shop/web")  # the same name in another namespace
    assert "near matches: default/web (Deployment, 5 pending pods)" in err
    code, _, err = run("explain", "-f", path, "default/sts/web")
    assert err.startswith("error: default/sts/web is not a StatefulSet in the manifests; near matches: default/web")
    code, _, err = run("explain", "-f", path, "default/cronjob/web")
    assert (code, err.split(":")[:2]) == (2, ["error", " 'default/cronjob/web'"])
    assert "'cronjob' is not a kind explain knows" in err
