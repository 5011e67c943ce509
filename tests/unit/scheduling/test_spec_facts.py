"""build_input converts a pod spec's scheduling facts once per distinct content, also when the pods were parsed
apart (a LIST gives every pod its own PodSpec object): the solver input must be exactly what converting each pod
on its own gives, and specs that differ in any field the facts read must not share them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeflow.api.core import Pod
from nodeflow.plan.pods import _Converter


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "containers": [{"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
    }
    base.update(spec)
    return {"metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}}, "spec": base}


_VARIANTS: list[dict[str, Any]] = [
    {},
    {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}}}]},
    {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}}}]},
    {
        "containers": [
            {"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "side", "resources": {"requests": {"cpu": "100m"}}},
        ]
    },
    {
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "2"}}}],
    },
    {
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "2"}}, "restartPolicy": "Always"}],
    },
    {"overhead": {"cpu": "250m"}},
    {"nodeSelector": {"kubernetes.io/arch": "arm64"}},
    {"nodeSelector": {"kubernetes.io/arch": "amd64"}},
    {"nodeSelector": {"kubernetes.io/hostname": "n1"}},  # restricted: an error for pending pods
    {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    {"tolerations": [{"key": "gpu", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]},
    {"tolerations": [{"key": "gpu", "operator": "Equal", "value": "b", "effect": "NoSchedule"}]},
    {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
                            ]
                        }
                    ]
                }
            }
        }
    },
    {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}
                            ]
                        }
                    ]
                }
            }
        }
    },
    {
        "containers": [
            {
                "name": "app",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                "ports": [{"containerPort": 80, "hostPort": 8080}],
            }
        ]
    },
    {
        "containers": [
            {
                "name": "app",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                "ports": [{"containerPort": 80, "hostPort": 8081}],
            }
        ]
    },
    {
        "hostNetwork": True,
        "containers": [
            {
                "name": "app",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                "ports": [{"containerPort": 80}],
            }
        ],
    },
]


def _pods() -> list[Pod]:
    """Each variant three times, every pod parsed on its own (no shared objects), interleaved."""
    return [
        Pod.model_validate(copy.deepcopy(_pod(f"p{copy_index}-{i}", **variant)))
        for copy_index in range(3)
        for i, variant in enumerate(_VARIANTS)
    ]


@pytest.mark.parametrize("pending", [True, False])
def test_shared_facts_give_the_input_of_converting_each_pod_alone(pending: bool) -> None:
    pods = _pods()
    shared = _Converter()
    together = [shared.pod(p, pending=pending) for p in pods]
    alone = [_Converter().pod(p, pending=pending) for p in pods]
    assert together == alone
    # One conversion per distinct variant: the copies reuse the first one's facts, no two variants share.
    n = len(_VARIANTS)
    assert len({id(shared.facts(p.spec)) for p in pods}) == n
    for i in range(n):
        assert shared.facts(pods[i].spec) is shared.facts(pods[n + i].spec) is shared.facts(pods[2 * n + i].spec)
    assert any(t.error for t in together) == pending  # the restricted selector is an error for pending pods only
