import json

from nodeflow.api import labels as wk
from nodeflow.scheduling.requirements import Requirement, Requirements
from nodeflow.scheduling.solver import solve
from nodeflow.scheduling.taints import Taint, Toleration
from nodeflow.scheduling.types import NodeInput, PodInput, SchedulingInput

from .fakes import CATALOG, GI, pod, pool

ARCH_AMD = Requirement.create(wk.LABEL_ARCH, "In", ["amd64"])
SPOT_OD = Requirement.create(wk.LABEL_CAPACITY_TYPE, "In", ["spot", "on-demand"])


def test_three_pods_get_one_right_sized_node() -> None:
    pods = tuple(pod(f"web-{i}", "1", "8Gi") for i in range(3))
    result = solve(SchedulingInput(pods=pods, nodepools=(pool("default", ARCH_AMD),)))
    assert len(result.node_claims) == 1
    claim = result.node_claims[0]
    assert sorted(claim.pods) == ["default/web-0", "default/web-1", "default/web-2"]
    # 3 CPU / 24Gi: r.xlarge (4 CPU, 32Gi, spot 0.10) is the cheapest type that fits all three.
    assert claim.instance_types[0] == "r.xlarge"
    # no capacity-type requirement: every capacity type is allowed (Karpenter's NodeClaimTemplate.ToNodeClaim
    # then requires the ones its types offer, and the AWS provider launches spot before on-demand)
    assert claim.capacity_type == "spot"
    assert claim.requirements[wk.LABEL_CAPACITY_TYPE] == Requirement.create(
        wk.LABEL_CAPACITY_TYPE, "In", ["spot", "on-demand"]
    )
    assert claim.price == 0.10
    assert set(claim.instance_types) == {"r.xlarge", "m.2xlarge", "c.4xlarge", "r.2xlarge", "m.8xlarge"}
    assert claim.zones == ("zone-a", "zone-b")
    assert not result.unschedulable


def test_spot_chosen_when_allowed_and_cheaper() -> None:
    result = solve(SchedulingInput(pods=(pod("a", "1", "1Gi"),), nodepools=(pool("p", SPOT_OD, ARCH_AMD),)))
    (claim,) = result.node_claims
    assert claim.capacity_type == "spot"
    assert claim.instance_types[0] == "c.large"
    assert claim.price == 0.035


def test_many_pods_pack_onto_efficient_nodes_without_overcommit() -> None:
    pods = tuple(pod(f"p-{i:03d}", "500m", "1Gi") for i in range(100))
    result = solve(SchedulingInput(pods=pods, nodepools=(pool("p", ARCH_AMD),)))
    placed = [p for nc in result.node_claims for p in nc.pods]
    assert sorted(placed) == sorted(p.key for p in pods)
    by_name = {it.name: it for it in CATALOG}
    for claim in result.node_claims:
        cheapest = by_name[claim.instance_types[0]]
        assert claim.requests["cpu"] <= cheapest.allocatable["cpu"]
        assert claim.requests["memory"] <= cheapest.allocatable["memory"]
    # 50 CPU of pods at the best $/CPU (c.4xlarge, 0.0425/CPU) costs at least 2.125/h.
    assert result.total_price <= 2.125 * 1.1


def test_existing_node_capacity_used_first() -> None:
    node = NodeInput(
        name="node-1",
        labels={wk.LABEL_ARCH: "amd64", wk.LABEL_HOSTNAME: "node-1"},
        allocatable={"cpu": 4000, "memory": 16 * GI, "pods": 110_000},
        requested={"cpu": 1000, "memory": GI, "pods": 1000},
        pods=("default/old",),
    )
    pods = tuple(pod(f"p-{i}", "1", "1Gi") for i in range(5))
    result = solve(SchedulingInput(pods=pods, nodepools=(pool(),), nodes=(node,)))
    (placement,) = result.existing
    assert placement.name == "node-1"
    assert len(placement.pods) == 3
    assert sum(len(nc.pods) for nc in result.node_claims) == 2


def test_gpu_pod_needs_the_toleration() -> None:
    gpu_pool = pool(
        "gpu",
        Requirement.create(wk.LABEL_INSTANCE_GPU_COUNT, "Exists"),
        taints=(Taint("nvidia.com/gpu", "NoSchedule", "true"),),
    )
    general = pool("default", Requirement.create(wk.LABEL_INSTANCE_CATEGORY, "In", ["c", "m", "r"]))
    gpu = {wk.RESOURCE_NVIDIA_GPU: 1000}
    without = pod("train", "1", "4Gi", extra=gpu)
    result = solve(SchedulingInput(pods=(without,), nodepools=(gpu_pool, general)))
    assert not result.node_claims
    (unsched,) = result.unschedulable
    assert "nvidia.com/gpu=true:NoSchedule" in unsched.reasons["gpu"]
    assert "nvidia.com/gpu" in unsched.reasons["default"]

    tolerating = pod("train", "1", "4Gi", extra=gpu, tolerations=(Toleration("nvidia.com/gpu", "Exists"),))
    result = solve(SchedulingInput(pods=(tolerating,), nodepools=(gpu_pool, general)))
    (claim,) = result.node_claims
    assert claim.nodepool == "gpu"
    assert claim.instance_types == ("g.xlarge",)


