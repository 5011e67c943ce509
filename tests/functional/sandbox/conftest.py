"""Fixtures for the sandbox tests: fake AWS credentials, moto in-process with Step Functions executing,
the sandbox world, and the test Kubernetes API server with Karpenter's CRDs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from moto import mock_aws

from nodeflow.kube.client import KubeClient
from sandbox.aws import MOCK_CONFIG, AwsWorld, Clients, build_world

if TYPE_CHECKING:
    from tests.kubeapi import KubeAPIServer

REGION = "us-east-1"
CLUSTER = "demo"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }.items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="session")
def shared_clients() -> Clients:
    """One set of boto3 clients for every test: moto (imported above) intercepts them inside each test's mock_aws,
    and creating clients is most of the cost of building a world."""
    return Clients.fake(region=REGION)


@pytest.fixture
def clients(aws_env: None, shared_clients: Clients) -> Iterator[Clients]:
    with mock_aws(config=MOCK_CONFIG):
        yield shared_clients


@pytest.fixture
def world(clients: Clients) -> AwsWorld:
    return build_world(clients, cluster_name=CLUSTER, region=REGION)


@pytest.fixture(scope="session")
def kube_server() -> Iterator[KubeAPIServer]:
    from tests.kubeapi import KubeAPIServer
    from tests.kubeapi.crds import karpenter_crds

    server = KubeAPIServer().start()
    for crd in karpenter_crds():
        server.register_crd(crd)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube(kube_server: KubeAPIServer) -> Iterator[KubeClient]:
    kube_server.reset()
    api: Any = kube_server.api_client()
    try:
        yield KubeClient(api)
    finally:
        api.close()
