"""Fixtures for the sandbox tests: fake AWS credentials, moto in-process with Step Functions executing,
the sandbox world, and the real control plane with Karpenter's CRDs (``kube_server``: the real API server behind
its fault proxy, reset before each test)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from nodeflow.kube.client import KubeClient
from sandbox.aws import MOCK_CONFIG, AwsWorld, Clients, build_world
from sandbox.controlplane.facade import RealKubeAPI

REGION = "us-east-1"
CLUSTER = "demo"


@pytest.fixture
def clients(aws_env: None, shared_clients: Clients) -> Iterator[Clients]:
    with mock_aws(config=MOCK_CONFIG):
        yield shared_clients


@pytest.fixture
def world(clients: Clients) -> AwsWorld:
    return build_world(clients, cluster_name=CLUSTER, region=REGION)


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:
    return real_kube


@pytest.fixture
def kube(kube_server: RealKubeAPI) -> Iterator[KubeClient]:
    api: Any = kube_server.api_client()
    try:
        yield KubeClient(api)
    finally:
        api.close()
