"""Fixtures shared by the functional tests: fake AWS credentials for moto, and one test Kubernetes API
server with Karpenter's CRDs per session (tests reset it before use)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.kubeapi import KubeAPIServer


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)


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
