"""`python -m nodeflow plan` end to end on real manifests and the bundled catalog."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nodeflow.api.manifests import load_manifests
from nodeflow.catalog.offline import load_offline
from nodeflow.cli import main
from nodeflow.cluster import ClusterState
from nodeflow.plan import build_input
from nodeflow.scheduling import resources as res
from nodeflow.scheduling.pricing import type_matches

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "karpenter").glob("*.yaml"))

GENERAL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["2"]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
"""

GPU_POOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu}
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [g, p]}
      taints:
        - {key: nvidia.com/gpu, value: "true", effect: NoSchedule}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"""


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["plan", *args], out, err)
    return code, out.getvalue(), err.getvalue()


def main_io(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out, err)
    return code, out.getvalue(), err.getvalue()


def plan_json(*paths: Path) -> dict[str, Any]:
    code, out, err = run(*[a for p in paths for a in ("-f", str(p))], "-o", "json")
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def write(tmp_path: Path, name: str, *docs: str) -> Path:
    path = tmp_path / name
    path.write_text("\n---\n".join(textwrap.dedent(d).strip() for d in docs) + "\n")
    return path


def deployment(name: str, replicas: int, cpu: str, memory: str, spec_extra: str = "") -> str:
    extra = textwrap.indent(textwrap.dedent(spec_extra).strip(), " " * 6) if spec_extra else ""
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
{extra}
      containers:
        - name: main
          image: example
          resources: {{requests: {{cpu: "{cpu}", memory: {memory}}}}}
"""


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_published_example_loads_and_plans(example: Path, tmp_path: Path) -> None:
    manifests = load_manifests([example])
    (pool,) = manifests.node_pools
    os_name = "windows" if "windows" in pool.name else "linux"
    pod = write(
        tmp_path,
        "pod.yaml",
        f"""
        apiVersion: v1
        kind: Pod
        metadata: {{name: probe, namespace: default}}
        spec:
          nodeSelector: {{karpenter.sh/nodepool: {pool.name}, kubernetes.io/os: {os_name}}}
          tolerations: [{{operator: Exists}}]
          containers:
            - name: probe
              image: example
              resources: {{requests: {{cpu: 500m, memory: 512Mi}}}}
        """,
    )
    result = plan_json(example, pod)
    assert result["unschedulable"] == []
    (claim,) = result["nodeClaims"]
    assert claim["nodePool"] == pool.name
    assert claim["pods"] == ["default/probe"]
    assert claim["pricePerHour"] > 0


def test_gpu_pod_with_toleration_lands_on_the_tainted_gpu_pool(tmp_path: Path) -> None:
    gpu_pod = """
    apiVersion: v1
    kind: Pod
    metadata: {name: train, namespace: ml}
    spec:
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      containers:
        - name: train
          image: example
          resources: {limits: {nvidia.com/gpu: 1}}
    """
    result = plan_json(write(tmp_path, "m.yaml", GENERAL, GPU_POOL, gpu_pod))
    (claim,) = result["nodeClaims"]
    assert claim["nodePool"] == "gpu"
    assert claim["requests"]["nvidia.com/gpu"] == "1"
    catalog = load_offline()
    for name in claim["instanceTypes"]:
        assert catalog.infos[name].gpus, f"{name} has no GPU"

    untolerated = gpu_pod.replace("tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]", "")
    result = plan_json(write(tmp_path, "m.yaml", GENERAL, GPU_POOL, untolerated))
    assert result["nodeClaims"] == []
    (item,) = result["unschedulable"]
    assert item["pods"] == ["ml/train"]
    assert "nvidia.com/gpu=true:NoSchedule" in item["reasons"]["gpu"]
    assert "nvidia.com/gpu" in item["reasons"]["general"]