def test_cpu_limit_caps_new_capacity_and_reports_the_rest() -> None:
    limited = pool("limited", ARCH_AMD, limits={"cpu": 100_000})
    existing = NodeInput(
        name="old",
        labels={wk.LABEL_NODEPOOL: "limited", wk.LABEL_INITIALIZED: "true"},
        allocatable={"cpu": 80_000, "memory": 320 * GI, "pods": 110_000},
        capacity={"cpu": 80_000, "memory": 320 * GI, "pods": 110_000},
        requested={"cpu": 80_000, "pods": 1000},
        nodepool="limited",
    )
    pods = tuple(pod(f"p-{i:02d}", "1", "1Gi") for i in range(40))
    result = solve(SchedulingInput(pods=pods, nodepools=(limited,), nodes=(existing,)))
    by_name = {it.name: it for it in CATALOG}
    new_cpu = sum(max(by_name[t].capacity["cpu"] for t in nc.instance_types) for nc in result.node_claims)
    assert new_cpu <= 20_000
    assert result.unschedulable
    assert sum(len(nc.pods) for nc in result.node_claims) + len(result.unschedulable) == 40
    reason = result.unschedulable[0].reasons["limited"]
    assert "limit cpu=100" in reason
    assert "remaining" in reason


def test_weight_orders_nodepools() -> None:
    low = pool("low", weight=1)
    high = pool("high", Requirement.create(wk.LABEL_INSTANCE_FAMILY, "In", ["m"]), weight=50)
    result = solve(SchedulingInput(pods=(pod("a"),), nodepools=(low, high)))
    assert result.node_claims[0].nodepool == "high"
    assert result.node_claims[0].instance_types[0] == "m.large"


def test_node_selector_and_or_terms() -> None:
    arm = Requirements([Requirement.create(wk.LABEL_ARCH, "In", ["arm64"])])
    nowhere = Requirements([Requirement.create(wk.LABEL_INSTANCE_TYPE, "In", ["x.huge"])])
    result = solve(SchedulingInput(pods=(pod("a", requirements=(nowhere, arm)),), nodepools=(pool(),)))
    assert result.node_claims[0].instance_types == ("a.large",)
    result = solve(SchedulingInput(pods=(pod("b", requirements=(nowhere,)),), nodepools=(pool(),)))
    reason = result.unschedulable[0].reasons["default"]
    assert "no instance type" in reason
    assert "x.huge" in reason


def test_custom_label_must_come_from_the_nodepool() -> None:
    team = Requirements([Requirement.create("team", "In", ["blue"])])
    result = solve(SchedulingInput(pods=(pod("a", requirements=(team,)),), nodepools=(pool(),)))
    assert "team" in result.unschedulable[0].reasons["default"]
    labelled = pool(labels={"team": "blue"})
    result = solve(SchedulingInput(pods=(pod("a", requirements=(team,)),), nodepools=(labelled,)))
    assert result.node_claims[0].requirements["team"].values == {"blue"}


def test_daemonset_overhead_counts_on_every_new_node() -> None:
    daemon = PodInput(key="kube-system/ds", requests={"cpu": 1500, "memory": GI, "pods": 1000})
    result = solve(SchedulingInput(pods=(pod("a", "1", "1Gi"),), nodepools=(pool(),), daemon_pods=(daemon,)))
    (claim,) = result.node_claims
    assert claim.requests["cpu"] == 2500
    assert claim.instance_types[0] == "c.xlarge"  # 2.5 CPU does not fit a 2-CPU type


def test_too_big_pod_reports_largest_candidate() -> None:
    result = solve(SchedulingInput(pods=(pod("huge", "64", "1Gi"),), nodepools=(pool(),)))
    reason = result.unschedulable[0].reasons["default"]
    assert "enough cpu" in reason
    assert "m.8xlarge" in reason


def test_host_ports_conflict_on_one_node() -> None:
    ports = frozenset({("0.0.0.0", "TCP", 8080)})
    pods = (pod("a", "100m", "100Mi", host_ports=ports), pod("b", "100m", "100Mi", host_ports=ports))
    result = solve(SchedulingInput(pods=pods, nodepools=(pool(),)))
    assert len(result.node_claims) == 2


def test_no_nodepool() -> None:
    result = solve(SchedulingInput(pods=(pod("a"),), nodepools=()))
    assert result.unschedulable[0].reasons == {"-": "no NodePool is defined"}


def test_deterministic_json() -> None:
    pods = tuple(pod(f"p-{i}", ["100m", "1", "250m"][i % 3], ["1Gi", "300Mi"][i % 2]) for i in range(60))
    inp = SchedulingInput(pods=pods, nodepools=(pool("a", SPOT_OD), pool("b", weight=3)))
    first = json.dumps(solve(inp).to_json(), sort_keys=True)
    second = json.dumps(
        solve(SchedulingInput(pods=tuple(reversed(pods)), nodepools=inp.nodepools)).to_json(), sort_keys=True
    )
    assert first == second
