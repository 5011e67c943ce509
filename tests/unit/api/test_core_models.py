"""core/v1, apps/v1, batch/v1, policy/v1 and storage/v1 models: validation, request math, expansion."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import ValidationError

from nodeflow.api.core import (
    DaemonSet,
    Deployment,
    HostPort,
    Job,
    LabelSelector,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PodSpec,
    ReplicaSet,
    StatefulSet,
    StorageClass,
    daemon_set_pod,
    expand_workload,
    statefulset_claims,
    workload_pod_count,
)
from nodeflow.api.errors import format_validation_error

GI = 2**30 * 1000  # 1Gi in milli-units


def pod(spec: dict[str, Any], name: str = "p", **meta: Any) -> Pod:
    return Pod.model_validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": spec})


def container(name: str, requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "busybox", **extra}
    if requests is not None:
        out.setdefault("resources", {})["requests"] = requests
    return out


def owner_kind(p: Pod) -> str | None:
    owner = p.owner()
    return owner.kind if owner is not None else None


def errors_of(model: Any, data: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return format_validation_error(info.value)


def template(labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    labels = labels or {"app": "web"}
    return {
        "metadata": {"labels": labels},
        "spec": {"containers": [container("app", {"cpu": "250m", "memory": "512Mi"})], **spec},
    }


def deployment(name: str = "web", replicas: int | None = 3, **extra: Any) -> Deployment:
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": "web"}}, "template": template()}
    if replicas is not None:
        spec["replicas"] = replicas
    return Deployment.model_validate(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, **extra}, "spec": spec}
    )


# ---------------------------------------------------------------------------------------------
# Parsing and validation


class TestPodParsing:
    def test_full_pod_round_trip_with_aliases_and_unknown_fields(self) -> None:
        p = pod(
            {
                "nodeSelector": {"kubernetes.io/arch": "arm64"},
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "topology.kubernetes.io/zone",
                                            "operator": "In",
                                            "values": ["a"],
                                        }
                                    ],
                                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                                }
                            ]
                        },
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 10,
                                "preference": {
                                    "matchExpressions": [
                                        {
                                            "key": "karpenter.sh/capacity-type",
                                            "operator": "In",
                                            "values": ["spot"],
                                        }
                                    ]
                                },
                            }
                        ],
                    },
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": {"app": "web"}},
                                "topologyKey": "kubernetes.io/hostname",
                                "matchLabelKeys": ["pod-template-hash"],
                            }
                        ],
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 50,
                                "podAffinityTerm": {
                                    "labelSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                                    "namespaceSelector": {},
                                    "topologyKey": "topology.kubernetes.io/zone",
                                },
                            }
                        ],
                    },
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": {"app": "db"}},
                                "namespaces": ["data"],
                                "topologyKey": "topology.kubernetes.io/zone",
                            }
                        ]
                    },
                },
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "minDomains": 3,
                        "nodeAffinityPolicy": "Ignore",
                        "nodeTaintsPolicy": "Honor",
                        "matchLabelKeys": ["pod-template-hash"],
                    }
                ],
                "containers": [
                    container(
                        "app",
                        {"cpu": 1, "memory": "1Gi"},
                        env=[{"name": "X", "value": "1"}],
                        livenessProbe={"httpGet": {"port": 80}},
                        ports=[{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}],
                    )
                ],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                    {
                        "name": "scratch",
                        "ephemeral": {
                            "volumeClaimTemplate": {
                                "spec": {
                                    "accessModes": ["ReadWriteOnce"],
                                    "storageClassName": "gp3",
                                    "resources": {"requests": {"storage": "10Gi"}},
                                }
                            }
                        },
                    },
                ],
                "priorityClassName": "high",
                "priority": 1000,
                "preemptionPolicy": "Never",
                "terminationGracePeriodSeconds": 60,
                "serviceAccountName": "ignored",
            },
            namespace="prod",
            labels={"app": "web"},
        )
        spec = p.spec
        assert p.key == "prod/p"
        assert spec.node_selector == {"kubernetes.io/arch": "arm64"}
        assert spec.affinity is not None
        node_affinity = spec.affinity.node_affinity
        assert node_affinity is not None
        assert node_affinity.required is not None
        assert node_affinity.required.node_selector_terms[0].match_fields[0].values == ["n1"]
        assert node_affinity.preferred[0].weight == 10
        anti = spec.affinity.pod_anti_affinity
        assert anti is not None
        assert anti.required[0].match_label_keys == ("pod-template-hash",)
        assert anti.preferred[0].pod_affinity_term.namespace_selector == LabelSelector()
        assert spec.affinity.pod_affinity is not None
        assert spec.affinity.pod_affinity.required[0].namespaces == ("data",)
        tsc = spec.topology_spread_constraints[0]
        assert (tsc.min_domains, tsc.honors_node_affinity, tsc.honors_node_taints) == (3, False, True)
        assert spec.containers[0].resources.requests == {"cpu": "1", "memory": "1Gi"}
        assert spec.containers[0].ports[0].host_ip == "10.0.0.1"
        assert [v.name for v in spec.volumes] == ["data", "cfg", "scratch"]
        assert p.claim_names() == ["data-0", "p-scratch"]
        assert (spec.priority_class_name, spec.priority, spec.preemption_policy) == ("high", 1000, "Never")
        assert spec.termination_grace_period_seconds == 60
        assert spec.scheduler_name == "default-scheduler"
        dumped = p.model_dump(by_alias=True, exclude_none=True)
        assert dumped["spec"]["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"
        assert dumped["spec"]["containers"][0]["ports"][0]["hostIP"] == "10.0.0.1"
        assert "env" not in dumped["spec"]["containers"][0]
        assert Pod.model_validate(dumped) == p

    def test_snake_case_names_are_accepted(self) -> None:
        p = Pod(metadata={"name": "x"}, spec={"node_selector": {"a": "b"}, "containers": [{"name": "c"}]})
        assert p.spec.node_selector == {"a": "b"}
        assert p.key == "default/x"

    def test_models_are_frozen(self) -> None:
        p = pod({"containers": [container("c")]})
        with pytest.raises(ValidationError):
            p.spec.node_name = "n"  # type: ignore[misc]

    def test_status(self) -> None:
        p = Pod.model_validate(
            {
                "metadata": {"name": "p"},
                "spec": {},
                "status": {
                    "phase": "Pending",
                    "nominatedNodeName": "n1",
                    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                },
            }
        )
        assert p.status.nominated_node_name == "n1"
        cond = p.status.condition("PodScheduled")
        assert cond is not None
        assert cond.reason == "Unschedulable"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"containers": [container("c", {"cpu": "lots"})]},
            "spec.containers[0].resources.requests.cpu: 'lots' is not a valid quantity",
        ),
        (
            {"containers": [container("c", {"memory": "-1Gi"})]},
            "spec.containers[0].resources.requests.memory: quantity '-1Gi' must be greater than or equal to 0",
        ),
        (
            {"containers": [container("c", {"cpu": "2"}, resources={"requests": {"cpu": 2}, "limits": {"cpu": 1}})]},
            "spec.containers[0].resources.requests.cpu: must be less than or equal to the cpu limit of 1",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]
                        }
                    }
                }
            },
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
            ".matchExpressions[0].operator: Input should be",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
                }
            },
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: "
            "must have at least one term",
        ),
        (
            {
                "affinity": {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]},
                                "topologyKey": "z",
                            }
                        ]
                    }
                }
            },
            "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
            ".matchExpressions[0].values: operator In requires at least one value",
        ),
        (
            {
                "affinity": {
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": ""}]}
                }
            },
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: "
            "topologyKey must not be empty",
        ),
        (
            {
                "affinity": {
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 101, "podAffinityTerm": {"topologyKey": "z"}}
                        ]
                    }
                }
            },
            "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: "
            "Input should be less than or equal to 100",
        ),
        (
            {"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]},
            "spec.topologySpreadConstraints[0].maxSkew: Input should be greater than or equal to 1",
        ),
        (
            {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Sometimes"}]},
            "spec.topologySpreadConstraints[0].whenUnsatisfiable: Input should be",
        ),
        (
            {
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}
                ]
            },
            "spec.topologySpreadConstraints[0].minDomains: may only be set when whenUnsatisfiable is DoNotSchedule",
        ),
        (
            {"tolerations": [{"operator": "Equal", "value": "x"}]},
            "spec.tolerations[0].operator: operator must be Exists when key is empty",
        ),
        (
            {"containers": [container("c", ports=[{"containerPort": 80, "protocol": "HTTP"}])]},
            "spec.containers[0].ports[0].protocol: Input should be 'TCP', 'UDP' or 'SCTP'",
        ),
        (
            {"containers": [container("c", ports=[{"containerPort": 80, "hostPort": 70000}])]},
            "spec.containers[0].ports[0].hostPort: Input should be less than or equal to 65535",
        ),
        (
            {"containers": [container("c"), container("c")]},
            "spec.containers[1].name: duplicate container name 'c'",
        ),
        (
            {"containers": [container("c", restartPolicy="Always")]},
            "spec.containers[0].restartPolicy: only init containers may set restartPolicy",
        ),
        (
            {"initContainers": [container("i", restartPolicy="OnFailure")]},
            "spec.initContainers[0].restartPolicy: Input should be 'Always'",
        ),
        ({"overhead": {"cpu": "1q"}}, "spec.overhead.cpu: '1q' is not a valid quantity"),
        ({"nodeSelector": {"bad key!": "x"}}, "spec.nodeSelector: key 'bad key!'"),
        (
            {"volumes": [{"name": "v", "persistentVolumeClaim": {}}]},
            "spec.volumes[0].persistentVolumeClaim.claimName",
        ),
        ({"preemptionPolicy": "Sometimes"}, "spec.preemptionPolicy: Input should be"),
    ],
)
def test_pod_validation_errors_name_the_field(spec: dict[str, Any], expected: str) -> None:
    errors = errors_of(Pod, {"metadata": {"name": "p"}, "spec": spec})
    assert any(line.startswith(expected) for line in errors), errors


# ---------------------------------------------------------------------------------------------
# Effective requests


class TestEffectiveRequests:
    def test_sums_containers_and_counts_one_pod(self) -> None:
        p = pod({"containers": [container("a", {"cpu": "250m", "memory": "1Gi"}), container("b", {"cpu": 1})]})
        assert p.effective_requests() == {"cpu": 1250, "memory": GI, "pods": 1000}

    def test_empty_pod_requests_only_the_pod(self) -> None:
        assert pod({}).effective_requests() == {"pods": 1000}

    def test_limits_only_defaults_requests(self) -> None:
        p = pod(
            {
                "containers": [
                    {
                        "name": "a",
                        "resources": {"limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 1}},
                    },
                    {
                        "name": "b",
                        "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "2Gi"}},
                    },
                ]
            }
        )
        # a: requests = limits; b: cpu request kept, memory defaults to its limit
        assert p.effective_requests() == {"cpu": 2100, "memory": 3 * GI, "nvidia.com/gpu": 1000, "pods": 1000}

    def test_init_container_larger_than_containers_wins(self) -> None:
        p = pod(
            {
                "initContainers": [container("init", {"cpu": "2", "memory": "256Mi"})],
                "containers": [container("app", {"cpu": "500m", "memory": "1Gi"})],
            }
        )
        assert p.effective_requests() == {"cpu": 2000, "memory": GI, "pods": 1000}

    def test_sidecars_add_to_containers_and_to_later_init_containers(self) -> None:
        # Kubernetes PodRequests: sidecars run alongside the containers and every later init container.
        p = pod(
            {
                "initContainers": [
                    container("before", {"cpu": "1500m"}),  # runs alone: 1500
                    container("sidecar1", {"cpu": "300m"}, restartPolicy="Always"),
                    container("after", {"cpu": "1"}),  # 1000 + 300 = 1300
                    container("sidecar2", {"cpu": "200m", "memory": "128Mi"}, restartPolicy="Always"),
                    container("last", {"cpu": "1400m"}),  # 1400 + 300 + 200 = 1900
                ],
                "containers": [container("app", {"cpu": "1", "memory": "1Gi"})],  # 1000 + 500 = 1500
            }
        )
        assert p.effective_requests() == {
            "cpu": 1900,
            "memory": GI + 128 * 2**20 * 1000,
            "pods": 1000,
        }

    def test_sidecar_sum_dominates_when_containers_are_large(self) -> None:
        p = pod(
            {
                "initContainers": [
                    container("sidecar", {"cpu": "500m"}, restartPolicy="Always"),
                    container("init", {"cpu": "1"}),
                ],
                "containers": [container("app", {"cpu": "2"})],
            }
        )
        assert p.effective_requests()["cpu"] == 2500

    def test_overhead_is_added_after_the_max(self) -> None:
        p = pod(
            {
                "initContainers": [container("init", {"cpu": "3"})],
                "containers": [container("app", {"cpu": "1"})],
                "overhead": {"cpu": "250m", "memory": "120Mi"},
            }
        )
        assert p.effective_requests() == {"cpu": 3250, "memory": 120 * 2**20 * 1000, "pods": 1000}

    def test_result_is_a_fresh_dict_and_cache_follows_replacement(self) -> None:
        p = pod({"containers": [container("a", {"cpu": "1"})]})
        first = p.effective_requests()
        first["cpu"] = 0
        assert p.effective_requests()["cpu"] == 1000
        other = p.spec.model_copy(
            update={"containers": (PodSpec.model_validate({"containers": [container("b", {"cpu": 3})]}).containers)}
        )
        assert other.effective_requests()["cpu"] == 3000
        assert p.effective_requests()["cpu"] == 1000

    def test_cache_does_not_affect_equality_hash_or_dump(self) -> None:
        spec = {"containers": [container("a", {"cpu": "1"})]}
        computed, fresh = pod(spec), pod(spec)
        computed.effective_requests()
        assert computed == fresh
        assert computed.spec == fresh.spec
        assert computed.model_dump() == fresh.model_dump()
        assert pod({"containers": [container("a", {"cpu": "2"})]}) != computed

    def test_fractional_quantities_round_up(self) -> None:
        p = pod({"containers": [container("a", {"cpu": "0.0001", "memory": "1"})]})
        assert p.effective_requests() == {"cpu": 1, "memory": 1000, "pods": 1000}


class TestHostPorts:
    def test_host_ports_default_ip_and_protocol(self) -> None:
        p = pod(
            {
                "initContainers": [
                    container("side", ports=[{"containerPort": 9000, "hostPort": 9000}], restartPolicy="Always")
                ],
                "containers": [
                    container(
                        "a",
                        ports=[
                            {"containerPort": 80, "hostPort": 8080},
                            {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                            {"containerPort": 81},
                            {"containerPort": 80, "hostPort": 8080},
                        ],
                    )
                ],
            }
        )
        assert p.host_ports() == [
            HostPort("0.0.0.0", "TCP", 9000),
            HostPort("0.0.0.0", "TCP", 8080),
            HostPort("10.0.0.1", "UDP", 53),
        ]
        assert p.host_ports()[0] == ("0.0.0.0", "TCP", 9000)

    def test_host_network_binds_container_ports(self) -> None:
        p = pod({"hostNetwork": True, "containers": [container("a", ports=[{"containerPort": 10250}])]})
        assert p.host_ports() == [("0.0.0.0", "TCP", 10250)]


# ---------------------------------------------------------------------------------------------
# Nodes, storage, budgets


def test_node() -> None:
    node = Node.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "ip-10-0-0-1", "labels": {"kubernetes.io/arch": "amd64"}},
            "spec": {
                "providerID": "aws:///us-east-1a/i-0123",
                "unschedulable": True,
                "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
            },
            "status": {
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
                "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": 58},
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"architecture": "amd64", "kubeletVersion": "v1.31.0", "systemUUID": "ec2abc"},
                "images": [{"names": ["x"]}],
            },
        }
    )
    assert node.spec.provider_id == "aws:///us-east-1a/i-0123"
    assert node.spec.unschedulable
    assert node.ready
    assert node.allocatable_milli() == {"cpu": 3920, "memory": 15 * GI, "pods": 58000}
    assert node.status.node_info is not None
    assert node.status.node_info.system_uuid == "ec2abc"
    errors = errors_of(Node, {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "x"}}})
    assert errors[0].startswith("status.allocatable.cpu: 'x' is not a valid quantity")
    errors = errors_of(Node, {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "a", "effect": "Never"}]}})
    assert errors[0].startswith("spec.taints[0].effect:")


def test_storage_models() -> None:
    pvc = PersistentVolumeClaim.model_validate(
        {
            "metadata": {"name": "data", "namespace": "db"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "gp3",
                "volumeName": "pv-1",
                "resources": {"requests": {"storage": "20Gi"}},
            },
            "status": {"phase": "Bound"},
        }
    )
    assert (pvc.key, pvc.spec.storage_class_name, pvc.spec.volume_name) == ("db/data", "gp3", "pv-1")
    pv = PersistentVolume.model_validate(
        {
            "metadata": {"name": "pv-1"},
            "spec": {
                "capacity": {"storage": "20Gi"},
                "storageClassName": "gp3",
                "claimRef": {"namespace": "db", "name": "data"},
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "topology.ebs.csi.aws.com/zone",
                                        "operator": "In",
                                        "values": ["us-east-1a"],
                                    }
                                ]
                            }
                        ]
                    }
                },
            },
        }
    )
    assert pv.spec.claim_ref is not None
    assert pv.spec.claim_ref.name == "data"
    assert pv.spec.node_affinity is not None
    assert pv.spec.node_affinity.required is not None
    sc = StorageClass.model_validate(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "gp3"},
            "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [
                {"matchLabelExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "values": ["us-east-1a"]}]}
            ],
        }
    )
    assert sc.volume_binding_mode == "WaitForFirstConsumer"
    assert sc.allowed_topologies[0].match_label_expressions[0].values == ("us-east-1a",)
    assert (
        StorageClass.model_validate({"metadata": {"name": "x"}, "provisioner": "p"}).volume_binding_mode == "Immediate"
    )
    assert errors_of(StorageClass, {"metadata": {"name": "x"}, "provisioner": "p", "volumeBindingMode": "Later"})[
        0
    ].startswith("volumeBindingMode: Input should be")
    assert errors_of(StorageClass, {"metadata": {"name": "x"}})[0] == "provisioner: required field is missing"
    assert errors_of(
        PersistentVolumeClaim,
        {"metadata": {"name": "x"}, "spec": {"resources": {"requests": {"storage": "big"}}}},
    )[0].startswith("spec.resources.requests.storage: 'big' is not a valid quantity")


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}, None),
        ({"maxUnavailable": "25%"}, None),
        (
            {"minAvailable": 1, "maxUnavailable": 1},
            "spec.maxUnavailable: minAvailable and maxUnavailable cannot both",
        ),
        ({"minAvailable": "half"}, "spec.minAvailable: 'half' must be an integer or a percentage"),
        ({"maxUnavailable": "150%"}, "spec.maxUnavailable: '150%' must be a percentage between 0% and 100%"),
        ({"minAvailable": -1}, "spec.minAvailable: -1 must be greater than or equal to 0"),
    ],
)
def test_pdb(spec: dict[str, Any], error: str | None) -> None:
    data = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"}, "spec": spec}
    if error is None:
        pdb = PodDisruptionBudget.model_validate(data)
        assert pdb.spec.min_available == spec.get("minAvailable")
        assert pdb.spec.max_unavailable == spec.get("maxUnavailable")
    else:
        assert any(line.startswith(error) for line in errors_of(PodDisruptionBudget, data))


def test_label_selector_matching() -> None:
    selector = LabelSelector.model_validate(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "edge"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["b"]},
            ],
        }
    )
    assert selector.matches({"app": "web", "tier": "edge"})
    assert not selector.matches({"app": "web", "tier": "back"})
    assert not selector.matches({"app": "web", "tier": "edge", "canary": "1"})
    assert not selector.matches({"app": "web", "tier": "edge", "zone": "b"})
    assert not selector.matches(None)
    assert LabelSelector().matches({})
    assert LabelSelector().empty


def test_workload_selector_must_match_template() -> None:
    data: dict[str, Any] = {
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "other"}}, "template": template()},
    }
    assert errors_of(Deployment, data) == ["spec.template.metadata.labels: selector does not match template labels"]
    data["spec"]["selector"] = {}
    assert errors_of(Deployment, data)[0].startswith("spec.selector: empty selector is invalid")


# ---------------------------------------------------------------------------------------------
# Workload expansion


class TestExpandWorkload:
    def test_deployment_names_labels_owner_and_phase(self) -> None:
        d = deployment(replicas=5, namespace="shop")
        pods = expand_workload(d)
        assert len(pods) == workload_pod_count(d) == 5
        template_hash = pods[0].labels["pod-template-hash"]
        for p in pods:
            prefix, suffix = p.name.rsplit("-", 1)
            assert prefix == f"web-{template_hash}"
            assert len(suffix) == 5
            assert set(suffix) <= set("bcdfghjklmnpqrstvwxz2456789")
            assert p.metadata.namespace == "shop"
            assert p.labels == {"app": "web", "pod-template-hash": template_hash}
            assert p.status.phase == "Pending"
            owner = p.owner()
            assert owner is not None
            assert (owner.kind, owner.name, owner.controller) == ("ReplicaSet", f"web-{template_hash}", True)
            assert p.spec is d.spec.template.spec  # shared, not re-validated
        assert len({p.name for p in pods}) == 5

    def test_names_are_deterministic_and_depend_on_the_template(self) -> None:
        first = [p.name for p in expand_workload(deployment(replicas=50))]
        assert first == [p.name for p in expand_workload(deployment(replicas=50))]
        assert first[:10] == [p.name for p in expand_workload(deployment(replicas=10))]
        changed = Deployment.model_validate(
            {
                "metadata": {"name": "web"},
                "spec": {"replicas": 1, "template": template(nodeSelector={"kubernetes.io/arch": "arm64"})},
            }
        )
        assert (
            expand_workload(changed)[0].labels["pod-template-hash"]
            != expand_workload(deployment())[0].labels["pod-template-hash"]
        )
        assert [p.name for p in expand_workload(deployment("api", 3))] != first[:3]

    def test_replicas_default_to_one_and_zero_gives_none(self) -> None:
        assert len(expand_workload(deployment(replicas=None))) == 1
        assert expand_workload(deployment(replicas=0)) == []

    def test_replicaset(self) -> None:
        rs = ReplicaSet.model_validate(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": "web-abc"},
                "spec": {"replicas": 2, "template": template()},
            }
        )
        pods = expand_workload(rs)
        assert [p.name.rsplit("-", 1)[0] for p in pods] == ["web-abc", "web-abc"]
        assert owner_kind(pods[0]) == "ReplicaSet"
        assert pods[0].labels == {"app": "web"}

    def test_statefulset_ordinals_labels_and_claims(self) -> None:
        sts = StatefulSet.model_validate(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": "db", "namespace": "data"},
                "spec": {
                    "replicas": 3,
                    "serviceName": "db",
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": template(volumes=[{"name": "cfg", "configMap": {"name": "x"}}]),
                    "volumeClaimTemplates": [
                        {
                            "metadata": {"name": "data"},
                            "spec": {
                                "accessModes": ["ReadWriteOnce"],
                                "storageClassName": "gp3",
                                "resources": {"requests": {"storage": "10Gi"}},
                            },
                        }
                    ],
                },
            }
        )
        pods = expand_workload(sts)
        assert [p.key for p in pods] == ["data/db-0", "data/db-1", "data/db-2"]
        assert pods[2].labels == {
            "app": "web",
            "statefulset.kubernetes.io/pod-name": "db-2",
            "apps.kubernetes.io/pod-index": "2",
        }
        assert pods[1].claim_names() == ["data-db-1"]
        assert [v.name for v in pods[1].spec.volumes] == ["cfg", "data"]
        assert owner_kind(pods[0]) == "StatefulSet"
        assert pods[0].effective_requests() == {"cpu": 250, "memory": 512 * 2**20 * 1000, "pods": 1000}
        claims = statefulset_claims(sts)
        assert [c.key for c in claims] == ["data/data-db-0", "data/data-db-1", "data/data-db-2"]
        assert claims[0].spec.storage_class_name == "gp3"
        assert claims[0].metadata.labels == {"app": "web"}

    @pytest.mark.parametrize(
        ("parallelism", "completions", "count"),
        [(None, None, 1), (4, None, 4), (4, 2, 2), (2, 10, 2), (None, 0, 0), (0, 5, 0)],
    )
    def test_job_pod_count(self, parallelism: int | None, completions: int | None, count: int) -> None:
        spec: dict[str, Any] = {"template": template(restartPolicy="Never")}
        if parallelism is not None:
            spec["parallelism"] = parallelism
        if completions is not None:
            spec["completions"] = completions
        job = Job.model_validate({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch"}, "spec": spec})
        pods = expand_workload(job)
        assert len(pods) == workload_pod_count(job) == count
        for p in pods:
            assert p.name.startswith("batch-")
            assert len(p.name) == len("batch-") + 5
            assert p.labels["batch.kubernetes.io/job-name"] == "batch"
            assert p.labels["job-name"] == "batch"
            assert owner_kind(p) == "Job"

    def test_indexed_job(self) -> None:
        job = Job.model_validate(
            {
                "metadata": {"name": "idx"},
                "spec": {
                    "parallelism": 3,
                    "completions": 3,
                    "completionMode": "Indexed",
                    "template": template(),
                },
            }
        )
        pods = expand_workload(job)
        assert [p.name.rsplit("-", 1)[0] for p in pods] == ["idx-0", "idx-1", "idx-2"]
        assert [p.labels["batch.kubernetes.io/job-completion-index"] for p in pods] == ["0", "1", "2"]

    def test_pod_expands_to_itself_and_daemonset_is_refused(self) -> None:
        p = pod({"containers": [container("c")]})
        assert expand_workload(p) == [p]
        ds = DaemonSet.model_validate(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "agent", "namespace": "kube-system"},
                "spec": {"template": template()},
            }
        )
        with pytest.raises(TypeError, match="daemon_set_pod"):
            expand_workload(ds)  # type: ignore[arg-type]
        daemon = daemon_set_pod(ds)
        assert daemon.metadata.namespace == "kube-system"
        assert owner_kind(daemon) == "DaemonSet"
        assert daemon.effective_requests()["cpu"] == 250

    def test_expanded_pods_dump_and_revalidate(self) -> None:
        p = expand_workload(deployment(replicas=2))[1]
        dumped = p.model_dump(mode="json", by_alias=True, exclude_none=True)
        assert dumped["metadata"]["name"] == p.name
        assert dumped["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert dumped["status"] == {"phase": "Pending", "conditions": []}
        assert Pod.model_validate(dumped) == p

    def test_large_deployment_is_fast_and_unique(self) -> None:
        d = deployment(replicas=100_000)
        start = time.perf_counter()
        pods = expand_workload(d)
        elapsed = time.perf_counter() - start
        assert len(pods) == 100_000
        assert len({p.name for p in pods}) == 100_000
        assert elapsed < 5.0  # generous bound for slow CI; typically ~0.3 s