def test_three_replicas_get_one_right_sized_node_of_the_cheapest_fitting_type(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", GENERAL, deployment("app", 3, "1", "8Gi"))
    result = plan_json(path)
    (claim,) = result["nodeClaims"]
    assert len(claim["pods"]) == 3
    # Brute force over the pool's resolved catalog: the cheapest type holding all three pods.
    inp = build_input(ClusterState.from_manifests(load_manifests([path])), load_offline())
    (pool,) = inp.nodepools
    pod_requests = inp.pods[0].requests
    three = res.add({}, pod_requests, 3)
    fitting = [it for it in pool.instance_types if type_matches(it, pool.requirements)]
    # (the pool has no capacity-type requirement: spot and on-demand offerings alike, as Karpenter)
    price = {it.name: min(o.price for o in it.offerings if o.available) for it in fitting}
    best_one_node = min((price[it.name], it.name) for it in fitting if res.fits(three, it.allocatable))
    assert claim["instanceTypes"][0] == best_one_node[1]
    assert claim["pricePerHour"] == pytest.approx(best_one_node[0])
    # ...and one node is cheaper than a node per pod.
    best_single = min(price[it.name] for it in fitting if res.fits(pod_requests, it.allocatable))
    assert claim["pricePerHour"] < 3 * best_single


def test_cpu_limit_counts_what_the_pool_already_runs(tmp_path: Path) -> None:
    limited = GENERAL.replace(
        "metadata: {name: general}\nspec:\n", "metadata: {name: general}\nspec:\n  limits: {cpu: 100}\n"
    )
    nodes = [
        f"""
        apiVersion: v1
        kind: Node
        metadata:
          name: node-{i}
          labels: {{karpenter.sh/nodepool: general, karpenter.sh/initialized: "true", kubernetes.io/arch: amd64}}
        status:
          capacity: {{cpu: "16", memory: 64Gi, pods: "110"}}
          allocatable: {{cpu: "16", memory: 60Gi, pods: "110"}}
        """
        for i in range(5)
    ]
    busy = [
        f"""
        apiVersion: v1
        kind: Pod
        metadata: {{name: busy-{i}, namespace: default}}
        spec:
          nodeName: node-{i}
          containers: [{{name: c, image: x, resources: {{requests: {{cpu: "16"}}}}}}]
        status: {{phase: Running}}
        """
        for i in range(5)
    ]
    path = write(tmp_path, "m.yaml", limited, *nodes, *busy, deployment("app", 40, "1", "1Gi"))
    result = plan_json(path)
    catalog = load_offline()
    new_cpu = sum(max(catalog.infos[t].vcpus for t in nc["instanceTypes"]) for nc in result["nodeClaims"])
    assert 0 < new_cpu <= 20
    placed = sum(len(nc["pods"]) for nc in result["nodeClaims"])
    assert placed + sum(len(u["pods"]) for u in result["unschedulable"]) == 40
    assert result["unschedulable"], "the rest must be reported"
    reason = result["unschedulable"][0]["reasons"]["general"]
    assert "limit cpu=100" in reason
    assert "remaining" in reason


def test_json_shape_is_the_documented_contract(tmp_path: Path) -> None:
    result = plan_json(ROOT / "examples" / "demo")
    assert list(result) == ["nodeClaims", "existingNodes", "unschedulable", "totalPricePerHour", "warnings"]
    assert all(isinstance(w, str) and w for w in result["warnings"])
    for claim in result["nodeClaims"]:
        assert list(claim) == [
            "nodePool",
            "instanceTypes",
            "capacityType",
            "zones",
            "pods",
            "requests",
            "pricePerHour",
            "labels",
        ]
        assert claim["capacityType"] in ("spot", "on-demand")
        assert all(isinstance(v, str) for v in claim["requests"].values())
        assert all("/" in p for p in claim["pods"])
        assert isinstance(claim["pricePerHour"], float)
        assert all(isinstance(v, str) for v in claim["labels"].values())
    for node in result["existingNodes"]:
        assert list(node) == ["name", "pods"]
    for item in result["unschedulable"]:
        assert list(item) == ["pods", "reasons"]
        assert item["pods"]
        assert all("/" in p for p in item["pods"])
        assert all(isinstance(v, str) and v for v in item["reasons"].values())
    total = sum(nc["pricePerHour"] for nc in result["nodeClaims"])
    assert result["totalPricePerHour"] == pytest.approx(total)
    (existing,) = result["existingNodes"]
    assert existing["name"] == "ip-10-0-1-23.ec2.internal"
    assert existing["pods"]


def test_same_input_same_bytes() -> None:
    first = run("-f", str(ROOT / "examples" / "demo"), "-o", "json")
    second = run("-f", str(ROOT / "examples" / "demo"), "-o", "json")
    assert first == second
    assert first[0] == 0


def test_table_output(tmp_path: Path) -> None:
    code, out, err = run("-f", str(ROOT / "examples" / "demo"))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["NODEPOOL", "INSTANCE", "TYPE"]
    assert any(line.startswith("TOTAL: ") and "$" in line for line in lines)
    assert "UNSCHEDULABLE: 1 pod(s)" in out
    assert "ml/notebook" in out


def test_bad_manifest_names_file_document_kind_and_field(tmp_path: Path) -> None:
    bad = GENERAL.replace('operator: Gt, values: ["2"]', 'operator: Gt, values: ["two"]')
    path = write(tmp_path, "bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}", bad)
    code, out, err = run("-f", str(path))
    assert code == 2
    assert out == ""
    assert str(path) in err
    assert "document 1" in err
    assert "NodePool/general" in err
    assert "spec.template.spec.requirements[1]" in err


def test_unknown_region_offline_is_a_clear_error(tmp_path: Path) -> None:
    code, out, err = run("-f", str(ROOT / "examples" / "demo"), "--region", "eu-west-9")
    assert code == 2
    assert out == ""
    assert "eu-west-9" in err
    assert "us-east-1" in err


def test_a_reason_about_the_cluster_is_said_once_not_once_per_pod(tmp_path: Path) -> None:
    """No NodePool: 21 pods used to get "-: no NodePool is defined" each (21 lines); the reason is the cluster's."""
    path = write(tmp_path, "m.yaml", deployment("web", 16, "1", "1Gi"), deployment("api", 5, "1", "1Gi"))
    code, out, err = run("-f", str(path))
    assert code == 0, err
    assert out.count("no NodePool is defined") == 1
    assert "-: " not in out
    assert "UNSCHEDULABLE: 21 pod(s)" in out
    assert "  21 pods (default/api-" in out
    assert "and 16 more)" in out
    (group,) = plan_json(path)["unschedulable"]
    assert len(group["pods"]) == len(set(group["pods"])) == 21
    assert group["reasons"] == {"-": "no NodePool is defined"}

    pod = group["pods"][0]
    code, out, err = main_io("explain", "-f", str(path), pod)
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"pod {pod}: cannot be scheduled", "  no NodePool is defined"]


