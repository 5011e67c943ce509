"""The provisioning path for real: moto (Step Functions executing the real launch.asl.json, Lambda
tasks dispatched to our handlers in-process), the real control plane (kube-apiserver and etcd with Karpenter's
CRDs, the controller-manager, kube-scheduler: ``kube_server`` is ``real_kube``), and simulated kubelets turning moto
instances into Nodes. Pending pods are a real ReplicaSet's that kube-scheduler found no node for (``pending``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.aws import MOCK_CONFIG, Clients
from sandbox.controlplane.facade import RealKubeAPI
from sandbox.nodeflow import LocalNodeflow
from tests.realk8s.workloads import replica_set, unschedulable

ROOT = Path(__file__).resolve().parents[3]
REGION = "us-east-1"


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


def demo_node_pools() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "examples/demo/nodepools.yaml").read_text()) if d]


def pending(
    local: LocalNodeflow,
    name: str,
    replicas: int,
    cpu: str = "1",
    memory: str = "2Gi",
    *,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    **spec: Any,
) -> list[str]:
    """A ReplicaSet of ``replicas`` pods of ``name`` (``requests``/``limits``: more container resources, ``spec``:
    more pod spec fields) whose pods kube-scheduler found no node for (waited for); their keys."""
    workload = replica_set(name, replicas, cpu, memory, **spec)
    resources = workload["spec"]["template"]["spec"]["containers"][0].setdefault("resources", {})
    resources.setdefault("requests", {}).update(requests or {})
    if limits:
        resources["limits"] = dict(limits)
    local.apply([workload])
    return unschedulable(local.kube_server, name, replicas)


@pytest.fixture
def make_local(
    aws_env: None, kube_server: RealKubeAPI, shared_clients: Clients
) -> Iterator[Callable[..., LocalNodeflow]]:
    """``make_local(**options)``: a started LocalNodeflow with the demo NodePools applied."""
    from moto import mock_aws

    started: list[LocalNodeflow] = []
    with mock_aws(config=MOCK_CONFIG):
        kube_server.reset()

        def make(**options: Any) -> LocalNodeflow:
            local = LocalNodeflow(shared_clients, kube_server, **options).start()
            started.append(local)
            local.apply(demo_node_pools())
            return local

        try:
            yield make
        finally:
            for local in started:
                local.stop()


@pytest.fixture
def local(make_local: Callable[..., LocalNodeflow]) -> LocalNodeflow:
    return make_local()
