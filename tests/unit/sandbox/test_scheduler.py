"""The simulated kube-scheduler's fit rules (sandbox/scheduler.py): resources after the pods already bound,
nodeSelector, required node affinity, taints, required pod affinity and anti-affinity."""

from __future__ import annotations

from typing import Any

from sandbox.scheduler import fit, pod_requests

DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
UNREGISTERED = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}


def node(
    name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110", ready: bool = True, **extra: Any
) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "us-east-1a", **extra.pop("labels", {})}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": extra.pop("taints", [])},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str, cpu: str = "1", memory: str = "1Gi", on: str | None = None, app: str = "web", **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            **({"nodeName": on} if on else {}),
            **spec,
        },
        "status": {"phase": "Running" if on else "Pending"},
    }


def hostname_term(kind: str, app: str) -> dict[str, Any]:
    return {
        kind: {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }


def test_requests_sum_containers_and_take_the_largest_init_container() -> None:
    p = pod("a", cpu="500m")
    p["spec"]["containers"].append({"name": "d", "resources": {"requests": {"cpu": "250m"}}})
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]
    assert pod_requests(p)["cpu"] == 2
    assert pod_requests(p)["pods"] == 1


def test_resources_count_the_pods_already_bound() -> None:
    n = node("n1", cpu="4")
    assert fit(pod("new", cpu="2"), n, [n], [pod("a", cpu="2", on="n1")]) is None
    reason = fit(pod("new", cpu="2"), n, [n], [pod("a", cpu="3", on="n1")])
    assert reason == "node n1 has not enough cpu left"
    # finished pods free their requests; pods bound elsewhere do not count
    done = pod("a", cpu="3", on="n1")
    done["status"]["phase"] = "Succeeded"
    assert fit(pod("new", cpu="2"), n, [n], [done, pod("b", cpu="4", on="n2")]) is None
    assert "pods left" in (fit(pod("new"), node("n1", pods="1"), [n], [pod("a", on="n1")]) or "")
    storage = pod("x")
    storage["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "1Gi"
    assert fit(storage, n, [n], []) == "node n1 has not enough ephemeral-storage left"  # the node lists none


def test_a_node_not_ready_or_cordoned_takes_no_pods() -> None:
    assert fit(pod("p"), node("n1", ready=False), [], []) == "node n1 is not Ready"
    cordoned = node("n1")
    cordoned["spec"]["unschedulable"] = True
    assert fit(pod("p"), cordoned, [], []) == "node n1 is cordoned"


def test_taints_need_a_toleration_including_disrupted_and_unregistered() -> None:
    for taint in (DISRUPTED, UNREGISTERED):
        n = node("n1", taints=[taint])
        assert "karpenter.sh/" in (fit(pod("p"), n, [n], []) or "")
    n = node("n1", taints=[DISRUPTED, {"key": "gpu", "value": "yes", "effect": "PreferNoSchedule"}])
    tolerating = pod("p", tolerations=[{"key": "karpenter.sh/disrupted", "operator": "Exists"}])
    assert fit(tolerating, n, [n], []) is None
    wrong_value = pod("p", tolerations=[{"key": "team", "operator": "Equal", "value": "b", "effect": "NoSchedule"}])
    team = node("n1", taints=[{"key": "team", "value": "a", "effect": "NoSchedule"}])
    assert fit(wrong_value, team, [team], []) is not None


def test_node_selector_and_required_node_affinity() -> None:
    n = node("n1", labels={"karpenter.sh/capacity-type": "on-demand", "gen": "6"})
    assert fit(pod("p", nodeSelector={"karpenter.sh/capacity-type": "on-demand"}), n, [n], []) is None
    assert fit(pod("p", nodeSelector={"karpenter.sh/capacity-type": "spot"}), n, [n], []) == (
        "node n1 does not match nodeSelector karpenter.sh/capacity-type=spot"
    )

    def affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
                    }
                }
            }
        }

    gt5 = [{"key": "gen", "operator": "Gt", "values": ["5"]}]
    spot = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]
    no_gpu = [{"key": "gpu", "operator": "DoesNotExist"}]
    assert fit(pod("p", **affinity(gt5 + no_gpu)), n, [n], []) is None
    assert fit(pod("p", **affinity(spot)), n, [n], []) is not None
    assert fit(pod("p", **affinity(spot, gt5)), n, [n], []) is None  # terms are ORed
    lt5 = [{"key": "gen", "operator": "Lt", "values": ["5"]}]
    assert fit(pod("p", **affinity(lt5)), n, [n], []) is not None


def test_required_pod_anti_affinity_on_hostname_both_ways() -> None:
    n1, n2 = node("n1"), node("n2")
    nodes = [n1, n2]
    spread = pod("w2", affinity=hostname_term("podAntiAffinity", "web"))
    bound = [pod("w1", on="n1")]
    assert (
        fit(spread, n1, nodes, bound) == "node n1 breaks the pod's required pod anti-affinity on kubernetes.io/hostname"
    )
    assert fit(spread, n2, nodes, bound) is None
    # an existing pod's anti-affinity keeps the newcomer away too
    guard = pod("db", app="db", on="n1", affinity=hostname_term("podAntiAffinity", "web"))
    assert "anti-affinity of db" in (fit(pod("w3"), n1, nodes, [guard]) or "")
    assert fit(pod("w3"), n2, nodes, [guard]) is None


def test_required_pod_affinity_follows_its_peers_or_goes_anywhere_first() -> None:
    n1, n2 = node("n1"), node("n2")
    together: dict[str, Any] = {"affinity": hostname_term("podAffinity", "web")}
    assert fit(pod("w1", **together), n2, [n1, n2], []) is None  # no peer yet: anywhere
    assert fit(pod("w2", **together), n1, [n1, n2], [pod("w1", on="n1")]) is None
    assert "pod affinity" in (fit(pod("w2", **together), n2, [n1, n2], [pod("w1", on="n1")]) or "")
    # zone topology: a peer in the same zone is enough
    zonal: dict[str, Any] = {
        "affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "topology.kubernetes.io/zone"}
                ]
            }
        }
    }
    assert fit(pod("w", **zonal), n2, [n1, n2], [pod("d", app="db", on="n1")]) is None