def test_unschedulable_pods_with_the_same_reasons_are_one_group_and_a_shared_reason_one_line(tmp_path: Path) -> None:
    """Three replicas that need a missing claim, two NodePools with the same reason for them, and one pod with
    reasons of its own: two groups; the claim's reason once, naming both NodePools."""
    other = GENERAL.split("---")[0].replace("name: general", "name: other")
    claim = """
      volumes: [{name: data, persistentVolumeClaim: {claimName: missing}}]
    """
    huge = deployment("huge", 1, "1000", "1Gi")
    path = write(tmp_path, "m.yaml", GENERAL, other, deployment("app", 3, "1", "1Gi", claim), huge)
    code, out, err = run("-f", str(path))
    assert code == 0, err
    lines = out.splitlines()
    start = lines.index("UNSCHEDULABLE: 4 pod(s)")
    assert lines[start + 1].startswith("  3 pods (default/app-")
    assert lines[start + 2] == '    general, other: persistentvolumeclaim "default/missing" not found'
    assert lines[start + 3].startswith("  default/huge-")
    assert out.count("not found") == 1
    groups = plan_json(path)["unschedulable"]
    assert [len(g["pods"]) for g in groups] == [3, 1]
    assert set(groups[0]["reasons"]) == set(groups[1]["reasons"]) == {"general", "other"}


def test_missing_node_class_makes_the_pool_unusable_with_a_reason(tmp_path: Path) -> None:
    only_pool = GENERAL.split("---")[0]
    path = write(tmp_path, "m.yaml", only_pool, deployment("app", 1, "1", "1Gi"))
    result = plan_json(path)
    assert "EC2NodeClass 'default'" in result["unschedulable"][0]["reasons"]["general"]


def test_pods_join_a_nodeclaim_that_is_still_launching(tmp_path: Path) -> None:
    launching = """
    apiVersion: karpenter.sh/v1
    kind: NodeClaim
    metadata:
      name: general-abcde
      labels: {karpenter.sh/nodepool: general}
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}
        - {key: karpenter.sh/nodepool, operator: In, values: [general]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
    """
    result = plan_json(write(tmp_path, "m.yaml", GENERAL, launching, deployment("app", 5, "1", "1Gi")))
    # m5.xlarge: 4 vCPU, 3920m allocatable -> three 1-CPU pods join it, two need a new node.
    assert [n["name"] for n in result["existingNodes"]] == ["general-abcde"]
    assert len(result["existingNodes"][0]["pods"]) == 3
    assert sum(len(nc["pods"]) for nc in result["nodeClaims"]) == 2


