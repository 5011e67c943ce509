"""Fixtures shared by the functional tests: fake AWS credentials for moto, the real control plane (one per worker,
started by the first test that asks for it; ``kube_server`` is its ``RealKubeAPI``, reset before each test:
tests/realk8s/README.md), and the metrics the handlers publish."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.aws import Clients
from sandbox.controlplane.facade import RealKubeAPI
from tests.realk8s.fixtures import control_plane, real_kube, real_kube_server  # noqa: F401 (the real control plane)


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
def shared_clients() -> Clients:
    """One set of boto3 clients (static test credentials) for every test's sandbox: moto intercepts them inside each
    test's mock_aws, and creating them is most of the cost of building a world (~10 clients, ~0.3 s of CPU a test).
    Tests hook the handlers' clients (``runtime``), never these."""
    import moto  # noqa: F401 (first: moto's stub joins botocore's handlers at import, and a session made before has none)

    return Clients.fake(region="us-east-1")


@pytest.fixture
def kube_server(real_kube: RealKubeAPI) -> RealKubeAPI:  # noqa: F811 (the fixture, by name)
    """The Kubernetes side of every functional test: the real control plane."""
    return real_kube


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """The handlers' Powertools metrics as they add them (name -> the latest value); POWERTOOLS_METRICS_DISABLED
    keeps them from being printed."""
    from nodeflow.handlers.common import metrics

    seen: dict[str, float] = {}
    real = metrics.add_metric

    def add_metric(name: str, unit: Any, value: float, **kw: Any) -> None:
        seen[name] = value
        real(name=name, unit=unit, value=value, **kw)

    monkeypatch.setattr(metrics, "add_metric", add_metric)
    return seen