def test_nodes_limit(tmp_path: Path) -> None:
    limited = GENERAL.replace(
        "metadata: {name: general}\nspec:\n", "metadata: {name: general}\nspec:\n  limits: {nodes: 2}\n"
    )
    result = plan_json(
        write(
            tmp_path,
            "m.yaml",
            limited,
            deployment("app", 3, "1", "8Gi", "nodeSelector: {node.kubernetes.io/instance-type: r5.large}"),
        )
    )
    assert len(result["nodeClaims"]) == 2
    (item,) = result["unschedulable"]
    assert "limit nodes=2" in item["reasons"]["general"]


# --- warnings: what a plan assumes -------------------------------------------------------------

RESOLVED_STATUS = """
status:
  subnets:
    - {id: subnet-a, zone: us-east-1a, zoneID: use1-az1}
    - {id: subnet-b, zone: us-east-1b, zoneID: use1-az2}
"""


def bare_pod(name: str) -> str:
    return f"""
    apiVersion: v1
    kind: Pod
    metadata: {{name: {name}, namespace: shop}}
    spec:
      containers: [{{name: c, image: x}}]
    """


def test_no_warnings_gives_an_empty_list_and_the_same_bytes_as_before(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", GENERAL + RESOLVED_STATUS, deployment("web", 3, "500m", "1Gi"))
    code, out, err = run("-f", str(path), "-o", "json")
    assert (code, err) == (0, "")
    inp = build_input(ClusterState.from_manifests(load_manifests([str(path)])), load_offline())
    from nodeflow.scheduling.solver import solve

    assert out == json.dumps({**solve(inp).to_json(), "warnings": []}, indent=2) + "\n"
    zones = {z for nc in json.loads(out)["nodeClaims"] for z in nc["zones"]}
    assert zones <= {"us-east-1a", "us-east-1b"}
    code, table, err = run("-f", str(path))
    assert (code, err) == (0, "")
    assert table.startswith("NODEPOOL")


def test_warns_of_a_node_class_without_status_naming_it(tmp_path: Path) -> None:
    unused = GENERAL.split("---")[1].replace("name: default", "name: unused")
    path = write(tmp_path, "m.yaml", GENERAL, unused, deployment("web", 2, "1", "1Gi"))
    result = plan_json(path)
    assert result["warnings"] == [
        "EC2NodeClass 'default' has no status (it was not resolved against AWS): all zones of us-east-1 are assumed"
    ]
    code, out, err = run("-f", str(path))
    assert code == 0
    assert err == (
        "warning: EC2NodeClass 'default' has no status (it was not resolved against AWS): "
        "all zones of us-east-1 are assumed\n"
    )
    assert "warning" not in out
    with_status_no_subnets = GENERAL + "status: {conditions: []}\n"
    path = write(tmp_path, "n.yaml", with_status_no_subnets, deployment("web", 2, "1", "1Gi"))
    assert ["no subnets in its status" in w for w in plan_json(path)["warnings"]] == [True]


def test_warns_when_no_pending_pod_is_found(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", GENERAL + RESOLVED_STATUS)
    result = plan_json(path)
    assert result["nodeClaims"] == []
    assert len(result["warnings"]) == 1
    assert result["warnings"][0].startswith("no pending pods found")
    code, out, err = run("-f", str(path))
    assert code == 0
    assert err.startswith("warning: no pending pods found")
    assert "TOTAL: 0 new node(s)" in out


def test_warns_of_pods_without_requests_naming_few_and_counting_many(tmp_path: Path) -> None:
    few = write(tmp_path, "few.yaml", GENERAL + RESOLVED_STATUS, bare_pod("b"), bare_pod("a"))
    (warning,) = plan_json(few)["warnings"]
    assert warning.startswith("2 pending pod(s) request no resources")
    assert ": shop/a, shop/b;" in warning
    many = write(tmp_path, "many.yaml", GENERAL + RESOLVED_STATUS, *(bare_pod(f"p{i}") for i in range(8)))
    (warning,) = plan_json(many)["warnings"]
    assert warning.startswith("8 pending pod(s) request no resources")
    assert ": shop/p0, shop/p1, shop/p2, shop/p3, shop/p4 and 3 more;" in warning
    # A pod with only a limit has a request (Kubernetes defaults it), so it is not named.
    limited = bare_pod("lim").replace("image: x", "image: x, resources: {limits: {cpu: '1'}}")
    path = write(tmp_path, "lim.yaml", GENERAL + RESOLVED_STATUS, limited)
    assert plan_json(path)["warnings"] == []
